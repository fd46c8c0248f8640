"""Accelerators as data (the model: cibuildwheel's platform list, here in TOML).

Each accelerator is one ``[accelerators.NAME]`` table: the bundled ones in
``configs/accelerators.toml``, a team's own in any --config file (the file's comments say what
each key means). It declares the vendor toolkits a build installs (the option that gives each
one's URL, its flag, its install script, whether a build needs it, what of it the slim runtime
image keeps) and what a container of it gets from the host (``devices``). Nothing in Python
names an accelerator; ``[accelerator] profile`` picks one by name.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torchbake.configuration import validation
from torchbake.core.data import ACCELERATORS_FILE
from torchbake.core.errors import ConfigurationError
from torchbake.families import FAMILIES

SECTION = "accelerators"
KEY = re.compile(r"^[a-z][a-z0-9_]*$")
# what the host is searched for: /dev only (a [0-9] class and a trailing * as patterns)
DEVICE_PATH = re.compile(r"^/dev/([A-Za-z0-9_.-]|\[0-9\])+(/([A-Za-z0-9_.-]|\[0-9\])+)*\*?$")
HOST_PATH = re.compile(r"^(/[A-Za-z0-9_.-]+)+$")  # a mount's host path (the same inside the container)
GROUP = re.compile(r"[a-z_][a-z0-9_-]{0,31}|[0-9]+")  # a group the container joins, by name or number
INSTALL = re.compile(r"[A-Za-z0-9_.=/+:@-]+( [A-Za-z0-9_.=/+:@-]+)*")  # a script's name, or an installer's arguments


@dataclass(frozen=True)
class Toolkit:
    """A vendor tarball: ``[toolkits] KEY`` gives its URL or path."""

    key: str
    help: str = ""
    aliases: tuple[str, ...] = ()
    install: str = "install.sh"
    required: bool = False
    runtime_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class Devices:
    """What a container of the accelerator gets from the engine's host, and what the host must have."""

    check: str = ""  # a family whose parts are code (torchbake.families), or "" (this table's data)
    devices: tuple[str, ...] = ()
    any_of: tuple[str, ...] = ()
    or_runtime: str = ""
    needs: str = ""
    install: str = ""
    privileged: bool = False
    groups: tuple[str, ...] = ()
    device_groups: bool = False  # the container also joins the host's groups of the nodes it is given (by number)
    mounts: tuple[str, ...] = ()  # host folders and files (a driver's) bind-mounted read-only at the same path
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Accelerator:
    name: str
    description: str
    toolkits: tuple[Toolkit, ...] = ()
    devices: Devices = Devices()
    source: str = ""  # the file that declared it
    on_device: str = ""  # what only the device itself proves (a verify row says it was not proven here)
    # a torchbake flag → the name its legacy script gave it (shown by that name; bundled ones only)
    flag_names: Mapping[str, str] = field(default_factory=dict)

    def toolkit(self, key: str) -> Toolkit | None:
        return next((t for t in self.toolkits if t.key == key), None)


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigurationError(f"{where} must be a list of strings, not {value!r}.")
    return tuple(value)


