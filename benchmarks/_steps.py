"""What every benchmark does with a step: run it (output captured, no standard input), stop the
benchmark with the step's command and the end of its output when it fails, and time it; and what
their smoke mode (--smoke, the test suite's run: tests/e2e/test_benchmarks.py) shares. Not a
benchmark itself (tests/e2e/test_benchmarks.py runs the others)."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # torchbake and the tests' helpers, as the checkout has them
DOCKER = "/usr/bin/docker"
BOOKWORM = "torchbake/debian:bookworm"  # the Debian image `invoke bootstrap-os --suite bookworm` makes
# `invoke` with this checkout's tasks. Where SERVER_VARIABLE names a forked-invoke server (the suite's
# smoke runs set it to the pytest worker's; nothing else should) each command is forked from a process
# that has imported invoke and torchbake, as the suite's own commands are: the same command without
# Python's start and imports (0.8 s of CPU a build, fifty commands a run), so its times leave those out.
from tests.forked_invoke import SERVER_VARIABLE, client_command  # noqa: E402

INVOKE = (client_command(os.environ[SERVER_VARIABLE]) if os.environ.get(SERVER_VARIABLE)
          else [sys.executable, "-m", "invoke"]) + ["--search-root", str(ROOT)]
# --smoke: the run the test suite makes of every benchmark, so that one that no longer runs turns
# it red. One round, the smallest inputs (the tests' stand-in torch, wheels of a few bytes), images
# and containers under names of its own (SMOKE_PREFIX), and nothing of the engine's own touched:
# no prune of its build cache, no image removed that the run did not make.
SMOKE_PREFIX = "tb-bench-smoke-"
SMOKE_HELP = ("the smoke run the test suite makes: one round, the smallest inputs, names of its own"
              f" ({SMOKE_PREFIX}*), no prune; its figures measure nothing")


def add_smoke(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)


@functools.cache
def alive() -> None:
    """Mark this benchmark alive until it exits (tests/leftovers.py): a test run that starts
    meanwhile sweeps none of what it made, its folders and its images (a smoke run's packaged base
    under its name). Once a process."""
    from tests import leftovers

    leftovers.hold()


def work_folder(kind: str) -> Path:
    """A folder of this benchmark's own (torchbake-KIND-bench-*), removed when it exits, however it
    stops short (a failed step); one it was killed before removing, the next test run removes
    (tests/leftovers.py), never while this benchmark lives."""
    alive()
    folder = Path(tempfile.mkdtemp(prefix=f"torchbake-{kind}-bench-"))
    # rm: what a second engine left in it is root's and deep; shutil.rmtree took 4 times as long
    atexit.register(subprocess.run, ["rm", "-rf", str(folder)], capture_output=True, check=False)
    return folder


def smoke_name(kind: str) -> str:
    """An image (or container) name of this smoke run's own: another run beside it has another, and
    a test run that starts meanwhile leaves it (:func:`alive`)."""
    alive()
    return f"{SMOKE_PREFIX}{kind}-{uuid.uuid4().hex[:8]}"


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


def recorded_command(output: str) -> list[str]:
    """The docker command of the build whose torchbake output is ``output``: its manifest's, beside
    the log the output names (where [paths] log_dir says, not where the cache folder is)."""
    log = re.search(r"\(log: (\S+\.log)\)", output)
    if log is None:
        sys.exit(f"no log path in torchbake's output:\n{output[-2000:]}")
    manifest = json.loads(Path(log.group(1)).with_suffix(".manifest.json").read_text())
    return shlex.split(manifest["docker_command"])


def plain_build_args(context: Path) -> list[str]:
    """What a plain `docker build` of the prepared release ``context`` needs besides the base and
    the Python: the Dockerfile's wheel arguments as a user of this machine gives them (the image's
    machine is the host's, as `uname -m` says it; its wheel platforms the manylinux_2_28 and linux
    ones of that machine and every older manylinux: stage_wheels.sh needs both,
    TORCHBAKE_WHEEL_MACHINE and TORCHBAKE_WHEEL_PLATFORMS), and the context's program layouts as
    the named contexts its Dockerfile mounts (`--build-context torchbake-uv=oci-layout://…`)."""
    from torchbake.inputs.context import named_contexts
    from torchbake.inputs.wheelhouse import compatible_platforms

    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())
    tags = compatible_platforms([f"manylinux_2_28_{machine}", f"linux_{machine}"])
    named = [arg for name, source in named_contexts(context).items() for arg in ("--build-context", f"{name}={source}")]
    return ["--build-arg", f"WHEEL_MACHINE={machine}", "--build-arg", f"WHEEL_PLATFORMS={' '.join(tags)}", *named]


def tiny_release_profile(folder: Path, extra: str = "[]") -> Path:
    """A release profile on the tests' stand-in torch (tests.e2e.helpers.make_tiny_torch, a few
    kB: the same bytes every run, so that the engine's cache keeps its steps), with ``extra``
    (TOML) as its companions: the smoke run's inputs where the benchmark takes the CPU profile."""
    from tests.e2e.helpers import STAND_IN_PYTHON, make_tiny_torch

    wheel = make_tiny_torch(folder / "tiny-torch")
    profile = folder / "tiny.toml"
    profile.write_text(STAND_IN_PYTHON + f'[wheels]\ntorch = "{wheel}"\nextra = {extra}\n[build]\nvariant = "release"\n')
    return profile


@contextlib.contextmanager
def packaged_base(folder: Path) -> Iterator[str]:
    """BOOKWORM with the OS packages a release image needs already in it (the step the release
    Dockerfile runs, run here as tests/e2e/conftest.py's packaged_base runs it; the engine's cache
    keeps it across runs), under a name of the run's own, removed at the end: a smoke build's OS
    step then installs nothing, even with --no-cache."""
    run([*INVOKE, "bootstrap-os", "--suite", "bookworm", "--name", BOOKWORM])
    name = smoke_name("base") + ":packaged"
    context = folder / "packaged-base"
    shutil.copytree(ROOT / "docker" / "common", context / "common")
    (context / "Dockerfile").write_text(f"FROM {BOOKWORM}\nRUN --mount=type=bind,source=common,target=/tmp/common"
                                        " bash /tmp/common/install_os_packages.sh os 0\n")
    try:
        run([DOCKER, "build", "--quiet", "--tag", name, str(context)])
        yield name
    finally:
        subprocess.run([DOCKER, "image", "rm", "--force", name], capture_output=True)
