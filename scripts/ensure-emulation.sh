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
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$root" = 1 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null; then
        say "installing qemu-user-static (QEMU handlers for ${missing[*]})"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-user-static >/dev/null
        # its package registers the handlers when binfmt_misc is mounted; where it was mounted later, now
        command -v update-binfmts >/dev/null && update-binfmts --enable >/dev/null 2>&1 || true
    else
        fail "no QEMU handler for ${missing[*]} in $BINFMT; install QEMU's user emulation (Debian, Ubuntu: apt-get install qemu-user-static) as root"
    fi
fi
for machine in "${wanted[@]}"; do
    handler="$BINFMT/qemu-$machine"
    [ -e "$handler" ] || fail "qemu-user-static is installed but $handler is not registered; run: update-binfmts --enable qemu-$machine"
    head -n 1 "$handler" | grep -qx enabled || fail "$handler is disabled; enable it: echo 1 > $handler"
    grep -q '^flags:.*F' "$handler" || fail "$handler has no F flag, so build containers cannot find the emulator; register it again with F (Debian's qemu-user-static does)"
done
say "this host runs ${wanted[*]} programs emulated (QEMU, F flag)."
