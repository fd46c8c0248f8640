#!/usr/bin/env bash
# Print the path of the uv program torchbake put into UV_DIR (taken out of the uv wheel resolved
# on the host, once, when the context was prepared): UV_DIR/uv is the image's; UV_DIR/MACHINE/uv,
# where there is one, the machine's that builds another platform's image (its wheel stages).
# Usage: uv_binary.sh UV_DIR
set -euo pipefail
uv_dir=${1:?uv folder}
native="$uv_dir/$(uname -m)/uv"
if [ -x "$native" ]; then
    echo "$native"
    exit 0
fi
if [ ! -x "$uv_dir/uv" ]; then
    echo "torchbake: no uv program in the build context ([python] installer = \"uv\" needs one)" >&2
    exit 1
fi
echo "$uv_dir/uv"
