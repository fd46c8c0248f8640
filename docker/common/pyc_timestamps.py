"""Turn the hash-based .pyc files a build step wrote into timestamp-based ones that are valid.

Usage: python3 pyc_timestamps.py < NUL-separated .pyc paths  (docker/common/step.sh)

While SOURCE_DATE_EPOCH is set, CPython (py_compile, compileall, uv's and pip's bytecode
compilation) writes *checked* hash-based .pyc files (PEP 552): reproducible, but every import then
reads and hashes its source, and `import torch` takes about 7% longer. step.sh has already given
every file of the step SOURCE_DATE_EPOCH's time, so the header can say what a timestamp-based
.pyc says (flags 0, the source's modification time and size): the same bytes on any engine,
imports as fast as ever, and a source edited later in a derived image still invalidates its .pyc.
The 16-byte header has the same length in both forms; the code after it is unchanged.
"""

from __future__ import annotations

import importlib.util
import os
import struct
import sys
from pathlib import Path


def source_of(pyc: Path) -> Path | None:
    """pkg/__pycache__/mod.cpython-311[.opt-1].pyc -> pkg/mod.py"""
    if pyc.parent.name != "__pycache__":
        return None
    return pyc.parent.parent / (pyc.name.split(".", 1)[0] + ".py")


def main() -> int:
    rewritten = 0
    for name in sys.stdin.buffer.read().split(b"\0"):
        pyc = Path(os.fsdecode(name))
        source = source_of(pyc) if name else None
        if source is None or not source.is_file() or pyc.is_symlink() or not pyc.is_file():
            continue
        with pyc.open("r+b") as handle:
            header = handle.read(16)
            if len(header) < 16 or not struct.unpack("<I", header[4:8])[0] & 1:  # not hash-based
                continue
            # compiled from the source as it is now (and by this Python: the hash's key is its
            # magic number); anything else stays as it is, still valid and reproducible
            if header[:4] != importlib.util.MAGIC_NUMBER or header[8:16] != importlib.util.source_hash(source.read_bytes()):
                continue
            stat = source.stat()
            handle.seek(4)
            handle.write(struct.pack("<III", 0, int(stat.st_mtime) & 0xFFFFFFFF, stat.st_size & 0xFFFFFFFF))
        rewritten += 1
    if rewritten:
        print(f"torchbake: {rewritten} .pyc files record their sources' times")
    return 0


if __name__ == "__main__":
    sys.exit(main())
