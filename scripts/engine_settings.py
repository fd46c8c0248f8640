"""Merge torchbake's engine settings (scripts/engine-settings.json) into a dockerd settings file.

Usage: python3 scripts/engine_settings.py SETTINGS

Every setting of ours that SETTINGS lacks is added; every setting already there, the user's own,
is kept as it is. Keys are compared as dockerd compares them: Go's encoding/json matches a key to
a setting whatever its case, so a user's "Builder" is our "builder" (ours go under their spelling);
the keys of a Go map ("features") are matched exactly.

Written as a careful admin would: through a symbolic link to the file it names; to a new file of a
random name beside it, created exclusively (never through a file or link already there), with the
old file's mode and owner (0644 for a new one), synced, renamed over it, its folder synced: the
file is never half-written. A file that is not UTF-8 JSON holding an object (NaN and Infinity are
not JSON, nor is nesting past the parser's limit), a folder, a FIFO or device, a read-only or
immutable file, any error reading or writing: said in one line (exit 2), the file left as it was.
Standard library only: scripts/ensure-engine.sh runs it with the system's python3, before any
virtual environment exists.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
import tempfile
from pathlib import Path

OURS = Path(__file__).with_name("engine-settings.json")
GO_MAPS = {"features"}  # settings whose keys dockerd reads into a Go map: matched exactly, not by case


def merged(theirs: dict, ours: dict, exact: bool = False) -> dict:
    """``theirs`` with each key of ``ours`` it lacks, at any depth; where both have a key (in any
    case, unless ``exact``), theirs, under their spelling."""
    result = dict(theirs)
    spelled: dict[str, str] = {}
    for key in result:
        spelled.setdefault(key.lower(), key)
    for key, value in ours.items():
        mine = key if key in result or exact else spelled.get(key.lower(), key)
        if mine not in result:
            result[mine] = value
        elif isinstance(result[mine], dict) and isinstance(value, dict):
            result[mine] = merged(result[mine], value, exact=key.lower() in GO_MAPS)
    return result


def refused(settings: Path, why: str) -> int:
    """Exit 2, the file left as it is."""
    print(f"engine_settings: {settings} {why}; fix it and run scripts/ensure-engine.sh again.", file=sys.stderr)
    return 2


def replace(settings: Path, text: str) -> None:
    """``settings`` replaced whole by ``text``, its mode and owner kept; no new file left on an error."""
    old = settings.stat() if settings.exists() else None
    settings.parent.mkdir(parents=True, exist_ok=True)
    descriptor, new = tempfile.mkstemp(dir=settings.parent, prefix=f".{settings.name}.", suffix=".torchbake-new")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            if old:
                os.fchown(file.fileno(), old.st_uid, old.st_gid)
            os.fchmod(file.fileno(), stat.S_IMODE(old.st_mode) if old else 0o644)
            os.fsync(file.fileno())
        os.replace(new, settings)
    except BaseException:
        os.unlink(new)
        raise
    folder = os.open(settings.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _not_a_number(word: str) -> None:
    raise ValueError(f"{word} is not a JSON number")  # Python reads NaN and Infinity; dockerd (Go) does not


def _finite(word: str) -> float:
    number = float(word)
    if number in (float("inf"), float("-inf")):  # 1e400: past a float64, which dockerd refuses
        raise ValueError(f"{word} is past the largest number dockerd reads")
    return number


def main(path: str) -> int:
    settings = Path(os.path.realpath(path))  # a symbolic link stays one: the file it names is written
    if settings.exists() and not settings.is_dir() and not settings.is_file():  # a FIFO or a device reads for ever
        return refused(settings, "is not a regular file")
    try:
        text = settings.read_bytes().decode("utf-8") if settings.exists() or settings.is_symlink() else ""
        theirs = json.loads(text, parse_constant=_not_a_number, parse_float=_finite) if text.strip() else {}
    except IsADirectoryError:
        return refused(settings, "is a folder, not a file")
    except UnicodeDecodeError as error:
        return refused(settings, f"is not UTF-8 (byte {error.object[error.start]:#04x} at offset {error.start})")
    except json.JSONDecodeError as error:
        return refused(settings, f"is not JSON ({error})")
    except RecursionError:
        return refused(settings, "nests deeper than any dockerd setting does")
    except ValueError as error:  # NaN or Infinity, which dockerd would refuse
        return refused(settings, f"is not JSON ({error})")
    except OSError as error:
        return refused(settings, f"cannot be read ({error.strerror})")
    if not isinstance(theirs, dict):
        return refused(settings, "holds no JSON object")
    result = merged(theirs, json.loads(OURS.read_text()))
    if result == theirs and settings.exists():
        return 0
    if settings.exists() and not settings.stat().st_mode & stat.S_IWUSR:
        return refused(settings, f"is read-only (mode {stat.S_IMODE(settings.stat().st_mode):04o})")
    try:
        replace(settings, json.dumps(result, indent=2, allow_nan=False) + "\n")
    except OSError as error:
        immutable = "; is it immutable (lsattr, chattr -i)?" if error.errno == errno.EPERM else ""
        return refused(settings, f"cannot be written ({error.strerror}{immutable})")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
