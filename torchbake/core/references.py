"""Image references, NAME[:TAG][@DIGEST], split into their parts by the Engine API SDK's own rule
(``docker.utils.parse_repository_tag``): a ':' before the last '/' is a registry's port, not a tag."""

from __future__ import annotations


def split(reference: str) -> tuple[str, str, str]:
    """(name, tag, digest) of ``reference``, "" for a part it lacks: ``host:5000/team/x:1@sha256:…``
    is ``("host:5000/team/x", "1", "sha256:…")``."""
    from docker.utils import parse_repository_tag  # (imported with the first reference split: not at start-up)

    rest, digest = parse_repository_tag(reference) if "@" in reference else (reference, None)
    name, tag = parse_repository_tag(rest)
    return name, tag or "", digest or ""
