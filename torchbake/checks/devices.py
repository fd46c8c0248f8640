"""Device profiles: what a container of each accelerator needs from the engine's host.

:func:`device_access` checks that the host has it (a family's checks in code:
torchbake.families; or what an accelerator declares as data: torchbake.configuration.accelerators) before
anything is created, and says what the container gets: one :class:`DeviceAccess`, which renders
as ``docker run`` flags (for ``--dry-run`` and a terminal session) and as the Engine API's host
configuration (for every other run).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from torchbake.adapters.engine import engine_is_local
from torchbake.configuration import accelerators
from torchbake.configuration.accelerators import Accelerator, Devices
from torchbake.core.errors import ConfigurationError, ContainerError, clipped
from torchbake.families import FAMILIES, NODES
from torchbake.families.family import DeviceAccess, HostDevices

__all__ = ["DeviceAccess", "HostDevices", "device_access", "host_devices"]


def host_devices(info: Mapping[str, Any], declared: Iterable[Accelerator] = (), root: Path = Path("/")) -> HostDevices:
    """The engine's runtimes and, when it runs here, the device nodes the checks look at: the
    families' (torchbake.families) and every path the ``declared`` accelerators name, with
    which of their mounts exist."""
    declared = list(declared)
    named = {pattern: f"{accelerator.source}: [accelerators.{accelerator.name}] devices" for accelerator in declared
             for pattern in (*accelerator.devices.devices, *accelerator.devices.any_of, *accelerator.devices.mounts)}
    patterns = [*NODES, *(p for a in declared for p in (*a.devices.devices, *a.devices.any_of))]
    runtimes = tuple(sorted((info.get("Runtimes") or {}).keys()))
    if not engine_is_local():
        return HostDevices(runtimes, local=False)
    nodes: dict[str, int] = {}
    for pattern in dict.fromkeys(patterns):  # each node matching, and a folder's nodes too: their groups
        with _looking_at(pattern, named):
            for path in _matching(root, pattern):
                nodes["/" + str(path.relative_to(root))] = path.stat().st_gid
                for inner in sorted(path.glob("*")) if path.is_dir() else ():
                    nodes["/" + str(inner.relative_to(root))] = inner.stat().st_gid
    mounts = set()
    for path in (p for a in declared for p in a.devices.mounts):
        with _looking_at(path, named):
            if (root / path.lstrip("/")).exists():
                mounts.add(path)
    return HostDevices(runtimes, local=True, nodes=nodes, paths=frozenset(mounts))


def _matching(root: Path, pattern: str) -> list[Path]:
    """The paths under ``root`` that ``pattern`` names: a plain path looked up, a pattern globbed."""
    relative = pattern.lstrip("/")
    if not any(char in relative for char in "*?["):
        return [root / relative] if (root / relative).exists() else []
    return sorted(root.glob(relative))


@contextlib.contextmanager
def _looking_at(path: str, named: Mapping[str, str]):
    """A path of the host that cannot be looked at (a name over the file system's 255 bytes, a
    path over 4,096, a loop of links) is a refusal naming where it was declared, before anything
    is created: never an OSError."""
    try:
        yield
    except (OSError, RecursionError) as exc:  # (pathlib's glob recurses once a path's part: thousands of them)
        where = named.get(path, "torchbake's device checks")
        why = getattr(exc, "strerror", None) or ("too many parts" if isinstance(exc, RecursionError) else exc)
        raise ConfigurationError(f"{where}: {clipped(path, quoted=True)} cannot be looked at on this host"
                                 f" ({why}); expected a device node path under /dev/ (or a host path to mount)"
                                 " of at most 4,096 characters, each name in it at most 255.") from None


def device_access(profile: str, host: HostDevices, declared: Mapping[str, Accelerator] | None = None) -> DeviceAccess:
    """What a device profile's container gets, or a ContainerError if the host lacks what the
    profile needs (so nothing is created). ``declared``: the accelerators (default: the bundled ones)."""
    found = accelerators.bundled() if declared is None else declared
    if profile not in found:
        raise ConfigurationError(f"Unknown device profile {profile!r}; expected one of: {', '.join(found)}"
                                 " (or an accelerator declared in a --config file: configs/accelerators.toml shows how).")
    spec = found[profile].devices
    if spec.check:  # a family torchbake has: checked when the file was read
        return FAMILIES[spec.check].access(profile, host)
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
                                  for node in (host.matching(path)
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
