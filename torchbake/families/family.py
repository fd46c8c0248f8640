"""What an accelerator family whose parts are code declares (:class:`Family`, one module each in
:mod:`torchbake.families`): its arch list (:class:`ArchList`: an option, an ENV, a label), and
as data what its containers get from the engine's host: the host's devices (:class:`HostDevices`),
the access a container is given (:class:`DeviceAccess`, rendered as ``docker run`` flags and as
the Engine API's host configuration), a GPU of the host (:class:`HostGpu`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchbake.families.gpu_probe import Judgement


@dataclass(frozen=True)
class HostDevices:
    """What the engine's host offers the device profiles (seen by torchbake.checks.devices.host_devices)."""

    runtimes: tuple[str, ...]
    local: bool  # the engine runs here, so its /dev can be looked at
    nodes: Mapping[str, int] = field(default_factory=dict)  # device path → group id
    paths: frozenset[str] = frozenset()  # the declared mounts' host paths that exist here

    def has(self, *prefixes: str) -> bool:
        return any(node.startswith(prefixes) for node in self.nodes)

    def matches(self, pattern: str) -> bool:
        return bool(self.matching(pattern))

    def matching(self, pattern: str) -> list[str]:
        """The host's nodes ``pattern`` (``/dev/davinci[0-9]*``) names, sorted: its ``*`` and
        ``[0-9]`` within one path component, as the host was searched (a glob)."""
        return sorted(node for node in self.nodes if PurePosixPath(node).match(pattern))


@dataclass(frozen=True)
class DeviceAccess:
    """The devices, groups and privileges a profile's container gets."""

    gpus: bool = False  # every NVIDIA GPU (--gpus all)
    devices: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    group_add: tuple[str, ...] = ()
    privileged: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[str, ...] = ()  # host paths bind-mounted read-only at the same path (a driver's)

    def flags(self) -> tuple[str, ...]:
        """As ``docker run`` flags."""
        args = ["--gpus", "all"] if self.gpus else []
        for flag, values in (("--device", self.devices), ("--security-opt", self.security_opt),
                             ("--group-add", self.group_add)):
            for value in values:
                args += [flag, value]
        args += ["--privileged"] if self.privileged else []
        for key, value in self.env.items():
            args += ["--env", f"{key}={value}"]
        for path in self.mounts:
            args += ["--mount", f"type=bind,source={path},target={path},readonly"]
        return tuple(args)

    def mount_entries(self) -> list[dict[str, Any]]:
        """The mounts as the Engine API's ``HostConfig.Mounts`` entries."""
        return [{"Type": "bind", "Source": path, "Target": path, "ReadOnly": True} for path in self.mounts]

    def host_config(self) -> dict[str, Any]:
        """As keyword arguments of the SDK's ``create_host_config``."""
        return {"device_requests": [{"count": -1, "capabilities": [["gpu"]]}] if self.gpus else None,
                "devices": [f"{path}:{path}:rwm" for path in self.devices] or None,
                "security_opt": list(self.security_opt) or None, "group_add": list(self.group_add) or None,
                "privileged": self.privileged}


PASS, FAIL, SKIP = "pass", "fail", "skip"  # a verify row's status
Row = tuple[str, str, str]  # a verify row: its name, status and detail


@dataclass(frozen=True)
class HostGpu:
    name: str
    arch: str  # "9.0" (compute capability) or "gfx942" (gcnArchName)


@dataclass(frozen=True, kw_only=True)
class ArchList:
    """The arch list a family's torch is built for: one ``[accelerator]`` option, the variable the
    image keeps as ENV (PyTorch's build reads it), and the label that records it."""

    setting: str  # the [accelerator] option (TORCHBAKE_ACCELERATOR_<SETTING>)
    env: str  # the image's ENV, which PyTorch's build reads
    label: str  # the image's label recording it
    check: Callable[[str], None]  # raises ValueError saying what is accepted
    help: str
    per_platform: str = ""  # an [accelerator] table of platform → arch list, for images of other platforms
    per_platform_help: str = ""
    verify_flag: str = ""  # verify's flag expecting another list than the label's ("": none)
    verify_help: str = ""


@dataclass(frozen=True, kw_only=True)
class Family:
    """An accelerator family whose parts are code (``[accelerators.NAME.devices] check = CHECK``),
    declared once by its module (``FAMILY = Family(...)``) in :mod:`torchbake.families`."""

    check: str  # what [accelerators.NAME.devices] check names it by
    arch: ArchList  # its option, ENV and label
    nodes: tuple[str, ...]  # the host's device nodes its access looks at (patterns)
    access: Callable[[str, HostDevices], DeviceAccess]  # the profile's container access, or a ContainerError
    lister: tuple[str, ...]  # the command that lists the host's GPUs (its first word a tool on PATH)
    parse_gpus: Callable[[str], list[HostGpu]]  # that command's output as the host's GPUs
    judge: Callable[[HostGpu, str], Judgement]  # a GPU against the arch label's text
    verify_row: Callable[[Mapping[str, Any], str], Row] | None = None  # the image's torch (verify's facts)
    # against the arch list it should have: verify's row, where torch can say without a GPU
    probed: bool = False  # verify --gpus's probe (gpu_probe, run in the image) judges its devices: torch's
    # CUDA or HIP build; another family's are said not probed (a skip row)
