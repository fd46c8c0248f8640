"""Running a matrix of cells: in dependency order, up to ``jobs`` at once, each skipped when its
image already has its input hash; per-cell logs; a summary table; JSON and JUnit reports; push.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import time
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING
from xml.etree import ElementTree

import filelock

from torchbake.adapters import command
from torchbake.adapters.engine import DockerClient
from torchbake.building import compile_stats, platform_builds
from torchbake.building.builder import assess, build_image, changed_since, log_path, skip_reason
from torchbake.building.publishing import ask_registry, find_in_registry, publish_index, publish_showing_progress
from torchbake.configuration import platforms
from torchbake.configuration.project import Project
from torchbake.configuration.settings import Settings
from torchbake.core import output
from torchbake.core.errors import BaseImagePending, EngineError, FatalError, RegistryError, VerificationError
from torchbake.core.files import write_atomically
from torchbake.core.output import human_size, styled
from torchbake.core.redaction import redact, redact_all
from torchbake.core.status import ON_THIS_ENGINE, Status
from torchbake.fleet.matrix import Cell, families
from torchbake.planning import config as configuration
from torchbake.supply_chain import image_diff
from torchbake.variants import VARIANTS

if TYPE_CHECKING:
    from rich.table import Table


@dataclass
class CellResult:
    id: str
    image: str
    status: Status = Status.PENDING
    reason: str = ""
    seconds: float = 0.0
    size_bytes: int = 0
    image_id: str = ""
    digest: str = ""  # registry digest after --push
    log: str = ""
    error: str = ""  # the first error line
    exit_code: int = 0  # a failed cell's: its error class's (torchbake.core.errors), 1 for an internal error
    changed: str = ""  # a rebuilt cell: what changed against the image its tag held before, in one line
    diff: dict = field(default_factory=dict)  # ... and the whole diff (torchbake.supply_chain.image_diff)
    gpu_checks: dict = field(default_factory=dict)  # image → its GPU rows, when [build] verify_gpus ran them
    compiles: dict = field(default_factory=dict)  # a dev cell: compile step → its counts (building.compile_stats)
    compile_progress: dict = field(default_factory=dict)  # ... and its objects done (building.compile_progress)


def cell_settings(cell: Cell, config_files: list[str], environ: Mapping[str, str], *,
                  overrides: Mapping[str, object] = {}, project: Project | None = None) -> Settings:  # noqa: B006
    """The cell's resolved settings; ``overrides`` (the command line's) apply to every cell, and
    the ``project`` file (torchbake.configuration.project) lies under its profile."""
    resolved = configuration.resolve([*cell.config_files, *config_files], environ, {**cell.overrides, **overrides},
                                     override_source=f"matrix cell {cell.id}", variant=cell.variant, matrix_ok=True,
                                     project=project)
    return resolved.settings()


def cell_plan(cell: Cell, config_files: list[str], environ: Mapping[str, str], *, no_cache: bool = False,
              overrides: Mapping[str, object] = {}, project: Project | None = None):  # noqa: B006 - read-only
    """The cell's plan; ``overrides`` (the command line's) apply to every cell."""
    settings = cell_settings(cell, config_files, environ, overrides=overrides, project=project)
    made = platform_builds.plans(settings, lambda s: VARIANTS[cell.variant].plan(s, python_given=True, no_cache=no_cache))
    return made[0][1]  # a cell builds one platform (torchbake.fleet.matrix): its wheel tags are that platform's


def predict(cell: Cell, plan, client: DockerClient) -> tuple[str, str]:
    """What a run would do with this cell, and why — without building or tagging anything."""
    try:
        facts, digest, found = assess(plan, client, apply=False)
    except BaseImagePending as exc:
        return "build", str(exc)
    except FatalError as exc:
        if cell.depends_on:
            return "build", f"after {', '.join(cell.depends_on)} ({str(exc).splitlines()[0]})"
        return "fail", str(exc).splitlines()[0]
    if not digest:
        return "decide", ("an input is not downloaded yet: the run downloads it first, then skips or re-tags the"
                          " cell if an image here or in the registry has these inputs, else builds it")
    note = ""
    if found is None:
        try:
            found, note = ask_registry(plan, client, digest, apply=False)
        except FatalError as exc:  # --require-registry: the run would fail here
            return "fail", str(exc).splitlines()[0]
    if found is None:
        changed = changed_since(plan, client, facts)
        return "build", "; ".join(["no image has these inputs" + (f" ({note})" if note else ""), *([changed] if changed else [])])
    status, image_id = found
    action = "skip" if status in (Status.UNCHANGED, Status.UNCHANGED_IN_REGISTRY) else "retag"
    return action, f"{status}: {skip_reason(status, image_id)}"


def first_error_line(text: str) -> str:
    """The first line of a build log that says what failed. BuildKit's "importing cache manifest"
    steps end in an ERROR line when the --cache-from image is not there yet (a first night): that
    is no failure, and their lines are passed over; so are the commands torchbake ran ("+ …", whose
    arguments may hold the word, e.g. a cache spec's ignore-error=true)."""
    cache_steps: set[str] = set()
    for line in text.splitlines():
        if line.startswith("+ "):
            continue
        step = line.split(" ", 1)[0] if line.startswith("#") else ""
        if step and "importing cache manifest from" in line:
            cache_steps.add(step)
            continue
        lowered = line.lower()
        if "error" in lowered and "0 error" not in lowered and step not in cache_steps:
            return line.strip()[:300]
    return text.strip().splitlines()[-1][:300] if text.strip() else ""


class MatrixRun:
    def __init__(self, cells: list[Cell], plans: Mapping[str, object], client: DockerClient, channel: output.Channel, *,
                 jobs: int = 1, keep_going: bool = True, force: bool = False, push: bool = False,
                 log_dir: Path, locks_dir: Path | None = None):
        self.cells, self.plans, self.client, self.channel = cells, plans, client, channel
        self.jobs, self.keep_going, self.force, self.push = jobs, keep_going, force, push
        self.log_dir = log_dir
        self.locks_dir = locks_dir  # where a cell's NAME:TAG is locked while it builds and pushes (None: not at all)
        self.results: dict[str, CellResult] = {}
        joined = families(cells)
        for cell in cells:  # an image's platforms, then the image's join
            self.results[cell.id] = CellResult(id=cell.id, image=cell.image)
            if joined.get(cell.family, [None])[-1] is cell:
                self.results[cell.family] = CellResult(id=cell.family, image=cell.joined)
        self.started = datetime.now()
        self.interrupted = False  # set by SIGINT/SIGTERM: a cell stopped by it is "interrupted", not "failed"

    def say(self, text: str) -> None:
        self.channel.say((f"{datetime.now():%H:%M:%S}", "dim"), " ", text)

    def cell_channel(self, log: io.TextIOBase) -> output.Channel:
        """Where a cell's build prints: the run's own channel when cells are built one at a time;
        beside others, only into the cell's log (the summary lines still come here)."""
        return self.channel if self.jobs == 1 else output.Channel(output.console(file=log), commands=False)

    def _quick_check(self, cell: Cell) -> tuple[Status, str, str] | None:
        """(status, image id, input hash) when the cell's image is already up to date (re-tagging
        it if needed); None when it needs the full path (or the check itself failed)."""
        try:
            _facts, digest, found = assess(self.plans[cell.id], self.client, make_base=False)
            if not found and digest:
                found = find_in_registry(self.plans[cell.id], self.client, digest)
        except Exception:  # noqa: BLE001 - the full path reports whatever went wrong here
            return None
        return (*found, digest) if found else None

    def run(self) -> dict[str, CellResult]:
        pending = list(self.cells)
        if not self.force and self.cells:  # every cell's skip check at once: a no-op night takes seconds
            started = time.monotonic()
            with ThreadPoolExecutor(max_workers=min(8, len(self.cells))) as pool:
                checks = list(pool.map(self._quick_check, self.cells))
            up_to_date: set[str] = set()
            for cell, found in zip(self.cells, checks, strict=True):
                # A cell is up to date only if what it starts from is: a base about to be rebuilt
                # makes its dev cells' checks (made against the old base) meaningless.
                if not found or any(dep not in up_to_date for dep in cell.depends_on if dep in self.results):
                    continue
                up_to_date.add(cell.id)
                pending.remove(cell)
                status, image_id, input_hash = found
                reason = skip_reason(status, image_id)
                if status.in_registry:  # already there: nothing to push
                    self._finish(cell.id, status, reason, digest=image_id, seconds=time.monotonic() - started)
                    continue
                size = int((self.client.inspect_image(image_id) or {}).get("Size", 0))
                try:
                    digest = self._push(cell, input_hash, log_path(self.log_dir, cell.id)) if self.push else ""
                except FatalError as exc:
                    self._finish(cell.id, Status.FAILED, str(exc).splitlines()[0], error=str(exc).splitlines()[0],
                                 exit_code=exc.exit_code)
                    continue
                self._finish(cell.id, status, reason, image_id=image_id, size_bytes=size, digest=digest,
                             seconds=time.monotonic() - started)
        running: dict[Future, str] = {}
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            try:
                self._schedule(pool, pending, running)
            except KeyboardInterrupt:
                # The builds run in worker threads: stop their docker processes so each cell's
                # clean-up runs and the pool can close, then let the interrupt end the run.
                self.interrupted = True
                pool.shutdown(wait=False, cancel_futures=True)
                command.terminate_all()
                wait(list(running), timeout=60)
                for result in self.results.values():
                    if result.status in (Status.PENDING, Status.RUNNING):
                        result.status, result.reason = Status.INTERRUPTED, "the run was interrupted"
                raise
        for family, members in families(self.cells).items():
            self._join(family, members)
        return self.results

    def join_only(self) -> dict[str, CellResult]:
        """build-all --join-only: each image's platforms, built and pushed elsewhere (one runner
        per platform), joined under its tag in the registry; no cell is built or asked about."""
        self.results = {family: self.results[family] for family in families(self.cells)}
        for family, members in families(self.cells).items():
            self._join(family, members, in_registry=True)
        return self.results

    def _join(self, family: str, members: list[Cell], *, in_registry: bool = False) -> None:
        """The image ``family``'s tag made the index of its platforms' images: on this engine when
        they are all here, in the registry when pushing (or when they are only there)."""
        started = time.monotonic()
        states = {cell.id: self.results[cell.id].status for cell in members} if not in_registry else {}
        if missing := [cell_id for cell_id, status in states.items() if status.without_image]:
            self._finish(family, Status.BLOCKED, f"{', '.join(missing)} did not build")
            return
        joined, plan = members[0].joined, self.plans[members[0].id]
        images = [(platforms.parse(cell.platform), cell.image) for cell in members]
        here = not in_registry and all(status in ON_THIS_ENGINE for status in states.values())
        there = in_registry or self.push or all(status.in_registry for status in states.values())
        if not (here or there):
            self._finish(family, Status.NOT_RUN, "some platforms' images are on this engine, others only in the"
                         " registry: --push joins them there")
            return
        log = log_path(self.log_dir, family)
        try:
            with self._image_held(family, joined):
                if here:
                    with log.open("a") as handle, output.channel_to(self.cell_channel(handle)):
                        platform_builds.join(self.client, joined, images, plan.build_options.compression, log)
                digest, held = publish_index(plan, self.client, joined, images) if there else ("", False)
        except FatalError as exc:
            self._finish(family, Status.FAILED, str(exc).splitlines()[0], error=str(exc).splitlines()[0],
                         exit_code=exc.exit_code, seconds=time.monotonic() - started, log=str(log) if here else "")
            return
        where = " and ".join([*(["here"] if here else []), *(["in the registry" + (" (unchanged)" if held else "")]
                                                              if there else [])])
        image_id = (self.client.inspect_image(joined) or {}).get("Id", "") if here else ""
        self._finish(family, Status.JOINED, f"{', '.join(p.name for p, _ in images)} {where}",
                     seconds=time.monotonic() - started, image_id=image_id, digest=digest,
                     log=str(log) if here else "")

    def _schedule(self, pool: ThreadPoolExecutor, pending: list[Cell], running: dict[Future, str]) -> None:
        """Start cells as their dependencies finish, up to --jobs at once."""
        stop = False
        while pending or running:
            for cell in list(pending):
                if stop:
                    break
                states = [self.results[d].status for d in cell.depends_on if d in self.results]
                if any(s.without_image for s in states):
                    pending.remove(cell)
                    self._finish(cell.id, Status.BLOCKED, f"{', '.join(cell.depends_on)} failed")
                elif all(s.done for s in states) and len(running) < self.jobs:
                    pending.remove(cell)
                    running[pool.submit(self._run_cell, cell)] = cell.id
            if not running:
                if stop or not pending:
                    break
                continue
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in done:
                cell_id = running.pop(future)
                if self.results[cell_id].status is Status.FAILED and not self.keep_going:
                    stop = True
        for cell in pending:
            self._finish(cell.id, Status.NOT_RUN, "--fail-fast stopped the run")

    def _finish(self, cell_id: str, status: Status, reason: str, **fields) -> None:
        result = self.results[cell_id]
        result.status, result.reason = status, reason
        for key, value in fields.items():
            setattr(result, key, value)
        style = {Status.BUILT: "green", Status.FAILED: "bold red"}.get(status, "cyan" if status.done else "yellow")
        self.say(styled((f"{status:<9}", style), f" {cell_id} {reason}"))

    def _run_cell(self, cell: Cell) -> None:
        started = time.monotonic()
        log = log_path(self.log_dir, f"{cell.id}")
        self.say(f"started   {cell.id} → {cell.image} (log: {log})")
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self._image_held(cell.id, cell.image):  # another matrix building this NAME:TAG waits: its tag, its push
                before = (self.client.inspect_image(cell.image) or {}).get("Id", "")  # what the tag held
                with log.open("a") as handle, output.channel_to(self.cell_channel(handle)):
                    result = build_image(self.plans[cell.id], self.client, skip_unchanged=not self.force,
                                         log_file=log, publish=self.push)
                if result.status is Status.BUILT and before and before != result.image_id:
                    self._note_changes(cell, before, result.image_id)
                registry_done = result.status.in_registry
                digest = self._push(cell, result.input_hash, log) if self.push and not registry_done else ""
            digest = result.image_id if registry_done else digest
            self._finish(cell.id, result.status, result.reason, seconds=time.monotonic() - started,
                         size_bytes=result.size_bytes, image_id="" if registry_done else result.image_id,
                         digest=digest, log=str(log), gpu_checks=result.gpu_checks, compiles=result.compiles,
                         compile_progress=result.compile_progress)
        except FatalError as exc:
            if self.interrupted:
                self.results[cell.id].status = Status.INTERRUPTED
                self.results[cell.id].reason = "the run was interrupted"
                return
            text = str(exc)
            # a failed step's own error line from the log; a failed verification's or push's is its
            # message (the build before it went well, whatever its log says of an optional cache export)
            from_log = log.exists() and not isinstance(exc, VerificationError | RegistryError)
            error = first_error_line(log.read_text(errors="replace")) if from_log else ""
            self._finish(cell.id, Status.FAILED, text.splitlines()[0][:300], seconds=time.monotonic() - started,
                         log=str(log), error=error or text.splitlines()[0], exit_code=exc.exit_code)
        except Exception as exc:  # a bug must not take the other cells down with it
            self._finish(cell.id, Status.FAILED, f"internal error: {exc!r}", seconds=time.monotonic() - started, log=str(log),
                         exit_code=1)

    @contextlib.contextmanager
    def _image_held(self, name: str, image: str):
        """One cell of one NAME:TAG at a time on this host: from its build until its push is done,
        the tag is this run's, so the digest its report records is the image it built (two
        matrices at once: the second waits, then finds the image unchanged, or builds and pushes its own)."""
        if self.locks_dir is None:
            yield
            return
        self.locks_dir.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(self.locks_dir / f"image-{hashlib.sha256(image.encode()).hexdigest()[:16]}.lock")
        try:
            lock.acquire(timeout=0)
        except filelock.Timeout:
            self.say(f"waiting   {name}: another torchbake run is building or pushing {image}")
            lock.acquire()
        try:
            yield
        finally:
            lock.release()

    def _note_changes(self, cell: Cell, before: str, after: str) -> None:
        """What changed from the image the cell's tag held to the one just built, from what this
        host recorded of both (nothing is said when it recorded only one of them)."""
        try:
            old, new = (image_diff.recorded_inventory(self.log_dir, image_id, cell.image) for image_id in (before, after))
        except (OSError, ValueError, KeyError):  # a record that cannot be read: the report says nothing
            return
        if old is None or new is None:
            self.results[cell.id].changed = "(no record of the image the tag held before)"
            return
        found = image_diff.compare(before, old, after, new)
        self.results[cell.id].changed = found.summary()
        self.results[cell.id].diff = found.to_json()

    def _push(self, cell: Cell, input_hash: str, log: Path) -> str:
        """Push the cell's image (a progress bar on a terminal, every event in the cell's log)."""
        return publish_showing_progress(self.plans[cell.id], self.client, input_hash, log, self.channel)


def summary_table(results: Mapping[str, CellResult]) -> Table:
    table = output.table(title="build-all")
    table.add_column("cell", no_wrap=True, min_width=max((len(r.id) for r in results.values()), default=4))
    changes = any(r.changed for r in results.values())
    compiled = any(r.compiles or r.compile_progress for r in results.values())
    for column in ("image", "status", "reason", *(("changed",) if changes else ()), *(("compiled",) if compiled else ()),
                   "time", "size", "digest"):
        table.add_column(column, overflow="fold")
    for r in results.values():
        table.add_row(r.id, r.image, r.status, r.error or r.reason, *((r.changed,) if changes else ()),
                      *((compile_stats.record_summary(r.compiles, r.compile_progress),) if compiled else ()),
                      f"{r.seconds:.0f}s", human_size(r.size_bytes) if r.size_bytes else "",
                      (r.digest or r.image_id)[:19])
    return table


def failure_lines(results: Mapping[str, CellResult]) -> list[str]:
    """One line per cell that did not build: its status, id and first error line, with its log."""
    return [f"{r.status} {r.id}: {r.error or r.reason}" + (f" (log: {r.log})" if r.log else "")
            for r in results.values() if r.status.without_image]


def write_json(path: Path, results: Mapping[str, CellResult], started: datetime) -> None:
    data = {"started": started.isoformat(timespec="seconds"), "finished": datetime.now().isoformat(timespec="seconds"),
            "cells": [asdict(r) for r in results.values()]}
    write_atomically(path, json.dumps(redact_all(data), indent=2) + "\n")


def write_junit(path: Path, results: Mapping[str, CellResult]) -> None:
    failures = [r for r in results.values() if r.status.failed]
    suite = ElementTree.Element("testsuite", name="torchbake build-all", tests=str(len(results)),
                                failures=str(len(failures)),
                                skipped=str(sum(r.status in (Status.NOT_RUN, Status.SKIPPED) for r in results.values())),
                                time=f"{sum(r.seconds for r in results.values()):.1f}")
    for r in results.values():
        case = ElementTree.SubElement(suite, "testcase", classname="build-all", name=r.id, time=f"{r.seconds:.1f}")
        if r.status.failed:
            failure = ElementTree.SubElement(case, "failure", message=r.error or r.reason)
            failure.text = f"{r.reason}\nlog: {r.log}"
        elif r.status in (Status.NOT_RUN, Status.SKIPPED):
            ElementTree.SubElement(case, "skipped", message=r.reason)
        else:
            compiled = compile_stats.record_summary(r.compiles, r.compile_progress)
            ElementTree.SubElement(case, "system-out").text = (f"{r.status}: {r.reason} {r.image} {r.digest or r.image_id}"
                                                               + (f"\ncompiled: {compiled}" if compiled else ""))
    buffer = io.BytesIO()
    ElementTree.ElementTree(suite).write(buffer, encoding="utf-8", xml_declaration=True)
    write_atomically(path, redact(buffer.getvalue().decode()))


INFRASTRUCTURE_CODES = (EngineError.exit_code, RegistryError.exit_code)  # in this order of precedence


def exit_status(results: Mapping[str, CellResult]) -> int:
    """0 when every cell is done; 4 when a cell found the engine not answering, else 10 when a push
    was refused or the registry could not be reached (what failed is the night's machinery, not a
    cell: CI may retry); else 1 when any cell failed or did not run (one --skip-incomplete left
    out is neither)."""
    failed = [r for r in results.values() if r.status.without_image and r.status is not Status.SKIPPED]
    codes = {r.exit_code for r in failed}
    return next((code for code in INFRASTRUCTURE_CODES if code in codes), 1) if failed else 0

