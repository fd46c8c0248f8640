#!/usr/bin/env bash
# The documentation site (docs/, mkdocs.yml), offline:
#   bash scripts/docs.sh              serve it at http://127.0.0.1:8000, rebuilt on every change
#   bash scripts/docs.sh build [DIR]  build it strictly into DIR (default site/), as CI does: a
#                                     warning, a broken link or anchor fails the build; DIR must
#                                     be new, empty or a site built before (mkdocs empties it)
# The reference pages are rendered from torchbake's declarations (docs/hooks.py).
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what MkDocs needs: torchbake itself (the hook imports it) with the docs extra, in .venv; not
# scripts/setup.sh's whole set-up (the Docker engine, the test tools), which the site does not use.
if [ ! -x .venv/bin/mkdocs ]; then
    [ -x .venv/bin/python ] || python3 -m venv .venv
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --editable '.[docs]'
fi
case "${1:-serve}" in
    serve) exec .venv/bin/mkdocs serve --strict ;;
    build)
        site=${2:-site}
        # mkdocs empties the folder it builds into: only an empty one, or a site built before, is given to it
        if [ -e "$site" ] && { [ ! -d "$site" ] || { [ -n "$(ls -A "$site")" ] && [ ! -f "$site/search/search_index.json" ]; }; }; then
            echo "scripts/docs.sh: $site is not an empty folder nor a site built before; building there would delete what it holds." >&2
            echo "Name a new folder: bash scripts/docs.sh build site" >&2
            exit 2
        fi
        exec .venv/bin/mkdocs build --strict --site-dir "$site" ;;  # not --quiet: it hides the warnings strict counts
    *) echo "usage: bash scripts/docs.sh [serve | build [DIR]]" >&2; exit 2 ;;
esac
