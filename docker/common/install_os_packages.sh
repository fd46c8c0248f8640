#!/usr/bin/env bash
# OS packages every torchbake image needs; the OS Python when that is the provider; compilers,
# git, ccache and gdb for dev images; device groups and an optional non-root user.
# Usage: install_os_packages.sh PYTHON_PROVIDER RENDER_GID [KIND [VIDEO_GID [USER]]]
#   KIND: runtime (default) or dev
# TORCHBAKE_DEB_PINS (NAME=VERSION …, the image's lock): exactly those are installed instead.
# TORCHBAKE_APT_PLAN=1 (`invoke lock`): print what would be installed ("torchbake-deb NAME VERSION"), install nothing.
set -euo pipefail
provider=${1:?python provider}
render_gid=${2:-0}
kind=${3:-runtime}
video_gid=${4:-0}
user=${5:-}

packages=(ca-certificates tar gzip xz-utils bzip2 procps)
if [ "$provider" = os ]; then
    packages+=(python3 python3-venv)
fi
if [ "$kind" = dev ]; then
    packages+=(git build-essential ccache gdb patch)
    if [ "$provider" = os ]; then
        packages+=(python3-dev)
    fi
fi

if ! command -v apt-get >/dev/null; then
    echo "torchbake: this base image has no apt-get; torchbake's images need a Debian or Ubuntu base." >&2
    exit 1
fi
APT_TRUST=()
if [ -f "$(dirname "$0")/trust.sh" ]; then  # not there when `invoke lock` runs this script in a probe
    # shellcheck source=docker/common/trust.sh
    . "$(dirname "$0")/trust.sh"
fi
read -r -a pins <<< "${TORCHBAKE_DEB_PINS:-}"
# Only what the base image lacks: a base made with them ([bootstrap] include) needs no mirror and,
# for another platform's image, no emulated apt run in every build.
# (one dpkg-query for them all: for another platform's image every process starts under QEMU)
installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${packages[@]}" 2>/dev/null || true)
missing=()
for package in "${packages[@]}"; do
    [[ $'\n'"$installed"$'\n' == *$'\n'"$package install ok installed"$'\n'* ]] || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ] || [ ${#pins[@]} -gt 0 ]; then
    # No translated descriptions (nobody reads them in a build), and no fsync per unpacked file: a
    # step that fails is thrown away whole, so dpkg's crash safety buys nothing here.
    apt-get "${APT_TRUST[@]}" -o Acquire::Languages=none update
    if [ "${TORCHBAKE_APT_PLAN:-0}" = 1 ]; then  # NAME_[EPOCH%3a]VERSION_ARCH.deb of each package apt would fetch
        apt-get --print-uris -qq install -y --no-install-recommends "${missing[@]}" | while read -r _ file _; do
            [[ $file == *.deb ]] || continue
            rest=${file#*_}
            version=${rest%_*}
            printf 'torchbake-deb %s %b\n' "${file%%_*}" "${version//%/\\x}"
        done
        exit 0
    fi
    wanted=("${missing[@]}")
    downgrades=()
    if [ ${#pins[@]} -gt 0 ]; then  # the lock's versions, each named (a mirror without one fails here, naming it)
        wanted=("${pins[@]}")
        downgrades=(--allow-downgrades)
        echo "torchbake: installing the ${#pins[@]} Debian packages of the image's lock at their versions"
    fi
    # What apt fetched, recorded before the cache is emptied (/etc/torchbake/debs.tsv: file, URL,
    # sha256, sha512): the SBOMs and the provenance name each .deb installed on top of the base.
    uris=$(apt-get "${APT_TRUST[@]}" --print-uris -qq install -y --no-install-recommends "${downgrades[@]}" "${wanted[@]}")
    apt-get "${APT_TRUST[@]}" -o DPkg::Options::=--force-unsafe-io install -y --no-install-recommends \
        "${downgrades[@]}" "${wanted[@]}"
    mkdir -p /etc/torchbake
    while read -r url file _size hash; do
        [ -n "$file" ] || continue
        deb=/var/cache/apt/archives/$file
        if [ -f "$deb" ]; then
            sums=$(sha256sum "$deb" | cut -d' ' -f1)$'\t'$(sha512sum "$deb" | cut -d' ' -f1)
        else  # an apt configured to delete what it fetched (docker-clean): the digest its index states
            sums=$([[ $hash == SHA256:* ]] && echo "${hash#SHA256:}")$'\t'
        fi
        url=${url//\'/}
        url=$(sed -E 's#^([a-z+]+://)[^/@]*@#\1#' <<< "$url")  # never a mirror's credentials in the image
        printf '%s\t%s\t%s\n' "$file" "$url" "$sums" >> /etc/torchbake/debs.tsv
    done <<< "$uris"
    apt-get clean
else
    echo "torchbake: the base image has every OS package this image needs (${packages[*]})"
fi
if [ "${TORCHBAKE_INSTALL_CA:-0}" != 0 ] && [ -s "$TORCHBAKE_CA" ]; then
    # [downloads] ca_bundle_in_image = true: the user asked for the bundle in the trust store.
    cp "$TORCHBAKE_CA" /usr/local/share/ca-certificates/torchbake-ca-bundle.crt
    update-ca-certificates
fi
rm -rf /var/lib/apt/lists/*

# set_gid GROUP GID: the group gets that GID (created if missing); GID 0 leaves it alone.
set_gid() {
    [ "$2" != 0 ] || return 0
    if getent group "$1" >/dev/null; then
        groupmod -g "$2" "$1"
    else
        groupadd -g "$2" "$1"
    fi
    echo "torchbake: group $1 has GID $2"
}
set_gid render "$render_gid"
set_gid video "$video_gid"
if [ -n "$user" ]; then
    groups=video
    if getent group render >/dev/null; then
        groups=video,render
    fi
    useradd --create-home --uid 1000 --groups "$groups" --shell /bin/bash "$user"
    echo "torchbake: user $user (uid 1000, groups $groups)"
fi
