"""The benchmarks run on the project's engine: each starts (its --help), none reads the
engine's files (the containerd image store has no graph-driver layer database: ask the engine),
torch_once's layer sizes come from the engine itself, and each runs end to end in its smoke mode
(--smoke: one round, the smallest inputs, names of its own, no prune of the engine's cache):
a benchmark that no longer runs turns the suite red, its table checked, not only its exit."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pytest

from benchmarks._steps import BOOKWORM, SMOKE_PREFIX
from tests.conftest import ROOT, forked_invoke_server
from tests.forked_invoke import SERVER_VARIABLE

from .helpers import docker

BENCHMARKS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_"))  # _steps: a helper
NUMBER = r"\d+(?:\.\d+)?"
# What each smoke run's output must hold: its table's rows with their figures (each a regular
# expression, matched line by line).
TABLES = {
    # the smoke run's 8 units and the module's own file: a fresh engine with the store compiles the changed one alone
    "compile_cache.py": [rf"^cold, engine A, filling the Redis store \(ccache\)\s+{NUMBER}\s+100%\s+9 of 9\s",
                         rf"^fresh engine after one changed file, with the Redis store\s+{NUMBER}\s+\d+%\s+1 of 9\s+8$"],
    "dev_compile.py": [rf"^configure \(step start to the first object\): {NUMBER} s",
                       rf"^compile: [1-9][\d,]* of [\d,]+ objects in {NUMBER} s"],
    "layer_compression.py": [rf"^{kind}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}x\s+{NUMBER}\s+[1-9]{NUMBER}MB$"
                             for kind in ("plain", "gzip", "zstd")],
    "main_job.py": [rf"^total\s+{NUMBER}\s+{NUMBER}$", rf"^build, verify\s+{NUMBER}"],
    "matrix_build.py": [rf"^cold build-all --force +: +{NUMBER} s",  # its smoke run's flags (no --no-cache)
                        rf"^no-op build-all \(all unchanged\) +: +{NUMBER} s",
                        rf"^plain docker build loop, warm +: +{NUMBER} s"],
    "platforms_build.py": [rf"^median seconds: amd64 {NUMBER}, arm64 {NUMBER}, naive {NUMBER}",
                           rf"^cold: arm64 / naive emulated = {NUMBER}"],
    # the smoke run's extension of two C++ files, new to every compile cache: both compiled, then the changed one alone
    "real_extension.py": [rf"^dev build \(fixture PyTorch source, tbsmokeext==1\.0, verify\): {NUMBER} s\nCompiled: .*"
                          r"tbsmokeext: 2 compiled,", r"^  -> 42$",
                          rf"^again after tbsmokeext-1\.0/csrc/\S+\.cpp changed: {NUMBER} s\nCompiled: tbsmokeext: 1 compiled, 1 local hits,"],
    "registry_nightly.py": [rf"^cold matrix on A .*\s{NUMBER}s$", rf"^nothing changed, fresh engine B .*\s{NUMBER}s\s+{NUMBER}% of cold",
                            rf"^one extension wheel changed, B rebuilds and pushes that cell\s+{NUMBER}s$"],
    "release_build.py": [rf"^warm, nothing changed: build only\s+{NUMBER}s\s+{NUMBER}s\s+{NUMBER}x$",
                         rf"^warm: prepare \+ build \+ verify\s+{NUMBER}s\s+{NUMBER}s\s+{NUMBER}x$"],
    "reproducible_build.py": [rf"^after\s+{NUMBER}\s+{NUMBER}\s+sha256:", r"^every 'after' build gave one digest: True",
                              rf"^import torch, median of 1: before {NUMBER} s, after {NUMBER} s"],
    "run_container.py": [rf"^{case}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}$" for case in ("first", "reuse", "rm")],
    "startup.py": [rf"^invoke --list\s+{NUMBER}\s+1\.00$", rf"^torchbake --help\s+{NUMBER}\s+{NUMBER}$"],
    "torch_once.py": [rf"^cold build: plain docker build, pip .*\s{NUMBER}s", rf"^  ratio\s+{NUMBER}x",
                      rf"^new layer bytes, changed extension wheel\s+{NUMBER}MB",
                      rf"^import torch in a fresh container, pip-installed \(median\)\s+{NUMBER}s$"],
}


def test_every_benchmark_has_a_smoke_table():
    assert sorted(TABLES) == [p.name for p in BENCHMARKS]


@pytest.mark.parametrize("script", BENCHMARKS, ids=[p.name for p in BENCHMARKS])
def test_every_benchmark_starts_and_asks_the_engine_not_its_files(script):
    shown = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=ROOT,
                           stdin=subprocess.DEVNULL, timeout=120)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "--smoke" in shown.stdout, f"{script.name} has no smoke mode"
    text = script.read_text()
    for engine_file in ("layerdb", "DockerRootDir", "/var/lib/docker", "/var/lib/containerd"):
        assert engine_file not in text, f"{script.name} reads the engine's files ({engine_file})"


# The smoke runs go in three lanes side by side, each lane's one after the other: on 2 cores most of
# a run waits on the engine (one lane after another took 780 s here; two lanes, 912 s of a whole
# suite's run beside three other workers). The two that start a second engine (their bridge's subnet
# is one per pytest worker) share a lane.
LANES = (("compile_cache.py", "registry_nightly.py", "startup.py", "run_container.py"),
         ("platforms_build.py", "real_extension.py", "torch_once.py", "reproducible_build.py"),
         ("dev_compile.py", "matrix_build.py", "main_job.py", "layer_compression.py", "release_build.py"))


def _smoke(script: Path, temp: Path, logs: Path) -> tuple[subprocess.CompletedProcess[str], float, list[str]]:
    """The smoke run of ``script``, its seconds, and the files it left in its temporary folder
    ``temp`` (torchbake's folder of candidates' locks stays, empty: one for every build on a host).
    Its builds' logs go to ``logs``, not to the user's cache (its downloads and unpacked programs
    stay there, shared as a user's runs share them)."""
    started = time.monotonic()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TORCHBAKE_")}  # as clean_env
    temp.mkdir()
    done = subprocess.run([sys.executable, str(script), "--smoke"], capture_output=True, text=True, cwd=ROOT,
                          stdin=subprocess.DEVNULL, timeout=900,
                          env={**environment, "TMPDIR": str(temp), "TORCHBAKE_PATHS_LOG_DIR": str(logs),
                               SERVER_VARIABLE: forked_invoke_server().path})
    return done, time.monotonic() - started, sorted(str(p.relative_to(temp)) for p in temp.rglob("*") if not p.is_dir())


class SmokeRuns(NamedTuple):
    runs: dict[str, Future]  # benchmark file name -> its smoke run (_smoke's result)
    logs: Path  # their builds' logs, a folder per benchmark
    users_logs_before: set[str]  # the user's torchbake log folder before they started


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory, base_image):
    """Every benchmark's smoke run, started at once in its lane; each test waits for its own. The
    benchmarks' Debian base (BOOKWORM, what `invoke bootstrap-os --suite bookworm` makes) is the
    suite's own where the engine lacks it: a bootstrap is reproducible, so base_image (made by those
    defaults) is that very image, and a fresh engine pays one bootstrap, not two (the bootstrap
    itself is proven by test_bootstrap and test_as_typed)."""
    if docker("image", "inspect", BOOKWORM, check=False).returncode != 0:
        docker("tag", base_image, BOOKWORM)
    forked_invoke_server().start()  # the lanes' commands are forked from it, as the suite's own are (once, here)
    lanes = [ThreadPoolExecutor(max_workers=1) for _ in LANES]
    temp, logs = tmp_path_factory.mktemp("smoke-temp"), tmp_path_factory.mktemp("smoke-logs")
    users_logs = _users_logs()
    runs = {name: lane.submit(_smoke, ROOT / "benchmarks" / name, temp / name, logs / Path(name).stem)
            for lane, names in zip(lanes, LANES, strict=True) for name in names}
    yield SmokeRuns(runs, logs, users_logs)
    for lane in lanes:
        lane.shutdown(wait=True, cancel_futures=True)


