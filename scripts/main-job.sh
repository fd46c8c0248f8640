#!/usr/bin/env bash
# The main job on a fresh machine: set up, then exactly the README's command, `invoke build
# --release`: build and verify the default CPU release image (torch 2.13.0 from its wheel on
# debian:bookworm, which is made with debootstrap on first use). Safe to run twice: the base OS
# image is kept, and the build reuses cached downloads and layers.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/invoke build --release "$@"
