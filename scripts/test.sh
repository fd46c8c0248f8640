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
.venv/bin/python -m pytest -n "${PYTEST_WORKERS:-4}" --dist loadfile --no-loadscope-reorder "$@" "${selection[@]}"
status=$?
if [ -n "${CI:-}" ]; then
    # CI machines are reused between runs: keep the engine's build cache from filling the disk, after
    # the tests (a prune beside them deleted records the run had yet to use), and only when the disk
    # needs it: every cut costs the next run steps it had cached, whatever is cut. BuildKit (0.13,
    # Docker 26) ranks records by creation more than by use (a cache hit updates neither the use
    # count nor the last use of what it reuses), so a cut takes the steps the next run needs along
    # with a run's own (run-unique wheels, a fresh CA, fixture sources); and it files a step's cache
    # under the context upload (type source.local) of the build that first ran it, so pruning that
    # upload forgets the step for every later build (docs/housekeeping.md). Keeping
    # the uploads and cutting only the steps' records does not help: a run adds 4.5 GB of uploads,
    # and within a day they left the steps a few GB. Measured, 2026-11-28: 13:02 to 14:03 in
    # pytest right after cuts, 11:03 after none. A run adds 1 to 4 GB to the cache (about 10 GB
    # before contexts were named after their files) and holds a few GB more while it
    # runs (second engines, test folders): under 10 GB free on the engine's disk after a run, the
    # cache goes down to 30 GB, in BuildKit's own order.
    engine_root=$(/usr/bin/docker info --format '{{.DockerRootDir}}' 2>/dev/null) || engine_root=/
    engine_free() { df --output=avail -B1 "$engine_root" | tail -1; }
    cache_size() { /usr/bin/docker system df --format '{{.Type}} {{.Size}}' 2>/dev/null | sed -n 's/^Build Cache //p'; }
    before=$(cache_size) kept=$before  # (asking the engine its build cache's size takes 2 s)
    if [ "$(engine_free)" -lt $((10 * 1000 * 1000 * 1000)) ]; then
        /usr/bin/docker builder prune --force --keep-storage 30GB >/dev/null \
            || echo "test.sh: docker builder prune failed; the build cache was not trimmed." >&2
        kept=$(cache_size)
    fi
    echo "test.sh: the engine's build cache: ${before:-?} after the run, ${kept:-?} kept," \
        "$(($(engine_free) / 1000000000)) GB free." >&2
fi
if [ "$status" = 5 ]; then
    echo "test.sh: pytest collected no tests; that is a failure." >&2
    exit 1
fi
exit "$status"
