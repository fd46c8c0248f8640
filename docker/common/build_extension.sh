#!/usr/bin/env bash
# Clone the vendor extension at a ref and build it against the installed torch.
# Usage: build_extension.sh REPO REF COMMIT DEST
# Credentials come only from the BuildKit secret /run/secrets/git_credentials (git-credential-store
# format) through a command-line credential helper: nothing is written to .git/config, a layer,
# or the log. COMMIT (resolved on the host) makes the step rebuild when the ref moves.
set -euo pipefail
# shellcheck source=docker/common/compile_cache.sh
. "$(dirname "$0")/compile_cache.sh"
# shellcheck source=docker/common/trust.sh
. "$(dirname "$0")/trust.sh"
repo=${1:-}
ref=${2:-}
commit=${3:-}
dest=${4:?destination}
if [ -z "$repo" ]; then
    echo "torchbake: no vendor extension to build (sources.extension_repo is empty)"
    exit 0
fi
git_args=()
if [ -s /run/secrets/git_credentials ]; then
    git_args=(-c "credential.helper=store --file=/run/secrets/git_credentials")
fi
echo "torchbake: cloning $repo at $ref"
GIT_TERMINAL_PROMPT=0 git "${git_args[@]}" clone --depth 1 --branch "$ref" --recurse-submodules \
    --shallow-submodules "$repo" "$dest"
actual=$(git -C "$dest" rev-parse HEAD)
if [ -n "$commit" ] && [ "$actual" != "$commit" ]; then
    echo "torchbake: $repo $ref is at $actual now, not $commit as when the build was planned; build again." >&2
    exit 1
fi
bash /opt/torchbake/common/build_source.sh extension "$dest"
