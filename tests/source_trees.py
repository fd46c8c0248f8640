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


def write_cmake_tree(root: Path, units: int = 12, third_party_minimum: str = "3.1") -> Path:
    """A tree of ``units`` C files compiled into one library, and a bundled third-party library
    whose CMakeLists.txt declares ``cmake_minimum_required(VERSION third_party_minimum)``."""
    (root / "csrc").mkdir(parents=True)
    for index in range(units):
        (root / "csrc" / f"unit_{index}.c").write_text(f"int unit_{index}(void) {{ return {index}; }}\n")
    sources = " ".join(f"csrc/unit_{index}.c" for index in range(units))
    (root / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18 FATAL_ERROR)\nproject(fixture_torch C)\n"
        "add_subdirectory(third_party/protobuf/cmake)\n"
        f"add_library(fixture_torch SHARED {sources})\ntarget_link_libraries(fixture_torch protobuf)\n")
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
