#!/usr/bin/env bash
# The last step: check the environment, record what is installed, and (TORCHBAKE_KEEP_UV=1)
# leave uv in the venv for downstream users; UV_CONSTRAINT keeps torch for it as PIP_CONSTRAINT
# does for pip.
# Usage: record_installed.sh UV_DIR
set -euo pipefail
uv_dir=${1:?uv folder}
python -m pip check
if [ "${TORCHBAKE_KEEP_UV:-0}" = 1 ] && find "$uv_dir" -maxdepth 1 -name 'uv-*.whl' | grep -q .; then
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    install -m 0755 "$(bash /opt/torchbake/common/uv_binary.sh "$uv_dir" "$scratch")" "${VIRTUAL_ENV:-/opt/venv}/bin/uv"
    echo "torchbake: kept $("${VIRTUAL_ENV:-/opt/venv}/bin/uv" --version)"
fi
mkdir -p /etc/torchbake
python -m pip freeze --all > /etc/torchbake/installed.txt
echo "torchbake: installed $(wc -l < /etc/torchbake/installed.txt) packages"
