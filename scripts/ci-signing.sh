#!/usr/bin/env bash
# How the nightly workflow signs what it pushes (.github/workflows/nightly.yml), for the steps
# after this one ($GITHUB_ENV):
#   secret SIGN_KEY (a PEM private key; SIGN_KEY_PASSWORD when it is encrypted): written to files
#     only the runner's user reads, outside the workspace ($RUNNER_TEMP), named by [sign] key and
#     [sign] password_file;
#   else variable NIGHTLY_SIGN=keyless: [sign] ci_identity, this workflow's own GitHub identity
#     (the job needs permissions id-token: write); it prints the identity verify must expect;
#   else: said, and the images are pushed unsigned.
set -euo pipefail
if [ -n "${SIGN_KEY:-}" ]; then
    umask 077
    key="${RUNNER_TEMP:?}/torchbake-sign.key"
    printf '%s\n' "$SIGN_KEY" >"$key"
    echo "TORCHBAKE_SIGN_KEY=$key" >>"${GITHUB_ENV:?}"
    if [ -n "${SIGN_KEY_PASSWORD:-}" ]; then
        printf '%s\n' "$SIGN_KEY_PASSWORD" >"$RUNNER_TEMP/torchbake-sign.password"
        echo "TORCHBAKE_SIGN_PASSWORD_FILE=$RUNNER_TEMP/torchbake-sign.password" >>"$GITHUB_ENV"
    fi
    echo "ci-signing: what is pushed is signed with the key of the secret SIGN_KEY"
elif [ "${NIGHTLY_SIGN:-}" = keyless ]; then
    echo "TORCHBAKE_SIGN_CI_IDENTITY=true" >>"${GITHUB_ENV:?}"
    identity="${GITHUB_SERVER_URL:-https://github.com}/${GITHUB_WORKFLOW_REF:?}"
    echo "ci-signing: what is pushed is signed keylessly as $identity; check it with:"
    echo "  invoke verify IMAGE --signatures --identity $identity --issuer https://token.actions.githubusercontent.com"
elif [ -n "${NIGHTLY_SIGN:-}" ]; then
    echo "::error::ci-signing: NIGHTLY_SIGN=${NIGHTLY_SIGN}: the one value is 'keyless' (or set the secret SIGN_KEY)" >&2
    exit 2
else
    echo "ci-signing: no secret SIGN_KEY and NIGHTLY_SIGN is not 'keyless': what is pushed is not signed"
fi
