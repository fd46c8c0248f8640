#!/usr/bin/env python3
"""Benchmark on a real PyTorch C++ extension nobody here wrote: a dev image whose base holds the
real torch CPU wheel (`--torch-wheel`, default: pip's find-links folder's torch-2.13.0+cpu for
Python 3.11) compiles `--extension` (default torchsort==0.1.9, a C++ extension built with
torch.utils.cpp_extension and published as a source distribution) from its sdist, found on the
configured indexes on the host, against that torch with --no-build-isolation; then the image
imports and calls it.

Prints the base's and the dev build's seconds, what the extension's compile step counted
(compiler calls, seconds) and the call's answer. The PyTorch source the dev build also compiles
is the small fixture (tests/e2e/fixture_repos: PyTorch publishes no sdist and its repository is
too large to bring here). Images are removed at the end.
Usage: .venv/bin/python benchmarks/real_extension.py [--torch-wheel PATH] [--extension REQ]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _steps import BOOKWORM as BASE  # noqa: E402
from _steps import DOCKER, INVOKE, ROOT, run  # noqa: E402

from tests.e2e.fixture_repos import dev_profile, git_credentials, make_repos  # noqa: E402
from tests.support import git_server  # noqa: E402

NAME = "torchbake-bench/real-extension"
CALLS = {"torchsort": "import torch, torchsort; print(torchsort.soft_rank(torch.tensor([[8., 1., 5.]])).tolist())"}


def find_links_torch() -> str:
    """The torch CPU wheel for Python 3.11 in pip's find-links folders ("" where none is)."""
    folders = os.environ.get("PIP_FIND_LINKS", "") or subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.find-links"], capture_output=True, text=True).stdout
    for folder in folders.split():
        found = sorted(glob.glob(os.path.join(folder, "torch-2.*+cpu-cp311-cp311-manylinux*_x86_64.whl")))
        if found:
            return found[-1]
    return ""


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.monotonic()
    stdout = run(argv, env=env, cwd=ROOT).stdout
    return time.monotonic() - started, stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--torch-wheel", default="", help="the real torch wheel the base installs (default: find-links')")
    parser.add_argument("--extension", default="torchsort==0.1.9", help="a PyTorch C++ extension published as an sdist")
    args = parser.parse_args()
    wheel = args.torch_wheel or find_links_torch()
    if not wheel or not Path(wheel).is_file():
        parser.error("no torch CPU wheel for Python 3.11 found: give --torch-wheel PATH")
    project = re.split(r"[=<>!~ \[]", args.extension, maxsplit=1)[0].lower()
    run([*INVOKE, "bootstrap-os", "--suite", "bookworm", "--name", BASE], cwd=ROOT)
    work = Path(tempfile.mkdtemp(prefix="torchbake-real-extension-bench-"))
    env = {**os.environ, "TORCHBAKE_PATHS_CACHE_DIR": str(work / "cache")}
    tag = uuid.uuid4().hex[:8]
    base, image = f"{NAME}-base:{tag}", f"{NAME}:{tag}"
    password = "bench-" + uuid.uuid4().hex
    (work / "srv").mkdir()
    try:
        with git_server(work / "srv", auth=f"builder:{password}") as (url, _):
            make_repos(work, url)
            profile = work / "real.toml"
            profile.write_text(dev_profile(url, supplier="Bench <bench@example.com>", torch=wheel,
                                           extension="private/extension-lite", extras=False)
                               .replace("[dev]\n", f'[dev]\nextensions = ["{args.extension}"]\n', 1))
            (work / "git-credentials").write_text(git_credentials(url, password))
            base_seconds, _ = timed([*INVOKE, "build-base", "--config", str(profile), "--name", f"{NAME}-base",
                                     "--tag", tag, "--sys", BASE, "--python", "3.11"], env)
            dev_seconds, stdout = timed([*INVOKE, "build", "--config", str(profile), "--name", NAME, "--tag", tag,
                                         "--base-img", base, "-c", str(work / "git-credentials")], env)
        manifest = re.search(r"manifest: (\S+)\)", stdout)
        record = json.loads(Path(manifest.group(1)).read_text()) if manifest else {}
        call = CALLS.get(project, f"import torch, {project.replace('-', '_')}; print('imported')")
        answer = run([DOCKER, "run", "--rm", image, "python", "-c", call]).stdout.strip()
        compiled = re.search(r"^Compiled: .*$", stdout, re.M)
    finally:
        subprocess.run([DOCKER, "image", "rm", "--force", base, image], capture_output=True)
    print(f"\n{args.extension} from its sdist against {Path(wheel).name}, {os.cpu_count()} cores, this machine's engine:")
    print(f"base image (the real torch wheel installed): {base_seconds:.1f} s")
    print(f"dev build (fixture PyTorch source, {args.extension}, verify): {dev_seconds:.1f} s")
    print(compiled.group(0) if compiled else "Compiled: (no line)")
    print(f"progress recorded: {json.dumps(record.get('compile_progress', {}))}")
    print(f"in the image: {call}\n  -> {answer}")


if __name__ == "__main__":
    main()
