"""What a dev build compiled: each compile step's line in the build's output (printed by
docker/common/build_source.sh from ccache's stats log), read back into the build's record,
summarised for its output, build-all's table and reports."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

# "#12 45.67 torchbake: compile-cache role=torch compiled=3 local_hits=0 remote_hits=1201 store_errors=0
# remote=yes seconds=41": BuildKit's step number and time first
_LINE = re.compile(r"torchbake: compile-cache role=(?P<role>[\w.-]+) compiled=(?P<compiled>\d+)"
                   r" local_hits=(?P<local_hits>\d+) remote_hits=(?P<remote_hits>\d+)"
                   r" store_errors=(?P<store_errors>\d+) remote=(?P<remote>yes|) seconds=(?P<seconds>\d+)$")


@dataclass(frozen=True)
class Compiles:
    """One compile step's counts: objects compiled, found in the cache mount (local) or the shared
    store (remote), compiles whose store could not be reached, and the step's seconds."""

    compiled: int
    local_hits: int
    remote_hits: int
    store_errors: int
    remote: bool
    seconds: int

    def describe(self) -> str:
        """"3 compiled, 1,201 remote hits, 41 s" (the counts that are not 0)."""
        parts = [f"{self.compiled:,} compiled"]
        parts += [f"{count:,} {what}" for count, what in ((self.local_hits, "local hits"),
                                                         (self.remote_hits, "remote hits")) if count]
        if self.store_errors:
            parts.append(f"{self.store_errors:,} without the store (unreachable)")
        return ", ".join(parts + [f"{self.seconds} s"])


def read(lines: Iterable[str]) -> dict[str, Compiles]:
    """Role (torch, extension, vision, audio, extras…) → its compile step's counts, from a
    build's output; a step the layer cache served printed nothing and is not here. A role built
    twice (a build's two stages) adds up."""
    found: dict[str, Compiles] = {}
    for line in lines:
        match = _LINE.search(line.rstrip("\n"))
        if not match:
            continue
        fields = match.groupdict()
        role = fields.pop("role")
        step = Compiles(remote=fields.pop("remote") == "yes", **{key: int(value) for key, value in fields.items()})
        if role in found:
            before = found[role]
            step = Compiles(before.compiled + step.compiled, before.local_hits + step.local_hits,
                            before.remote_hits + step.remote_hits, before.store_errors + step.store_errors,
                            before.remote or step.remote, before.seconds + step.seconds)
        found[role] = step
    return found


def to_record(found: Mapping[str, Compiles]) -> dict[str, dict]:
    """The build record's (and the reports') form: role → its counts."""
    return {role: asdict(compiles) for role, compiles in found.items()}


def from_record(record: Mapping[str, Mapping]) -> dict[str, Compiles]:
    return {role: Compiles(**fields) for role, fields in record.items()}


def summary(found: Mapping[str, Compiles], progress: Mapping[str, Mapping] = {}) -> str:  # noqa: B006
    """"torch: 3 compiled, 1,201 remote hits, 41 s (4,810/4,810 objects, 117 a minute); extension:
    2 compiled, 3 s" ("" when nothing was compiled: a release build, or every compile step from the
    layer cache). ``progress``: what the compile steps' output counted (the record's
    ``compile_progress``: torchbake.building.compile_progress), in brackets after ccache's counts."""
    parts = []
    for role in dict.fromkeys([*found, *progress]):
        counted = progress.get(role) or {}
        text = found[role].describe() if role in found else ""
        if counted.get("objects"):
            objects = (f"{counted['objects']:,}/{counted['total']:,} objects" if counted.get("total")
                       else f"{counted['objects']:,} compiler call{'' if counted['objects'] == 1 else 's'}")
            rate = f", {counted['per_minute']:,.0f} a minute" if counted.get("per_minute") else ""
            text = f"{text} ({objects}{rate})" if text else f"{objects}{rate}, {counted.get('seconds', 0)} s"
        if text:
            parts.append(f"{role}: {text}")
    return "; ".join(parts)


def record_summary(record: Mapping[str, Mapping], progress: Mapping[str, Mapping] = {}) -> str:  # noqa: B006
    """:func:`summary` of a record's counts (:func:`to_record`'s form: a build-all cell's)."""
    return summary(from_record(record), progress)


def unreachable(found: Mapping[str, Compiles], *, store: bool = False) -> list[str]:
    """The roles whose compiles could not reach the shared store: errors of the store, or, where the
    build was given a ``store``, a step that compiled without one (its tool could not use it)."""
    return [role for role, compiles in found.items()
            if compiles.store_errors or (store and not compiles.remote and compiles.compiled + compiles.local_hits)]
