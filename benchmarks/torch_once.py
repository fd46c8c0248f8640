#!/usr/bin/env python3
"""Benchmark for "torch shipped once": uv against pip, unchanged builds, bytes a sibling ships.

Side by side in one run, on the same engine and base image (the CPU profile: torch 2.13.0 +
numpy on Debian bookworm):

  cold build    torchbake (uv) against a plain `docker build` of the same Dockerfile and context
                with INSTALLER=pip, both --no-cache, alternating (median of --rounds each)
  unchanged     `invoke build` again with nothing changed (median of --rounds)
  sibling       bytes of the new layers of an image with one more companion (pyyaml), and of one
                whose extension wheel changed, against the bytes of torch's layer
  import torch  `import torch` timed inside a fresh container of the uv-installed and of the
                pip-installed image, alternating (median of 2 x --rounds each)

It empties the engine's build cache first (`docker builder prune --all`): a cache that holds two
records of one step (every --no-cache build leaves one more) lets BuildKit take either, and two
siblings built from it may then not share their layers. Images it makes are removed.
The plain build gives the build arguments a user of this machine types (_steps.plain_build_args).
--smoke: the stand-in torch on the Debian base with its OS packages in it, wheels of a few bytes
for the companion and the extension, one round, the layer cache as it is (no prune, no --no-cache);
the first image already holds the extension's first version (its build is the one the changed
wheel is measured against: one build fewer), one import of each image.
Usage: .venv/bin/python benchmarks/torch_once.py [--rounds N] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # torchbake's own engine helpers, as the checkout has them
sys.path.insert(0, str(ROOT / "benchmarks"))
from _steps import INVOKE, add_smoke, packaged_base, plain_build_args, smoke_name, tiny_release_profile, work_folder  # noqa: E402

DOCKER = "/usr/bin/docker"
BASE = "torchbake/debian:bookworm"


def run(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    started = time.monotonic()
    result = subprocess.run(argv, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                            stdin=subprocess.DEVNULL, cwd=ROOT)
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        sys.exit(f"benchmark step failed: {' '.join(argv)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return elapsed, result.stdout


def layers(image: str) -> list[tuple[str, int]]:
    """(diff id, bytes) per layer, oldest first, as the engine says (its image history matched to
    the layers, torchbake.supply_chain.inventory.layers_of): never read from the engine's files, which the
    containerd image store lays out differently from the graph drivers'."""
    import docker as docker_sdk

    from torchbake.supply_chain.inventory import layers_of

    class Engine:
        api = docker_sdk.from_env(timeout=300).api

        def history(self, reference: str) -> list[dict]:
            return self.api.history(reference)

    engine = Engine()
    found = layers_of(engine, image, engine.api.inspect_image(image))
    if any(layer.size < 0 for layer in found):
        sys.exit(f"benchmark: the engine's history of {image} does not match its layers; no sizes to compare")
    return [(layer.diff_id, layer.size) for layer in found]


def new_bytes(image: str, other: str) -> int:
    mine, theirs = layers(image), layers(other)
    shared = 0
    while shared < min(len(mine), len(theirs)) and mine[shared][0] == theirs[shared][0]:
        shared += 1
    return sum(size for _, size in mine[shared:])


def extension_wheel(folder: Path, version: str, project: str = "bench-ext") -> Path:
    module = project.replace("-", "_")
    dist = f"{module}-{version}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{module}/__init__.py", f"VERSION = {version!r}\n")
        zf.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n")
        zf.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{dist}.dist-info/RECORD", "")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds to take the median of")
    add_smoke(parser)
    args = parser.parse_args()
    work = work_folder("torch-once")
    with contextlib.ExitStack() as stack:
        if args.smoke:
            args.rounds, name = 1, smoke_name("once")
            base, tiny, cold = stack.enter_context(packaged_base(work)), tiny_release_profile(work), []
            # the first image with the extension's first version: the changed wheel's build is measured against it
            tiny.write_text(tiny.read_text().replace("[wheels]\n", f'[wheels]\nextension = "{extension_wheel(work, "1.0.0")}"\n', 1))
            extra, companions, profile = "[]", f'["{extension_wheel(work / "companion", "1.0.0", "bench-yaml")}"]', str(tiny)
        else:
            run([*INVOKE, "bootstrap-os", "--suite", "bookworm", "--name", BASE])
            run([DOCKER, "builder", "prune", "--all", "--force"])
            name, base, profile, cold = "torchbake-bench/once", BASE, "configs/cpu.toml", ["--no-cache"]
            extra, companions = '["numpy"]', '["numpy", "pyyaml"]'
        compare(args, work, name, base, profile, cold, extra, companions)


