#!/usr/bin/env python3
"""Benchmark on a real PyTorch C++ extension nobody here wrote: a dev image whose base holds the
real torch CPU wheel (`--torch-wheel`, default: pip's find-links folder's torch-2.13.0+cpu for
Python 3.11) compiles `--extension` (default torchsort==0.1.9, a C++ extension built with
torch.utils.cpp_extension and published as a source distribution) from its sdist, found on the
configured indexes on the host, against that torch with --no-build-isolation; then the image
imports and calls it. Then one of the extension's C++ files changes (a function added: the sdist
as the first build fetched it, repacked into a find-links folder, which the search takes first) and
the dev build runs again: the changed extension's step compiles again, what did not change is
served by the layer cache and ccache.

Prints the base's and the dev build's seconds, what the extension's compile step counted
(compiler calls, seconds) and the call's answer. The PyTorch source the dev build also compiles
is the small fixture (tests/e2e/fixture_repos: PyTorch publishes no sdist and its repository is
too large to bring here). Images are removed at the end.
--smoke: the tests' stand-in torch and, for the extension, a C++ extension of two files written
here as an sdist (tbsmokeext 1.0, its setup.py importing torch, so --no-build-isolation only;
each file naming the run, so that no compile cache an earlier run filled serves it) and found
in a find-links folder of the run's own: the same steps, no index and no real wheel
needed; images named for the run.
Usage: .venv/bin/python benchmarks/real_extension.py [--torch-wheel PATH] [--extension REQ] [--smoke]
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _steps import BOOKWORM as BASE  # noqa: E402
from _steps import DOCKER, INVOKE, ROOT, add_smoke, run, smoke_name, work_folder  # noqa: E402

from tests.e2e.fixture_repos import dev_profile, git_credentials, make_repos  # noqa: E402
from tests.e2e.helpers import make_tiny_torch  # noqa: E402
from tests.support import git_server  # noqa: E402

NAME = "torchbake-bench/real-extension"
CALLS = {"torchsort": "import torch, torchsort; print(torchsort.soft_rank(torch.tensor([[8., 1., 5.]])).tolist())",
         "tbsmokeext": "import torch, tbsmokeext; print(tbsmokeext.twice(21))"}
SMOKE_EXTENSION = "tbsmokeext==1.0"
SMOKE_SOURCES = {  # a C++ extension nobody published: the smoke run's sdist
    "setup.py": ("from setuptools import Extension, setup\n"
                 "import torch  # built against the installed torch: --no-build-isolation\n"
                 "setup(name='tbsmokeext', version='1.0', ext_modules=[Extension('tbsmokeext',"
                 " ['csrc/module.cpp', 'csrc/twice.cpp'], language='c++')])\n"),
    "PKG-INFO": "Metadata-Version: 2.1\nName: tbsmokeext\nVersion: 1.0\n",
    "csrc/module.cpp": ("#include <Python.h>\nlong twice(long x);\n"
                        "static PyObject *py_twice(PyObject *, PyObject *x) { return PyLong_FromLong(twice(PyLong_AsLong(x))); }\n"
                        "static PyMethodDef m[] = {{\"twice\", py_twice, METH_O, \"\"}, {nullptr, nullptr, 0, nullptr}};\n"
                        "static struct PyModuleDef d = {PyModuleDef_HEAD_INIT, \"tbsmokeext\", nullptr, -1, m};\n"
                        "PyMODINIT_FUNC PyInit_tbsmokeext(void) { return PyModule_Create(&d); }\n"),
    "csrc/twice.cpp": "long twice(long x) { return 2 * x; }\n",
}


def smoke_sdist(folder: Path, run_id: str) -> Path:
    """SMOKE_SOURCES as the sdist tbsmokeext-1.0.tar.gz in ``folder`` (a find-links folder), each
    C++ file given a function naming ``run_id``: the compile cache of the engine's cache mount
    (kept across runs) has never seen them."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tbsmokeext-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as out:
        for name, text in SMOKE_SOURCES.items():
            if name.endswith(".cpp"):
                text += f'const char *tbsmokeext_run_{Path(name).stem}() {{ return "{run_id}"; }}\n'
            data = text.encode()
            member = tarfile.TarInfo(f"tbsmokeext-1.0/{name}")
            member.size, member.mode = len(data), 0o644
            out.addfile(member, io.BytesIO(data))
    return path


def find_links_torch() -> str:
    """The torch CPU wheel for Python 3.11 in pip's find-links folders ("" where none is)."""
    folders = os.environ.get("PIP_FIND_LINKS", "") or subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.find-links"], capture_output=True, text=True).stdout
    for folder in folders.split():
        found = sorted(glob.glob(os.path.join(folder, "torch-2.*+cpu-cp311-cp311-manylinux*_x86_64.whl")))
        if found:
            return found[-1]
    return ""


