"""``invoke build-all``: the nightly matrix — planned, incremental, parallel, reported, pushed."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from invoke import Collection, Exit

from torchbake.configuration import platforms, validation
from torchbake.configuration.options import BUILD_ALL_FLAGS, overrides
from torchbake.configuration.writable import check_output_file
from torchbake.core import output, redaction
from torchbake.core.data import CONFIG_DIR, config_file
from torchbake.core.errors import ConfigurationError, FatalError, MissingValuesError
from torchbake.core.lazy import LazyModule
from torchbake.core.output import human_size
from torchbake.core.status import Status
from torchbake.fleet import costs
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
from torchbake.tasks.gc import collect, limits_of

if TYPE_CHECKING:
    from torchbake.planning import config as configuration
else:
    configuration = LazyModule("torchbake.planning.config")  # read when the task runs

# imported when the task runs (see tasks/build.py)
if TYPE_CHECKING:
    from torchbake import variants
    from torchbake.building import publishing
    from torchbake.fleet import runner, summary
else:
    runner = LazyModule("torchbake.fleet.runner")
    summary = LazyModule("torchbake.fleet.summary")
    publishing = LazyModule("torchbake.building.publishing")
    variants = LazyModule("torchbake.variants")

def selected_cells(config_files: list[str], only, skip, platform_names, shard_text,
                   found, registry: str | None = None) -> tuple[list[Cell], list[str]]:
    """The selected cells (of the --platform platforms, in the --shard slice) of the last
    --config file's [matrix], else the project file's, else the bundled nightly matrix's, its
    registry ``registry`` where given (--registry); and the config files every cell reads."""
    in_project = found is not None and "matrix" in found.data
    files = [config_file(raw) for raw in config_files] or ([] if in_project else [str(CONFIG_DIR / "nightly.toml")])
    matrix_files = [f for f in files if "matrix" in configuration.load_toml(Path(f))]
    given = {} if registry is None else {"registry": registry}
    if registry:
        redaction.register_reference(registry)  # user:password@host: masked in what is said of it
        try:
            validation.registry_url(registry)
        except ValueError as exc:
            raise ConfigurationError(f"--registry {registry!r}: {exc}.") from None
    if matrix_files:
        expanded = expand({**load_matrix(Path(matrix_files[-1])), **given}, source=matrix_files[-1])
    elif in_project:  # its profile paths are relative to it
        expanded = expand({**found.data["matrix"], **given}, source=found.source, relative_to=found.folder)
    else:
        raise ConfigurationError(f"None of {', '.join(files)} has a [matrix] table; see {CONFIG_DIR / 'nightly.toml'}.")
    cells = on_platforms(select(expanded, only or [], skip or []), platform_names or [])
    if shard_text is not None:  # (--shard "" is a bad shard, not none)
        index, count = parse_shard(shard_text)
        cells = shard(cells, index, count, cell_costs(cells))
    return cells, files


def cell_costs(cells: list[Cell]) -> dict[str, costs.Cost]:
    """Each cell's expected minutes (torchbake.fleet.costs): a dev cell's from the provenance of
    its last image in its registry, where there is one."""
    from torchbake.adapters import registry
    from torchbake.configuration.network import DownloadPolicy
    from torchbake.supply_chain import attestations

    briefly = DownloadPolicy(retries=1, retry_max_time=20.0, timeout=10.0)  # a weight is not worth a night's wait

    def ask(image: str) -> str | None:
        host, repository, tag = registry.split_reference(image)
        return attestations.fetch(registry.for_host(host, {}, briefly), repository, tag, "provenance") if host else None

    with output.channel_to(output.Channel(output.console(stderr=True))) as notes:  # stdout: --emit-matrix's JSON alone
        return costs.costs(cells, ask, notes.say)


@flag_task(*BUILD_ALL_FLAGS)
@reports_errors
def build_all(c, **given):
    """Build the nightly matrix, in dependency order.

    Unchanged cells are skipped; a summary table comes at the end."""
    report, junit, plan, force, no_cache = (given[k] for k in ("report", "junit", "plan", "force", "no_cache"))
    emit_matrix, shard_text = given["emit_matrix"], given["shard"]
    join_only = given["join_only"]
    _check_shards(shard_text, given["shards"], emit_matrix=bool(emit_matrix))
    _check_flags(keep_going=given["keep_going"], fail_fast=given["fail_fast"], jobs=given["jobs"],
                 emit_matrix=emit_matrix, plan=plan, reports=bool(report or junit or given["summary"]), no_cache=no_cache, force=force,
                 join_only=join_only)
    if given["sign_key"] and not (given["push"] or join_only or plan or emit_matrix):
        raise ConfigurationError("--sign-key signs what --push publishes, and nothing is pushed: add --push.")
    outputs = {flag: check_output_file(path, flag) for flag, path in (("--report", report), ("--junit", junit),
                                                                      ("--summary", given["summary"])) if path}
    title = " ".join(["torchbake build-all", *(["--join-only"] if join_only else []),
                      *([f"shard {shard_text}"] if shard_text and not join_only else []), *(given["platform"] or [])])
    found = current_project()
    cells, files = selected_cells(list(given["config"] or []), given["only"], given["skip"], given["platform"],
                                  None if emit_matrix or join_only else shard_text, found, given["registry"])
    every_cell = list(cells)
    if join_only and not families(cells):
        raise ConfigurationError("--join-only: no selected image is built for several platforms ([matrix] platforms)"
                                 " with all of them selected, so there is nothing to join.")
    if emit_matrix:
        most = max((len(groups([cell for cell in cells if cell.platform == platform]))
                    for platform in {cell.platform for cell in cells}), default=0)
        if given["shards"] > most:  # stdout is the JSON alone
            output.Channel(output.console(stderr=True)).say(
                f"--shards {given['shards']}: the selected cells make {most} group{'s' if most != 1 else ''} that build"
                f" apart (a base cell with the cells built from it), so at most {most} job{'s' if most != 1 else ''} a"
                f" platform; each keeps its label I/{given['shards']}, the slice `invoke build-all --plan --shard"
                f" I/{given['shards']}` shows.")
        output.result(github_matrix(cells, given["shards"] or len(groups(cells)), cell_costs(cells)) + "\n")
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
            refused(outputs, cells, {cell.id: (str(exc), exc.exit_code)}, title)
            raise
    skipped = incomplete(cells, needs) if given["skip_incomplete"] and not plan else {}
    cells, needs = [cell for cell in cells if cell.id not in skipped], {} if skipped else needs
    if needs and not plan:
        error = missing_in_matrix(cells, needs)
        refused(outputs, cells, {cell_id: ("needs values that are not set: " + ", ".join(keys), error.exit_code)
                                 for cell_id, keys in needs.items()}, title)
        raise error
    first = next((cell for cell in cells if cell.id in plans), None)  # its engine and folders are the run's
    settings = (runner.cell_settings(first, shared, environ, overrides=trust, project=found) if first
                else configuration.resolve([], environ, project=found).settings())
    if given["push"] or join_only:  # a key that cannot sign (or no Sigstore to sign keylessly) stops the night first
        signer = publishing.signer_from(settings.sign)
        if signer is not None:
            signer.ready()
    if settings.gc.after_build_all:  # its limits checked now, not after a night of builds
        limits_of(settings)
    check_folders(settings, create=not plan)
    client = docker_client(settings, choice=given["docker"], writes=not plan)
    client.check_engine()
    if plan:
        _print_plan(cells, plans, needs, client, force=force, skip_incomplete=given["skip_incomplete"])
        return
    out = output.channel()
    run = runner.MatrixRun(cells, plans, client, out, jobs=given["jobs"], keep_going=not given["fail_fast"],
                           force=force, push=given["push"],
                           log_dir=settings.paths.log_dir, locks_dir=settings.paths.cache_dir / "locks")
    images = {cell.id: cell.image for cell in every_cell}
    run.results.update({cell_id: runner.CellResult(cell_id, images[cell_id], Status.SKIPPED, why)
                        for cell_id, why in skipped.items()})
    try:
        results = run.join_only() if join_only else run.run()
    finally:  # the reports first, also when interrupted: one failure must never hide the night's results
        _write_reports(outputs, run.results, run.started, title)
    out.show(runner.summary_table(results))
    _after_run(out, results, settings, client, title)
    status = runner.exit_status(results)
    if status:
        failed = [r.id for r in results.values() if not r.status.done]
        raise Exit(message=f"torchbake: error: {len(failed)} of {len(results)} cells did not build: {', '.join(failed)}.",
                   code=status)


def refused(outputs: dict[str, Path], cells: list[Cell], reasons: dict[str, tuple[str, int]], title: str) -> None:
    """The reports of a run that stopped before any work: each refused cell with its reason and
    exit code, every other cell not run. A nightly's CI shows why, whatever the outcome."""
    results = {cell.id: runner.CellResult(cell.id, cell.image, Status.REFUSED, reasons[cell.id][0],
                                          error=reasons[cell.id][0].splitlines()[0], exit_code=reasons[cell.id][1])
               if cell.id in reasons else
               runner.CellResult(cell.id, cell.image, Status.NOT_RUN, "the run stopped before any work: "
                                 + ", ".join(reasons) + " refused")
               for cell in cells}
    _write_reports(outputs, results, datetime.now(), title)


