"""scripts/make-room.sh, before the suite: on CI the build cache is cut by what the run's room
lacks on the engine's disk, and no more, and deep when it passes its size; on a developer's
machine nothing is cut and the shortfall is said with the command that frees it. An engine
stand-in (a script) answers for the engine: its root is this test's folder, its build cache 40 GB,
and it records the prune it is asked for."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import textwrap

import pytest

from tests.conftest import ROOT

GB = 1000 ** 3


@pytest.fixture
def engine(tmp_path):
    asked = tmp_path / "asked"
    docker = tmp_path / "docker"
    docker.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$1" in
            info) echo {tmp_path} ;;
            system) echo 'Images 7.9GB'; echo 'Build Cache 40GB' ;;
            builder) echo "$@" >> {asked} ;;
        esac
        """))
    docker.chmod(0o755)
    return docker, asked


def make_room(docker, room_gb: int, ci: bool, cache_gb: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"DOCKER": str(docker)} | ({"CI": "1"} if ci else {})
    cap = [] if cache_gb is None else [str(cache_gb)]
    return subprocess.run(["bash", str(ROOT / "scripts" / "make-room.sh"), str(room_gb), *cap], capture_output=True,
                          text=True, env=env, timeout=60)


def free_gb(folder) -> float:
    return shutil.disk_usage(folder).free / GB


def test_on_ci_the_cache_is_cut_by_what_the_room_lacks_and_again_while_it_still_lacks(engine, tmp_path):
    """The stand-in's prune frees nothing (as a cut of records whose layers others share frees
    less than it removes): each cut is by what is still missing, three at most."""
    docker, asked = engine
    room = int(free_gb(tmp_path)) + 5  # 4 to 5 GB short
    done = make_room(docker, room, ci=True)
    assert done.returncode == 0, done.stderr
    cuts = [line.split() for line in asked.read_text().splitlines()]
    assert [cut[:4] for cut in cuts] == [["builder", "prune", "--force", "--keep-storage"]] * 3
    kept = [40.0] + [int(cut[4]) / GB for cut in cuts]
    # each cut by what was still missing: 4 to 5 GB (the room is whole GB; the free space moves meanwhile)
    assert all(3.5 < before - after < 5.5 for before, after in itertools.pairwise(kept)), kept
    assert f"cut from 40 GB to {int(cuts[-1][4]) // GB} GB for the run's {room} GB" in done.stderr


def test_with_room_enough_nothing_is_cut(engine, tmp_path):
    docker, asked = engine
    done = make_room(docker, max(1, int(free_gb(tmp_path)) - 2), ci=True)
    assert done.returncode == 0 and done.stderr == "" and not asked.exists()


def test_on_a_developers_machine_nothing_is_cut_and_the_shortfall_is_said(engine, tmp_path):
    docker, asked = engine
    room = int(free_gb(tmp_path)) + 5
    done = make_room(docker, room, ci=False)
    assert done.returncode == 0 and not asked.exists()
    assert f"GB free on the engine's disk ({tmp_path}); a run needs about {room} GB" in done.stderr
    assert "docker builder prune --keep-storage 20GB" in done.stderr


def test_on_ci_a_build_cache_past_its_size_is_cut_deep_to_five_eighths_of_it(engine):
    """Deep, so that the runs after it need none: every cut makes the next run build again steps
    it needs (BuildKit counts no cache hit as a use), so a small cut before every run costs every run."""
    docker, asked = engine
    done = make_room(docker, 1, ci=True, cache_gb=32)  # room enough; the stand-in's cache is 40 GB
    assert done.returncode == 0, done.stderr
    assert asked.read_text() == f"builder prune --force --keep-storage {20 * GB}\n"
    assert done.stderr == ("test.sh: the engine's build cache cut to 20 GB (it was 40 GB, past 32 GB): builds get slower"
                           " past it, and this run builds again what the cut removed.\n")


def test_a_build_cache_within_its_size_is_not_cut(engine):
    docker, asked = engine
    done = make_room(docker, 1, ci=True, cache_gb=40)
    assert done.returncode == 0 and done.stderr == "" and not asked.exists()


def test_on_a_developers_machine_a_large_build_cache_is_said_with_the_command_that_cuts_it(engine):
    docker, asked = engine
    done = make_room(docker, 1, ci=False, cache_gb=30)
    assert done.returncode == 0 and not asked.exists()
    assert "the engine's build cache is 40 GB; past about 30 GB builds get slower." in done.stderr
    assert done.stderr.rstrip().endswith("To cut it: docker builder prune --keep-storage 18GB"
                                         " (the next builds run again the steps it removes)")


@pytest.mark.parametrize(("args", "bad"), [(["abc"], "abc"), (["20", "abc"], "abc"), (["20", "-1"], "-1"), ([], ""),
                                          (["20", "99999999999999999999"], "99999999999999999999")])
def test_a_size_that_is_not_a_number_of_gb_is_refused_and_nothing_is_cut(engine, args, bad):
    """(A word taken for a number would be 0 in the shell's arithmetic: the whole cache cut.)"""
    docker, asked = engine
    env = os.environ | {"DOCKER": str(docker), "CI": "1"}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "make-room.sh"), *args], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 2 and not asked.exists()
    assert done.stderr == (f"make-room: '{bad}' is not a number of GB (whole, 0 to 99999); usage: make-room.sh GB"
                           " [CACHE_GB]\n")
