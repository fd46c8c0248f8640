#!/usr/bin/env python3
"""Benchmark: `invoke build-all` against a plain `docker build` loop over the same cells.

Side by side in one run, on one engine:
  cold    build-all --force --no-cache (every step of every cell runs)
  no-op   build-all again with nothing changed (every cell skipped by its input hash)
  plain   `docker build` of each cell's prepared context, layer cache warm (what a script that
          always calls docker build pays every night)

The matrix has six cells, as many images as build_all.sh made (3 Pythons x dev/release): a CPU
release cell and five base cells whose contexts hold a generated source tree of realistic size
(30,000 files in 300 folders, like a PyTorch checkout with submodules), found in a source root
at the pinned tags. Targets: no-op < 2% of cold and < 25% of the plain warm loop.
--smoke: two cells (the stand-in torch's release cell on the Debian base with its OS packages in it,
one base cell of 20 source files), the cold build-all with --force alone (the layer cache as it
is: no --no-cache), one no-op and one plain round, images named for the run.
Usage: .venv/bin/python benchmarks/matrix_build.py [--files N] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = "torchbake/debian:bookworm"
sys.path.insert(0, str(ROOT / "benchmarks"))
from _steps import INVOKE, add_smoke, packaged_base, recorded_command, smoke_name, tiny_release_profile, work_folder  # noqa: E402
from _steps import run as run_step  # noqa: E402


def run(argv, env=None, cwd=None) -> float:
    started = time.monotonic()
    result = subprocess.run(argv, env={**os.environ, **(env or {})}, cwd=cwd, capture_output=True, text=True,
                            stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        sys.exit(f"step failed: {shlex.join(map(str, argv))}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return time.monotonic() - started


def git_repo(folder: Path, tag: str, files: int) -> None:
    folder.mkdir(parents=True)
    per_dir = 100
    for index in range(files):
        sub = folder / f"third_party/lib{index // per_dir:03d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"file{index % per_dir}.cpp").write_text(f"// {index}\n" + "int x;\n" * 40)
    env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "bench"], ["tag", tag]):
        run(["git", *args], env=env, cwd=folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=30000, help="files in the generated source tree")
    add_smoke(parser)
    args = parser.parse_args()
    work = work_folder("matrix")
    with contextlib.ExitStack() as stack:
        if args.smoke:
            args.files = 20
            base, release = stack.enter_context(packaged_base(work)), str(tiny_release_profile(work))
            bench(args, work, base, release, smoke_name("matrix"), bases=1, rounds=1, cold=["--force"])
        else:
            bench(args, work, BASE, "cpu", "torchbake-bench", bases=5, rounds=3, cold=["--force", "--no-cache"])


def bench(args: argparse.Namespace, work: Path, BASE: str, release: str, prefix: str, bases: int, rounds: int,  # noqa: N803
          cold: list[str]) -> None:
    """The cells: ``release`` (a profile) and ``bases`` base cells; ``prefix``: the images' names';
    ``cold``: the flags of the cold build-all."""
    env = {"TORCHBAKE_PATHS_CACHE_DIR": str(work / "cache")}
    run([*INVOKE, "bootstrap-os", "--suite", "bookworm", "--name", "torchbake/debian:bookworm"])
    source_root = work / "src"
    git_repo(source_root / "pytorch", "v2.0.0", args.files)
    git_repo(source_root / "vision", "v0.15.2", 50)
    git_repo(source_root / "audio", "v2.0.1", 50)
    profile = work / "bench.toml"
    profile.write_text(f'[sources]\nroot = "{source_root}"\n[base]\nsys = "{BASE}"\nrequirements = ["setuptools"]\ntools = []\n')
    profiles = [profile]
    for index in range(1, bases):  # the same trees, told apart by their video group
        other = work / f"bench{index}.toml"
        other.write_text(profile.read_text() + f"video_gid = {100 + index}\n")
        profiles.append(other)
    matrix = work / "nightly.toml"
    matrix.write_text(
        f'[matrix]\nprofiles = {json.dumps([release, *map(str, profiles)])}\npythons = ["3.11"]\n'
        f'variants = ["base", "release"]\nname = "{prefix}/{{profile}}"\ntag = "{{variant}}-py{{py}}"\n'
        f'exclude = ["{Path(release).stem}-base-*", "bench*-release-*"]\n'
        f'[matrix.options.release]\n"image.base" = "{BASE}"\n'
    )
    cold_label = " ".join(["cold build-all", *cold])  # the flags it ran with: the smoke run's has no --no-cache
    cold = run([*INVOKE, "build-all", "--config", str(matrix), *cold], env=env)
    noop = min(run([*INVOKE, "build-all", "--config", str(matrix)], env=env) for _ in range(rounds))

    # The plain loop: the same cells' contexts, prepared once, then `docker build` with a warm cache.
    commands = []
    release_config = f"configs/{release}.toml" if "/" not in release else release
    for name, argv in [("cpu", ["build", "--config", release_config, "--base-img", BASE])] + [
            (p.stem, ["build-base", "--config", str(p)]) for p in profiles]:
        context = work / f"context-{name}"
        prepared = run_step([*INVOKE, *argv, "--name", f"{prefix}/plain-{name}", "--build-dir", str(context),
                             "--no-verify"], env={**os.environ, **env})
        # the build's command as its manifest records it (the log no longer echoes a `docker build` line)
        argv = recorded_command(prepared.stdout)
        if "--iidfile" in argv:
            cut = argv.index("--iidfile")
            argv = argv[:cut] + argv[cut + 2:]
        commands.append(argv)
    plain = min(sum(run(argv, env={"DOCKER_BUILDKIT": "1"}) for argv in commands) for _ in range(rounds))

    print(f"\ncells: {1 + bases} (one release, {bases} base(s) with {args.files} source files each)")
    print(f"{cold_label:<34}: {cold:7.1f} s")
    print(f"{'no-op build-all (all unchanged)':<34}: {noop:7.1f} s  = {100 * noop / cold:.1f}% of cold (target < 2%)")
    print(f"{'plain docker build loop, warm':<34}: {plain:7.1f} s  -> no-op is {100 * noop / plain:.0f}% of it"
          " (target < 25%)")
    listing = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", f"{prefix}/*"],
                             capture_output=True, text=True).stdout.split()
    for ref in listing:
        subprocess.run(["/usr/bin/docker", "image", "rm", "--force", ref], capture_output=True)


if __name__ == "__main__":
    main()
