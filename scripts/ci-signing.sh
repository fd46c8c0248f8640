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
: "${GITHUB_ENV:?the file of the environment of the job (GitHub sets it)}"
# a private file of its own: one that was there (with other permissions) goes first
private() { rm -f "$1"; (umask 077 && printf '%s\n' "$2" >"$1"); }
if [ -n "${SIGN_KEY:-}" ]; then
    case "${RUNNER_TEMP:?the temporary folder of the runner (GitHub sets it)}" in
        *$'\n'*) echo "::error::ci-signing: RUNNER_TEMP holds a newline" >&2; exit 2 ;;
    esac
    key="$RUNNER_TEMP/torchbake-sign.key"
    private "$key" "$SIGN_KEY"
    if [ -n "${SIGN_KEY_PASSWORD:-}" ]; then
        private "$RUNNER_TEMP/torchbake-sign.password" "$SIGN_KEY_PASSWORD"
        echo "TORCHBAKE_SIGN_PASSWORD_FILE=$RUNNER_TEMP/torchbake-sign.password" >>"$GITHUB_ENV"
    fi
    echo "TORCHBAKE_SIGN_KEY=$key" >>"$GITHUB_ENV"
    echo "ci-signing: what is pushed is signed with the key of the secret SIGN_KEY"
elif [ "${NIGHTLY_SIGN:-}" = keyless ]; then
    identity="${GITHUB_SERVER_URL:-https://github.com}/${GITHUB_WORKFLOW_REF:?the workflow (GitHub sets it)}"
    echo "TORCHBAKE_SIGN_CI_IDENTITY=true" >>"$GITHUB_ENV"
    echo "ci-signing: what is pushed is signed keylessly as $identity; check it with:"
    printf '  invoke verify --image IMAGE --signatures --identity %q --issuer https://token.actions.githubusercontent.com\n' \
        "$identity"
elif [ -n "${NIGHTLY_SIGN:-}" ]; then
    echo "::error::ci-signing: NIGHTLY_SIGN=${NIGHTLY_SIGN}: the one value is 'keyless' (or set the secret SIGN_KEY)" >&2
    exit 2
else
    echo "ci-signing: no secret SIGN_KEY and NIGHTLY_SIGN is not 'keyless': what is pushed is not signed"
fi
