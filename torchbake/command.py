"""Every host subprocess goes through :func:`run`.

It prints ``+ <command>`` (quoted exactly as a shell would need it), resolves the binary first
(a missing tool is a clear error, not a ``FileNotFoundError``), can stream output live while
saving it to a log file, and turns a non-zero exit into the given ``FatalError`` subclass.
Arguments are always a list, passed to the program directly: no shell is ever involved.
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .errors import CommandError, FatalError

# Where command output goes when no stream is given: stdout, or (for a matrix cell built beside
# others) somewhere quieter; its per-build log gets everything either way.
default_stream: contextvars.ContextVar[IO[str] | None] = contextvars.ContextVar("default_stream", default=None)
# Variables every command of the current task gets (e.g. the --ca-bundle for pip and git).
extra_env: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("extra_env", default={})  # noqa: B039


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


def show_command(args: Sequence[str], env: Mapping[str, str] | None = None, stream: IO[str] | None = None) -> None:
    """Print ``+ <command>`` where command output goes (what a user could paste to do the same)."""
    print(f"+ {format_command(args, env)}", file=stream or default_stream.get() or sys.stdout, flush=True)


def resolve_binary(name: str, *, hint: str = "", error: type[FatalError] = CommandError) -> str:
    path = shutil.which(name)
    if path is None:
        message = f"{name!r} was not found on PATH."
        raise error(f"{message} {hint}".strip())
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
    stream: IO[str] | None = None,
    idle_timeout: float | None = None,
) -> CommandResult:
    """Run ``args``; ``env`` holds variables added to the current environment.

    - ``capture``: collect output (stdout and stderr together) and return it, printing nothing.
    - ``log_file``: stream output live to ``stream`` (stdout by default) and append it to the file.
    - ``check``: raise ``error`` on a non-zero exit, with the tail of the output and the hint.
    - ``idle_timeout`` (streamed commands): stop the command when it prints nothing for that long.
    """
    argv = _argv(args, error)
    out = stream or default_stream.get() or sys.stdout
    if echo:
        show_command(argv, env, out)
    full_env = {**os.environ, **extra_env.get(), **(env or {})}
    try:
        if capture and log_file is None:
            proc = subprocess.run(
                argv,
                env=full_env,
                cwd=cwd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
            output, returncode = proc.stdout, proc.returncode
        else:
            output, returncode = _stream(argv, full_env, cwd, log_file, out, capture, timeout, idle_timeout)
    except _Stalled as exc:
        raise error(
            f"{format_command(argv)} printed nothing for {idle_timeout:g} s and was stopped. {failure_hint}".strip()
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise error(
            f"{format_command(argv)} did not finish within {timeout:g} s. {failure_hint}".strip()
        ) from exc
    result = CommandResult(tuple(argv), returncode, output)
    if check and returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-15:])
        where = f"\nFull output: {log_file}" if log_file else ""
        raise error(
            f"Command failed with exit status {returncode}: {format_command(argv)}\n"
            f"{tail}{where}\n{failure_hint}".rstrip()
        )
    return result


def run_attached(args: Sequence[str | os.PathLike[str]], *, forward_stdin: bool = True,
                 error: type[FatalError] = CommandError) -> int:
    """Run ``args`` with the user's terminal (or standard streams) passed straight through, as an
    interactive shell or a command whose output is the result; return its exit status. The
    ``+ command`` echo goes to the default stream (stderr for run-container), never stdout."""
    argv = _argv(args, error)
    print(f"+ {format_command(argv)}", file=default_stream.get() or sys.stdout, flush=True)
    sys.stdout.flush()
    stdin = None if forward_stdin else subprocess.DEVNULL
    return subprocess.run(argv, stdin=stdin, check=False).returncode


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


class _Stalled(Exception):
    """A streamed command printed nothing for its idle timeout."""


def _watch(proc: subprocess.Popen, last_output: list[float], idle_timeout: float, stalled: threading.Event) -> None:
    while proc.poll() is None:
        if time.monotonic() - last_output[0] > idle_timeout:
            stalled.set()
            _signal_group(proc, signal.SIGTERM)
            return
        time.sleep(min(1.0, idle_timeout / 4))


def _stream(
    argv: list[str],
    env: dict[str, str],
    cwd: str | os.PathLike[str] | None,
    log_file: Path | None,
    out: IO[str],
    keep: bool,
    timeout: float | None,
    idle_timeout: float | None = None,
) -> tuple[str, int]:
    kept: list[str] = []
    last_output = [time.monotonic()]
    stalled = threading.Event()
    log = None
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log = log_file.open("a", encoding="utf-8")
        log.write(f"+ {format_command(argv)}\n")
    try:
        with subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True,
        ) as proc:
            with _RUNNING_LOCK:
                _RUNNING.add(proc)
            if idle_timeout:
                threading.Thread(target=_watch, args=(proc, last_output, idle_timeout, stalled), daemon=True).start()
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    last_output[0] = time.monotonic()
                    out.write(line)
                    out.flush()
                    if log is not None:
                        log.write(line)
                    kept.append(line)
                    if not keep and len(kept) > 200:
                        del kept[:100]
                returncode = proc.wait(timeout=timeout)
                if stalled.is_set():
                    raise _Stalled()
            except BaseException:
                _signal_group(proc, signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    _signal_group(proc, signal.SIGKILL)
                raise
            finally:
                with _RUNNING_LOCK:
                    _RUNNING.discard(proc)
    finally:
        if log is not None:
            log.close()
    return "".join(kept), returncode
