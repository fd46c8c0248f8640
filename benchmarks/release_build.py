#!/usr/bin/env python3
"""Benchmark: torchbake's release build against a plain `docker build` of the same thing.

Run side by side in one run, on the same engine, the same base image and the same prepared
context (the CPU profile: torch 2.13.0 + numpy on Debian bookworm):

  cold   both with --no-cache (every step runs: apt, venv, pip install of torch)
  warm   both with the layer cache warm and nothing changed
         (torchbake: prepare the context again, build, verify; and build only)

Prints a table of seconds and ratios (torchbake / plain). Images it makes are removed.
Usage: .venv/bin/python benchmarks/release_build.py [--rounds N] [--skip-cold]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _steps import timed  # benchmarks/_steps.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
DOCKER = "/usr/bin/docker"
BASE = "torchbake/debian:bookworm"
INVOKE = [sys.executable, "-m", "invoke", "--search-root", str(ROOT)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="warm rounds to take the median of")
    parser.add_argument("--skip-cold", action="store_true", help="only the warm comparison")
    args = parser.parse_args()

    timed([*INVOKE, "bootstrap-os", "--suite", "bookworm", "--name", BASE])
    work = Path(tempfile.mkdtemp(prefix="torchbake-bench-"))
    context = work / "context"
    common = ["build", "--config", "configs/cpu.toml", "--base-img", BASE, "--name", "torchbake-bench/tb",
              "--tag", "bench", "--build-dir", str(context)]
    # Prepare the context (and warm the caches) once; the plain build uses exactly this context.
    timed([*INVOKE, *common, "--no-verify"])
    build_args = ["--build-arg", f"BASE_IMAGE={BASE}", "--build-arg", "PYTHON_VERSION=3.11",
                  "--build-arg", "PYTHON_PROVIDER=os", "--build-arg", "RENDER_GID=0"]
    plain = [DOCKER, "build", "--progress=plain", "-f", str(context / "Dockerfile"), "-t", "torchbake-bench/plain:bench",
             *build_args, str(context)]
    env = {**os.environ, "DOCKER_BUILDKIT": "1"}
    rows = []
    if not args.skip_cold:
        plain_cold = timed([*plain[:2], "--no-cache", *plain[2:]], env=env)
        tb_cold = timed([*INVOKE, *common, "--no-cache", "--no-prepare", "--no-verify"])
        rows.append(("cold, --no-cache: build only", plain_cold, tb_cold))
    plain_warm = statistics.median(timed(plain, env=env) for _ in range(args.rounds))
    tb_build = statistics.median(timed([*INVOKE, *common, "--no-prepare", "--no-verify"]) for _ in range(args.rounds))
    tb_full = statistics.median(timed([*INVOKE, *common]) for _ in range(args.rounds))
    rows.append(("warm, nothing changed: build only", plain_warm, tb_build))
    rows.append(("warm: prepare + build + verify", plain_warm, tb_full))

    print(f"\n{'case':<38} {'plain docker build':>18} {'torchbake':>10} {'ratio':>7}")
    for case, plain_s, tb_s in rows:
        print(f"{case:<38} {plain_s:>17.1f}s {tb_s:>9.1f}s {tb_s / plain_s:>6.2f}x")
    for image in ("torchbake-bench/plain:bench", "torchbake-bench/tb:bench"):
        subprocess.run([DOCKER, "image", "rm", "--force", image], capture_output=True)
    subprocess.run(["rm", "-rf", str(work)])


if __name__ == "__main__":
    main()
