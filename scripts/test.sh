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
    # CI machines are reused between runs: keep the engine's build cache from filling the disk. After
    # the tests, not beside them: a prune beside them deleted records the run had yet to use.
    # BuildKit (0.13, Docker 26) files a step's cache under the copy of the build context (a record of
    # type source.local) of the build that first ran it: delete that copy and every step it ran is
    # forgotten, although other builds used it since and its layers are still there (measured: a
    # toolkit step built again after the first build's three source.local records were pruned by ID;
    # pruning all of them made the next run 13:31 in pytest instead of 11:36, 2026-11-28). So the
    # context copies go only once nobody used them for a day (a step first run that long ago is built
    # again, once), and the size trim takes only the steps' own records: down to 30 GB, the least used
    # and least recently used first, which are a run's own inputs' steps (run-unique wheels, a fresh
    # CA, fixture sources), used once.
    cache_size() { /usr/bin/docker system df --format '{{.Type}} {{.Size}}' 2>/dev/null | sed -n 's/^Build Cache //p'; }
    before=$(cache_size)
    { /usr/bin/docker builder prune --force --filter type=source.local --filter until=24h >/dev/null \
        && /usr/bin/docker builder prune --force --filter type=regular --keep-storage 30GB >/dev/null; } \
        || echo "test.sh: docker builder prune failed; the build cache was not trimmed." >&2
    after=$(cache_size)
    echo "test.sh: the engine's build cache: ${before:-?} after the run, ${after:-?} kept." >&2
fi
if [ "$status" = 5 ]; then
    echo "test.sh: pytest collected no tests; that is a failure." >&2
    exit 1
fi
exit "$status"
