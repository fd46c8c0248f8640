"""Small file-system helpers every module shares: atomic writes (the content goes to a temporary
name beside the target, unique per process and thread, then is renamed over it, so no reader
ever sees half a file) and the nearest folder that exists of a path not made yet."""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from pathlib import Path


def write_atomically(path: Path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` (its folder made if missing) in one rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def nearest_existing(path: Path) -> Path:
    """``path``, or its nearest ancestor that exists (a cache or report folder not made yet)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def secret_file(cache_dir: Path, name: str, value: str) -> Path:
    """A file holding ``value`` (a BuildKit secret's source), readable by this user alone, named
    by a digest of its content so that builds share it and a new value never overwrites one in use."""
    path = cache_dir / "secrets" / f"{name}-{hashlib.sha256(value.encode()).hexdigest()[:16]}"
    if not path.is_file() or path.read_text() != value:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")  # builds at once: one each
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(value)
        os.replace(tmp, path)
    return path


def mark_used(path: Path) -> None:
    """Record that a build used ``path`` now, in its access time (the modification time, which the
    digest records key on, stays): `invoke gc` removes cache entries no build used for a while."""
    try:
        info = path.stat()
        os.utime(path, ns=(time.time_ns(), info.st_mtime_ns))
    except OSError:
        return
