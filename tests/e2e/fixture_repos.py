"""Small real source projects standing in for PyTorch, torchvision, torchaudio and a vendor
extension, as git repositories tagged like the real ones and served over HTTP.

- pytorch (tag v2.0.0): a C extension package with a git submodule (third_party/sub) whose header
  it compiles against;
- vision (v0.15.2) and audio (v2.0.1): packages that import torch;
- apex (24.04.01): an extra extension whose setup.py imports torch (so only --no-build-isolation works);
- private/extension (dev1.5.1, behind Basic auth): a C extension whose setup.py imports the
  installed torch, from two source files (test_dev changes one: ccache serves the other);
- pytorch-large (v2.0.0): the pytorch package with 300 C translation units, for the shared
  compile cache (one changed file compiles one unit);
- private/extension-lite (dev1.5.1, behind Basic auth): the same package from one C file, for
  the tests about the matrix and the registry (test_dev moves private/extension's tag).

Every dev test builds on the small stand-in torch (tests.e2e.helpers.make_tiny_torch): what a
dev image proves of torchbake (sources at their tags, credentials, --no-build-isolation, ccache,
the slim stage) is the same on it, and the real wheel's dev base cost four minutes a run.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from tests.source_trees import write_cmake_tree

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def git(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    import os

    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV, **(env or {})}).stdout.strip()


def _publish(work: Path, bare: Path, tag: str, *, day: str = "") -> str:
    """Commit ``work``, tag it and push both to ``bare``; ``day`` (ISO 8601): the commit's date."""
    git("init", "-q", "-b", "main", cwd=work)
    git("add", "-A", cwd=work)
    dated = {"GIT_AUTHOR_DATE": day, "GIT_COMMITTER_DATE": day} if day else {}
    git("commit", "-q", "-m", "fixture", cwd=work, env=dated)
    git("tag", "-f", tag, cwd=work)
    bare.parent.mkdir(parents=True, exist_ok=True)
    if not bare.exists():
        git("init", "-q", "--bare", "-b", "main", str(bare), cwd=work)
        git("remote", "add", "origin", str(bare), cwd=work)
    git("push", "-q", "--force", "origin", "main", f"refs/tags/{tag}", cwd=work)
    return git("rev-parse", "HEAD", cwd=work)


