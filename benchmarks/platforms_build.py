#!/usr/bin/env python3
"""Benchmark: an arm64 release image built on this amd64 host, against the amd64 one and against
a naive emulated build of the same wheels.

Side by side in one run, on this engine, from one base image holding both platforms (made once by
`invoke bootstrap-os --platform amd64,arm64 --include <the OS packages a release needs>`: its
emulated cost is paid there, once, and reported), each with --no-cache so that every step runs:

  amd64   `invoke build --platform linux/amd64`: wheels, OS step, verify, all native
  arm64   `invoke build --platform linux/arm64`: the wheels unpacked on this machine (the
          installer stage runs on the build platform), the venv and verify emulated by QEMU
  naive   `docker buildx build --platform linux/arm64` of a Dockerfile that creates the venv and
          `pip install`s the same aarch64 wheels from a folder, all under QEMU (what a team
          without torchbake writes)

The wheels: a stand-in torch (the real aarch64 torch 2.13.0 wheel is a CUDA build whose
dependencies do not install here) and the real numpy, scipy, pandas and pyarrow wheels of each
machine (112 MB of wheels, about 400 MB installed: a CPU torch's order of size), resolved on the
host (no index is asked inside a build).

Then "new torch": the same two builds after the stand-in torch changed (a new version), with the
layer cache warm: the nightly's usual case, where only the wheels' layers, the record of what is
installed and verify run again.

Prints each round's seconds (the whole `invoke build`, and its manifest's "build" phase: the
`docker buildx build` alone, without verify, which runs the image's pip under QEMU), the medians
and the ratios arm64/amd64 and arm64/naive (goals: at most 1.5 and 0.25). Images it makes are removed; the base image is kept for the next run.
--smoke: the stand-in torch alone (no companions: nothing downloaded), one round, the layer cache
as it is (no --no-cache), no "new torch" pair (the same builds of another wheel: the emulated steps
after the wheels run in tests/e2e/test_platforms.py's two-platform image every run), names of the
run's own; the two-platform base is the test suite's (tests/e2e/test_platforms.py's MULTI_BASE, the
same OS packages, made once per engine and kept) where this engine has it, else this benchmark's
where it has that, else the suite's is made under its name and lock, as its test would (the
minutes of an emulated debootstrap, once per engine; a tag of the run's own on it meanwhile).
Usage: .venv/bin/python benchmarks/platforms_build.py [--rounds N] [--smoke]
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
import tempfile
import time
import zipfile
from pathlib import Path

from _steps import INVOKE, add_smoke, run, smoke_name, timed  # benchmarks/_steps.py, beside this script

from tests.leftovers import host_lock  # (the checkout on sys.path: _steps put it there)

ROOT = Path(__file__).resolve().parent.parent
DOCKER = "/usr/bin/docker"
BASE = "torchbake-bench/debian:bookworm-multi"
SUITE_BASE = "torchbake-test/debian:bookworm-multi"  # tests/e2e/test_platforms.py's MULTI_BASE: the same packages
SUITE_BASE_LOCK = host_lock("multi-base")  # and the lock its fixture makes it under
NAME = "torchbake-bench/platforms"
RUNTIME_PACKAGES = "ca-certificates,tar,gzip,xz-utils,bzip2,procps,python3,python3-venv"
COMPANIONS = ("numpy==2.4.6", "scipy==1.17.1", "pandas==3.1.1", "pyarrow==26.0.1")


def build_phase(output: str) -> float:
    """The seconds of the `docker buildx build` in torchbake's build (its manifest's phases)."""
    manifest = re.search(r"manifest: (\S+\.manifest\.json)\)", output)
    if manifest is None:
        sys.exit(f"no manifest path in torchbake's output:\n{output[-2000:]}")
    return float(json.loads(Path(manifest.group(1)).read_text())["seconds"]["build"])


def stand_in_torch(folder: Path, local: str = "bench") -> Path:
    """A real wheel of a stand-in torch 2.13.0+LOCAL (what verify reads: its version, torch.cuda)."""
    version = f"2.13.0+{local}"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"torch-{version}-py3-none-any.whl"
    files = {"torch/__init__.py": f"__version__ = {version!r}\nfrom . import cuda, version\n",
             "torch/version.py": f"__version__ = {version!r}\ncuda = None\nhip = None\ngit_version = 'bench'\n",
             "torch/cuda.py": "def is_available():\n    return False\n\n\ndef get_arch_list():\n    return []\n"}
    info = f"torch-{version}.dist-info"
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n"
    files[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():  # the same bytes for the same LOCAL: the layer cache may keep its steps
            archive.writestr(zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0)), text)
    return wheel


def kept(image: str) -> bool:
    """Whether the engine holds ``image`` as a two-platform base with the OS packages in it."""
    labels = subprocess.run([DOCKER, "image", "inspect", "--format", "{{json .Config.Labels}}", image],
                            capture_output=True, text=True).stdout
    return "linux/amd64,linux/arm64" in labels and RUNTIME_PACKAGES in labels


def ensure_base(base: str = BASE) -> float:
    """The two-platform base ``base`` with the OS packages in it: its making's seconds (0 when kept)."""
    if kept(base):
        return 0.0
    return timed([*INVOKE, "bootstrap-os", "--suite", "bookworm", "--name", base, "--force",
                  "--platform", "amd64,arm64", "--include", RUNTIME_PACKAGES])


