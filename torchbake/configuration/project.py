"""A team's own repository as the project: the first ``torchbake.toml`` (or ``pyproject.toml``
with a ``[tool.torchbake]`` table) from the current folder up.

Its options are a layer between torchbake's defaults and ``--config`` files, and its relative
paths (a Dockerfile template, ``[image] steps``, a CA bundle, source roots, wheel files and
folders, toolkit tarballs, the cache) are relative to the file, not to the folder a command runs
in: the options that name files say so in their declaration (``settings.option``'s ``path``).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchbake.core.errors import ConfigurationError

FILE_NAME = "torchbake.toml"
PYPROJECT = "pyproject.toml"
# A relative location that is a file torchbake should read, not a requirement such as torch==2.13.0.
FILE_SUFFIXES = (".whl", ".tar.gz", ".tgz", ".tar.xz", ".tar.zst", ".tar", ".zip", ".pem", ".crt", ".toml")


@dataclass(frozen=True)
class Project:
    path: Path  # torchbake.toml, or the pyproject.toml that holds [tool.torchbake]
    data: Mapping[str, Any] = field(default_factory=dict)  # its options, as a --config file holds them

    @property
    def source(self) -> str:
        """How show-config names it."""
        return str(self.path) if self.path.name == FILE_NAME else f"{self.path} [tool.torchbake]"

    @property
    def folder(self) -> Path:
        return self.path.parent

    def anchored(self, kind: str, value: Any) -> Any:
        """``value`` of an option of path ``kind`` ("path": always a file or folder; "location": a
        URL, a path or a requirement), its relative paths made relative to this file's folder."""
        if isinstance(value, list):
            return [self.anchored(kind, item) for item in value]
        if not isinstance(value, str) or not value or "://" in value or value.startswith(("/", "~")):
            return value
        if kind == "location" and not ("/" in value or value.endswith(FILE_SUFFIXES) or (self.folder / value).exists()):
            return value  # a requirement
        return str(self.folder / value)


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_bytes().removeprefix(b"\xef\xbb\xbf").decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"Project file {path} is not valid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"Project file {path} is not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
    except OSError as exc:
        raise ConfigurationError(f"Project file {path} cannot be read: {exc.strerror or exc}") from None


def find(start: Path) -> Project | None:
    """The project of ``start`` and the folders above it, or None."""
    for folder in (start, *start.parents):
        candidate = folder / FILE_NAME
        if candidate.is_file():
            return Project(candidate, _read(candidate))
        pyproject = folder / PYPROJECT
        if pyproject.is_file():
            table = _read(pyproject).get("tool", {}).get("torchbake")
            if table is not None:
                if not isinstance(table, dict):
                    raise ConfigurationError(f"{pyproject}: [tool.torchbake] must be a table.")
                return Project(pyproject, table)
    return None
