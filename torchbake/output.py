"""The one output channel. Every console torchbake prints through comes from :func:`console`:
markup is off, so text from outside (engine and command output, error messages, paths, image
names, user values) is always printed as it is; ``[/bin/sh -c …]`` is never read as a style.
Styles are given explicitly, with :func:`styled`."""

from __future__ import annotations

import sys
from typing import IO

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from rich.text import Text


def console(*, stderr: bool = False, file: IO[str] | None = None) -> Console:
    """A console for terminal output; in CI logs (not a terminal) tables get 160 columns."""
    stream = file or (sys.stderr if stderr else sys.stdout)
    width = None if file is None and stream.isatty() else 160
    return Console(file=file, stderr=stderr, markup=False, highlight=False, soft_wrap=True, width=width)


def transfer_progress(*, enabled: bool, console: Console | None = None, transient: bool = False) -> Progress:
    """The bar of every transfer (downloads, pushes): what moves (never read as markup), bytes,
    speed and time left; drawn only when ``enabled`` (a terminal)."""
    return Progress(TextColumn("{task.description}", markup=False, style="bold"), BarColumn(), DownloadColumn(),
                    TransferSpeedColumn(), TimeRemainingColumn(), console=console, disable=not enabled,
                    transient=transient)


def human_size(count: int) -> str:
    """Bytes for people: 1.1 GB, 312.0 MB, 12 B (decimal units, as docker prints sizes)."""
    for unit, factor in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= factor:
            return f"{count / factor:.1f} {unit}" if unit != "GB" else f"{count / factor:.2f} GB"
    return f"{count} B"


def styled(*parts: str | tuple[str, str]) -> Text:
    """Plain text with styled parts: ``styled(("Built", "bold green"), " ", image)``; no part is
    ever parsed for markup."""
    return Text.assemble(*parts)
