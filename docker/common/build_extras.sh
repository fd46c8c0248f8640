#!/usr/bin/env bash
# Build the extensions that must compile against the installed torch (apex, flash-attn, ...)
# with --no-build-isolation, one per line of LIST: "git+URL@REF" or a requirement.
set -euo pipefail
# shellcheck source=docker/common/ccache_remote.sh
. "$(dirname "$0")/ccache_remote.sh"
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
    elif [ "${TORCHBAKE_INSTALLER:-pip}" = uv ] && [ -d /tmp/torchbake/uv ]; then
        echo "torchbake: installing $spec with uv (--no-build-isolation)"
        uv=$(bash /opt/torchbake/common/uv_binary.sh /tmp/torchbake/uv)
        "$uv" pip install --python "$(command -v python)" --no-build-isolation --compile-bytecode "${find_links[@]}" "$spec"
    else
        echo "torchbake: building $spec with --no-build-isolation"
        python -m pip install --no-build-isolation "${find_links[@]}" "$spec"
    fi
done < "$list"
