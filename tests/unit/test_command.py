"""The one subprocess helper."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from torchbake.adapters import command
from torchbake.adapters.command import format_command
from torchbake.core import output
from torchbake.core.errors import BuildError, CommandError


def run(args, *, stream=None, **options):
    """command.run, printing through a channel into ``stream`` when one is given."""
    if stream is None:
        return command.run(args, **options)
    with output.channel_to(output.Channel(output.console(file=stream))):
        return command.run(args, **options)


def test_echoes_quoted_command_and_captures():
    out = io.StringIO()
    result = run(["echo", "a b", "c"], capture=True, stream=out)
    assert result.output == "a b c\n"
    assert out.getvalue().startswith("+ /") and out.getvalue().endswith("echo 'a b' c\n")


def test_streams_to_log_file(tmp_path):
    out = io.StringIO()
    log = tmp_path / "logs" / "build.log"
    run(["printf", "one\\ntwo\\n"], log_file=log, stream=out)
    assert out.getvalue().splitlines()[1:] == ["one", "two"]
    assert log.read_text().splitlines()[1:] == ["one", "two"]


def test_failure_raises_the_given_error_with_output_tail(tmp_path):
    with pytest.raises(BuildError) as info:
        run(["sh", "-c", "echo boom; exit 3"], capture=True, error=BuildError, failure_hint="Try again.")
    text = str(info.value)
    assert "exit status 3" in text and "boom" in text and text.endswith("Try again.")


def test_missing_binary_and_timeout():
    with pytest.raises(CommandError, match="'no-such-tool-xyz' was not found on PATH"):
        run(["no-such-tool-xyz"])
    with pytest.raises(CommandError, match="did not finish within 0.2 s"):
        run(["sleep", "5"], capture=True, timeout=0.2)


def test_lines_of_commands_and_notes_printed_side_by_side_never_mix(tmp_path):
    """build-all --jobs N: cells print from their own threads, through their own channels, into
    one terminal; each line arrives whole."""
    import threading

    shared = io.StringIO()

    def cell(number: int) -> None:
        with output.channel_to(output.Channel(output.console(file=shared))):
            for _ in range(3):
                run(["sh", "-c", f"for i in $(seq 200); do echo cell-{number}-line-$i-{'x' * 300}; done"],
                    log_file=tmp_path / f"cell-{number}.log")
                output.channel().say(("note", "bold"), f" from cell {number} " + "y" * 300)

    threads = [threading.Thread(target=cell, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = shared.getvalue().splitlines()
    assert len(lines) == 4 * 3 * (200 + 2)
    for line in lines:
        assert (line.startswith("+ /") and "cell-" in line or line.startswith("note from cell ")
                or line.startswith("cell-") and line.endswith("x" * 300)), line[:120]


def test_format_command_with_env():
    assert format_command(["docker", "build", "a b"], {"DOCKER_BUILDKIT": "1"}) == "DOCKER_BUILDKIT=1 docker build 'a b'"


def test_a_streamed_command_that_goes_silent_is_stopped(tmp_path):
    """What stops a build whose engine stopped answering (build.stall_timeout)."""
    started = time.monotonic()
    with pytest.raises(BuildError) as error:
        run(["sh", "-c", "echo working; sleep 30"], log_file=tmp_path / "log", error=BuildError,
                    idle_timeout=1, stream=io.StringIO())
    assert time.monotonic() - started < 10
    assert "printed nothing for 1 s and was stopped" in str(error.value)
    assert "working" in (tmp_path / "log").read_text()


def test_git_and_pip_style_captured_commands_get_the_tasks_stall_limit(tmp_path):
    """idle_timeout=STALL: the [build] stall_timeout the task set (git ls-remote, pip download)."""
    token = command.stall_timeout.set(1.0)
    try:
        started = time.monotonic()
        with pytest.raises(CommandError, match="printed nothing for 1 s and was stopped"):
            run(["sh", "-c", "sleep 30"], capture=True, echo=False, idle_timeout=command.STALL)
        assert time.monotonic() - started < 10
        assert run(["sh", "-c", "echo fine"], capture=True, echo=False, idle_timeout=command.STALL).output == "fine\n"
    finally:
        command.stall_timeout.reset(token)


def test_a_stopped_command_takes_its_children_with_it(tmp_path):
    marker = tmp_path / "child.pid"
    with pytest.raises(CommandError):
        run(["sh", "-c", f"sleep 60 & echo $! > {marker}; echo started; wait"], log_file=tmp_path / "log",
            idle_timeout=1, stream=io.StringIO())
    child = int(marker.read_text())
    time.sleep(0.5)
    status = Path(f"/proc/{child}/status")
    assert not status.exists() or "zombie" in status.read_text().lower()  # gone, or dead and waiting to be reaped


def test_bytes_that_are_not_utf8_are_replaced_not_fatal():
    result = run(["sh", "-c", "printf 'caf\\351\\n'"], capture=True, echo=False)
    assert result.output == "caf\ufffd\n"
