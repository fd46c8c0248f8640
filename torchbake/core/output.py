"""The one output channel. Everything torchbake prints goes through the current
:class:`Channel` (:func:`channel`): its notes, tables and progress bars, the ``+ command`` echo
and the commands' output. Its console has markup off, so text from outside (engine and command
output, error messages, paths, image names, user values) is always printed as it is;
``[/bin/sh -c …]`` is never read as a style. Styles are given explicitly, with :func:`styled`.
A note's text, and an error's message, is :func:`~torchbake.core.errors.printable`: an escape
sequence in a config's value prints as ``\\x1b[2J``, it does not clear the screen.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import sys
import threading
from typing import IO, TYPE_CHECKING, Any

from torchbake.core.errors import printable
from torchbake.core.redaction import redact

# The command the user typed: hints in messages ("`invoke gc`") name it. The installed `torchbake`
# command sets it (torchbake.program); `invoke` in a repository with a tasks.py is the default.
PROGRAM = "invoke"


def as_typed(text: str) -> str:
    """``text`` with its command hints (`` `invoke … ` ``) naming the command that runs."""
    return text if PROGRAM == "invoke" else text.replace("`invoke ", f"`{PROGRAM} ")


# rich is imported where a console, a table or a bar is made: listing tasks imports none of it
# (tests/unit/test_startup.py), nor does an unchanged build that prints to no terminal
# (tests/e2e/test_as_typed.py)
if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table
    from rich.text import Text


class _Redacting:
    """A text stream that masks secrets in everything written to it (what rich renders included)."""

    def __init__(self, stream: IO[str]):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(as_typed(text)))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def console(*, stderr: bool = False, file: IO[str] | None = None) -> Console:
    """A console for terminal output; in CI logs (not a terminal) tables get 160 columns."""
    from rich.console import Console

    stream = file or (sys.stderr if stderr else sys.stdout)
    width = None if file is None and stream.isatty() else 160
    return Console(file=_Redacting(stream), markup=False, highlight=False, soft_wrap=True, width=width)


class Channel:
    """Where a task, or one matrix cell, prints. Every write is whole lines under one lock that
    all channels share, so cells built side by side never mix inside a line. A cell built beside
    others gets a channel into its log with ``commands=False``: the commands' echo and output are
    in that log already, written by the command layer."""

    _lock = threading.RLock()

    def __init__(self, console: Console | None = None, *, commands: bool = True):
        self._console, self.commands = console, commands
        self._live = False  # a live line is drawn at the bottom (live_line): lines go above it, through rich

    @property
    def console(self) -> Console:
        """Its rich console: standard output's, made at first use, when none was given."""
        if self._console is None:
            self._console = console()
        return self._console

    @property
    def is_terminal(self) -> bool:
        return self.console.is_terminal

    def say(self, *parts: str | tuple[str, str]) -> None:
        """A note: plain text, or styled parts as :func:`styled` takes them. Where no style can
        show (standard output is no terminal, and nothing forces colour), it is written as rich
        would write it, without rich (imported only to draw: an unchanged build prints one line)."""
        if self._console is None and not sys.stdout.isatty() and not any(map(os.environ.get, _COLOUR_FORCED)):
            text = plain(*parts)
            if text is not None:
                result(text)
                return
        self.show(styled(*parts))

    def show(self, renderable: Any) -> None:
        """A table or other rich renderable."""
        with self._lock:
            self.console.print(renderable)

    def command_line(self, text: str) -> None:
        """A ``+ command`` echo or a line of a command's output, as it is."""
        if self.commands:
            with self._lock:
                if self._live:  # above the live line, as it is (the console reads no markup)
                    from rich.text import Text

                    self.console.print(Text(printable(text.rstrip("\n"))))
                    return
                stream = self._console.file if self._console else _Redacting(sys.stdout)  # a redacting stream
                stream.write(text if text.endswith("\n") else text + "\n")
                stream.flush()

    @contextlib.contextmanager
    def live_line(self):
        """A line at the bottom of a terminal, redrawn in place as it changes (a compile's objects
        done, rate and time left), drawn from its first text on and gone when the block ends; what
        is printed meanwhile goes above it. Yields the function that sets its text. Not a
        terminal: the function does nothing."""
        if not self.is_terminal:
            yield lambda text: None
            return
        from rich.live import Live
        from rich.text import Text

        live = Live(Text(""), console=self.console, transient=True, refresh_per_second=4, auto_refresh=True)

        def show(text: str) -> None:
            with self._lock:
                if not self._live:
                    live.start()
                    self._live = True
                live.update(Text(printable(text), style="bold"))

        try:
            yield show
        finally:
            with self._lock:
                if self._live:
                    live.stop()
                    self._live = False

    def progress(self, *, transient: bool = False) -> Progress:
        """A transfer progress bar on this channel, drawn only on a terminal."""
        return transfer_progress(enabled=self.is_terminal, console=self.console, transient=transient)


