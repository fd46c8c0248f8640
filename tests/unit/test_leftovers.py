"""A test run removes what killed runs left (tests/leftovers.py) only while no other run or
benchmark lives, and only what carries a run's id under the tests' names, or what runs from a
run's folders: an engine stand-in (a script that lists images and records what it is asked to
remove), a lock, a temporary folder, an engines' folder and a bridge name of the test's own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from tests import leftovers, support
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
    # the second engines and bridges of the test's own: a suite running beside it keeps its own
    monkeypatch.setattr(support, "ENGINE_FOLDERS", tmp_path / "run")
    monkeypatch.setattr(support, "BRIDGE_PREFIX", "tbt")
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


def pretending(program: str, *words: str) -> subprocess.Popen:
    """A process that the system lists as ``program`` run with ``words`` (it only sleeps), once it
    is listed so."""
    process = subprocess.Popen(["bash", "-c", f'exec -a "$0" {sys.executable} -c "import time; time.sleep(120)" "$@"',
                                program, *words])
    deadline = time.monotonic() + 30
    while not Path(f"/proc/{process.pid}/cmdline").read_bytes().startswith(program.encode() + b"\0"):
        assert time.monotonic() < deadline and process.poll() is None, f"{program} never started"
        time.sleep(0.02)
    return process


def test_the_engines_and_registries_a_killed_run_left_running_go_with_their_bridges_and_folders(engine, tmp_path):
    """Killed with its run, a second engine keeps running (dockerd, its containerd, their shims),
    with its bridge and its folder under /run, and so does a registry: the next run alone stops
    them. A user's engine or registry, and a bridge not named as the tests name theirs, stay."""
    docker, _asked, temp = engine
    folder = tmp_path / "run" / "tb-b-k1ll3d"
    (folder / "exec1").mkdir(parents=True)
    run_folder = temp / "pytest-of-root" / "pytest-3" / "popen-gw0" / "registry0"
    left = [pretending("dockerd", "--exec-root", str(folder / "exec1"), "--host", f"unix://{folder}/docker.sock"),
            pretending("containerd", "--config", str(folder / "exec1/containerd/containerd.toml")),
            pretending("/usr/bin/docker-registry", "serve", str(run_folder / "registry.yml"))]
    users = [pretending("dockerd", "--exec-root", str(tmp_path / "team" / "exec")),
             pretending("/usr/bin/docker-registry", "serve", str(temp / "team-folder" / "registry.yml"))]
    bridges = [f"tbt{uuid.uuid4().hex[:6]}", f"tbu{uuid.uuid4().hex[:6]}"]  # the test's engines' name; another
    for bridge in bridges:
        subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True)
    try:
        removed = leftovers.hold_and_sweep(docker)
        for process in left:
            assert process.wait(timeout=15) == -9
        assert all(process.poll() is None for process in users)
        assert sorted(removed) == sorted([*LEFT, *(f"process {p.pid} ({name})" for p, name in
                                                    zip(left, ("dockerd", "containerd", "docker-registry"), strict=True)),
                                          f"bridge {bridges[0]}", str(folder)])
        links = subprocess.run(["ip", "-o", "link", "show", "type", "bridge"], capture_output=True, text=True).stdout
        assert f": {bridges[0]}:" not in links and f": {bridges[1]}:" in links
        assert not folder.exists()
    finally:
        for process in left + users:
            process.kill()
            process.wait()
        for bridge in bridges:
            subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)
