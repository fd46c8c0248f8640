"""The one place torchbake's failures are defined.

Every failure the user can cause or fix is a ``FatalError`` subclass with its own exit code.
Library code raises them; only the CLI layer (``torchbake.tasks.cli.reports_errors``) catches them, prints
the message (never a traceback) and exits with the code. A message holds text from outside (a config's
value, a path, a registry's answer): it reads as text, never as commands to the terminal
(:func:`printable`), and a value too long to read is cut (:func:`clipped`).
"""

from __future__ import annotations

from torchbake.core import references

# What steers a terminal instead of showing: the C0 controls but tab and newline (ESC starts the
# sequences that clear the screen, set the title, write to the clipboard), DEL, the C1 controls
# (0x9b is ESC [ in one character), and the marks that reorder or break lines unseen (the
# bidirectional overrides and isolates, the line and paragraph separators).
_STEERING = {code: f"\\x{code:02x}" for code in (*range(0x09), *range(0x0b, 0x20), *range(0x7f, 0xa0))}
_STEERING |= {code: f"\\u{code:04x}" for code in (0x200e, 0x200f, *range(0x2028, 0x202f), *range(0x2066, 0x206a))}


def printable(text: str) -> str:
    """``text`` with each character that would steer a terminal written as its escape (``\\x1b``,
    ``\\x0d`` for a carriage return, ``\\u202e``): outside text prints as text. Tabs, newlines and
    every printable character (any script's) stay as they are."""
    return text.translate(_STEERING)


def clipped(text: str, limit: int = 100, *, quoted: bool = False) -> str:
    """``text`` for a message, at most ``limit`` characters of it and then how long it is (a
    100,000-character path is named, not printed); ``quoted``: as repr() quotes it."""
    if len(text) <= limit:
        return repr(text) if quoted else text
    return f"{text[:limit]!r}… ({len(text):,} characters)" if quoted else f"{text[:limit]}… ({len(text):,} characters)"


class FatalError(Exception):
    """A failure that ends the current task. The message says what to do next; printed, it is
    :func:`printable` (its outside text cannot steer the terminal it is printed on)."""

    exit_code = 1
    # What the exit codes' reference (docs/reference/exit-codes.md) tells the user of the code: each
    # class that sets an exit_code says it, for every class that ends a task with that code.
    meaning = "A failure that ended the task; its message says what to do next."

    def __str__(self) -> str:
        return printable(super().__str__())


class ConfigurationError(FatalError):
    """A bad option: unknown key, wrong type, invalid value, missing required value."""

    exit_code = 2
    meaning = ("Refused before any slow work: a bad option or flag (an unknown key, a wrong type, an invalid "
               "value), a value the build needs that nobody set, an image you named that is not on the engine, "
               "or a FROM image a plan would first have to pull or make (nothing was made).")


class MissingValuesError(ConfigurationError):
    """Values a build needs that nobody set; ``missing`` lists every one as (key, why)."""

    def __init__(self, message: str, *, missing: list[tuple[str, str]]):
        super().__init__(message)
        self.missing = missing


class ImageNotFoundError(ConfigurationError):
    """An image the user named (verify, show-build, run-container …) is not on the engine: one
    class, one exit code, one message, whichever task met it."""

    def __init__(self, reference: str):
        super().__init__(f"Image {reference!r} does not exist on this engine. `docker images` lists those that do"
                         + _build_hint(reference) + ".")


def _build_hint(reference: str) -> str:
    """How `invoke build` makes ``reference`` (its name and tag; "" for one named by digest)."""
    import shlex

    name, tag, digest = references.split(reference)
    if digest:
        return ""
    command = shlex.join(["invoke", "build", "--name", name, *(["--tag", tag] if tag else [])])
    return f"; `{command}` makes it (with the --config files and flags it is to be built with)"


class BaseImagePending(ConfigurationError):
    """A plan looked at a FROM image that a build would pull or make first (nothing was made)."""


class DownloadError(FatalError):
    """An input could not be fetched or did not match its recorded digest."""

    exit_code = 3
    meaning = "An input could not be fetched or did not match its recorded digest."


class EngineError(FatalError):
    """No usable Docker client or engine (missing binary, no BuildKit, engine not answering)."""

    exit_code = 4
    meaning = ("No usable Docker client or engine: the binary is missing, BuildKit is absent or the engine does "
               "not answer.")


class BuildError(FatalError):
    """``docker build`` (or another engine step) ran and failed."""

    exit_code = 5
    meaning = "`docker build` (or another engine step) ran and failed."


class VerificationError(FatalError):
    """The image was built but one or more verification checks failed."""

    exit_code = 6
    meaning = "The image was built but one or more verification checks failed."


class CommandError(FatalError):
    """A host command (pip, debootstrap, ...) ran and failed."""

    exit_code = 7
    meaning = "A host command (pip, debootstrap …) ran and failed."


class ContainerError(FatalError):
    """A container cannot be created or reused as asked (name taken by another image, the host
    lacks the device profile's support, a paused or broken container)."""

    exit_code = 8
    meaning = ("A container cannot be created or reused as asked: its name is taken by another image, the host "
               "lacks the device profile's support, or the container is paused or broken.")


class DiskSpaceError(FatalError):
    """The build would not fit on the disk (checked before any download)."""

    exit_code = 9
    meaning = "The build would not fit on the disk (checked before any download)."


class RegistryError(FatalError):
    """A registry could not be asked or refused (credentials, unreachable, an unexpected answer);
    or Sigstore's public instance, for keyless signing."""

    exit_code = 10
    meaning = ("A registry could not be asked or refused: credentials, unreachable, an unexpected answer; or "
               "Sigstore's public instance, for keyless signing.")


class SignatureError(FatalError):
    """A signature that does not hold: missing, made by another key, or not matching what it signs
    (its statement about another image, an SBOM it does not describe)."""

    exit_code = 11
    meaning = ("A signature does not hold: it is missing, made by another key, or does not match what it signs "
               "(a statement about another image, an SBOM it does not describe).")
