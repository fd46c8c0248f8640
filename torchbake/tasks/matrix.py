"""``invoke build-all``: the nightly matrix — planned, incremental, parallel, reported, pushed."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from invoke import Collection, Exit

from torchbake.configuration import platforms
from torchbake.configuration.options import BUILD_ALL_FLAGS, overrides
from torchbake.configuration.writable import check_output_file
from torchbake.core import output
from torchbake.core.data import CONFIG_DIR, config_file
from torchbake.core.errors import ConfigurationError, FatalError, MissingValuesError
from torchbake.core.lazy import LazyModule
from torchbake.core.output import human_size
from torchbake.core.status import Status
from torchbake.fleet.matrix import (
    Cell,
    expand,
    families,
    github_matrix,
    groups,
    load_matrix,
    on_platforms,
    parse_shard,
    select,
    shard,
)
from torchbake.tasks.cli import check_folders, current_project, docker_client, flag_task, reports_errors
from torchbake.tasks.gc import collect

if TYPE_CHECKING:
    from torchbake.planning import config as configuration
else:
    configuration = LazyModule("torchbake.planning.config")  # read when the task runs

# imported when the task runs (see tasks/build.py)
if TYPE_CHECKING:
    from torchbake import variants
    from torchbake.building import publishing
    from torchbake.fleet import runner
else:
    runner = LazyModule("torchbake.fleet.runner")
    publishing = LazyModule("torchbake.building.publishing")
    variants = LazyModule("torchbake.variants")

def selected_cells(config_files: list[str], only, skip, platform_names, shard_text,
                   found) -> tuple[list[Cell], list[str]]:
    """The selected cells (of the --platform platforms, in the --shard slice) of the last
    --config file's [matrix], else the project file's, else the bundled nightly matrix's; and the
    config files every cell reads."""
    in_project = found is not None and "matrix" in found.data
    files = [config_file(raw) for raw in config_files] or ([] if in_project else [str(CONFIG_DIR / "nightly.toml")])
    matrix_files = [f for f in files if "matrix" in configuration.load_toml(Path(f))]
    if matrix_files:
        expanded = expand(load_matrix(Path(matrix_files[-1])), source=matrix_files[-1])
    elif in_project:  # its profile paths are relative to it
        expanded = expand(found.data["matrix"], source=found.source, relative_to=found.folder)
    else:
        raise ConfigurationError(f"None of {', '.join(files)} has a [matrix] table; see {CONFIG_DIR / 'nightly.toml'}.")
    cells = on_platforms(select(expanded, only or [], skip or []), platform_names or [])
    if shard_text:
        cells = shard(cells, *parse_shard(shard_text))
    return cells, files


@flag_task(*BUILD_ALL_FLAGS)
@reports_errors
def build_all(c, **given):
    """Build the nightly matrix, in dependency order.

    Unchanged cells are skipped; a summary table comes at the end."""
    report, junit, plan, force, no_cache = (given[k] for k in ("report", "junit", "plan", "force", "no_cache"))
    emit_matrix, shard_text = given["emit_matrix"], given["shard"]
    join_only = given["join_only"]
    _check_flags(keep_going=given["keep_going"], fail_fast=given["fail_fast"], jobs=given["jobs"],
                 emit_matrix=emit_matrix, plan=plan, reports=bool(report or junit), no_cache=no_cache, force=force,
                 join_only=join_only)
    if given["sign_key"] and not (given["push"] or join_only or plan or emit_matrix):
        raise ConfigurationError("--sign-key signs what --push publishes, and nothing is pushed: add --push.")
    outputs = {flag: check_output_file(path, flag) for flag, path in (("--report", report), ("--junit", junit)) if path}
    found = current_project()
    cells, files = selected_cells(list(given["config"] or []), given["only"], given["skip"], given["platform"],
                          None if emit_matrix or join_only else shard_text, found)
    if join_only and not families(cells):
        raise ConfigurationError("--join-only: no selected image is built for several platforms ([matrix] platforms)"
                                 " with all of them selected, so there is nothing to join.")
    if emit_matrix:
        count = parse_shard(shard_text)[1] if shard_text else len(groups(cells))
        output.result(github_matrix(cells, count) + "\n")
        return
    environ = dict(os.environ)
    shared = [f for f in files if set(configuration.load_toml(Path(f))) - {"matrix"}]
    trust = overrides(BUILD_ALL_FLAGS, given)  # the command line's options, for every cell
    plans, needs = {}, {}
    for cell in cells:  # every cell checked up front; every value a cell still needs collected
        try:
            plans[cell.id] = runner.cell_plan(cell, shared, environ, no_cache=no_cache, overrides=trust, project=found)
        except MissingValuesError as exc:
            needs[cell.id] = [key for key, _ in exc.missing]
        except FatalError as exc:  # the reports say which cell was refused and why, then the run stops
            refused(outputs, cells, {cell.id: (str(exc), exc.exit_code)})
            raise
    if needs and not plan:
        error = missing_in_matrix(cells, needs)
        refused(outputs, cells, {cell_id: ("needs values that are not set: " + ", ".join(keys), error.exit_code)
                                 for cell_id, keys in needs.items()})
        raise error
    first = next((cell for cell in cells if cell.id in plans), None)  # its engine and folders are the run's
    settings = (runner.cell_settings(first, shared, environ, overrides=trust, project=found) if first
                else configuration.resolve([], environ, project=found).settings())
    if given["push"] or join_only:  # a key that cannot sign (or no Sigstore to sign keylessly) stops the night first
        signer = publishing.signer_from(settings.sign)
        if signer is not None:
            signer.ready()
    check_folders(settings, create=not plan)
    client = docker_client(settings, choice=given["docker"], writes=not plan)
    client.check_engine()
    if plan:
        _print_plan(cells, plans, needs, client, force=force)
        return
    out = output.channel()
    run = runner.MatrixRun(cells, plans, client, out, jobs=given["jobs"], keep_going=not given["fail_fast"],
                           force=force, push=given["push"],
                           log_dir=settings.paths.log_dir, locks_dir=settings.paths.cache_dir / "locks")
    try:
        results = run.join_only() if join_only else run.run()
    finally:  # the reports first, also when interrupted: one failure must never hide the night's results
        _write_reports(outputs, run.results, run.started)
    out.show(runner.summary_table(results))
    for line in runner.failure_lines(results):  # unwrapped, for CI logs: the table folds long errors
        out.say(line)
    if settings.gc.after_build_all:  # [gc] after_build_all: a year of nights stays within its budget
        done = collect(settings, client, dry_run=False)  # measures the disk before and after
        before, after = done.before, done.after
        out.say(f"Disk used: engine {human_size(before[0])} -> {human_size(after[0])},"
                f" cache folder {human_size(before[1])} -> {human_size(after[1])}.")
    status = runner.exit_status(results)
    if status:
        failed = [r.id for r in results.values() if not r.status.done]
        raise Exit(message=f"torchbake: error: {len(failed)} of {len(results)} cells did not build: {', '.join(failed)}.",
                   code=status)


def refused(outputs: dict[str, Path], cells: list[Cell], reasons: dict[str, tuple[str, int]]) -> None:
    """The reports of a run that stopped before any work: each refused cell with its reason and
    exit code, every other cell not run. A nightly's CI shows why, whatever the outcome."""
    results = {cell.id: runner.CellResult(cell.id, cell.image, Status.REFUSED, reasons[cell.id][0],
                                          error=reasons[cell.id][0].splitlines()[0], exit_code=reasons[cell.id][1])
               if cell.id in reasons else
               runner.CellResult(cell.id, cell.image, Status.NOT_RUN, "the run stopped before any work: "
                                 + ", ".join(reasons) + " refused")
               for cell in cells}
    _write_reports(outputs, results, datetime.now())


