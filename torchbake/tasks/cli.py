"""Shared pieces of the invoke task layer: legacy flag spellings, error reporting, settings.

Task modules only parse flags and call into the package; this module is the one place where
``os.environ`` is read and where ``FatalError`` becomes an exit status.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import re
import signal
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from invoke import Exit, Task, task
from invoke.exceptions import ParseError
from invoke.parser import Argument, Parser
from invoke.parser.parser import ParseMachine

from torchbake.configuration import validation, writable
from torchbake.configuration.validation import NUMBER_WORDS, parse_number
from torchbake.core import output
from torchbake.core.errors import ConfigurationError, EngineError, FatalError
from torchbake.core.lazy import LazyModule
from torchbake.core.redaction import redact

if TYPE_CHECKING:
    from torchbake.adapters.engine import DockerClient
    from torchbake.configuration.options import Flag
    from torchbake.configuration.project import Project
    from torchbake.configuration.settings import Settings

if TYPE_CHECKING:
    from torchbake.configuration import project
    from torchbake.planning import config
else:
    config = LazyModule("torchbake.planning.config")  # read when a task runs, not when tasks are listed
    project = LazyModule("torchbake.configuration.project")


class FlagTask(Task):
    """A task whose flags may carry extra spellings: ``names={"python": ["v", "python_version"]}``.

    The legacy scripts' short flags (``-n``, ``-b``, ``-v`` …) and underscore spellings
    (``--python_version``) keep working. Automatic short flags are off, so every short flag is
    one that was chosen on purpose.
    """

    def __init__(self, *args: Any, names: Mapping[str, Iterable[str]] | None = None,
                 optional_positional: Iterable[str] = (), **kwargs: Any):
        self.extra_names = {k: list(v) for k, v in (names or {}).items()}
        self.optional_positional = set(optional_positional)
        kwargs.setdefault("auto_shortflags", False)
        super().__init__(*args, **kwargs)

    def get_arguments(self, *args: Any, **kwargs: Any) -> list[Argument]:
        helps = dict(self.help)  # invoke pops each help text it hands out: asked again, it would have none
        try:
            arguments = super().get_arguments(*args, **kwargs)
        finally:
            self.help = helps
        for argument in arguments:
            argument.optional_positional = argument.name in self.optional_positional  # type: ignore[attr-defined]
        return arguments

    def arg_opts(self, name: str, default: str, taken_names: set[str]) -> dict[str, Any]:
        opts = super().arg_opts(name, default, taken_names)
        main = opts["names"][0]
        # an underscore spelling of a dashed name is read as it by the parser (_dashed): not a name of its own
        extra = [n for n in self.extra_names.get(name, []) if n.replace("_", "-") != main]
        opts["names"] = list(opts["names"]) + extra
        return opts


def flag_task(*flags: Flag, optional_positional: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Any]:
    """An invoke task of ``body(c, **given)`` that takes exactly ``flags``: its parameters (in
    this order), help, extra spellings and repeatable flags come from their declarations."""
    def decorate(body: Callable[..., Any]) -> Any:
        parameters = [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + [
            inspect.Parameter(f.param, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                              default=inspect.Parameter.empty if f.positional and f.param not in optional_positional
                              else f.default)
            for f in flags]
        body.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        made = task(klass=FlagTask, help={f.param: f.help for f in flags},
                    names={f.param: list(f.aliases) for f in flags if f.aliases},
                    iterable=[f.param for f in flags if f.repeatable],
                    positional=[f.param for f in flags if f.positional],
                    optional_positional=optional_positional)(body)
        made.flags = flags  # the declarations, for the reference (torchbake.reference)
        return made
    return decorate


IMAGE_ARGUMENTS = ("image", "old", "new")  # the tasks' positional arguments that name an image (verify, diff …)


def _complete_context(parser: ParseMachine, original=ParseMachine.complete_context) -> None:
    """invoke's positional arguments are all required; one a FlagTask marks optional
    (``optional_positional=[...]``, e.g. run-container's IMAGE) is "" when left out."""
    helping = bool(parser.initial and "--help" in parser.initial.flags and parser.initial.flags["--help"].value)
    for argument in (parser.context.positional_args if parser.context else []):
        optional = getattr(argument, "optional_positional", False)
        if isinstance(argument.value, str) and not argument.value.strip() and not helping:  # typed: `verify ""`
            # never "left out" (an unset shell variable: `verify "$IMAGE"`), nor a name for the engine to refuse
            parser.error(f"{argument.name.upper()} is empty (given {argument.value!r}): name one"
                         f"{', or leave it out' if optional else ''}.")
        if argument.name in IMAGE_ARGUMENTS and argument.value and not helping:  # never a malformed one to the engine
            try:
                validation.image_or_id(argument.value)
            except ValueError as exc:
                parser.error(f"{argument.name.upper()} {argument.value!r} is invalid: {exc}.")
        if (helping or optional) and argument.value is None:
            argument.set_value("")  # --help asked: the task is not run, its IMAGE is not needed
    original(parser)


ParseMachine.complete_context = _complete_context  # type: ignore[method-assign]


def _handle(parser: ParseMachine, token: str, original=ParseMachine.handle) -> None:
    """``invoke TASK --help`` is the task's help, also for a task that takes IMAGE: invoke would
    read --help as the IMAGE it still waits for (``docker image inspect --help`` failed). And the
    legacy scripts' underscore spellings (``--torch_whl_url``, ``--no_prepare``) are the flags
    their dash spellings name: invoke itself knows only the dash spelling of a flag."""
    token = _dashed(parser, token)
    flag = parser.initial.flags[token] if parser.initial and token in parser.initial.flags else None  # (aliases: -h)
    in_task = parser.context is not None and bool(parser.context.name) and not parser.waiting_for_flag_value
    if flag is not None and flag.name == "help" and in_task and token not in parser.context.flags:
        flag.value = parser.context.name
        return
    # A word of dashes the task does not know is an unknown flag: never the IMAGE or NAME the task still
    # waits for (`verify --relase`), nor one of invoke's own flags after the task's name (`build -R`, -V).
    if (in_task and token.startswith("-") and token != "-" and token not in parser.context.flags
            and token not in parser.context.inverse_flags
            and (parser.context.missing_positional_args or flag is not None)):
        parser.error(f"No idea what {token!r} is!")
    # `verify IMG --image OTHER`: the flag of an argument given already (invoke would take OTHER for a task)
    given = parser.context.flags[token] if in_task and token in parser.context.flags else None
    if given is not None and given.positional and given.got_value:
        parser.error(f"{token} names the {given.name.upper()} given already ({given.value!r}): give one"
                     f" {given.name.upper()}, as the argument or as {token} {given.name.upper()}.")
    # `verify --image OTHER IMG`: a second word for an argument given already as its flag
    if in_task and not token.startswith("-") and token not in parser.contexts and not parser.context.missing_positional_args:
        filled = [arg for arg in parser.context.positional_args if arg.got_value]
        if filled and not _nearest(parser, "", token):  # (a task's name mistyped: invoke's error, its hint)
            if len(filled) == 1:
                parser.error(f"{token!r} is a second {filled[0].name.upper()}: it is given already"
                             f" ({filled[0].value!r}); give one {filled[0].name.upper()}.")
            takes = " and ".join(f"{arg.name.upper()} ({arg.value!r})" for arg in filled)
            parser.error(f"{token!r} is one word too many: {parser.context.name} takes {takes}, given already.")
    original(parser, token)


ParseMachine.handle = _handle  # type: ignore[method-assign]


def _dashed(parser: ParseMachine, token: str) -> str:
    """``--a_b`` as ``--a-b`` where the task has that flag and not the token itself (and an
    :data:`torchbake.configuration.options.UNSHOWN_SPELLINGS` spelling as its flag)."""
    if not (token.startswith("--") and "_" in token) or parser.context is None or parser.waiting_for_flag_value:
        return token
    def known(flag: str) -> bool:  # (the flags are a Lexicon: ``in`` sees the aliases, keys() does not)
        return flag in parser.context.flags or flag in parser.context.inverse_flags

    from torchbake.configuration.options import UNSHOWN_SPELLINGS  # (the tasks' flags imported it already)

    dashed = "--" + token[2:].replace("_", "-")
    dashed = UNSHOWN_SPELLINGS.get(dashed, dashed)
    return dashed if not known(token) and known(dashed) else token


def _set_value(argument: Argument, value: Any, cast: bool = True, original=Argument.set_value) -> None:
    """A flag's value of the wrong type (``--jobs x``) is a parse error naming the flag, the value
    and what is accepted, never a ValueError traceback."""
    try:
        if cast and argument.kind in NUMBER_WORDS and isinstance(value, str):
            value = parse_number(value, argument.kind)  # digits, not Python's literals (1_0, nan)
        original(argument, value, cast)
    except (ValueError, TypeError):
        flag = ("-" if len(argument.name) == 1 else "--") + argument.name.replace("_", "-")
        raise ParseError(f"{flag} {value!r}: expected {NUMBER_WORDS.get(argument.kind, argument.kind.__name__)}.") from None


def _parse_argv(parser: Parser, argv: list[str], original=Parser.parse_argv) -> Any:
    """invoke's parse errors (an unknown flag, a value of the wrong type, a missing IMAGE) are bad
    input like any other: ``torchbake: error: …`` with the task's --help, exit status 2."""
    completing = "--complete" in sys.argv  # the shell's tab completion: invoke reads a partial word's error itself
    try:
        if parser.contexts and not completing:
            _refuse_words_after_separator(sys.argv[1:])
        _refuse_missing_values(parser, argv)
        return original(parser, argv)
    except ParseError as exc:
        if completing:
            raise
        task = exc.context.name if exc.context is not None and exc.context.name else ""
        task = task or next((word for word in reversed(argv) if word in parser.contexts), "")  # the task being read
        hint = f" `invoke --help {task}` lists its flags." if task else " `invoke --list` lists the tasks."
        text = str(exc) if str(exc).endswith((".", "!")) else f"{exc}."
        if unknown := re.fullmatch(r"No idea what '(.*)' is!", str(exc)):
            text += _nearest(parser, task, unknown[1])
        raise Exit(message=redact(output.as_typed(f"torchbake: error: {text}{hint}")), code=ConfigurationError.exit_code) from None


def unknown_task(parser: Parser, name: str) -> Exit:
    """``invoke --help buld``: the exit of an unknown task's name, with the nearest one."""
    text = f"No idea what '{name}' is!{_nearest(parser, '', name)} `invoke --list` lists the tasks."
    return Exit(message=redact(output.as_typed(f"torchbake: error: {text}")), code=ConfigurationError.exit_code)


# the legacy scripts' flags whose meaning lives elsewhere in torchbake: what to type instead
ELSEWHERE = {
    ("build", "-s"): "An older build.sh's -s/--sys chose the Dockerfile folder; torchbake's Dockerfiles serve every"
                     " OS: give the OS image with -b/--base-img (a release), or build-base -s (a dev image's base).",
}
ELSEWHERE[("build", "--sys")] = ELSEWHERE[("build", "-s")]
ELSEWHERE[("build", "--requirements-date")] = ("--requirements-date is build-base's (and lock's): how new the base"
                                               " image's build requirements may be.")


def _nearest(parser: Parser, task: str, token: str) -> str:
    """What the user may have meant by an unknown ``token``: the legacy flag's torchbake spelling,
    or the nearest flag of ``task`` (or task name), as " Did you mean …?"; "" when none is near."""
    import difflib

    if said := ELSEWHERE.get((task, token.split("=", 1)[0])):
        return f" {said}"
    word = token.split("=", 1)[0]
    context = parser.contexts.get(task) if task else None
    if context is not None and parser.initial is not None and word in parser.initial.flags:  # -R is not -r
        own = "--" + parser.initial.flags[word].name.replace("_", "-")
        return f" {word} is invoke's own {own}, not a flag of {task} (invoke's flags go before the task's name)."
    if word.startswith("-") and context is not None:
        names = [*context.flags.keys(), *context.flags.aliases.keys(), *context.inverse_flags.keys()]
        wanted = "--" + word.lstrip("-").replace("_", "-") if len(word.lstrip("-")) > 1 else word
        if wanted != word and (wanted in context.flags or wanted in context.inverse_flags):  # ---name
            return f" Did you mean {wanted}?"
        # another task's flag, as it is spelled: which tasks have it
        if owners := sorted({name for name, other in parser.contexts.items() if name != task
                             and (wanted in other.flags or wanted in other.inverse_flags)}):
            return f" {wanted} is a flag of {', '.join(owners)}, not of {task}."
    else:
        names, wanted = list(parser.contexts.keys()), word.replace("_", "-")
    # another case is the same word (--NAME, BUILD-ALL), but a one-letter flag's case is its name (-v is not -V)
    fold = str if len(wanted.lstrip("-")) == 1 else str.lower
    folded: dict[str, str] = {}
    for name in names:
        folded.setdefault(fold(name), name)
    found = difflib.get_close_matches(fold(wanted), folded, n=1, cutoff=0.75)
    return f" Did you mean {folded[found[0]]}?" if found else ""


def _refuse_words_after_separator(argv: list[str]) -> None:
    """Words after ``--`` are what invoke hands a task as its remainder; no torchbake task reads them,
    so they are refused rather than dropped (``invoke build -- --release`` built a dev image). Read
    from the command line itself: invoke takes them off before the tasks' parser is made."""
    if "--" in argv and (after := argv[argv.index("--") + 1:]):
        raise ParseError(f"torchbake's tasks read no words after `--` (given: {' '.join(after)}).")


def _refuse_missing_values(parser: Parser, argv: list[str]) -> None:
    """A flag that takes a value, given none (last on the line, or followed by another of the
    task's flags: ``--config --dry-run``), is a parse error; invoke would leave it unset or take the
    next flag as its value."""
    from torchbake.configuration.options import UNSHOWN_SPELLINGS

    def spelled(word: str) -> str:  # a legacy spelling as the flag it is (_dashed)
        dashed = "--" + word[2:].replace("_", "-") if word.startswith("--") else word
        return UNSHOWN_SPELLINGS.get(dashed, dashed)

    context = parser.contexts.get(argv[0]) if argv else None
    for index, word in enumerate(argv):
        if word in parser.contexts:
            context = parser.contexts[word]
            continue
        if context is not None and word.startswith("--") and "=" in word:  # a switch given a value
            name = spelled(word.split("=", 1)[0])
            switch = context.flags[name] if name in context.flags else context.inverse_flags.get(name)
            if switch is not None and (isinstance(switch, str) or not switch.takes_value):
                raise ParseError(f"{word.split('=', 1)[0]} takes no value (given {word})", context)
            continue
        if context is None or not word.startswith("-") or "=" in word or spelled(word) not in context.flags:
            continue
        argument = context.flags[spelled(word)]
        if not argument.takes_value or argument.optional:
            continue
        following = argv[index + 1] if index + 1 < len(argv) else None
        if (following is None or following in ("--help", "-h") or spelled(following) in context.flags
                or spelled(following) in context.inverse_flags):  # (`--command --help` ran a container)
            raise ParseError(f"{word} needs a value", context)


Argument.set_value = _set_value  # type: ignore[method-assign]
Parser.parse_argv = _parse_argv  # type: ignore[method-assign]


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C's KeyboardInterrupt so the same clean-up runs."""


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated()


def _interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM that ``exc`` was raised in the handling of, if any."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        seen.add(id(exc))
        exc = exc.__context__
    return None


def _interrupted(exc: KeyboardInterrupt) -> Exit:
    name, code = ("SIGTERM", 143) if isinstance(exc, Terminated) else ("SIGINT", 130)
    return Exit(message=f"torchbake: interrupted ({name}); what this run had started was cleaned up."
                        " Images that existed before are unchanged; run the command again to go on.", code=code)


def reports_errors(body: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a ``FatalError`` into its message and exit code (no traceback); SIGINT and SIGTERM
    unwind through every ``finally`` (temporary contexts, partial downloads, candidate images and
    probe containers are removed) and exit with 130 / 143."""

    @functools.wraps(body)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        previous = signal.signal(signal.SIGTERM, _terminate)
        succeeded = False
        try:
            done = body(*args, **kwargs)
            succeeded = True
            return done
        except FatalError as exc:
            sys.stdout.flush()
            raise Exit(message=redact(output.as_typed(f"torchbake: error: {exc}")), code=exc.exit_code) from None
        except KeyboardInterrupt as exc:
            raise _interrupted(exc) from None
        except Exception as exc:  # one raised while an interrupt unwound (a module it stopped half imported)
            if (cause := _interrupt_behind(exc)) is None:
                raise
            raise _interrupted(cause) from None
        finally:
            signal.signal(signal.SIGTERM, previous)
            if (clients := sys.modules.get("torchbake.adapters.docker_cli")) is not None:
                clients.keep_answers(write=succeeded)  # what it learnt of its docker client: kept if it succeeded

    return wrapper


def resolve_config(config_files: Iterable[str] | None, overrides: Mapping[str, Any],
                   variant: str | None = None) -> config.ResolvedConfig:
    """Every layer merged (the project of the current folder's among them), and the options
    nobody set derived for a ``variant`` build (base, dev, release; default ``build.variant``)."""
    return config.resolve(list(config_files or []), dict(os.environ), dict(overrides), variant=variant,
                          project=current_project())


def current_project() -> Project | None:
    """The team's project file of the current folder or one above it (torchbake.configuration.project), named on
    standard error once per run (as pytest and ruff name their configuration file): a file found in a
    folder above applies to everything the task does, and the user sees which."""
    found = project.find(Path.cwd())
    if found is not None:
        _name_project(str(found.path))
    return found


@functools.cache
def _name_project(path: str) -> None:
    output.Channel(output.console(stderr=True)).say(f"torchbake: project file {path}")


def check_folders(settings: Settings, *, create: bool) -> None:
    """The cache and log folders can take torchbake's files (``create``: made and probed; else
    only looked at, for runs that write nothing)."""
    writable.check_folder(settings.paths.cache_dir, "paths.cache_dir", create=create)
    writable.check_folder(settings.paths.log_dir, "paths.log_dir", create=create)


def docker_client(settings: Settings, *, for_build: bool = True, choice: str | None = None,
                  writes: bool = True) -> DockerClient:
    """The docker client of ``--docker`` / ``build.docker`` (or ``choice``), with the engine
    timeouts of ``[build]``; ``writes`` false (a dry run, a plan): its answer is not written into
    the cache folder."""
    # imported here: listing tasks and --help need no engine
    from torchbake.adapters.docker_cli import check_builder, find_client
    from torchbake.adapters.engine import DockerClient, check_answers

    try:
        found = find_client(choice or settings.build.docker, dict(os.environ), for_build=for_build,
                            timeout=min(20.0, settings.build.engine_timeout), kept=settings.paths.cache_dir,
                            writes=writes)
    except EngineError:  # no client would do: say so only if the engine itself answers, else that it does not
        check_answers(dict(os.environ), settings.build.engine_timeout)
        raise
    client = DockerClient(**{**dataclasses.asdict(found), "timeout": settings.build.engine_timeout,
                             "stall_timeout": settings.build.stall_timeout,
                             "builder": settings.build.builder if for_build else "",
                             "compression": settings.build.compression})
    if client.builder:
        check_builder(client, timeout=min(20.0, settings.build.engine_timeout))
    return client
