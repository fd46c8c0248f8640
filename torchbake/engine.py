"""The Docker client and engine: finding a client that can do BuildKit, and every engine call.

Two kinds of client can build with BuildKit: one with the buildx plugin (``docker buildx build
--load``), and the pre-23 client, whose ``docker build`` uses the engine's built-in BuildKit when
``DOCKER_BUILDKIT=1`` is set. Newer clients without buildx refuse BuildKit; torchbake detects
that and says what to install or which binary to pass with ``--docker``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import command
from .errors import BuildError, CommandError, EngineError, FatalError
from .lazy import LazyModule

if TYPE_CHECKING:
    import docker
    import requests
else:  # the SDK is imported at the first engine call, not when the tasks are listed
    docker = LazyModule("docker", "docker.context", "docker.errors")
    requests = LazyModule("requests")

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

    def cli(self, *args: str, timeout: float = 0, error: type[FatalError] = EngineError) -> command.CommandResult:
        """The CLI, for what it alone does (creating the container of an interactive session with
        the exact flags --dry-run prints), bounded by ``timeout`` (0: the client's)."""
        timeout = timeout or self.timeout
        try:
            return command.run([self.binary, *args], capture=True, error=error, timeout=timeout, echo=False,
                               failure_hint="Is the engine still running? scripts/ensure-engine.sh starts one.")
        except FatalError as exc:
            if "did not finish within" in str(exc):
                raise EngineError(
                    f"The Docker engine did not answer `docker {' '.join(args[:2])}` within"
                    f" {timeout:g} s. Check that dockerd is running (scripts/ensure-engine.sh)."
                ) from exc
            raise

    # -- engine calls: the Engine API through the docker SDK ---------------------------------
    @property
    def api(self) -> docker.APIClient:
        """The SDK's client for this engine: ``DOCKER_HOST`` (unix, tcp with ``DOCKER_TLS_VERIFY``
        / ``DOCKER_CERT_PATH``, ssh) when set, else the docker context (``DOCKER_CONTEXT``, or
        the current one), as the CLI finds it; made once per client."""
        key = (self.timeout, tuple(sorted((k, v) for k, v in self.environ.items() if k.startswith("DOCKER_"))))
        if key not in _API_CLIENTS:
            with engine_errors("connect", self.timeout):
                _API_CLIENTS[key] = _sdk_client(self.environ, self.timeout).api
        return _API_CLIENTS[key]

    def check_engine(self) -> str:
        """The engine's version; a clear error if none answers."""
        with engine_errors("version", self.timeout):
            return str(self.api.version().get("Version", ""))

    def inspect_image(self, reference: str) -> dict[str, Any] | None:
        with engine_errors(f"image inspect {reference}", self.timeout):
            try:
                return self.api.inspect_image(reference)
            except docker.errors.NotFound:
                return None

    def inspect_container(self, name: str) -> dict[str, Any] | None:
        """The container's inspect record, or None if there is none."""
        with engine_errors(f"container inspect {name}", self.timeout):
            try:
                return self.api.inspect_container(name)
            except docker.errors.NotFound:
                return None

    def engine_info(self) -> dict[str, Any]:
        """``docker info`` as the Engine API gives it (NCPU, MemTotal, Runtimes, ...)."""
        with engine_errors("info", self.timeout):
            return self.api.info()

    def image_labels(self, reference: str) -> dict[str, str]:
        info = self.inspect_image(reference)
        if info is None:
            raise EngineError(f"Image {reference!r} does not exist on this engine. `docker images` lists those that do.")
        return dict((info.get("Config") or {}).get("Labels") or {})

    def tag(self, source: str, target: str) -> None:
        repository, tag = split_reference(target)
        with engine_errors(f"tag {source} {target}", self.timeout):
            self.api.tag(source, repository, tag)

    def remove_image(self, reference: str) -> bool:
        """Remove the image (or the tag); False when there was none."""
        with engine_errors(f"image rm {reference}", self.timeout):
            try:
                self.api.remove_image(reference, force=True)
                return True
            except docker.errors.NotFound:
                return False

    def pull(self, reference: str) -> str:
        """Pull ``reference``; "" when it is here now, else what the registry said."""
        repository, tag = split_reference(reference)
        with engine_errors(f"pull {reference}", self.timeout):
            try:
                for event in self.api.pull(repository, tag=tag or None, stream=True, decode=True):
                    if event.get("error"):
                        return str(event["error"])
            except docker.errors.APIError as exc:
                return str(exc.explanation or exc)
        return ""

    def import_image(self, tarball: Path, reference: str, changes: Sequence[str]) -> str:
        """``docker import``: a root file system tarball as ``reference``; returns the image id."""
        repository, tag = split_reference(reference)
        with engine_errors(f"import {reference}", max(self.timeout, 600)):
            output = self.api.import_image_from_file(str(tarball), repository=repository, tag=tag or None,
                                                     changes=list(changes))
        for line in reversed(str(output).splitlines()):
            try:
                status = json.loads(line).get("status", "")
            except ValueError:
                continue
            if status.startswith("sha256:"):
                return status
        info = self.inspect_image(reference)
        if info is None:
            raise EngineError(f"Importing {reference} gave no image: {str(output)[-500:]}")
        return info["Id"]

    def run_capture(self, image: str, argv: Sequence[str], *, entrypoint: str | None = None,
                    network: str | None = "none", timeout: float = 600) -> command.CommandResult:
        """Run a throwaway container and collect its output (the container is always removed)."""
        name = f"torchbake-probe-{uuid.uuid4().hex[:12]}"
        shown = ("docker", "run", "--rm", "--network", network or "default", image, *argv)
        with engine_errors(f"run {image}", self.timeout):
            created = self.api.create_container(
                image, command=list(argv), entrypoint=[entrypoint] if entrypoint else None, name=name,
                labels={"torchbake.probe": "true"},
                host_config=self.api.create_host_config(network_mode=network) if network else None)
        try:
            with engine_errors(f"run {image}", timeout):
                try:
                    self.api.start(created["Id"])
                except docker.errors.APIError as exc:  # e.g. the entrypoint is not in the image
                    return command.CommandResult(shown, 127, str(exc.explanation or exc))
                code = int(self.api.wait(created["Id"], timeout=timeout).get("StatusCode", 1))
                output = self.api.logs(created["Id"], stdout=True, stderr=True).decode(errors="replace")
            return command.CommandResult(shown, code, output)
        finally:  # interrupted or timed out too: the probe container never outlives this call
            with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
                self.api.remove_container(created["Id"], force=True)

    def containers(self, label: str) -> list[dict[str, Any]]:
        """Every container (running or not) that has ``label`` (``key=value``)."""
        with engine_errors("ps", self.timeout):
            return self.api.containers(all=True, filters={"label": label})

    def stop_container(self, name: str, timeout: int) -> None:
        with engine_errors(f"stop {name}", timeout + self.timeout):
            self.api.stop(name, timeout=timeout)

    def remove_container(self, name: str, *, force: bool = False) -> None:
        with engine_errors(f"rm {name}", self.timeout):
            self.api.remove_container(name, force=force)

    def start_container(self, name: str) -> None:
        with engine_errors(f"start {name}", self.timeout):
            self.api.start(name)

    def push(self, reference: str, log_file: Path | None = None,
             progress: Callable[[int, int], None] | None = None) -> str:
        """Push ``reference`` with the user's docker credentials; every event goes to the log, and
        ``progress(bytes sent, bytes to send)`` hears of each layer's progress. Returns the
        registry digest."""
        repository, tag = split_reference(reference)
        digest, sent, totals = "", {}, {}
        with engine_errors(f"push {reference}", 3600), contextlib.ExitStack() as stack:
            log = stack.enter_context(log_file.open("a")) if log_file else None
            for event in self.api.push(repository, tag=tag or None, stream=True, decode=True):
                if log is not None:
                    log.write(json.dumps(event) + "\n")
                if event.get("error"):
                    raise EngineError(f"Pushing {reference} failed: {event['error']}")
                detail, layer = event.get("progressDetail") or {}, event.get("id", "")
                if detail.get("total"):
                    sent[layer], totals[layer] = int(detail.get("current", 0)), int(detail["total"])
                elif event.get("status") in ("Pushed", "Layer already exists", "Mounted from") and layer in totals:
                    sent[layer] = totals[layer]
                if progress is not None and totals:
                    progress(sum(sent.values()), sum(totals.values()))
                digest = (event.get("aux") or {}).get("Digest", digest)
        return digest

    def build(self, argv: list[str], env: Mapping[str, str], log_file: Path) -> None:
        """``docker build`` (the CLI: the SDK has no BuildKit): no time limit (a PyTorch build
        takes hours), but one that prints nothing for ``stall_timeout`` seconds is stopped (an
        engine that stopped answering)."""
        command.run(
            argv, env=dict(env), log_file=log_file, error=BuildError, idle_timeout=self.stall_timeout,
            failure_hint=f"The build failed; the log above (kept in {log_file}) shows the failing step.",
        )


_API_CLIENTS: dict[tuple, docker.APIClient] = {}


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
    if environ.get("DOCKER_HOST"):
        return environ["DOCKER_HOST"]
    context = environ.get("DOCKER_CONTEXT") or _current_context()
    return f"docker context {context!r}" if context not in ("", "default") else f"the default socket ({LOCAL_SOCKET})"


@contextlib.contextmanager
def engine_errors(what: str, timeout: float):
    """The SDK's typed failures as torchbake errors: a timeout, no engine, or the engine's refusal."""
    try:
        yield
    except requests.exceptions.Timeout as exc:
        raise EngineError(f"The Docker engine did not answer `docker {what}` within {timeout:g} s. Check that dockerd"
                          " is running (scripts/ensure-engine.sh starts one).") from exc
    except docker.errors.NotFound:
        raise
    except docker.errors.APIError as exc:
        raise EngineError(f"`docker {what}` failed: {exc.explanation or exc}") from exc
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise EngineError(
            f"No Docker engine answers at {where_engine(os.environ)}: {exc}\n"
            "Start one: on Debian as root, scripts/ensure-engine.sh installs docker.io and"
            " starts dockerd; elsewhere start the docker service or set DOCKER_HOST."
        ) from exc


def split_reference(reference: str) -> tuple[str, str]:
    """("repo", "tag") of NAME[:TAG] (a port in the registry part is not a tag)."""
    if "@" in reference:
        return reference, ""
    name, sep, tag = reference.rpartition(":")
    if sep and "/" not in tag:
        return name, tag
    return reference, ""


LOCAL_SOCKET = "/var/run/docker.sock"


def _current_context(environ: Mapping[str, str] | None = None) -> str:
    try:
        return json.loads((_config_dir(os.environ if environ is None else environ) / "config.json").read_text()).get(
            "currentContext", "")
    except (OSError, ValueError, AttributeError):
        return ""


def engine_is_local() -> bool:
    """Whether the engine is the default one on this machine (so its /dev and socket are here)."""
    host = os.environ.get("DOCKER_HOST", "")
    if os.environ.get("DOCKER_CONTEXT") or (host and host != f"unix://{LOCAL_SOCKET}"):
        return False
    return os.path.exists(LOCAL_SOCKET) and _current_context() in ("", "default")


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
