from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INVOKE = [sys.executable, "-m", "invoke"]


@pytest.fixture
def clean_env(monkeypatch):
    """No TORCHBAKE_* or legacy variables from the developer's shell leak into a test."""
    for var in list(os.environ):
        if var.startswith("TORCHBAKE_") or var in ("DOCKER_BUILD_DIR",):
            monkeypatch.delenv(var)
    return monkeypatch


def run_invoke(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT, root: Path = ROOT,
               timeout: float = 1800, input: str | None = None, wrap=None) -> subprocess.CompletedProcess[str]:
    """Run `invoke ARGS` as a user would, collecting output (``input``: piped to its standard input;
    ``wrap``: a function that wraps the command line, e.g. tests.e2e.helpers.gpu_less)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHBAKE_")}
    full_env.update(env or {})
    argv = [*INVOKE, "--search-root", str(root), *args]
    # forked from a process that has imported invoke (tests/forked_invoke.py), but where the
    # interpreter's own start is asked for (PYTHON* variables: a path, import times, buffering)
    if wrap is None and root == ROOT and input is None and not any(k.startswith("PYTHON") for k in env or {}):
        with recorded(["invoke", *args]) as record:
            done, record["cpu"] = forked_invoke_server().run(argv, argv[3:], env=full_env, cwd=cwd, timeout=timeout)
            return done
    with recorded(["invoke", *args]):
        return subprocess.run(
            wrap(argv) if wrap else argv, cwd=cwd, env=full_env, capture_output=True,
            text=True, timeout=timeout, **({"input": input} if input is not None else {"stdin": subprocess.DEVNULL}),
        )


_FORKED: list = []


def forked_invoke_server():
    """This worker's forked-invoke server (tests/forked_invoke.py), started on first use."""
    if not _FORKED:
        import atexit
        import tempfile

        from tests.forked_invoke import ForkedInvoke

        _FORKED.append(ForkedInvoke(Path(tempfile.gettempdir()), ROOT))
        atexit.register(_FORKED[0].stop)
    return _FORKED[0]


@contextlib.contextmanager
def recorded(argv: list[str]):
    """Where SUITE_INVOCATIONS names a file (scripts/measure-modules.sh), each command a test runs
    is a line of it: the test, the command, its seconds and its CPU seconds (its own and its
    children's): what finds two tests making the same image. The block gets a dict: a command
    that is not this process's child (forked by tests/forked_invoke.py) puts its CPU under "cpu"."""
    path = os.environ.get("SUITE_INVOCATIONS")
    record: dict = {}
    if not path:
        yield record
        return
    at, started, cpu = time.time(), time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        yield record
    finally:
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        _record(path, {"test": os.environ.get("PYTEST_CURRENT_TEST", ""), "argv": argv, "at": round(at, 2),
                       "seconds": round(time.monotonic() - started, 2),
                       "cpu": round(record.get("cpu", 0) + used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime, 2)})


def _record(path: str, line: dict) -> None:
    line["worker"] = os.environ.get("PYTEST_XDIST_WORKER", "")
    with open(path, "a", encoding="utf-8") as out:  # one write of one line: whole beside other workers'
        out.write(json.dumps(line) + "\n")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item):
    """Where SUITE_INVOCATIONS names a file, each test is a line of it too (no argv): when it began on
    which worker, and its seconds (setup, call, teardown): the run's timeline, worker by worker
    (scripts/suite-timeline.py)."""
    path = os.environ.get("SUITE_INVOCATIONS")
    at, started = time.time(), time.monotonic()
    try:
        return (yield)
    finally:
        if path:
            _record(path, {"test": item.nodeid, "at": round(at, 2), "seconds": round(time.monotonic() - started, 2)})


# The modules that take longest, longest first (worker seconds in `--durations`, 2026-11-24):
# scripts/test.sh hands modules to the pytest-xdist workers in collection order
# (--no-loadscope-reorder; xdist's own order is by test count, which put the one-test soak last,
# running alone at the end). test_as_typed starts first: it and test_bad_inputs take turns
# through the default-names lock, and a worker that waits for it does nothing.
LONGEST_FIRST = ("test_platforms.py", "test_as_typed.py", "test_dev.py", "test_build_all.py", "test_dev_cache.py", "test_bootstrap.py", "test_layers.py",
                 "test_reproducible.py", "test_locks.py",
                 "test_soak.py", "test_faults.py", "test_bad_inputs.py", "test_run_container.py", "test_release.py",
                 "test_trust.py", "test_hostile_day.py", "test_installed.py", "test_gc.py", "test_promises.py",
                 "test_engine_and_disk.py")


# One id for the whole run, its pytest-xdist workers included: the e2e fixtures tag what they make
# once per run with it. A worker has it from xdist (its --testrunuid); the controller, or a run
# without workers, sets it here, before any other conftest is read, and hands it to the workers.
os.environ.setdefault("PYTEST_XDIST_TESTRUNUID", uuid.uuid4().hex)


