"""Small file-system helpers every module shares: atomic writes (the content goes to a temporary
name beside the target, unique per process and thread, then is renamed over it, so no reader
ever sees half a file), reading back what was written (a damaged file reads as missing, never as
a traceback: the caller repairs it), locks held for a process's life (their holders are told apart
from those that ended), the nearest folder that exists of a path not made yet and the kernel's
mount table."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchbake.core.lazy import LazyModule

if TYPE_CHECKING:
    import filelock
else:
    filelock = LazyModule("filelock")  # read when a lock is taken: `invoke --list` imports this module


def write_atomically(path: Path, data: bytes | str, *, mode: int | None = None) -> Path:
    """Write ``data`` to ``path`` (its folder made if missing) in one rename; ``mode``: its
    permissions, set before it appears under its name (an executable is never seen without x)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
        if mode is not None:
            tmp.chmod(mode)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def read_back(path: Path) -> str | None:
    """The text of a file torchbake wrote earlier (a record, a cached fact), or None when it is
    missing or damaged (unreadable, not UTF-8): the caller fetches or reads the fact again."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def read_back_object(path: Path) -> dict | None:
    """A JSON object torchbake wrote earlier, or None when the file is missing or damaged (see
    :func:`read_back`; also not JSON, or JSON that is not an object)."""
    text = read_back(path)
    try:
        found = json.loads(text) if text is not None else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


_held: dict[Path, Any] = {}  # the locks this process holds with hold_lock


def hold_lock(lock: Path) -> None:
    """Hold ``lock`` until :func:`release_lock`, or until this process ends however it ends (the
    kernel lets it go then): other processes tell with :func:`lock_held` that its owner lives."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    held = filelock.FileLock(lock)
    held.acquire()
    _held[lock] = held


def release_lock(lock: Path) -> None:
    """Let go of a lock this process holds, and remove its file (what it guarded is gone)."""
    held = _held.pop(lock, None)
    if held is not None:
        held.release()
        lock.unlink(missing_ok=True)


def lock_held(lock: Path) -> bool:
    """Whether a live process holds ``lock`` (False when there is no such file). A lock this
    process may not open (another user's) counts as held: what it guards is left alone."""
    if not lock.is_file():
        return False
    try:
        with filelock.FileLock(lock, timeout=0):
            return False
    except (filelock.Timeout, PermissionError):
        return True


def nearest_existing(path: Path) -> Path:
    """``path``, or its nearest ancestor that exists (a cache or report folder not made yet)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


MOUNTS = Path("/proc/self/mounts")


def mount_table(mounts: Path = MOUNTS) -> list[tuple[Path, str]] | None:
    """(mount point, file system type) of each mount, in the kernel's order (a later mount over an
    earlier one), or None where the table cannot be read. The table writes a space, a tab, a
    newline and a backslash in a mount point as octal escapes (``\\040``): decoded here."""
    try:
        lines = mounts.read_text().splitlines()
    except OSError:
        return None
    return [(Path(re.sub(r"\\([0-7]{3})", lambda escape: chr(int(escape[1], 8)), fields[1])), fields[2])
            for fields in map(str.split, lines) if len(fields) >= 3]


SecretSource = Path | str  # a file the user gave (shown by its path), or a value torchbake holds
PLACEHOLDER_SECRET = Path("<private temporary file, made for the build only>")


def secret_paths(secrets: Sequence[tuple[str, SecretSource]]) -> list[tuple[str, Path]]:
    """Secrets as a plan shows them: a value's file is a placeholder (nothing is written)."""
    return [(name, source if isinstance(source, Path) else PLACEHOLDER_SECRET) for name, source in secrets]


@contextlib.contextmanager
def secret_files(secrets: Sequence[tuple[str, SecretSource]]) -> Iterator[list[tuple[str, Path]]]:
    """Each secret given as a value, in a file of a private temporary folder (0700; files 0600)
    that exists only inside the block: a BuildKit secret's source, never in a cache a CI run uploads."""
    if not any(isinstance(source, str) for _, source in secrets):
        yield [(name, source) for name, source in secrets if isinstance(source, Path)]
        return
    folder = Path(tempfile.mkdtemp(prefix="torchbake-secrets-"))
    try:
        found = []
        for name, source in secrets:
            if isinstance(source, str):
                path = folder / name
                with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
                    handle.write(source)
                source = path
            found.append((name, source))
        yield found
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def mark_used(path: Path) -> None:
    """Record that a build used ``path`` now, in its access time (the modification time, which the
    digest records key on, stays): `invoke gc` removes cache entries no build used for a while."""
    try:
        info = path.stat()
        os.utime(path, ns=(time.time_ns(), info.st_mtime_ns))
    except OSError:
        return