@contextlib.contextmanager
def smoke_base(name: str):
    """(the smoke run's name for the two-platform base, its making's seconds): the suite's base or
    this benchmark's, whichever the engine holds (the suite's made, under its lock, when neither),
    tagged with ``name`` for the run (that tag removed at the end, the base kept)."""
    import filelock

    with filelock.FileLock(SUITE_BASE_LOCK):
        source = BASE if kept(BASE) and not kept(SUITE_BASE) else SUITE_BASE
        made = ensure_base(source)
        run([DOCKER, "tag", source, name])
    try:
        yield name, made, source
    finally:
        subprocess.run([DOCKER, "image", "rm", name], capture_output=True)


def naive_context(folder: Path, torch: Path, COMPANIONS: tuple[str, ...] = COMPANIONS, BASE: str = BASE) -> Path:  # noqa: N803
    """A Dockerfile that installs the aarch64 wheels with pip inside the emulated image (FROM ``BASE``)."""
    context = folder / "naive"
    imports = [name for name in ("numpy", "scipy") if any(c.startswith(f"{name}==") for c in COMPANIONS)]
    wheels = context / "wheels"
    wheels.mkdir(parents=True)
    if COMPANIONS:
        run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--platform",
             "manylinux_2_28_aarch64", "--python-version", "3.11", "--dest", str(wheels), *COMPANIONS])
    (wheels / torch.name).write_bytes(torch.read_bytes())
    (context / "Dockerfile").write_text(
        f"FROM {BASE}\nCOPY wheels /tmp/wheels\n"
        "RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install --no-index --find-links /tmp/wheels"
        f" torch {' '.join(COMPANIONS)} && /opt/venv/bin/python -c 'import {', '.join(['torch', *imports])}'\n")
    return context


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    add_smoke(parser)
    args = parser.parse_args()
    companions, name = ((), smoke_name("platforms")) if args.smoke else (COMPANIONS, NAME)
    args.rounds = 1 if args.smoke else args.rounds
    with contextlib.ExitStack() as stack:
        if args.smoke:
            base, made, source = stack.enter_context(smoke_base(smoke_name("base") + ":multi"))
        else:
            base, made, source = BASE, ensure_base(), BASE
        print(f"base {source} (amd64 + arm64, {RUNTIME_PACKAGES}): {'kept' if not made else f'made in {made:.0f} s'}")
        bench(args, companions, name, base, [] if args.smoke else ["--no-cache"], new_torch=not args.smoke)


def bench(args: argparse.Namespace, companions: tuple[str, ...], name: str, BASE: str, cold: list[str],  # noqa: N803
          new_torch: bool = True) -> None:
    """The rounds and the table, FROM ``BASE`` (``cold``: the flags of the cold builds; ``new_torch``:
    the two builds of a torch no run built before, too)."""
    cases = ("amd64 new torch", "arm64 new torch") if new_torch else ()
    seconds: dict[str, list[float]] = {kind: [] for kind in ("amd64", "arm64", "naive", *cases)}
    phases: dict[str, list[float]] = {kind: [] for kind in seconds if kind != "naive"}
    with tempfile.TemporaryDirectory(prefix="torchbake-bench-platforms-") as folder:
        context = naive_context(Path(folder), stand_in_torch(Path(folder) / "torch"), companions, BASE)

        def build(arch: str, local: str, kind: str, *flags: str) -> float:
            profile = Path(folder) / f"{local}.toml"
            torch = stand_in_torch(Path(folder) / local, local)
            profile.write_text(f'[python]\nversion = "3.11"\n[wheels]\ntorch = "{torch}"\n'
                               f'extra = {list(companions)!r}\n[build]\nvariant = "release"\n'.replace("'", '"'))
            started = time.monotonic()
            done = run([*INVOKE, "build", "--config", str(profile), "--name", name, "--tag", arch, "--base-img",
                        BASE, "--platform", f"linux/{arch}", "--force", *flags])
            phases[kind].append(build_phase(done.stdout))
            return time.monotonic() - started

        try:
            for round_number in range(1, args.rounds + 1):
                for arch in ("amd64", "arm64"):
                    seconds[arch].append(build(arch, "bench", arch, *cold))
                seconds["naive"].append(timed([DOCKER, "buildx", "build", *cold, "--platform", "linux/arm64",
                                               "--progress=plain", "--tag", f"{name}:naive", str(context)]))
                new = f"bench{os.getpid()}x{round_number}"  # a torch no run before built: nothing cached for it
                for arch in ("amd64", "arm64") if new_torch else ():
                    seconds[f"{arch} new torch"].append(build(arch, new, f"{arch} new torch"))
                print(f"round {round_number}: " + ", ".join(
                    f"{kind} {values[-1]:.1f} s" + (f" (build {phases[kind][-1]:.1f} s)" if kind in phases else "")
                    for kind, values in seconds.items()))
        finally:
            for tag in ("amd64", "arm64", "naive"):
                subprocess.run([DOCKER, "image", "rm", "--force", f"{name}:{tag}"], capture_output=True)
    median = {kind: statistics.median(values) for kind, values in seconds.items()}
    print("median seconds: " + ", ".join(f"{kind} {value:.1f}" for kind, value in median.items()))
    built = {kind: statistics.median(values) for kind, values in phases.items()}
    print("median build phase: " + ", ".join(f"{kind} {value:.1f}" for kind, value in built.items()))
    for case, suffix in (("cold", ""), *([("new torch", " new torch")] if new_torch else [])):
        print(f"{case}: arm64 / amd64 = {median['arm64' + suffix] / median['amd64' + suffix]:.2f} in all,"
              f" {built['arm64' + suffix] / built['amd64' + suffix]:.2f} for the build alone (goal <= 1.5)")
    print(f"cold: arm64 / naive emulated = {median['arm64'] / median['naive']:.2f} in all,"
          f" {built['arm64'] / median['naive']:.2f} for the build alone (goal <= 0.25)")


if __name__ == "__main__":
    main()
