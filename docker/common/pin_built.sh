#!/usr/bin/env bash
# Pin torch and every package built from source so far; see pin_built.py.
set -euo pipefail
mkdir -p /etc/torchbake
python /opt/torchbake/common/pin_built.py
