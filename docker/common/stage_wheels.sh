#!/usr/bin/env bash
# Install one group of a release image's wheels for the image's platform, on the machine that
# builds (Dockerfile stage "FROM --platform=$BUILDPLATFORM"): installing a wheel is unpacking
# files, so an arm64 image's wheels need no emulation. Runs in a stage that has the image's
# Python environment made the same way (same Python version, same venv path); afterwards the venv
# holds only what the wheels added, which the image's stage copies in as one layer.
# Usage: stage_wheels.sh WHEELS UV_DIR
#   WHEELS/requirements.txt pins every wheel of the group (name==version), all in WHEELS;
#   nothing is resolved here. TORCHBAKE_WHEEL_MACHINE: the image's machine (aarch64, x86_64);
#   TORCHBAKE_WHEEL_PLATFORMS: its wheel platform tags, space-separated (manylinux_2_28_aarch64 …).
#   TORCHBAKE_INSTALLER: uv (uv pip install --python-platform) or pip (pip install --target
#   --platform); bytecode is compiled by this Python, the image's version: .pyc files do not
#   depend on the machine.
set -euo pipefail
wheels=${1:?wheel folder}
uv_dir=${2:?uv folder}
machine=${TORCHBAKE_WHEEL_MACHINE:?the machine of the image}
tag_list=${TORCHBAKE_WHEEL_PLATFORMS:?the wheel platform tags of the image}
read -r -a tags <<< "$tag_list"
venv=${VIRTUAL_ENV:-/opt/venv}
python="$venv/bin/python"
site=$("$python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
marker=$(mktemp -p /dev/shm torchbake-stage.XXXXXX)
trap 'rm -f "$marker"' EXIT
sleep 0.01  # every file written from here on has a later change time than the marker

before=$(find "$site" -maxdepth 1 -name '*.dist-info' -printf '%f\n' | sort)
if [ -s "$wheels/requirements.txt" ]; then
    if [ "${TORCHBAKE_INSTALLER:-pip}" = uv ]; then
        # uv's target: the machine and the newest manylinux of the tags (x86_64-manylinux_2_28)
        glibc=$(printf '%s\n' "${tags[@]}" | sed -n 's/^manylinux_\([0-9]*_[0-9]*\)_.*/\1/p' | sort -t_ -k2 -n | tail -n 1)
        target="$machine-unknown-linux-gnu"
        [ -z "$glibc" ] || target="$machine-manylinux_$glibc"
        uv=$(bash /opt/torchbake/common/uv_binary.sh "$uv_dir")
        "$uv" pip install --python "$python" --python-platform "$target" --no-index --find-links "$wheels" \
            --no-deps --compile-bytecode --requirement "$wheels/requirements.txt"
    else
        staged=$(mktemp -d)
        platform_flags=()
        for tag in "${tags[@]}"; do platform_flags+=(--platform "$tag"); done
        "$python" -m pip install --no-index --find-links "$wheels" --no-deps --requirement "$wheels/requirements.txt" \
            --only-binary=:all: "${platform_flags[@]}" --implementation cp \
            --python-version "$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
            --target "$staged" --no-compile
        added=()
        for entry in "$staged"/*; do [ "$(basename "$entry")" = bin ] || added+=("$site/$(basename "$entry")"); done
        if [ -d "$staged/bin" ]; then  # scripts: pip wrote them for this venv's python (its sys.executable)
            cp -a "$staged/bin/." "$venv/bin/"
            rm -rf "${staged:?}/bin"
        fi
        cp -a "$staged/." "$site/"
        rm -rf "$staged"
        [ ${#added[@]} = 0 ] || "$python" -m compileall -q -j 0 "${added[@]}" >/dev/null
    fi
fi
# A wheel that replaced a distribution the venv had (setuptools seeded with the venv): its old
# files cannot be removed by copying, so they are named for the image's last step (drop_replaced.sh).
replaced=$(comm -23 <(printf '%s\n' "$before") <(find "$site" -maxdepth 1 -name '*.dist-info' -printf '%f\n' | sort) | sed '/^$/d')
if [ -n "$replaced" ]; then
    mkdir -p "$venv/.torchbake-replaced"
    printf '%s\n' "$replaced" > "$venv/.torchbake-replaced/$(sha256sum "$wheels/requirements.txt" | cut -c1-16)"
fi
# What the venv had before (its Python, pip, activate scripts) goes; what the wheels added stays.
find "$venv" -xdev ! -type d ! -cnewer "$marker" -delete
echo "torchbake: staged $(wc -l < "$wheels/requirements.txt" 2>/dev/null || echo 0) wheels for ${tags[0]} with ${TORCHBAKE_INSTALLER:-pip} on $(uname -m)"
