"""Where torchbake's own files are: the profiles (``configs/``), the Dockerfile templates
(``docker/<os>/``) and the in-image scripts (``docker/common/``).

An installed wheel carries them inside the package (``torchbake/_data/``, ``pyproject.toml``
maps them there); a checkout (or its editable install) has them beside the package.
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # torchbake/, this module being torchbake/core/data.py
_INSTALLED = PACKAGE_DIR / "_data"
ROOT = _INSTALLED if _INSTALLED.is_dir() else PACKAGE_DIR.parent
CONFIG_DIR = ROOT / "configs"
DOCKER_DIR = ROOT / "docker"  # Dockerfile templates (docker/<os>/) and in-image scripts (docker/common/)
COMMON_DIR = DOCKER_DIR / "common"
COMMON_SUFFIXES = (".sh", ".py")  # what docker/common/ ships: shell and Python scripts
ACCELERATORS_FILE = CONFIG_DIR / "accelerators.toml"
# A checkout has scripts/ensure-engine.sh, which installs and starts an engine; an installed wheel does not.
ENGINE_SCRIPT = PACKAGE_DIR.parent / "scripts" / "ensure-engine.sh"


def bundled_configs() -> dict[str, str]:
    """The config files torchbake ships, by the name ``--config NAME`` takes, with what each is:
    profiles (an accelerator's options) and build-all's nightly matrix. accelerators.toml is the
    accelerators' declarations, read by every run: not one to name."""
    return {path.stem: "a build-all matrix" if path.stem == "nightly" else "a profile"
            for path in sorted(CONFIG_DIR.glob("*.toml")) if path != ACCELERATORS_FILE}


def config_file(entry: str | Path) -> str:
    """A ``--config`` value as a file: a path (it has a "/" or ends in .toml, or a file of that name
    is here), else the name of a config torchbake ships (``--config cuda``: its configs/cuda.toml,
    in a checkout and an installed wheel alike)."""
    entry = str(entry)
    if not entry.strip():  # an unset shell variable: Path("") is "." (a folder), never a config
        from torchbake.core.errors import ConfigurationError  # noqa: PLC0415 - errors are for the rare path only

        raise ConfigurationError(f"--config {entry!r} is empty: name a .toml file, or a config torchbake ships by"
                                 f" name ({', '.join(bundled_configs())}).")
    url = re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", entry)  # not a path: its "//" would become "/" (and hide a password)
    if not url and ("/" in entry or entry.endswith(".toml") or Path(entry).expanduser().exists()):
        return entry
    if not url and entry in bundled_configs():
        return str(CONFIG_DIR / f"{entry}.toml")
    from torchbake.core.errors import ConfigurationError  # noqa: PLC0415 - errors are for the rare path only

    shipped = ", ".join(f"{name} ({what})" for name, what in bundled_configs().items())
    if url:
        raise ConfigurationError(f"--config {entry!r} is a URL: --config takes a file (path/to/file.toml) or the"
                                 f" name of a config torchbake ships ({shipped}). Fetch the file first, then name it.")
    raise ConfigurationError(f"--config {entry!r} is neither a file nor a config torchbake ships. Name a file"
                             f" (path/to/file.toml) or one of: {shipped}.")


def engine_hint() -> str:
    """How to get an engine, where this torchbake runs: the checkout's script, else the service."""
    if ENGINE_SCRIPT.is_file():
        return f"on Debian as root, `bash {ENGINE_SCRIPT}` installs docker.io and starts dockerd"
    return "start the docker service (`sudo systemctl start docker`)"


def common_files() -> list[Path]:
    """The in-image scripts a build context carries, hashes and lists: the shell and Python files
    directly in ``docker/common/``. Never whatever else is there at run time: pip and pipx compile
    the ``.py`` files of an installed wheel into ``__pycache__/`` beside them, an editor leaves
    backups, a checkout may hold anything."""
    return sorted(path for path in COMMON_DIR.iterdir()
                  if path.suffix in COMMON_SUFFIXES and not path.name.startswith(".") and path.is_file()
                  and not path.is_symlink())
