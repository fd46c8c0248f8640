"""Who supplies or made a package, as the SBOMs name them: ``NAME <EMAIL or URL>`` (a Debian
maintainer, a wheel's author, the image's [sbom] supplier, a registry or host)."""

from __future__ import annotations

import re

# words that say a name is an organisation's, not a person's
ORGANISATION_WORDS = ("team", "maintainers", "developers", "project", "group", "community", "foundation", "inc",
                      "ltd", "llc", "corporation", "authors", "contributors", "organization", "debian", "ubuntu")


def split(party: str) -> tuple[str, str]:
    """(NAME, EMAIL or URL) of ``NAME <EMAIL or URL>``; either may be ""."""
    name, _, rest = party.partition("<")
    return name.strip().strip('"'), rest.split(">")[0].strip()


def is_organisation(name: str) -> bool:
    return bool(set(re.findall(r"[a-z]+", name.lower())) & set(ORGANISATION_WORDS))
