"""The build tools of the source's day: a base image's build requirements resolved no newer than
its PyTorch tag's commit (uv's --exclude-newer, asking the package index as a build does), shown
in the dry run; the developers' tools stay current; no wheel of that day for the Python: the
oldest that has one, said."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_invoke
from torchbake.inputs import build_tools, locks

UV = Path(shutil.which("uv", path=str(Path(__import__("sys").executable).parent)) or "uv")
MARCH_2023 = "2023-03-15T12:00:00+00:00"  # PyTorch v2.0.0 was tagged that week


def tagged_repo(folder: Path, tag: str, when: str) -> None:
    """A git repository whose one commit, tagged ``tag``, was made at ``when``."""
    folder.mkdir(parents=True)
    (folder / "setup.py").write_text("from setuptools import setup\nsetup(name='x')\n")
    dated = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when, "GIT_AUTHOR_NAME": "t",
             "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    for argv in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "x"], ["tag", tag]):
        subprocess.run(["git", *argv], cwd=folder, env=dated, check=True)


def test_the_day_of_a_tag_is_its_commits_date(tmp_path):
    tagged_repo(tmp_path / "pytorch", "v2.0.0", MARCH_2023)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path / "pytorch", capture_output=True, text=True)
    assert build_tools.commit_day(tmp_path / "pytorch", head.stdout.strip()) == "2023-03-15"


@pytest.fixture(scope="module")
def index():
    """uv's environment for the indexes pip is configured with (what the builds ask)."""
    from types import SimpleNamespace

    return locks.index_environment(SimpleNamespace(index_url="", extra_index_urls=[], find_links=[]))


def test_cmake_of_the_tags_day_is_a_cmake_3_and_todays_is_cmake_4(tmp_path, index):
    """CMake 4 refuses a cmake_minimum_required below 3.5, which PyTorch 2.0's third-party trees
    declare (pytorch/pytorch#150149): as of v2.0.0's day, the resolution gives CMake 3."""
    dated = build_tools.resolve(["cmake", "ninja", "/tmp/stand-in/torch-2.0.0-py3-none-any.whl"], "2023-03-15", "3.11",
                                "x86_64-manylinux_2_28", UV, index, tmp_path, log_file=tmp_path / "log")
    assert dated.pins == ("cmake==3.26.0", "ninja==1.11.1") and dated.newer == {}
    assert dated.given == ("/tmp/stand-in/torch-2.0.0-py3-none-any.whl",)  # a path is taken as it is
    assert "--exclude-newer 2023-03-16" in (tmp_path / "log").read_text()  # the whole day counts
    today = build_tools.resolve(["cmake"], "", "3.11", "x86_64-manylinux_2_28", UV, index, tmp_path, log_file=None)
    assert int(today.pins[0].split("==")[1].split(".")[0]) >= 4, today.pins
    # kept by what was asked: a second build asks uv nothing
    (tmp_path / "log").unlink()
    assert build_tools.resolve(["cmake", "ninja"], "2023-03-15", "3.11", "x86_64-manylinux_2_28", UV, index, tmp_path,
                               log_file=tmp_path / "log").pins == ("cmake==3.26.0", "ninja==1.11.1")
    assert not (tmp_path / "log").exists()


def test_build_base_plans_the_tools_of_its_tags_day_in_the_dry_run(tmp_path):
    """The dry run of `invoke build-base` where the PyTorch tree is on the host: the build
    requirements as the build resolves them, dated by the tag's commit; the tools current."""
    root = tmp_path / "sources"
    for name, tag in (("pytorch", "v2.0.0"), ("vision", "v0.15.2"), ("audio", "v2.0.1")):
        tagged_repo(root / name, tag, MARCH_2023)
    cache = tmp_path / "cache"
    (cache / "tools").mkdir(parents=True)
    shutil.copy(UV, cache / "tools" / "uv-kept")  # a uv an earlier build kept
    config = tmp_path / "base.toml"
    config.write_text(f'[sources]\nroot = "{root}"\n[base]\nrequirements = ["cmake"]\n')
    env = {"TORCHBAKE_PATHS_CACHE_DIR": str(cache)}
    planned = run_invoke("build-base", "--config", str(config), "--dry-run", env=env)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "Build requirements: no newer than 2023-03-15 (pytorch v2.0.0's commit): cmake==3.26.0" in planned.stdout
    assert "  tool            pytest" in planned.stdout
    latest = run_invoke("build-base", "--config", str(config), "--requirements-date", "latest", "--dry-run", env=env)
    assert latest.returncode == 0 and "Build requirements: as of now: cmake==4." in latest.stdout, latest.stdout
    assert not (cache / "build-tools").exists() or not list((cache / "build-tools").glob("*.json"))  # nothing kept
    refused = run_invoke("build-base", "--config", str(config), "--requirements-date", "2023-02-30", "--dry-run", env=env)
    assert refused.returncode == 2 and "base.requirements_date = '2023-02-30' (from command line) is invalid" in refused.stderr


