# shellcheck shell=bash disable=SC2034  # APT_TRUST is for the scripts that source this file
# Sourced by the build steps that reach the network (apt, toolkit installers, git clones, pip).
# When torchbake was given --ca-bundle (an intercepting proxy's CA), the bundle is the BuildKit
# secret "ca_bundle": it exists only while the step runs and never lands in a layer. Every tool
# is pointed at it; TLS verification itself is never turned off.
TORCHBAKE_CA=/run/secrets/ca_bundle
APT_TRUST=()
if [ -s "$TORCHBAKE_CA" ]; then
    export SSL_CERT_FILE="$TORCHBAKE_CA" GIT_SSL_CAINFO="$TORCHBAKE_CA" PIP_CERT="$TORCHBAKE_CA" \
        CURL_CA_BUNDLE="$TORCHBAKE_CA" REQUESTS_CA_BUNDLE="$TORCHBAKE_CA"
    APT_TRUST=(-o "Acquire::https::CAInfo=$TORCHBAKE_CA")
    echo "torchbake: trusting the CA bundle given with --ca-bundle for this step"
fi