def write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def make_repos(root: Path, url: str) -> dict[str, str]:
    """Bare repositories under root/srv; returns name → commit of the tagged revision."""
    srv, work = root / "srv", root / "work"
    commits = {}
    write(work / "sub", {"include/fixture_sub.h": "#define FIXTURE_SUB 7\n"})
    commits["sub"] = _publish(work / "sub", srv / "sub.git", "v1")

    write(work / "pytorch", {
        "setup.py": (
            "from setuptools import Extension, setup\n"
            "setup(name='fixture-pytorch', version='2.0.0', author='Fixture Authors <fixtures@example.com>', packages=['fixture_pytorch'],\n"
            "      ext_modules=[Extension('fixture_pytorch._core', ['csrc/core.c'], include_dirs=['third_party/sub/include'])])\n"),
        "fixture_pytorch/__init__.py": "from ._core import answer\n",
        "csrc/core.c": (
            "#include <Python.h>\n#include \"fixture_sub.h\"\n"
            "static PyObject *answer(PyObject *s, PyObject *a) { return PyLong_FromLong(FIXTURE_SUB * 6); }\n"
            "static PyMethodDef m[] = {{\"answer\", answer, METH_NOARGS, \"\"}, {0}};\n"
            "static struct PyModuleDef d = {PyModuleDef_HEAD_INIT, \"_core\", 0, -1, m};\n"
            "PyMODINIT_FUNC PyInit__core(void) { return PyModule_Create(&d); }\n"),
    })
    git("init", "-q", "-b", "main", cwd=work / "pytorch")
    subprocess.run(["git", "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(srv / "sub.git"),
                    "third_party/sub"], cwd=work / "pytorch", check=True, capture_output=True)
    # The recorded URL is the HTTP one, as a real .gitmodules would have.
    git("config", "-f", ".gitmodules", "submodule.third_party/sub.url", f"{url}/sub.git", cwd=work / "pytorch")
    commits["pytorch"] = _publish(work / "pytorch", srv / "pytorch.git", "v2.0.0")
    commits["pytorch-cmake"] = write_cmake_pytorch(work, srv, url)

    for name, tag in (("vision", "v0.15.2"), ("audio", "v2.0.1")):
        write(work / name, {
            "setup.py": f"from setuptools import setup\nsetup(name='fixture-{name}', version='0.1', author='Fixture Authors <fixtures@example.com>', packages=['fixture_{name}'])\n",
            f"fixture_{name}/__init__.py": "import torch\n",
        })
        commits[name] = _publish(work / name, srv / f"{name}.git", tag)

    write(work / "apex", {
        "setup.py": "from setuptools import setup\nimport torch  # needs the installed torch: --no-build-isolation\n"
                    "setup(name='fixture-apex', version='24.4.1', author='Fixture Authors <fixtures@example.com>', packages=['fixture_apex'])\n",
        "fixture_apex/__init__.py": "import torch\n",
    })
    commits["apex"] = _publish(work / "apex", srv / "apex.git", "24.04.01")
    commits["extension"] = write_extension(work, srv, "dev1.5.1", "return 1;")
    write(work / "extension-lite", {
        "setup.py": (
            "from setuptools import Extension, setup\n"
            "import torch  # built against the installed torch: --no-build-isolation\n"
            "setup(name='torchbake-fixture-ext', version='1.5.1', author='Fixture Authors <fixtures@example.com>', packages=['torchbake_fixture_ext'],\n"
            "      ext_modules=[Extension('torchbake_fixture_ext._C', ['csrc/c.c'])])\n"),
        "torchbake_fixture_ext/__init__.py": "import torch\nfrom ._C import plus_one\n",
        "csrc/c.c": (
            "#include <Python.h>\n"
            "static PyObject *plus_one(PyObject *s, PyObject *x) { return PyNumber_Add(x, PyLong_FromLong(1)); }\n"
            "static PyMethodDef m[] = {{\"plus_one\", plus_one, METH_O, \"\"}, {0}};\n"
            "static struct PyModuleDef d = {PyModuleDef_HEAD_INIT, \"_C\", 0, -1, m};\n"
            "PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&d); }\n"),
    })
    commits["extension-lite"] = _publish(work / "extension-lite", srv / "private" / "extension-lite.git", "dev1.5.1")
    commits["pytorch-large"] = write_large_pytorch(work, srv, run=uuid.uuid4().hex, units=TEST_UNITS)
    return commits


PYTORCH_2_0_DAY = "2023-03-15T12:00:00Z"  # the day PyTorch v2.0.0 was released


def write_cmake_pytorch(work: Path, srv: Path, url: str, *, units: int = 12, weight: int = 0) -> str:
    """pytorch-cmake (tag v2.0.0, committed on PyTorch 2.0's day): the pytorch fixture's package as
    PyTorch builds its own: setup.py drives CMake over ninja (as tools/setup_helpers/cmake.py
    does), and a bundled third-party project declares ``cmake_minimum_required(VERSION 3.1)`` as
    PyTorch 2.0's third_party/protobuf/cmake does (the line CMake 4 refuses: pytorch/pytorch#150149).
    It configures only with a CMake of its day, as the base's dated build requirements give it.
    ``units`` and ``weight``: tests.source_trees.write_cmake_tree's (benchmarks/dev_compile.py's)."""
    folder = work / "pytorch-cmake"
    tree = write_cmake_tree(folder, units=units, third_party_minimum="3.1", python=True, weight=weight)
    write(tree, {
        "setup.py": (
            "import os, shutil, subprocess, sysconfig\n"
            "from setuptools import Extension, setup\n"
            "from setuptools.command.build_ext import build_ext\n\n"
            "class CMakeBuild(build_ext):  # PyTorch's way: CMake configures, ninja compiles\n"
            "    def build_extension(self, ext):\n"
            "        build = os.path.abspath(os.path.join(self.build_temp, 'cmake'))\n"
            "        subprocess.run(['cmake', '-G', 'Ninja', '-S', os.getcwd(), '-B', build,\n"
            "                        '-DPYTHON_INCLUDE=' + sysconfig.get_paths()['include']], check=True)\n"
            "        subprocess.run(['cmake', '--build', build, '--', '-j', os.environ.get('MAX_JOBS', '2')], check=True)\n"
            "        target = self.get_ext_fullpath(ext.name)\n"
            "        os.makedirs(os.path.dirname(target), exist_ok=True)\n"
            "        shutil.copy(os.path.join(build, '_core.so'), target)\n\n"
            "setup(name='fixture-pytorch', version='2.0.0', author='Fixture Authors <fixtures@example.com>',\n"
            "      packages=['fixture_pytorch'], ext_modules=[Extension('fixture_pytorch._core', [])],\n"
            "      cmdclass={'build_ext': CMakeBuild})\n"),
        "fixture_pytorch/__init__.py": "from ._core import answer\n",
    })
    git("init", "-q", "-b", "main", cwd=folder)
    subprocess.run(["git", "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(srv / "sub.git"),
                    "third_party/sub"], cwd=folder, check=True, capture_output=True)
    git("config", "-f", ".gitmodules", "submodule.third_party/sub.url", f"{url}/sub.git", cwd=folder)
    return _publish(folder, srv / "pytorch-cmake.git", "v2.0.0", day=PYTORCH_2_0_DAY)


