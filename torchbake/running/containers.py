"""Containers from built images: ``invoke run-container``, ``containers`` and ``stop-container``.

One command replaces the ``docker run -itd --privileged … --shm-size 80G IMAGE /bin/bash`` /
``docker start`` / ``docker exec -it … /bin/bash`` ritual. Everything is checked before anything
is created: the options, the image, the host's support for the device profile, the mount
sources, and whether a container of that name exists and may be reused. :func:`plan_session`
then turns the request and what exists into the exact docker commands, which ``--dry-run``
prints and a real run executes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import os
import re
import secrets
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from torchbake import __version__
from torchbake.adapters import command
from torchbake.adapters.engine import DockerClient, engine_is_local
from torchbake.checks import gpu_check
from torchbake.checks.devices import DeviceAccess, device_access, host_devices
from torchbake.configuration import platforms, validation
from torchbake.configuration.accelerators import Accelerator
from torchbake.configuration.accelerators import bundled as accelerators_declared
from torchbake.configuration.settings import Settings
from torchbake.core import output, redaction, references
from torchbake.core.errors import ConfigurationError, ContainerError, EngineError, ImageNotFoundError, clipped
from torchbake.supply_chain.manifest import recent_builds

CONTAINER_LABEL = "torchbake.container"
PROFILE_LABEL = "torchbake.device-profile"
IMAGE_LABEL = "torchbake.image"
SHM_WARNING_BELOW = 1 << 30
REPLACE_HINT = "Add --replace to remove it and create it again, or pass another --name."


@dataclass(frozen=True)
class Mount:
    """A bind mount; the host path exists (checked before anything is created)."""

    source: str
    target: str
    read_only: bool = False

    @classmethod
    def parse(cls, spec: str, origin: str) -> Mount:
        shown = clipped(spec, quoted=True)  # a path of 100,000 characters is named, not printed
        try:
            validation.mount_spec(spec)
        except ValueError as exc:
            raise ConfigurationError(f"{origin} {shown} is invalid: {exc}.") from None
        host, target, *mode = spec.split(":")
        try:
            source = Path(host).expanduser().absolute()
            exists = source.exists()
        except (OSError, RuntimeError) as exc:  # too long a name (ENAMETOOLONG), no home for ~user, a loop
            raise ConfigurationError(f"{origin} {shown}: the host path cannot be looked at"
                                     f" ({getattr(exc, 'strerror', None) or exc}). Name a file or folder that"
                                     " exists (each name in it at most 255 bytes).") from None
        if not exists:
            raise ConfigurationError(
                f"{origin} {shown}: the host path {clipped(str(source))} does not exist. Create it first or fix the"
                " path (Docker would otherwise mount an empty folder, or refuse)."
            )
        return cls(str(source), target, mode == ["ro"])

    def argument(self) -> str:
        """The ``--mount`` value. Docker reads it as one CSV record, so a field holding a comma or a
        double quote is quoted, with inner quotes doubled (paths with commas, quotes, '=' or spaces)."""
        fields = ["type=bind", f"source={self.source}", f"target={self.target}"] + (["readonly"] if self.read_only else [])
        return ",".join(_csv_field(field) for field in fields)


def _csv_field(field: str) -> str:
    if any(c in field for c in ',"\n\r') or field != field.strip():
        return '"' + field.replace('"', '""') + '"'
    return field


def parse_env(items: Sequence[str], origin: str = "--env") -> dict[str, str]:
    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigurationError(f"{origin} {item!r} is not KEY=VALUE, e.g. --env CUDA_LAUNCH_BLOCKING=1.")
        try:
            validation.env_names({key: value})
        except ValueError as exc:
            raise ConfigurationError(
                f"{origin} {item!r}: {exc}; a name has letters, digits and '_' and does not start with a digit."
            ) from None
        env[key] = value
    redaction.register_environment(env)  # --env HF_TOKEN=…: *** in the commands shown, never the value
    return env


def format_size(size: int) -> str:
    for unit, factor in (("t", 1 << 40), ("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def user_name() -> str:
    """Who runs this, as a container name may spell it (``uid1000`` where the user has no name)."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):  # a uid without a passwd entry and no LOGNAME/USER
        name = ""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-_.") or f"uid{os.getuid()}"


