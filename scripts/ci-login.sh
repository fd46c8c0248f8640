#!/usr/bin/env bash
# The nightly workflow's registry login (.github/workflows/nightly.yml): the host of
# NIGHTLY_REGISTRY, with the secrets REGISTRY_USER and REGISTRY_PASSWORD (the password through
# standard input). Neither set: said, and nothing is logged in (a registry that wants a login
# refuses the push, which torchbake says). One of them alone: an error naming the other.
set -euo pipefail
registry=${NIGHTLY_REGISTRY:-}
case "$registry" in
    *://* | *[[:space:]]* | /*)
        echo "::error::ci-login: NIGHTLY_REGISTRY '$registry': expected HOST[:PORT][/PATH], no scheme, no space" >&2
        exit 2 ;;
esac
host=${registry%%/*}
if [ -z "$host" ]; then
    echo "ci-login: NIGHTLY_REGISTRY is not set: nothing is pushed, so nothing to log in to"
    exit 0
fi
if [ -z "${REGISTRY_USER:-}" ] && [ -z "${REGISTRY_PASSWORD:-}" ]; then
    echo "ci-login: no secrets REGISTRY_USER and REGISTRY_PASSWORD: pushing to $host without a login"
    exit 0
fi
for name in REGISTRY_USER REGISTRY_PASSWORD; do
    if [ -z "${!name:-}" ]; then
        echo "::error::ci-login: the secret $name is not set, but its partner is: set both, or neither" >&2
        exit 2
    fi
done
printf '%s' "$REGISTRY_PASSWORD" | docker login --username "$REGISTRY_USER" --password-stdin "$host"