def _table(value: Any, where: str, known: Iterable[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigurationError(f"{where} must be a table, not {value!r}.")
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise ConfigurationError(f"{where}: unknown key {unknown[0]!r}; expected {', '.join(known)}.")
    return value


def _fields(cls: type, table: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``table``'s values for the dataclass ``cls``, each of its field's type."""
    found: dict[str, Any] = {}
    for name, value in table.items():
        default = getattr(cls(key="") if cls is Toolkit else cls(), name)
        spot = f"{where}.{name}"
        if isinstance(default, tuple):
            found[name] = _strings(value, spot)
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise ConfigurationError(f"{spot} must be true or false, not {value!r}.")
            found[name] = value
        elif isinstance(default, str):
            if not isinstance(value, str):
                raise ConfigurationError(f"{spot} must be a string, not {value!r}.")
            found[name] = value
        else:  # env
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise ConfigurationError(f"{spot} must be a table of strings, not {value!r}.")
            try:
                validation.env_names(value)
                validation.plain_text(value)
            except ValueError as exc:
                raise ConfigurationError(f"{spot}: {exc}.") from None
            found[name] = dict(value)
    return found


def _toolkits(entries: Any, where: str, name: str) -> tuple[Toolkit, ...]:
    if not isinstance(entries, list):
        raise ConfigurationError(f"{where} toolkits must be a list of tables, one [[{SECTION}.{name}.toolkits]]"
                                 " per toolkit.")
    toolkits = []
    for index, entry in enumerate(entries):
        spot = f"{where} toolkits[{index}]"
        entry = _table(entry, spot, [f.name for f in Toolkit.__dataclass_fields__.values()])
        if not isinstance(entry.get("key"), str) or not KEY.fullmatch(entry["key"]):
            raise ConfigurationError(f"{spot}: key must name the option [toolkits] KEY (lower-case letters,"
                                     " digits and _).")
        toolkit = Toolkit(**_fields(Toolkit, entry, spot))
        if not INSTALL.fullmatch(toolkit.install):
            raise ConfigurationError(f"{spot}: install = {toolkit.install!r}: expected the install script's name, or"
                                     " a .run installer's arguments, as words of letters, digits and _.=/+:@-"
                                     " separated by single spaces (no quotes, patterns, tabs or new lines).")
        toolkits.append(toolkit)
    return tuple(toolkits)


def _devices(table: Any, where: str) -> Devices:
    devices = Devices(**_fields(Devices, _table(table, f"{where} devices", list(Devices.__dataclass_fields__)),
                                f"{where} devices"))
    for path in (*devices.devices, *devices.any_of):
        if not DEVICE_PATH.fullmatch(path) or {".", ".."} & set(path.split("/")):
            raise ConfigurationError(f"{where} devices: {path!r} is not a device node: expected a path under /dev/"
                                     " of letters, digits and _.-/, without . or .. (a pattern may use [0-9] and"
                                     " end in *, e.g. /dev/dri/renderD* or /dev/davinci[0-9]*).")
    for path in devices.mounts:
        if not HOST_PATH.fullmatch(path) or {".", ".."} & set(path.split("/")) or len(path) > 255:
            raise ConfigurationError(f"{where} devices: mounts {path!r} is not a host path to mount: expected an"
                                     " absolute path of letters, digits and _.-/, without . or .. and at most 255"
                                     " characters (e.g. /usr/local/Ascend/driver).")
    for group in devices.groups:
        if not GROUP.fullmatch(group):
            raise ConfigurationError(f"{where} devices: groups {group!r} is not a group: expected a group's name"
                                     " (lower-case letters, digits, _ and -) or its number, e.g. video or 44.")
    if devices.check and devices.check not in FAMILIES:
        raise ConfigurationError(f"{where} devices.check = {devices.check!r}: expected one of {', '.join(FAMILIES)}"
                                 " (torchbake.families), or no check and the devices as data.")
    return devices


def parse(tables: Mapping[str, Any], source: str) -> dict[str, Accelerator]:
    """The accelerators of one file's ``[accelerators]`` table; a clear error naming the file and
    the key for anything that is not what the bundled file's comments describe."""
    found = {}
    for name, table in _table(tables, f"{source}: [{SECTION}]", tables).items():
        where = f"{source}: [{SECTION}.{name}]"
        if not KEY.fullmatch(name):
            raise ConfigurationError(f"{where}: an accelerator's name is lower-case letters, digits and _.")
        table = _table(table, where, ("description", "on_device", "toolkits", "devices", "flag_names"))
        toolkits = _toolkits(table.get("toolkits", []), where, name)
        devices = _devices(table.get("devices", {}), where)
        description, on_device = table.get("description", ""), table.get("on_device", "")
        for key, text in (("description", description), ("on_device", on_device)):
            if not isinstance(text, str):
                raise ConfigurationError(f"{where} {key} must be a string.")
        flag_names = table.get("flag_names", {})
        if not isinstance(flag_names, dict) or not all(isinstance(v, str) and KEY.fullmatch(v) for v in flag_names.values()):
            raise ConfigurationError(f"{where} flag_names must be a table of flag = \"legacy_name\" (lower-case"
                                     " letters, digits and _).")
        found[name] = Accelerator(name, description, toolkits, devices, source, on_device, dict(flag_names))
    return found


def _refuse_flags(accelerator: Accelerator) -> None:
    """A team's accelerator gets no flags of its own (``flag_names``, a toolkit's ``aliases``) beyond
    the bundled one's of its name: the tasks' flags are made before any --config is read. Its
    values are set in a --config file, the environment, or torchbake's own flags."""
    shipped = bundled().get(accelerator.name)
    where = f"{accelerator.source}: [{SECTION}.{accelerator.name}]"
    allowed = shipped.flag_names if shipped else {}
    extra = {flag: name for flag, name in accelerator.flag_names.items() if allowed.get(flag) != name}
    if extra:
        kept = f" (the shipped {accelerator.name}'s are {_listed(allowed.items())})" if allowed else ""
        raise ConfigurationError(
            f"{where} flag_names {_listed(extra.items())}: only the accelerators torchbake ships give flags other"
            f" names{kept}; the tasks' flags are made before any --config is read. Your accelerator's values are"
            " set by torchbake's own flags (e.g. --extension-whl-url), a --config file or the environment; leave"
            " those entries out.")
    for index, toolkit in enumerate(accelerator.toolkits):
        known = shipped.toolkit(toolkit.key) if shipped else None
        extra_aliases = [alias for alias in toolkit.aliases if alias not in (known.aliases if known else ())]
        if extra_aliases:
            kept = (f"; the shipped {toolkit.key}'s are {', '.join(map(repr, known.aliases)) or 'none'}" if known
                    else f". Set {toolkit.key} with [toolkits] {toolkit.key} = \"URL or path\" in a --config file, or"
                         f" TORCHBAKE_TOOLKITS_{toolkit.key.upper()}")
            raise ConfigurationError(
                f"{where} toolkits[{index}].aliases {', '.join(map(repr, extra_aliases))}: only the toolkits"
                f" torchbake ships have flags, with the spellings it gives them (the tasks' flags are made before any"
                f" --config is read){kept}; leave {'it' if len(extra_aliases) == 1 else 'them'} out.")


def _listed(pairs: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"{flag} = {name!r}" for flag, name in pairs)


@functools.cache
def bundled() -> dict[str, Accelerator]:
    """The accelerators of configs/accelerators.toml."""
    with ACCELERATORS_FILE.open("rb") as handle:
        return parse(tomllib.load(handle).get(SECTION, {}), str(ACCELERATORS_FILE))


def declared(tables: Iterable[tuple[Mapping[str, Any], str]]) -> dict[str, Accelerator]:
    """The bundled accelerators with those of ``tables`` (each file's [accelerators] table and
    the file's name), a later declaration of a name replacing an earlier one; a toolkit key two
    accelerators both declare must mean the same option, so it is refused."""
    found = dict(bundled())
    for table, source in tables:
        for accelerator in parse(table, source).values():
            _refuse_flags(accelerator)
            found[accelerator.name] = accelerator
    owners: dict[str, str] = {}
    for accelerator in found.values():
        for toolkit in accelerator.toolkits:
            if owners.setdefault(toolkit.key, accelerator.name) != accelerator.name:
                raise ConfigurationError(
                    f"{accelerator.source}: accelerator {accelerator.name!r} declares the toolkit"
                    f" {toolkit.key!r}, which {owners[toolkit.key]!r} declares too; give it another key.")
    return found
