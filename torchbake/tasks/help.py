"""``invoke --help TASK`` at a glance: one line a flag, grouped as a reader looks for them.

A flag's line is the first sentence of its help (the rest is in the generated reference, which
gives each flag the anchor :func:`anchor` names, ``#TASK--FLAG``); flags are grouped as
:data:`GROUPS` says, at 80 columns whatever the terminal. A task that declares no flags of its own
(a team's task beside torchbake's) keeps invoke's help.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import sys
import textwrap
from collections.abc import Callable, Iterable, Iterator

from invoke import Program

from torchbake.configuration.options import SWITCH, Flag, option_default
from torchbake.core import output

WIDTH = 80
FLAG_COLUMN = 32  # the flag's spelling fits in it; a longer one pushes its help to the right

TRUST = {"push", "registry", "sign_key", "base_key", "require_registry", "no_registry_check", "locked",
         "require_hashes", "ca_bundle", "check_reproducible", "require_index",
         "signatures", "key", "identity", "issuer", "require"}  # (the last: verify's)

# (heading, does the flag belong): the first group that takes a flag shows it
GROUPS: tuple[tuple[str, Callable[[Flag], bool]], ...] = (
    ("Release images (--release)", lambda flag: flag.only == "release"),
    ("Dev images (from source)", lambda flag: flag.only == "dev"),
    ("Vendor toolkits", lambda flag: flag.key.startswith("toolkits.")),
    ("Publishing and trust", lambda flag: flag.param in TRUST),
)
COMMON = "Common"

# a sentence ends at ". " not after these abbreviations
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)\.(?:\s|$)")
_OPTION_SUFFIX = re.compile(r"\s*\[[a-z_]+\] [a-z_]+$")
_CODE_SPAN = re.compile(r"`[^`]*`")


def summary(flag: Flag) -> str:
    """The flag's help up to the end of its first sentence, without the option it sets."""
    text = " ".join(_OPTION_SUFFIX.sub("", flag.help).split())
    found = _SENTENCE_END.search(text)
    return (text[:found.start()] if found else text).rstrip(".")


def fits(text: str, width: int) -> str:
    """``text`` cut at a word to ``width`` columns, "…" marking the cut (a team's own long help)."""
    if len(text) <= width:
        return text
    return text[:width - 1].rsplit(" ", 1)[0].rstrip(",;:") + "…"


def spelling(flag: Flag) -> str:
    """``-n, -i, --name VALUE``, ``--jobs N``, ``IMAGE, --image VALUE`` (given with or without its
    flag); the underscore spellings of the legacy scripts are read but not shown here (the
    reference lists them)."""
    if flag.positional:
        return f"{flag.param.upper()}, {flag.spelling} VALUE"
    shorts = [f"-{alias}" for alias in flag.aliases if len(alias) == 1]
    value = "" if flag.default is SWITCH else " N" if _whole_number(flag) else " VALUE"
    return ", ".join([*shorts, flag.spelling]) + value


def anchor(task: str, flag: Flag) -> str:
    """The flag's anchor in the tasks reference (``build--torch-whl-url``; torchbake.reference)."""
    return f"{task.replace('_', '-')}--{flag.param.replace('_', '-')}"


def _whole_number(flag: Flag) -> bool:
    """The flag takes a whole number: its default is one, or the option it sets is."""
    default = option_default(flag)
    return isinstance(default, int) and not isinstance(default, bool)


def grouped(flags: Iterable[Flag]) -> list[tuple[str, list[Flag]]]:
    """The flags under their headings, common ones first, each group in declaration order."""
    groups: dict[str, list[Flag]] = {COMMON: []}
    for heading, _ in GROUPS:
        groups[heading] = []
    for flag in flags:
        heading = next((heading for heading, belongs in GROUPS if belongs(flag)), COMMON)
        groups[heading].append(flag)
    return [(heading, members) for heading, members in groups.items() if members]


def render(task: str, flags: tuple[Flag, ...], docstring: str, optional: Iterable[str] = ()) -> str:
    """The whole help of ``task`` as printed (``optional``: the positional arguments that may be
    left out, shown in brackets)."""
    program = output.PROGRAM
    positional = " ".join(f"[{flag.param.upper()}]" if flag.param in optional else flag.param.upper()
                          for flag in flags if flag.positional)
    lines = [f"Usage: {program} {task} {positional + ' ' if positional else ''}[FLAGS]", ""]
    for paragraph in inspect.cleandoc(docstring).split("\n\n"):  # reflowed to the width, a `command` kept whole
        kept = _CODE_SPAN.sub(lambda span: span.group().replace(" ", "\0"), " ".join(paragraph.split()))
        wrapped = textwrap.wrap(kept, WIDTH, break_long_words=False, break_on_hyphens=False)
        lines += [*(line.replace("\0", " ") for line in wrapped), ""]
    for heading, members in grouped(flags):
        lines.append(f"{heading}:")
        for flag in members:
            spelled = spelling(flag)
            column = max(FLAG_COLUMN, len(spelled) + 4)
            lines.append(f"  {spelled:<{column - 2}}{fits(summary(flag), WIDTH - column)}".rstrip())
        lines.append("")
    example = next(flag for flag in flags if not flag.positional)
    lines.append(f"More on each flag: the docs' reference/tasks page, #{task}--FLAG (e.g.")
    lines.append(f"#{anchor(task, example)}); each option's value and source: `{program} show-config`.")
    return "\n".join(lines) + "\n"


def _print_task_help(program: Program, name: str, original=Program.print_task_help) -> None:
    task = program.collection[name]
    flags = getattr(task, "flags", None)
    with _reader_may_stop():
        if not flags:  # a team's own task: invoke's help
            original(program, name)
            return
        sys.stdout.write(render(name, flags, task.__doc__ or "", getattr(task, "optional_positional", ())))
        sys.stdout.flush()


def _list_tasks(program: Program, original=Program.list_tasks) -> None:
    with _reader_may_stop():
        original(program)


@contextlib.contextmanager
def _reader_may_stop() -> Iterator[None]:
    """`invoke --help build | head`, `invoke --list | head`: the reader stopped; stop quietly (the
    rest of the output goes nowhere), as other commands do, not with a BrokenPipeError traceback."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _parse_cleanup(program: Program, original=Program.parse_cleanup) -> None:
    """``--help`` of an unknown task: bad input, as the unknown task itself is (its nearest task,
    exit 2), not invoke's bare "No idea what '…' is!" with exit 1."""
    asked = program.args.help.value
    if isinstance(asked, str) and asked not in program.parser.contexts:
        from torchbake.tasks.cli import unknown_task

        raise unknown_task(program.parser, asked)
    original(program)


Program.print_task_help = _print_task_help  # type: ignore[method-assign]
Program.list_tasks = _list_tasks  # type: ignore[method-assign]
Program.parse_cleanup = _parse_cleanup  # type: ignore[method-assign]
