#!/usr/bin/env bash
# Build the extensions that must compile against the installed torch (apex, flash-attn, ...)
# with --no-build-isolation, one per line of LIST: "git+URL@REF" (cloned here), "sdist:FILE" (a
# source distribution the host fetched and checked, in /tmp/torchbake/extensions/), or a wheel.
# A cloned or unpacked tree is built by build_source.sh: its compiles counted and cached.
set -euo pipefail
# shellcheck source=docker/common/compile_cache.sh
. "$(dirname "$0")/compile_cache.sh"
# shellcheck source=docker/common/trust.sh
. "$(dirname "$0")/trust.sh"
list=${1:?list file}
git_args=()
if [ -s /run/secrets/git_credentials ]; then
    git_args=(-c "credential.helper=store --file=/run/secrets/git_credentials")
fi
find_links=()
if [ -d /tmp/torchbake/wheelhouse ]; then
    find_links=(--no-index --find-links /tmp/torchbake/wheelhouse)
fi
index=0
while read -r spec; do
    [ -n "$spec" ] || continue
    index=$((index + 1))
    if [[ "$spec" == git+* ]]; then
        url=${spec#git+}
        ref=${url##*@}
        url=${url%@*}
        dest=/home/extensions/$(basename "$url" .git)
        mkdir -p /home/extensions
        GIT_TERMINAL_PROMPT=0 git "${git_args[@]}" clone --depth 1 --branch "$ref" --recurse-submodules \
            --shallow-submodules "$url" "$dest"
        bash /opt/torchbake/common/build_source.sh "extra-$index" "$dest"
    elif [[ "$spec" == sdist:* ]]; then
        file=${spec#sdist:}
        dest=/home/extensions/${file%.tar.gz}
        dest=${dest%.zip}
        mkdir -p "$dest"
        # unpacked member by member: none may land outside its folder (an absolute path, "..", a link out)
        python /opt/torchbake/common/unpack_sdist.py "/tmp/torchbake/extensions/$file" "$dest.unpacked"
        # an sdist holds one top folder, NAME-VERSION/: that is the tree
        top=("$dest.unpacked"/*)
        rm -rf "$dest" && mv "${top[0]}" "$dest" && rm -rf "$dest.unpacked"
        name=$(basename "$dest")
        bash /opt/torchbake/common/build_source.sh "${name%-*}" "$dest"
    elif [ "${TORCHBAKE_INSTALLER:-pip}" = uv ] && [ -d /tmp/torchbake/uv ]; then
        echo "torchbake: installing $spec with uv (--no-build-isolation)"
        uv=$(bash /opt/torchbake/common/uv_binary.sh /tmp/torchbake/uv)
        "$uv" pip install --python "$(command -v python)" --no-build-isolation --compile-bytecode "${find_links[@]}" "$spec"
    else
        echo "torchbake: building $spec with --no-build-isolation"
        python -m pip install --no-build-isolation "${find_links[@]}" "$spec"
    fi
done < "$list"
