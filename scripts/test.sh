#!/usr/bin/env bash
# The whole test suite on a fresh machine: set up (engine included), then pytest.
# Real-engine tests always run; "no tests ran" is a failure.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# Bytecode written as modules are first imported, whatever the machine says (CI runners set
# PYTHONDONTWRITEBYTECODE: Python then compiles a module anew at every import, in each of the suite's
# thousands of processes): only what the tests import, once, where setup.sh compiled every package of
# .venv (25 s of CPU on a fresh clone, 2026-11-29), and pytest keeps the test modules it rewrote.
unset PYTHONDONTWRITEBYTECODE
bash scripts/setup.sh || exit 1
# Three workers (pytest-xdist) on two cores: a real-engine test waits on the engine, a mirror or a
# server for part of its time, and a third worker fills those waits; a fourth made the run slower
# (from fresh clones, 2026-11-30: 13 min 22 s and 13 min 49 s with three, 1,524 and 1,580 s of CPU
# busy; 13 min 53 s to 14 min 9 s with four, 1,643 to 1,671 s: the cores switch among more
# processes, the kernel's share grows); a module's tests stay together, in order, on one worker
# (--dist loadfile: their module fixtures are made once), the longest modules first
# (tests/conftest.py LONGEST_FIRST; --no-loadscope-reorder keeps that order). PYTEST_WORKERS=0:
# one process (not a TORCHBAKE_* name: torchbake reads those as its options and refuses unknown ones).
# The inner loop: `--touched` (changes not committed yet) or `--touched=REV` (since REV) runs the unit
# tests and the real-engine modules that exercise what changed (the map: tests/ownership.py).
selection=()
case "${1:-}" in
    --touched | --touched=*)
        since=HEAD
        [ "$1" != --touched ] && since=${1#--touched=}
        shift
        if ! picked=$(.venv/bin/python -m tests.ownership "$since"); then
            echo "test.sh: cannot tell what changed since $since (a commit git knows, e.g. HEAD~3)." >&2
            exit 2
        fi
        mapfile -t selection <<<"$picked"
        echo "test.sh: changes since $since: running ${selection[*]}" >&2
        ;;
esac
# The tests' folders (pytest's, the second engines' data roots, the build contexts) in memory where
# the machine has room to spare: files made on tmpfs cost the kernel half what they cost on the
# disk (a second engine loading a 173 MB base: 2.0 s of CPU against 3.3 to 5.2; a whole run: 561 s
# of the kernel's time against 634, 3.6 GB of /dev/shm at most; 2026-11-29). /dev/shm itself, not
# a folder in it: a socket's path is at most 107 bytes, and the tests' are deep. A TMPDIR already
# set is kept; the host's locks stay in /tmp (tests/leftovers.py).
if [ -z "${TMPDIR:-}" ] && [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ]; then
    spare=$((16 << 20))  # KiB free in memory and in /dev/shm: 16 GiB
    read -r blocks size < <(stat -f -c '%a %S' /dev/shm)
    available=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo 2>/dev/null)
    if [ "${available:-0}" -ge "$spare" ] && [ $((${blocks:-0} * ${size:-0} / 1024)) -ge "$spare" ]; then
        export TMPDIR=/dev/shm
    fi
fi
# First what killed runs left (where no other run is alive), then room on the engine's disk.
.venv/bin/python -m tests.leftovers || exit 1
# The build cache held under 40 GB, cut to 25 GB past it: a cut costs the run after it 3 min, so it
# is deep and rare (a warm run adds 2 GB; make-room.sh says why).
bash scripts/make-room.sh 20 40
.venv/bin/python -m pytest -n "${PYTEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder "$@" "${selection[@]}"
status=$?
if [ "$status" = 5 ]; then
    echo "test.sh: pytest collected no tests; that is a failure." >&2
    exit 1
fi
exit "$status"
