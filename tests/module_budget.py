"""The suite's budget: each test module's seconds alone on this project's machine (Debian 12, 2
cores), recorded in ``tests/module-budget.toml`` by ``scripts/measure-modules.sh``, and the
budget each is held to (``tests/unit/test_module_budget.py``).

The whole suite is to run on 2 cores in at most 12 minutes. A module alone keeps one core busy
for most of its time (one pytest process, one build at a time; the engine's work in between), so
the modules' times alone may add up to 12 minutes on each of the 2 cores: 1,440 seconds, the
TARGET. The suite is over it: the modules alone add up to 1,604 s (measured 2026-11-29, the six
modules that shed duplicated work again 2026-11-30; three workers from a fresh clone, 13 min 22 s
in all, 2026-11-30). ``suite_budget`` in the file is the CEILING the modules' sum is held to: today's
sum, lowered as the suite gets faster, never raised to let a change in (a new module pays for its
time with time saved elsewhere). A module's budget is its figure and 15 % (at least 2 s more: a module of a few seconds varies by
that much between two measurements); a module that grows past it is measured again and its
budget raised on purpose, or made smaller.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import time
import tomllib
from datetime import date
from pathlib import Path

import tomli_w

FILE = Path(__file__).with_name("module-budget.toml")
CORES = 2
WALL_SECONDS = 12 * 60
TARGET = CORES * WALL_SECONDS
CEILING = 1610  # the modules' sum alone may not pass this (1,604 s, 2026-11-30); only ever lowered
HEADROOM = 1.15  # a new module's budget: its first figure and 15 % (first_budget)


# The fixed work whose CPU seconds say how fast this machine is at the moment: one machine took 0.85 s
# of CPU for it (an idle machine, 2026-12-01 01:33) and 0.25 s a minute later, and a suite's seconds
# mean little without it. Each run's summary gives it at the start and the end (tests/conftest.py).
SPEED_LOOP = 5_000_000


def loop_seconds() -> float:
    """CPU seconds of SPEED_LOOP additions in pure Python."""
    started = time.process_time()
    total = 0
    for number in range(SPEED_LOOP):
        total += number
    return time.process_time() - started


def cpu_line() -> str:
    """The first line of /proc/stat (the whole machine's CPU time so far), "" where there is none."""
    try:
        with open("/proc/stat") as stat:
            return stat.readline()
    except OSError:
        return ""


def machine_busy(before: str, after: str) -> tuple[float, float]:
    """(busy, kernel's) seconds of CPU of the whole machine between two first lines of /proc/stat
    ("cpu user nice system idle iowait irq softirq steal ..."): busy is user, nice, system, irq and
    softirq (what the engine, the tests and torchbake spent); the kernel's is system, irq and softirq."""
    ticks = os.sysconf("SC_CLK_TCK")
    spent = [int(b) - int(a) for a, b in zip(before.split()[1:8], after.split()[1:8], strict=True)]
    user, nice, system, _idle, _iowait, irq, softirq = spent
    return (user + nice + system + irq + softirq) / ticks, (system + irq + softirq) / ticks


# The engine's daemons, by the files that hold their process ids (scripts/ensure-engine.sh starts
# dockerd, which starts its containerd). Their CPU is a large part of a run's: a whole run's profile
# of dockerd (its /debug/pprof) is in docs/development.md.
ENGINE_PIDFILES = {"dockerd": Path("/var/run/docker.pid"),
                   "containerd": Path("/var/run/docker/containerd/containerd.pid")}


def daemon_cpu(pidfiles: dict[str, Path] = ENGINE_PIDFILES, proc: Path = Path("/proc")) -> dict[str, tuple[int, float]]:
    """Name → (process id, CPU seconds so far, user and system) of each daemon of ``pidfiles``
    that is running; one whose file or process is gone, or whose pidfile names another program (a
    stale file, its number taken again), is left out."""
    ticks = os.sysconf("SC_CLK_TCK")
    found = {}
    for name, pidfile in pidfiles.items():
        try:
            pid = int(pidfile.read_text().split()[0])
            stat = (proc / str(pid) / "stat").read_text()
        except (OSError, ValueError, IndexError):
            continue
        program, after = stat.split(" (", 1)[1].rsplit(")", 1)  # "pid (comm) ...": comm may hold blanks and ")"
        if program != name:
            continue
        fields = after.split()
        found[name] = (pid, (int(fields[11]) + int(fields[12])) / ticks)  # utime, stime: fields 14 and 15
    return found


def daemons_spent(before: dict[str, tuple[int, float]], after: dict[str, tuple[int, float]]) -> dict[str, float | None]:
    """Name → CPU seconds each daemon spent between two :func:`daemon_cpu` readings; None for one
    that was started again meanwhile (another process id: its seconds before are not known)."""
    return {name: (seconds - before[name][1] if before.get(name, (None,))[0] == pid else None)
            for name, (pid, seconds) in after.items()}


def first_budget(seconds: float) -> int:
    """A module's budget from its figure: 15 % more, and at least 2 s more."""
    return max(math.ceil(max(seconds, 1.0) * HEADROOM), math.ceil(seconds) + 2)


def read(path: Path = FILE) -> dict:
    return tomllib.loads(path.read_text())


def test_modules(root: Path) -> list[str]:
    """Every test module of the suite, as pytest names it (tests/e2e/test_x.py)."""
    return sorted(str(path.relative_to(root)) for path in (root / "tests").glob("*/test_*.py"))


def engine() -> str:
    found = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True,
                           check=False)
    return f"Docker {found.stdout.strip()}" if found.returncode == 0 else "no engine answered"


def update(measured: dict[str, float], path: Path = FILE, present: list[str] | None = None) -> dict:
    """The budget file with today's figures: each measured module's seconds replaced (the others
    kept: a run of some modules measures those), budgets kept, a new module given its figure and
    15 %, a module no longer in ``present`` (the suite's modules) dropped."""
    old = read(path) if path.exists() else {"modules": {}}
    present = test_modules(path.resolve().parent.parent) if present is None else present
    modules = {name: entry for name, entry in old["modules"].items() if name in present}
    for name in sorted(measured):
        seconds = round(measured[name], 1)
        budget = old["modules"].get(name, {}).get("budget") or first_budget(seconds)
        modules[name] = {"seconds": seconds, "budget": budget}
    cores = len(os.sched_getaffinity(0))
    new = {"suite_budget": old.get("suite_budget", CEILING), "measured": date.today().isoformat(),
           "machine": f"{platform.freedesktop_os_release().get('PRETTY_NAME', platform.system())}, {cores} cores, "
                      f"{engine()}",
           "modules": dict(sorted(modules.items()))}
    header = "".join(f"# {line}\n" if line else "#\n" for line in (__doc__ or "").strip().splitlines())
    path.write_text(header + "# Written by scripts/measure-modules.sh: edit budgets, not figures.\n\n"
                    + tomli_w.dumps(new))
    return new


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--update", type=Path, required=True, help="the per-module seconds pytest wrote (JSON)")
    args = parser.parse_args()
    new = update(json.loads(args.update.read_text()))
    spent = sum(entry["seconds"] for entry in new["modules"].values())
    print(f"tests/module-budget.toml: {len(new['modules'])} modules, {spent:.0f} s alone in all (the suite's"
          f" budget now: {new['suite_budget']} s, at most {CEILING}; the target: {TARGET} s, 12 minutes on each of {CORES}"
          " cores).")


if __name__ == "__main__":
    main()