def dev_profile(url: str, *, supplier: str, torch: str, extension: str = "private/extension",
                pytorch: str = "pytorch", extras: bool = True, build_tools: tuple[str, ...] = ()) -> str:
    """A dev profile for the fixture projects served at ``url`` (the keys configs/musa.toml uses):
    ``torch`` the base's requirement (the stand-in's path), ``extension`` and
    ``pytorch`` the repositories of those names, ``extras`` apex as a further extension,
    ``build_tools`` more build requirements of the base (unpinned: resolved as of the tag's day)."""
    requirements = ", ".join(f'"{requirement}"' for requirement in (torch, "setuptools", "wheel", *build_tools))
    return (f'[sources]\npytorch_repo = "{url}/{pytorch}.git"\nvision_repo = "{url}/vision.git"\n'
            f'audio_repo = "{url}/audio.git"\nextension_repo = "{url}/{extension}.git"\n'
            f'[base]\nrequirements = [{requirements}]\ntools = []\nuser = "dev"\nvideo_gid = 44\n'
            '[python]\nkeep_uv = false\n'  # as every stand-in profile (tests.e2e.helpers.STAND_IN_PYTHON)
            '[image]\nrender_gid = 109\n'
            '[wheels]\nextension_module = "torchbake_fixture_ext"\n'
            f'[sbom]\nsupplier = "{supplier}"\n'
            '[dev]\nmax_jobs = 2\nbuild_env = { BUILD_TEST = "0", USE_CUDA = "0" }\n'
            + (f'extensions = ["git+{url}/apex.git@24.04.01"]\n' if extras else "")
            + '[build]\nnetwork = "host"\n')


def git_credentials(url: str, password: str) -> str:
    """A git credential file's line for the fixture server at ``url`` (user builder)."""
    return f"http://builder:{password}@{url.split('://', 1)[1]}\n"


LARGE_UNITS = 300  # translation units of pytorch-large in the benchmark (benchmarks/compile_cache.py)
TEST_UNITS = 8  # and in the suite's (test_dev_cache): as many files as prove one compiled, the rest from the store


