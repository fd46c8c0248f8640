#!/usr/bin/env python3
"""Benchmark: torchbake's release build against a plain `docker build` of the same thing.

Run side by side in one run, on the same engine, the same base image and the same prepared
context (the CPU profile: torch 2.13.0 + numpy on Debian bookworm):

  cold   both with --no-cache (every step runs: apt, venv, pip install of torch)
  warm   both with the layer cache warm and nothing changed
         (torchbake: prepare the context again, build, verify; and build only)

The plain build gives the build arguments a user of this machine types (_steps.plain_build_args:
the wheel stages need the image's machine and wheel platforms).
Prints a table of seconds and ratios (torchbake / plain). Images it makes are removed.
--smoke: the stand-in torch on the Debian base with its OS packages in it, warm only, one round.
Usage: .venv/bin/python benchmarks/release_build.py [--rounds N] [--skip-cold] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
from pathlib import Path

# benchmarks/_steps.py, beside this script
from _steps import (
    BOOKWORM,
    DOCKER,
    INVOKE,
    add_smoke,
    packaged_base,
    plain_build_args,
    smoke_name,
    timed,
    tiny_release_profile,
    work_folder,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="warm rounds to take the median of")
    parser.add_argument("--skip-cold", action="store_true", help="only the warm comparison")
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.skip_cold = 1, True
    work = work_folder("release")
    name = smoke_name("release") if args.smoke else "torchbake-bench"
    images = (f"{name}/plain:bench", f"{name}/tb:bench")
    try:
        with contextlib.ExitStack() as stack:
            if args.smoke:
                base, profile = stack.enter_context(packaged_base(work)), str(tiny_release_profile(work))
            else:
                base, profile = BOOKWORM, "configs/cpu.toml"
                timed([*INVOKE, "bootstrap-os", "--suite", "bookworm", "--name", BOOKWORM])
            rows = compare(args, work, base, profile, images)
    finally:
        for image in images:
            subprocess.run([DOCKER, "image", "rm", "--force", image], capture_output=True)
    print(f"\n{'case':<38} {'plain docker build':>18} {'torchbake':>10} {'ratio':>7}")
    for case, plain_s, tb_s in rows:
        print(f"{case:<38} {plain_s:>17.1f}s {tb_s:>9.1f}s {tb_s / plain_s:>6.2f}x")


def compare(args: argparse.Namespace, work: Path, base: str, profile: str, images: tuple[str, str]) -> list[tuple[str, float, float]]:
    context = work / "context"
    common = ["build", "--config", profile, "--base-img", base, "--name", images[1].split(":")[0],
              "--tag", "bench", "--build-dir", str(context)]
    # Prepare the context (and warm the caches) once; the plain build uses exactly this context.
    timed([*INVOKE, *common, "--no-verify"])
    build_args = ["--build-arg", f"BASE_IMAGE={base}", "--build-arg", "PYTHON_VERSION=3.11",
                  "--build-arg", "PYTHON_PROVIDER=os", "--build-arg", "RENDER_GID=0", *plain_build_args(context)]
    plain = [DOCKER, "build", "--progress=plain", "-f", str(context / "Dockerfile"), "-t", images[0],
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
    return rows

if __name__ == "__main__":
    main()
