#!/usr/bin/env bash
# Make sure a Docker engine torchbake can build with answers, idempotently: Docker >= 26 with the
# buildx plugin and the containerd image store (the registry cache of every stage, pushes straight
# from BuildKit and attestations need both).
# On a Debian or Ubuntu host, as root, with no engine answering: installs what is missing (the
# distribution's docker.io and docker-buildx where they are new enough, e.g. Debian trixie,
# Ubuntu 24.04; on Debian bookworm, trixie's packages fetched with a temporary package list, the
# system's sources left as they are), switches the containerd image store on in
# /etc/docker/daemon.json and starts dockerd in the background.
# Elsewhere, or where an older engine is running, it only checks, and says what to do.
# An engine starting (this script's or one found starting) is waited for while it lives, up to
# TORCHBAKE_ENGINE_WAIT_S seconds (600).
# --restart: an engine that answers, managed by systemd, lacking only the containerd image store
# (a CI runner's, e.g. GitHub's hosted runners'): the store switched on in its settings, it is
# restarted (the images of its old store stay on disk, unseen). Never without the flag.
set -euo pipefail
restart=0
for argument in "$@"; do
    case "$argument" in
        --restart) restart=1 ;;
        -h | --help) echo "usage: bash scripts/ensure-engine.sh [--restart]  (see the comment at its top)"; exit 0 ;;
        *) echo "ensure-engine: unknown argument '$argument'; the one argument is --restart" >&2; exit 2 ;;
    esac
done

DOCKER=${TORCHBAKE_ENGINE_CLIENT:-/usr/bin/docker}
LOG=${TORCHBAKE_DOCKERD_LOG:-/var/log/torchbake-dockerd.log}
SETTINGS=${TORCHBAKE_DOCKERD_SETTINGS:-/etc/docker/daemon.json}
DOCKERD=${TORCHBAKE_DOCKERD:-dockerd}
WAIT_S=${TORCHBAKE_ENGINE_WAIT_S:-600}
case "$WAIT_S" in
    '' | *[!0-9]* | 0 | ???????*) echo "ensure-engine: TORCHBAKE_ENGINE_WAIT_S=$WAIT_S: expected whole seconds, 1 to 999999 (the default is 600)" >&2; exit 2 ;;
esac
MIN_MAJOR=26
STORE_FEATURE='{"features": {"containerd-snapshotter": true}}'

