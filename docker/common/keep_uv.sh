#!/usr/bin/env bash
# Leave uv in the venv for downstream users (TORCHBAKE_KEEP_UV=1): its own early layer, which
# changes only with uv's version. UV_CONSTRAINT keeps torch for it as PIP_CONSTRAINT does for pip.
# Usage: keep_uv.sh UV_DIR
set -euo pipefail
uv_dir=${1:?uv folder}
if [ "${TORCHBAKE_KEEP_UV:-0}" != 1 ]; then
    echo "torchbake: uv is not kept in the image ([python] keep_uv = false)"
    exit 0
fi
install -m 0755 "$(bash /opt/torchbake/common/uv_binary.sh "$uv_dir")" "${VIRTUAL_ENV:-/opt/venv}/bin/uv"
echo "torchbake: kept $("${VIRTUAL_ENV:-/opt/venv}/bin/uv" --version) in the image"
