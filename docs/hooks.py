"""MkDocs hook: the reference pages' bodies come from torchbake's own declarations
(torchbake.reference) each time the site is built, so they cannot drift from the code."""

from __future__ import annotations

import re

from torchbake import reference

PLACEHOLDER = re.compile(r"<!-- reference: ([a-z-]+) -->")


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 - MkDocs' signature
    return PLACEHOLDER.sub(lambda found: reference.PAGES[found.group(1)](), markdown)
