"""Where torchbake writes, checked before any work: the cache and log folders, and report files.

A folder that is a file, on a read-only file system, or under a file gives a clear error naming
the folder, the option and variable that set it, and what is wrong; so does a report path that
is a folder, lies on a pseudo file system (/proc, /sys, /dev: not /dev/shm, a tmpfs), or cannot
be written. Looking (a plan, a dry run) never writes: it checks with ``os.access``; a run that
will write proves it with a probe file.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from torchbake.core.errors import ConfigurationError
from torchbake.core.files import MOUNTS, mount_table, nearest_existing
from torchbake.core.lazy import LazyModule

if TYPE_CHECKING:
    from torchbake.configuration import settings
else:
    settings = LazyModule("torchbake.configuration.settings")  # read for a message only

# File systems of the kernel's objects, not of files (what /proc/self/mounts calls them); /dev is
# one (devtmpfs), the tmpfs mounted at /dev/shm is not.
PSEUDO_TYPES = frozenset({"proc", "sysfs", "devtmpfs", "devpts", "mqueue", "cgroup", "cgroup2", "debugfs", "tracefs",
                          "securityfs", "configfs", "pstore", "bpf", "hugetlbfs", "fusectl", "binfmt_misc", "efivarfs"})
PSEUDO_FOLDERS = (Path("/proc"), Path("/sys"), Path("/dev"))  # where the mount table cannot be read


def check_folder(path: Path, key: str, *, create: bool, example: str = "$HOME/.cache/torchbake") -> None:
    """``path`` (the folder of option ``key``, e.g. paths.cache_dir) can hold torchbake's files.
    ``create``: make it if missing and write a probe file; otherwise only look. ``example``: a
    folder the hint suggests."""
    section, name = key.split(".", 1)
    where = f"{key} {path} (set by [{section}] {name} in a --config file or {settings.env_var_name(key)})"
    fix = f"Point {settings.env_var_name(key)} at a folder you can write, e.g. {settings.env_var_name(key)}={example}."
    if path.exists() and not path.is_dir():
        raise ConfigurationError(f"{where} is a file, not a folder. {fix}")
    existing = nearest_existing(path)
    if not existing.is_dir():
        raise ConfigurationError(f"{where} cannot be made: {existing} is a file, not a folder. {fix}")
    if not create:
        if not os.access(existing, os.W_OK | os.X_OK):
            raise ConfigurationError(f"{where} is not writable ({existing} refuses new files). {fix}")
        return
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path, prefix=".torchbake-probe-"):
            pass
    except OSError as exc:
        raise ConfigurationError(f"{where} cannot be written: {exc.strerror or exc}. {fix}") from None


def check_output_file(text: str, flag: str) -> Path:
    """A report file named by ``flag``: its parent is created if missing, and a file can be
    written there. Returns the absolute path."""
    path = Path(text).expanduser().absolute()
    example = f"{flag} {shlex.quote('reports/' + (path.name or 'report'))}"
    pseudo = pseudo_mount(Path(os.path.realpath(path)))  # where it leads: /dev/shm/../x is in /dev; links followed
    if pseudo is not None:
        raise ConfigurationError(f"{flag} {text}: {pseudo} holds no ordinary files; name a file in a folder"
                                 f" you can write, e.g. {example}.")
    if path.is_dir():
        raise ConfigurationError(f"{flag} {text} is a folder; name a file in it, e.g. {flag} {shlex.quote(str(path / 'report'))}.")
    existing = nearest_existing(path.parent)
    if not existing.is_dir():
        raise ConfigurationError(f"{flag} {text}: {existing} is a file, so no folder can be made there; e.g. {example}.")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path.parent, prefix=".torchbake-probe-"):
            pass
        if path.exists() and not os.access(path, os.W_OK):
            raise PermissionError(13, "the file is read-only")
    except OSError as exc:
        raise ConfigurationError(f"{flag} {text} cannot be written: {exc.strerror or exc}; e.g. {example}.") from None
    return path


def pseudo_mount(path: Path, mounts: Path = MOUNTS) -> Path | None:
    """The mount point of the pseudo file system ``path`` (absolute) lies on, or None where it lies
    on one of files: the deepest mount point above it, by the mount table; where that cannot be
    read, /proc, /sys or /dev by the path alone."""
    table = mount_table(mounts)
    if table is None:
        return next((root for root in PSEUDO_FOLDERS if path == root or root in path.parents), None)
    found = (Path("/"), "")
    for point, kind in table:
        if (path == point or point in path.parents) and len(point.parts) >= len(found[0].parts):
            found = (point, kind)
    return found[0] if found[1] in PSEUDO_TYPES else None
