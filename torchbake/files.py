"""Small file-system helpers every module shares: atomic writes (the content goes to a temporary
name beside the target, unique per process and thread, then is renamed over it, so no reader
ever sees half a file) and the nearest folder that exists of a path not made yet."""

from __future__ import annotations

import os
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
