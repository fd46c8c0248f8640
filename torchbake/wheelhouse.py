"""Resolving wheels and their dependencies on the host, for the image's Python and platform.

Inside the build, TLS to package indexes may be impossible (intercepting proxies) and is never
needed: the host runs ``pip download`` for the target interpreter (``--python-version``,
``--abi``, ``--platform``, binary wheels only) into a wheelhouse that the build installs from
with ``--no-index``. Mirrors come from config; otherwise pip's own configuration applies.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

from . import command
from .config import WheelOptions
from .downloads import file_lock, link_or_copy
from .errors import CommandError


@dataclass(frozen=True)
class Wheel:
    path: Path
    name: str  # canonical project name
    version: str  # exact version string, local part included (e.g. 2.13.0+cpu)


def pip_download_command(
    requirements: Sequence[str], dest: Path, python_version: str, options: WheelOptions,
    python: str = sys.executable,
) -> list[str]:
    abi = "cp" + python_version.replace(".", "")
    argv = [python, "-m", "pip", "download", "--dest", str(dest), "--only-binary=:all:",
            "--python-version", python_version, "--implementation", "cp", "--abi", abi,
            "--abi", "abi3", "--abi", "none"]
    for platform in options.platforms:
        argv += ["--platform", platform]
    argv += ["--platform", "any"]
    if options.index_url:
        argv += ["--index-url", options.index_url]
    for url in options.extra_index_urls:
        argv += ["--extra-index-url", url]
    for link in options.find_links:
        argv += ["--find-links", link]
    return argv + list(requirements)


def resolve(
    requirements: Sequence[str], cache_dir: Path, python_version: str, options: WheelOptions, *,
    link_into: Path, log_file: Path | None = None,
) -> list[Wheel]:
    """Download ``requirements`` (paths or requirement strings) and all their dependencies into
    the persistent ``cache_dir`` (pip skips files already there), then link exactly the resolved
    set into ``link_into``."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    argv = pip_download_command(requirements, cache_dir, python_version, options)
    with file_lock(cache_dir.with_name(cache_dir.name + ".lock")):  # one pip at a time in this folder
        result = _pip_download(argv, cache_dir, python_version, options, log_file)
    names = dict.fromkeys(Path(m).name for m in _SAVED_RE.findall(result.output))
    if not names:
        raise CommandError(f"pip download reported no wheels for {' '.join(requirements)}:\n{result.output[-2000:]}")
    link_into.mkdir(parents=True, exist_ok=True)
    for name in names:
        link_or_copy(cache_dir / name, link_into / name)
    return [w for w in wheels_in(link_into) if w.path.name in names]


def _pip_download(argv: list[str], cache_dir: Path, python_version: str, options: WheelOptions,
                  log_file: Path | None) -> command.CommandResult:
    return command.run(
        argv, log_file=log_file, capture=True, error=CommandError, cwd=cache_dir, idle_timeout=command.STALL,
        failure_hint=(
            f"pip could not resolve these wheels for Python {python_version} on"
            f" {', '.join(options.platforms)}. Check that each wheel exists for that Python"
            " (a cp311 wheel needs --python 3.11), or set [wheels] index_url / find_links."
        ),
    )


_SAVED_RE = re.compile(r"^\s*(?:Saved|File was already downloaded)\s+(\S+\.whl)\s*$", re.MULTILINE)


def wheels_in(folder: Path) -> list[Wheel]:
    found = []
    for path in sorted(folder.glob("*.whl")):
        name, version, _build, _tags = parse_wheel_filename(path.name)
        found.append(Wheel(path=path, name=str(canonicalize_name(name)), version=str(version)))
    return found


def requirement_name(spec: str) -> str:
    """The project name a wheel source installs: from a wheel file name or a requirement."""
    base = spec.split("#", 1)[0]
    last = base.rstrip("/").rsplit("/", 1)[-1]
    if last.endswith(".whl"):
        return str(canonicalize_name(parse_wheel_filename(last)[0]))
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", base)
    return str(canonicalize_name(match.group(1))) if match else base
