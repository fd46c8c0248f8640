#!/usr/bin/env bash
# The main job on a fresh machine: set up, make a Debian base image offline, then build and
# verify the default CPU release image (torch 2.13.0 from wheels). Safe to run twice: the base
# image is kept, and the build reuses cached downloads and layers.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/invoke bootstrap-os --suite bookworm --name torchbake/debian:bookworm
.venv/bin/invoke build --config configs/cpu.toml "$@"
