"""Device profiles: what a container of each accelerator needs from the engine's host.

:func:`device_access` checks that the host has it (the NVIDIA Container Toolkit and driver, the
ROCm device nodes, or what an accelerator declares as data: torchbake.configuration.accelerators) before
anything is created, and says what the container gets: one :class:`DeviceAccess`, which renders
as ``docker run`` flags (for ``--dry-run`` and a terminal session) and as the Engine API's host
configuration (for every other run).
"""

from __future__ import annotations

import fnmatch
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchbake.adapters.engine import engine_is_local
from torchbake.configuration import accelerators
from torchbake.configuration.accelerators import Accelerator, Devices
from torchbake.core.errors import ConfigurationError, ContainerError

BUILT_IN_NODES = ("/dev/kfd", "/dev/dri", "/dev/dri/renderD*", "/dev/nvidiactl", "/dev/nvidia[0-9]*")  # the checks in code


@dataclass(frozen=True)
class HostDevices:
    """What the engine's host offers the device profiles."""

    runtimes: tuple[str, ...]
    local: bool  # the engine runs here, so its /dev can be looked at
    nodes: Mapping[str, int] = field(default_factory=dict)  # device path → group id
    paths: frozenset[str] = frozenset()  # the declared mounts' host paths that exist here

    @classmethod
    def probe(cls, info: Mapping[str, Any], declared: Iterable[Accelerator] = (), root: Path = Path("/")) -> HostDevices:
        """The engine's runtimes and, when it runs here, the device nodes the checks look at: the
        built-in checks' and every path the ``declared`` accelerators name."""
        local = engine_is_local()
        nodes: dict[str, int] = {}
        paths: set[str] = set()
        if local:
            patterns = [*BUILT_IN_NODES, *(p for a in declared for p in (*a.devices.devices, *a.devices.any_of))]
            for pattern in dict.fromkeys(patterns):
                for path in sorted(root.glob(pattern.lstrip("/"))):
                    nodes["/" + str(path.relative_to(root))] = path.stat().st_gid
                    for inner in sorted(path.glob("*")) if path.is_dir() else ():  # a folder's nodes: their groups
                        nodes["/" + str(inner.relative_to(root))] = inner.stat().st_gid
            paths = {p for a in declared for p in a.devices.mounts if (root / p.lstrip("/")).exists()}
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


def device_access(profile: str, host: HostDevices, declared: Mapping[str, Accelerator] | None = None) -> DeviceAccess:
    """What a device profile's container gets, or a ContainerError if the host lacks what the
    profile needs (so nothing is created). ``declared``: the accelerators (default: the bundled ones)."""
    found = accelerators.bundled() if declared is None else declared
    if profile not in found:
        raise ConfigurationError(f"Unknown device profile {profile!r}; expected one of: {', '.join(found)}"
                                 " (or an accelerator declared in a --config file: configs/accelerators.toml shows how).")
    spec = found[profile].devices
    if spec.check == "nvidia":
        return _nvidia(profile, host)
    if spec.check == "rocm":
        return _rocm(profile, host)
    return _declared(profile, spec, host)


def _declared(profile: str, spec: Devices, host: HostDevices) -> DeviceAccess:
    """The device access an accelerator declares as data, once the host is seen to have it: a
    device that is a pattern (``*``, ``[0-9]``) passes every node of the host it matches."""
    if host.local:
        missing = [path for path in (*spec.devices, *spec.mounts) if not host.matches(path) and path not in host.paths]
        if missing:
            raise ContainerError(
                f"The {profile} device profile needs {' and '.join(missing)} on this host, which"
                f" {'do' if len(missing) > 1 else 'does'} not exist. {_remedy(spec)}")
        runtime = bool(spec.or_runtime) and spec.or_runtime in host.runtimes
        if spec.any_of and not runtime and not any(host.matches(pattern) for pattern in spec.any_of):
            engine = (f" and the engine no {spec.or_runtime} runtime (runtimes: {', '.join(host.runtimes) or 'none'})"
                      if spec.or_runtime else "")
            raise ContainerError(
                f"The {profile} device profile needs {spec.needs or 'one of ' + ', '.join(spec.any_of)}: this host has"
                f" no {' or '.join(spec.any_of)} devices{engine}. {_remedy(spec)}")
    elif any(_pattern(path) for path in spec.devices):
        raise ContainerError(
            f"The {profile} device profile passes every {' and '.join(p for p in spec.devices if _pattern(p))}"
            " node of the engine's host, which torchbake can list only when the engine runs here"
            " (DOCKER_HOST is another machine). Run the container there, or pass --device-profile cpu.")
    devices = tuple(dict.fromkeys(node for path in spec.devices
                                  for node in (sorted(n for n in host.nodes if fnmatch.fnmatch(n, path))
                                               if _pattern(path) else [path])))
    groups = spec.groups
    if spec.device_groups:
        given = {gid for node, gid in host.nodes.items() if node in devices or node.startswith(tuple(d + "/" for d in devices))}
        groups += tuple(str(gid) for gid in sorted(given) if gid)
    return DeviceAccess(devices=devices, group_add=groups, privileged=spec.privileged, env=dict(spec.env),
                        mounts=spec.mounts)


def _pattern(path: str) -> bool:
    return "*" in path or "[" in path


def _remedy(spec: Devices) -> str:
    return f"{spec.install}, or pass --device-profile cpu." if spec.install else "Pass --device-profile cpu to run without it."


def _nvidia(profile: str, host: HostDevices) -> DeviceAccess:
    if "nvidia" not in host.runtimes and not (host.local and shutil.which("nvidia-container-runtime-hook")):
        raise ContainerError(
            f"The {profile} device profile needs the NVIDIA Container Toolkit on the engine's host, and"
            f" this engine has none (runtimes: {', '.join(host.runtimes) or 'none'}; no"
            " nvidia-container-runtime-hook). Install nvidia-container-toolkit and restart dockerd,"
            " or pass --device-profile cpu to run without GPUs."
        )
    if host.local and not host.has("/dev/nvidiactl"):
        raise ContainerError(
            f"The {profile} device profile needs an NVIDIA driver: /dev/nvidiactl does not exist on this host."
            " Check `nvidia-smi`, or pass --device-profile cpu to run without GPUs."
        )
    return DeviceAccess(gpus=True)


def _rocm(profile: str, host: HostDevices) -> DeviceAccess:
    nodes = ("/dev/kfd", "/dev/dri")
    if not host.local:
        return DeviceAccess(devices=nodes, group_add=("video", "render"))
    missing = [node for node in nodes if node not in host.nodes]
    if missing:
        raise ContainerError(
            f"The {profile} device profile needs {' and '.join(missing)} on this host, which "
            f"{'do' if len(missing) > 1 else 'does'} not exist (the amdgpu driver with ROCm support"
            " makes them). Pass --device-profile cpu to run without GPUs."
        )
    groups = sorted({gid for node, gid in host.nodes.items() if node == "/dev/kfd" or node.startswith("/dev/dri/renderD")})
    return DeviceAccess(devices=nodes, security_opt=("seccomp=unconfined",), group_add=tuple(map(str, groups)))
