#!/usr/bin/env bash
# A release image's last step, in one (an image of another platform pays each step's start under
# QEMU): the pins later installs keep (torch's and the extension's), the distributions a wheel
# replaced removed (drop_replaced.sh), and the record of what is installed (record_installed.sh).
# Usage: finish_image.sh CONSTRAINTS [UV_DIR]
set -euo pipefail
here=$(dirname "$0")
install -D -m 0644 "${1:?constraints file}" /etc/torchbake/constraints.txt
bash "$here/drop_replaced.sh"
bash "$here/record_installed.sh" "${2:-}"
