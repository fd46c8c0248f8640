"""The docker command-line client, for what only it does: BuildKit builds (the SDK has none,
docker/docker-py#2230) and interactive terminals.

torchbake builds with ``docker buildx build`` (the buildx plugin; on Docker 23+ ``docker build``
is buildx too): the registry cache of every stage (mode=max) and attestations need it. A client
without the plugin (Docker 20.10's own ``docker build``, a newer client with no plugin installed)
can still run containers; for a build torchbake says, before any work, what to
install or which binary to pass with ``--docker``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from torchbake.adapters import command
from torchbake.core import data
from torchbake.core.errors import BuildError, CommandError, EngineError
from torchbake.core.files import read_back_object, write_atomically

STALL_TIMEOUT = 3600.0  # seconds a build may print nothing before it is stopped
FALLBACK_CLIENTS = ("/usr/bin/docker",)
# Docker's predefined proxy build args: passed by name only (the client reads the values from its
# environment, so credentials in a proxy URL stay out of our logs), and kept out of the image's
# history by Docker. Other variables are never passed implicitly.
PROXY_BUILD_ARGS = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "FTP_PROXY", "ftp_proxy",
                    "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy")
NOT_DOCKER = "it is not a docker client"
INSTALL_HINT = (
    "torchbake builds with Docker >= 26 and its buildx plugin: install the plugin (Debian trixie,"
    " Ubuntu 24.04: apt-get install docker-buildx; elsewhere Docker's own docker-buildx-plugin)"
    + (f", or run `bash {data.ENGINE_SCRIPT}` as root, which installs both" if data.ENGINE_SCRIPT.is_file() else "")
    + "; or pass a client that has it with --docker."
)


def compression_options(compression: str) -> str:
    """The exporter options that give every layer the same blob on any engine, for the image and
    for its registry cache alike."""
    return f"compression={compression},oci-mediatypes=true,force-compression=true"


@dataclass(frozen=True)
class DockerCLI:
    binary: str
    version: str
    build_mode: str  # "buildx", or "none" (can run containers, not build)
    environ: Mapping[str, str] = field(default_factory=dict)
    stall_timeout: float = STALL_TIMEOUT  # seconds a build may go without printing a line ([build] stall_timeout)
    builder: str = ""  # the buildx builder that runs builds ([build] builder); "" = buildx's current one
    compression: str = "zstd"  # of the layers a build makes ([build] compression)

    def build_command(
        self,
        *,
        context: Path,
        dockerfile: Path,
        tag: str,
        build_args: Mapping[str, str] = {},  # noqa: B006 - read-only
        labels: Mapping[str, str] = {},  # noqa: B006
        secrets: Sequence[tuple[str, Path]] = (),
        target: str | None = None,
        no_cache: bool = False,
        network: str = "",
        cache_from: Sequence[str] = (),
        cache_to: Sequence[str] = (),
        platform: str = "",
        named_contexts: Mapping[str, str] = {},  # noqa: B006
    ) -> tuple[list[str], dict[str, str]]:
        """The exact ``docker buildx build`` argument list and the variables it needs.

        No BuildKit provenance, pushed or not: it holds the build's time and id, so the same inputs
        would give a new index, and a new tag digest, every build. torchbake's own SBOMs and
        provenance go beside the image as referrers (torchbake.supply_chain.attestations). ``platform``: the one
        platform the image is for ("" = the engine's own). ``named_contexts``: NAME → source of each
        ``--build-context`` (the context's program layouts, torchbake.inputs.context.named_contexts)."""
        argv = [self.binary, "buildx", "build", self.output_flag(), "--provenance=false"]
        env: dict[str, str] = {}
        argv += ["--builder", self.builder] if self.builder else []
        argv += ["--platform", platform] if platform else []
        argv += ["--progress=plain", "--file", str(dockerfile), "--tag", tag]
        argv += ["--target", target] if target else []
        argv += ["--no-cache"] if no_cache else []
        argv += ["--network", network] if network else []
        argv += self.cache_flags(cache_from, cache_to)
        for key, value in build_args.items():
            argv += ["--build-arg", f"{key}={value}"]
        argv += [arg for key in PROXY_BUILD_ARGS if self.environ.get(key) for arg in ("--build-arg", key)]
        for key, value in labels.items():
            argv += ["--label", f"{key}={value}"]
        for secret_id, path in secrets:
            argv += ["--secret", f"id={secret_id},src={path}"]
        for name, source in named_contexts.items():
            argv += ["--build-context", f"{name}={source}"]
        argv.append(str(context))
        return argv, env

    def output_flag(self) -> str:
        """The image into this engine (``--load``), every layer compressed as ``[build]
        compression`` says, described with OCI media types: a zstd layer in a Docker schema 2
        manifest has a media type no engine unpacks (`docker load` elsewhere fails with
        "mismatched image rootfs and manifest layers"). Forced onto every layer, the base's and
        the cached ones too: otherwise a layer keeps whichever compression its blob has on this
        engine (a gzip base here, the registry cache's zstd copy on a fresh engine), and the same
        inputs give other digests on other engines."""
        return f"--output=type=docker,{compression_options(self.compression)}"

    def cache_flags(self, cache_from: Sequence[str], cache_to: Sequence[str]) -> list[str]:
        """The build cache's flags: buildx ``--cache-from``/``--cache-to`` specs (a plain image
        reference is a registry cache; "inline" is the cache in the image itself)."""
        flags: list[str] = []
        for source in cache_from:
            flags += ["--cache-from", source if "=" in source else f"type=registry,ref={source}"]
        for target in cache_to:
            flags += ["--cache-to", "type=inline" if target == "inline" else target]
        return flags

    def build(self, argv: list[str], env: Mapping[str, str], log_file: Path) -> None:
        """Run a build: no time limit (a PyTorch build takes hours), but one that prints nothing
        for ``stall_timeout`` seconds is stopped (an engine that stopped answering)."""
        command.run(
            argv, env=dict(env), log_file=log_file, error=BuildError, idle_timeout=self.stall_timeout,
            failure_hint=f"The build failed; the log above (kept in {log_file}) shows the failing step.",
        )


def ask_client(binary: str, *args: str, timeout: float) -> command.CommandResult:
    """``binary ARGS`` run quietly, its output captured and its exit status left to the caller."""
    return command.run([binary, *args], capture=True, check=False, echo=False, timeout=timeout)


def check_builder(client: DockerCLI, timeout: float = 20.0) -> None:
    """The builder of ``client`` exists and buildx will build with it here. A builder of the
    docker driver is a docker context's engine, which buildx builds with only where that context
    is the current one (and then it is the engine torchbake uses too); the docker-container,
    remote and kubernetes drivers build anywhere and load their image into this engine."""
    ask = functools.partial(ask_client, client.binary, timeout=timeout)
    inspected = ask("buildx", "inspect", client.builder)
    if inspected.returncode != 0:
        raise EngineError(f"No buildx builder {client.builder!r} ([build] builder / --builder):"
                          f" {inspected.output.strip()[:300]}. `{client.binary} buildx ls` lists the builders;"
                          " `docker buildx create` makes one.")
    fields = dict(line.split(":", 1) for line in inspected.output.splitlines() if ":" in line)
    if fields.get("Driver", "").strip() != "docker":
        return
    current = ask("context", "show").output.strip()
    if client.builder != current:
        raise EngineError(
            f"Builder {client.builder!r} is the docker driver of context {client.builder!r}, and buildx builds with it"
            f" only where that context is the current one (here it is {current!r}). Make its engine the one for the"
            f" whole run (DOCKER_CONTEXT={client.builder}, DOCKER_HOST unset), or use a builder that loads its image"
            " into this engine (drivers docker-container, remote, kubernetes).")


_VERSION_RE = re.compile(r"version\s+v?(\d+)\.(\d+)\.?(\d+)?", re.IGNORECASE)


def probe_client(binary: str, environ: Mapping[str, str] | None = None, *, for_build: bool = True,
                 timeout: float = 20.0) -> DockerCLI | str:
    """A usable client, or the reason this binary cannot build with BuildKit (``for_build``: a
    client that cannot build is still usable for running containers)."""
    ask = functools.partial(ask_client, binary, timeout=timeout)

    with ThreadPoolExecutor(max_workers=2) as pool:  # both at once: every task starts with this
        buildx = pool.submit(ask, "buildx", "version") if for_build else None
        try:
            result = ask("--version")
        except CommandError as exc:
            return str(exc)
    match = _VERSION_RE.search(result.output)
    if result.returncode != 0 or not match:
        first = next((line.strip() for line in result.output.splitlines() if line.strip()), "")
        printed = f"printed {first[:120]!r}" if first else "printed nothing"
        return f"{NOT_DOCKER}: `{binary} --version` {printed}, where a docker client prints 'Docker version …'"
    version = ".".join(g or "0" for g in match.groups())
    client = DockerCLI(binary=binary, version=version, build_mode="none", environ=environ or {})
    if buildx is None:
        return client
    if buildx.exception() is None and buildx.result().returncode == 0:
        return DockerCLI(binary, version, "buildx", client.environ)
    return f"client {version} has no buildx plugin (`{binary} buildx version` failed), so it cannot build"


# Where the docker CLI looks for its plugins besides $DOCKER_CONFIG/cli-plugins (Docker 26's list).
PLUGIN_FOLDERS = ("/usr/local/lib/docker/cli-plugins", "/usr/local/libexec/docker/cli-plugins",
                  "/usr/lib/docker/cli-plugins", "/usr/libexec/docker/cli-plugins")
KEPT_PROBES = "docker-clients.json"  # in the cache folder: probe_client's answers, by what they depend on
PROBE_SETTINGS = ("DOCKER_CONFIG", "DOCKER_CLI_EXPERIMENTAL")  # the variables `--version`, `buildx version` read


def _probe_identity(binary: str, environ: Mapping[str, str], for_build: bool) -> str:
    """What a probe's answer depends on, hashed: the binary's file and, for a build, the buildx
    plugin it would load (the user's and the system's plugin folders, the CLI's configuration) and
    the settings the client reads. Any change to any of them (a file rewritten in place too: its
    change time): a new identity, probed again. Hashed: the record holds no value of the caller's."""
    home = environ.get("HOME") or os.path.expanduser("~")
    config = Path(environ.get("DOCKER_CONFIG") or Path(home) / ".docker")
    files = [binary]
    if for_build:
        files += [str(config / "config.json"), str(config / "cli-plugins" / "docker-buildx"),
                  *(f"{folder}/docker-buildx" for folder in PLUGIN_FOLDERS)]

    def identity(path: str) -> list[int] | None:
        try:
            info = os.stat(path)
        except OSError:
            return None
        return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_mode]

    settings = [environ.get(name, "") for name in PROBE_SETTINGS]
    text = json.dumps([os.path.realpath(binary), for_build, [identity(f) for f in files], settings])
    return hashlib.sha256(text.encode()).hexdigest()


def kept_probe(binary: str, environ: Mapping[str, str], *, for_build: bool, timeout: float,
               kept: Path | None, writes: bool = True) -> DockerCLI | str:
    """:func:`probe_client`, its answer kept in the folder ``kept`` (the cache folder; None: not
    kept; ``writes`` false: read, never written, as in a dry run): a client that answered is not
    asked again (two programs started by every command) until the binary, its buildx plugin or
    its settings change; a new answer is written when the command succeeds (:func:`keep_answers`).
    A client that failed is asked again every time, so that its error is today's. Deleting the
    file makes every client asked again."""
    if kept is None:
        return probe_client(binary, environ, for_build=for_build, timeout=timeout)
    record = kept / KEPT_PROBES
    identity = _probe_identity(binary, environ, for_build)
    answer = _TO_KEEP.get(record, {}).get(identity) or (read_back_object(record) or {}).get(identity)
    if isinstance(answer, dict) and {"version", "build_mode"} <= answer.keys():
        return DockerCLI(binary, str(answer["version"]), str(answer["build_mode"]), environ)
    probed = probe_client(binary, environ, for_build=for_build, timeout=timeout)
    if isinstance(probed, DockerCLI) and writes:
        _TO_KEEP.setdefault(record, {})[identity] = {"version": probed.version, "build_mode": probed.build_mode}
    return probed


_TO_KEEP: dict[Path, dict[str, dict[str, str]]] = {}  # the answers this run learnt, until it succeeds


def keep_answers(*, write: bool = True) -> None:
    """Write the answers this run learnt into their records when its command succeeded (``write``);
    forget them either way (a command that fails, bad input among them, leaves the cache folder
    as it found it)."""
    for record, learnt in _TO_KEEP.items() if write else ():
        if not record.parent.is_dir():
            continue
        answers = {key: value for key, value in (read_back_object(record) or {}).items() if key not in learnt}
        answers.update(learnt)
        with contextlib.suppress(OSError):  # a folder that takes no file: asked again next time
            write_atomically(record, json.dumps(dict(list(answers.items())[-16:]), indent=1) + "\n")
    _TO_KEEP.clear()


def candidate_clients(path_env: str) -> list[str]:
    """Every ``docker`` executable on PATH, in order, then the known fallbacks."""
    found: list[str] = []
    for candidate in [os.path.join(folder or ".", "docker") for folder in path_env.split(os.pathsep)] + list(
            FALLBACK_CLIENTS):
        if (os.access(candidate, os.X_OK) and os.path.isfile(candidate)
                and os.path.realpath(candidate) not in map(os.path.realpath, found)):
            found.append(candidate)
    return found


def find_client(choice: str, environ: Mapping[str, str], *, for_build: bool = True, timeout: float = 20.0,
                kept: Path | None = None, writes: bool = True) -> DockerCLI:
    """The client named by ``choice`` ("auto" = the first BuildKit-capable one found; without
    ``for_build``, the first that answers at all); ``kept``, ``writes``: where the probes' answers
    are kept, and whether a new one is written (:func:`kept_probe`)."""
    if choice != "auto":
        binary = choice if os.sep in choice else (shutil.which(choice) or choice)
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            raise EngineError(
                f"Docker client {choice!r} (build.docker / --docker) was not found or is not executable."
                " Pass a name on PATH or a path, or 'auto'."
            )
        probed = kept_probe(binary, environ, for_build=for_build, timeout=timeout, kept=kept, writes=writes)
        if isinstance(probed, str):
            hint = ("Pass a docker client with --docker (build.docker), or 'auto'." if probed.startswith(NOT_DOCKER)
                    else INSTALL_HINT)
            raise EngineError(f"{binary}: {probed}. {hint}")
        return probed
    reasons = []
    candidates = candidate_clients(environ.get("PATH", os.defpath))
    for binary in candidates:  # one after another: the first usable wins, and the others are not started
        probed = kept_probe(binary, environ, for_build=for_build, timeout=timeout, kept=kept, writes=writes)
        if isinstance(probed, DockerCLI):
            return probed
        reasons.append(f"  {binary}: {probed}")
    if not reasons:
        raise EngineError(
            "No docker client was found on PATH. Install one (Debian: apt-get install docker.io;"
            f" or: {data.engine_hint()})."
        )
    raise EngineError("No docker client that can build with buildx was found:\n" + "\n".join(reasons)
                      + f"\n{INSTALL_HINT}")
