#!/usr/bin/env bash
# The last step: check the environment and record what is installed (/etc/torchbake/installed.txt).
set -euo pipefail
python -m pip check
mkdir -p /etc/torchbake
python -m pip freeze --all > /etc/torchbake/installed.txt
echo "torchbake: installed $(wc -l < /etc/torchbake/installed.txt) packages"