SWEPT = pytest.StashKey[list]()
STARTED = pytest.StashKey[tuple]()  # (monotonic seconds, /proc/stat's first line, the speed loop's seconds, the engine's daemons' CPU)


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        return
    from tests.module_budget import cpu_line, daemon_cpu, loop_seconds

    config.stash[STARTED] = (time.monotonic(), cpu_line(), loop_seconds(), daemon_cpu())
    if hasattr(config.option, "testrunuid"):
        config.option.testrunuid = os.environ["PYTEST_XDIST_TESTRUNUID"]
    if shutil.which("docker"):  # what killed runs left, where no other run is alive (tests/leftovers.py)
        from tests import leftovers

        config.stash[SWEPT] = leftovers.hold_and_sweep()


def pytest_sessionfinish(session):
    """The images made once per run for all its workers (tagged run-ID) go when the whole run ends,
    and the candidate locks its killed builds left in the host's /tmp (as `invoke gc` removes them)."""
    if hasattr(session.config, "workerinput") or not shutil.which("docker"):
        return
    from torchbake.building.candidates import forget_gone

    forget_gone()
    tag = f"run-{os.environ['PYTEST_XDIST_TESTRUNUID'][:8]}"
    found = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True,
                           text=True, check=False).stdout.split()
    shared = [reference for reference in found if reference.rsplit(":", 1)[-1].startswith(tag)]
    # ... and what their builds left: candidates of a failed verification, an image a rebuild untagged
    # (their org.opencontainers.image.version label is the tag they were built for)
    shared += subprocess.run(["docker", "images", "-q", "--no-trunc", "--filter",
                              f"label=org.opencontainers.image.version={tag}"], capture_output=True, text=True,
                             check=False).stdout.split()
    if shared:
        subprocess.run(["docker", "image", "rm", "--force", *dict.fromkeys(shared)], capture_output=True, check=False)


def _machine_summary(terminalreporter) -> None:
    """How fast this machine was during the run and how busy (tests/module_budget.py): the same
    loop's seconds at the start and the end, the whole machine's CPU seconds over the run's, and
    the engine's daemons' share of them."""
    from tests.module_budget import SPEED_LOOP, cpu_line, daemon_cpu, daemons_spent, loop_seconds, machine_busy

    started = terminalreporter.config.stash.get(STARTED, None)
    if started is None:
        return
    since, line, first, daemons = started
    wall = round(time.monotonic() - since)
    terminalreporter.section("this machine during the run")
    terminalreporter.write_line(f"a fixed loop of {SPEED_LOOP:,} additions: {first:.2f} s of CPU at the start,"
                                f" {loop_seconds():.2f} s at the end")
    now = cpu_line()
    if line and now:
        busy, kernel = machine_busy(line, now)
        cores = len(os.sched_getaffinity(0))
        terminalreporter.write_line(f"the machine's {cores} cores busy {busy:,.0f} s of CPU ({kernel:,.0f} s the"
                                    f" kernel's) in {wall // 60} min {wall % 60} s")
    spent = daemons_spent(daemons, daemon_cpu())
    if spent:
        terminalreporter.write_line("the engine's daemons: " + ", ".join(
            f"{name} {seconds:,.0f} s of CPU" if seconds is not None else f"{name} started again during the run"
            for name, seconds in spent.items()))


def pytest_collection_modifyitems(items):
    """Every unit test is in the inner loop (-m quick); real-engine tests join it one by one. The
    long modules go first (LONGEST_FIRST); the order of tests within a module stays."""
    for item in items:
        if "/unit/" in str(item.fspath):
            item.add_marker(pytest.mark.quick)
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_terminal_summary(terminalreporter):
    """What killed runs had left and this run removed at its start; each module's seconds (setup,
    call and teardown of its tests, as the workers spent them), longest first, after every run:
    where the suite's time goes, module by module."""
    swept = terminalreporter.config.stash.get(SWEPT, [])
    if swept:
        terminalreporter.section("left by killed runs, removed at this run's start")
        for thing in swept:
            terminalreporter.write_line(thing)
    totals: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            nodeid, duration = getattr(report, "nodeid", ""), getattr(report, "duration", None)
            if nodeid and isinstance(duration, float) and getattr(report, "when", "") in ("setup", "call", "teardown"):
                module = nodeid.split("::", 1)[0]
                totals[module] = totals.get(module, 0.0) + duration
    if not totals:
        return
    _machine_summary(terminalreporter)
    terminalreporter.section("seconds per module (worker time: setup, call, teardown)")
    for module, seconds in sorted(totals.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{seconds:8.1f}  {module}")
    terminalreporter.write_line(f"{sum(totals.values()):8.1f}  in all")
    if os.environ.get("SUITE_MODULE_TIMES"):  # scripts/measure-modules.sh: the figures for tests/module-budget.toml
        Path(os.environ["SUITE_MODULE_TIMES"]).write_text(json.dumps(totals, indent=1, sort_keys=True) + "\n")
