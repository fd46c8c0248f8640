"""pip's configuration where it decides what pip resolves (index-url, extra-index-url, find-links,
constraint), read from ``pip config list`` (pip's files and its PIP_* variables), and the same
choice in uv's words.

The standard library only: ``scripts/setup.sh`` runs it before torchbake's dependencies are
installed, to fill ``.venv`` with uv from the indexes pip is configured with:
``pip config list | python3 -m torchbake.inputs.pip_configuration`` prints uv's arguments for
``pip install``'s choice, one a line.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable

KEYS = ("index-url", "extra-index-url", "find-links", "constraint")


def parse(listing: str, command: str) -> dict[str, list[str]]:
    """Key → values of ``pip config list``'s ``listing`` for :data:`KEYS`, as pip ``command``
    ("download", "install") reads them: its environment's, else that command's section's, else
    the global section's."""
    found: dict[str, dict[str, list[str]]] = {}
    for line in listing.splitlines():
        match = re.fullmatch(r"([:a-z]+)\.([a-z-]+)='(.*)'", line.strip())
        if match and match[2] in KEYS:
            found.setdefault(match[2], {})[match[1]] = match[3].split()
    return {key: next((by_origin[origin] for origin in (":env:", command, "global") if by_origin.get(origin)), [])
            for key, by_origin in found.items()}


def uv_arguments(pip: dict[str, list[str]], *, index_url: str = "", extra_index_urls: Iterable[str] = (),
                 find_links: Iterable[str] = ()) -> list[str]:
    """uv's arguments for the indexes of ``pip`` (:func:`parse`'s answer) and the ones given here
    (``index_url`` over pip's), and pip's constraints."""
    argv: list[str] = ["--index-strategy", "unsafe-best-match"]  # as pip chooses: the best version of any index
    index = index_url or next(iter(pip.get("index-url", [])), "")
    if index:
        argv += ["--index-url", index]
    for url in dict.fromkeys([*pip.get("extra-index-url", []), *extra_index_urls]):
        argv += ["--extra-index-url", url]
    for link in dict.fromkeys([*pip.get("find-links", []), *find_links]):
        argv += ["--find-links", link]
    for constraint in pip.get("constraint", []):
        argv += ["--constraint", constraint]
    return argv


if __name__ == "__main__":
    print("\n".join(uv_arguments(parse(sys.stdin.read(), "install"))))
