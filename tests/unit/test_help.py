"""`invoke --help TASK` at a glance: one line a flag, grouped, at 80 columns, linking the reference."""

from __future__ import annotations

import re

import pytest
from invoke import Collection, Program, task

from tests.conftest import run_invoke
from torchbake import reference
from torchbake.tasks import help as task_help
from torchbake.tasks import ns

TASKS = sorted(ns.tasks)
FLAG_LINE = re.compile(r"^  (?P<spelled>\S.*?)\s{2,}(?P<summary>\S.*)$")


def shown(name: str) -> str:
    task_ = ns.tasks[name]
    return task_help.render(name.replace("_", "-"), task_.flags, task_.__doc__ or "")


def test_build_help_fits_two_screens_at_80_columns():
    """`invoke --help build` was 352 lines: 41 flags, each a paragraph wrapped into a 20-column strip."""
    result = run_invoke("--help", "build", env={"COLUMNS": "200"})  # the width does not spread it
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) <= 120, len(lines)
    assert max(map(len, lines)) <= 80
    assert lines[0] == "Usage: invoke build [FLAGS]"


@pytest.mark.parametrize("name", TASKS)
def test_every_flag_is_one_whole_line_under_its_group(name):
    """Each flag once, on one line of at most 80 columns, its first sentence whole (no "…"):
    torchbake's own helps all fit; the cut is for a team's longer ones."""
    text = shown(name)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80, [line for line in lines if len(line) > 80]
    for flag in ns.tasks[name].flags:
        mine = [line for line in lines if re.search(rf"(^  |, ){re.escape(flag.spelling)}( VALUE| N)?\s{{2,}}", line)]
        assert len(mine) == 1, (flag.spelling, mine)
        summary = FLAG_LINE.match(mine[0])["summary"]
        assert summary == task_help.summary(flag) and "…" not in summary
        assert summary and flag.help.startswith(summary.rstrip(".")[:20])


def test_flags_are_grouped_as_a_reader_looks_for_them():
    text = shown("build")
    headings = [line for line in text.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert headings == ["Common:", "Release images (--release):", "Dev images (from source):", "Vendor toolkits:",
                        "Publishing and trust:"]

    def group_of(spelling: str) -> str:
        heading = ""
        for line in text.splitlines():
            if line in headings:
                heading = line
            elif re.search(rf"(^  |, ){re.escape(spelling)}\b", line):
                return heading
        raise AssertionError(spelling)

    assert group_of("--python") == "Common:"
    assert group_of("--torch-whl-url") == "Release images (--release):"
    assert group_of("--patch") == "Dev images (from source):"
    assert group_of("--musa-toolkits-url") == "Vendor toolkits:"
    assert group_of("--sign-key") == "Publishing and trust:" and group_of("--push") == "Publishing and trust:"


@pytest.mark.parametrize("name", TASKS)
def test_the_help_names_the_reference_anchor_of_each_flag(name):
    """The help says where each flag is in full: the tasks reference, #TASK--FLAG; every such
    anchor is on the generated page (the site test checks a browser reaches it)."""
    text = shown(name)
    dashed = name.replace("_", "-")
    assert f"#{dashed}--FLAG" in text
    page = reference.tasks_markdown()
    for flag in ns.tasks[name].flags:
        assert f'<a id="{task_help.anchor(dashed, flag)}"></a>' in page


def test_the_first_sentence_is_the_summary():
    flag = next(f for f in ns.tasks["build"].flags if f.param == "python")
    assert task_help.summary(flag) == "Python version of the image, X.Y"
    long = task_help.Flag("x", "A help whose first sentence goes on and on, e.g. past the column the summary has, far")
    assert task_help.fits(task_help.summary(long), 40).endswith("…") and len(task_help.fits(task_help.summary(long), 40)) <= 40


def test_a_team_task_without_declared_flags_keeps_invoke_help(capsys):
    @task(help={"where": "Where to go"})
    def deploy(c, where=""):
        """Deploy it."""

    Program(namespace=Collection(deploy), binary="invoke").run(["invoke", "--help", "deploy"], exit=False)
    assert "Docstring:" in capsys.readouterr().out  # invoke's own layout



def test_usage_brackets_only_what_may_be_left_out():
    """diff's OLD and NEW are required: `[OLD] [NEW]` told the reader otherwise."""
    assert shown("diff").splitlines()[0] == "Usage: invoke diff OLD NEW [FLAGS]"
    task_ = ns.tasks["run-container"]
    assert task_help.render("run-container", task_.flags, "", task_.optional_positional).splitlines()[0] == (
        "Usage: invoke run-container [IMAGE] [FLAGS]")


def test_help_of_an_unknown_task_is_bad_input_with_the_nearest_task():
    """`invoke --help buld` said only "No idea what 'buld' is!", exit 1; `invoke buld` names build."""
    result = run_invoke("--help", "buld")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == ("torchbake: error: No idea what 'buld' is! Did you mean build? `invoke --list`"
                                     " lists the tasks.")


def test_a_flag_given_help_as_its_value_is_refused_before_anything_runs():
    """`run-container IMAGE --command --help` ran `bash -c --help` in a container."""
    result = run_invoke("run-container", "torchbake/debian:bookworm", "--command", "--help")
    assert result.returncode == 2 and "--command needs a value" in result.stderr and result.stdout == ""


def test_a_reader_that_stops_early_gets_no_traceback():
    """`invoke --list | head -1` and a team's task's help through `head` ended in BrokenPipeError."""
    import subprocess

    from tests.conftest import INVOKE, ROOT

    for typed in ("--list", "--help build"):
        pipeline = subprocess.run(f"{' '.join(INVOKE)} --search-root {ROOT} {typed} | head -1", shell=True,
                                  capture_output=True, text=True, timeout=60)
        assert pipeline.stdout.strip() and "Traceback" not in pipeline.stderr, pipeline.stderr


@pytest.mark.parametrize("name", TASKS)
def test_a_command_in_a_tasks_text_is_never_split_across_lines(name):
    """The reflowed docstring broke `invoke build-base` after `invoke: a hint cut in two."""
    text = shown(name)
    for span in re.findall(r"`[^`]*`", " ".join((ns.tasks[name].__doc__ or "").split())):
        assert span in text, span
