"""What became of a build or a matrix cell: one enum, whose words are those of the output, the
JSON and JUnit reports and the build manifests (a ``StrEnum``: it is written as its word)."""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    BUILT = "built"
    UNCHANGED = "unchanged"  # the image under NAME:TAG already had these inputs
    RETAGGED = "retagged"  # an image torchbake built earlier had them: NAME:TAG points at it again
    UNCHANGED_IN_REGISTRY = "unchanged (registry)"
    RETAGGED_IN_REGISTRY = "retagged (registry)"
    FAILED = "failed"
    BLOCKED = "blocked"  # a cell it depends on failed
    INTERRUPTED = "interrupted"
    NOT_RUN = "not run"  # --fail-fast stopped the run first, or another cell's refusal stopped it before any work
    REFUSED = "refused"  # its configuration was refused (a value it needs is not set): the run built nothing
    SKIPPED = "skipped"  # it needs a value not set, and --skip-incomplete left it out (or a cell it starts from)
    JOINED = "joined"  # an image's platforms, each built (or found), are one tag: NAME:TAG names their index

    @property
    def done(self) -> bool:
        """The image is there (built, or found with these inputs)."""
        return self in DONE

    @property
    def failed(self) -> bool:
        """It failed, or could not start because what it needs failed, or was interrupted."""
        return self in (Status.FAILED, Status.BLOCKED, Status.INTERRUPTED, Status.REFUSED)

    @property
    def without_image(self) -> bool:
        """It ended without its image: failed, or never run (--fail-fast stopped the run first)."""
        return self.failed or self in (Status.NOT_RUN, Status.SKIPPED)

    @property
    def in_registry(self) -> bool:
        """Found in the registry: nothing on this engine, nothing to push."""
        return self in (Status.UNCHANGED_IN_REGISTRY, Status.RETAGGED_IN_REGISTRY)


ON_THIS_ENGINE = (Status.BUILT, Status.UNCHANGED, Status.RETAGGED)  # an image this engine holds
DONE = (*ON_THIS_ENGINE, Status.UNCHANGED_IN_REGISTRY, Status.RETAGGED_IN_REGISTRY, Status.JOINED)
