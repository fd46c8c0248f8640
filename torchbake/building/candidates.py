"""Candidate tags: a new image is built under ``NAME:torchbake-candidate-<random>`` and takes its
real tag only when it is complete (verified, described). The build holds a lock named after its
candidate for as long as it lives (the kernel lets it go when the process ends, however it ends),
so `invoke gc` removes only the candidates of builds that are gone, never one a build is still
verifying or promoting, whichever cache folder either of them uses. The locks live in one folder
for every torchbake on this host, whatever TMPDIR each was started with (a gc whose TMPDIR differed
from a build's saw that build's candidate unheld and removed it mid-build); every user may make
locks there, as in /tmp itself, and another user's lock counts as held."""

from __future__ import annotations

import contextlib
import tempfile
import time
import uuid
from pathlib import Path

from torchbake.core.files import hold_lock, lock_held, release_lock

CANDIDATE_MARK = ":torchbake-candidate-"


def _folder() -> Path:
    host_wide = Path("/tmp")  # the same for every process, unlike tempfile.gettempdir() (TMPDIR)
    return (host_wide if host_wide.is_dir() else Path(tempfile.gettempdir())) / "torchbake-candidates"


def _lock_of(tag: str) -> Path:
    return _folder() / f"{tag.rsplit(CANDIDATE_MARK, 1)[-1]}.lock"


def new_candidate(image: str) -> str:
    """A candidate tag for ``image`` (NAME:TAG), held by this process from now on."""
    tag = f"{image.rsplit(':', 1)[0]}{CANDIDATE_MARK}{uuid.uuid4().hex[:8]}"
    folder = _folder()
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(PermissionError):  # another user made it first
            folder.chmod(0o1777)
    hold_lock(_lock_of(tag))
    return tag


def let_go(tag: str) -> None:
    """The candidate's tag is gone (promoted or removed): its lock too."""
    release_lock(_lock_of(tag))


def is_live(tag: str) -> bool:
    """Whether a running build holds the candidate ``tag``."""
    return lock_held(_lock_of(tag))


def forget_gone(settled: float = 60.0) -> int:
    """Remove the locks of builds that are gone (killed, or ended with their candidate kept for
    inspection): not held, and older than ``settled`` seconds (a lock is made, then held: a
    younger one may be a build's first instant). Another user's stay. Returns how many went."""
    gone = 0
    for lock in _folder().glob("*.lock"):  # none where the folder is not made yet
        with contextlib.suppress(OSError):
            if time.time() - lock.stat().st_mtime > settled and not lock_held(lock):
                lock.unlink()
                gone += 1
    return gone