def test_every_benchmark_is_in_a_lane():
    assert sorted(name for lane in LANES for name in lane) == [p.name for p in BENCHMARKS]


@pytest.mark.parametrize("script", BENCHMARKS, ids=[p.name for p in BENCHMARKS])
def test_every_benchmark_runs_end_to_end_in_its_smoke_mode(script, smoke_runs):
    done, seconds, left = smoke_runs.runs[script.name].result(timeout=3600)
    said = f"{script.name} --smoke, exit {done.returncode} after {seconds:.0f} s:\n" \
           f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    assert done.returncode == 0, said
    for row in TABLES[script.name]:
        assert re.search(row, done.stdout, re.M), f"no line matching {row!r} in the output of {said}"
    # its work folder, torchbake's files and the engines' gone
    assert left == [], f"{script.name} left in its temporary folder: {left}"


def _users_log_folder() -> Path:
    """The log folder of the user's torchbake cache (the default one: the smoke runs' environment
    names no cache of its own)."""
    from torchbake.planning.config import default_cache_dir

    return default_cache_dir() / "logs"


def _users_logs() -> set[str]:
    """The files in the user's log folder."""
    folder = _users_log_folder()
    return {path.name for path in folder.iterdir()} if folder.is_dir() else set()


def _smoke_runs_files(names: set[str]) -> list[str]:
    """Those of ``names`` in the user's log folder that a smoke run's build left: named after one of
    its images (SMOKE_PREFIX), or naming one inside (a build-all cell's log is named after the cell,
    "tiny-release-py311"). The user's own builds while the suite runs log there too, and are theirs."""
    folder = _users_log_folder()
    return sorted(name for name in names if SMOKE_PREFIX in name
                  or SMOKE_PREFIX in (folder / name).read_text(errors="replace"))


def test_the_smoke_runs_keep_their_build_logs_out_of_the_users_cache(smoke_runs):
    """Every smoke run's builds log where the test says (a folder of the run's own), and none in
    the user's cache: a run of the suite adds nothing to the logs `invoke gc` would have to clear
    (and a developer's own builds meanwhile do not turn it red)."""
    for run in smoke_runs.runs.values():
        run.result(timeout=3600)
    logged = {path.parent.name for path in smoke_runs.logs.rglob("*.log")}
    assert {"release_build", "reproducible_build", "torch_once", "layer_compression"} <= logged, sorted(logged)
    assert _smoke_runs_files(_users_logs() - smoke_runs.users_logs_before) == []


def test_torch_once_measures_layers_by_asking_the_engine(base_image):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import torch_once
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    found = torch_once.layers(base_image)
    assert len(found) == 1 and found[0][0].startswith("sha256:") and found[0][1] > 10_000_000, found
