"""What each cell of the nightly is expected to cost, and shards of equal cost.

A cell weighs its declared minutes (``[matrix] minutes``: by variant or cell-id glob, else
:data:`DEFAULT_MINUTES`); a dev cell whose last image is in the registry weighs what that image's
provenance records its build took (``finishedOn - startedOn``: a PyTorch compile is most of it).
:func:`balance` deals the matrix's dependency groups (a base cell with its dev cells) to the
shards, heaviest first, each to the lightest shard so far (longest processing time first): two
PyTorch compiles share a shard only when there are more of them than shards.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from torchbake.core.errors import ConfigurationError, FatalError

DEFAULT_MINUTES = {"release": 5.0, "base": 15.0, "dev": 90.0}  # a cell of another variant: "release"'s
MOST_MINUTES = 10_000.0  # a week: more is a typo (or inf), not a night's build


def declared_minutes(value: object, source: str) -> dict[str, float]:
    """``[matrix] minutes``, checked: variant names or cell-id globs → minutes (above 0, at most
    :data:`MOST_MINUTES`)."""
    if not isinstance(value, dict) or not all(
            isinstance(m, int | float) and not isinstance(m, bool) and 0 < m <= MOST_MINUTES for m in value.values()):
        raise ConfigurationError(f"{source}: [matrix] minutes = {value!r}: expected a table of variant or cell-id glob"
                                 f' = minutes (a number above 0, at most {MOST_MINUTES:,.0f}), e.g. {{ dev = 120, "cuda-dev-*" = 240 }}.')
    return {str(key): float(minutes) for key, minutes in value.items()}


def check_keys(table: Mapping[str, float], cell_ids: list[str], source: str) -> None:
    """Each key of ``[matrix] minutes`` is a variant or a glob of some cell's id (a typo weighs nothing)."""
    for key in table:
        if key not in DEFAULT_MINUTES and not any(fnmatch.fnmatch(cell_id, key) for cell_id in cell_ids):
            near = difflib.get_close_matches(key, [*DEFAULT_MINUTES, *cell_ids], n=1, cutoff=0.7)
            raise ConfigurationError(f"{source}: [matrix] minutes key {key!r} is neither a variant ({', '.join(DEFAULT_MINUTES)})"
                                     f" nor a glob of a cell's id{f'; did you mean {near[0]!r}?' if near else '.'}")


def declared(cell_id: str, variant: str, table: Mapping[str, float]) -> float:
    """The cell's declared minutes: a matching glob's (the first), else its variant's."""
    for pattern, minutes in table.items():
        if pattern not in DEFAULT_MINUTES and fnmatch.fnmatch(cell_id, pattern):
            return minutes
    return table.get(variant, DEFAULT_MINUTES.get(variant, DEFAULT_MINUTES["release"]))


@dataclass(frozen=True)
class Cost:
    minutes: float
    source: str  # "declared", or "registry" (its last image's provenance)


def recorded_minutes(provenance: str) -> float | None:
    """The build time an image's SLSA provenance records, in minutes (None: none recorded)."""
    try:
        metadata = json.loads(provenance)["predicate"]["runDetails"]["metadata"]
        took = datetime.fromisoformat(metadata["finishedOn"]) - datetime.fromisoformat(metadata["startedOn"])
    except (ValueError, KeyError, TypeError):
        return None
    return took.total_seconds() / 60 if took.total_seconds() > 0 else None


def costs(cells, ask: Callable[[str], str | None] | None, say: Callable[[str], None]) -> dict[str, Cost]:
    """Each cell's cost. ``ask(image)``: the provenance the registry holds for a dev cell's image
    (None: none, or no registry in its name); the first registry error stops the asking (one line
    said), the rest is declared."""
    found: dict[str, Cost] = {}
    for cell in cells:
        found[cell.id] = Cost(cell.minutes, "declared")
        if ask is None or cell.variant != "dev":
            continue
        try:
            provenance = ask(cell.image)
        except FatalError as exc:  # no answer: every cell keeps its declared minutes
            say(f"torchbake: the registry of {cell.image} did not answer ({str(exc).splitlines()[0]}); shards are"
                " balanced by declared minutes ([matrix] minutes).")
            ask = None
            continue
        minutes = recorded_minutes(provenance) if provenance else None
        if minutes is not None:
            found[cell.id] = Cost(round(minutes, 1), "registry")
    return found


def balance(groups: list[list], count: int, cost: Mapping[str, Cost]) -> list[list]:
    """``count`` shards of the groups (each kept whole), of costs as equal as the groups allow;
    each shard's cells in plan order. Deterministic: the same groups and costs, the same shards."""
    shards: list[list[int]] = [[] for _ in range(count)]
    totals = [0.0] * count
    weight = [sum(cost[cell.id].minutes for cell in group) for group in groups]
    for index in sorted(range(len(groups)), key=lambda i: (-weight[i], i)):
        lightest = min(range(count), key=lambda s: (totals[s], s))
        shards[lightest].append(index)
        totals[lightest] += weight[index]
    return [[cell for index in sorted(members) for cell in groups[index]] for members in shards]
