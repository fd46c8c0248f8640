#!/usr/bin/env bash
# The last step: check the environment and record what is installed (/etc/torchbake/installed.txt),
# with uv when it installed the wheels (TORCHBAKE_INSTALLER=uv, UV_DIR given), else with pip.
# Usage: record_installed.sh [UV_DIR]
set -euo pipefail
uv_dir=${1:-}
mkdir -p /etc/torchbake
if [ "${TORCHBAKE_INSTALLER:-pip}" = uv ] && [ -n "$uv_dir" ]; then
    uv=$(bash /opt/torchbake/common/uv_binary.sh "$uv_dir")
    python "$(dirname "$0")/pip_check.py" "$uv" pip check --python "$(command -v python)"
    "$uv" pip freeze --python "$(command -v python)" > /etc/torchbake/installed.txt
else
    python "$(dirname "$0")/pip_check.py" python -m pip check
    python -m pip freeze --all > /etc/torchbake/installed.txt
fi
echo "torchbake: installed $(wc -l < /etc/torchbake/installed.txt) packages"
