#!/usr/bin/env python3
"""Benchmark for "the registry is the shared memory": a nightly on a fresh engine.

Side by side in one run, with Debian's docker-registry on 127.0.0.1 and two engines (this
machine's, A, and a second, empty one, B, without NAT, as a fresh CI runner):

  cold        A: `build-all --force --no-cache --push` of a two-cell release matrix that shares
              torch (the CPU profile with numpy, and one without): what a fresh runner pays
              every night when nothing is remembered
  no change   B (only the OS image loaded): `build-all` with nothing changed; every cell is
              found in the registry (median of --rounds); target <= 5% of cold
  one wheel   B: the lean cell's extension wheel changes: `build-all --push` rebuilds that cell
              with the registry's cache of every step (mode=max); the bytes of layer blobs B pulled and pushed,
              and then what a node that runs yesterday's image (A) pulls to get tonight's (from
              the registry's access log), against torch's layer; target <= 5%

Images it makes on A are removed; B and the registry go with the run.
--smoke: both cells on the stand-in torch, FROM the Debian base with its OS packages in it (B
has it loaded), the cold matrix without --no-cache (A's layer cache as it is: every cell still
built with --force and pushed), one no-change round, names of the run's own.
Usage: .venv/bin/python benchmarks/registry_nightly.py [--rounds N] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support import registry_manifest, registry_requests, serve_registry, start_second_engine  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from _steps import INVOKE, add_smoke, packaged_base, smoke_name, tiny_release_profile, work_folder  # noqa: E402

DOCKER = "/usr/bin/docker"
BASE = "torchbake/debian:bookworm"


def run(argv, env=None, **kwargs) -> tuple[float, str]:
    started = time.monotonic()
    result = subprocess.run(argv, env={**os.environ, **(env or {})}, capture_output=True, text=True, cwd=ROOT,
                            stdin=subprocess.DEVNULL, **kwargs)
    if result.returncode != 0:
        sys.exit(f"step failed: {' '.join(map(str, argv))}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return time.monotonic() - started, result.stdout


def extension_wheel(folder: Path) -> Path:
    path = folder / "bench_ext-2.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("bench_ext/__init__.py", "VERSION = '2.0'\n")
        zf.writestr("bench_ext-2.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: bench-ext\nVersion: 2.0\n")
        zf.writestr("bench_ext-2.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr("bench_ext-2.0.dist-info/RECORD", "")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the no-change run to take the median of")
    add_smoke(parser)
    args = parser.parse_args()
    work = work_folder("registry")
    with contextlib.ExitStack() as stack:
        if args.smoke:
            args.rounds = 1
            tiny = tiny_release_profile(work)
            bench(args, work, stack.enter_context(packaged_base(work)), str(tiny), tiny.read_text(), smoke_name("nightly"),
                  cold_flags=["--force", "--push"])
        else:
            run([*INVOKE, "bootstrap-os", "--suite", "bookworm", "--name", BASE])
            bench(args, work, BASE, "cpu", '[python]\nversion = "3.11"\n[wheels]\ntorch = "torch==2.13.0"\nextra = []\n'
                  '[build]\nvariant = "release"\n', "torchbake-bench")


def bench(args: argparse.Namespace, work: Path, BASE: str, first: str, lean_text: str, prefix: str,  # noqa: N803
          cold_flags: tuple[str, ...] | list[str] = ("--force", "--no-cache", "--push")) -> None:
    """The two cells: the profile ``first``, and a lean one (``lean_text``) whose extension changes;
    ``cold_flags``: the cold build-all's."""
    lean = work / "lean.toml"
    lean.write_text(lean_text)
    log = work / "registry-access.log"
    images: list[str] = []
    with serve_registry(work, log) as host, start_second_engine(work) as engine_b:
        matrix = work / "nightly.toml"
        matrix.write_text(
            f'[matrix]\nprofiles = ["{first}", "{lean}"]\npythons = ["3.11"]\nvariants = ["release"]\n'
            f'registry = "{host}/bench"\nname = "{{registry}}{prefix}/{{profile}}"\ntag = "{{variant}}-py{{py}}"\n'
            f'[matrix.options.release]\n"image.base" = "{BASE}"\n')
        try:
            cold, _ = run([*INVOKE, "build-all", "--config", str(matrix), *cold_flags, "--report", str(work / "a.json")])
            images = [c["image"] for c in json.loads((work / "a.json").read_text())["cells"]]
            torch_bytes = max(layer["size"] for layer in registry_manifest(host, images[0])["layers"])  # compressed, as shipped
            layer_blobs = {layer["digest"] for image in images for layer in registry_manifest(host, image)["layers"]}
            lean_manifest = registry_manifest(host, images[1])
            base_layers = lean_manifest["layers"][:1]  # the OS image's one layer: B has it loaded

            saved = subprocess.run([DOCKER, "save", BASE], capture_output=True, check=True).stdout
            subprocess.run([DOCKER, "load"], input=saved, capture_output=True, check=True, env={**os.environ, **engine_b})
            mark = log.stat().st_size
            nothing = []
            for _ in range(args.rounds):
                seconds, out = run([*INVOKE, "build-all", "--config", str(matrix), "--report", str(work / "b.json")], engine_b)
                states = {c["status"] for c in json.loads((work / "b.json").read_text())["cells"]}
                if states != {"unchanged (registry)"}:
                    sys.exit(f"the fresh engine did not find every cell in the registry: {states}\n{out[-3000:]}")
                nothing.append(seconds)
            pulled_on_noop = sum(n for m, p, n in registry_requests(log, mark) if m == "GET" and p.rsplit("/", 1)[1] in layer_blobs)

            lean.write_text(lean_text.replace("extra = []\n", f'extra = []\nextension = "{extension_wheel(work)}"\n'))
            mark = log.stat().st_size
            changed, _ = run([*INVOKE, "build-all", "--config", str(matrix), "--push", "--report", str(work / "c.json")],
                             engine_b)
            after = registry_requests(log, mark)
            pulled = sum(n for m, p, n in after if m == "GET" and "/blobs/sha256:" in p and p.rsplit("/", 1)[1] in layer_blobs)
            fetches = [p.rsplit("/", 1)[1] for m, p, _n in after if m == "GET" and "/blobs/sha256:" in p
                       and p.rsplit("/", 1)[1] in layer_blobs]
            new = registry_manifest(host, images[1])
            sizes = {layer["digest"]: layer["size"] for layer in new["layers"]}
            old_layers = [layer["digest"] for layer in lean_manifest["layers"]]
            kept = [d for d in old_layers if d in sizes]  # the layers below the change: the same blobs
            base_blobs = {layer["digest"] for layer in base_layers}
            below = sum(sizes[d] for d in kept if d not in base_blobs)  # what the changed step runs on
            pushed_digests = {urllib.parse.unquote(p.split("digest=", 1)[1].split("&", 1)[0])
                              for m, p, _n in after if m == "PUT" and "digest=" in p}
            pushed = sum(sizes.get(d, 0) for d in pushed_digests)
            # a node that runs yesterday's image (engine A has it) pulls tonight's
            mark = log.stat().st_size
            run([DOCKER, "pull", images[1]])
            node_pulled = sum(n for m, p, n in registry_requests(log, mark) if m == "GET" and "/blobs/sha256:" in p
                              and p.rsplit("/", 1)[1] in sizes)
        finally:
            for image in images:
                subprocess.run([DOCKER, "image", "rm", "--force", image], capture_output=True)

    noop = statistics.median(nothing)
    print(f"{'case':<66} {'figure':>12}  target")
    print(f"{'cold matrix on A (2 release cells, ' + ' '.join(cold_flags) + ')':<66} {cold:>11.1f}s")
    print(f"{'nothing changed, fresh engine B (median; runs: ' + ', '.join(f'{t:.1f}' for t in nothing) + ')':<66}"
          f" {noop:>11.2f}s  {100 * noop / cold:.1f}% of cold (<= 5%)")
    print(f"{'  layer bytes pulled by it':<66} {pulled_on_noop:>11d}B")
    print(f"{'one extension wheel changed, B rebuilds and pushes that cell':<66} {changed:>11.1f}s")
    print(f"{'torch layer (compressed, as the registry holds it)':<66} {torch_bytes / 1e6:>10.1f}MB")
    print(f"{'  layer bytes pulled by B':<66} {pulled / 1e6:>10.2f}MB  {100 * pulled / torch_bytes:.2f}% of torch's (<= 5%)")
    print(f"{'  layers below the change (the changed step runs on them), base excluded':<66} {below / 1e6:>10.2f}MB"
          f"  B pulled {100 * pulled / max(below, 1):.1f}% of that; {len(fetches)} fetches of {len(set(fetches))} blobs")
    print(f"{'  layer bytes pushed by B':<66} {pushed / 1e6:>10.3f}MB  {100 * pushed / torch_bytes:.3f}% of torch's (<= 5%)")
    print(f"{'  layer bytes a node with yesterday image pulls for it':<66} {node_pulled / 1e6:>10.3f}MB  "
          f"{100 * node_pulled / torch_bytes:.3f}% of torch's (<= 5%)")


if __name__ == "__main__":
    main()
