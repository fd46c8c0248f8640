"""The nightly matrix: Python versions × variants × profiles, expanded into ordered cells.

Pure functions from a matrix config to a list of :class:`Cell`: each cell names the options
that differ from its profile (templated with ``{python}``, ``{py}`` (310), ``{cp}`` (cp310),
``{variant}``, ``{profile}``, ``{registry}``), and the cells it starts from (a dev cell after
the base cell of the same profile and Python). With several ``platforms``, each image is one
cell per platform (``cpu-release-py311-arm64`` builds ``NAME:TAG-arm64``, from that platform's
base cell), joined afterwards into ``NAME:TAG``. Nothing here touches the engine.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchbake.configuration import platforms as platform_data
from torchbake.configuration import validation
from torchbake.core import redaction
from torchbake.core.data import CONFIG_DIR
from torchbake.core.errors import ConfigurationError
from torchbake.core.lazy import LazyModule
from torchbake.fleet import costs

if TYPE_CHECKING:
    from torchbake import variants
    from torchbake.configuration import derived, settings
    from torchbake.planning import config as configuration
else:
    variants = LazyModule("torchbake.variants")  # the registry is read when a matrix is, not when tasks are listed
    configuration = LazyModule("torchbake.planning.config")
    settings = LazyModule("torchbake.configuration.settings")
    derived = LazyModule("torchbake.configuration.derived")
MATRIX_KEYS = {"pythons", "variants", "profiles", "registry", "name", "tag", "exclude", "options", "platforms", "runners",
               "minutes"}


@dataclass(frozen=True)
class Cell:
    id: str  # e.g. "cpu-release-py311"
    profile: str
    variant: str
    python: str
    image: str  # NAME:TAG
    config_files: tuple[str, ...]
    overrides: Mapping[str, Any] = field(default_factory=dict)
    depends_on: tuple[str, ...] = ()
    platform: str = ""  # the one platform it builds ("": the engine's own)
    joined: str = ""  # NAME:TAG, the index its image joins with the other platforms' ("": none)
    joins: tuple[str, ...] = ()  # ... and every platform that index holds
    runner: str = ""  # the CI runner of its platform (--emit-matrix github's runs-on)
    minutes: float = costs.DEFAULT_MINUTES["release"]  # its declared cost ([matrix] minutes)

    @property
    def family(self) -> str:
        """The id of the image it is one platform of: its own id without the platform's suffix."""
        return self.id.removesuffix(platform_data.parse(self.platform).suffix) if self.joined else self.id


def _values(python: str, variant: str, profile: str, registry: str) -> dict[str, str]:
    return derived.template_fields(python, variant, profile, registry=f"{registry.rstrip('/')}/" if registry else "")


def load_matrix(path: Path) -> dict[str, Any]:
    data = configuration.load_toml(path)
    matrix = data.get("matrix")
    if not isinstance(matrix, dict):
        raise ConfigurationError(f"{path} has no [matrix] table; see configs/nightly.toml.")
    return matrix  # the file's other tables are options for every cell, checked by torchbake.planning.config