def _write_reports(outputs: dict[str, Path], results: dict, started: datetime, title: str) -> None:
    """--report (JSON), --junit (XML) and --summary (Markdown), whichever were asked for."""
    if "--summary" in outputs:
        summary.write(outputs["--summary"], results, title)
    if "--report" in outputs:
        runner.write_json(outputs["--report"], results, started)
    if "--junit" in outputs:
        runner.write_junit(outputs["--junit"], results)


def _check_shards(shard_text: str | None, shards: int, *, emit_matrix: bool) -> None:
    """--shard I/N builds one slice; --emit-matrix prints every slice, as many as --shards N."""
    if emit_matrix and shard_text is not None:
        count = shard_text.rsplit("/", 1)[-1]
        example = count if count.isdigit() and int(count) > 0 else "4"
        raise ConfigurationError(f"--shard {shard_text!r} picks the one slice a run builds; --emit-matrix prints every"
                                 f" slice: give how many with --shards N, e.g. --emit-matrix github --shards {example}.")
    if shards and not emit_matrix:
        raise ConfigurationError(f"--shards {shards} says how many slices --emit-matrix prints; to build one slice of"
                                 f" {shards}, give --shard I/{shards} (e.g. --shard 1/{shards}).")
    if shards < 0:
        raise ConfigurationError(f"--shards {shards}: expected a number of shards, 1 or more.")


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
    if emit_matrix and plan:
        raise ConfigurationError("--emit-matrix prints the CI matrix and --plan the plan; run one, then the other.")
    if (plan or emit_matrix) and reports:
        raise ConfigurationError(f"--report, --junit and --summary write the results of a run; {'--plan' if plan else '--emit-matrix'}"
                                 " runs nothing. Leave them out, or run without it.")
    if no_cache and not force:
        raise ConfigurationError("--no-cache rebuilds every step, so it needs --force (unchanged cells are skipped otherwise).")


