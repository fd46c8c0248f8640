"""The Docker engine, through the docker SDK's Engine API client: every engine call but a
BuildKit build or a terminal session (those are the CLI's, :mod:`torchbake.adapters.docker_cli`),
and but the two an unchanged build makes, asked over this host's socket without the SDK
(:func:`quick_get`).

The engine is found as the CLI finds it: ``DOCKER_HOST`` (unix, tcp with ``DOCKER_TLS_VERIFY`` /
``DOCKER_CERT_PATH``, ssh), else the docker context (``DOCKER_CONTEXT``, or the current one),
else the default socket. Failures are the SDK's typed exceptions, turned into torchbake errors
by :func:`engine_errors`.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import io
import json
import os
import re
import socket
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from torchbake.adapters import command
from torchbake.adapters.docker_cli import DockerCLI
from torchbake.configuration import platforms
from torchbake.core import data, output, references
from torchbake.core.errors import BuildError, EngineError, RegistryError
from torchbake.core.lazy import LazyModule

if TYPE_CHECKING:
    import docker
    import requests
else:  # the SDK is imported at the first engine call, not when the tasks are listed
    docker = LazyModule("docker", "docker.context", "docker.errors", "docker.utils.socket")
    requests = LazyModule("requests")

ENGINE_TIMEOUT = 60.0  # seconds for any engine call that is not a build or a long run
_RAISE = object()  # DockerClient.call: a missing object is an error
_LISTING_ATTEMPTS = 5  # DockerClient._listing: listings asked while objects are removed beside them,
_LISTING_PAUSE = 0.25  # the first pause between two, doubled each time (3.75 s in all)


def marked_json(output: str, mark: str) -> Any:
    """The JSON a probe container printed on the line starting with ``mark`` (its other output
    is the image's own), or None when it printed none."""
    line = next((line for line in output.splitlines() if line.startswith(mark)), None)
    return None if line is None else json.loads(line[len(mark):])


# The image store's race (moby/buildkit#6521, containerd/containerd#3787): an image removed while a
# build unpacks another that shares a layer with it takes the layer's snapshot from under the unpacking.
UNPACK_RACE = re.compile(r"failed to prepare extraction snapshot .*parent snapshot \S+ does not exist")


@dataclass(frozen=True)
class DockerClient(DockerCLI):
    """The CLI torchbake builds with, and the engine it talks to."""

    timeout: float = ENGINE_TIMEOUT  # seconds any engine call but a build may take ([build] engine_timeout)

    # -- engine calls: the Engine API through the docker SDK ---------------------------------
    @property
    def api(self) -> docker.APIClient:
        """The SDK's client for this engine: ``DOCKER_HOST`` (unix, tcp with ``DOCKER_TLS_VERIFY``
        / ``DOCKER_CERT_PATH``, ssh) when set, else the docker context (``DOCKER_CONTEXT``, or
        the current one), as the CLI finds it; made once per client."""
        key = (self.timeout, tuple(sorted((k, v) for k, v in self.environ.items() if k.startswith("DOCKER_"))))
        if key not in _API_CLIENTS:
            with engine_errors("version", self.timeout):  # what connecting asks: a command that exists
                _API_CLIENTS[key] = _sdk_client(self.environ, self.timeout).api
        return _API_CLIENTS[key]

    def call(self, what: str, method: str, *args: Any, missing: Any = _RAISE, limit: float = 0, **kwargs: Any) -> Any:
        """``self.api.<method>(*args, **kwargs)``, failures as torchbake errors naming ``docker
        <what>``, bounded by ``limit`` seconds (0: the engine timeout); ``missing`` is returned
        when the engine has no such object (else that is an error too). The engine's version and
        an image's inspection, asked of an engine on this host's socket, are asked without the SDK
        (:func:`quick_get`)."""
        if method in _QUICK and not kwargs:
            found = quick_get(self.environ, _QUICK[method].format(*(quote(str(arg), safe="/:") for arg in args)),
                              what, limit or self.timeout)
            if found is _NOT_FOUND and missing is not _RAISE:
                return missing
            if found is not None and found is not _NOT_FOUND:
                return found
            # None, or no such object where that is an error: the SDK's call gives the answer or its error
        with engine_errors(what, limit or self.timeout):
            try:
                return getattr(self.api, method)(*args, **kwargs)
            except docker.errors.NotFound:
                if missing is _RAISE:
                    raise
                return missing

    def images(self, *, all: bool = False) -> list[dict]:  # noqa: A002 - the Engine API's name
        """The engine's image list (see :meth:`_listing`)."""
        return self._listing("images", "images", all=all)

    def disk_usage(self) -> dict[str, Any]:
        """``docker system df``: the engine's images, containers and build cache records, with
        their sizes (see :meth:`_listing`)."""
        return self._listing("system df", "df")

    def _listing(self, what: str, method: str, **kwargs: Any) -> Any:
        """A listing of the engine's objects. The containerd image store reads each object's
        content while it lists, so an image or container another client removes meanwhile makes
        the whole listing fail as "not found" (`docker system df`: "rw layer snapshot not found
        for container …", seen beside another test's removal); such a listing is asked again, a
        few times over a few seconds (a container being removed lacked its snapshot for longer
        than five listings back to back), and a lasting failure is raised."""
        for attempt in range(_LISTING_ATTEMPTS - 1):
            try:
                return self.call(what, method, **kwargs)
            except EngineError as exc:
                if not (isinstance(exc.__cause__, docker.errors.NotFound) or "not found" in str(exc.__cause__)):
                    raise
            time.sleep(_LISTING_PAUSE * 2 ** attempt)
        return self.call(what, method, **kwargs)

    def build(self, argv: list[str], env: Mapping[str, str], log_file: Path) -> None:
        """A BuildKit build (see :meth:`DockerCLI.build`); one that failed because the engine
        stopped answering says so, within the engine timeout. One that lost a layer to the image
        store's race (:data:`UNPACK_RACE`) runs once more: its steps are cached by then."""
        for attempt in (1, 2):
            try:
                super().build(argv, env, log_file)
                return
            except BuildError as exc:
                try:
                    self.check_engine()
                except EngineError:
                    raise EngineError(
                        f"The Docker engine stopped answering during the build (log: {log_file}). Start it again"
                        f" ({data.engine_hint()}) and run the same command again; the steps"
                        " that finished come from the layer cache.") from exc
                if attempt == 2 or not UNPACK_RACE.search(str(exc)):  # the build's last lines
                    raise
                output.channel().say("The engine's image store lost a layer while unpacking the image (a race with an"
                                     " image removed beside it: moby/buildkit#6521); building once more, from the"
                                     " cache.")

    def check_engine(self) -> str:
        """The engine's version; a clear error if none answers."""
        return str(self.call("version", "version").get("Version", ""))

    def inspect_image(self, reference: str) -> dict[str, Any] | None:
        return self.call(f"image inspect {reference}", "inspect_image", reference, missing=None)

    def history(self, reference: str) -> list[dict[str, Any]]:
        """The image's steps, newest first (``docker history``: CreatedBy, Size of each)."""
        return self.call(f"image history {reference}", "history", reference, missing=None) or []

    def engine_version(self) -> str:
        """The engine's version (``docker version``'s server part)."""
        return str(self.call("version", "version").get("Version", ""))

    def inspect_container(self, name: str) -> dict[str, Any] | None:
        return self.call(f"container inspect {name}", "inspect_container", name, missing=None)

    def engine_info(self) -> dict[str, Any]:
        """``docker info`` as the Engine API gives it (NCPU, MemTotal, Runtimes, ...)."""
        return self.call("info", "info")

    def tag(self, source: str, target: str) -> None:
        name, tag, _ = references.split(target)
        self.call(f"tag {source} {target}", "tag", source, name, tag or None)

    def remove_image(self, reference: str, *, force: bool = True) -> bool:
        """Remove the image (or the tag); False when there was none. Without ``force`` the engine
        refuses an image a container or a child image uses."""
        return self.call(f"image rm {reference}", "remove_image", reference, force=force, missing=False) is not False

    def pull(self, reference: str) -> str:
        """Pull ``reference``; "" when it is here now, else what the registry said."""
        with engine_errors(f"pull {reference}", self.timeout):
            try:
                for event in self.api.pull(reference, stream=True, decode=True):
                    if event.get("error"):
                        return str(event["error"])
            except docker.errors.APIError as exc:
                return str(exc.explanation or exc)
        return ""

    def load_image(self, archive: Path) -> None:
        """``docker load -i ARCHIVE``: the images an image archive holds, under its names."""
        with engine_errors(f"load {archive.name}", max(self.timeout, 600)), archive.open("rb") as data:
            self.api.load_image(data)

    def run_capture(self, image: str, argv: Sequence[str], *, entrypoint: str | None = None,
                    network: str | None = "none", timeout: float | None = None,
                    device_options: Mapping[str, Any] | None = None,
                    environment: Mapping[str, str] | None = None, platform: str | None = None) -> command.CommandResult:
        """Run a throwaway container and collect its output (the container is always removed);
        ``device_options``: its device access (``DeviceAccess.host_config``); ``environment``: its
        variables; ``platform``: the image's platform to run (another machine's runs emulated).
        ``timeout``: seconds it may run, by default [build] stall_timeout (what a build step may
        run silent). Another machine's image runs with :func:`emulation_options`."""
        with emulation_options(platforms.parse(platform) if platform else self._platform_of(image)) as emulated:
            return self._run_capture(image, argv, entrypoint=entrypoint, network=network,
                                     limit=self.stall_timeout if timeout is None else timeout,
                                     host_config={"network_mode": network, **emulated,
                                                  **{k: v for k, v in (device_options or {}).items() if v}},
                                     environment=environment, platform=platform)

    def _platform_of(self, image: str) -> platforms.Platform | None:
        info = self.inspect_image(image) or {}
        return platforms.by_machine(info.get("Architecture") or "")

    def _run_capture(self, image: str, argv: Sequence[str], *, entrypoint: str | None, network: str | None,
                     limit: float, host_config: Mapping[str, Any], environment: Mapping[str, str] | None,
                     platform: str | None) -> command.CommandResult:
        name = f"torchbake-probe-{uuid.uuid4().hex[:12]}"
        shown = ("docker", "run", "--rm", "--network", network or "default", *(("--platform", platform) if platform else ()),
                 image, *argv)
        created = self.create_container(image, command=list(argv), entrypoint=[entrypoint] if entrypoint else None,
                                        name=name, labels={"torchbake.probe": "true"}, host_config=host_config,
                                        environment=dict(environment or {}) or None,
                                        **({"platform": platform} if platform else {}))
        try:
            with engine_errors(f"run {image}", self.timeout):
                try:
                    self.api.start(created)
                except docker.errors.APIError as exc:  # e.g. the entrypoint is not in the image
                    return command.CommandResult(shown, 127, str(exc.explanation or exc))
            with engine_errors(f"run {image}", limit, setting=RUN_LIMIT):
                code = int(self.api.wait(created, timeout=limit).get("StatusCode", 1))
            with engine_errors(f"logs {name}", self.timeout):
                output = self.api.logs(created, stdout=True, stderr=True).decode(errors="replace")
            return command.CommandResult(shown, code, output)
        finally:  # interrupted or timed out too: the probe container never outlives this call
            self._discard(created)

    def read_file(self, image: str, path: str) -> str | None:
        """The text of the file ``path`` in ``image`` (a symbolic link followed, inside the image),
        or None where the image has no such file. Read from a container that is created and never
        started: nothing in the image runs, so another machine's image needs no emulation (a
        third of a throwaway container's CPU, `cat` run in one: 0.10 s against 0.29 s here)."""
        created = self.create_container(image, command=["torchbake-reads-files"], host_config={"network_mode": "none"},
                                        name=f"torchbake-probe-{uuid.uuid4().hex[:12]}",
                                        labels={"torchbake.probe": "true"})
        try:
            for _ in range(2):  # the engine resolves a link's whole chain: its target is the file
                with engine_errors(f"read {path} in {image}", self.timeout):
                    try:
                        stream, stat = self.api.get_archive(created, path)
                    except docker.errors.NotFound:
                        return None
                    archive = b"".join(stream)
                if not stat.get("linkTarget"):
                    break
                path = stat["linkTarget"]
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                member = next((m for m in tar.getmembers() if m.isfile()), None)
                body = tar.extractfile(member) if member is not None else None
                return None if body is None else body.read().decode(errors="replace")
        finally:
            self._discard(created)

    def holds_platform(self, reference: str, platform: str) -> bool:
        """Whether the engine holds ``reference``'s image for ``platform`` ("linux/arm64"), asked
        without pulling anything: a container of that platform created (never started) and
        removed. ``docker image inspect`` shows one platform of an index only."""
        try:
            created = self.call(f"create --platform {platform} {reference}", "create_container", reference,
                                platform=platform, labels={"torchbake.probe": "true"}, missing="")
        except EngineError as exc:  # the classic image store: another platform's image is "found but does not match"
            if "does not match the specified platform" in str(exc):
                return False
            raise
        if created:
            self._discard(created["Id"])
        return bool(created)

    def create_container(self, image: str, *, host_config: Mapping[str, Any], **options: Any) -> str:
        """Create a container (the SDK's ``create_container`` and ``create_host_config`` options)."""
        with engine_errors(f"create {options.get('name') or image}", self.timeout):
            return self.api.create_container(image, host_config=self.api.create_host_config(**host_config),
                                             **options)["Id"]

    def run_streams(self, container: str, *, stdin: bool) -> int:
        """Attach to a created container, start it and relay the standard streams until it ends;
        its exit status. It is removed afterwards, whatever happens (``docker run --rm``)."""
        try:
            with engine_errors(f"start {container[:12]}", self.timeout):
                params = {"stdin": int(stdin), "stdout": 1, "stderr": 1, "stream": 1}
                attached = self.api.attach_socket(container, params=params)
                self.api.start(container)
            _relay(attached, stdin)
            with engine_errors(f"wait {container[:12]}", self.timeout):
                return int(self.api.wait(container, timeout=None).get("StatusCode", 1))
        finally:
            self._discard(container)

    def _discard(self, container: str) -> None:
        """Remove a container torchbake made for one run, quietly (it may be gone already)."""
        with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
            self.api.remove_container(container, force=True)

    def exec_streams(self, container: str, argv: Sequence[str], *, env: Mapping[str, str], workdir: str,
                     stdin: bool) -> int:
        """Run ``argv`` in a running container, relaying the standard streams; its exit status."""
        with engine_errors(f"exec {container}", self.timeout):
            exec_id = self.api.exec_create(container, list(argv), stdin=stdin, environment=dict(env) or None,
                                           workdir=workdir or None)["Id"]
            _relay(self.api.exec_start(exec_id, socket=True), stdin)
            for _ in range(100):  # the stream ends a moment before the engine records the exit
                result = self.api.exec_inspect(exec_id)
                if not result.get("Running"):
                    break
                time.sleep(0.05)
        return int(result.get("ExitCode") or 0)

    def is_folder(self, container: str, path: str) -> bool:
        """Whether ``path`` is a folder in the running ``container`` (``test -d``)."""
        with engine_errors(f"exec {container}", self.timeout):
            exec_id = self.api.exec_create(container, ["test", "-d", path])["Id"]
            self.api.exec_start(exec_id)
            return self.api.exec_inspect(exec_id).get("ExitCode") == 0

    def containers(self, label: str) -> list[dict[str, Any]]:
        """Every container (running or not) that has ``label`` (``key=value``)."""
        return self.call("ps", "containers", all=True, filters={"label": label})

    def containers_of(self, image_id: str) -> list[dict[str, Any]]:
        """Every container (running or not) of the image or of an image built FROM it."""
        return self.call("ps", "containers", all=True, filters={"ancestor": image_id})

    def stop_container(self, name: str, timeout: int) -> None:
        self.call(f"stop {name}", "stop", name, timeout=timeout, limit=timeout + self.timeout)

    def remove_container(self, name: str, *, force: bool = False) -> None:
        self.call(f"rm {name}", "remove_container", name, force=force)

    def start_container(self, name: str) -> None:
        self.call(f"start {name}", "start", name)

    def push(self, reference: str, log_file: Path | None = None,
             progress: Callable[[int, int], None] | None = None) -> str:
        """Push ``reference`` with the user's docker credentials; every event goes to the log, and
        ``progress(bytes sent, bytes to send)`` hears of each layer's progress. Returns the
        registry digest."""
        digest, sent, totals = "", {}, {}
        with engine_errors(f"push {reference}", 3600), contextlib.ExitStack() as stack:
            log = stack.enter_context(log_file.open("a")) if log_file else None
            try:
                events = self.api.push(reference, stream=True, decode=True)
            except docker.errors.APIError as exc:  # the engine answered: the registry refused or is gone
                raise RegistryError(f"Pushing {reference} failed: {exc.explanation or exc}") from None
            for event in events:
                if log is not None:
                    log.write(json.dumps(event) + "\n")
                if event.get("error"):  # the engine answers; the registry stopped answering or refused
                    raise RegistryError(f"Pushing {reference} failed: {event['error']}")
                detail, layer = event.get("progressDetail") or {}, event.get("id", "")
                if detail.get("total"):
                    sent[layer], totals[layer] = int(detail.get("current", 0)), int(detail["total"])
                elif event.get("status") in ("Pushed", "Layer already exists", "Mounted from") and layer in totals:
                    sent[layer] = totals[layer]
                if progress is not None and totals:
                    progress(sum(sent.values()), sum(totals.values()))
                digest = (event.get("aux") or {}).get("Digest", digest)
        return digest


# What a FROM image gives the images built on it besides its layers.
INHERITED_CONFIG = ("Env", "Cmd", "Entrypoint", "WorkingDir", "User", "Labels", "ExposedPorts", "Volumes", "Shell",
                    "StopSignal", "OnBuild", "Healthcheck")


def manifest_digest(info: Mapping[str, Any], reference: str) -> str:
    """The digest of the manifest (or index) ``reference`` names, as a registry knows it: the
    image's ``RepoDigests`` entry for the reference's repository (an image pulled or pushed; on
    the containerd image store every image, whose id is that digest); "" when the engine knows
    none (an image made here on the classic store and never pushed, whose id is its config's
    digest)."""
    repository = references.split(reference)[0]
    for entry in info.get("RepoDigests") or []:
        name, _, digest = entry.partition("@")
        if name == repository and digest.startswith("sha256:"):
            return digest
    return ""


def content_id(info: Mapping[str, Any], platform: str = "") -> str:
    """An image's identity by content, the same on every engine and in a registry: its layers'
    diff ids and the config its children inherit, from ``docker image inspect`` or the config
    blob. An image id is not: it is the config's digest on one image store and the manifest's
    on the containerd store, and the config holds engine-local facts (its build's history).

    ``platform``: the image is a FROM image of that platform's build. An engine inspects a
    multi-platform image as its own platform's, so where the inspected architecture is another,
    the image's id (on the containerd store the index's digest, which names every platform's
    manifest) counts too: a change to any platform's image changes it."""
    config = info.get("Config") or {}
    material = {"layers": list((info.get("RootFS") or {}).get("Layers") or []),
                "config": {key: config.get(key) or None for key in INHERITED_CONFIG}}
    if platform and platform.split("/")[1] != info.get("Architecture", platform.split("/")[1]):
        material["image"] = info.get("Id", "")
    return "sha256:" + hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def _relay(attached: Any, stdin: bool) -> None:
    """Copy this process's standard input into an attached container stream (then close its
    writing half, so the command sees end of file), and the container's stdout and stderr frames
    to ours, until the container closes the stream."""
    raw = getattr(attached, "_sock", attached)
    raw.settimeout(None)  # a command may be quiet for as long as it likes

    def feed() -> None:
        with contextlib.suppress(OSError):
            while data := os.read(sys.stdin.fileno(), 65536):
                raw.sendall(data)
            raw.shutdown(socket.SHUT_WR)

    if stdin:
        threading.Thread(target=feed, daemon=True).start()
    targets = {1: sys.stdout, 2: sys.stderr}
    for stream, chunk in docker.utils.socket.frames_iter(attached, tty=False):
        target = targets.get(stream, sys.stdout)
        target.flush()
        target.buffer.write(chunk)
        target.buffer.flush()


_API_CLIENTS: dict[tuple, docker.APIClient] = {}

# The engine calls an unchanged build makes, answered without the SDK (whose import, with requests
# and urllib3, took longer than all of the build's own work): the Engine API path of each, as the
# SDK asks it (its arguments quoted as the SDK quotes them).
_QUICK = {"version": "/version", "inspect_image": "/images/{}/json"}
_NOT_FOUND = object()


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over the engine's unix socket."""

    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def quick_get(environ: Mapping[str, str], path: str, what: str, timeout: float) -> Any:
    """``GET path`` of the engine the CLI would use, when it answers on a unix socket here: its
    JSON, ``_NOT_FOUND`` for a 404, or None when the SDK should ask instead (an engine elsewhere
    or behind a docker context, no socket, a connection refused, any other answer: the SDK's call
    then gives the result or its own error). No answer within ``timeout`` is the engine timeout's
    error, as the SDK's call would give it."""
    where = where_engine(environ)
    if not where.startswith("unix://"):
        return None
    connection = _UnixConnection(where.removeprefix("unix://"), timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
    except TimeoutError:
        raise EngineError(no_answer(what, timeout)) from None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()
    if response.status == 404:
        return _NOT_FOUND
    try:
        return json.loads(body) if response.status == 200 else None
    except ValueError:
        return None


def _sdk_client(environ: Mapping[str, str], timeout: float) -> docker.DockerClient:
    """The engine the CLI would talk to: DOCKER_HOST first, else the docker context
    (DOCKER_CONTEXT, else the config's current one), else the default socket."""
    if environ.get("DOCKER_HOST"):
        return docker.DockerClient(timeout=int(timeout), version="auto",
                                   **docker.utils.kwargs_from_env(environment=dict(environ)))
    name = environ.get("DOCKER_CONTEXT") or _current_context(environ)
    if name in ("", "default"):
        return docker.DockerClient(base_url=f"unix://{LOCAL_SOCKET}", timeout=int(timeout), version="auto")
    context = docker.context.ContextAPI.get_context(name)
    if context is not None and context.Host:  # the SDK finds contexts only beside an existing config.json
        return docker.DockerClient(base_url=context.Host, tls=context.TLSConfig or False, timeout=int(timeout),
                                   version="auto")
    return docker.DockerClient(base_url=_context_host(name, environ), timeout=int(timeout), version="auto")


def _config_dir(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("DOCKER_CONFIG") or Path.home() / ".docker")


def _context_host(name: str, environ: Mapping[str, str]) -> str:
    """The engine address a docker context names, read from the CLI's context store."""
    meta = _config_dir(environ) / "contexts" / "meta" / hashlib.sha256(name.encode()).hexdigest() / "meta.json"
    try:
        return json.loads(meta.read_text())["Endpoints"]["docker"]["Host"]
    except (OSError, ValueError, KeyError, TypeError):
        raise EngineError(f"Docker context {name!r} (DOCKER_CONTEXT or the current context) does not exist in"
                          f" {_config_dir(environ)}; `docker context ls` lists those that do.") from None


def where_engine(environ: Mapping[str, str]) -> str:
    """The engine's address, or the docker context that names it, as the CLI would choose."""
    if environ.get("DOCKER_HOST"):
        return environ["DOCKER_HOST"]
    context = environ.get("DOCKER_CONTEXT") or _current_context(environ)
    return f"docker context {context!r}" if context not in ("", "default") else f"unix://{LOCAL_SOCKET}"


@contextlib.contextmanager
def emulation_options(platform: platforms.Platform | None):
    """The host configuration a throwaway container of ``platform`` gets where this host emulates
    it (QEMU): no core dump (QEMU writes the emulated process's whole address space: a crash of
    the real torch hung for minutes instead of ending), and the CPU files below
    /sys/devices/system/cpu that its programs read and this host's kernel lacks
    (:attr:`Platform.emulated_cpu`), as a read-only view of as many CPUs as this host has (where
    the engine is on this host: the view is a folder here). Nothing for the host's own platform."""
    if platform is None or platform.machine == platforms.host().machine:
        yield {}
        return
    options: dict[str, Any] = {"ulimits": [{"name": "core", "soft": 0, "hard": 0}]}
    if not platform.emulated_cpu or not engine_is_local():
        yield options
        return
    with tempfile.TemporaryDirectory(prefix="torchbake-cpu-") as folder:
        count = os.cpu_count() or 1
        for index in range(count):
            for relative, text in platform.emulated_cpu:
                path = Path(folder, f"cpu{index}", relative)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
        for listing in ("online", "possible", "present"):
            Path(folder, listing).write_text(f"0-{count - 1}\n")
        os.chmod(folder, 0o755)
        yield {**options, "binds": {folder: {"bind": "/sys/devices/system/cpu", "mode": "ro"}}}


RUN_LIMIT = "[build] stall_timeout"  # the seconds a throwaway container may run (DockerClient.run_capture)


@contextlib.contextmanager
def engine_errors(what: str, timeout: float, setting: str = "[build] engine_timeout"):
    """The SDK's typed failures as torchbake errors: a timeout (of ``setting``), no engine, or the
    engine's refusal."""
    try:
        yield
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM, maybe in the middle of importing the SDK: naming its
        raise                  # errors below would import it again, half made (an AttributeError)
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        if isinstance(exc, docker.errors.APIError):
            raise EngineError(f"`docker {what}` failed: {exc.explanation or exc}") from exc
        if (isinstance(exc, requests.exceptions.Timeout) or isinstance(exc.__context__, requests.exceptions.Timeout)
                or "timed out" in str(exc)):  # the SDK wraps the version check's timeout in a DockerException
            if setting == RUN_LIMIT:
                raise EngineError(f"`docker {what}` ran longer than {timeout:g} s ({setting}) and was stopped. Where the"
                                  " container needs longer (another platform's image runs emulated by QEMU, ten or"
                                  " more times slower), raise it: TORCHBAKE_BUILD_STALL_TIMEOUT=SECONDS, or"
                                  " stall_timeout under [build] in the configuration.") from exc
            raise EngineError(no_answer(what, timeout, setting)) from exc
        raise EngineError(
            f"No Docker engine answers at {where_engine(os.environ)}: {exc}\n"
            f"Start one: {data.engine_hint()}; or set DOCKER_HOST to an engine that answers."
        ) from exc


def no_answer(what: str, timeout: float, setting: str = "[build] engine_timeout") -> str:
    """The error of an engine that did not answer ``docker what`` within ``timeout`` seconds."""
    return (f"The Docker engine at {where_engine(os.environ)} did not answer `docker {what}` within"
            f" {timeout:g} s ({setting}). Check that dockerd is running there and is"
            f" not stuck ({data.engine_hint()}), or point DOCKER_HOST /"
            " DOCKER_CONTEXT at an engine that answers.")


LOCAL_SOCKET = "/var/run/docker.sock"


def check_answers(environ: Mapping[str, str], timeout: float) -> None:
    """Raise the engine's own error (no answer at its address within ``timeout``, a docker
    context that does not exist) when the engine the CLI would use does not answer."""
    with engine_errors("version", timeout):
        _sdk_client(environ, timeout).api.version()


def _current_context(environ: Mapping[str, str]) -> str:
    try:
        return json.loads((_config_dir(environ) / "config.json").read_text()).get("currentContext", "")
    except (OSError, ValueError, AttributeError):
        return ""


def engine_is_local() -> bool:
    """Whether the engine runs on this machine (so its /dev and data root are here): it answers on a
    unix socket that exists here (the default one, a rootless engine's, a second engine's); an
    ssh:// or tcp:// engine is elsewhere."""
    where = where_engine(os.environ)
    return where.startswith("unix://") and os.path.exists(where.removeprefix("unix://"))

