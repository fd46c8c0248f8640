"""A run's timeline, worker by worker, from its SUITE_INVOCATIONS file (tests/conftest.py).

Usage: python scripts/suite-timeline.py FILE [--last SECONDS]

For each worker: when its last test ended and how long it then stood idle before the run's end
(a worker idle at the end is time a longer module started earlier would have used); then the
tests still running in the run's last SECONDS (default 180), in the order they ended.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--last", type=float, default=180.0, help="the run's last SECONDS (default 180)")
    options = parser.parse_args()
    tests = [line for line in map(json.loads, options.file.read_text().splitlines()) if "argv" not in line]
    if not tests:
        parser.error(f"{options.file} has no test lines (was the run made with SUITE_INVOCATIONS set?)")
    start = min(test["at"] for test in tests)
    end = max(test["at"] + test["seconds"] for test in tests)
    print(f"{len(tests)} tests from {start:.0f} to {end:.0f}: {end - start:.0f} s")
    workers: dict[str, list[dict]] = {}
    for test in tests:
        workers.setdefault(test["worker"] or "-", []).append(test)
    for worker, own in sorted(workers.items()):
        busy = sum(test["seconds"] for test in own)
        last = max(test["at"] + test["seconds"] for test in own)
        print(f"{worker:>6}: {len(own):4} tests, {busy:6.0f} s busy, last ended at {last - start:5.0f} s,"
              f" idle {end - last:4.0f} s at the end")
    print(f"tests running in the last {options.last:.0f} s (began, ended, worker, test):")
    for test in sorted(tests, key=lambda test: test["at"] + test["seconds"]):
        ended = test["at"] + test["seconds"]
        if ended >= end - options.last:
            print(f"  {test['at'] - start:5.0f} {ended - start:5.0f} {test['worker']:>4} {test['test']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
