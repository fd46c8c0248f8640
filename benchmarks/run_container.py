#!/usr/bin/env python3
"""Benchmark: `invoke run-container` against the plain docker commands it replaces.

Side by side, same engine, same image (the CPU release image, built by scripts/main-job.sh):

  first   a new container: `docker run -itd … --shm-size … IMAGE /bin/bash` + `docker exec NAME true`
          vs `invoke run-container IMAGE --name NAME --command true`
  reuse   the container is running: `docker exec NAME true` vs the same invoke command
  rm      a throwaway container: `docker run --rm … IMAGE true` vs `invoke run-container IMAGE --rm --command true`

Prints the median seconds of each and the ratio (torchbake / plain). Containers it makes are removed.
Usage: .venv/bin/python benchmarks/run_container.py [--rounds N] [--image IMAGE]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from _steps import timed  # benchmarks/_steps.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
DOCKER = "/usr/local/bin/docker" if Path("/usr/local/bin/docker").exists() else "/usr/bin/docker"
INVOKE = [sys.executable, "-m", "invoke", "--search-root", str(ROOT)]


def remove(*names: str) -> None:
    subprocess.run([DOCKER, "rm", "--force", *names], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--image", default="torchbake/pytorch-cpu:2.13.0-py3.11")
    args = parser.parse_args()
    image = args.image
    times: dict[str, list[float]] = {key: [] for key in ("first plain", "first tb", "reuse plain", "reuse tb",
                                                           "rm plain", "rm tb")}
    for _ in range(args.rounds):
        remove("bench-plain", "bench-tb")
        times["first plain"].append(
            timed([DOCKER, "run", "-itd", "--name", "bench-plain", "--shm-size", "8g", image, "/bin/bash"])
            + timed([DOCKER, "exec", "bench-plain", "true"]))
        times["first tb"].append(timed([*INVOKE, "run-container", image, "--name", "bench-tb", "--shm-size", "8G",
                                        "--command", "true"]))
        times["reuse plain"].append(timed([DOCKER, "exec", "bench-plain", "true"]))
        times["reuse tb"].append(timed([*INVOKE, "run-container", image, "--name", "bench-tb", "--command", "true"]))
        times["rm plain"].append(timed([DOCKER, "run", "--rm", "--shm-size", "8g", image, "true"]))
        times["rm tb"].append(timed([*INVOKE, "run-container", image, "--rm", "--shm-size", "8G", "--command", "true"]))
    remove("bench-plain", "bench-tb")
    print(f"{'case':<8} {'plain s':>8} {'torchbake s':>12} {'ratio':>6}   (median of {args.rounds})")
    for case in ("first", "reuse", "rm"):
        plain, ours = statistics.median(times[f"{case} plain"]), statistics.median(times[f"{case} tb"])
        print(f"{case:<8} {plain:>8.2f} {ours:>12.2f} {ours / plain:>6.2f}")


if __name__ == "__main__":
    main()
