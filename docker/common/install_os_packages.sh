#!/usr/bin/env bash
# OS packages every torchbake image needs; the OS Python when that is the provider.
# Usage: install_os_packages.sh PYTHON_PROVIDER RENDER_GID
set -euo pipefail
provider=${1:?python provider}
render_gid=${2:-0}

packages=(ca-certificates tar gzip xz-utils bzip2 procps)
if [ "$provider" = os ]; then
    packages+=(python3 python3-venv)
fi

if ! command -v apt-get >/dev/null; then
    echo "torchbake: this base image has no apt-get; torchbake's images need a Debian or Ubuntu base." >&2
    exit 1
fi
apt-get update
apt-get install -y --no-install-recommends "${packages[@]}"
apt-get clean
rm -rf /var/lib/apt/lists/*

if [ "$render_gid" != 0 ]; then
    if getent group render >/dev/null; then
        groupmod -g "$render_gid" render
    else
        groupadd -g "$render_gid" render
    fi
    echo "torchbake: group render has GID $render_gid"
fi