def changed_sdist(folders: list[Path], links: Path, project: str) -> str:
    """The extension's sdist as the first build fetched it (into the download cache, the first of
    ``folders``; one in a find-links folder, the next, is taken from there), its first C++ file
    given one more function, written under the same name into ``links``: that file's name in the archive."""
    (original,) = [p for p in folders[0].rglob(f"{project}-*.tar.gz") if p.is_file()] or [
        p for folder in folders[1:] for p in folder.glob(f"{project}-*.tar.gz")]
    links.mkdir(exist_ok=True)
    changed = ""
    with tarfile.open(original) as source, tarfile.open(links / original.name, "w:gz") as out:
        for member in source.getmembers():
            data = source.extractfile(member).read() if member.isfile() else None
            if data is not None and not changed and member.name.endswith(".cpp"):
                data += b"\nint torchbake_benchmark_changed() { return 2; }\n"
                member.size, changed = len(data), member.name
            out.addfile(member, io.BytesIO(data) if data is not None else None)
    if not changed:
        sys.exit(f"{original.name} holds no C++ file to change")
    return changed


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.monotonic()
    stdout = run(argv, env=env, cwd=ROOT).stdout
    return time.monotonic() - started, stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--torch-wheel", default="", help="the real torch wheel the base installs (default: find-links')")
    parser.add_argument("--extension", default="torchsort==0.1.9", help="a PyTorch C++ extension published as an sdist")
    add_smoke(parser)
    args = parser.parse_args()
    work = work_folder("real-extension")
    env = {**os.environ, "TORCHBAKE_PATHS_CACHE_DIR": str(work / "cache")}
    name = NAME
    if args.smoke:  # the stand-in torch; the extension's sdist found in pip's find-links (one of the run's own)
        args.torch_wheel, args.extension, name = str(make_tiny_torch(work / "torch")), SMOKE_EXTENSION, smoke_name("real-extension")
        sdists = smoke_sdist(work / "sdists", uuid.uuid4().hex).parent
        env["PIP_FIND_LINKS"] = " ".join([str(sdists), *env.get("PIP_FIND_LINKS", "").split()])
    wheel = args.torch_wheel or find_links_torch()
    if not wheel or not Path(wheel).is_file():
        parser.error("no torch CPU wheel for Python 3.11 found: give --torch-wheel PATH")
    project = re.split(r"[=<>!~ \[]", args.extension, maxsplit=1)[0].lower()
    run([*INVOKE, "bootstrap-os", "--suite", "bookworm", "--name", BASE], cwd=ROOT)
    tag = uuid.uuid4().hex[:8]
    base, image = f"{name}-base:{tag}", f"{name}:{tag}"
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
            base_seconds, _ = timed([*INVOKE, "build-base", "--config", str(profile), "--name", f"{name}-base",
                                     "--tag", tag, "--sys", BASE, "--python", "3.11"], env)
            dev = [*INVOKE, "build", "--config", str(profile), "--name", name, "--tag", tag, "--base-img", base,
                   "-c", str(work / "git-credentials")]
            dev_seconds, stdout = timed(dev, env)
            changed_file = changed_sdist([work / "cache", work / "sdists"], work / "links", project)
            profile.write_text(profile.read_text().replace("[wheels]\n", f'[wheels]\nfind_links = ["{work / "links"}"]\n', 1))
            again_seconds, again = timed(dev, env)
        manifest = re.search(r"manifest: (\S+)\)", stdout)
        record = json.loads(Path(manifest.group(1)).read_text()) if manifest else {}
        call = CALLS.get(project, f"import torch, {project.replace('-', '_')}; print('imported')")
        answer = run([DOCKER, "run", "--rm", image, "python", "-c", call]).stdout.strip()
        compiled = re.search(r"^Compiled: .*$", stdout, re.M)
        compiled_again = re.search(r"^Compiled: .*$", again, re.M)
    finally:
        subprocess.run([DOCKER, "image", "rm", "--force", base, image], capture_output=True)
    print(f"\n{args.extension} from its sdist against {Path(wheel).name}, {os.cpu_count()} cores, this machine's engine:")
    print(f"base image (the real torch wheel installed): {base_seconds:.1f} s")
    print(f"dev build (fixture PyTorch source, {args.extension}, verify): {dev_seconds:.1f} s")
    print(compiled.group(0) if compiled else "Compiled: (no line)")
    print(f"progress recorded: {json.dumps(record.get('compile_progress', {}))}")
    print(f"in the image: {call}\n  -> {answer}")
    print(f"again after {changed_file} changed: {again_seconds:.1f} s")
    print(compiled_again.group(0) if compiled_again else "Compiled: (no line)")


if __name__ == "__main__":
    main()