@dataclass(frozen=True)
class _Matrix:
    """The [matrix] table, checked."""

    pythons: list[str]
    variants: list[str]
    profiles: list[str]
    registry: str
    name: str
    tag: str
    options: Mapping[str, Mapping[str, Any]]
    excludes: list[str]
    source: str
    platforms: tuple[platform_data.Platform, ...] = ()
    runners: Mapping[str, str] = field(default_factory=dict)  # platform name → CI runner label
    minutes: Mapping[str, float] = field(default_factory=dict)  # variant or cell-id glob → declared minutes

    @classmethod
    def read(cls, matrix: Mapping[str, Any], source: str) -> _Matrix:
        unknown = set(matrix) - MATRIX_KEYS
        if unknown:
            word = sorted(unknown)[0]
            raise ConfigurationError(
                f"{source}: unknown [matrix] key {word!r}.{configuration.did_you_mean(word, sorted(MATRIX_KEYS))}"
                f" Keys: {', '.join(sorted(MATRIX_KEYS))}."
            )
        table = cls(pythons=list(matrix.get("pythons", [])), variants=list(matrix.get("variants", variants.VARIANTS)),
                    profiles=list(matrix.get("profiles", ["cpu"])), registry=matrix.get("registry", ""),
                    name=matrix.get("name", "{registry}torchbake/{profile}"), tag=matrix.get("tag", "{variant}-py{py}"),
                    options=matrix.get("options", {}), excludes=list(matrix.get("exclude", [])), source=source,
                    platforms=_platforms(matrix, source), runners=_runners(matrix, source),
                    minutes=costs.declared_minutes(matrix.get("minutes", {}), source))
        redaction.register_reference(table.registry)  # user:password@host: masked in what is said of it
        try:
            validation.registry_url(table.registry)
        except ValueError as exc:
            raise ConfigurationError(f"{source}: [matrix] registry = {table.registry!r}: {exc}.") from None
        if not table.pythons:
            raise ConfigurationError(f"{source}: [matrix] pythons is empty; list the Python versions to build,"
                                     ' e.g. ["3.10", "3.11"].')
        names = list(variants.VARIANTS)
        for variant in table.variants:
            if variant not in names:
                raise ConfigurationError(f"{source}: variant {variant!r} is not one of {', '.join(names)}.")
        for option_variant in table.options:
            if option_variant not in names and option_variant != "all":
                raise ConfigurationError(f"{source}: [matrix.options.{option_variant}] must be one of all,"
                                         f" {', '.join(names)}.")
        return table

    def excluded(self, cell_id: str) -> bool:
        return any(fnmatch.fnmatch(cell_id, pattern) for pattern in self.excludes)

    def runner(self, platform: platform_data.Platform | None) -> str:
        """The CI runner of a platform's cells ([matrix] runners, else GitHub's hosted one of that machine)."""
        if platform is None:
            return "ubuntu-latest"
        return self.runners.get(platform.name, platform.github_runner)

    def reference(self, values: Mapping[str, str]) -> tuple[str, str]:
        return (derived.fill(self.name, values, f"{self.source} [matrix] name"),
                derived.fill(self.tag, values, f"{self.source} [matrix] tag"))

    def cell(self, profile: str, profile_file: Path, python: str, variant: str, known: Mapping[str, Any],
             platform: platform_data.Platform | None = None) -> Cell:
        """The cell of one image; with ``platform``, of that platform's image (suffixed, when the
        matrix has several platforms, and joined with the others' under the image's tag)."""
        values = _values(python, variant, profile, self.registry)
        suffix = platform.suffix if platform is not None and len(self.platforms) > 1 else ""
        name, tag = self.reference(values)
        name = settings.in_registry(name, self.registry)  # a name template without {registry} goes there too
        values["name"] = name
        module = variants.VARIANTS[variant]
        overrides: dict[str, Any] = {"image.name": name, "image.tag": tag + suffix, "python.version": python}
        if platform is not None:
            overrides["image.platforms"] = [platform.name]
        if module.build_variant:
            overrides["build.variant"] = module.build_variant
        if self.registry:  # asked whether it holds the cell's image, and its build cache
            overrides["registry.url"] = self.registry
        for scope in ("all", variant):
            for key, template in self.options.get(scope, {}).items():
                if key not in known:
                    raise ConfigurationError(f"{self.source}: [matrix.options.{scope}] has unknown option {key!r}.")
                value = derived.fill(template, values, f"{self.source} [matrix.options.{scope}] {key}")
                if value not in ("", []):  # empty = "not set": the profile's value stays
                    overrides[key] = value
        depends: tuple[str, ...] = ()
        built_from = module.built_from
        from_id = f"{profile}-{built_from}-py{values['py']}{suffix}" if built_from else ""
        if built_from in self.variants and not self.excluded(from_id):
            depends = (from_id,)
            from_name, from_tag = self.reference({**values, "variant": built_from})
            overrides.setdefault("image.base", f"{settings.in_registry(from_name, self.registry)}:{from_tag}{suffix}")
        cell_id = f"{profile}-{variant}-py{values['py']}{suffix}"
        return Cell(id=cell_id, profile=profile, variant=variant, python=python,
                    minutes=costs.declared(cell_id, variant, self.minutes),
                    image=f"{name}:{tag}{suffix}", config_files=(str(profile_file),), overrides=overrides,
                    depends_on=depends, platform=platform.name if platform is not None else "",
                    joined=f"{name}:{tag}" if suffix else "", runner=self.runner(platform),
                    joins=tuple(p.name for p in self.platforms if not self.excluded(f"{profile}-{variant}-py{values['py']}{p.suffix}"))
                    if suffix else ())


