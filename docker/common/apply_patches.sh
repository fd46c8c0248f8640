#!/usr/bin/env bash
# Apply the vendor patches of one source tree ([dev] patches), in order, before it compiles.
# Usage: apply_patches.sh SOURCE DIR   (the patches: /tmp/torchbake/patches/SOURCE/NNNN-NAME, bind-mounted)
# Each is checked first (git apply --check), then applied; one that does not apply stops the build
# naming it and what git said (the host checked it already where it had the tree).
set -euo pipefail
source=${1:?source}
tree=${2:?tree}
folder=${TORCHBAKE_PATCHES:-/tmp/torchbake/patches}/$source
[ -d "$folder" ] || exit 0
for patch in "$folder"/*; do
    [ -f "$patch" ] || continue
    name=$(basename "$patch")
    # GIT_DIR: the tree is patched as files, whether or not it holds .git (keep_git)
    if ! said=$(cd "$tree" && GIT_DIR=/nonexistent git apply --check --whitespace=nowarn "$patch" 2>&1); then
        echo "torchbake: patch ${name#????-} does not apply to $source ($tree): $said" >&2
        exit 1
    fi
    (cd "$tree" && GIT_DIR=/nonexistent git apply --whitespace=nowarn "$patch")
    echo "torchbake: applied ${name#????-} to $source"
done
