"""Engine calls through the docker SDK, with a fake low-level client: typed errors become
torchbake's, a push reports progress and its digest."""

from __future__ import annotations

import docker.errors
import pytest
import requests

from torchbake.adapters import engine
from torchbake.adapters.engine import DockerClient
from torchbake.core.errors import EngineError, RegistryError


class FakeAPI:
    def __init__(self, **answers):
        self.answers = answers

    def __getattr__(self, name):
        answer = self.answers[name]

        def call(*args, **kwargs):
            if isinstance(answer, BaseException):
                raise answer
            return answer(*args, **kwargs) if callable(answer) else answer

        return call


def client_with(api: FakeAPI) -> DockerClient:
    class Client(DockerClient):
        @property
        def api(self):
            return api

    # an engine on no local socket: every call goes to the SDK's client, here the fake
    return Client(binary="/usr/bin/docker", version="26.1.5", build_mode="buildx", timeout=3,
                  environ={"DOCKER_HOST": "tcp://engine.invalid:2375"})


def test_not_found_is_none_and_other_failures_are_engine_errors():
    response = requests.Response()
    response.status_code = 404
    client = client_with(FakeAPI(inspect_image=docker.errors.NotFound("no such image", response=response)))
    assert client.inspect_image("x:1") is None
    slow = client_with(FakeAPI(inspect_image=requests.exceptions.ReadTimeout("read timed out")))
    with pytest.raises(EngineError, match=r"did not answer `docker image inspect x:1` within 3 s"):
        slow.inspect_image("x:1")
    refused = client_with(FakeAPI(tag=docker.errors.APIError("500 Server Error", explanation="no space left")))
    with pytest.raises(EngineError, match="`docker tag a b:c` failed: no space left"):
        refused.tag("a", "b:c")


def in_turn(*answers):
    """A fake engine call that gives ``answers`` one after another, raising those that are errors."""
    left = list(answers)

    def call(**_kwargs):
        answer = left.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    call.left = left
    return call


def _image_removed_meanwhile() -> docker.errors.NotFound:
    response = requests.Response()
    response.status_code = 404
    return docker.errors.NotFound("404", response=response, explanation="content digest sha256:19df: not found")


# Each listing DockerClient asks again (its _listing): the method, the SDK call, what the engine
# answers when an object goes meanwhile (seen in the suite: `invoke gc` failed on `docker system
# df`), how often it answers so, the listing, and the error a lasting failure gives.
LISTINGS = [
    ("images", "images", _image_removed_meanwhile(), 2, [{"Id": "sha256:1"}],
     "`docker images` failed: content digest sha256:19df: not found"),
    ("disk_usage", "df", docker.errors.APIError("500 Server Error", explanation="failed to retrieve container list:"
                                                " rw layer snapshot not found for container bdb30157afde"),
     1, {"LayersSize": 7}, "`docker system df` failed: failed to retrieve container list"),
]


@pytest.mark.parametrize(("method", "sdk_call", "gone", "times", "listed", "lasting"), LISTINGS,
                         ids=[entry[0] for entry in LISTINGS])
def test_a_listing_that_meets_an_object_removed_meanwhile_is_asked_again(method, sdk_call, gone, times, listed,
                                                                           lasting, monkeypatch):
    pauses: list[float] = []
    monkeypatch.setattr(engine.time, "sleep", pauses.append)
    listing = in_turn(*[gone] * times, listed)
    assert getattr(client_with(FakeAPI(**{sdk_call: listing})), method)() == listed
    assert listing.left == []
    assert pauses == [0.25, 0.5][:times]
    pauses.clear()
    with pytest.raises(EngineError, match=lasting):
        getattr(client_with(FakeAPI(**{sdk_call: gone})), method)()  # not forever
    # over a few seconds: a container being removed lacked its snapshot for five listings back to back
    assert pauses == [0.25, 0.5, 1.0, 2.0]
    refused = client_with(FakeAPI(**{sdk_call: docker.errors.APIError("500 Server Error", explanation="disk I/O error")}))
    with pytest.raises(EngineError, match="disk I/O error"):
        getattr(refused, method)()


def test_push_reports_progress_and_its_digest(tmp_path):
    events = [
        {"status": "Preparing", "id": "l1"},
        {"status": "Pushing", "id": "l1", "progressDetail": {"current": 50, "total": 100}},
        {"status": "Pushing", "id": "l2", "progressDetail": {"current": 10, "total": 300}},
        {"status": "Pushed", "id": "l1"},
        {"status": "Layer already exists", "id": "l2"},
        {"status": "tag: digest: sha256:abc size: 528", "aux": {"Digest": "sha256:abc", "Size": 528}},
    ]
    seen = []
    client = client_with(FakeAPI(push=lambda *a, **k: iter(events)))
    digest = client.push("reg:5000/team/img:tag", tmp_path / "log", lambda done, total: seen.append((done, total)))
    assert digest == "sha256:abc"
    assert seen[0] == (50, 100) and seen[-1] == (400, 400)
    assert (tmp_path / "log").read_text().count("\n") == len(events)
    failing = client_with(FakeAPI(push=lambda *a, **k: iter([{"error": "denied: requested access is refused"}])))
    with pytest.raises(RegistryError, match="Pushing img:1 failed: denied"):
        failing.push("img:1")
