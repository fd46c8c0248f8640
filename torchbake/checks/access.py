"""What a container of an accelerator gets from the engine's host, as data: the host's devices
(:class:`HostDevices`), the access a container is given (:class:`DeviceAccess`, rendered as
``docker run`` flags and as the Engine API's host configuration), a GPU of the host
(:class:`HostGpu`), and what an accelerator family with checks in code declares (:class:`Family`,
one module each in :mod:`torchbake.checks.families`)."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchbake.adapters.engine import engine_is_local
from torchbake.checks import gpu_probe


@dataclass(frozen=True)
class HostDevices:
    """What the engine's host offers the device profiles."""

    runtimes: tuple[str, ...]
    local: bool  # the engine runs here, so its /dev can be looked at
    nodes: Mapping[str, int] = field(default_factory=dict)  # device path → group id
    paths: frozenset[str] = frozenset()  # the declared mounts' host paths that exist here

    @classmethod
    def probe(cls, info: Mapping[str, Any], patterns: Iterable[str], mounts: Iterable[str] = (),
              root: Path = Path("/")) -> HostDevices:
        """The engine's runtimes and, when it runs here, the device nodes matching ``patterns``
        (a folder's nodes too: their groups) and which of ``mounts`` exist."""
        local = engine_is_local()
        nodes: dict[str, int] = {}
        paths: set[str] = set()
        if local:
            for pattern in dict.fromkeys(patterns):
                for path in sorted(root.glob(pattern.lstrip("/"))):
                    nodes["/" + str(path.relative_to(root))] = path.stat().st_gid
                    for inner in sorted(path.glob("*")) if path.is_dir() else ():
                        nodes["/" + str(inner.relative_to(root))] = inner.stat().st_gid
            paths = {p for p in mounts if (root / p.lstrip("/")).exists()}
        return cls(tuple(sorted((info.get("Runtimes") or {}).keys())), local, nodes, frozenset(paths))

    def has(self, *prefixes: str) -> bool:
        return any(node.startswith(prefixes) for node in self.nodes)

    def matches(self, pattern: str) -> bool:
        return any(fnmatch.fnmatch(node, pattern) for node in self.nodes)


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


@dataclass(frozen=True)
class HostGpu:
    name: str
    arch: str  # "9.0" (compute capability) or "gfx942" (gcnArchName)


@dataclass(frozen=True, kw_only=True)
class Family:
    """An accelerator family whose checks are code (``[accelerators.NAME.devices] check = CHECK``),
    declared once by its module (``FAMILY = Family(...)``) in :mod:`torchbake.checks.families`."""

    check: str  # what [accelerators.NAME.devices] check names it by
    nodes: tuple[str, ...]  # the host's device nodes its access looks at (patterns)
    access: Callable[[str, HostDevices], DeviceAccess]  # the profile's container access, or a ContainerError
    lister: str  # the tool that lists the host's GPUs, named when it cannot
    gpus: Callable[[], list[HostGpu] | None]  # the host's GPUs (None: the lister is missing or failed)
    arch_label: str  # the image label recording the arch list its kernels were built for
    judge: Callable[[HostGpu, str], gpu_probe.Judgement]  # a GPU against that label's text
