"""docker/common/pyc_timestamps.py: a hash-based .pyc compiled from its source as it is becomes a
valid timestamp-based one; anything else is left as it was."""

from __future__ import annotations

import os
import py_compile
import struct
import subprocess
import sys
from importlib._bootstrap_external import _validate_timestamp_pyc
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "docker/common/pyc_timestamps.py"


def compiled(folder: Path, name: str, text: str, mode: py_compile.PycInvalidationMode) -> Path:
    (folder / f"{name}.py").write_text(text)
    return Path(py_compile.compile(str(folder / f"{name}.py"), invalidation_mode=mode, doraise=True))


def rewrite(*pycs: Path) -> str:
    names = b"".join(os.fsencode(p) + b"\0" for p in pycs)
    return subprocess.run([sys.executable, str(SCRIPT)], input=names, capture_output=True, check=True).stdout.decode()


def test_a_checked_hash_pyc_records_its_sources_time_and_size_and_stays_valid(tmp_path):
    pyc = compiled(tmp_path, "mod", "X = 42\n", py_compile.PycInvalidationMode.CHECKED_HASH)
    code = pyc.read_bytes()[16:]
    os.utime(tmp_path / "mod.py", (1700000000, 1700000000))  # step.sh's clamp comes first
    assert rewrite(pyc) == "torchbake: 1 .pyc files record their sources' times\n"
    data = pyc.read_bytes()
    assert struct.unpack("<III", data[4:16]) == (0, 1700000000, 7) and data[16:] == code
    _validate_timestamp_pyc(data, 1700000000, 7, "mod", {})  # raises ImportError when stale


def test_a_pyc_of_another_source_a_timestamp_pyc_and_a_stray_file_are_left_alone(tmp_path):
    stale = compiled(tmp_path, "stale", "X = 1\n", py_compile.PycInvalidationMode.CHECKED_HASH)
    (tmp_path / "stale.py").write_text("X = 2\n")  # changed after it was compiled
    timestamp = compiled(tmp_path, "plain", "Y = 1\n", py_compile.PycInvalidationMode.TIMESTAMP)
    stray = tmp_path / "loose.pyc"
    stray.write_bytes(b"not a pyc")
    before = {p: p.read_bytes() for p in (stale, timestamp, stray)}
    assert rewrite(stale, timestamp, stray, tmp_path / "missing.pyc") == ""
    assert {p: p.read_bytes() for p in before} == before
