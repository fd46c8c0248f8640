#!/usr/bin/env bash
# Build and install one source tree against the installed torch, through ccache.
# Usage: build_source.sh ROLE DIR [FALLBACK_DIR]   (FALLBACK_DIR is used when DIR does not exist)
# Records what was built in /etc/torchbake/built/ROLE.json (name, version, commit, source).
set -euo pipefail
# shellcheck source=docker/common/compile_cache.sh
. "$(dirname "$0")/compile_cache.sh"
role=${1:?role}
src=${2:?source folder}
if [ ! -d "$src" ] && [ -n "${3:-}" ]; then
    src=$3
fi
if [ ! -f "$src/setup.py" ] && [ ! -f "$src/pyproject.toml" ]; then
    echo "torchbake: no $role source to build at $src" >&2
    exit 1
fi
# the vendor's patches to this tree ([dev] patches), in order, before anything compiles
bash "$(dirname "$0")/apply_patches.sh" "$role" "$src"
commit=unknown
if [ -f "$src/.torchbake-source" ]; then
    commit=$(cut -d' ' -f3 "$src/.torchbake-source")
elif git -C "$src" rev-parse HEAD >/dev/null 2>&1; then
    commit=$(git -C "$src" rev-parse HEAD)
fi
find_links=()
if [ -d /tmp/torchbake/wheelhouse ]; then
    find_links=(--find-links /tmp/torchbake/wheelhouse)
fi
echo "torchbake: building $role from $src (commit $commit, MAX_JOBS=${MAX_JOBS:-})"
# This build's own counters: builds running side by side share the cache mount, and with it ccache's
# counters (one build's --zero-stats would wipe another's). ccache before 4.4 has no stats log.
stats_log=""
sccache=${TORCHBAKE_SCCACHE_DIR:-/tmp/torchbake/sccache}/sccache
if [ "${TORCHBAKE_COMPILE_CACHE_TOOL:-}" = sccache ]; then
    "$sccache" --zero-stats >/dev/null  # its server serves this step alone
elif ccache --help 2>/dev/null | grep -q -- --show-log-stats; then
    stats_log=$(mktemp /tmp/torchbake-ccache-stats.XXXXXX)
    export CCACHE_STATSLOG=$stats_log
else
    ccache --zero-stats >/dev/null
fi
report=$(mktemp /tmp/torchbake-report.XXXXXX.json)
started=$SECONDS
echo "+ python -m pip install --no-build-isolation --no-deps --no-index ${find_links[*]} -v $src"
(cd "$src" && python -m pip install --no-build-isolation --no-deps --no-index "${find_links[@]}" \
    --report "$report" -v .)
python /opt/torchbake/common/record_built.py "$report" "$role" "$commit" "$src"
if [ "${TORCHBAKE_COMPILE_CACHE_TOOL:-}" = sccache ]; then
    # sccache's own counts, for the build's record (sccache_counts.py)
    echo "torchbake: sccache statistics for $role:"
    "$sccache" --show-stats
    "$sccache" --show-stats --stats-format json \
        | python /opt/torchbake/common/sccache_counts.py "$role" "$TORCHBAKE_COMPILE_CACHE_SHARED" "$(( SECONDS - started ))"
elif [ -n "$stats_log" ]; then
    echo "torchbake: ccache statistics for $role:"
    # An empty stats log (no compiler call went through ccache) crashes ccache 4.7's --show-log-stats.
    if [ -s "$stats_log" ]; then
        ccache --show-log-stats
    else
        echo "no compiler call went through ccache"
    fi
    # What this step compiled and found, for the build's record (torchbake.building.compile_stats):
    # the stats log holds a counter ID per line for each compile ("# FILE", then e.g. cache_miss).
    count() { grep -cx "$1" "$stats_log" || true; }
    echo "torchbake: compile-cache role=$role compiled=$(count cache_miss)" \
        "local_hits=$(( $(count local_storage_hit) + $(count primary_storage_hit) )) remote_hits=$(( $(count remote_storage_hit) + $(count secondary_storage_hit) ))" \
        "store_errors=$(( $(count remote_storage_error) + $(count remote_storage_timeout) + $(count secondary_storage_error) + $(count secondary_storage_timeout) ))" \
        "remote=${TORCHBAKE_COMPILE_CACHE_SHARED} seconds=$(( SECONDS - started ))"
    rm -f "$stats_log"
else
    echo "torchbake: ccache statistics for $role:"
    ccache --show-stats
fi
rm -f "$report"