def _write_reports(outputs: dict[str, Path], results: dict, started: datetime) -> None:
    """--report (JSON) and --junit (XML), whichever were asked for."""
    if "--report" in outputs:
        runner.write_json(outputs["--report"], results, started)
    if "--junit" in outputs:
        runner.write_junit(outputs["--junit"], results)


def _check_flags(*, keep_going: bool, fail_fast: bool, jobs: int, emit_matrix: str | None, plan: bool, reports: bool,
                 no_cache: bool, force: bool, join_only: bool) -> None:
    """Flags that contradict each other or have no effect, before anything is read."""
    if join_only and (plan or emit_matrix or force or no_cache):
        given = next(flag for flag, on in (("--plan", plan), ("--emit-matrix", emit_matrix), ("--force", force),
                                           ("--no-cache", no_cache)) if on)
        raise ConfigurationError(f"--join-only builds nothing, so {given} has no effect with it; leave one out.")
    if keep_going and fail_fast:
        raise ConfigurationError("--keep-going and --fail-fast contradict each other; pass one.")
    if jobs < 1:
        raise ConfigurationError(f"--jobs {jobs}: expected 1 or more.")
    if emit_matrix not in (None, "github"):
        raise ConfigurationError(f"--emit-matrix {emit_matrix!r}: the one format is 'github'.")
    if (plan or emit_matrix) and reports:
        raise ConfigurationError(f"--report and --junit write the results of a run; {'--plan' if plan else '--emit-matrix'}"
                                 " runs nothing. Leave them out, or run without it.")
    if no_cache and not force:
        raise ConfigurationError("--no-cache rebuilds every step, so it needs --force (unchanged cells are skipped otherwise).")