def test_no_wheel_of_that_day_for_the_python_takes_the_oldest_that_has_one_and_says_so(tmp_path):
    """numpy of March 2023 has no wheel for Python 3.13: each requirement is asked alone, numpy's
    oldest release with one is taken (uv's lowest resolution, undated), and the whole set asked
    again as of the day with numpy let newer. (uv stands in here: its lowest resolution of a real
    numpy takes about a minute; benchmarks/build_tools.py runs it on the real index.)"""
    uv = tmp_path / "uv"
    uv.write_text(r"""#!/bin/sh
echo "$*" >> "$0.calls"
listed=$(cat "$(for a in "$@"; do case $a in *.in) echo $a;; esac; done)")
case "$*" in
  *--resolution\ lowest-direct*) echo "numpy==2.1.0";;
  *exclude-newer-package\ numpy=*) echo "cmake==3.26.0"; echo "numpy==2.1.0";;
  *) case "$listed" in *numpy*) echo "error: No solution found when resolving dependencies"; exit 1;; esac
     echo "cmake==3.26.0";;
esac
""")
    uv.chmod(0o755)
    dated = build_tools.resolve(["cmake", "numpy"], "2023-03-15", "3.13", "x86_64-manylinux_2_28", uv, {}, tmp_path,
                                log_file=None)
    assert dated.newer == {"numpy": "2.1.0"} and dated.pins == ("cmake==3.26.0", "numpy==2.1.0")
    assert dated.describe("x").endswith("numpy 2.1.0 (the oldest with a wheel for this Python: none of 2023-03-15 has one)")
    calls = (tmp_path / "uv.calls").read_text().splitlines()
    assert len(calls) == 5 and "--resolution lowest-direct" in calls[3] and "--exclude-newer" not in calls[3]
    assert "--exclude-newer 2023-03-16" in calls[4] and "--exclude-newer-package numpy=" in calls[4]


def test_a_bases_lock_is_held_to_the_day_of_its_tag(tmp_path):
    """`invoke lock --base`: the day its PyTorch tree's tag was made, the tools left current."""
    from torchbake.planning import config
    from torchbake.variants import base

    root = tmp_path / "sources"
    for name, tag in (("pytorch", "v2.0.0"), ("vision", "v0.15.2"), ("audio", "v2.0.1")):
        tagged_repo(root / name, tag, MARCH_2023)
    settings = config.resolve([], {"TORCHBAKE_SOURCES_ROOT": str(root), "TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path / "c")},
                              variant="base").settings()
    assert base.plan(settings).lock_day() == ("2023-03-15", ["expecttest", "hypothesis", "pytest", "pylint", "black"])
    latest = config.resolve([], {"TORCHBAKE_SOURCES_ROOT": str(root), "TORCHBAKE_BASE_REQUIREMENTS_DATE": "latest"},
                            variant="base").settings()
    assert base.plan(latest).lock_day() == ("", [])


def test_a_pytorch_like_tree_configures_with_the_cmake_of_its_day_and_stops_clearly_under_todays(tmp_path, index):
    """A tree whose bundled third-party project declares cmake_minimum_required(VERSION 3.1), as
    PyTorch 2.0's protobuf does: the CMake resolved as of v2.0.0's day configures it and ninja
    builds it, its objects counted as a dev build counts them; today's CMake 4 stops at configure,
    and what the build says is CMake's own error, not the log's tail."""
    from tests.source_trees import cmake_of, write_cmake_tree
    from torchbake.building.compile_progress import CompileWatch

    tree = write_cmake_tree(tmp_path / "pytorch", units=6)
    resolved = {when: build_tools.resolve(["cmake"], day, "3.11", "x86_64-manylinux_2_28", UV, index, tmp_path,
                                          log_file=None).pins[0].split("==")[1]
                for when, day in (("its day", "2023-03-15"), ("today", ""))}
    assert resolved["its day"] == "3.26.0" and int(resolved["today"].split(".")[0]) >= 4

    def build(version: str) -> tuple[int, CompileWatch]:
        """configure and build as PyTorch's setup.py does (cmake -G Ninja, then the build), its
        output fed to a CompileWatch as BuildKit streams a step's lines."""
        watch, folder = CompileWatch(every=0.0), tmp_path / f"build-{version}"
        watch("#5 0.1 torchbake: building pytorch from /home/pytorch (commit x, MAX_JOBS=2)\n")
        code = 0
        for argv in ([str(cmake_of(version)), "-G", "Ninja", "-S", str(tree), "-B", str(folder)],
                     [str(cmake_of(version)), "--build", str(folder)]):
            done = subprocess.run(argv, capture_output=True, text=True)
            for line in (done.stdout + done.stderr).splitlines():
                watch(f"#5 1.0 {line}\n")
            if (code := done.returncode) != 0:
                break
        return code, watch

    code, watch = build(resolved["its day"])
    assert code == 0 and watch.figures()["pytorch"]["objects"] == watch.figures()["pytorch"]["total"] == 9
    code, watch = build(resolved["today"])
    assert code != 0 and "pytorch" not in watch.figures()
    assert "pytorch: CMake Error at third_party/protobuf/cmake/CMakeLists.txt:1 (cmake_minimum_required):" in watch.errors()
    assert "Compatibility with CMake < 3.5 has been removed from CMake." in watch.errors(), watch.errors()
