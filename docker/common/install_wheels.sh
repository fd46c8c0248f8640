#!/usr/bin/env bash
# Install one group of the image's wheels, offline, from a bind-mounted wheelhouse folder.
# Usage: install_wheels.sh WHEELS [UV_DIR]
#   WHEELS/requirements.txt pins every wheel of the group (name==version); their dependencies
#   are in this group or were installed by an earlier step, so nothing is resolved here.
#   TORCHBAKE_INSTALLER: uv (from the uv wheel in UV_DIR, bytecode compiled as pip does) or pip.
# PIP_CONSTRAINT / UV_CONSTRAINT (set by the Dockerfile once torch is in) keep torch's version.
set -euo pipefail
wheels=${1:?wheel folder}
uv_dir=${2:-}
if [ ! -s "$wheels/requirements.txt" ]; then
    echo "torchbake: no wheels in this group"
    exit 0
fi
if [ "${TORCHBAKE_INSTALLER:-pip}" = uv ]; then
    uv=$(bash /opt/torchbake/common/uv_binary.sh "$uv_dir")
    "$uv" pip install --python "$(command -v python)" --no-index --find-links "$wheels" --no-deps \
        --compile-bytecode --requirement "$wheels/requirements.txt"
else
    python -m pip install --no-index --find-links "$wheels" --no-deps --requirement "$wheels/requirements.txt"
fi
echo "torchbake: installed $(wc -l < "$wheels/requirements.txt") wheels with ${TORCHBAKE_INSTALLER:-pip}"
