"""The Docker client and engine: finding a client that can do BuildKit, and every engine call.

Two kinds of client can build with BuildKit: one with the buildx plugin (``docker buildx build
--load``), and the pre-23 client, whose ``docker build`` uses the engine's built-in BuildKit when
``DOCKER_BUILDKIT=1`` is set. Newer clients without buildx refuse BuildKit; torchbake detects
that and says what to install or which binary to pass with ``--docker``.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import re
import shutil
import socket
import urllib.parse
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import command
from .errors import BuildError, CommandError, EngineError, FatalError

ENGINE_TIMEOUT = 60.0  # seconds for any engine call that is not a build or a long run
STALL_TIMEOUT = 3600.0  # seconds a build may print nothing before it is stopped
FALLBACK_CLIENTS = ("/usr/bin/docker",)
# Docker's predefined proxy build args: passed by name only (the client reads the values from its
# environment, so credentials in a proxy URL stay out of our logs), and kept out of the image's
# history by Docker. Other variables are never passed implicitly.
PROXY_BUILD_ARGS = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "FTP_PROXY", "ftp_proxy",
                    "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy")
INSTALL_HINT = (
    "Install the buildx plugin (Debian/Ubuntu: apt-get install docker-buildx), or use a client"
    " older than 23.0 (Debian's docker.io provides /usr/bin/docker) and pass it with --docker."
)


@dataclass(frozen=True)
class DockerClient:
    binary: str
    version: str
    build_mode: str  # "buildx", "buildkit-env", or "none" (can run containers, not build)
    environ: Mapping[str, str] = field(default_factory=dict)
    timeout: float = ENGINE_TIMEOUT  # seconds any engine call but a build may take ([build] engine_timeout)
    stall_timeout: float = STALL_TIMEOUT  # seconds a build may go without printing a line ([build] stall_timeout)

    # -- commands --------------------------------------------------------------------------
    def build_command(
        self,
        *,
        context: Path,
        dockerfile: Path,
        tag: str,
        build_args: Mapping[str, str] = {},  # noqa: B006 - read-only
        labels: Mapping[str, str] = {},  # noqa: B006
        secrets: Sequence[tuple[str, Path]] = (),
        iidfile: Path | None = None,
        target: str | None = None,
        no_cache: bool = False,
        network: str = "",
    ) -> tuple[list[str], dict[str, str]]:
        """The exact ``docker build`` argument list and the variables it needs."""
        if self.build_mode == "buildx":
            argv, env = [self.binary, "buildx", "build", "--load"], {}
        else:
            argv, env = [self.binary, "build"], {"DOCKER_BUILDKIT": "1"}
        argv += ["--progress=plain", "--file", str(dockerfile), "--tag", tag]
        if target:
            argv += ["--target", target]
        if no_cache:
            argv.append("--no-cache")
        if network:
            argv += ["--network", network]
        for key, value in build_args.items():
            argv += ["--build-arg", f"{key}={value}"]
        for key in PROXY_BUILD_ARGS:
            if self.environ.get(key):
                argv += ["--build-arg", key]
        for key, value in labels.items():
            argv += ["--label", f"{key}={value}"]
        for secret_id, path in secrets:
            argv += ["--secret", f"id={secret_id},src={path}"]
        if iidfile is not None:
            argv += ["--iidfile", str(iidfile)]
        argv.append(str(context))
        return argv, env

    # -- engine calls ----------------------------------------------------------------------
    def call(self, *args: str, timeout: float = 0, check: bool = True,
             echo: bool = False, error: type[FatalError] = EngineError) -> command.CommandResult:
        """One engine call through the CLI, bounded by ``timeout`` (0: the client's)."""
        timeout = timeout or self.timeout
        try:
            return command.run(
                [self.binary, *args], capture=True, check=check, error=error,
                timeout=timeout, echo=echo,
                failure_hint="Is the engine still running? scripts/ensure-engine.sh starts one.",
            )
        except FatalError as exc:
            if "did not finish within" in str(exc):
                raise EngineError(
                    f"The Docker engine did not answer `docker {' '.join(args[:2])}` within"
                    f" {timeout:g} s. Check that dockerd is running (scripts/ensure-engine.sh)."
                ) from exc
            raise

    def check_engine(self) -> str:
        """The engine's version; a clear error if none answers (asked once per client and host)."""
        key = (self.binary, os.environ.get("DOCKER_HOST", ""), os.environ.get("DOCKER_CONTEXT", ""))
        if key not in _ENGINE_VERSIONS:
            _ENGINE_VERSIONS[key] = self._ask_engine()
        return _ENGINE_VERSIONS[key]

    def _ask_engine(self) -> str:
        fast = _socket_get("/version", self.timeout)
        if fast is not None and fast[0] == 200:
            return json.loads(fast[1]).get("Version", "")
        result = self.call("version", "--format", "{{.Server.Version}}", check=False)
        if result.returncode != 0 or not result.output.strip():
            where = os.environ.get("DOCKER_HOST", "the default socket (/var/run/docker.sock)")
            raise EngineError(
                f"No Docker engine answers at {where} (client {self.binary}).\n"
                f"{result.output.strip()}\n"
                "Start one: on Debian as root, scripts/ensure-engine.sh installs docker.io and"
                " starts dockerd; elsewhere start the docker service or set DOCKER_HOST."
            )
        return result.output.strip().splitlines()[-1]

    def inspect_image(self, reference: str) -> dict[str, Any] | None:
        fast = _socket_get(f"/images/{urllib.parse.quote(reference, safe='')}/json", self.timeout)
        if fast is not None:
            status, body = fast
            if status == 200:
                return json.loads(body)
            if status == 404:
                return None
        result = self.call("image", "inspect", reference, check=False)
        if result.returncode != 0:
            if "No such image" in result.output or "no such image" in result.output.lower():
                return None
            raise EngineError(f"docker image inspect {reference} failed:\n{result.output.strip()}")
        return json.loads(result.output)[0]

    def inspect_container(self, name: str) -> dict[str, Any] | None:
        """The container's ``docker container inspect`` record, or None if there is none."""
        fast = _socket_get(f"/containers/{urllib.parse.quote(name, safe='')}/json", self.timeout)
        if fast is not None and fast[0] in (200, 404):
            return json.loads(fast[1]) if fast[0] == 200 else None
        result = self.call("container", "inspect", name, check=False)
        if result.returncode != 0:
            if "no such" in result.output.lower():
                return None
            raise EngineError(f"docker container inspect {name} failed:\n{result.output.strip()}")
        return json.loads(result.output)[0]

    def engine_info(self) -> dict[str, Any]:
        """``docker info`` as the Engine API gives it (NCPU, MemTotal, Runtimes, ...)."""
        fast = _socket_get("/info", self.timeout)
        if fast is not None and fast[0] == 200:
            return json.loads(fast[1])
        return json.loads(self.call("info", "--format", "{{json .}}").output)

    def image_labels(self, reference: str) -> dict[str, str]:
        info = self.inspect_image(reference)
        if info is None:
            raise EngineError(f"Image {reference!r} does not exist on this engine. `docker images` lists those that do.")
        return dict((info.get("Config") or {}).get("Labels") or {})

    def remove_image(self, reference: str) -> None:
        self.call("image", "rm", "--force", reference, check=False)

    def run_capture(self, image: str, argv: Sequence[str], *, entrypoint: str | None = None,
                    network: str | None = "none", timeout: float = 600) -> command.CommandResult:
        """Run a throwaway container and collect its output (the container is always removed)."""
        name = f"torchbake-probe-{uuid.uuid4().hex[:12]}"
        args = ["run", "--rm", "--name", name, "--label", "torchbake.probe=true"]
        if network:
            args += ["--network", network]
        if entrypoint is not None:
            args += ["--entrypoint", entrypoint]
        args += [image, *argv]
        try:
            return self.call(*args, timeout=timeout, check=False)
        except BaseException:  # interrupted or timed out: the client is gone, the container may not be
            self.call("rm", "--force", name, check=False, timeout=30)
            raise

    def build(self, argv: list[str], env: Mapping[str, str], log_file: Path) -> None:
        """``docker build``: no time limit (a PyTorch build takes hours), but one that prints
        nothing for ``stall_timeout`` seconds is stopped (an engine that stopped answering)."""
        command.run(
            argv, env=dict(env), log_file=log_file, error=BuildError, idle_timeout=self.stall_timeout,
            failure_hint=f"The build failed; the log above (kept in {log_file}) shows the failing step.",
        )


_ENGINE_VERSIONS: dict[tuple[str, str, str], str] = {}
LOCAL_SOCKET = "/var/run/docker.sock"


def _current_context() -> str:
    config = os.path.join(os.environ.get("DOCKER_CONFIG", os.path.expanduser("~/.docker")), "config.json")
    try:
        with open(config) as handle:
            return json.load(handle).get("currentContext", "")
    except (OSError, ValueError):
        return ""


def engine_is_local() -> bool:
    """Whether the engine is the default one on this machine (so its /dev and socket are here)."""
    host = os.environ.get("DOCKER_HOST", "")
    if os.environ.get("DOCKER_CONTEXT") or (host and host != f"unix://{LOCAL_SOCKET}"):
        return False
    return os.path.exists(LOCAL_SOCKET) and _current_context() in ("", "default")


def _socket_get(path: str, timeout: float) -> tuple[int, bytes] | None:
    """A read-only Engine API call straight over the local socket (a few ms, where the CLI takes
    tens), used only when the engine is the local default one; None means "ask the CLI"."""
    if not engine_is_local():
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(LOCAL_SOCKET)
            connection = http.client.HTTPConnection("localhost")
            connection.sock = sock
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read()
    except (OSError, http.client.HTTPException):
        return None
_VERSION_RE = re.compile(r"version\s+v?(\d+)\.(\d+)\.?(\d+)?", re.IGNORECASE)


def probe_client(binary: str, environ: Mapping[str, str] | None = None, *,
                 for_build: bool = True) -> DockerClient | str:
    """A usable client, or the reason this binary cannot build with BuildKit (``for_build``: a
    client that cannot build is still usable for running containers)."""
    try:
        result = command.run([binary, "--version"], capture=True, check=False, echo=False, timeout=20)
    except CommandError as exc:
        return str(exc)
    match = _VERSION_RE.search(result.output)
    if result.returncode != 0 or not match:
        return f"`{binary} --version` did not print a Docker version: {result.output.strip()[:200]}"
    version = ".".join(g or "0" for g in match.groups())
    if not for_build:
        return DockerClient(binary=binary, version=version, build_mode="none", environ=environ or {})
    buildx = command.run([binary, "buildx", "version"], capture=True, check=False, echo=False, timeout=20)
    if buildx.returncode == 0:
        return DockerClient(binary=binary, version=version, build_mode="buildx", environ=environ or {})
    if int(match.group(1)) < 23:
        return DockerClient(binary=binary, version=version, build_mode="buildkit-env", environ=environ or {})
    return f"client {version} has no buildx plugin, so it cannot build with BuildKit"


def candidate_clients(path_env: str) -> list[str]:
    """Every ``docker`` executable on PATH, in order, then the known fallbacks."""
    found: list[str] = []
    for folder in path_env.split(os.pathsep):
        candidate = os.path.join(folder or ".", "docker")
        real = os.path.realpath(candidate)
        if os.access(candidate, os.X_OK) and os.path.isfile(candidate) and real not in map(os.path.realpath, found):
            found.append(candidate)
    for fallback in FALLBACK_CLIENTS:
        if os.access(fallback, os.X_OK) and os.path.realpath(fallback) not in map(os.path.realpath, found):
            found.append(fallback)
    return found


def detect_client(choice: str, environ: Mapping[str, str], *, for_build: bool = True,
                  timeout: float = ENGINE_TIMEOUT, stall_timeout: float = STALL_TIMEOUT) -> DockerClient:
    client = _detect_client(choice, environ, for_build=for_build)
    return dataclasses.replace(client, timeout=timeout, stall_timeout=stall_timeout)


def _detect_client(choice: str, environ: Mapping[str, str], *, for_build: bool = True) -> DockerClient:
    """The client named by ``choice`` ("auto" = the first BuildKit-capable one found; without
    ``for_build``, the first that answers at all)."""
    if choice != "auto":
        binary = choice if os.sep in choice else (shutil.which(choice) or choice)
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            raise EngineError(
                f"Docker client {choice!r} (build.docker / --docker) was not found or is not executable."
                " Pass a name on PATH or a path, or 'auto'."
            )
        probed = probe_client(binary, environ, for_build=for_build)
        if isinstance(probed, str):
            raise EngineError(f"{binary}: {probed}. {INSTALL_HINT}")
        return probed
    reasons = []
    for binary in candidate_clients(environ.get("PATH", os.defpath)):
        probed = probe_client(binary, environ, for_build=for_build)
        if isinstance(probed, DockerClient):
            return probed
        reasons.append(f"  {binary}: {probed}")
    if not reasons:
        raise EngineError(
            "No docker client was found on PATH. Install one (Debian: apt-get install docker.io;"
            " or run scripts/ensure-engine.sh as root)."
        )
    raise EngineError("No docker client that can build with BuildKit was found:\n" + "\n".join(reasons)
                      + f"\n{INSTALL_HINT}")
