#!/usr/bin/env bash
# Create the image's Python environment as a venv.
# Usage: install_python.sh VERSION PROVIDER SOURCE_DIR VENV [UV_DIR]
# A VENV that exists (copied from the build platform's stage) is kept as it is.
#   os:         a venv on the OS Python, which must be VERSION
#   standalone: SOURCE_DIR holds a python-build-standalone "install_only" tarball for VERSION
# With TORCHBAKE_INSTALLER=uv, uv (from UV_DIR) puts pip (and setuptools before Python 3.12) into
# the venv from the wheels Python bundles for ensurepip: the same packages `python -m venv`
# installs, in a tenth of the time (ensurepip runs pip once per wheel).
set -euo pipefail
version=${1:?python version}
provider=${2:?provider}
source_dir=${3:?source folder}
venv=${4:?venv path}
uv_dir=${5:-}

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

if [ -f "$venv/pyvenv.cfg" ]; then
    # made on the build platform (the installer stage) from the same base: nothing to run here
    echo "torchbake: $venv, made on the build platform from the same base image, is kept as it is"
    exit 0
fi
actual=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$actual" != "$version" ]; then
    echo "torchbake: $python is Python $actual, but Python $version was requested." >&2
    echo "Use a base image whose OS Python is $version, or [python] provider = \"standalone\"." >&2
    exit 1
fi
if [ "${TORCHBAKE_INSTALLER:-pip}" = uv ]; then
    uv=$(bash /opt/torchbake/common/uv_binary.sh "$uv_dir")
    "$python" -m venv --without-pip "$venv"
    # ensurepip's wheels: Debian and Ubuntu keep them in /usr/share/python-wheels, upstream
    # builds (python-build-standalone) beside ensurepip.
    bundled=$("$python" -c 'import os, ensurepip; print(os.path.join(os.path.dirname(ensurepip.__file__), "_bundled"))' 2>/dev/null || true)
    links=()
    for folder in /usr/share/python-wheels "$bundled"; do
        if [ -n "$folder" ] && compgen -G "$folder/pip-*.whl" >/dev/null; then
            links+=(--find-links "$folder")
        fi
    done
    if [ ${#links[@]} = 0 ]; then
        echo "torchbake: $python has no bundled pip wheel (ensurepip); install python3-venv in the base image" >&2
        exit 1
    fi
    seed=(pip)
    if [ "$("$python" -c 'import sys; print(int(sys.version_info < (3, 12)))')" = 1 ]; then
        seed+=(setuptools)
    fi
    "$uv" pip install --python "$venv/bin/python" --no-index "${links[@]}" --no-deps --compile-bytecode "${seed[@]}"
else
    "$python" -m venv "$venv"
fi
echo "torchbake: $venv uses Python $("$venv/bin/python" -V 2>&1 | cut -d' ' -f2)"
