#!/usr/bin/env bash
# Install vendor toolkit tarballs (runtime/compiler, DNN, collectives) with their own scripts.
# Usage: install_toolkits.sh DIR   where DIR/toolkits.txt lists "KEY<TAB>FILE<TAB>SCRIPT" lines
# in install order; SCRIPT is the install script's usual name (any install*.sh is the fallback), or,
# for a self-extracting installer (FILE ending in .run, as Ascend's CANN ships), its arguments.
set -euo pipefail
# shellcheck source=docker/common/trust.sh
. "$(dirname "$0")/trust.sh"
dir=${1:?toolkit folder}
manifest="$dir/toolkits.txt"
if [ ! -s "$manifest" ]; then
    echo "torchbake: no vendor toolkits to install"
    exit 0
fi
while IFS=$'\t' read -r key file script; do
    [ -n "$key" ] || continue
    if [[ "$file" == *.run ]]; then
        # the declared arguments, one word each (never a pattern); the default install key (a
        # tarball's script name, install.sh) gives the installer none
        args=()
        [ "$script" = install.sh ] || read -r -a args <<<"$script"
        echo "torchbake: installing $key from $file (the installer runs with: ${args[*]:-no arguments})"
        bash "$dir/$file" "${args[@]}"
        continue
    fi
    work=$(mktemp -d /tmp/torchbake-toolkit.XXXXXX)
    echo "torchbake: installing $key from $file"
    tar -xf "$dir/$file" -C "$work"
    installer=$(find "$work" -maxdepth 3 -type f -name "$script" | sort | head -n 1)
    if [ -z "$installer" ]; then
        installer=$(find "$work" -maxdepth 3 -type f -name 'install*.sh' | sort | head -n 1)
    fi
    if [ -z "$installer" ]; then
        echo "torchbake: $file ($key) holds no $script or install*.sh script; cannot install it." >&2
        exit 1
    fi
    (cd "$(dirname "$installer")" && bash "./$(basename "$installer")")
    rm -rf "$work"
done < "$manifest"
