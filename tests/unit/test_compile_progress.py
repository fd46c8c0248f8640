"""A compile you can watch: the progress of a real ninja build read from its output as BuildKit
streams it (each line behind its step number), and a failed compile's own error lines."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from torchbake.building.compile_progress import CompileWatch, duration


def ninja_build(folder: Path, objects: int, *, broken: int | None = None) -> list[str]:
    """A real ninja build of ``objects`` C files (``broken``: one that does not compile), as
    BuildKit's plain progress shows it: "#7 12.3 " before each line of the step."""
    ninja = shutil.which("ninja")
    assert ninja, "ninja: scripts/setup.sh installs Debian's ninja-build"
    rules = ["rule cc", "  command = gcc -c $in -o $out", "  description = Building C object $out"]
    for index in range(objects):
        (folder / f"u{index}.c").write_text(f"int unit_{index}(void) {{ return {index}; }}\n"
                                            if index != broken else "int broken(void) { return }\n")
        rules.append(f"build u{index}.o: cc u{index}.c")
    (folder / "build.ninja").write_text("\n".join(rules) + "\n")
    done = subprocess.run([ninja, "-j", "2"], cwd=folder, capture_output=True, text=True)
    assert (done.returncode != 0) == (broken is not None), done.stdout + done.stderr
    lines = ["torchbake: building pytorch from /home/pytorch (commit abc, MAX_JOBS=2)",
             *(done.stdout + done.stderr).splitlines()]
    return [f"#7 {12.3 + index:.1f} {line}\n" for index, line in enumerate(lines)]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_ninja_compile_says_objects_done_of_the_total_its_rate_and_the_time_left(tmp_path):
    lines = ninja_build(tmp_path, 12)
    clock = Clock()
    watch = CompileWatch(every=30.0, clock=clock)
    said = []
    for line in ["#6 0.1 an earlier step's line\n", *lines]:
        clock.now += 10.0  # an object every 10 s: 6 a minute
        if note := watch(line):
            said.append(note)
    assert [line for line in lines if "[1/12]" in line], lines  # ninja's own [N/M]
    assert said == [  # at most once every 30 s, while objects are done
        "compiling pytorch: 1/12 objects (8 %), 6 a minute, about 1 min left",
        "compiling pytorch: 4/12 objects (33 %), 6 a minute, about 1 min left",
        "compiling pytorch: 7/12 objects (58 %), 6 a minute, about 50 s left",
        "compiling pytorch: 10/12 objects (83 %), 6 a minute, about 20 s left"]
    assert watch.figures() == {"pytorch": {"objects": 12, "total": 12, "seconds": 120, "per_minute": 6.0}}
    assert watch.error_lines == []


def test_compiler_calls_are_counted_where_no_total_is_printed():
    """setuptools' -v echo of each compile (the stand-in extensions, torchvision): counted."""
    watch = CompileWatch(every=0.0, clock=Clock())
    watch("#9 0.1 torchbake: building vision from /opt/torchbake/sources/vision (commit x, MAX_JOBS=2)\n")
    noted = [watch(f"#9 1.0 x86_64-linux-gnu-gcc -Wall -fPIC -I/usr/include/python3.11 -c csrc/u{i}.c -o build/u{i}.o\n")
             for i in range(3)]
    watch("#9 1.0 x86_64-linux-gnu-gcc -shared build/u0.o build/u1.o -o vision.so\n")  # a link: no object
    assert watch.figures()["vision"]["objects"] == 3 and noted[-1] == "compiling vision: 3 objects compiled"


def test_a_failed_compile_is_told_by_its_own_error_lines(tmp_path):
    watch = CompileWatch(clock=Clock())
    for line in ninja_build(tmp_path, 4, broken=2):
        watch(line)
    errors = watch.errors()
    assert "pytorch: FAILED: u2.o" in errors and "u2.c:1:" in errors and "error: expected expression" in errors, errors


@pytest.mark.parametrize(("seconds", "text"), [(40, "40 s"), (720, "12 min"), (5100, "1 h 25 min")])
def test_durations_read_as_people_say_them(seconds, text):
    assert duration(seconds) == text
