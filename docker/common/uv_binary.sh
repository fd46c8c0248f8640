#!/usr/bin/env bash
# Print the path of the uv program torchbake put into UV_DIR (taken out of the uv wheel resolved
# on the host, once, when the context was prepared).
# Usage: uv_binary.sh UV_DIR
set -euo pipefail
uv_dir=${1:?uv folder}
if [ ! -x "$uv_dir/uv" ]; then
    echo "torchbake: no uv program in the build context ([python] installer = \"uv\" needs one)" >&2
    exit 1
fi
echo "$uv_dir/uv"
