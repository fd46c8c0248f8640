#!/usr/bin/env python3
"""Benchmark for dev images on a fleet: what a fresh runner pays after a one-file change, with
and without a shared compile cache ([dev] compile_cache).

Side by side in one run, on the fixture sources the tests build (tests/e2e/fixture_repos: PyTorch's
source the one of 300 translation units, built by the same scripts as PyTorch's, each unit
given --weight loops to optimize so that it costs what one of PyTorch's costs; the stand-in torch),
with two stores on 127.0.0.1: Debian's redis-server (through the base's ccache, a network you
trust) and moto's S3-compatible server over TLS, its certificate signed by a CA of the run's own
(through sccache, what a hosted runner reaches over the internet):

  cold          engine A (this machine's) builds the dev image: every unit compiled, the
                objects stored (once per store)
  fresh+store   one unit changes; engine B, fresh (its own data root, empty build cache and
                cache mounts), builds it with the store: target <= 10% of cold's time and
                <= 1% of the objects compiled (once per store)
  fresh alone   the same on another fresh engine without a store: a fresh runner today

Each line gives the build's seconds (`invoke build`, the base image made beforehand and not
counted) and the counts the build recorded in its manifest. Images it makes are removed; the
engines and the store go with the run.
--smoke: the Redis store alone (its cold fill, a fresh engine with it; none without it) on
8 units of no loops, images named for the run.
Usage: .venv/bin/python benchmarks/compile_cache.py [--units N] [--weight N] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.e2e.fixture_repos import (  # noqa: E402
    LARGE_UNITS,
    dev_profile,
    git_credentials,
    make_repos,
    write_large_pytorch,
)
from tests.e2e.helpers import copy_image, make_tiny_torch  # noqa: E402
from tests.support import git_server, redis_store, start_second_engine, tls_store  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from _steps import INVOKE, add_smoke, smoke_name, work_folder  # noqa: E402

DOCKER = "/usr/bin/docker"
BASE = "torchbake/debian:bookworm"
NAME = "torchbake-bench/compile-cache"


def run(argv, env=None) -> tuple[float, str]:
    started = time.monotonic()
    result = subprocess.run(argv, env={**os.environ, **(env or {})}, capture_output=True, text=True, cwd=ROOT,
                            stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        sys.exit(f"step failed: {' '.join(map(str, argv))}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return time.monotonic() - started, result.stdout


def compiles(stdout: str) -> dict[str, dict]:
    """The compile counts the build recorded (the manifest its output names)."""
    manifest = re.search(r"manifest: (\S+)\)", stdout)
    if not manifest:
        sys.exit("the build named no manifest:\n" + stdout[-3000:])
    return json.loads(Path(manifest.group(1)).read_text()).get("compiles", {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weight", type=int, default=300,
                        help="loops in each translation unit (about 4 ms of gcc -O2 each on these 2 cores)")
    parser.add_argument("--units", type=int, default=LARGE_UNITS, help="translation units of the fixture's PyTorch source")
    add_smoke(parser)
    args = parser.parse_args()
    name = NAME
    if args.smoke:  # the fewest units that hold the changed one (unit 7), each of no loops
        args.units, args.weight, name = 8, 0, smoke_name("compile-cache")
    if args.units < 8:
        parser.error("--units: at least 8 (unit 7 is the one that changes)")
    run([*INVOKE, "bootstrap-os", "--suite", "bookworm", "--name", BASE])
    work = work_folder("compile")
    password = "bench-" + uuid.uuid4().hex
    cache = {"TORCHBAKE_PATHS_CACHE_DIR": str(work / "cache")}
    images: list[str] = []
    (work / "srv").mkdir()
    with git_server(work / "srv", auth=f"builder:{password}") as (url, _), redis_store(work / "redis", password) as store, \
            (contextlib.nullcontext() if args.smoke else tls_store("s3", work / "s3", password)) as bucket:
        make_repos(work, url)
        write_large_pytorch(work / "work", work / "srv", run=uuid.uuid4().hex, weight=args.weight,
                           units=args.units)
        profile = work / "fixture.toml"
        profile.write_text(dev_profile(url, supplier="Bench <bench@example.com>", torch=str(make_tiny_torch(work / "torch")),
                                       extension="private/extension-lite", pytorch="pytorch-large", extras=False))
        credentials = work / "git-credentials"
        credentials.write_text(git_credentials(url, password))
        with_store = work / "store.toml"
        with_store.write_text(f'[dev]\ncompile_cache = "{store.url}"\n')
        with_bucket = work / "bucket.toml"  # (none in the smoke run: the Redis store alone)
        # MAX_JOBS 3 for the bucket's builds: the same inputs under another build argument, so that they
        # run (a store is no input of the image: with the same inputs the image is unchanged)
        if bucket:
            with_bucket.write_text(f'[dev]\ncompile_cache = "{bucket.url}"\nmax_jobs = 3\n'
                                   f'[downloads]\nca_bundle = "{bucket.ca}"\n')

        def base(tag: str) -> str:
            run([*INVOKE, "build-base", "--config", str(profile), "--name", f"{name}-base", "--tag", tag,
                 "--sys", BASE, "--python", "3.11"], cache)
            images.append(f"{name}-base:{tag}")
            return images[-1]

        def build(base_image: str, tag: str, *configs: Path, engine: dict | None = None) -> tuple[float, dict]:
            argv = [*INVOKE, "build", "--config", str(profile), *(a for c in configs for a in ("--config", str(c))),
                    "--name", name, "--tag", tag, "--base-img", base_image, "-c", str(credentials), "--no-verify"]
            seconds, stdout = run(argv, {**cache, **(engine or {})})
            if not engine:
                images.append(f"{name}:{tag}")
            return seconds, compiles(stdout)

        try:
            cold_base = base("cold")
            cold, cold_counts = build(cold_base, "cold", with_store)
            rows = [("cold, engine A, filling the S3 bucket (TLS, sccache)", *build(cold_base, "cold", with_bucket))] if bucket else []
            write_large_pytorch(work / "work", work / "srv", changed=7, weight=args.weight, units=args.units)
            changed = base("changed")
            for label, configs in (("fresh engine after one changed file, with the Redis store", (with_store,)),
                                   *([("fresh engine after one changed file, with the S3 bucket", (with_bucket,))] if bucket else []),
                                   *([] if args.smoke else [("fresh engine after one changed file, without either", ())])):
                with start_second_engine(work / f"engine-{len(rows)}") as engine:
                    copy_image(changed, engine)
                    rows.append((label, *build(changed, "changed", *configs, engine=engine)))
        finally:
            subprocess.run([DOCKER, "image", "rm", "--force", *images], capture_output=True)
    units = args.units + 1  # and the module's own file
    print(f"\ndev build of the fixture's PyTorch source ({units} units, weight {args.weight}), 2 cores, this machine's engine:")
    print(f"{'build':<58} {'seconds':>8} {'vs cold':>8} {'torch compiled':>15} {'remote hits':>12}")
    for label, seconds, counts in (("cold, engine A, filling the Redis store (ccache)", cold, cold_counts), *rows):
        torch = counts.get("pytorch", {})
        print(f"{label:<58} {seconds:>8.1f} {seconds / cold:>7.0%} {torch.get('compiled', 0):>9} of {units:<3}"
              f" {torch.get('remote_hits', 0):>12}")


if __name__ == "__main__":
    main()
