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

from torchbake.core.files import hold_lock, lock_held, release_lock

CANDIDATE_MARK = ":torchbake-candidate-"


def _lock_of(tag: str) -> Path:
    return Path(tempfile.gettempdir()) / "torchbake-candidates" / f"{tag.rsplit(CANDIDATE_MARK, 1)[-1]}.lock"


def new_candidate(image: str) -> str:
    """A candidate tag for ``image`` (NAME:TAG), held by this process from now on."""
    tag = f"{image.rsplit(':', 1)[0]}{CANDIDATE_MARK}{uuid.uuid4().hex[:8]}"
    hold_lock(_lock_of(tag))
    return tag


def let_go(tag: str) -> None:
    """The candidate's tag is gone (promoted or removed): its lock too."""
    release_lock(_lock_of(tag))


def is_live(tag: str) -> bool:
    """Whether a running build holds the candidate ``tag``."""
    return lock_held(_lock_of(tag))
