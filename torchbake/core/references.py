"""Image references, NAME[:TAG][@DIGEST], split into their parts by the Engine API SDK's rule
(``docker.utils.parse_repository_tag``, which the tests hold this to): a ':' before the last '/'
is a registry's port, not a tag. Written out, not imported: a command that only names an image
(an unchanged build's decision) does not load the SDK."""

from __future__ import annotations


def split(reference: str) -> tuple[str, str, str]:
    """(name, tag, digest) of ``reference``, "" for a part it lacks: ``host:5000/team/x:1@sha256:…``
    is ``("host:5000/team/x", "1", "sha256:…")``."""
    rest, _, digest = reference.partition("@")
    name, colon, tag = rest.rpartition(":")
    if not colon or "/" in tag:
        name, tag = rest, ""
    return name, tag, digest
