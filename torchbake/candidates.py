"""Candidate tags: a new image is built under ``NAME:torchbake-candidate-<random>`` and takes its
real tag only when it is complete (verified, described). The build holds a lock named after its
candidate for as long as it lives (the kernel lets it go when the process ends, however it ends),
so `invoke gc` removes only the candidates of builds that are gone, never one a build is still
verifying or promoting, whichever cache folder either of them uses. The locks live in the host's
temporary folder: one place for every torchbake on this host."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import filelock

CANDIDATE_MARK = ":torchbake-candidate-"
_held: dict[str, filelock.FileLock] = {}


def _lock_of(tag: str) -> Path:
    return Path(tempfile.gettempdir()) / "torchbake-candidates" / f"{tag.rsplit(CANDIDATE_MARK, 1)[-1]}.lock"


def new_candidate(image: str) -> str:
    """A candidate tag for ``image`` (NAME:TAG), held by this process from now on."""
    tag = f"{image.rsplit(':', 1)[0]}{CANDIDATE_MARK}{uuid.uuid4().hex[:8]}"
    lock = _lock_of(tag)
    lock.parent.mkdir(parents=True, exist_ok=True)
    _held[tag] = filelock.FileLock(lock)
    _held[tag].acquire()
    return tag


def let_go(tag: str) -> None:
    """The candidate's tag is gone (promoted or removed): its lock too."""
    lock = _held.pop(tag, None)
    if lock is not None:
        lock.release()
        _lock_of(tag).unlink(missing_ok=True)


def is_live(tag: str) -> bool:
    """Whether a running build holds the candidate ``tag``."""
    lock = _lock_of(tag)
    if not lock.is_file():
        return False
    try:
        with filelock.FileLock(lock, timeout=0):
            return False
    except filelock.Timeout:
        return True
