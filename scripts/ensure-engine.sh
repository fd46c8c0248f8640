#!/usr/bin/env bash
# Make sure a Docker engine answers, idempotently.
# On a Debian host as root with no engine answering: installs Debian's docker.io (which brings
# the BuildKit-capable /usr/bin/docker client) and starts dockerd in the background.
# Elsewhere it only checks, and says what to do.
set -euo pipefail

DOCKER=${TORCHBAKE_ENGINE_CLIENT:-/usr/bin/docker}
LOG=${TORCHBAKE_DOCKERD_LOG:-/var/log/torchbake-dockerd.log}

engine_answers() { [ -x "$DOCKER" ] && timeout 10 "$DOCKER" info >/dev/null 2>&1; }

if engine_answers; then
    echo "ensure-engine: the engine answers ($("$DOCKER" version --format '{{.Server.Version}}'))."
    exit 0
fi

if [ "$(id -u)" != 0 ] || [ ! -f /etc/debian_version ]; then
    echo "ensure-engine: no Docker engine answers at ${DOCKER_HOST:-the default socket}." >&2
    echo "Start one (e.g. 'sudo systemctl start docker') or set DOCKER_HOST, then try again." >&2
    exit 1
fi

need=()
command -v dockerd >/dev/null 2>&1 && [ -x /usr/bin/docker ] || need+=(docker.io)
if [ ${#need[@]} -gt 0 ]; then
    echo "ensure-engine: installing ${need[*]} with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! pgrep -x dockerd >/dev/null; then
    echo "ensure-engine: starting dockerd in the background (log: $LOG)"
    # The engine's Go collector ran at the default pace (GOGC=100) for a fifth of its CPU while it
    # built and exported the real torch image; on a machine this script sets up (a CI runner, a
    # new desk machine) memory is cheaper than those cores. A GOGC of the caller's own is kept.
    GOGC=${GOGC:-400} nohup dockerd >"$LOG" 2>&1 </dev/null &
fi
for _ in $(seq 1 60); do
    if engine_answers; then
        echo "ensure-engine: the engine answers ($("$DOCKER" version --format '{{.Server.Version}}'))."
        exit 0
    fi
    sleep 1
done
echo "ensure-engine: dockerd did not answer within 60 s; see $LOG" >&2
tail -20 "$LOG" >&2 || true
exit 1
