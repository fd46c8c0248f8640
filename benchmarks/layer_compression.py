#!/usr/bin/env python3
"""Benchmark: what the layers' compression costs a build on the containerd image store.

The CPU release context (torch 2.13.0 + numpy on Debian bookworm) is prepared once by torchbake
(`--build-dir`); then the exact `docker buildx build` command torchbake recorded for it runs with
--no-cache (every step runs, every layer is new and compressed), three ways taking turns:

  plain   `--load`: what a plain `docker build` does (gzip, Docker schema 2 media types)
  gzip    torchbake with `[build] compression = "gzip"`
  zstd    torchbake's default, `[build] compression = "zstd"`

Prints each build's seconds and the exporter's own ("exporting layers … done"), the medians'
ratios against plain, and the compressed size of the layers each made (`docker save`).
Images it makes are removed.
--smoke: the stand-in torch on the Debian base with its OS packages in it, one round, the layer
cache as it is (no --no-cache: the exporter still compresses every layer, force-compression).
Usage: .venv/bin/python benchmarks/layer_compression.py [--rounds N] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _steps import INVOKE, add_smoke, packaged_base, recorded_command, smoke_name, tiny_release_profile  # noqa: E402

from torchbake.adapters.docker_cli import DockerCLI  # noqa: E402

DOCKER = "/usr/bin/docker"
BASE = "torchbake/debian:bookworm"
NAME = "torchbake-bench/compression"
KINDS = {"plain": "--load",
         "gzip": DockerCLI(DOCKER, "", "buildx", compression="gzip").output_flag(),
         "zstd": DockerCLI(DOCKER, "", "buildx", compression="zstd").output_flag()}


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=os.environ)
    if result.returncode != 0:
        sys.exit(f"benchmark step failed: {' '.join(argv)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def layer_bytes(image: str) -> int:
    """The compressed size of the image's layers, as `docker save` holds them."""
    with tempfile.TemporaryFile() as saved:
        subprocess.run([DOCKER, "save", image], stdout=saved, check=True)
        saved.seek(0)
        with tarfile.open(fileobj=saved) as archive:
            manifest = json.load(archive.extractfile("manifest.json"))
            return sum(archive.getmember(path).size for path in manifest[0]["Layers"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds of plain, gzip, zstd (medians are shown)")
    add_smoke(parser)
    args = parser.parse_args()
    name, cold = (smoke_name("compression"), []) if args.smoke else (NAME, ["--no-cache"])
    args.rounds = 1 if args.smoke else args.rounds
    seconds: dict[str, list[float]] = {kind: [] for kind in KINDS}
    exports: dict[str, list[float]] = {kind: [] for kind in KINDS}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="torchbake-compression-") as folder, contextlib.ExitStack() as stack:
        if args.smoke:
            base = stack.enter_context(packaged_base(Path(folder) / "smoke"))
            profile = ["--config", str(tiny_release_profile(Path(folder) / "smoke"))]
        else:
            base, profile = BASE, ["--release"]
        prepared = run([*INVOKE, "build", *profile, "--name", name, "--tag", "prepared", "--base-img", base,
                        "--build-dir", str(Path(folder) / "context"), "--no-verify", "--force"])
        argv = recorded_command(prepared.stdout)
        output_at = next(i for i, arg in enumerate(argv) if arg.startswith("--output=") or arg == "--load")
        tag_at = argv.index("--tag") + 1
        try:
            for _ in range(args.rounds):  # taking turns: the machine's load drifts
                for kind, flag in KINDS.items():
                    command = [*argv[:output_at], flag, *cold, *argv[output_at + 1:]]
                    command[tag_at + len(cold)] = f"{name}:{kind}"  # --no-cache went in before it
                    started = time.monotonic()
                    result = run(command)
                    seconds[kind].append(time.monotonic() - started)
                    took = re.findall(r"exporting layers ([\d.]+)s done", result.stdout + result.stderr)
                    exports[kind].append(float(took[-1]) if took else 0.0)
            for kind in KINDS:
                sizes[kind] = layer_bytes(f"{name}:{kind}")
        finally:
            for tag in (*KINDS, "prepared"):
                subprocess.run([DOCKER, "image", "rm", "--force", f"{name}:{tag}"], capture_output=True, check=False)
    plain = statistics.median(seconds["plain"])
    print(f"{'build (--no-cache)':<20} {'runs (s)':<20} {'median':>7} {'vs plain':>9} {'export (s)':>16} {'layers':>10}")
    for kind, runs in seconds.items():
        print(f"{kind:<20} {', '.join(f'{r:.1f}' for r in runs):<20} {statistics.median(runs):7.1f}"
              f" {statistics.median(runs) / plain:8.2f}x {', '.join(f'{e:.1f}' for e in exports[kind]):>16}"
              f" {sizes[kind] / 1e6:8.1f}MB")


if __name__ == "__main__":
    main()
