"""Device profiles: what a container of each accelerator needs from the engine's host.

:func:`device_access` checks that the host has it (the NVIDIA Container Toolkit and driver, the
ROCm device nodes, a Moore Threads GPU) before anything is created, and says what the container
gets: one :class:`DeviceAccess`, which renders as ``docker run`` flags (for ``--dry-run`` and a
terminal session) and as the Engine API's host configuration (for every other run).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import validation
from .engine import engine_is_local
from .errors import ConfigurationError, ContainerError


@dataclass(frozen=True)
class HostDevices:
    """What the engine's host offers the device profiles."""

    runtimes: tuple[str, ...]
    local: bool  # the engine runs here, so its /dev can be looked at
    nodes: Mapping[str, int] = field(default_factory=dict)  # device path → group id

    @classmethod
    def probe(cls, info: Mapping[str, Any], dev: Path = Path("/dev")) -> HostDevices:
        local = engine_is_local()
        nodes: dict[str, int] = {}
        if local:
            for pattern in ("kfd", "dri", "dri/renderD*", "nvidiactl", "nvidia[0-9]*", "mtgpu*"):
                for path in sorted(dev.glob(pattern)):
                    nodes[str(path)] = path.stat().st_gid
        return cls(tuple(sorted((info.get("Runtimes") or {}).keys())), local, nodes)

    def has(self, *prefixes: str) -> bool:
        return any(node.startswith(prefixes) for node in self.nodes)


@dataclass(frozen=True)
class DeviceAccess:
    """The devices, groups and privileges a profile's container gets."""

    gpus: bool = False  # every NVIDIA GPU (--gpus all)
    devices: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    group_add: tuple[str, ...] = ()
    privileged: bool = False
    env: Mapping[str, str] = field(default_factory=dict)

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
        return tuple(args)

    def host_config(self) -> dict[str, Any]:
        """As keyword arguments of the SDK's ``create_host_config``."""
        return {"device_requests": [{"count": -1, "capabilities": [["gpu"]]}] if self.gpus else None,
                "devices": [f"{path}:{path}:rwm" for path in self.devices] or None,
                "security_opt": list(self.security_opt) or None, "group_add": list(self.group_add) or None,
                "privileged": self.privileged}


def device_access(profile: str, host: HostDevices) -> DeviceAccess:
    """What a device profile's container gets, or a ContainerError if the host lacks what the
    profile needs (so nothing is created)."""
    if profile == "cpu":
        return DeviceAccess()
    if profile == "cuda":
        if "nvidia" not in host.runtimes and not (host.local and shutil.which("nvidia-container-runtime-hook")):
            raise ContainerError(
                "The cuda device profile needs the NVIDIA Container Toolkit on the engine's host, and"
                f" this engine has none (runtimes: {', '.join(host.runtimes) or 'none'}; no"
                " nvidia-container-runtime-hook). Install nvidia-container-toolkit and restart dockerd,"
                " or pass --device-profile cpu to run without GPUs."
            )
        if host.local and not host.has("/dev/nvidiactl"):
            raise ContainerError(
                "The cuda device profile needs an NVIDIA driver: /dev/nvidiactl does not exist on this host."
                " Check `nvidia-smi`, or pass --device-profile cpu to run without GPUs."
            )
        return DeviceAccess(gpus=True)
    if profile == "rocm":
        nodes = ("/dev/kfd", "/dev/dri")
        if not host.local:
            return DeviceAccess(devices=nodes, group_add=("video", "render"))
        missing = [node for node in nodes if node not in host.nodes]
        if missing:
            raise ContainerError(
                f"The rocm device profile needs {' and '.join(missing)} on this host, which "
                f"{'do' if len(missing) > 1 else 'does'} not exist (the amdgpu driver with ROCm support"
                " makes them). Pass --device-profile cpu to run without GPUs."
            )
        groups = sorted({gid for node, gid in host.nodes.items() if node == "/dev/kfd" or node.startswith("/dev/dri/renderD")})
        return DeviceAccess(devices=nodes, security_opt=("seccomp=unconfined",), group_add=tuple(map(str, groups)))
    if profile == "musa":
        if host.local and "mthreads" not in host.runtimes and not host.has("/dev/mtgpu", "/dev/dri"):
            raise ContainerError(
                "The musa device profile needs a Moore Threads GPU: this host has no /dev/mtgpu* or /dev/dri"
                f" devices and the engine no mthreads runtime (runtimes: {', '.join(host.runtimes) or 'none'})."
                " Install the MUSA driver and mt-container-toolkit, or pass --device-profile cpu."
            )
        return DeviceAccess(privileged=True, env={"MTHREADS_VISIBLE_DEVICES": "all"})
    raise ConfigurationError(f"Unknown device profile {profile!r}; expected one of: {', '.join(validation.PROFILES)}.")
