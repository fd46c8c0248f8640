"""Source trees shaped like PyTorch's, for the tests: CMake drives the build through ninja (as
PyTorch's tools/setup_helpers/cmake.py does), and a bundled third-party project declares an old
``cmake_minimum_required``, as PyTorch 2.0's third_party/protobuf/cmake does (the line CMake 4
refuses: pytorch/pytorch#150149). And the CMake of a given release, from its wheel on the index
(what a base image's build requirements install), unpacked once into a cache folder."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

CMAKE_CACHE = Path.home() / ".cache" / "torchbake-dev" / "cmake"  # the releases' wheels and their unpacked files


def write_cmake_tree(root: Path, units: int = 12, third_party_minimum: str = "3.1", *, python: bool = False,
                     weight: int = 0) -> Path:
    """A tree of ``units`` C files compiled into one library, and a bundled third-party library
    whose CMakeLists.txt declares ``cmake_minimum_required(VERSION third_party_minimum)``.
    ``python``: the library is the Python module ``_core`` (its ``answer()`` is 6 times
    FIXTURE_SUB, from the third_party/sub submodule's header; ``-DPYTHON_INCLUDE=`` names
    Python's headers), as the pytorch-cmake fixture repository builds it. ``weight``: loops in
    each unit for the compiler to optimize (benchmarks/dev_compile.py: units that take a while)."""
    (root / "csrc").mkdir(parents=True)
    for index in range(units):
        loops = "".join(f"int work_{index}_{k}(const int *a, int n) {{ int s = {k}; for (int i = 0; i < n; i++)"
                        f" s += (a[i] * {k + 3}) ^ (a[i] >> {k % 7 + 1}); return s; }}\n" for k in range(weight))
        (root / "csrc" / f"unit_{index}.c").write_text(f"{loops}int unit_{index}(void) {{ return {index}; }}\n")
    sources = " ".join(f"csrc/unit_{index}.c" for index in range(units))
    if python:
        (root / "csrc" / "core.c").write_text(
            "#include <Python.h>\n#include \"fixture_sub.h\"\nint message(void);\n"
            "static PyObject *answer(PyObject *s, PyObject *a) { return PyLong_FromLong(FIXTURE_SUB * 6 * message()); }\n"
            "static PyMethodDef m[] = {{\"answer\", answer, METH_NOARGS, \"\"}, {0}};\n"
            "static struct PyModuleDef d = {PyModuleDef_HEAD_INIT, \"_core\", 0, -1, m};\n"
            "PyMODINIT_FUNC PyInit__core(void) { return PyModule_Create(&d); }\n")
        library = (f"add_library(_core MODULE csrc/core.c {sources})\n"
                   'set_target_properties(_core PROPERTIES PREFIX "" SUFFIX ".so")\n'
                   "target_include_directories(_core PRIVATE third_party/sub/include ${PYTHON_INCLUDE})\n"
                   "target_link_libraries(_core protobuf)\n")
    else:
        library = f"add_library(fixture_torch SHARED {sources})\ntarget_link_libraries(fixture_torch protobuf)\n"
    (root / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18 FATAL_ERROR)\nproject(fixture_torch C)\n"
        "add_subdirectory(third_party/protobuf/cmake)\n" + library)
    bundled = root / "third_party" / "protobuf" / "cmake"
    bundled.mkdir(parents=True)
    (bundled / "CMakeLists.txt").write_text(
        f"cmake_minimum_required(VERSION {third_party_minimum})\nproject(protobuf C)\n"
        "add_library(protobuf STATIC ../src/message.c)\nset_target_properties(protobuf PROPERTIES POSITION_INDEPENDENT_CODE ON)\n")
    (root / "third_party" / "protobuf" / "src").mkdir(parents=True)
    (root / "third_party" / "protobuf" / "src" / "message.c").write_text("int message(void) { return 1; }\n")
    return root


def cmake_of(version: str) -> Path:
    """The ``cmake`` program of release ``version``, from its wheel (pip, as the build's
    wheelhouse fetches it), unpacked once into CMAKE_CACHE."""
    program = CMAKE_CACHE / version / "cmake" / "data" / "bin" / "cmake"
    if program.is_file():
        return program
    wheels = CMAKE_CACHE / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                    "--disable-pip-version-check", "-d", str(wheels), f"cmake=={version}"], check=True,
                   capture_output=True)
    (wheel,) = wheels.glob(f"cmake-{version}-*.whl")
    partial = CMAKE_CACHE / f"{version}.partial"
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            if member.filename.startswith("cmake/data/"):
                target = Path(archive.extract(member, partial))
                if (member.external_attr >> 16) & 0o111:
                    target.chmod(0o755)
    partial.rename(CMAKE_CACHE / version)
    return program