# what each action of the plan says in its summary line, in the line's order
PLAN_STATES = {"build": "to build", "retag": "to re-tag", "skip": "unchanged", "decide": "decided when run",
               "fail": "failing already", "blocked": "blocked by a failing cell", "needs values": "needing values"}


def _plan_order(item: tuple[str, int]) -> int:
    order = [*PLAN_STATES.values(), "skipped (--skip-incomplete)"]
    return order.index(item[0]) if item[0] in order else len(order)


def _print_plan(cells: list[Cell], plans: dict, needs: dict[str, list[str]], client, *, force: bool,
                skip_incomplete: bool = False) -> None:
    """The ordered plan: what a run would do with each cell and why, or the values it still needs
    (with ``skip_incomplete``: that the run skips it, and the cells that start from it)."""
    table = output.table(title="build-all plan")
    joined = families(cells)
    skipped: set[str] = set()
    failing: set[str] = set()  # cells failing already, and those that start from one (the run marks them blocked)
    counted: dict[str, int] = {}
    for column in ("#", "cell", "image", "action", "why"):
        table.add_column(column, overflow="fold")
    for index, cell in enumerate(cells, 1):
        starts = [d for d in cell.depends_on if d in skipped]
        if skip_incomplete and (cell.id in needs or starts):
            skipped.add(cell.id)
            action, why = "skip", (f"needs {', '.join(needs[cell.id])} (--skip-incomplete)" if cell.id in needs
                                   else f"starts from {', '.join(starts)}, skipped")
        elif cell.id in needs:
            action, why = "needs values", "\n".join(
                f"{key}: {' / '.join(w.removesuffix(' = ... in a --config file') for w in variants.ways_to_set(key, matrix=True))}"
                for key in needs[cell.id])
        elif blocked_by := [d for d in cell.depends_on if d in failing]:
            action, why = "blocked", f"starts from {', '.join(blocked_by)}, which fails already: a run would not build it"
        else:
            action, why = runner.predict(cell, plans[cell.id], client)
            if force and action != "fail":  # --force builds what is unchanged, never what cannot be built
                action, why = "build", "--force"
            if cell.platform and action == "build":  # where its steps run: natively or emulated
                why += "\n" + platforms.how_built(cell.platform, plans[cell.id].build_options.builder,
                                                  from_wheels=plans[cell.id].wheels_unpacked_natively)
            if getattr(plans[cell.id], "lock_path", ""):  # a release or base cell: its closure locked, or floating
                why += f"\nclosure {plans[cell.id].lock_state}"
        table.add_row(*(output.styled(str(v)) for v in (index, cell.id, cell.image, action, why)))
        if action in ("fail", "blocked"):
            failing.add(cell.id)
        state = "skipped (--skip-incomplete)" if cell.id in skipped else PLAN_STATES.get(action, action)
        counted[state] = counted.get(state, 0) + 1
        if joined.get(cell.family, [None])[-1] is cell:  # an image's last platform: then its join
            members = [other.platform for other in joined[cell.family]]
            table.add_row(*(output.styled(v) for v in ("", cell.family, cell.joined, "join",
                                              f"one tag for {', '.join(members)}: the index of their images")))
    output.channel().show(table)
    joins = sum(1 for members in joined.values() if members)
    states = ", ".join(f"{number} {state}" for state, number in sorted(counted.items(), key=_plan_order))
    if not cells:
        output.channel().say("Plan: no cells (none selected).")
    else:
        output.channel().say(f"Plan: {output.plural(len(cells), 'cell')}: {states}"
                             + (f"; then {output.plural(joins, 'join')}." if joins else "."))
    unset = f"{len(needs)} of {output.plural(len(cells), 'cell')} need{'s' if len(needs) == 1 else ''} values that are not set"
    if needs and skip_incomplete:
        output.channel().say(f"{unset}: --skip-incomplete skips them and the cells that start from them ({len(skipped)} in all).")
    elif needs:
        output.channel().say(f"{unset}; building now would stop before any work and name each.")