def _platforms(matrix: Mapping[str, Any], source: str) -> tuple[platform_data.Platform, ...]:
    """[matrix] platforms, each named once (empty: the engine's own)."""
    value = matrix.get("platforms", [])
    if not isinstance(value, list):
        raise ConfigurationError(f'{source}: [matrix] platforms = {value!r}: expected a list, e.g. ["linux/amd64",'
                                 ' "linux/arm64"].')
    try:
        return platform_data.parse_all(value)
    except ValueError as exc:
        raise ConfigurationError(f"{source}: [matrix] platforms: {exc}.") from None


def _runners(matrix: Mapping[str, Any], source: str) -> dict[str, str]:
    """[matrix] runners: platform → the CI runner label its cells run on (by default GitHub's
    hosted runner of that machine)."""
    value = matrix.get("runners", {})
    if not isinstance(value, dict) or not all(isinstance(v, str) and v for v in value.values()):
        raise ConfigurationError(f'{source}: [matrix] runners = {value!r}: expected a table of platform = "runner label",'
                                 ' e.g. { "linux/arm64" = "ubuntu-24.04-arm" }.')
    try:
        return {platform_data.parse(key).name: label for key, label in value.items()}
    except ValueError as exc:
        raise ConfigurationError(f"{source}: [matrix] runners: {exc}.") from None


def _profile_file(entry: str, config_dir: Path, source: str, relative_to: Path | None) -> tuple[str, Path]:
    """A profile is a name (configs/<name>.toml) or a path to a config file (named by its stem;
    relative to ``relative_to``, the project file's folder, when given)."""
    is_path = "/" in entry or entry.endswith(".toml")  # as --config reads it (torchbake.core.data.config_file)
    path = (relative_to or Path()) / Path(entry).expanduser() if is_path else config_dir / f"{entry}.toml"
    if not path.is_file():
        raise ConfigurationError(f"{source}: profile {entry!r} has no {path}.")
    return (path.stem if is_path else entry), path


def expand(matrix: Mapping[str, Any], *, source: str = "matrix", config_dir: Path | None = None,
           relative_to: Path | None = None) -> list[Cell]:
    """Every cell, in build order (a cell after the cells it depends on); a profile given as a
    path is relative to ``relative_to`` (the project file's folder) when given."""
    table = _Matrix.read(matrix, source)
    known = settings.schema()
    cells: list[Cell] = []
    for entry in table.profiles:
        profile, profile_file = _profile_file(entry, config_dir or CONFIG_DIR, source, relative_to)
        for python in table.pythons:
            for variant in sorted(table.variants, key=list(variants.VARIANTS).index):
                family = f"{profile}-{variant}-py{python.replace('.', '')}"
                for platform in table.platforms or (None,):
                    suffix = platform.suffix if platform is not None and len(table.platforms) > 1 else ""
                    if not table.excluded(family) and not table.excluded(family + suffix):
                        cells.append(table.cell(profile, profile_file, python, variant, known, platform))
    ids = [c.id for c in cells]
    if len(set(ids)) != len(ids):
        raise ConfigurationError(f"{source}: two cells share an id; check [matrix] profiles and pythons for repeats.")
    images = [c.image for c in cells]
    if len(set(images)) != len(images):
        raise ConfigurationError(f"{source}: two cells would build the same image; make [matrix] name/tag use"
                                 " {variant}, {py} and {profile}.")
    costs.check_keys(table.minutes, ids, source)
    return cells


