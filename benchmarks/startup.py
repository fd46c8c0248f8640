#!/usr/bin/env python3
"""Benchmark: how long the command takes to start, side by side in one run.

  python -c pass              the interpreter alone
  invoke --list (floor)       invoke with a tasks.py of one empty task: what no collection can beat
  invoke --list               torchbake's tasks listed
  torchbake --help            the installed command's entry point (this checkout's .venv)
  invoke build --release      unchanged: planned, asked of the engine, "unchanged" (needs the
                              default image built: `bash scripts/main-job.sh`; left out without it)

Rounds alternate the cases (the same load for each); prints the median of each and its ratio to
`invoke --list`. --smoke: one round, without the `invoke build --release` case (the default
image's name is the user's).
Usage: .venv/bin/python benchmarks/startup.py [--rounds N] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _steps import add_smoke, timed, work_folder  # benchmarks/_steps.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
IMAGE = "torchbake/pytorch-cpu:2.13.0-py3.11"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9, help="alternating rounds to take the medians of")
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:
        args.rounds = 1
    floor = work_folder("startup")
    (floor / "tasks.py").write_text("from invoke import task\n\n\n@task\ndef hello(c):\n    pass\n")
    invoke = str(BIN / "invoke")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TORCHBAKE_")}  # no option of the caller's
    cases = {
        "python -c pass": ([sys.executable, "-c", "pass"], ROOT),
        "invoke --list (floor)": ([invoke, "--list"], floor),
        "invoke --list": ([invoke, "--list"], ROOT),
        "torchbake --help": ([str(BIN / "torchbake"), "--help"], ROOT),
    }
    docker = shutil.which("docker")
    if docker and not args.smoke and subprocess.run([docker, "image", "inspect", IMAGE], capture_output=True).returncode == 0:
        cases["invoke build --release (unchanged)"] = ([invoke, "build", "--release"], ROOT)
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, (argv, cwd) in cases.items():
            seconds[name].append(timed(argv, cwd=cwd, env=environment))
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    reference = medians["invoke --list"]
    print(f"start-up, median of {args.rounds} alternating rounds, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}")
    print(f"{'case':<38} {'seconds':>8} {'/ invoke --list':>16}")
    for name, median in medians.items():
        print(f"{name:<38} {median:>8.3f} {median / reference:>16.2f}")


if __name__ == "__main__":
    main()
