#!/usr/bin/env bash
# The documentation site (docs/, mkdocs.yml), offline:
#   bash scripts/docs.sh              serve it at http://127.0.0.1:8000, rebuilt on every change
#   bash scripts/docs.sh build [DIR]  build it strictly into DIR (default site/), as CI does: a
#                                     warning, a broken link or anchor fails the build
# The reference pages are rendered from torchbake's declarations (docs/hooks.py).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/mkdocs ]; then
    if [ -x .venv/bin/python ]; then
        .venv/bin/python -m pip install --quiet --disable-pip-version-check --editable '.[docs]'
    else
        bash scripts/setup.sh
    fi
fi
case "${1:-serve}" in
    serve) exec .venv/bin/mkdocs serve --strict ;;
    build) exec .venv/bin/mkdocs build --strict --site-dir "${2:-site}" ;;  # not --quiet: it hides the warnings strict counts
    *) echo "usage: bash scripts/docs.sh [serve | build [DIR]]" >&2; exit 2 ;;
esac
