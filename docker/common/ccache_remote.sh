# shellcheck shell=bash
# Sourced by the compile scripts: ccache's remote storage ([dev] ccache_remote), from the BuildKit
# secret when the build was given one (it may hold credentials, so it never becomes an ENV).
if [ -s /run/secrets/ccache_remote ]; then
    CCACHE_REMOTE_STORAGE=$(cat /run/secrets/ccache_remote)
    # also share what this machine's cache mount already holds (a local hit is written there too)
    CCACHE_RESHARE=true
    export CCACHE_REMOTE_STORAGE CCACHE_RESHARE
    echo "torchbake: ccache uses a remote storage besides the cache mount"
fi
