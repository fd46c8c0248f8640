#!/usr/bin/env bash
# The whole test suite on a fresh machine: set up (engine included), then pytest.
# Real-engine tests always run; "no tests ran" is a failure.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
bash scripts/setup.sh || exit 1
# torchbake's own modules compiled once: every test starts invoke hundreds of times, and where
# PYTHONDONTWRITEBYTECODE is set Python reads bytecode but never writes it (0.15 s a start).
.venv/bin/python -m compileall -q torchbake tasks.py >/dev/null || exit 1
# Four workers (pytest-xdist) on two cores: a real-engine test waits on the engine, a mirror or a
# server for part of its time, and a fourth worker fills those waits (from a fresh clone, 12 min 39 s
# with three, 12 min 6 s with four, 2026-11-24); a module's tests stay together, in order, on one worker
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
# Room on the engine's disk before the tests start: a run holds up to ROOM_GB while it goes (second
# engines' data roots, the tests' folders, images and the build cache's growth), and every build
# checks build.min_free_space first. CI machines are reused between runs: there (CI set) the
# engine's build cache is cut, before the run, by what is missing, in BuildKit's own order (a prune
# beside the tests deleted records the run had yet to use); every cut costs the next runs steps they
# had cached (BuildKit 0.13 ranks records by creation more than by use, and files a step under the
# context upload of the build that first ran it: docs/housekeeping.md). On a developer's machine
# nothing of theirs is removed: the shortfall is said, with the command that frees it.
ROOM_GB=16
.venv/bin/python -m tests.leftovers || exit 1  # first, what killed runs left (no other run alive)
engine_root=$(/usr/bin/docker info --format '{{.DockerRootDir}}' 2>/dev/null) || engine_root=/
engine_free() { df --output=avail -B1 "$engine_root" | tail -1; }
cache_bytes() {  # (asking the engine its build cache's size takes 2 s)
    /usr/bin/docker system df --format '{{.Type}} {{.Size}}' 2>/dev/null \
        | sed -n 's/^Build Cache \(.*\)B$/\1/p' | numfmt --from=si 2>/dev/null
}
short=$((ROOM_GB * 1000 * 1000 * 1000 - $(engine_free)))
if [ "$short" -gt 0 ] && [ -n "${CI:-}" ]; then
    before=$(cache_bytes) || before=
    if [ -n "$before" ]; then
        keep=$((before > short ? before - short : 0))
        /usr/bin/docker builder prune --force --keep-storage "$keep" >/dev/null \
            || echo "test.sh: docker builder prune failed; the build cache was not trimmed." >&2
        echo "test.sh: the engine's build cache cut from $((before / 1000000000)) GB to $((keep / 1000000000)) GB" \
            "for the run's ${ROOM_GB} GB; $(($(engine_free) / 1000000000)) GB free." >&2
    fi
elif [ "$short" -gt 0 ]; then
    echo "test.sh: $(($(engine_free) / 1000000000)) GB free on the engine's disk ($engine_root); a run needs" \
        "about ${ROOM_GB} GB: builds will refuse to start. Free some: docker builder prune --keep-storage 20GB" >&2
fi
.venv/bin/python -m pytest -n "${PYTEST_WORKERS:-4}" --dist loadfile --no-loadscope-reorder "$@" "${selection[@]}"
status=$?
if [ "$status" = 5 ]; then
    echo "test.sh: pytest collected no tests; that is a failure." >&2
    exit 1
fi
exit "$status"
