#!/usr/bin/env bash
# Room on the engine's disk before the tests start: `make-room.sh GB`. A whole run from a fresh
# clone took up to 12.7 GB while it went (2026-11-29: the clone's .venv, second engines' data
# roots, the tests' folders, images, the build cache's growth), and every build keeps
# build.min_free_space (2 GB) and its own estimate free: test.sh asks for 20. CI machines are
# reused between runs: there (CI set) the engine's build cache is cut by what is missing, before
# the run (a prune beside the tests deleted records the run had yet to use). On a developer's
# machine nothing of theirs is removed: the shortfall is said, with what frees it.
# Every cut costs the next run the steps it removed, and BuildKit 0.13 cannot tell which records a
# run needs: a step found in the cache does not count as a use (only a build's last step and its
# context upload do), and it files a step under the context upload of the build that first ran it
# (docs/troubleshooting.md), so the records that keep the steps every run needs look unused since
# the run that made them, and any cut by size or age takes them first. Three runs in a row here
# (2026-11-29): after a cut (by size, of 1 GB; then by age), a run made 9.2 and 8.8 GB of records
# again (20 and 21 OS package installs among them; pytest 18 min 28 s and 18 min 16 s); the run
# after, nothing cut, 1.95 GB (3 installs; 15 min 32 s, 286 s less CPU). A cache held at its size
# by a small cut before every run pays that every run: so a cut is deep, to five eighths of
# CACHE_GB, and the runs after it (a warm run adds about 2 GB) need none.
# CACHE_GB, the second argument: the build cache's size it is held to. containerd's collector
# walks all the engine holds at every removal and build, so a larger cache makes every build cost
# more: a reused machine whose cache had grown past 60 GB ran the suite in 34 to 36 min (3,900 to
# 4,100 s of CPU), a new one whose cache was one run's (12 GB) in 16 min (1,865 s); the machines
# may differ too (2026-11-29). On CI the cache is cut to it; on a developer's machine the command
# that does is said.
# DOCKER: the engine's client (tests/unit/test_make_room.py gives a stand-in).
set -uo pipefail
room_gb=${1:-}
cache_gb=${2:-}
for number in "$room_gb" "${cache_gb:-1}"; do
    case "$number" in
        '' | *[!0-9]* | ??????*) echo "make-room: '$number' is not a number of GB (whole, 0 to 99999); usage: make-room.sh GB [CACHE_GB]" >&2; exit 2 ;;
    esac
done
docker=${DOCKER:-/usr/bin/docker}
engine_root=$("$docker" info --format '{{.DockerRootDir}}' 2>/dev/null) || engine_root=/
engine_free() { df --output=avail -B1 "$engine_root" | tail -1; }
cache_bytes() {  # (asking the engine its build cache's size takes 2 s)
    "$docker" system df --format '{{.Type}} {{.Size}}' 2>/dev/null \
        | sed -n 's/^Build Cache \(.*\)B$/\1/p' | numfmt --from=si 2>/dev/null
}
shortfall() { echo $((room_gb * 1000 * 1000 * 1000 - $(engine_free))); }
if [ -n "$cache_gb" ] && cache=$(cache_bytes) && [ -n "$cache" ] && [ "$cache" -gt $((cache_gb * 1000 * 1000 * 1000)) ]; then
    deep_gb=$((cache_gb * 5 / 8))
    if [ -n "${CI:-}" ]; then
        if "$docker" builder prune --force --keep-storage "$((deep_gb * 1000 * 1000 * 1000))" >/dev/null; then
            echo "test.sh: the engine's build cache cut to ${deep_gb} GB (it was $((cache / 1000000000)) GB, past ${cache_gb} GB):" \
                "builds get slower past it, and this run builds again what the cut removed." >&2
        else
            echo "test.sh: docker builder prune failed; the build cache was not cut." >&2
        fi
    else
        echo "test.sh: the engine's build cache is $((cache / 1000000000)) GB; past about ${cache_gb} GB builds get slower." \
            "To cut it: docker builder prune --keep-storage ${deep_gb}GB (the next builds run again the steps it removes)" >&2
    fi
fi
short=$(shortfall)
[ "$short" -gt 0 ] || exit 0
if [ -z "${CI:-}" ]; then
    echo "test.sh: $(($(engine_free) / 1000000000)) GB free on the engine's disk ($engine_root); a run needs" \
        "about ${room_gb} GB, and a build refuses to start when the disk runs short. Free some: docker builder prune --keep-storage 20GB" >&2
    exit 0
fi
if ! before=$(cache_bytes) || [ -z "$before" ]; then
    echo "test.sh: the engine did not say its build cache's size; nothing was cut." >&2
    exit 0
fi
# Records share layers, so a cut frees less than it removes (2 GB removed freed 1 GB): cut again by
# what is still missing, three cuts at most.
size=$before
for _ in 1 2 3; do
    size=$((size > short ? size - short : 0))
    if ! "$docker" builder prune --force --keep-storage "$size" >/dev/null; then
        echo "test.sh: docker builder prune failed; the build cache was not cut." >&2
        break
    fi
    short=$(shortfall)
    [ "$short" -gt 0 ] && [ "$size" -gt 0 ] || break
done
echo "test.sh: the engine's build cache cut from $((before / 1000000000)) GB to $((size / 1000000000)) GB" \
    "for the run's ${room_gb} GB; $(($(engine_free) / 1000000000)) GB free." >&2
