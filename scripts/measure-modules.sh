#!/usr/bin/env bash
# Each test module's time alone on this machine: the whole suite in one pytest process (one module
# at a time, nothing beside it), its per-module seconds written into tests/module-budget.toml with
# today's date. Budgets are kept; a new module gets its figure plus 15 %. Then
# `.venv/bin/python -m pytest tests/unit/test_module_budget.py` says whether every module and
# the sum stay within theirs. Usage: bash scripts/measure-modules.sh [PYTEST ARGS]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
times=$(mktemp --suffix=.json) || exit 1
trap 'rm -f "$times"' EXIT
PYTEST_WORKERS=0 SUITE_MODULE_TIMES="$times" bash scripts/test.sh "$@"
status=$?
if [ ! -s "$times" ]; then
    echo "measure-modules: pytest wrote no figures (exit $status); tests/module-budget.toml is unchanged." >&2
    exit 1
fi
.venv/bin/python -m tests.module_budget --update "$times" || exit 1
exit "$status"