_current: contextvars.ContextVar[Channel | None] = contextvars.ContextVar("channel", default=None)


def channel() -> Channel:
    """The current channel (standard output unless a task or a matrix cell chose another)."""
    return _current.get() or Channel()


@contextlib.contextmanager
def channel_to(target: Channel):
    """Print through ``target`` inside the block (in this thread or task)."""
    token = _current.set(target)
    try:
        yield target
    finally:
        _current.reset(token)


def result(text: str) -> None:
    """The task's result on standard output, as it is (a TOML file, a CI matrix, commands)."""
    with Channel._lock:
        sys.stdout.write(redact(as_typed(text)))
        sys.stdout.flush()


def document(text: str) -> None:
    """A document on standard output byte for byte as written to a file (an SBOM, a statement):
    only a secret is ever changed in it."""
    with Channel._lock:
        sys.stdout.write(redact(text))
        sys.stdout.flush()


def transfer_progress(*, enabled: bool, console: Console | None = None, transient: bool = False) -> Progress:
    """The bar of every transfer (downloads, pushes): what moves (never read as markup), bytes,
    speed and time left; drawn only when ``enabled`` (a terminal)."""
    # imported here: rich's progress module adds about 18 ms to every start, and most tasks draw no bar
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    return Progress(TextColumn("{task.description}", markup=False, style="bold"), BarColumn(), DownloadColumn(),
                    TransferSpeedColumn(), TimeRemainingColumn(), console=console, disable=not enabled,
                    transient=transient)


def table(*, title: str) -> Table:
    """A table for :meth:`Channel.show` (rich's table module is imported when one is made: most
    tasks print none); its title and its cells' text are :func:`~torchbake.core.errors.printable`
    (an image's label, a registry's answer, a container's name are outside text)."""
    return _printable_table()(title=printable(title))


@functools.cache
def _printable_table() -> type[Table]:
    from rich.table import Table

    class PrintableTable(Table):
        def add_row(self, *renderables: Any, **options: Any) -> None:
            super().add_row(*(printable(cell) if isinstance(cell, str) else cell for cell in renderables), **options)

    return PrintableTable


def human_size(count: int) -> str:
    """Bytes for people: 1.1 GB, 312.0 MB, 12 B (decimal units, as docker prints sizes)."""
    for unit, factor in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= factor:
            return f"{count / factor:.1f} {unit}" if unit != "GB" else f"{count / factor:.2f} GB"
    return f"{count} B"


def plural(count: int, noun: str) -> str:
    """A count and its noun, in the singular for one: "1 cell", "3 cells"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


# rich colours a stream that is no terminal when one of these is set (rich.console.Console)
_COLOUR_FORCED = ("FORCE_COLOR", "TTY_COMPATIBLE")


def plain(*parts: str | tuple[str, str]) -> str | None:
    """:func:`styled` ``parts`` as a console that is no terminal prints them: the text without its
    styles, control codes made visible (:func:`styled`) and tabs expanded as rich does, then a
    newline; None for a tab in text that is not ASCII (rich expands it by the width of wide
    characters) or for a part that is rich's own Text."""
    if not all(isinstance(part, str) or (isinstance(part, tuple) and isinstance(part[0], str)) for part in parts):
        return None  # a rich Text among them: rich writes it
    text = printable("".join(part if isinstance(part, str) else part[0] for part in parts))
    if "\t" in text and not text.isascii():
        return None
    return "\n".join(line.expandtabs(8) for line in text.split("\n")) + "\n"


def styled(*parts: str | tuple[str, str]) -> Text:
    """Plain text with styled parts: ``styled(("Built", "bold green"), " ", image)``; no part is
    ever parsed for markup, and its control codes are written as escapes (``\\x1b``, ``\\x07``:
    :func:`~torchbake.core.errors.printable`), never sent to the terminal (rich itself would drop
    a bell or a carriage return, and pass an escape sequence on). A part that is rich's own Text
    is taken as it is."""
    from rich.text import Text

    return Text.assemble(*map(_visible, parts))


def _visible(part: Any) -> Any:
    """A part of :func:`styled`, its text :func:`~torchbake.core.errors.printable` (a rich Text as it is)."""
    if isinstance(part, str):
        return printable(part)
    if isinstance(part, tuple) and isinstance(part[0], str):
        return (printable(part[0]), *part[1:])
    return part