def write_large_pytorch(work: Path, srv: Path, *, run: str = "", changed: int | None = None, weight: int = 0,
                        units: int = LARGE_UNITS) -> str:
    """pytorch-large (tag v2.0.0): the pytorch fixture's package as PyTorch is shaped where the
    compile cache matters, a C extension of ``units`` translation units, built by the same
    scripts as PyTorch's source. Each unit includes a header naming the session (``run``), so a
    session's first compile misses every cache whatever an earlier session left; ``changed``:
    the unit whose body changes (committed, the tag moved), every other unit as it was; ``weight``:
    loops in each unit for the compiler to optimize (about 4 ms of gcc -O2 each here: 300 make a
    unit cost what one of PyTorch's does; the benchmark's, not the tests')."""
    folder = work / "pytorch-large"
    count, units = units, [f"csrc/unit_{index:03d}.c" for index in range(units)]

    def unit(index: int, more: str = "") -> str:
        loops = "".join(f"int fixture_work_{index:03d}_{k}(const int *a, int n) {{ int s = {k};"
                        f" for (int i = 0; i < n; i++) s += (a[i] * {k + 3}) ^ (a[i] >> {k % 7 + 1}); return s; }}\n"
                        for k in range(weight))
        return f'#include "fixture_large.h"\nint fixture_unit_{index:03d}(void) {{ return {index % 2}{more}; }}\n' + loops

    if changed is not None:  # that unit's body, every other file as it was
        write(folder, {units[changed]: unit(changed, " + 0")})
    else:
        write(folder, {
            "setup.py": (
                "from setuptools import Extension, setup\n"
                f"units = {units!r}\n"
                "setup(name='fixture-pytorch', version='2.0.0', author='Fixture Authors <fixtures@example.com>',"
                " packages=['fixture_pytorch'],\n"
                "      ext_modules=[Extension('fixture_pytorch._core', ['csrc/core.c', *units], include_dirs=['csrc'])])\n"),
            "fixture_pytorch/__init__.py": "from ._core import answer\n",
            "csrc/core.c": (
                "#include <Python.h>\n#include \"fixture_large.h\"\n"
                "static PyObject *answer(PyObject *s, PyObject *a) { return PyLong_FromLong(fixture_unit_000() + 41); }\n"
                "static PyMethodDef m[] = {{\"answer\", answer, METH_NOARGS, \"\"}, {0}};\n"
                "static struct PyModuleDef d = {PyModuleDef_HEAD_INIT, \"_core\", 0, -1, m};\n"
                "PyMODINIT_FUNC PyInit__core(void) { return PyModule_Create(&d); }\n"),
            # a typedef, not a macro: it stays in the preprocessed unit, so ccache's preprocessor mode
            # misses as well as its direct mode (a macro is gone after preprocessing)
            "csrc/fixture_large.h": (f"typedef int fixture_run_{run};\n"
                                     + "".join(f"int fixture_unit_{index:03d}(void);\n" for index in range(count))),
            **{name: unit(index) for index, name in enumerate(units)},
        })
    if (folder / ".git").exists():
        git("add", "-A", cwd=folder)
        git("commit", "-q", "-m", f"change {units[changed]}" if changed is not None else "sources", cwd=folder)
        git("tag", "-f", "v2.0.0", cwd=folder)
        git("push", "-q", "--force", "origin", "main", "refs/tags/v2.0.0", cwd=folder)
        return git("rev-parse", "HEAD", cwd=folder)
    return _publish(folder, srv / "pytorch-large.git", "v2.0.0")


def write_extension(work: Path, srv: Path, tag: str, b_body: str) -> str:
    """The vendor extension: a C extension of two files whose setup.py imports the installed torch
    (so only a --no-build-isolation build can run it): a.c, the module (plus_one), and b.c, whose
    body varies (``return 1;``): touching it recompiles b.c alone, a.c comes from ccache."""
    write(work / "extension", {
        "setup.py": (
            "from setuptools import Extension, setup\n"
            "import torch  # built against the installed torch: --no-build-isolation\n"
            "setup(name='torchbake-fixture-ext', version='1.5.1', author='Fixture Authors <fixtures@example.com>', packages=['torchbake_fixture_ext'],\n"
            "      ext_modules=[Extension('torchbake_fixture_ext._C', ['csrc/a.c', 'csrc/b.c'])])\n"),
        "torchbake_fixture_ext/__init__.py": "import torch\nfrom ._C import plus_one\n",
        "csrc/a.c": (
            "#include <Python.h>\n"
            "double amount(void);\n"
            "static PyObject *plus_one(PyObject *s, PyObject *x) { return PyNumber_Add(x, PyFloat_FromDouble(amount())); }\n"
            "static PyMethodDef m[] = {{\"plus_one\", plus_one, METH_O, \"\"}, {0}};\n"
            "static struct PyModuleDef d = {PyModuleDef_HEAD_INIT, \"_C\", 0, -1, m};\n"
            "PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&d); }\n"),
        "csrc/b.c": f"double amount(void) {{ {b_body} }}\n",
    })
    if (work / "extension" / ".git").exists():
        git("add", "-A", cwd=work / "extension")
        git("commit", "-q", "-m", "touch b.c", cwd=work / "extension")
        git("tag", "-f", tag, cwd=work / "extension")
        git("push", "-q", "--force", "origin", "main", f"refs/tags/{tag}", cwd=work / "extension")
        return git("rev-parse", "HEAD", cwd=work / "extension")
    return _publish(work / "extension", srv / "private" / "extension.git", tag)
