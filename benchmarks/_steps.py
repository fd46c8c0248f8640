"""What every benchmark does with a step: run it (output captured, no standard input), stop the
benchmark with the step's command and the end of its output when it fails, and time it. Not a
benchmark itself (tests/e2e/test_benchmarks.py runs the others)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCKER = "/usr/bin/docker"
BOOKWORM = "torchbake/debian:bookworm"  # the Debian image `invoke bootstrap-os --suite bookworm` makes
INVOKE = [sys.executable, "-m", "invoke", "--search-root", str(ROOT)]  # this checkout's tasks


def run(argv: list[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``argv`` run to its end (``env``: its whole environment; None, this one's)."""
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        sys.exit(f"benchmark step failed: {' '.join(argv)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def timed(argv: list[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> float:
    """The seconds :func:`run` of ``argv`` took."""
    started = time.monotonic()
    run(argv, env=env, cwd=cwd)
    return time.monotonic() - started
