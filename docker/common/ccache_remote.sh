# shellcheck shell=bash
# Sourced by the compile scripts: ccache's remote storage ([dev] ccache_remote), from the BuildKit
# secret when the build was given one (it may hold credentials, so it never becomes an ENV), in the
# words of the base's ccache (the release notes of 4.4 and 4.6):
#   4.6 and later: CCACHE_REMOTE_STORAGE, and CCACHE_RESHARE: a hit in the cache mount is written
#     to the shared store too;
#   4.4 and 4.5 (Ubuntu 22.04's 4.5.1): the same store under its first name, secondary storage, and
#     no reshare: a hit in the cache mount would never reach the shared store, so the cache mount is
#     left out (CCACHE_DIR in the step's own folder): every result is looked up in, and written to,
#     the shared store;
#   before 4.4 (Ubuntu 20.04's 3.7, Debian 11's 4.2): no remote storage: said, and compiled here.
# TORCHBAKE_COMPILE_CACHE_SHARED=yes when compiles reach the shared store (the step's record).
remote_file=${TORCHBAKE_CCACHE_REMOTE_FILE:-/run/secrets/ccache_remote}
TORCHBAKE_COMPILE_CACHE_SHARED=""
if [ -s "$remote_file" ]; then
    ccache_version=$(ccache --version 2>/dev/null | sed -n '1s/^ccache version \([0-9][0-9.]*\).*/\1/p')
    IFS=. read -r ccache_major ccache_minor _ <<<"${ccache_version:-0.0}"
    ccache_minor=${ccache_minor:-0}
    if [ "$ccache_major" -gt 4 ] || { [ "$ccache_major" -eq 4 ] && [ "$ccache_minor" -ge 6 ]; }; then
        CCACHE_REMOTE_STORAGE=$(cat "$remote_file")
        CCACHE_RESHARE=true
        export CCACHE_REMOTE_STORAGE CCACHE_RESHARE
        TORCHBAKE_COMPILE_CACHE_SHARED=yes
        echo "torchbake: ccache uses a remote storage besides the cache mount"
    elif [ "$ccache_major" -eq 4 ] && [ "$ccache_minor" -ge 4 ]; then
        CCACHE_SECONDARY_STORAGE=$(cat "$remote_file")
        CCACHE_DIR=$(mktemp -d /tmp/torchbake-ccache.XXXXXX)
        trap 'rm -rf "$CCACHE_DIR"' EXIT  # never part of the layer (the sourcing scripts set no EXIT trap)
        export CCACHE_SECONDARY_STORAGE CCACHE_DIR
        TORCHBAKE_COMPILE_CACHE_SHARED=yes
        echo "torchbake: ccache $ccache_version has no reshare (4.6): the remote storage alone, not the cache mount"
    else
        echo "torchbake: ccache ${ccache_version:-of unknown version} has no remote storage (4.4 and later):" \
            "compiles are not shared"
    fi
fi
export TORCHBAKE_COMPILE_CACHE_SHARED
