#!/usr/bin/env python3
"""Benchmark: what reproducibility costs the CPU release build, and `import torch` in its image.

Side by side in one run, on the same engine, the same base image and the same inputs (the CPU
profile: torch 2.13.0 + numpy on Debian bookworm), each build with --no-cache (every step runs):

  before   the release Dockerfile as it was before docker/common/step.sh (COPY steps, no
           clamped times; passed with --docker-file), built by torchbake
  after    today's release Dockerfile, under the same NAME:TAG every round (the tag is a
           label): every round's image id must be the same

the two taking turns for --rounds rounds,
then `import torch` in a fresh container of each image, the images taking turns (median of
--imports runs each).
Prints seconds, the ratio of the medians after / before, and whether every "after" build gave
one digest.
Images it makes are removed.
--smoke: the stand-in torch on the Debian base with its OS packages in it, one round, one import
each, the layer cache as it is (no --no-cache).
Usage: .venv/bin/python benchmarks/reproducible_build.py [--before-commit REV] [--rounds N] [--imports N] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCKER = "/usr/bin/docker"
BASE = "torchbake/debian:bookworm"
NAME = "torchbake-bench/reproducible"
sys.path.insert(0, str(ROOT / "benchmarks"))
from _steps import INVOKE, add_smoke, packaged_base, smoke_name, tiny_release_profile  # noqa: E402

IMPORT = "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=os.environ)
    if result.returncode != 0:
        sys.exit(f"benchmark step failed: {' '.join(argv)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def cold_build(tag: str, template: Path | None, inputs: list[str], name: str = NAME) -> tuple[float, str]:
    """``inputs``: the profile and base flags, and --no-cache."""
    argv = [*INVOKE, "build", *inputs, "--name", name, "--tag", tag]
    if template is not None:
        argv += ["--docker-file", str(template)]
    started = time.monotonic()
    run(argv)
    seconds = time.monotonic() - started
    return seconds, run([DOCKER, "image", "inspect", "--format", "{{.Id}}", f"{name}:{tag}"]).stdout.strip()


def import_seconds(tags: tuple[str, ...], times: int, name: str = NAME) -> dict[str, float]:
    """The median `import torch` time of each image, the images taking turns (the machine's load
    drifts; turns share it fairly)."""
    seen: dict[str, list[float]] = {tag: [] for tag in tags}
    for _ in range(times):
        for tag in tags:
            seen[tag].append(float(run([DOCKER, "run", "--rm", "--network", "none", f"{name}:{tag}", "python", "-c",
                                        IMPORT]).stdout.split()[-1]))
    return {tag: statistics.median(values) for tag, values in seen.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before-commit", default="46e3a9b", help="commit whose release Dockerfile is 'before'")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of before, after (medians are shown)")
    parser.add_argument("--imports", type=int, default=12, help="`import torch` runs per image")
    add_smoke(parser)
    args = parser.parse_args()
    name = smoke_name("reproducible") if args.smoke else NAME
    if args.smoke:
        args.rounds, args.imports = 1, 1
    seconds: dict[str, list[float]] = {"before": [], "after": []}
    ids: dict[str, set[str]] = {"before": set(), "after": set()}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        if args.smoke:
            base = stack.enter_context(packaged_base(Path(tmp)))
            inputs = ["--config", str(tiny_release_profile(Path(tmp))), "--base-img", base]
        else:
            inputs = ["--release", "--base-img", BASE, "--no-cache"]
        before = Path(tmp) / "dockerfile.release"
        before.write_text(run(["git", "-C", str(ROOT), "show", f"{args.before_commit}:docker/ubuntu/dockerfile.release"]).stdout)
        try:
            for _ in range(args.rounds):  # the two take turns: the machine's load drifts
                for tag, template in (("before", before), ("after", None)):
                    took, image_id = cold_build(tag, template, inputs, name)
                    seconds[tag].append(took)
                    ids[tag].add(image_id)
            imports = import_seconds(("before", "after"), args.imports, name)
        finally:
            for tag in seconds:
                subprocess.run([DOCKER, "image", "rm", "--force", f"{name}:{tag}"], capture_output=True, check=False)
    print(f"{'build (--no-cache)':<12} {'runs (s)':<24} {'median':>7}  image ids")
    for tag, runs in seconds.items():
        print(f"{tag:<12} {', '.join(f'{r:.1f}' for r in runs):<24} {statistics.median(runs):7.1f}"
              f"  {', '.join(sorted(i[:19] for i in ids[tag]))}")
    print(f"after / before (medians): {statistics.median(seconds['after']) / statistics.median(seconds['before']):.2f}")
    print(f"every 'after' build gave one digest: {len(ids['after']) == 1}; 'before' builds: {len(ids['before'])} digests")
    print(f"import torch, median of {args.imports}: before {imports['before']:.2f} s, after {imports['after']:.2f} s")


if __name__ == "__main__":
    main()
