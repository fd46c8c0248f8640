#!/usr/bin/env python3
"""Benchmark of a dev build's compile as `invoke build` watches it: how long PyTorch's source
takes to configure, how many objects a minute these cores compile, and how good the time left
that the build says was (torchbake.building.compile_progress, fed the build's output as it
streams, every line timed on arrival).

The source: a source root as the legacy scripts take it (`PYTORCH_REPO_ROOT_PATH`, or
`--source-root`: a folder holding the `pytorch`, `vision` and `audio` clones at their tags)
with the team's profile (`--config`, and `--credentials` for private extensions); without one,
the fixture that stands in for PyTorch's tree (tests/e2e/fixture_repos: pytorch-cmake, CMake
over ninja with a bundled third-party project declaring cmake_minimum_required 3.1, dated on
PyTorch 2.0's day so the base resolves the CMake of that day), `--units` translation units of
`--weight` loops each, served over HTTP on 127.0.0.1.

The base image is built first (not counted), then the dev image with `--no-verify`; both are
removed at the end. Prints: configure seconds (from the step's start to ninja's first object),
the compile's objects and seconds, objects a minute, and at each quarter of the objects the time
left said against the time it then took.
--smoke: the fixture of 8 units of one loop each.
Usage: .venv/bin/python benchmarks/dev_compile.py [--units N] [--weight N] [--smoke]
       PYTORCH_REPO_ROOT_PATH=~/src .venv/bin/python benchmarks/dev_compile.py --config team.toml
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _steps import BOOKWORM as BASE  # noqa: E402
from _steps import DOCKER, INVOKE, ROOT, add_smoke, run, smoke_name, work_folder  # noqa: E402

from tests.e2e.fixture_repos import dev_profile, git_credentials, make_repos, write_cmake_pytorch  # noqa: E402
from tests.e2e.helpers import make_tiny_torch  # noqa: E402
from tests.support import git_server  # noqa: E402
from torchbake.building.compile_progress import CompileWatch  # noqa: E402

NAME = "torchbake-bench/dev-compile"
_STARTED = re.compile(r"^#(\d+) \d+\.\d+ torchbake: building pytorch from ")
_FIRST_OBJECT = re.compile(r"^#(\d+) \d+\.\d+ \s*\[1/\d+\] ")


def watched_build(argv: list[str], env: dict[str, str]) -> tuple[list[tuple[float, int, int, float | None]], float, float]:
    """The dev build, its output read line by line as it streams: the progress (time, objects
    done, total, time left said) after each line of the pytorch step, its configure seconds and
    the time its last object was done."""
    watch = CompileWatch(every=0.0)
    said: list[tuple[float, int, int, float | None]] = []
    started = configured = 0.0
    tail: list[str] = []
    with subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          stdin=subprocess.DEVNULL) as build:
        assert build.stdout is not None
        for line in build.stdout:
            now = time.monotonic()
            tail = [*tail[-200:], line]
            if _STARTED.match(line):
                started = now
            elif started and not configured and _FIRST_OBJECT.match(line):
                configured = now
            watch(line)
            step = next((p for p in watch.steps.values() if p.role == "pytorch"), None)
            if step is not None and step.done and (not said or said[-1][1] != step.done):
                said.append((now, step.done, step.total, step.seconds_left()))
    if build.returncode != 0:
        sys.exit(f"benchmark step failed: {' '.join(argv)}\n{''.join(tail)[-3000:]}")
    if not said or not configured:
        sys.exit("the build compiled no pytorch objects ninja counted:\n" + "".join(tail)[-3000:])
    return said, configured - started, said[-1][0]


def report(said: list[tuple[float, int, int, float | None]], configure: float, ended: float, source: str) -> None:
    first, total = said[0][0], said[-1][2]
    seconds = ended - first
    print(f"\ndev build of {source}, {os.cpu_count()} cores, this machine's engine:")
    print(f"configure (step start to the first object): {configure:.1f} s")
    print(f"compile: {said[-1][1]:,} of {total:,} objects in {seconds:.1f} s,"
          f" {60 * said[-1][1] / seconds if seconds else 0:,.0f} objects a minute")
    print(f"{'objects done':>14} {'time left said':>15} {'time it took':>13}")
    for quarter in (0.25, 0.5, 0.75):
        at = next(row for row in said if row[1] >= quarter * total)
        predicted = "" if at[3] is None else f"{at[3]:.1f} s"
        print(f"{at[1]:>8,} ({quarter:.0%}) {predicted:>15} {ended - at[0]:>11.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source-root", default=os.environ.get("PYTORCH_REPO_ROOT_PATH", ""),
                        help="the clones (pytorch, vision, audio) to build (default: $PYTORCH_REPO_ROOT_PATH; none: the fixture)")
    parser.add_argument("--config", help="the profile for --source-root (its [sources] tags and [dev] settings)")
    parser.add_argument("--credentials", help="git credentials for the profile's private extension")
    parser.add_argument("--units", type=int, default=400, help="the fixture's translation units")
    parser.add_argument("--weight", type=int, default=100, help="loops in each fixture unit for the compiler to optimize")
    add_smoke(parser)
    args = parser.parse_args()
    name = NAME
    if args.smoke:  # the fixture, whatever PYTORCH_REPO_ROOT_PATH says
        args.source_root, args.units, args.weight, name = "", 8, 1, smoke_name("dev-compile")
    if args.source_root and not args.config:
        parser.error("a source root (--source-root or PYTORCH_REPO_ROOT_PATH) is built with its team's profile: give --config")
    run([*INVOKE, "bootstrap-os", "--suite", "bookworm", "--name", BASE])
    work = work_folder("dev-compile")
    env = {**os.environ, "TORCHBAKE_PATHS_CACHE_DIR": str(work / "cache")}
    tag = uuid.uuid4().hex[:8]
    base, image = f"{name}-base:{tag}", f"{name}:{tag}"
    try:
        if args.source_root:
            profile, source = Path(args.config), f"the clones in {args.source_root}"
            credentials = ["-c", args.credentials] if args.credentials else []
            run([*INVOKE, "build-base", "--config", str(profile), "--name", f"{name}-base", "--tag", tag,
                 "--source-root", args.source_root], env=env)
            said, configure, ended = watched_build([*INVOKE, "build", "--config", str(profile), "--name", name, "--tag", tag,
                                                    "--base-img", base, *credentials, "--no-verify"], env)
        else:
            password = "bench-" + uuid.uuid4().hex
            (work / "srv").mkdir()
            with git_server(work / "srv", auth=f"builder:{password}") as (url, _):
                make_repos(work, url)  # (its pytorch-cmake of 12 units made again with --units)
                for made in (work / "work" / "pytorch-cmake", work / "srv" / "pytorch-cmake.git"):
                    shutil.rmtree(made)
                write_cmake_pytorch(work / "work", work / "srv", url, units=args.units, weight=args.weight)
                profile = work / "fixture.toml"
                profile.write_text(dev_profile(url, supplier="Bench <bench@example.com>", torch=str(make_tiny_torch(work / "torch")),
                                               extension="private/extension-lite", pytorch="pytorch-cmake", extras=False,
                                               build_tools=("cmake", "ninja")))
                (work / "git-credentials").write_text(git_credentials(url, password))
                run([*INVOKE, "build-base", "--config", str(profile), "--name", f"{name}-base", "--tag", tag,
                     "--sys", BASE, "--python", "3.11"], env=env)
                said, configure, ended = watched_build([*INVOKE, "build", "--config", str(profile), "--name", name,
                                                        "--tag", tag, "--base-img", base, "-c", str(work / "git-credentials"),
                                                        "--no-verify"], env)
            source = f"the CMake fixture ({args.units} units, weight {args.weight})"
    finally:
        subprocess.run([DOCKER, "image", "rm", "--force", base, image], capture_output=True)
    report(said, configure, ended, source)


if __name__ == "__main__":
    main()
