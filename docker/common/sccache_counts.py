"""The line build_source.sh prints of a step's compiles through sccache, from its JSON statistics
on stdin: a miss is a compile, a hit came from the store, a failed (or timed-out) read or write of
the store is a store error (torchbake.building.compile_stats reads the line back).
Usage: sccache --show-stats --stats-format json | python sccache_counts.py ROLE SHARED SECONDS"""

import json
import sys


def main() -> None:
    role, shared, seconds = sys.argv[1:4]
    stats = json.load(sys.stdin)["stats"]

    def total(name: str) -> int:
        return sum(stats[name]["counts"].values())

    errors = total("cache_errors") + stats["cache_read_errors"] + stats["cache_write_errors"] + stats["cache_timeouts"]
    print(f"torchbake: compile-cache role={role} compiled={total('cache_misses')} local_hits=0"
          f" remote_hits={total('cache_hits')} store_errors={errors} remote={shared} seconds={seconds}")


if __name__ == "__main__":
    main()