def select(cells: list[Cell], only: Iterable[str] = (), skip: Iterable[str] = ()) -> list[Cell]:
    """Cells whose id matches any --only glob (all if none) and no --skip glob; the cells they
    depend on come along when they are in the matrix."""
    only, skip = list(only), list(skip)

    def matches(cell: Cell, pattern: str) -> bool:  # a platform's cell also answers to its image's id
        return fnmatch.fnmatch(cell.id, pattern) or fnmatch.fnmatch(cell.family, pattern)

    for flag, patterns in (("--only", only), ("--skip", skip)):
        for pattern in patterns:
            if not any(matches(c, pattern) for c in cells):
                raise ConfigurationError(f"{flag} {pattern!r} matches no cell. Cells: {', '.join(c.id for c in cells)}.")
    chosen = [c for c in cells if (not only or any(matches(c, p) for p in only))
              and not any(matches(c, p) for p in skip)]
    if (only or skip) and not chosen:
        raise ConfigurationError(
            f"No cell matches --only {' '.join(only) or '*'} --skip {' '.join(skip) or '(none)'}."
            f" Cells: {', '.join(c.id for c in cells)}."
        )
    wanted = {c.id for c in chosen}
    by_id = {c.id: c for c in cells}
    stack = list(wanted)
    while stack:
        for dep in by_id[stack.pop()].depends_on:
            if dep in by_id and dep not in wanted:
                wanted.add(dep)
                stack.append(dep)
    return [c for c in cells if c.id in wanted]


def families(cells: list[Cell]) -> dict[str, list[Cell]]:
    """Each image of ``cells`` built for several platforms whose every platform is among them:
    its id → its platforms' cells (what a run joins under the image's tag; an image with a
    platform left out, by --platform or --only, is joined by the run that has them all)."""
    found: dict[str, list[Cell]] = {}
    for cell in cells:
        if cell.joined:
            found.setdefault(cell.family, []).append(cell)
    return {family: members for family, members in found.items()
            if {cell.platform for cell in members} == set(members[0].joins)}


def on_platforms(cells: list[Cell], names: Iterable[str]) -> list[Cell]:
    """The cells of the platforms ``names`` (build-all --platform: a native runner's share)."""
    try:
        wanted = {platform.name for platform in platform_data.parse_all(names)}
    except ValueError as exc:
        raise ConfigurationError(f"--platform: {exc}.") from None
    present = {cell.platform for cell in cells}
    if not wanted:
        return cells
    if absent := sorted(wanted - present):
        builds = ", ".join(sorted(present - {""})) or "none named ([matrix] platforms is not set: the engine's own)"
        raise ConfigurationError(f"--platform {', '.join(absent)}: the matrix builds no image for it; its platforms: {builds}.")
    return [cell for cell in cells if cell.platform in wanted]


def parse_shard(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"([0-9]+)/([0-9]+)", text or "")  # ASCII digits (\d is every script's)
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise ConfigurationError(f"--shard {text!r}: expected I/N with 1 <= I <= N, e.g. 1/2.")
    return int(match.group(1)), int(match.group(2))


def groups(cells: list[Cell]) -> list[list[Cell]]:
    """Cells that depend on each other, together (a base cell with its dev cells), in plan order."""
    found: list[list[Cell]] = []
    group_of: dict[str, int] = {}
    for cell in cells:
        home = next((group_of[d] for d in cell.depends_on if d in group_of), None)
        if home is None:
            found.append([cell])
            group_of[cell.id] = len(found) - 1
        else:
            found[home].append(cell)
            group_of[cell.id] = home
    return found


def shard(cells: list[Cell], index: int, count: int, cost: Mapping[str, costs.Cost] | None = None) -> list[Cell]:
    """Slice ``index`` of ``count``, of about equal cost (:func:`torchbake.fleet.costs.balance`;
    ``cost`` by default the cells' declared minutes), its dependency groups kept whole."""
    cost = cost or {cell.id: costs.Cost(cell.minutes, "declared") for cell in cells}
    return costs.balance(groups(cells), count, cost)[index - 1]


def github_matrix(cells: list[Cell], shards: int, cost: Mapping[str, costs.Cost] | None = None) -> str:
    """JSON for a GitHub Actions matrix: one entry per shard of each platform (its cells, which a
    job builds with ``--only``, the platform, the runner it runs on natively, its expected minutes)."""
    cost = cost or {cell.id: costs.Cost(cell.minutes, "declared") for cell in cells}
    include = []
    for platform in dict.fromkeys(cell.platform for cell in cells):
        mine = [cell for cell in cells if cell.platform == platform]
        for index in range(1, shards + 1):
            slice_ = shard(mine, index, shards, cost)
            if slice_:
                include.append({"shard": f"{index}/{shards}", "platform": platform, "runs-on": mine[0].runner,
                                "cells": " ".join(c.id for c in slice_),
                                "minutes": round(sum(cost[c.id].minutes for c in slice_))})
    return json.dumps({"include": include})
