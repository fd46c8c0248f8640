"""The reference pages of the documentation, rendered from the code's own declarations, so that
they cannot drift from it: every option (``torchbake.configuration.settings``), every task and flag (the invoke
collection), every exit code (``torchbake.core.errors``) and every bundled accelerator
(``configs/accelerators.toml``). ``docs/hooks.py`` puts them into the site when it is built.
"""

from __future__ import annotations

import html
import inspect as python_inspect
import json
import re
from collections.abc import Iterator

from torchbake.configuration import accelerators, settings
from torchbake.configuration.options import Flag
from torchbake.core import errors

# A task that a signal stopped (torchbake.tasks.cli): not an error class, the shell's convention.
SIGNAL_CODES = {130: "Interrupted (SIGINT, Ctrl-C): what the task had started was stopped and cleaned up.",
                143: "Terminated (SIGTERM): as for 130."}


CODE_SPAN = re.compile(r"(`+).*?\1")


def _text(text: object) -> str:
    """Plain text as Markdown that shows it as written: ``<`` ``>`` ``&`` outside code spans are
    HTML-escaped, or the browser takes a placeholder such as ``<suite>`` for a tag and drops it."""
    text, shown, at = str(text), [], 0
    for span in CODE_SPAN.finditer(text):
        shown += [html.escape(text[at:span.start()], quote=False), span.group()]
        at = span.end()
    return "".join([*shown, html.escape(text[at:], quote=False)])


def _cell(text: object) -> str:
    """Text for one Markdown table cell (or list item): one line, placeholders shown."""
    return _text(" ".join(str(text).split())).replace("|", "\\|")


def _value(value: object) -> str:
    return f"`{json.dumps(value)}`" if value not in ("", [], {}) else "(empty)"


def _decides(declaration: settings.Declaration) -> str:
    if declaration.decides == settings.EVERY_IMAGE:
        return "every image"
    return ", ".join(declaration.decides) or declaration.counted or "no image's content"


def flags_by_option() -> dict[str, list[Flag]]:
    """``section.key`` → the flags of every task that set it."""
    found: dict[str, list[Flag]] = {}
    for _, flags in task_flags():
        for flag in flags:
            if flag.key and flag not in found.setdefault(flag.key, []):
                found[flag.key].append(flag)
    return found


def options_markdown() -> str:
    """Every option, section by section: key, type, default, what it decides, how to set it."""
    by_option = flags_by_option()
    lines: list[str] = []
    sections: dict[str, list[str]] = {}
    for key in settings.declarations():
        sections.setdefault(key.split(".", 1)[0], []).append(key)
    for section, keys in sections.items():
        lines += [f"## `[{section}]`", "", _text(settings.section_help(section)), ""]
        for key in keys:
            declaration = settings.declaration(key)
            flags = by_option.get(key, [])
            spellings = sorted({flag.spelling for flag in flags})
            legacy = sorted({alias for flag in flags for alias in flag.aliases})
            lines += [f"### `{key}`", "", _cell(declaration.help), "",
                      f"- type: `{type(declaration.default).__name__}`, default: {_value(declaration.default)}",
                      f"- decides: {_decides(declaration)}",
                      f"- environment: `{settings.env_var_name(key)}`",
                      f"- file: `[{section}] {key.split('.', 1)[1]} = …` in `torchbake.toml` or a `--config` file"]
            if spellings:
                lines.append(f"- flag: {', '.join(f'`{s}`' for s in spellings)}"
                             + (f" (also {', '.join(f'`-{a}`' if len(a) == 1 else f'`--{a}`' for a in legacy)})"
                                if legacy else ""))
            lines.append("")
    lines += [f"## `[{settings.TOOLKITS_SECTION}]` and `[checksums]`", ""]
    lines += [f"- `[{name}]`: {_cell(text)}" for name, text in settings.KEYED_SECTIONS_HELP.items()]
    return "\n".join(lines) + "\n"


def task_flags() -> Iterator[tuple[object, tuple[Flag, ...]]]:
    """Each task of the collection with the flags it takes (as ``flag_task`` declared them)."""
    from torchbake.tasks import ns

    for name in sorted(ns.tasks):
        task = ns.tasks[name]
        yield task, getattr(task, "flags", ())


def tasks_markdown() -> str:
    """Every task: what it does (its docstring) and each flag with its help, at the anchor
    ``invoke --help TASK`` names."""
    from torchbake.tasks import ns
    from torchbake.tasks.help import anchor

    lines: list[str] = []
    for name in sorted(ns.tasks):
        task = ns.tasks[name]
        doc = python_inspect.cleandoc(task.body.__doc__ or "")
        lines += [f"## `invoke {name}`", "", _text(doc), "", "| flag | what it does |", "|---|---|"]
        for flag in getattr(task, "flags", ()):
            aliases = ", ".join(f"-{a}" if len(a) == 1 else f"--{a}" for a in flag.aliases)
            typed = flag.param.upper() if flag.positional else flag.spelling
            lines.append(f'| <a id="{anchor(name, flag)}"></a>`{typed}`{f" ({_cell(aliases)})" if aliases else ""}'
                         f" | {_cell(flag.help)} |")
        lines.append("")
    return "\n".join(lines)


def exit_codes() -> dict[int, list[type[errors.FatalError]]]:
    """Exit code → the error classes that end a task with it."""
    found: dict[int, list[type[errors.FatalError]]] = {}
    for _, cls in python_inspect.getmembers(errors, python_inspect.isclass):
        if issubclass(cls, errors.FatalError):
            found.setdefault(cls.exit_code, []).append(cls)
    return dict(sorted(found.items()))


def exit_codes_markdown() -> str:
    """Every exit code a task returns, each with what it means to the user (the ``meaning`` of the
    error class that sets the code: its subclasses, which end a task with it too, are included)."""
    lines = ["| code | meaning |", "|---|---|", "| 0 | Done. |"]
    for code, classes in exit_codes().items():
        declaring = next(cls for cls in classes if "exit_code" in vars(cls))
        lines.append(f"| {code} | {_cell(declaring.meaning)} |")
    lines += [f"| {code} | {_cell(text)} |" for code, text in SIGNAL_CODES.items()]
    return "\n".join(lines) + "\n"


def accelerators_markdown() -> str:
    """Every bundled accelerator: what it is, the toolkits a build installs, what a container gets."""
    lines: list[str] = []
    for name, accelerator in accelerators.bundled().items():
        lines += [f"## `{name}`", "", _cell(accelerator.description), ""]
        for toolkit in accelerator.toolkits:
            lines.append(f"- toolkit `[toolkits] {toolkit.key}`: {_cell(toolkit.help)}"
                         + (" (required)" if toolkit.required else ""))
        devices = accelerator.devices
        if devices.check:
            lines.append(f"- containers: the built-in `{devices.check}` check and device access")
        elif devices.any_of or devices.devices:
            lines.append(f"- containers: {_cell(devices.needs or ', '.join(devices.any_of or devices.devices))}"
                         + (", privileged" if devices.privileged else "")
                         + "".join(f", `{path}` read-only" for path in devices.mounts))
        if accelerator.on_device:
            lines.append(f"- only on the device: {_cell(accelerator.on_device)}")
        lines.append("")
    return "\n".join(lines)


PAGES = {"options": options_markdown, "tasks": tasks_markdown, "exit-codes": exit_codes_markdown,
         "accelerators": accelerators_markdown}