def default_name(image: str, user: str) -> str:
    """``torchbake/pytorch-cpu:2.13.0-py3.11`` → ``USER-torchbake-pytorch-cpu-2.13.0-py3.11``: on a
    machine shared by a team, each user's container of an image is their own (the repository's
    whole path, without its registry: ``a/pytorch`` and ``b/pytorch`` are two images)."""
    if validation.is_image_id(image):
        return f"{user}-torchbake-{image.removeprefix('sha256:')[:12]}"
    repository, suffix = _split(image)
    parts = repository.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]  # the registry's host
    return f"{user}-{'-'.join(parts)}-{suffix}"


def earlier_name(image: str) -> str:
    """``torchbake/pytorch-cpu:2.13.0-py3.11`` → ``pytorch-cpu-2.13.0-py3.11``: the default name
    earlier torchbake versions gave everyone's container of an image."""
    if validation.is_image_id(image):
        return f"torchbake-{image.removeprefix('sha256:')[:12]}"
    repository, suffix = _split(image)
    return f"{repository.rsplit('/', 1)[-1]}-{suffix}"


def _split(image: str) -> tuple[str, str]:
    """The repository and what names the image in it (the start of its digest, or its tag)."""
    repository, tag, digest = references.split(image)
    return repository, (digest.split(":")[-1][:12] if digest else tag or "latest")


