#!/usr/bin/env bash
# Unpack the uv wheel of UV_DIR (resolved on the host) into SCRATCH; print the uv binary's path.
# Usage: uv_binary.sh UV_DIR SCRATCH
set -euo pipefail
uv_dir=${1:?uv folder}
scratch=${2:?scratch folder}
wheel=$(find "$uv_dir" -maxdepth 1 -name 'uv-*.whl' | head -n 1)
if [ -z "$wheel" ]; then
    echo "torchbake: no uv wheel in the build context ([python] installer = \"uv\" needs one)" >&2
    exit 1
fi
python -m zipfile -e "$wheel" "$scratch"
binary=$(find "$scratch" -path '*.data/scripts/uv' | head -n 1)
chmod +x "$binary"
echo "$binary"