def compare(args: argparse.Namespace, work: Path, NAME: str, BASE: str, profile: str, cold: list[str],  # noqa: N803
            extra: str, companions: str) -> None:
    """The builds and the table (``cold``: the flags of a cold build; ``extra``: the profile's
    [wheels] extra, TOML; ``companions``: the sibling's, one more). A profile that already names
    the extension's wheel 1.0.0 (the smoke run's) is its own first-version build."""
    made = []
    holds_first = f'extension = "{work / "bench_ext-1.0.0-py3-none-any.whl"}"' in Path(profile).read_text()

    def build(tag: str, *extra: str, config: str = "") -> float:
        flags = []
        if config:
            (work / f"{tag}.toml").write_text(config)
            flags = ["--config", str(work / f"{tag}.toml")]
        made.append(f"{NAME}:{tag}")
        return run([*INVOKE, "build", "--config", profile, *flags, "--base-img", BASE, "--name", NAME,
                    "--tag", tag, *extra])[0]

    try:
        context = work / "context"
        build("uv", "--build-dir", str(context), "--no-verify")  # prepares the context, warms the caches
        # Siblings first, while the layer cache holds one torch step: the --no-cache rounds below
        # each leave another one behind (the same files, a different layer).
        torch_bytes = max(size for _, size in layers(f"{NAME}:uv"))
        build("yaml", "--no-verify", config=f'[wheels]\nextra = {companions}\n')
        sibling = new_bytes(f"{NAME}:yaml", f"{NAME}:uv")
        for version in ("1.0.1",) if holds_first else ("1.0.0", "1.0.1"):
            wheel = extension_wheel(work, version)
            build(f"ext{version}", "--no-verify", config=f'[wheels]\nextension = "{wheel}"\nextra = {extra}\n')
        extension = new_bytes(f"{NAME}:ext1.0.1", f"{NAME}:uv" if holds_first else f"{NAME}:ext1.0.0")
        plain = [DOCKER, "build", "--progress=plain", *cold, "-f", str(context / "Dockerfile"), "-t",
                 f"{NAME}:pip", "--build-arg", f"BASE_IMAGE={BASE}", "--build-arg", "PYTHON_VERSION=3.11",
                 "--build-arg", "INSTALLER=pip", "--build-arg", "KEEP_UV=0", *plain_build_args(context), str(context)]
        made.append(f"{NAME}:pip")
        colds: dict[str, list[float]] = {"uv": [], "pip": []}
        for index in range(args.rounds):  # alternating, so that neither goes first every time
            for kind in ("uv", "pip") if index % 2 else ("pip", "uv"):
                # as on a fresh machine: no image of that name to look at or replace (not timed)
                subprocess.run([DOCKER, "image", "rm", "--force", f"{NAME}:{kind}"], capture_output=True)
                colds[kind].append(run(plain, {"DOCKER_BUILDKIT": "1"})[0] if kind == "pip" else
                                   build("uv", "--build-dir", str(context), "--no-prepare", *cold, "--no-verify"))
        pip_cold, uv_cold = statistics.median(colds["pip"]), statistics.median(colds["uv"])
        unchanged = statistics.median(build("uv")
                                      for _ in range(args.rounds))
        history = run([DOCKER, "history", "--no-trunc", "--format", "{{.Size}}\t{{.CreatedBy}}", f"{NAME}:uv"])[1]
        imports: dict[str, list[float]] = {"uv": [], "pip": []}
        timer = "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"
        for index in range(1 if args.smoke else 2 * args.rounds):  # alternating, so that neither goes first every time
            for tag in ("uv", "pip") if index % 2 else ("pip", "uv"):
                out = run([DOCKER, "run", "--rm", "--network", "none", f"{NAME}:{tag}", "python", "-c", timer])[1]
                imports[tag].append(float(out))
    finally:
        for image in made:
            subprocess.run([DOCKER, "image", "rm", "--force", image], capture_output=True)

    print("layers of the uv-installed image (newest first):")
    for line in history.splitlines():
        size, created_by = line.split("\t", 1)
        if size not in ("0B", "0"):
            print(f"  {size:>9}  {created_by[:110]}")
    print(f"\n{'case':<58} {'figure':>12}  target")
    for kind, label in (("pip", "plain docker build, pip (--no-cache)"), ("uv", "torchbake, uv (--no-cache --no-prepare)")):
        print(f"{'cold build: ' + label + ' (median)':<58} {statistics.median(colds[kind]):>11.1f}s  "
              f"runs: {', '.join(f'{t:.1f}' for t in colds[kind])}")
    print(f"{'  ratio':<58} {uv_cold / pip_cold:>11.2f}x  <= 0.7x")
    print(f"{'unchanged invoke build (median)':<58} {unchanged:>11.2f}s  <= 0.5 s")
    print(f"{'torch layer':<58} {torch_bytes / 1e6:>10.1f}MB")
    print(f"{'new layer bytes, sibling with pyyaml':<58} {sibling / 1e6:>10.2f}MB  {100 * sibling / torch_bytes:.2f}%"
          " of torch's (<= 1%)")
    print(f"{'new layer bytes, changed extension wheel':<58} {extension / 1e6:>10.2f}MB  "
          f"{100 * extension / torch_bytes:.2f}% of torch's (<= 1%)")
    for tag in ("uv", "pip"):
        print(f"{'import torch in a fresh container, ' + tag + '-installed (median)':<58}"
              f" {statistics.median(imports[tag]):>11.3f}s")


if __name__ == "__main__":
    main()
