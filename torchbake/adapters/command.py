"""Every host subprocess goes through :func:`run` (or :func:`run_attached` for a terminal).

Commands are started through plumbum (``local[...].popen``); this layer adds what plumbum does
not do: it prints ``+ <command>`` (quoted exactly as a shell would need it), resolves the binary
first (a missing tool is a clear error, not a ``FileNotFoundError``), tees the output live into a
per-build log, stops the command's whole process group on a stall, a timeout or Ctrl-C /
SIGTERM, and turns a non-zero exit into the given ``FatalError`` subclass. Arguments are always a
list, passed to the program directly: no shell is ever involved.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from torchbake.core import output
from torchbake.core.errors import CommandError, FatalError
from torchbake.core.lazy import LazyModule
from torchbake.core.redaction import redact

if TYPE_CHECKING:
    import plumbum
else:
    plumbum = LazyModule("plumbum")  # imported at the first command, not when the tasks are listed

# Seconds a streamed command may print nothing before it is stopped, for commands that ask for
# the stall limit (idle_timeout=STALL): the task's [build] stall_timeout, set by the CLI layer.
stall_timeout: contextvars.ContextVar[float] = contextvars.ContextVar("stall_timeout", default=3600.0)
STALL = -1.0  # idle_timeout value meaning "the task's stall limit"
# Variables every command of the current task gets (e.g. the --ca-bundle for pip and git).
extra_env: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("extra_env", default={})  # noqa: B039
# What reads a streamed command's lines as they come (a build's compile progress:
# torchbake.building.compile_progress), set around the commands it watches: a line it returns is
# printed and logged after the line that made it.
line_watch: contextvars.ContextVar[Callable[[str], str | None] | None] = contextvars.ContextVar("line_watch", default=None)


@contextlib.contextmanager
def environment(variables: Mapping[str, str]):
    """Give every command run inside the block these variables too."""
    token = extra_env.set({**extra_env.get(), **variables})
    try:
        yield
    finally:
        extra_env.reset(token)


@dataclass(frozen=True)
class CommandResult:
    args: tuple[str, ...]
    returncode: int
    output: str


def format_command(args: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """The command as a user could paste it into a shell."""
    prefix = [f"{key}={shlex.quote(value)}" for key, value in (env or {}).items()]
    return " ".join(prefix + [shlex.quote(str(a)) for a in args])


def show_command(args: Sequence[str], env: Mapping[str, str] | None = None) -> None:
    """Print ``+ <command>`` where command output goes (what a user could paste to do the same)."""
    output.channel().command_line(f"+ {format_command(args, env)}")


def resolve_binary(name: str, *, hint: str = "", error: type[FatalError] = CommandError) -> str:
    if (path := shutil.which(name)) is None:
        raise error(f"{name!r} was not found on PATH. {hint}".strip())
    return path


def _argv(args: Sequence[str | os.PathLike[str]], error: type[FatalError]) -> list[str]:
    """The argument list with the program resolved: a missing tool is a clear error."""
    argv = [str(a) for a in args]
    argv[0] = resolve_binary(argv[0], error=error) if os.sep not in argv[0] else argv[0]
    if not Path(argv[0]).exists():
        raise error(f"{argv[0]} does not exist.")
    return argv


def run(
    args: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    capture: bool = False,
    log_file: Path | None = None,
    check: bool = True,
    error: type[FatalError] = CommandError,
    failure_hint: str = "",
    timeout: float | None = None,
    echo: bool = True,
    idle_timeout: float | None = None,
) -> CommandResult:
    """Run ``args``; ``env`` holds variables added to the current environment.

    - ``capture``: collect output (stdout and stderr together) and return it, printing nothing.
    - ``log_file``: print output live (through the current output channel) and append it to the file.
    - ``check``: raise ``error`` on a non-zero exit, with the tail of the output and the hint.
    - ``idle_timeout``: stop the command when it prints nothing for that long (``STALL``: the
      task's stall limit, [build] stall_timeout); a captured command is then read line by line too.
    """
    argv = _argv(args, error)
    if idle_timeout == STALL:
        idle_timeout = stall_timeout.get()
    if echo:
        show_command(argv, env)
    full_env = {**os.environ, **extra_env.get(), **(env or {})}
    shown = None if capture and log_file is None else output.channel()  # captured: read, not printed
    try:
        text, returncode = _stream(argv, full_env, cwd, log_file, shown, capture, timeout, idle_timeout)
    except _Stopped as exc:
        why = (f"printed nothing for {idle_timeout:g} s and was stopped" if exc.args[0] == "stalled"
               else f"did not finish within {timeout:g} s")
        raise error(f"{format_command(argv)} {why}. {failure_hint}".strip()) from exc
    result = CommandResult(tuple(argv), returncode, text)
    if check and returncode != 0:
        tail = "\n".join(text.strip().splitlines()[-15:])
        where = f"\nFull output: {log_file}" if log_file else ""
        raise error(
            f"Command failed with exit status {returncode}: {format_command(argv)}\n"
            f"{tail}{where}\n{failure_hint}".rstrip()
        )
    return result


def run_attached(args: Sequence[str | os.PathLike[str]], *, error: type[FatalError] = CommandError) -> int:
    """Run ``args`` on the user's terminal (an interactive shell); return its exit status. The
    ``+ command`` echo goes to the current channel (stderr for run-container)."""
    argv = _argv(args, error)
    show_command(argv)
    sys.stdout.flush()
    return subprocess.run(argv, check=False).returncode


_RUNNING: set[subprocess.Popen] = set()
_RUNNING_LOCK = threading.Lock()


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    """Signal the command and everything it started (streamed commands get a process group of
    their own, so that a shell's children stop with it and stop holding its output open)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


def terminate_all() -> int:
    """Ask every streamed command still running (e.g. builds in build-all's worker threads) to
    stop; returns how many were asked. Used when the user interrupts."""
    with _RUNNING_LOCK:
        running = list(_RUNNING)
    for proc in running:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
    return len(running)


def _popen(argv: list[str], env: dict[str, str], cwd: str | os.PathLike[str] | None) -> subprocess.Popen:
    """The command started through plumbum, output (stdout and stderr together) piped, in a
    process group of its own so that what it starts stops with it."""
    command = plumbum.local[argv[0]][argv[1:]]
    return command.popen(stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                         start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    """End the command and its process group: SIGTERM, then SIGKILL after 10 s."""
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()


class _Stopped(Exception):
    """A streamed command was stopped: "stalled" (silent for its idle timeout) or "timeout"."""


def _watch(proc: subprocess.Popen, last_output: list[float], idle_timeout: float | None, deadline: float | None,
           stopped: list[str]) -> None:
    """Stop the command when it has printed nothing for ``idle_timeout`` seconds ("stalled") or
    runs past ``deadline`` ("timeout"), and say which in ``stopped``."""
    step = min(1.0, *(t / 4 for t in (idle_timeout, deadline and deadline - time.monotonic()) if t))
    while proc.poll() is None:
        now = time.monotonic()
        reason = ("stalled" if idle_timeout and now - last_output[0] > idle_timeout
                  else "timeout" if deadline and now > deadline else "")
        if reason:
            stopped.append(reason)
            _signal_group(proc, signal.SIGTERM)
            return
        time.sleep(step)


def _stream(
    argv: list[str],
    env: dict[str, str],
    cwd: str | os.PathLike[str] | None,
    log_file: Path | None,
    out: output.Channel | None,
    keep: bool,
    timeout: float | None,
    idle_timeout: float | None = None,
) -> tuple[str, int]:
    kept: list[str] = []
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("a", encoding="utf-8") if log_file else contextlib.nullcontext() as log:
        if log is not None:
            log.write(redact(f"+ {format_command(argv)}\n"))
        proc = _popen(argv, env, cwd)
        with _RUNNING_LOCK:
            _RUNNING.add(proc)
        last_output, stopped = [time.monotonic()], []
        if idle_timeout or timeout:
            deadline = time.monotonic() + timeout if timeout else None
            threading.Thread(target=_watch, args=(proc, last_output, idle_timeout, deadline, stopped), daemon=True).start()
        watch = line_watch.get()
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                last_output[0] = time.monotonic()
                line = raw.decode(errors="replace")
                note = watch(line) if watch is not None else None
                for text in (line, f"torchbake: {note}\n") if note else (line,):
                    if out is not None:
                        out.command_line(text)
                    if log is not None:
                        log.write(redact(text))
                kept.append(line)
                if not keep and len(kept) > 200:
                    del kept[:100]
            returncode = proc.wait()
            if stopped:
                raise _Stopped(stopped[0])
        except BaseException:  # stalled, timed out or interrupted: the whole process group stops
            _stop(proc)
            raise
        finally:
            with _RUNNING_LOCK:
                _RUNNING.discard(proc)
    return "".join(kept), returncode
