#!/usr/bin/env bash
# Make sure this host can build and run images of the other platforms torchbake builds for
# (linux/arm64 on an amd64 host, linux/amd64 on an arm64 one) with QEMU user emulation,
# idempotently: binfmt_misc mounted, Debian's qemu-user-static installed (it registers each
# handler with the F flag: the emulator is opened at registration, so it runs inside build
# containers too), and every handler checked.
# As root on Debian or Ubuntu it installs and mounts what is missing; elsewhere it only checks
# and says what to do. A builder with a native node per platform needs none of this.
set -euo pipefail
BINFMT=${TORCHBAKE_BINFMT_DIR:-/proc/sys/fs/binfmt_misc}
say() { echo "ensure-emulation: $*"; }
fail() { echo "ensure-emulation: $*" >&2; exit 1; }
root=0
[ "$(id -u)" = 0 ] && root=1

if [ ! -e "$BINFMT/status" ]; then
    [ "$root" = 1 ] || fail "binfmt_misc is not mounted at $BINFMT; as root: mount -t binfmt_misc binfmt_misc $BINFMT"
    say "mounting binfmt_misc at $BINFMT"
    mount -t binfmt_misc binfmt_misc "$BINFMT"
fi
case "$(uname -m)" in
    x86_64) wanted=(aarch64) ;;
    aarch64) wanted=(x86_64) ;;
    *) wanted=(aarch64 x86_64) ;;
esac
missing=()
for machine in "${wanted[@]}"; do
    [ -e "$BINFMT/qemu-$machine" ] || missing+=("$machine")
done
# Register one handler from its systemd binfmt.d line (":name:type:offset:magic:mask:interpreter:flags"),
# as systemd-binfmt does at boot: where no systemd runs (containers, CI runners, WSL) and
# update-binfmts is absent, nothing else reads /usr/lib/binfmt.d.
register_from_binfmt_d() {
    local conf
    for conf in /usr/lib/binfmt.d/qemu-"$1".conf /etc/binfmt.d/qemu-"$1".conf; do
        [ -f "$conf" ] || continue
        grep -v '^[#;]' "$conf" | grep -m1 '^:' > "$BINFMT/register" && return 0
    done
    return 1
}
# The command that registers a handler on this machine, for the messages below.
register_hint() {
    if update-binfmts --version >/dev/null 2>&1; then
        echo "update-binfmts --enable qemu-$1"
    elif [ -f "/usr/lib/binfmt.d/qemu-$1.conf" ]; then
        echo "grep '^:' /usr/lib/binfmt.d/qemu-$1.conf > $BINFMT/register"
    else
        echo "apt-get install qemu-user-static binfmt-support"
    fi
}
# The install registers a handler for each of QEMU's ~30 machines. BuildKit runs a check program
# under every registered emulator on each build (about 0.15 s of CPU a build with all of them,
# measured: docs/platforms.md), so the handlers that install registered and torchbake does not use
# are disabled again; one that was there before the install is left as it was.
disable_unused_handlers() {
    local name disabled=() tool=0 again="echo 1 > $BINFMT/qemu-NAME"
    if update-binfmts --version >/dev/null 2>&1; then
        tool=1 again="update-binfmts --enable qemu-NAME"
    fi
    for name in $(cd "$BINFMT" && ls); do
        case "$name" in qemu-*) ;; *) continue ;; esac
        grep -qx "$name" <<< "$1" && continue
        printf '%s\n' "${wanted[@]/#/qemu-}" | grep -qx "$name" && continue
        if [ "$tool" = 1 ]; then
            update-binfmts --disable "$name" >/dev/null 2>&1 || echo 0 > "$BINFMT/$name"
        else
            echo 0 > "$BINFMT/$name"
        fi
        disabled+=("$name")
    done
    [ ${#disabled[@]} -gt 0 ] || return 0
    say "disabled ${#disabled[@]} handlers the install registered that torchbake does not use (${disabled[*]});" \
        "each is back with: $again"
}
if [ ${#missing[@]} -gt 0 ]; then
    absent=()
    for pkg in qemu-user-static binfmt-support; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || absent+=("$pkg")
    done
    if [ ${#absent[@]} -gt 0 ] && [ "$root" = 1 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null; then
        # binfmt-support is qemu-user-static's Recommends, not a Depends: it is what registers the
        # handlers on a machine without systemd (update-binfmts), so it is named here.
        say "installing ${absent[*]} (QEMU handlers for ${missing[*]})"
        before=$(cd "$BINFMT" && ls)
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${absent[@]}" >/dev/null
        disable_unused_handlers "$before"
    fi
    for machine in "${missing[@]}"; do
        [ -e "$BINFMT/qemu-$machine" ] && continue
        [ "$root" = 1 ] || continue
        if update-binfmts --version >/dev/null 2>&1; then
            update-binfmts --enable "qemu-$machine" >/dev/null 2>&1 || true
        fi
        [ -e "$BINFMT/qemu-$machine" ] || register_from_binfmt_d "$machine" || true
    done
fi
for machine in "${wanted[@]}"; do
    handler="$BINFMT/qemu-$machine"
    [ -e "$handler" ] || fail "no QEMU handler for $machine in $BINFMT; as root, run: $(register_hint "$machine")"
    head -n 1 "$handler" | grep -qx enabled || fail "$handler is disabled; enable it: echo 1 > $handler"
    grep -q '^flags:.*F' "$handler" || fail "$handler has no F flag, so build containers cannot find the emulator; register it again with F: echo -1 > $handler && $(register_hint "$machine")"
done
say "this host runs ${wanted[*]} programs emulated (QEMU, F flag)."
