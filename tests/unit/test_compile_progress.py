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
    for line in ["#6 0.1 an earlier step's line\n", *lines, "#6 DONE 0.2s\n", "#7 DONE 131.0s\n"]:
        clock.now += 10.0  # an object every 10 s: 6 a minute
        if note := watch(line):
            said.append(note)
    assert [line for line in lines if "[1/12]" in line], lines  # ninja's own [N/M]
    assert said == [  # at most once every 30 s, while objects are done
        "compiling pytorch: 1/12 objects (8 %), 6 a minute, about 1 min left",
        "compiling pytorch: 4/12 objects (33 %), 6 a minute, about 1 min left",
        "compiling pytorch: 7/12 objects (58 %), 6 a minute, about 50 s left",
        "compiling pytorch: 10/12 objects (83 %), 6 a minute, about 20 s left",
        "compiled pytorch: 12/12 objects (100 %), 5 a minute"]  # at its end, over the whole step (not an unwatched step)
    # the record: from the step's start to its DONE line (20 s after the last object), not to its last object
    assert watch.figures() == {"pytorch": {"objects": 12, "total": 12, "seconds": 140, "per_minute": 5.1}}
    assert watch.error_lines == []


def test_compiler_calls_are_counted_where_no_total_is_printed():
    """setuptools' -v echo of each compile (the stand-in extensions, torchvision): counted."""
    watch = CompileWatch(every=0.0, clock=Clock())
    watch("#9 0.1 torchbake: building vision from /opt/torchbake/sources/vision (commit x, MAX_JOBS=2)\n")
    noted = [watch(f"#9 1.0   x86_64-linux-gnu-gcc -Wall -fPIC -I/usr/include/python3.11 -c csrc/u{i}.c -o build/u{i}.o\n")
             for i in range(3)]  # as pip -v shows them: indented
    watch("#9 1.0   x86_64-linux-gnu-gcc -shared build/u0.o build/u1.o -o vision.so\n")  # a link: no object
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


def test_the_preflight_refuses_more_compile_jobs_than_the_engines_memory_holds_and_counts_the_compiles_disk():
    """[dev] max_jobs beyond the engine's memory (3 GiB a job) is refused before any work, naming
    what fits; the disk check counts the compile's objects in the engine's storage."""
    from types import SimpleNamespace

    from torchbake.core.errors import ConfigurationError
    from torchbake.planning import config
    from torchbake.variants import dev

    base = {"Id": "sha256:" + "a" * 64, "Size": 2 * 1024**3, "RootFS": {"Layers": []},
            "Config": {"Labels": {"torchbake.variant": "base", "torchbake.python": "3.11"}}}
    client = SimpleNamespace(inspect_image=lambda reference: base,
                             engine_info=lambda: {"NCPU": 2, "MemTotal": 8 * 1024**3})

    def preflight(jobs: int):
        settings = config.resolve([], {"TORCHBAKE_IMAGE_BASE": "team/base:1", "TORCHBAKE_DEV_MAX_JOBS": str(jobs)},
                                  variant="dev").settings()
        return dev.plan(settings).preflight(client, writes=False)

    with pytest.raises(ConfigurationError, match=r"\[dev\] max_jobs = 4 needs about 12 GiB of memory \(3 GiB a"
                                                 r" compile job\), and the engine has 8.0 GiB.* Set \[dev\] max_jobs to 2"
                                                 r" or less"):
        preflight(4)
    assert preflight(2).max_jobs == 2 and preflight(0).max_jobs == 2  # 0: from the engine's memory
    settings = config.resolve([], {"TORCHBAKE_IMAGE_BASE": "team/base:1"}, variant="dev").settings()
    assert dev.plan(settings).disk_needs(client) == [("compile", 6 * 1024**3, "its objects, about 3x the base image's 2.15 GB")]


def test_hostile_or_odd_counts_are_no_count_and_several_ninja_runs_add_up():
    """[0/0], [10/5] and a count of thousands of digits say nothing (never a traceback); a step
    that runs ninja several times (torchvision's extensions) counts every run."""
    watch = CompileWatch(every=0.0, clock=Clock())
    watch("#3 0.1 torchbake: building vision from /home/vision (commit x, MAX_JOBS=2)\n")
    assert [watch(f"#3 0.2 {odd} Building\n") for odd in ("[0/0]", "[10/5]", f"[{'9' * 5000}/1]")] == [None] * 3
    for run in (3, 2):
        for done in range(1, run + 1):
            watch(f"#3 0.3 [{done}/{run}] Building CXX object x{done}.o\n")
    assert watch.figures()["vision"]["objects"] == 5 and watch.figures()["vision"]["total"] == 5


def test_a_step_that_ended_leaves_the_periodic_line_and_is_said_once_in_the_words_of_one_object():
    clock = Clock()
    watch = CompileWatch(every=0.0, clock=clock)
    said = [watch(line) for line in (
        "#7 0.1 torchbake: building pytorch from /home/pytorch (commit abc, MAX_JOBS=2)\n",
        "#7 0.2   gcc -pthread -c csrc/core.c -o build/core.o\n",
        "#7 DONE 3.0s\n", "#7 DONE 3.0s\n",
        "#9 0.1 torchbake: building torchsort from /home/extensions/torchsort-0.1.9 (commit unknown, MAX_JOBS=2)\n",
        "#9 0.3   g++ -pthread -c torchsort/isotonic_cpu.cpp -o build/isotonic_cpu.o\n")]
    assert said[2] == "compiled pytorch: 1 object compiled" and said[3] is None  # once
    assert said[5] == "compiling torchsort: 1 object compiled"  # pytorch's step ended: not in the line


def test_on_a_terminal_the_progress_is_one_line_redrawn_in_place_under_the_builds_own_lines(tmp_path):
    import io

    from rich.console import Console

    from torchbake.core import output

    shown: list[str] = []
    watch = CompileWatch(every=60.0, live=shown.append, clock=Clock())
    lines = ninja_build(tmp_path, 3)
    for line in lines:
        watch(line)
    assert shown[-1] == "compiling pytorch: 3/3 objects (100 %)"  # every object, not once a minute
    assert len(shown) == 3

    def drawn(terminal: bool) -> str:
        screen = io.StringIO()
        channel = output.Channel(Console(file=screen, force_terminal=terminal, width=80, markup=False, highlight=False))
        with channel.live_line() as show:
            channel.command_line("#7 0.1 [1/2] Building C object [bold]a.o\n")
            show("compiling pytorch: 1/2 objects (50 %)")
            channel.command_line("#7 0.2 [2/2] Building C object b.o\n")
            show("compiling pytorch: 2/2 objects (100 %)")
        channel.command_line("built\n")
        return screen.getvalue()

    screen = drawn(True)
    # the build's lines as they are ([bold] is text), the live line under them, cleared at the end
    assert screen.index("[bold]a.o\n") < screen.index("b.o\n") < screen.index("compiling pytorch: 2/2") < screen.index("built")
    assert "\x1b[2K" in screen and screen.endswith("\x1b[2Kbuilt\n")
    assert drawn(False) == "#7 0.1 [1/2] Building C object [bold]a.o\n#7 0.2 [2/2] Building C object b.o\nbuilt\n"
