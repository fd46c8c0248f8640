#!/usr/bin/env bash
# Run one build step, then make what it wrote the same bytes on any engine, any day.
# Usage: step.sh SCRIPT|COMMAND [ARGS...]
#   SCRIPT: a script beside this one (e.g. install_wheels.sh), run with bash; else COMMAND is run.
# With SOURCE_DATE_EPOCH set (torchbake passes it to every build), after the step:
#   - every file and folder the step made or changed gets that modification time, so the layer's
#     tar is the same without the exporter's slow timestamp-rewriting pass;
#   - what records the moment of the build goes: dpkg's, apt's and update-alternatives' logs are
#     emptied, ldconfig's aux-cache removed, and uv's uv_cache.json (when the wheel landed in this
#     engine) removed with its line in the RECORD;
#   - the .pyc files it compiled (hash-based, as CPython writes them while SOURCE_DATE_EPOCH is
#     set) become timestamp-based ones that match their sources' new times (pyc_timestamps.py):
#     reproducible, and imports as fast as before.
set -euo pipefail
here=$(dirname "$0")
# /dev/shm: never part of the layer
marker=$(mktemp -p /dev/shm torchbake-step.XXXXXX)
compiled=$(mktemp -p /dev/shm torchbake-pyc.XXXXXX)
changed=$(mktemp -p /dev/shm torchbake-changed.XXXXXX)
trap 'rm -f "$marker" "$compiled" "$changed"' EXIT
# Two seconds back: the kernel stamps files with a coarse clock, so a file the step makes at once
# can carry the marker's own time; and BuildKit's mount stubs, made just before, count too.
touch -d "@$(($(date +%s) - 2))" "$marker"
# Only the installers' own compilation writes .pyc files (uv's and pip's ignore this): an import in
# the step writes none. uv's compile workers import what a .pth file names (setuptools'
# _distutils_hack) as they start, and one could write its timestamp-based .pyc over the compiled
# one: a .pyc that is stale once the touch below runs, and that a later step wrote again.
export PYTHONDONTWRITEBYTECODE=1
if [ -f "$here/$1" ]; then
    bash "$here/$1" "${@:2}"
else
    "$@"
fi
[ -n "${SOURCE_DATE_EPOCH:-}" ] || exit 0

# Not what is mounted into the step (/proc, the build's bind mounts and secrets, /etc/hosts, ...):
# none of it is part of the layer. One walk of the file system: the torch image has 30,000 files.
mounted=()
while read -r mount_point; do
    mounted+=(-path "$mount_point" -o)
done < <(awk '$5 != "/" { print $5 }' /proc/self/mountinfo)
find / -xdev \( "${mounted[@]}" -path /proc \) -prune -o -newer "$marker" -print0 > "$changed"
for log in /var/log/dpkg.log /var/log/alternatives.log /var/log/apt/history.log /var/log/apt/term.log; do
    if [ -s "$log" ] && [ "$log" -nt "$marker" ]; then
        : > "$log"
    fi
done
if [ /var/cache/ldconfig/aux-cache -nt "$marker" ]; then
    rm -f /var/cache/ldconfig/aux-cache
fi
{ grep -z '\.dist-info/uv_cache\.json$' "$changed" || true; } | while IFS= read -r -d '' stamp; do
    rm -f "$stamp"
    record="$(dirname "$stamp")/RECORD"
    if [ -f "$record" ]; then
        sed -i '/\/uv_cache\.json,/d' "$record"
    fi
done
{ grep -z '\.pyc$' "$changed" || true; } > "$compiled"
# -c: not what was removed above
xargs -0 -r touch -c -h -d "@$SOURCE_DATE_EPOCH" < "$changed"
if [ -s "$compiled" ] && command -v python3 >/dev/null; then
    # -S -B: no site (a .pth file imports its module) and no .pyc written: a .pyc Python wrote
    # here would give its __pycache__ folder this moment's time, after the touch above.
    python3 -S -B "$here/pyc_timestamps.py" < "$compiled"
    xargs -0 -r touch -c -h -d "@$SOURCE_DATE_EPOCH" < "$changed"
fi
# BuildKit writes the stubs of its /etc/hosts and /etc/resolv.conf mounts before the step starts:
# /etc's time is then the moment of the build, whether or not the step itself changed /etc.
if [ "$(stat -c %Y /etc)" != "$SOURCE_DATE_EPOCH" ]; then
    touch -h -d "@$SOURCE_DATE_EPOCH" /etc
fi
