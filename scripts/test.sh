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
    # the tests, not beside them: a prune beside them deleted records the run had yet to use. First
    # the copies of the build contexts (type source.local, 4 to 5 GB a run): BuildKit keeps one per
    # context folder, and every build's context folder is a new one, so no later build reuses them.
    # Then the rest down to 30 GB. BuildKit deletes first what ranks low on both last use and
    # use count: the steps of a run's own inputs (run-unique wheels, a fresh CA, fixture sources),
    # used once. Trimmed to 30 GB without the first prune, the cut (14 GB) reached the records the
    # next run needs (made in the last run, used a few times): the next run built its dev base's
    # apt step again, and a dozen more (12:51 in pytest instead of 11:36; 2026-11-28).
    cache_size() { /usr/bin/docker system df --format '{{.Type}} {{.Size}}' 2>/dev/null | sed -n 's/^Build Cache //p'; }
    before=$(cache_size)
    { /usr/bin/docker builder prune --force --filter type=source.local >/dev/null \
        && /usr/bin/docker builder prune --force --keep-storage 30GB >/dev/null; } \
        || echo "test.sh: docker builder prune failed; the build cache was not trimmed." >&2
    after=$(cache_size)
    echo "test.sh: the engine's build cache: ${before:-?} after the run, ${after:-?} kept." >&2
fi
if [ "$status" = 5 ]; then
    echo "test.sh: pytest collected no tests; that is a failure." >&2
    exit 1
fi
exit "$status"