# -- the request and its plan ----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    """What the user asked for; ``explicit`` names the creation options given on the command line
    (those are compared with an existing container's)."""

    image: str
    name: str
    shm_size: str
    privileged: bool
    env: Mapping[str, str]
    mounts: tuple[Mount, ...]
    workdir: str
    device_profile: str
    shell: str
    network: str
    platform: str  # "" = this host's
    command: str
    remove: bool
    replace: bool
    interactive: bool  # a terminal on both ends: -it
    forward_stdin: bool  # standard input is a pipe or file the shell or command reads
    explicit: frozenset[str] = frozenset()
    keep: bool = False  # a --command's container stays as it is after it (created, or started)
    gpu_check: bool = True  # compare the host's GPUs with the image's arch list before creating
    accelerators: Mapping[str, Accelerator] = field(default_factory=accelerators_declared)  # their device access

    def one_off(self, exists: bool) -> bool:
        """A container for this run alone, removed when it ends: --rm, or one command (--command,
        or a script on standard input) for which no container exists (unless --keep or --replace
        ask for one that stays)."""
        return self.remove or (self.one_command and not self.keep and not self.replace and not exists)

    @property
    def one_command(self) -> bool:
        """It runs one command (--command, or what standard input holds), not a shell a user types in."""
        return bool(self.command) or not self.interactive

    @classmethod
    def from_settings(cls, settings: Settings, image: str, *, extra_env: Sequence[str] = (),
                      extra_mounts: Sequence[str] = (), **fields: Any) -> RunRequest:
        """The request from the [run] options plus the command line's --env and --mount, which add
        to ``run.env`` and ``run.mounts``. Every value is checked here, before the engine is asked."""
        options = settings.run
        try:
            validation.image_or_id(image)
        except ValueError as exc:
            raise ConfigurationError(f"IMAGE {image!r} is invalid: {exc}.") from None
        env = {**options.env, **parse_env(extra_env)}
        mounts = tuple(Mount.parse(m, "run.mounts") for m in options.mounts)
        mounts += tuple(Mount.parse(m, "--mount") for m in extra_mounts)
        return cls(image=image, name=options.name, shm_size=options.shm_size, privileged=options.privileged,
                   env=env, mounts=mounts, workdir=options.workdir, device_profile=options.device_profile,
                   shell=options.shell, network=options.network, accelerators=settings.accelerators,
                   platform=platforms.parse(options.platform).name if options.platform else "",
                   gpu_check=options.gpu_check, **fields)


@dataclass(frozen=True)
class ContainerSpec:
    """How the session's container is created. The same values give the ``docker run`` flags
    (what --dry-run prints, and a terminal session runs) and the Engine API's create call."""

    image: str
    name: str
    shell: str
    labels: Mapping[str, str]
    shm: int
    privileged: bool
    devices: DeviceAccess
    env: Mapping[str, str]
    mounts: tuple[Mount, ...]
    workdir: str
    network: str
    platform: str = ""

    def flags(self) -> list[str]:
        flags = ["--name", self.name, "--hostname", self.hostname]
        flags += ["--platform", self.platform] if self.platform else []
        for key, value in self.labels.items():
            flags += ["--label", f"{key}={value}"]
        flags += ["--shm-size", format_size(self.shm)]
        flags += ["--privileged"] if self.privileged and not self.devices.privileged else []
        flags += self.devices.flags()
        for key, value in self.env.items():
            flags += ["--env", f"{key}={value}"]
        for mount in self.mounts:
            flags += ["--mount", mount.argument()]
        flags += ["--workdir", self.workdir] if self.workdir else []
        flags += ["--network", self.network] if self.network else []
        return flags

    @property
    def hostname(self) -> str:
        return self.name.replace("_", "-").replace(".", "-")[:63].rstrip("-")

    def create_options(self) -> dict[str, Any]:
        """Keyword arguments of the SDK's ``create_container``, with ``host_config`` those of its
        ``create_host_config``."""
        host = {**self.devices.host_config(), "shm_size": self.shm, "network_mode": self.network or None,
                "privileged": self.privileged or self.devices.privileged,
                "mounts": [*self.devices.mount_entries(),
                           *({"Type": "bind", "Source": m.source, "Target": m.target, "ReadOnly": m.read_only}
                             for m in self.mounts)] or None}
        return {"name": self.name, "hostname": self.hostname, "labels": dict(self.labels), "entrypoint": [self.shell],
                **({"platform": self.platform} if self.platform else {}),
                "environment": {**self.devices.env, **self.env} or None, "working_dir": self.workdir or None,
                "host_config": host}


@dataclass(frozen=True)
class Session:
    """What run-container does, in order: remove the container being replaced, start a stopped
    one or create one, then run the shell or command in it; or, ``throwaway``, run one container
    for the command that is removed when it ends. ``setup`` and ``attached`` are the same steps as
    docker commands (printed by --dry-run; the attached one runs as such for a terminal)."""

    binary: str
    name: str
    profile: str
    notes: tuple[str, ...]
    container: ContainerSpec
    shell_args: tuple[str, ...]
    interactive: bool
    forward_stdin: bool
    throwaway: bool = False
    replace: bool = False
    start: bool = False
    stop_after: bool = False  # started for a --command: stopped again when it ends
    create: bool = False
    exec_env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    exec_workdir: str = ""

    @property
    def stream_flags(self) -> tuple[str, ...]:
        return ("--interactive", "--tty") if self.interactive else ("--interactive",) if self.forward_stdin else ()

    @property
    def setup(self) -> tuple[tuple[str, ...], ...]:
        steps = [(self.binary, "rm", "--force", self.name)] if self.replace else []
        steps += [(self.binary, "start", self.name)] if self.start else []
        if self.create:
            steps.append((self.binary, "run", "--detach", "--interactive", "--tty", *self.container.flags(),
                          "--entrypoint", self.container.shell, self.container.image))
        return tuple(steps)

    @property
    def attached(self) -> tuple[str, ...]:
        if self.throwaway:
            return (self.binary, "run", "--rm", *self.stream_flags, *self.container.flags(), "--entrypoint",
                    self.container.shell, self.container.image, *self.shell_args[1:])
        exec_flags = list(self.stream_flags)
        for key, value in self.exec_env.items():
            exec_flags += ["--env", f"{key}={value}"]
        exec_flags += ["--workdir", self.exec_workdir] if self.exec_workdir else []
        return (self.binary, "exec", *exec_flags, self.name, *self.shell_args)


def shm_bytes(request: RunRequest, memory: int) -> int:
    """``auto``: half the engine host's memory in whole GiB (what /dev/shm gets on a Linux host)."""
    if request.shm_size == "auto":
        return max(1, memory // 2 >> 30) << 30
    return validation.byte_size(request.shm_size)


def plan_session(request: RunRequest, *, binary: str, image_id: str, name: str, profile: str,
                 devices: DeviceAccess, shm: int, existing: Mapping[str, Any] | None) -> Session:
    """The steps for this request given what exists (a pure function: --dry-run prints it)."""
    labels = {CONTAINER_LABEL: "true", IMAGE_LABEL: request.image, PROFILE_LABEL: profile,
              "torchbake.version": __version__}
    container = ContainerSpec(image=request.image, name=name, shell=request.shell, labels=labels, shm=shm,
                              privileged=request.privileged, devices=devices, env=request.env, mounts=request.mounts,
                              workdir=request.workdir, network=request.network, platform=request.platform)
    shell_args = (request.shell, "-c", request.command) if request.command else (request.shell,)
    session = Session(binary, name, profile, (), container, shell_args, request.interactive, request.forward_stdin,
                      exec_env=request.env, exec_workdir=request.workdir)
    notes: list[str] = []
    if request.one_off(existing is not None):
        if existing is not None:
            raise ContainerError(
                f"A container named {name!r} already exists; --rm runs a new, throwaway container."
                " Pass another --name, or leave --name out."
            )
        removed = "with --rm" if request.remove else "--keep keeps it"
        notes.append(f"Running a throwaway container {name} from {request.image} ({_describe(profile, shm)});"
                     f" it is removed when the command ends ({removed}).")
        return dataclasses.replace(session, notes=tuple(notes), throwaway=True)

    steps: dict[str, bool] = {}
    if existing is not None:
        state = (existing.get("State") or {}).get("Status", "")
        if (existing.get("Config", {}).get("Labels") or {}).get(CONTAINER_LABEL) != "true":
            # as stop-container: a container torchbake did not create is never started, entered or replaced
            raise ContainerError(
                f"Container {name!r} was not created by torchbake (it has no {CONTAINER_LABEL} label), so"
                f" run-container leaves it alone. Pass another name, e.g. --name {name}-torchbake,"
                f" or use it yourself with `docker start {name}` and `docker exec -it {name} bash`."
            )
        problem = _reuse_problem(request, existing, image_id=image_id, profile=profile, shm=shm, devices=devices)
        if request.replace or problem:
            if not request.replace:
                raise ContainerError(f"{problem}\n{REPLACE_HINT}")
            notes.append(f"Replacing container {name} ({state}): {problem or 'asked with --replace'}.")
            steps["replace"] = True
            existing = None
        elif state == "running":
            notes.append(f"Opening a shell in running container {name}." if not request.command
                         else f"Running the command in running container {name}.")
        elif state in ("exited", "created"):
            steps["start"] = True
            if request.one_command and not request.keep:
                notes.append(f"Starting stopped container {name} for the command; it is stopped again when the"
                             " command ends (--keep leaves it running).")
                steps["stop_after"] = True
            else:
                notes.append(f"Starting stopped container {name}.")
        elif state == "paused":
            raise ContainerError(f"Container {name!r} is paused. Resume it with `docker unpause {name}`, or {REPLACE_HINT[0].lower()}{REPLACE_HINT[1:]}")
        else:
            raise ContainerError(
                f"Container {name!r} is {state or 'in an unknown state'}; `docker logs {name}` may say why. {REPLACE_HINT}"
            )
    if existing is None:
        notes.append(f"Creating container {name} from {request.image} ({_describe(profile, shm)}).")
        steps["create"] = True
    return dataclasses.replace(session, notes=tuple(notes), **steps)


def _describe(profile: str, shm: int) -> str:
    return f"device profile {profile}, /dev/shm {format_size(shm)}"


def _reuse_problem(request: RunRequest, existing: Mapping[str, Any], *, image_id: str, profile: str, shm: int,
                   devices: DeviceAccess) -> str:
    """Why the existing container is not what was asked for ("" if it is)."""
    name = existing.get("Name", "").lstrip("/")
    if existing.get("Image") != image_id:
        created_from = (existing.get("Config") or {}).get("Image", "")
        if created_from == request.image:
            return (f"Container {name!r} was created from an earlier {request.image} (image {existing.get('Image', '')[:19]});"
                    f" that name now means image {image_id[:19]}, built since.")
        return (f"Container {name!r} was created from image {created_from!r}, not {request.image!r}"
                " (a different image).")
    host = existing.get("HostConfig") or {}
    differences = []
    if "shm_size" in request.explicit and host.get("ShmSize") != shm:
        differences.append(f"--shm-size: it has {format_size(int(host.get('ShmSize') or 0))}, asked {format_size(shm)}")
    wanted_privileged = request.privileged or devices.privileged
    if "privileged" in request.explicit and bool(host.get("Privileged")) != wanted_privileged:
        differences.append(f"--privileged: it has {bool(host.get('Privileged'))}, asked {wanted_privileged}")
    labels = (existing.get("Config") or {}).get("Labels") or {}
    if "device_profile" in request.explicit and labels.get(PROFILE_LABEL, "cpu") != profile:
        differences.append(f"--device-profile: it has {labels.get(PROFILE_LABEL, 'none')}, asked {profile}")
    if "mounts" in request.explicit:
        have = {(m.get("Source"), m.get("Destination"), not m.get("RW", True)) for m in existing.get("Mounts") or []}
        for mount in request.mounts:
            if (mount.source, mount.target, mount.read_only) not in have:
                differences.append(f"--mount {mount.source}:{mount.target}: not mounted in it")
    if differences:
        return (f"Container {name!r} exists, but was created with other settings; these apply only when a"
                " container is created:\n  " + "\n  ".join(differences))
    return ""


# -- doing it --------------------------------------------------------------------------------------


def prepare_session(client: DockerClient, request: RunRequest) -> Session:
    """Check everything against the engine and the host, then plan; nothing is created here."""
    client.check_engine()
    foreign = platforms.parse(request.platform) if request.platform else None
    if foreign == platforms.host():
        foreign = None
    if foreign is not None and (why := platforms.why_not_here(foreign)):
        raise ContainerError(f"Cannot run {foreign.name} containers on this {platforms.host().machine} host: {why}.")
    image = client.inspect_image(request.image)
    if image is None:
        raise ImageNotFoundError(request.image)
    labels = (image.get("Config") or {}).get("Labels") or {}
    profile = request.device_profile or labels.get("torchbake.profile") or "cpu"
    info = client.engine_info()
    shm = shm_bytes(request, int(info.get("MemTotal") or 0))
    memory = int(info.get("MemTotal") or 0)
    if shm < SHM_WARNING_BELOW:
        output.channel().say(f"warning: --shm-size {request.shm_size} is under 1 GB. DataLoader workers pass batches"
             " through /dev/shm and fail with 'bus error' or 'No space left on device' when it fills.")
    elif memory and shm > memory:
        output.channel().say(f"warning: --shm-size {request.shm_size} is more than the engine host's memory"
             f" ({memory / (1 << 30):.0f} GiB); /dev/shm lives in memory, so filling it would end in the OOM killer"
             " long before the limit. Half the memory (--shm-size auto) is the usual size.")
    devices = device_access(profile, host_devices(info, request.accelerators.values()), request.accelerators)
    clash = sorted(set(devices.mounts) & {mount.target for mount in request.mounts})
    if clash:  # the engine refuses two mounts at one place
        raise ConfigurationError(f"The mount at {clash[0]} (--mount or run.mounts) is one the {profile} device profile"
                                 f" already makes (the host's {clash[0]}, read-only): leave yours out.")
    check = request.accelerators[profile].devices.check
    if request.gpu_check and check and engine_is_local():  # the host's GPUs are the engine's
        for note in gpu_check.before_run(check, request.image, labels, gpu_check.host_gpus(check)):
            output.channel().say(note)
    suffix = foreign.suffix if foreign else ""
    name = request.name or default_name(request.image, user_name()) + suffix
    if foreign is not None:
        output.channel().say(f"torchbake: {foreign.name} on this {platforms.host().machine} host runs emulated (QEMU):"
                             " several times slower than natively.")
    existing = None if request.remove and not request.name else client.inspect_container(name)
    if request.one_off(existing is not None) and not request.name:
        name = f"{name}-{secrets.token_hex(3)}"  # one-off runs side by side each have their own
    elif existing is None and not request.name:
        output.channel().say(f"torchbake: container {name} is yours: the default name is your user name, the image's"
                             " repository and its tag; --name NAME (or [run] name) names it otherwise.")
        earlier = earlier_name(request.image) + suffix
        if (((client.inspect_container(earlier) or {}).get("Config") or {}).get("Labels") or {}).get(CONTAINER_LABEL):
            output.channel().say(f"torchbake: container {earlier}, named as earlier torchbake versions named"
                                 f" everyone's, exists; `--name {earlier}` opens it.")
    return plan_session(request, binary=client.binary, image_id=image["Id"], name=name, profile=profile,
                        devices=devices, shm=shm, existing=existing)


def run_session(client: DockerClient, session: Session) -> int:
    """Do the steps; the exit status is the shell's or the command's. Everything goes through the
    Engine API except a terminal session, which is the ``docker exec -it`` / ``run -it`` shown."""
    for argv in session.setup:
        command.show_command(argv)
    if session.replace:
        client.remove_container(session.name, force=True)
    if session.start:
        client.start_container(session.name)
    if session.create:  # kept running by its shell on a terminal of its own, as `docker run -dit`
        with _platform_held(session.container):
            client.start_container(client.create_container(session.container.image, tty=True, stdin_open=True,
                                                           detach=True, **session.container.create_options()))
    try:
        return _attach(client, session)
    finally:
        if session.stop_after:
            client.stop_container(session.name, 2)  # its shell, PID 1, ignores SIGTERM: no use waiting 10 s


def _attach(client: DockerClient, session: Session) -> int:
    """The shell or command of the session, in its container; its exit status."""
    if session.interactive:
        return command.run_attached(session.attached)
    command.show_command(session.attached)
    if session.throwaway:
        with _platform_held(session.container):
            created = client.create_container(session.container.image, command=list(session.shell_args[1:]),
                                              stdin_open=session.forward_stdin, **session.container.create_options())
        return client.run_streams(created, stdin=session.forward_stdin)
    if session.exec_workdir and not client.is_folder(session.name, session.exec_workdir):
        raise ConfigurationError(
            f"run.workdir = {session.exec_workdir!r} (--workdir or [run] workdir): there is no such folder in"
            f" container {session.name}, so the command was not run. Choose a folder that exists there, or leave"
            " --workdir out (the image's own working folder).")
    return client.exec_streams(session.name, session.shell_args, env=session.exec_env, workdir=session.exec_workdir,
                               stdin=session.forward_stdin)


@contextlib.contextmanager
def _platform_held(container: ContainerSpec):
    """The engine's "No such image" for an image that exists (prepare_session saw it) but not for
    the --platform asked: said as such."""
    try:
        yield
    except EngineError as exc:
        if not (container.platform and "No such image" in str(exc)):
            raise
        raise ContainerError(f"{container.image} holds no {container.platform} image. Build one with `invoke build"
                             f" --platform {container.platform}` (or several: --platform linux/amd64,linux/arm64),"
                             " or leave --platform out.") from None


def most_recent_image(client: DockerClient, log_dir: Path) -> str:
    """The image of the newest successful build recorded on this host that the engine still has."""
    builds = recent_builds(log_dir)
    if builds:
        client.check_engine()
    for document in builds:
        if client.inspect_image(document["image"]) is not None:
            return document["image"]
    gone = f" (the {len(builds)} recorded are no longer on the engine)" if builds else ""
    raise ConfigurationError(
        f"No IMAGE given, and this host has no successful build to run{gone}. Build one with"
        " `invoke build --release`, or name an image: `invoke run-container IMAGE`."
    )


def list_containers(client: DockerClient) -> list[dict[str, str]]:
    """Containers torchbake created: name, image, status, device profile, /dev/shm, created."""
    rows = []
    for entry in client.containers(f"{CONTAINER_LABEL}=true"):
        labels = entry.get("Labels") or {}
        created = datetime.fromtimestamp(int(entry.get("Created") or 0)).strftime("%Y-%m-%d %H:%M:%S")
        rows.append({"name": (entry.get("Names") or ["/"])[0].lstrip("/"), "image": labels.get(IMAGE_LABEL, entry.get("Image", "")),
                     "status": entry.get("Status", ""), "profile": labels.get(PROFILE_LABEL, ""), "created": created})
    return sorted(rows, key=lambda row: row["name"])


def stop_container(client: DockerClient, name: str, *, remove: bool, timeout: int) -> None:
    """Stop (and with ``remove``, remove) a container torchbake created."""
    client.check_engine()
    existing = client.inspect_container(name)
    if existing is None:
        names = ", ".join(row["name"] for row in list_containers(client)) or "none"
        raise ConfigurationError(f"No container named {name!r}. Containers torchbake created: {names}.")
    if ((existing.get("Config") or {}).get("Labels") or {}).get(CONTAINER_LABEL) != "true":
        raise ContainerError(
            f"Container {name!r} was not created by torchbake, so stop-container leaves it alone;"
            f" use `docker stop {name}` if you mean it."
        )
    # the container by the name the engine gives it: "/NAME" (as its inspect writes names) or an id
    # prefix finds the container, but the engine's stop call takes no slash
    name = (existing.get("Name") or name).lstrip("/")
    state = (existing.get("State") or {}).get("Status", "")
    if state in ("running", "paused", "restarting"):
        client.stop_container(name, timeout)
        output.channel().say(f"Stopped {name}.")
    else:
        output.channel().say(f"{name} was not running ({state}).")
    if remove:
        client.remove_container(name)
        output.channel().say(f"Removed {name}.")


def standard_input_kind(fd: int = 0) -> str:
    """``terminal``, ``data`` (a pipe or file to forward) or ``none`` (closed, /dev/null)."""
    try:
        if os.isatty(fd):
            return "terminal"
        mode = os.fstat(fd).st_mode
    except OSError:
        return "none"
    return "data" if stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISSOCK(mode) else "none"
