"""pip's configuration where it decides what pip resolves (index-url, extra-index-url, find-links,
constraint), read from ``pip config list`` (pip's files and its PIP_* variables), and the same
choice in uv's words: its arguments, or its environment variables.

The standard library only: ``scripts/setup.sh`` runs it before torchbake's dependencies are
installed, to fill ``.venv`` with uv from the indexes pip is configured with:
``pip config list | python3 -m torchbake.inputs.pip_configuration`` prints uv's environment for
``pip install``'s choice, ``NAME=VALUE`` one a line, which setup.sh exports for uv alone. An index
URL may carry credentials (``https://user:token@host/simple``): in uv's environment they are on no
process's command line, where ``ps`` would show them to every user of the machine.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable

KEYS = ("index-url", "extra-index-url", "find-links", "constraint")

# uv's option → its environment variable and the separator of that variable's list
UV_VARIABLES = {"--index-strategy": ("UV_INDEX_STRATEGY", " "), "--index-url": ("UV_INDEX_URL", " "),
                "--extra-index-url": ("UV_EXTRA_INDEX_URL", " "), "--find-links": ("UV_FIND_LINKS", ","),
                "--constraint": ("UV_CONSTRAINT", " ")}


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


def uv_options(pip: dict[str, list[str]], *, index_url: str = "", extra_index_urls: Iterable[str] = (),
               find_links: Iterable[str] = ()) -> dict[str, list[str]]:
    """uv's option → values for the indexes of ``pip`` (:func:`parse`'s answer) and the ones given
    here (``index_url`` over pip's), and pip's constraints; options without values left out."""
    index = index_url or next(iter(pip.get("index-url", [])), "")
    options = {"--index-strategy": ["unsafe-best-match"],  # as pip chooses: the best version of any index
               "--index-url": [index] if index else [],
               "--extra-index-url": list(dict.fromkeys([*pip.get("extra-index-url", []), *extra_index_urls])),
               "--find-links": list(dict.fromkeys([*pip.get("find-links", []), *find_links])),
               "--constraint": list(pip.get("constraint", []))}
    return {option: values for option, values in options.items() if values}


def uv_arguments(pip: dict[str, list[str]], **given) -> list[str]:
    """:func:`uv_options` as uv's command-line arguments."""
    return [word for option, values in uv_options(pip, **given).items() for value in values for word in (option, value)]


def uv_environment(pip: dict[str, list[str]], **given) -> dict[str, str]:
    """:func:`uv_options` as uv's environment variables, which are on no command line. ValueError
    for a value uv would split (a find-links location with a comma, any with a space); its message
    names the option, never the value, which may hold a password."""
    environment = {}
    for option, values in uv_options(pip, **given).items():
        name, separator = UV_VARIABLES[option]
        if any(separator in value or re.search(r"\s", value) for value in values):
            raise ValueError(f"a value of {option} holds {separator!r} or a space, which uv's {name} would split")
        environment[name] = separator.join(values)
    return environment


if __name__ == "__main__":
    try:
        print("\n".join(f"{name}={value}" for name, value in uv_environment(parse(sys.stdin.read(), "install")).items()))
    except ValueError as error:
        sys.exit(f"pip_configuration: {error}")
