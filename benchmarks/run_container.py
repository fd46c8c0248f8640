#!/usr/bin/env python3
"""Benchmark: `invoke run-container` against the plain docker commands it replaces.

Side by side, same engine, same image (the CPU release image, built by scripts/main-job.sh):

  first   a new container: `docker run -itd … --shm-size … IMAGE /bin/bash` + `docker exec NAME true`
          vs `invoke run-container IMAGE --name NAME --command true`
  reuse   the container is running: `docker exec NAME true` vs the same invoke command
  rm      a throwaway container: `docker run --rm … IMAGE true` vs `invoke run-container IMAGE --rm --command true`

Prints the median seconds of each and the ratio (torchbake / plain). Containers it makes are removed.
--smoke: one round on the Debian image `invoke bootstrap-os` makes (made where missing), containers
named for the run.
Usage: .venv/bin/python benchmarks/run_container.py [--rounds N] [--image IMAGE] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
from pathlib import Path

from _steps import BOOKWORM, INVOKE, add_smoke, run, smoke_name, timed  # benchmarks/_steps.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
DOCKER = "/usr/local/bin/docker" if Path("/usr/local/bin/docker").exists() else "/usr/bin/docker"


def remove(*names: str) -> None:
    subprocess.run([DOCKER, "rm", "--force", *names], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--image", default="torchbake/pytorch-cpu:2.13.0-py3.11")
    add_smoke(parser)
    args = parser.parse_args()
    image, plain_name, tb_name = args.image, "bench-plain", "bench-tb"
    if args.smoke:
        args.rounds, image, plain_name, tb_name = 1, BOOKWORM, smoke_name("plain"), smoke_name("tb")
        run([*INVOKE, "bootstrap-os", "--suite", "bookworm", "--name", BOOKWORM])
    times: dict[str, list[float]] = {key: [] for key in ("first plain", "first tb", "reuse plain", "reuse tb",
                                                           "rm plain", "rm tb")}
    try:
        for _ in range(args.rounds):
            remove(plain_name, tb_name)
            times["first plain"].append(
                timed([DOCKER, "run", "-itd", "--name", plain_name, "--shm-size", "8g", image, "/bin/bash"])
                + timed([DOCKER, "exec", plain_name, "true"]))
            times["first tb"].append(timed([*INVOKE, "run-container", image, "--name", tb_name, "--shm-size", "8G",
                                            "--command", "true"]))
            times["reuse plain"].append(timed([DOCKER, "exec", plain_name, "true"]))
            times["reuse tb"].append(timed([*INVOKE, "run-container", image, "--name", tb_name, "--command", "true"]))
            times["rm plain"].append(timed([DOCKER, "run", "--rm", "--shm-size", "8g", image, "true"]))
            times["rm tb"].append(timed([*INVOKE, "run-container", image, "--rm", "--shm-size", "8G", "--command", "true"]))
    finally:  # also where a step failed
        remove(plain_name, tb_name)
    print(f"{'case':<8} {'plain s':>8} {'torchbake s':>12} {'ratio':>6}   (median of {args.rounds})")
    for case in ("first", "reuse", "rm"):
        plain, ours = statistics.median(times[f"{case} plain"]), statistics.median(times[f"{case} tb"])
        print(f"{case:<8} {plain:>8.2f} {ours:>12.2f} {ours / plain:>6.2f}")


if __name__ == "__main__":
    main()