def _print_plan(cells: list[Cell], plans: dict, needs: dict[str, list[str]], client, *, force: bool) -> None:
    """The ordered plan: what a run would do with each cell and why, or the values it still needs."""
    table = output.table(title="build-all plan")
    joined = families(cells)
    for column in ("#", "cell", "image", "action", "why"):
        table.add_column(column, overflow="fold")
    for index, cell in enumerate(cells, 1):
        if cell.id in needs:
            action, why = "needs values", "\n".join(
                f"{key}: {' / '.join(w.removesuffix(' = ... in a --config file') for w in variants.ways_to_set(key, matrix=True))}"
                for key in needs[cell.id])
        else:
            action, why = ("build", "--force") if force else runner.predict(cell, plans[cell.id], client)
            if cell.platform and action == "build":  # where its steps run: natively or emulated
                why += "\n" + platforms.how_built(cell.platform, plans[cell.id].build_options.builder,
                                                  from_wheels=plans[cell.id].wheels_unpacked_natively)
            if getattr(plans[cell.id], "lock_path", ""):  # a release or base cell: its closure locked, or floating
                why += f"\nclosure {plans[cell.id].lock_state}"
        table.add_row(*(output.styled(str(v)) for v in (index, cell.id, cell.image, action, why)))
        if joined.get(cell.family, [None])[-1] is cell:  # an image's last platform: then its join
            members = [other.platform for other in joined[cell.family]]
            table.add_row(*(output.styled(v) for v in ("", cell.family, cell.joined, "join",
                                              f"one tag for {', '.join(members)}: the index of their images")))
    output.channel().show(table)
    if needs:
        output.channel().say(f"{len(needs)} of {len(cells)} cells need values that are not set; building now would stop"
                  " before any work and name each.")


def missing_in_matrix(cells: list[Cell], needs: dict[str, list[str]]) -> ConfigurationError:
    """One error naming every value any cell still needs, the cells that need it and where to set it."""
    by_key: dict[str, list[str]] = {}
    for cell in cells:
        for key in needs.get(cell.id, []):
            by_key.setdefault(key, []).append(cell.id)
    lines = [f"  {key} (cells {', '.join(ids)}): set {variants.how_to_set(key, matrix=True)}" for key, ids in by_key.items()]
    return ConfigurationError(
        f"{len(needs)} of {len(cells)} cells need values that are not set; nothing was built:\n" + "\n".join(lines)
        + "\n`invoke build-all --plan` shows every cell and what it needs."
    )


ns = Collection(build_all)
