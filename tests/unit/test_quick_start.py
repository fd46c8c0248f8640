"""What an unchanged build decides without the engine's SDK or rich: the engine's version and an
image's inspection asked over the local socket (torchbake.adapters.engine.quick_get), and a note
written as rich would write it where no style can show (torchbake.core.output.plain). Against
fake engines on unix sockets of the test's own; the real engine answers them in every e2e test,
and tests/e2e/test_as_typed.py holds an unchanged build to importing neither library."""

from __future__ import annotations

import gc
import io
import json
import socket
import threading
import time
import warnings

import pytest

from torchbake.adapters.engine import DockerClient
from torchbake.core import output, references
from torchbake.core.errors import EngineError


def fake_engine(path, answers: dict[str, tuple[int, bytes]], asked: list[str]) -> None:
    """A unix-socket HTTP server answering each GET path from ``answers`` (status, body)."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(8)

    def serve():
        while True:
            connection, _ = server.accept()
            with connection:
                request = connection.recv(65536).decode()
                target = request.split(" ", 2)[1]
                asked.append(target)
                status, body = answers.get(target, (404, b'{"message": "No such image"}'))
                connection.sendall(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                                   f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)

    threading.Thread(target=serve, daemon=True).start()


def client_of(path, timeout: float = 5) -> DockerClient:
    return DockerClient(binary="docker", version="26.1.5", build_mode="buildx",
                        environ={"DOCKER_HOST": f"unix://{path}"}, timeout=timeout)


def test_an_inspection_is_asked_over_the_socket_quoted_as_the_sdk_quotes_it(tmp_path):
    asked: list[str] = []
    info = {"Id": "sha256:" + "a" * 64, "RepoTags": ["reg:5000/team/img:1 2"]}
    fake_engine(tmp_path / "e.sock", {"/images/reg:5000/team/img%3A1%202/json".replace("%3A", ":"):
                                      (200, json.dumps(info).encode()),
                                      "/version": (200, b'{"Version": "26.1.5"}')}, asked)
    client = client_of(tmp_path / "e.sock")
    assert client.inspect_image("reg:5000/team/img:1 2") == info
    assert client.inspect_image("absent:1") is None  # a 404 is "no such image"
    assert client.check_engine() == "26.1.5"
    assert asked == ["/images/reg:5000/team/img:1%202/json", "/images/absent:1/json", "/version"]


def test_a_hung_engine_is_the_engine_timeouts_error_once_not_twice(tmp_path):
    server = socket.socket(socket.AF_UNIX)  # accepts and never answers
    server.bind(str(tmp_path / "hung.sock"))
    server.listen(8)
    started = time.monotonic()
    with pytest.raises(EngineError, match=r"did not answer `docker image inspect x:1` within 1 s"):
        client_of(tmp_path / "hung.sock", timeout=1).inspect_image("x:1")
    assert time.monotonic() - started < 1.9  # not the SDK's wait again after the quick one's
    server.close()


def test_no_engine_at_the_socket_is_the_sdks_own_error(tmp_path):
    with pytest.raises(EngineError, match="No Docker engine answers at unix://"):
        client_of(tmp_path / "none.sock").inspect_image("x:1")
    with warnings.catch_warnings():  # the SDK leaves its socket that could not connect to the collector
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.mark.parametrize(("reference", "parts"), [
    ("a", ("a", "", "")), ("a:b", ("a", "b", "")), ("reg:5000/a", ("reg:5000/a", "", "")),
    ("reg:5000/a:t", ("reg:5000/a", "t", "")), ("a@sha256:ab", ("a", "", "sha256:ab")),
    ("r:1/a/b:c@sha256:1", ("r:1/a/b", "c", "sha256:1")),
])
def test_references_split_into_name_tag_and_digest_a_port_being_no_tag(reference, parts):
    import docker.utils

    name, tag, digest = references.split(reference)
    assert (name, tag, digest) == parts
    # the Engine API SDK's rule (its split: the repository with its tag where a digest follows)
    assert docker.utils.parse_repository_tag(reference) == (
        (f"{name}:{tag}" if tag else name, digest) if digest else (name, tag or None))


NOTES = [("plain",), (("Built", "bold green"), " x:1 ", ("y", "dim")), ("a\tb\tccc\td\n\tx",),
         ("line\r\nnext\x07\x08\x0b\x0c end  ",), ("",), ("[bold]not markup[/] :smile: http://x",),
         ("multi\n\nblank\n",), ("ünï code 中文 x",)]


@pytest.mark.parametrize("parts", NOTES)
def test_a_note_without_rich_is_what_rich_writes_where_no_style_shows(parts):
    written = io.StringIO()
    output.console(file=written).print(output.styled(*parts))
    assert output.plain(*parts) == written.getvalue()


def test_a_tab_among_wide_characters_is_left_to_rich():
    assert output.plain("ünï\tcode 中文\tx") is None


def test_a_note_on_no_terminal_imports_no_rich_and_is_redacted(capsys, monkeypatch):
    import sys

    for name in output._COLOUR_FORCED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setitem(sys.modules, "rich.console", None)  # an import of it would fail
    output.channel().say(("Built", "bold"), " https://user:hunter2@example.com/x")
    assert capsys.readouterr().out == "Built https://user:***@example.com/x\n"
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich would colour it: rich writes it
    with pytest.raises(ImportError):
        output.channel().say("x")


def test_a_note_with_a_rich_text_in_it_is_left_to_rich():
    assert output.plain("a ", output.styled(("b", "bold"))) is None


def test_a_lazy_module_is_imported_by_one_thread_while_the_others_wait(monkeypatch):
    """build-all's workers reach the SDK at the same moment (run 33: "module 'docker' has no
    attribute 'errors'" in every cell once nothing imported it before them)."""
    from torchbake.core import lazy

    importing, most = [0], [0]

    def slow_import(name):
        importing[0] += 1
        most[0] = max(most[0], importing[0])
        time.sleep(0.05)
        importing[0] -= 1
        return json

    monkeypatch.setattr(lazy.importlib, "import_module", slow_import)
    module = lazy.LazyModule("json", "json.decoder")
    barrier = threading.Barrier(4)

    def use():
        barrier.wait()
        assert module.dumps

    threads = [threading.Thread(target=use) for _ in range(4)]
    [thread.start() for thread in threads]
    [thread.join() for thread in threads]
    assert most[0] == 1


def test_no_such_object_where_that_is_an_error_is_the_sdks_error_not_a_marker(tmp_path):
    """call() with no ``missing``: a 404 over the socket goes to the SDK, which raises its error."""
    fake_engine(tmp_path / "e.sock", {}, [])  # every path: 404
    with pytest.raises(EngineError, match="404 Client Error"):
        client_of(tmp_path / "e.sock").check_engine()