say() { echo "ensure-engine: $*"; }
fail() { echo "ensure-engine: $*" >&2; exit 1; }
major_of() { local v=${1#*:}; echo "${v%%.*}"; }  # "26.1.5+dfsg1-9" -> 26 (an epoch "5:" dropped)
server_version() { timeout 10 "$DOCKER" version --format '{{.Server.Version}}' 2>/dev/null; }
has_buildx() { [ -x "$DOCKER" ] && timeout 10 "$DOCKER" buildx version >/dev/null 2>&1; }
containerd_store() { timeout 10 "$DOCKER" info --format '{{.DriverStatus}}' 2>/dev/null | grep -q 'io.containerd.snapshotter'; }
is_root_debian() { [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null; }

# What an answering engine lacks ("" when nothing): the checks torchbake itself makes before a build.
lacks() {
    local version=$1
    if [ "$(major_of "$version")" -lt "$MIN_MAJOR" ] 2>/dev/null; then
        echo "it is Docker $version; torchbake needs Docker >= $MIN_MAJOR"
    elif ! has_buildx; then
        echo "its client $DOCKER has no buildx plugin"
    elif ! containerd_store; then
        echo "it keeps images in its own store, not containerd's"
    fi
}

# The distribution's sources for the given suite as a deb822 file in $1, from the system's own
# mirror (its first "deb" source for the running release); the signing keyring is Debian's.
trixie_sources() {
    local folder=$1 uri=""
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
        uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
    fi
    if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
        uri=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' /etc/apt/sources.list)
    fi
    [ -n "$uri" ] || fail "found no Debian mirror in /etc/apt/sources.list(.d); add one and run this script again."
    printf 'Types: deb\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        "$uri" >"$folder/trixie.sources"
}

# Install Docker >= 26 with buildx (and containerd) from the distribution, or trixie's on bookworm.
install_engine() {
    apt-get update -qq
    local candidate
    candidate=$(apt-cache policy docker.io 2>/dev/null | awk '/Candidate:/ {print $2}')
    if [ -n "$candidate" ] && [ "$candidate" != "(none)" ] && [ "$(major_of "$candidate")" -ge "$MIN_MAJOR" ]; then
        say "installing docker.io $candidate and docker-buildx with apt-get"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io docker-buildx >/dev/null
        return
    fi
    # shellcheck source=/dev/null
    . /etc/os-release
    if [ "${ID:-}" != debian ] || [ "${VERSION_CODENAME:-}" != bookworm ]; then
        fail "${PRETTY_NAME:-this system} offers docker.io ${candidate:-none}; torchbake needs Docker >= $MIN_MAJOR with buildx. Install Docker Engine >= $MIN_MAJOR and its buildx plugin (Docker's own packages or your distribution's), then run this script again."
    fi
    local work
    work=$(mktemp -d)
    trap 'rm -rf "$work"' RETURN
    trixie_sources "$work"
    mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
    if id _apt >/dev/null 2>&1; then  # apt fetches as _apt (its sandbox user)
        chmod 755 "$work"
        chown _apt "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
    fi
    local apt=(apt-get -o Dir::Etc::sourcelist=/dev/null -o "Dir::Etc::sourceparts=$work"
               -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache")
    say "fetching docker.io, docker-cli, docker-buildx and containerd of Debian trixie (bookworm's docker.io is 20.10)"
    "${apt[@]}" update -qq
    (cd "$work/debs" && "${apt[@]}" download docker.io docker-cli docker-buildx containerd >/dev/null)
    say "installing $(cd "$work/debs" && echo *.deb)"
    # runc and tini stay bookworm's (trixie's need glibc 2.38); the rest resolves against bookworm.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$work"/debs/*.deb >/dev/null
}

# torchbake's engine settings (scripts/engine-settings.json) in daemon.json, the user's own kept: the
# containerd image store, and a bound on BuildKit's build history. Docker 26 keeps every build's
# record (its logs and traces, about seven blobs) for 48 hours however many there are, and
# containerd's collector walks them all at every image removal and build: after a day of test
# runs (4,349 records, 21,000 blobs) a removal cost containerd 0.34 s of CPU, 0.08 s without them
# (docs/troubleshooting.md). torchbake keeps each build's own log; ten minutes of BuildKit's records is plenty.
engine_settings() {
    if command -v python3 >/dev/null; then
        python3 "$(dirname "$0")/engine_settings.py" "$SETTINGS"
    elif [ ! -s "$SETTINGS" ]; then
        mkdir -p "$(dirname "$SETTINGS")"
        cp "$(dirname "$0")/engine-settings.json" "$SETTINGS"
    elif ! grep -q '"containerd-snapshotter": *true' "$SETTINGS"; then
        fail "$SETTINGS exists; add $STORE_FEATURE to it by hand and run this script again."
    fi
}

if version=$(server_version) && [ -n "$version" ]; then
    missing=$(lacks "$version")
    if [ -z "$missing" ]; then
        say "the engine answers (Docker $version, buildx, containerd image store)."
        exit 0
    fi
    if [ "$restart" = 1 ] && [ "$missing" = "it keeps images in its own store, not containerd's" ] \
        && [ "$(id -u)" = 0 ] && command -v systemctl >/dev/null && systemctl is-active --quiet docker; then
        say "switching the containerd image store on in $SETTINGS and restarting docker (--restart)"
        engine_settings
        systemctl restart docker
        for _ in $(seq 1 60); do
            if version=$(server_version) && [ -n "$version" ] && [ -z "$(lacks "$version")" ]; then
                say "the engine answers (Docker $version, buildx, containerd image store)."
                exit 0
            fi
            sleep 1
        done
        fail "docker restarted but does not answer with the containerd image store; see 'journalctl -u docker'"
    fi
    if [ "$restart" = 1 ]; then
        say "--restart restarts an engine that lacks only the containerd image store, as root, managed by systemd (systemctl is-active docker); this one is not"
    fi
    fail "an engine answers at ${DOCKER_HOST:-the default socket}, but $missing.
Docker >= $MIN_MAJOR with the buildx plugin and the containerd image store ($STORE_FEATURE in $SETTINGS)
is what torchbake builds with. Stop that engine (e.g. 'systemctl stop docker docker.socket', or
'kill \$(cat /var/run/docker.pid)') and run 'bash scripts/ensure-engine.sh' again: as root on Debian or
Ubuntu it installs and starts one; images of the old engine stay on disk."
fi

if ! is_root_debian; then
    fail "no Docker engine answers at ${DOCKER_HOST:-the default socket}.
Start one (Docker >= $MIN_MAJOR with buildx and the containerd image store, e.g. 'sudo systemctl start docker')
or set DOCKER_HOST, then try again."
fi

installed=$("$DOCKERD" --version 2>/dev/null | sed -n 's/^Docker version \([0-9][^ ,]*\).*/\1/p' || true)
if [ -z "$installed" ] || [ "$(major_of "$installed")" -lt "$MIN_MAJOR" ] || ! has_buildx || ! command -v containerd >/dev/null; then
    install_engine
fi
engine_settings

# The engine started here, or one already starting (a machine's boot, an earlier run of this script):
# it is waited for while it lives, however long its start takes (a CI machine's engine, reused for
# days, had not answered after 60 s, 2026-11-29).
daemon=$(basename "$DOCKERD")
# A process of that name that is not a zombie (where nothing reaps the dead, one stays listed).
running() { ps -o stat= -p "$1" 2>/dev/null | grep -qv '^Z'; }
pid=$(ps -C "$daemon" -o pid=,stat= | awk '$2 !~ /^Z/ {print $1; exit}' || true)
if [ -n "$pid" ]; then
    say "$daemon is running (pid $pid); waiting for it to answer"
else
    say "starting $daemon in the background (log: $LOG)"
    # The engine's Go collector ran at the default pace (GOGC=100) for a fifth of its CPU while it
    # built and exported the real torch image; on a machine this script sets up (a CI runner, a
    # new desk machine) memory is cheaper than those cores. But not without bound: at GOGC=400 the
    # heap may grow to five times what is live, and one suite run saw 21 GB and the kernel's OOM
    # killer; GOMEMLIMIT (a quarter of the memory) makes the collector keep up near it. A GOGC or
    # GOMEMLIMIT of the caller's own is kept.
    limit=$(awk '/^MemTotal:/ { printf "%dMiB", $2 / 4096 }' /proc/meminfo)
    GOGC=${GOGC:-400} GOMEMLIMIT=${GOMEMLIMIT:-$limit} nohup "$DOCKERD" --config-file "$SETTINGS" >"$LOG" 2>&1 </dev/null &
    pid=$!
fi
started=$SECONDS
said=$SECONDS
while [ $((SECONDS - started)) -lt "$WAIT_S" ]; do
    if version=$(server_version) && [ -n "$version" ]; then
        missing=$(lacks "$version")
        [ -z "$missing" ] || fail "the engine started, but $missing; see $LOG"
        say "the engine answers (Docker $version, buildx, containerd image store)."
        exit 0
    fi
    if ! running "$pid"; then
        echo "ensure-engine: $daemon (pid $pid) exited after $((SECONDS - started)) s without answering; the end of $LOG:" >&2
        tail -20 "$LOG" >&2 || true
        exit 1
    fi
    if [ $((SECONDS - said)) -ge 30 ]; then
        say "$daemon is still starting ($((SECONDS - started)) s); the last line of $LOG: $(tail -1 "$LOG" 2>/dev/null | cut -c1-160)"
        said=$SECONDS
    fi
    sleep 1
done
echo "ensure-engine: $daemon (pid $pid) did not answer within $WAIT_S s (TORCHBAKE_ENGINE_WAIT_S); the start and the end of $LOG:" >&2
head -3 "$LOG" >&2 || true
echo "..." >&2
tail -20 "$LOG" >&2 || true
exit 1