def _after_run(out, results: dict, settings, client, title: str) -> None:
    """What a run says after its table: each cell that did not build, the webhook told of a failed
    night, and [gc] after_build_all's collection."""
    for line in runner.failure_lines(results):  # unwrapped, for CI logs: the table folds long errors
        out.say(line)
    failed = sum(r.status.failed for r in results.values())
    if settings.notify.webhook and failed:  # a failed night is told, or said that it could not be
        why = summary.post(settings.notify.webhook, results, title)
        if why:
            out.say(("Warning:", "yellow"), f" the webhook ([notify] webhook) was not told of the {failed} failed"
                                            f" cell(s): {why}.")
        else:
            out.say(f"Told the webhook ([notify] webhook) of the {failed} failed cell(s).")
    if settings.gc.after_build_all:  # [gc] after_build_all: a year of nights stays within its budget
        done = collect(settings, client, dry_run=False)  # measures the disk before and after
        before, after = done.before, done.after
        out.say(f"Disk used: engine {human_size(before[0])} -> {human_size(after[0])},"
                f" cache folder {human_size(before[1])} -> {human_size(after[1])}.")


def incomplete(cells: list[Cell], needs: dict[str, list[str]]) -> dict[str, str]:
    """--skip-incomplete: each cell that needs values not set, and each cell that starts from one of
    them, with why, each said in one line."""
    skipped = {cell_id: f"needs {', '.join(keys)} (set {variants.how_to_set(keys[0], matrix=True)})"
               for cell_id, keys in needs.items()}
    for cell in cells:  # in dependency order: a cell after the cells it starts from
        if cell.id not in skipped and (starts := [d for d in cell.depends_on if d in skipped]):
            skipped[cell.id] = f"starts from {', '.join(starts)}, skipped"
    for cell_id, why in skipped.items():
        output.channel().say(f"Skipped {cell_id}: {why}")
    return skipped


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
