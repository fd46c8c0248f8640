"""A test run removes what killed runs left (tests/leftovers.py) only while no other run or
benchmark lives, and only what carries a run's id under the tests' names: an engine stand-in (a
script that lists images and records what it is asked to remove), a lock of the test's own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import leftovers
from tests.conftest import ROOT

LISTED = [
    "torchbake-test/debian:bookworm",  # the shared bases, kept between runs
    "torchbake-test/debian:bookworm-multi",
    "torchbake-test/debian:bookworm-2dc5183d",  # a worker's
    "torchbake-test/pytorch-cpu:run-9f5010dc",  # a run's
    "127.0.0.1:58111/team/torchbake-test/nightly-mp:release-py311-2dc5183d-arm64",  # pushed to a test registry
    "tb-bench-smoke-real-extension-3b8bb6d1:394ce0c9",  # a benchmark's smoke run
    "127.0.0.1:57765/bench/tb-bench-smoke-nightly-ad3cd2d6/tiny:release-py311",  # its id in the path
    "debian:bookworm",  # the user's, whatever their tags
    "team/pytorch:2dc5183d",
    "torchbake-test/aside:1c09276be3ff",  # a user's image set aside by name, not a run's id
]
LEFT = LISTED[2:7]


@pytest.fixture
def engine(tmp_path, monkeypatch):
    """An engine stand-in; the lock and the temporary folder of the test's own."""
    asked = tmp_path / "asked"
    docker = tmp_path / "docker"
    docker.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        echo "$@" >> {asked}
        [ "$1" = images ] && printf '%s\\n' {' '.join(LISTED)}
        exit 0
        """))
    docker.chmod(0o755)
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(leftovers, "RUNNING", temp / "running.lock")
    monkeypatch.setattr(leftovers, "TEMP", temp)
    monkeypatch.setattr(leftovers, "_held", [])
    yield str(docker), asked, temp
    for descriptor in leftovers._held:
        os.close(descriptor)


def removed_images(asked: Path) -> list[str]:
    lines = asked.read_text().splitlines() if asked.exists() else []
    return [word for line in lines if line.startswith("image rm") for word in line.split()[3:]]


def test_only_images_a_run_made_for_itself_are_leftovers():
    assert [reference for reference in LISTED if leftovers.leftover(reference)] == LEFT


def test_with_no_run_alive_the_leftovers_go_and_the_run_then_holds_the_lock(engine):
    docker, asked, temp = engine
    (temp / "torchbake-registry-bench-x1y2").mkdir()
    (temp / "torchbake-registry-bench-x1y2" / "dockerd.log").write_text("")
    (temp / "pytest-of-root").mkdir()
    (temp / "team-folder").mkdir()

    removed = leftovers.hold_and_sweep(docker)

    assert removed_images(asked) == LEFT
    assert sorted(p.name for p in temp.iterdir()) == ["pytest-of-root", "running.lock", "team-folder"]
    assert removed == [*LEFT, str(temp / "torchbake-registry-bench-x1y2")]
    # the run holds the lock while it lives: a run starting beside it sweeps nothing
    beside = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""\
        import sys; from pathlib import Path
        sys.path.insert(0, {str(ROOT)!r})
        from tests import leftovers
        leftovers.RUNNING, leftovers.TEMP = Path({str(leftovers.RUNNING)!r}), Path({str(temp)!r})
        print(leftovers.hold_and_sweep({docker!r}))
        """)], capture_output=True, text=True, check=True)
    assert beside.stdout.strip() == "[]"
    assert removed_images(asked) == LEFT  # no second removal


def test_while_a_benchmark_lives_nothing_is_swept_and_its_death_frees_the_lock(engine):
    docker, asked, temp = engine
    (temp / "torchbake-matrix-bench-a1b2").mkdir()
    benchmark = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""\
        import sys, time; from pathlib import Path
        sys.path.insert(0, {str(ROOT)!r})
        from tests import leftovers
        leftovers.RUNNING = Path({str(leftovers.RUNNING)!r})
        leftovers.hold(); print("held", flush=True); time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert benchmark.stdout.readline().strip() == "held"
        assert leftovers.hold_and_sweep(docker) == []
        assert removed_images(asked) == [] and (temp / "torchbake-matrix-bench-a1b2").is_dir()
    finally:
        benchmark.kill()  # killed: the kernel drops its lock
        benchmark.wait()
        benchmark.stdout.close()
    for descriptor in leftovers._held:
        os.close(descriptor)
    leftovers._held.clear()
    assert leftovers.hold_and_sweep(docker) == [*LEFT, str(temp / "torchbake-matrix-bench-a1b2")]


def test_what_a_killed_engine_left_mounted_in_a_tests_folder_is_unmounted(engine, tmp_path):
    docker, _asked, temp = engine
    source = tmp_path / "source"
    source.mkdir()
    point = temp / "pytest-of-root" / "pytest-7" / "popen-gw1" / "engine0" / "data"
    point.mkdir(parents=True)
    elsewhere = temp / "team-folder" / "data"
    elsewhere.mkdir(parents=True)
    for target in (point, elsewhere):
        subprocess.run(["mount", "--bind", str(source), str(target)], check=True)
    try:
        removed = leftovers.hold_and_sweep(docker)
        mounts = Path("/proc/self/mounts").read_text()
        assert f" {point} " not in mounts and str(point) in removed
        assert f" {elsewhere} " in mounts  # not a test's folder: not ours to unmount
    finally:
        subprocess.run(["umount", "--lazy", str(point)], capture_output=True, check=False)
        subprocess.run(["umount", "--lazy", str(elsewhere)], capture_output=True, check=False)


def test_a_benchmark_that_names_a_smoke_image_is_alive_for_a_run_that_starts_beside_it(engine):
    """A smoke run's packaged base is named by benchmarks/_steps.smoke_name, in benchmarks that
    have no folder of their own (main_job's): naming it marks the benchmark alive, or a test run
    starting meanwhile would remove the image under the running benchmark."""
    docker, asked, _ = engine
    benchmark = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""\
        import sys, time; from pathlib import Path
        sys.path.insert(0, {str(ROOT / "benchmarks")!r})
        from tests import leftovers
        leftovers.RUNNING = Path({str(leftovers.RUNNING)!r})
        import _steps
        print(_steps.smoke_name("base"), flush=True); time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert benchmark.stdout.readline().startswith("tb-bench-smoke-base-")
        assert leftovers.hold_and_sweep(docker) == []
        assert removed_images(asked) == []
    finally:
        benchmark.kill()
        benchmark.wait()
        benchmark.stdout.close()
