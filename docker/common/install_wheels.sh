#!/usr/bin/env bash
# Install the image's Python packages from the host-resolved wheelhouse, offline.
# Usage: install_wheels.sh WHEELHOUSE   (WHEELHOUSE/requirements.txt names what to install)
# PIP_CONSTRAINT (set by the Dockerfile) pins torch and the extension to the wheels' versions.
set -euo pipefail
wheelhouse=${1:?wheelhouse}
python -m pip install --no-index --find-links "$wheelhouse" --requirement "$wheelhouse/requirements.txt"
python -m pip check
mkdir -p /etc/torchbake
python -m pip freeze --all > /etc/torchbake/installed.txt
echo "torchbake: installed $(wc -l < /etc/torchbake/installed.txt) packages"
