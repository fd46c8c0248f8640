#!/usr/bin/env bash
# Remove the distributions a release image's wheel stages replaced (stage_wheels.sh names them in
# VENV/.torchbake-replaced/): each one's files as its RECORD lists them, then its dist-info folder.
# Usage: drop_replaced.sh [VENV]
set -euo pipefail
venv=${1:-${VIRTUAL_ENV:-/opt/venv}}
[ -d "$venv/.torchbake-replaced" ] || exit 0
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
while IFS= read -r dist; do
    [ -n "$dist" ] && [ -f "$site/$dist/RECORD" ] || continue
    cut -d, -f1 "$site/$dist/RECORD" | while IFS= read -r path; do
        case "$path" in */*.dist-info/*|"") continue ;; esac
        rm -f "$site/$path"
    done
    rm -rf "${site:?}/$dist"
    echo "torchbake: removed ${dist%.dist-info}, which a wheel replaced"
done < <(cat "$venv/.torchbake-replaced"/*)
rm -rf "$venv/.torchbake-replaced"
