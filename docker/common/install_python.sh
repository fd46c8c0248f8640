#!/usr/bin/env bash
# Create the image's Python environment as a venv.
# Usage: install_python.sh VERSION PROVIDER SOURCE_DIR VENV
#   os:         a venv on the OS Python, which must be VERSION
#   standalone: SOURCE_DIR holds a python-build-standalone "install_only" tarball for VERSION
set -euo pipefail
version=${1:?python version}
provider=${2:?provider}
source_dir=${3:?source folder}
venv=${4:?venv path}

case "$provider" in
    os)
        python=$(command -v python3 || true)
        if [ -z "$python" ]; then
            echo "torchbake: the base image has no python3" >&2
            exit 1
        fi
        ;;
    standalone)
        tarball=$(find "$source_dir" -maxdepth 1 -type f -name '*.tar.*' | head -n 1)
        if [ -z "$tarball" ]; then
            echo "torchbake: no Python tarball was provided ([python] standalone_url)" >&2
            exit 1
        fi
        mkdir -p /opt/python
        tar -xf "$tarball" -C /opt/python --strip-components=1
        python=/opt/python/bin/python3
        ;;
    *)
        echo "torchbake: unknown Python provider '$provider' (expected os or standalone)" >&2
        exit 1
        ;;
esac

actual=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$actual" != "$version" ]; then
    echo "torchbake: $python is Python $actual, but Python $version was requested." >&2
    echo "Use a base image whose OS Python is $version, or [python] provider = \"standalone\"." >&2
    exit 1
fi
"$python" -m venv "$venv"
echo "torchbake: $venv uses Python $("$venv/bin/python" -V 2>&1 | cut -d' ' -f2)"
