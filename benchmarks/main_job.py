#!/usr/bin/env python3
"""Benchmark: the main job (the README's first command, `bash scripts/main-job.sh`) from a bare
state, phase by phase, and again with nothing changed, in one run on the project's engine.

  bare       `bash scripts/main-job.sh --no-cache` on an engine without `debian:bookworm` and
             without the default image (the ones there are set aside under a tag of this run's
             own and given back afterwards), with an empty torchbake cache folder: the Debian
             packages and the torch wheel downloaded again, debian:bookworm made with
             debootstrap, every build step run, the image verified
  again      `bash scripts/main-job.sh` right after: what a second run costs (set-up checks,
             "unchanged")

Each phase is timed from the output as it comes: set-up (on this machine the engine, QEMU and
.venv are installed already, so it only checks them), the base made with debootstrap, the
context (the wheels resolved and downloaded on the host), the build with its verification (one
phase: the verify table prints when it is done), the records and the tag. Prints a table of seconds. Images it makes are removed; the user's come
back under their names.
--smoke: `bash scripts/main-job.sh` with the flags of a build of its own (the stand-in torch, the
Debian base with its OS packages in it, a name of the run's), without --no-cache, the user's images
left where they are: no base phase.
Usage: .venv/bin/python benchmarks/main_job.py [--smoke]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCKER = "/usr/bin/docker"
BASE = "debian:bookworm"
IMAGE = "torchbake/pytorch-cpu:2.13.0-py3.11"
sys.path.insert(0, str(ROOT / "benchmarks"))
from _steps import add_smoke, packaged_base, smoke_name, tiny_release_profile  # noqa: E402


def marks(image: str) -> tuple[tuple[str, str], ...]:
    """(phase, the line that ends it) of a main job that builds ``image``: a phase runs from the
    end of the one before."""
    return (("set-up (checks)", "setup: ready"), ("base (debootstrap)", f"Created {BASE}"),
            ("context (wheels)", "buildx build"), ("build, verify", f"verify {image.split('/')[0]}/"),
            ("records, tag", f"Built {image}"))


MARKS = marks(IMAGE)


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, check=check, stdin=subprocess.DEVNULL)


def exists(reference: str) -> bool:
    return docker("image", "inspect", reference, check=False).returncode == 0


def main_job(args: list[str], cache: Path, MARKS: tuple[tuple[str, str], ...] = MARKS) -> tuple[float, dict[str, float], str]:  # noqa: N803
    """Run the main job, its output read line by line: total seconds, seconds at each mark."""
    env = {**os.environ, "TORCHBAKE_PATHS_CACHE_DIR": str(cache), "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    process = subprocess.Popen(["bash", "scripts/main-job.sh", *args], cwd=ROOT, env=env, text=True,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen: dict[str, float] = {}
    lines = []
    for line in process.stdout:
        lines.append(line)
        for phase, mark in MARKS:
            if phase not in seen and mark in line:
                seen[phase] = time.monotonic() - started
    process.wait()
    total = time.monotonic() - started
    if process.returncode != 0:
        sys.exit(f"benchmark: the main job failed (exit {process.returncode}):\n{''.join(lines)[-4000:]}")
    return total, seen, "".join(lines)


def phases(seen: dict[str, float], total: float, MARKS: tuple[tuple[str, str], ...] = MARKS) -> list[tuple[str, str]]:  # noqa: N803
    rows, previous = [], 0.0
    for phase, _ in MARKS:
        if phase in seen:
            rows.append((phase, f"{seen[phase] - previous:.1f}"))
            previous = seen[phase]
        else:
            rows.append((phase, "-"))
    rows.append(("total", f"{total:.1f}"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_smoke(parser)
    if parser.parse_args().smoke:
        with tempfile.TemporaryDirectory(prefix="torchbake-bench-") as work, packaged_base(Path(work)) as base:
            image = f"{smoke_name('main-job')}/pytorch-cpu:smoke"
            flags = ["--config", str(tiny_release_profile(Path(work))), "--base-img", base, "--name",
                     image.split(":")[0], "--tag", "smoke"]
            try:
                bare_total, bare_seen, _ = main_job(flags, Path(work) / "cache", marks(image))
                again_total, again_seen, again_output = main_job(flags, Path(work) / "cache", marks(image))
            finally:
                docker("image", "rm", "--force", image, check=False)
        if "unchanged" not in again_output:
            sys.exit("benchmark: the second main job built again instead of finding the image unchanged")
        report(bare_seen, bare_total, again_seen, again_total, marks(image))
        return
    aside = {name: f"torchbake-bench/aside:{uuid.uuid4().hex[:12]}" for name in (BASE, IMAGE)}
    kept = [name for name in aside if exists(name)]
    for name in kept:  # the user's images keep another tag meanwhile
        docker("tag", name, aside[name])
        docker("image", "rm", name)
    try:
        with tempfile.TemporaryDirectory(prefix="torchbake-bench-") as work:
            bare_total, bare_seen, _ = main_job(["--no-cache"], Path(work) / "cache")
            again_total, again_seen, again_output = main_job([], Path(work) / "cache")
            if "unchanged" not in again_output:
                sys.exit("benchmark: the second main job built again instead of finding the image unchanged")
    finally:
        for name in aside:
            if exists(name):
                docker("image", "rm", "--force", name, check=False)
        for name in kept:
            docker("tag", aside[name], name)
            docker("image", "rm", aside[name])
    report(bare_seen, bare_total, again_seen, again_total, MARKS)


def report(bare_seen: dict[str, float], bare_total: float, again_seen: dict[str, float], again_total: float,
           MARKS: tuple[tuple[str, str], ...]) -> None:  # noqa: N803
    bare, again = phases(bare_seen, bare_total, MARKS), phases(again_seen, again_total, MARKS)
    print(f"main job (bash scripts/main-job.sh), {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}")
    print(f"{'phase':<20} {'bare (s)':>10} {'again (s)':>10}")
    for (phase, first), (_, second) in zip(bare, again, strict=True):
        print(f"{phase:<20} {first:>10} {second:>10}")


if __name__ == "__main__":
    main()
