"""What a test run killed before its end (CI's time limit, a machine stopped, kill -9) leaves on
the engine and the disk, removed by the next run that finds no other run alive: the images under
the tests' names that carry a run's id; its second engines and registries, which outlive it
(running, each engine with its bridge and its folder under /run); and what a killed second engine
left mounted in the tests' folders (pytest then cannot delete them, and they stay). On a reused CI
machine these filled the disk: a run holds a few GB of images when it is stopped.

Each run holds a shared lock on one file for as long as it lives (the kernel drops it when the
process dies, however it dies). A run that gets the lock exclusively is the only one: nothing
under those names is in use, so nothing it removes belongs to a run still going."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests import support
from tests.support import unmount_below

# Where the locks every test run and benchmark on this host share are: one folder for the host,
# whatever TMPDIR says (scripts/test.sh gives its run a temporary folder in memory; a benchmark's
# smoke run gets one of its own, test_benchmarks.py; a run with another must still see them).
LOCKS = Path("/tmp")


def host_lock(name: str) -> Path:
    """The lock file ``name`` that the test runs and benchmarks on this host take turns at."""
    return LOCKS / f"torchbake-tests-{name}.lock"


RUNNING = host_lock("running")
# The names the tests and the benchmarks' smoke runs give what they make (pushed copies under a
# loopback registry's host too), and the 8-hex id of a run, a worker or a smoke run in them. An
# image under these names without an id (the shared bootstrapped bases) is kept between runs.
OURS = re.compile(r"^(?:127\.0\.0\.1:\d+/[^/]+/)?(?:torchbake-test/|tb-bench-smoke-)")
RUN_ID = re.compile(r"(?<![0-9a-f])[0-9a-f]{8}(?![0-9a-f])")
# The folders of runs and benchmarks, where a killed one's second engines had their data roots;
# a benchmark's own (BENCH_FOLDER) goes whole, pytest's it removes itself (keeping the last run's).
TEMP = Path(tempfile.gettempdir())
FOLDER_PREFIXES = ("pytest-of-", "torchbake-")
BENCH_FOLDER = re.compile(r"^torchbake-[a-z-]*bench-")

ENGINE_TIMEOUT = 120  # seconds for the engine to list or remove images
# The programs a killed run leaves running: its second engines' (tests.support.start_second_engine)
# and its registries (tests.support.serve_registry)
ENGINE_PROGRAMS = ("dockerd", "containerd", "containerd-shim-runc-v2")
REGISTRY_PROGRAM = "docker-registry"
_held: list[int] = []


def hold_and_sweep(docker: str = "docker") -> list[str]:
    """Mark this test run alive for its lifetime; where it is the only run alive, remove what
    killed ones left (:func:`sweep`) first. Returns what was removed."""
    descriptor = os.open(RUNNING, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # another run is alive: its images are in use
        removed = []
    else:
        removed = sweep(docker)
    fcntl.flock(descriptor, fcntl.LOCK_SH)  # (from exclusive: a conversion; others may now join)
    _held.append(descriptor)
    return removed


def hold() -> None:
    """Mark this process (a benchmark) alive for its lifetime: no run sweeps while it lives."""
    descriptor = os.open(RUNNING, os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(descriptor, fcntl.LOCK_SH)
    _held.append(descriptor)


def leftover(reference: str) -> bool:
    """Whether ``reference`` (an image's repository:tag) is one a test run made for itself."""
    ours = OURS.match(reference)
    return bool(ours and RUN_ID.search(reference[ours.end():]))  # (not in a registry's address)


def sweep(docker: str = "docker") -> list[str]:
    """Remove every image a run made for itself, stop the engines and registries killed runs left
    running (:func:`stop_strays`), and unmount what killed engines left mounted in the tests'
    folders. Only while no run is alive (:func:`hold_and_sweep`)."""
    try:  # an engine that does not answer: its images stay, for the next run
        listed = subprocess.run([docker, "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True,
                                text=True, check=False, timeout=ENGINE_TIMEOUT).stdout.split()
        removed = [reference for reference in listed if leftover(reference)]
        if removed:
            subprocess.run([docker, "image", "rm", "--force", *removed], capture_output=True, check=False,
                           timeout=ENGINE_TIMEOUT)
    except subprocess.TimeoutExpired:
        removed = []
    removed += stop_strays()
    for folder in TEMP.iterdir():
        if not (folder.name.startswith(FOLDER_PREFIXES) and folder.is_dir()):
            continue
        removed += unmount_below(folder)
        if BENCH_FOLDER.match(folder.name):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    return removed


def _in_tests_folder(word: str) -> bool:
    """Whether ``word`` is a path in one of the runs' or benchmarks' folders."""
    path = Path(word)
    return path.is_relative_to(TEMP) and path != TEMP and path.relative_to(TEMP).parts[0].startswith(FOLDER_PREFIXES)


def strays() -> dict[int, str]:
    """Process id -> program of what killed runs left running: their second engines' dockerd,
    containerd and shims (each names its folder under support.ENGINE_FOLDERS) and their registries
    (their settings in a run's folder). No other program, and none of another folder: a user's
    engines and registries are theirs."""
    engines = str(support.ENGINE_FOLDERS / support.ENGINE_PREFIX)
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):  # gone meanwhile
            words = [word.decode(errors="replace") for word in (entry / "cmdline").read_bytes().split(b"\0") if word]
            program = Path(words[0]).name if words else ""
            if (program in ENGINE_PROGRAMS and any(engines in word for word in words[1:])
                    or program == REGISTRY_PROGRAM and any(_in_tests_folder(word) for word in words[1:])):
                found[int(entry.name)] = program
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie does not: it only waits for its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stop_strays() -> list[str]:
    """Kill what killed runs left running (:func:`strays`), then remove their engines' bridges
    and folders (what is mounted in them unmounted first). Returns what went."""
    found = strays()
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in found) and time.monotonic() < deadline:
        time.sleep(0.1)
    removed = [f"process {pid} ({program})" for pid, program in found.items()]
    if shutil.which("ip"):
        listed = subprocess.run(["ip", "-o", "link", "show", "type", "bridge"], capture_output=True, text=True,
                                check=False).stdout
        for name in re.findall(r"^\d+: ([^:@\s]+)", listed, re.M):
            ours = re.fullmatch(rf"{re.escape(support.BRIDGE_PREFIX)}[0-9a-f]{{6}}", name)  # as start_second_engine names them
            if ours and subprocess.run(["ip", "link", "del", name], capture_output=True, check=False).returncode == 0:
                removed.append(f"bridge {name}")
    for folder in support.ENGINE_FOLDERS.glob(f"{support.ENGINE_PREFIX}*"):
        unmount_below(folder)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(str(folder))
    return removed


if __name__ == "__main__":  # scripts/test.sh, before it counts the room on the engine's disk
    if shutil.which("docker"):
        gone = hold_and_sweep()
        if gone:
            print(f"test.sh: removed what killed test runs left: {len(gone)} images, processes, mounts and folders",
                  file=sys.stderr)
