"""Locked closures: each image's wheels pinned in the team's repository, as PEP 751 lock files.

``invoke lock`` resolves an image's requirements once for its Python and platform with uv's
resolver (``uv pip compile --format pylock.toml``: pip's ``pip lock`` locks for the interpreter that
runs it only) and writes ``pylock.<image>[.<platform>].toml`` into ``[build] locks`` beside the
configuration; its ``[tool.torchbake]`` table says what it was made for (the requirements as the
configuration gives them, the Python, the platform). uv is the program the images use, taken out
of its pinned wheel ([python] uv). Locking again keeps every version the lock holds (uv prefers
them); ``--upgrade`` lets them move, all or the packages named.

A build whose image has a lock takes exactly its wheels: packaging's PEP 751 model selects them for
the image's Python and platform, each is fetched by its URL into the download cache (or found
there) and checked against the lock's sha256. No resolver runs, and no index is asked when the
cache holds the files. The lock's digest is an input of the image (its input hash, its SBOM and
provenance): a release upstream changes nothing until the lock changes.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from torchbake.adapters import command
from torchbake.configuration import platforms
from torchbake.configuration.settings import PythonOptions, WheelOptions
from torchbake.core.errors import CommandError, ConfigurationError
from torchbake.core.redaction import redact
from torchbake.inputs import build_tools, pip_configuration, wheelhouse
from torchbake.inputs.downloads import file_sha256

REMAKE = ("Make it again with the build's flags and --config files: `invoke lock` (`invoke lock --base` for a base"
          " image).")
TOOL = "torchbake"  # its [tool.torchbake] table: what the lock was made for


@dataclass(frozen=True)
class LockedWheel:
    name: str  # canonical project name
    version: str
    location: str  # the wheel's URL, or its absolute path
    sha256: str

    @property
    def file_name(self) -> str:
        return self.location.rsplit("/", 1)[-1].split("#", 1)[0]


@dataclass(frozen=True)
class Lock:
    path: Path
    made_for: Mapping[str, Any]  # requirements, python, platform
    wheels: tuple[LockedWheel, ...]
    sha256: str  # of the file as written

    def versions(self) -> dict[str, str]:
        return {wheel.name: wheel.version for wheel in self.wheels}

    @property
    def image(self) -> str:
        """The image it was made for ("": a lock older than that record)."""
        return str(self.made_for.get("image") or "")

    def debs(self) -> dict[str, str]:
        """The Debian packages installed on top of the FROM image, by name, at their versions."""
        found = self.made_for.get("debs") or {}
        return {str(name): str(version) for name, version in found.items()} if isinstance(found, dict) else {}


def path_for(folder: Path, image: str, platform: str = "") -> Path:
    """Where the lock of ``image`` (for ``platform``, where the build has several) lives:
    ``pylock.<name>.toml``, the name PEP 751 gives a lock that is not a project's only one."""
    slug = re.sub(r"[^a-z0-9]+", "-", image.lower()).strip("-")
    if platform:
        slug += "-" + re.sub(r"[^a-z0-9]+", "-", platform.lower()).strip("-")
    return folder / f"pylock.{slug}.toml"


def made_for(requirements: Sequence[str], python_version: str, platform: str,
             base: Mapping[str, str] | None = None, debs: Mapping[str, str] | None = None,
             as_of: str = "", image: str = "") -> dict[str, Any]:
    """What a lock records it was made for: a local wheel by its file name (where the checkout is
    must not make another lock), anything else as the configuration gives it; ``base``: the FROM
    image (reference, content-id, digest) where the engine holds it; ``debs``: the Debian packages
    a build installs on top of it, at the versions the mirror gave when locking; ``as_of``: how new a
    base's build requirements may be ([base] requirements_date); ``image``: the image it locks (its
    file name folds case and punctuation: team/torch:v1.0 and team/torch:V1-0 share one)."""
    return {**({"image": image} if image else {}),
            "requirements": [Path(r).name if os.path.isabs(r) else r for r in requirements], "python": python_version,
            "platform": platform, **({"as_of": as_of} if as_of else {}), **({"base": dict(base)} if base else {}),
            **({"debs": dict(sorted(debs.items()))} if debs is not None else {})}


def check_path(path: Path) -> None:
    """A lock's path holds a lock file or nothing: a folder (or a device, a dangling link) there is
    exit 2, naming it, before any work."""
    if (path.exists() or path.is_symlink()) and not path.is_file():
        what = "a folder" if path.is_dir() else "a link to nothing" if not path.exists() else "not a regular file"
        raise ConfigurationError(f"{path} is {what}, where the image's lock file goes: move it away, or set [build]"
                                 " locks (TORCHBAKE_BUILD_LOCKS=FOLDER) to another folder.")


def read(path: Path, python_version: str, wheel_platforms: Sequence[str]) -> Lock | None:
    """The lock at ``path`` with the wheels it selects for the image's Python and platform tags;
    None when there is none. A file that is no valid lock is exit 2, naming it."""
    from packaging.pylock import PackageArchive, PackageWheel, Pylock, PylockSelectError, PylockValidationError

    if not path.exists() and not path.is_symlink():
        return None
    check_path(path)
    data = path.read_bytes()
    try:
        lock = Pylock.from_dict(tomllib.loads(data.decode()))
        environment = wheelhouse.image_environment(python_version, wheel_platforms)
        chosen = list(lock.select(environment=environment,
                                  tags=wheelhouse.supported_tags(python_version, wheel_platforms)))  # in preference order
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, PylockValidationError, PylockSelectError) as exc:
        raise ConfigurationError(f"{path} is not a lock torchbake can use ({exc}). {REMAKE}") from None
    wheels = []
    for package, file in chosen:
        hashes = getattr(file, "hashes", None) or {}
        location = file.url or (str((path.parent / file.path).resolve()) if file.path else "")
        # a wheel from an index, or a wheel file given by its path or URL (uv locks it as an archive)
        wheel = isinstance(file, PackageWheel) or (isinstance(file, PackageArchive) and location.endswith(".whl"))
        if not wheel or not hashes.get("sha256") or not location:
            raise ConfigurationError(f"{path}: {package.name} is locked to something torchbake does not install (a"
                                     f" wheel with its URL or path and sha256 is what it takes). {REMAKE}")
        wheels.append(LockedWheel(str(canonicalize_name(package.name)), str(package.version), location,
                                  hashes["sha256"]))
    tool = (lock.tool or {}).get(TOOL, {})
    return Lock(path, tool if isinstance(tool, dict) else {}, tuple(wheels), hashlib.sha256(data).hexdigest())


def changed_files(lock: Lock, requirements: Sequence[str]) -> list[str]:
    """Each local wheel the configuration names (by its absolute path) whose bytes are not those
    the lock holds for its file name, in words (the file, both digests); [] when all match. A lock
    records a local wheel by its file name, so another file of that name is only told by its bytes."""
    locked = {wheel.file_name: wheel for wheel in lock.wheels}
    found = []
    for requirement in requirements:
        path = Path(requirement.split("#", 1)[0])
        wheel = locked.get(path.name)
        if not path.is_absolute() or wheel is None or not path.is_file():
            continue
        if (sha256 := file_sha256(path)) != wheel.sha256:
            found.append(f"{path} has sha256 {sha256}, and {lock.path} locks {path.name} with sha256 {wheel.sha256}")
    return found


def mismatch(lock: Lock, requirements: Sequence[str], python_version: str, platform: str, as_of: str = "",
             image: str = "") -> list[str]:
    """What the configuration asks for that the lock was not made for, in words ([] when it holds);
    ``image``: the image being built (a lock that records another is not its own)."""
    wanted = {"as_of": "", **made_for(requirements, python_version, platform, as_of=as_of)}
    found = [f"image: {other} (its file name is this image's too)"] if (other := other_image(lock.image, image)) else []
    for key, words in (("requirements", "requirements"), ("python", "Python"), ("platform", "platform"),
                       ("as_of", "build requirements as of")):
        if lock.made_for.get(key, "" if key == "as_of" else None) != wanted[key]:
            was, now = lock.made_for.get(key), wanted[key]
            if key == "requirements" and isinstance(was, list):
                added = [r for r in now if r not in was]
                gone = [r for r in was if r not in now]
                found.append(f"{words}: " + ", ".join([*(f"+{r}" for r in added), *(f"-{r}" for r in gone)]
                                                      or ["their order"]))
            else:
                found.append(f"{words}: {was or 'none'} → {now or 'the engine’s own'}")
    return found


def other_image(recorded: str, image: str) -> str:
    """``recorded``, the image a lock (a wheel lock or a dev image's sdist lock) records it was made
    for, where that is not ``image``; "" where it is, or the lock is older than that record."""
    return recorded if recorded and image and recorded != image else ""


def refuse_another_images(target: Path, recorded: str, image: str) -> None:
    """`invoke lock` of ``image`` never writes over ``target`` where it is the lock of another image
    (``recorded``: the image it records, "" for none): exit 2, before any work."""
    if other_image(recorded, image):
        raise ConfigurationError(f"{target} is the lock of {recorded}; {image}'s lock would take its place (a lock's"
                                 " file name folds case and punctuation). Give one of them another tag or name, or"
                                 " lock this one into another folder: --config with [build] locks = \"./other-locks\"."
                                 f" If {recorded} is built no more, remove {target} and lock again.")


def uv_platform(wheel_platforms: Sequence[str]) -> str:
    """uv's ``--python-platform`` of the image's wheel platform tags (manylinux_2_28_x86_64 →
    x86_64-manylinux_2_28)."""
    for tag in wheel_platforms:
        if match := re.fullmatch(r"(manylinux_2_\d+|manylinux2014)_(\w+)", tag):
            return f"{match[2]}-{match[1]}"
        if match := re.fullmatch(r"linux_(\w+)", tag):
            return f"{match[1]}-unknown-linux-gnu"
    raise ConfigurationError(f"[wheels] platforms {', '.join(wheel_platforms)}: uv locks for manylinux or linux"
                             " platform tags only.")


def configured_indexes(options: WheelOptions) -> tuple[list[str], list[str]]:
    """(the indexes, the find-links locations) a build asks, as pip would: [wheels] index_url over
    pip's index-url (else pip's own default), then the extra indexes; the find-links of both."""
    pip = _pip_configuration()
    index = options.index_url or next(iter(pip.get("index-url", [])), "") or _pip_default_index()
    extra = [*options.extra_index_urls, *pip.get("extra-index-url", [])]
    return list(dict.fromkeys([index, *extra])), list(dict.fromkeys([*options.find_links, *pip.get("find-links", [])]))


def _pip_default_index() -> str:
    """pip's own index where nothing configures one (pip says which: torchbake names no registry)."""
    import sys

    result = command.run([sys.executable, "-c", "from pip._internal.models.index import PyPI; print(PyPI.simple_url)"],
                         capture=True, check=False, echo=False)
    return result.output.strip() if result.returncode == 0 else ""


def kept_uv(cache_root: Path) -> Path | None:
    """The uv a build last kept in the cache (what a dry run asks, fetching nothing), or None."""
    kept = [p for p in (cache_root / "tools").glob("uv-*") if p.is_file()]
    return max(kept, key=lambda p: p.stat().st_mtime) if kept else None


def host_uv(python: PythonOptions, options: WheelOptions, python_version: str, cache_root: Path,
            log_file: Path | None) -> Path:
    """This host's uv, taken out of the wheel [python] uv pins (resolved like the images' wheels,
    kept in the cache)."""
    host = platforms.host()
    host_options = dataclasses.replace(options, platforms=tuple(platforms.wheel_tags_for(host, ())))
    with tempfile.TemporaryDirectory(prefix="torchbake-uv-") as tmp:
        found = wheelhouse.resolve([python.uv], cache_root / "wheelhouse" / "tools", python_version, host_options,
                                   link_into=Path(tmp), log_file=log_file)
        return wheelhouse.kept_script(found[0].path, "uv", cache_root / "tools")


def make(uv: Path, requirements: Sequence[str], python_version: str, platform: str, options: WheelOptions, *,
         target: Path, upgrade: bool | Sequence[str], keep: bool = True, base: Mapping[str, str] | None = None,
         debs: Mapping[str, str] | None = None, log_file: Path | None, day: str = "",
         current: Sequence[str] = (), as_of: str = "", image: str = "") -> str:
    """The text of a new lock for ``target``: uv's resolution of ``requirements`` for the image's
    Python and platform from the configured indexes, keeping the versions the lock there holds but
    those ``upgrade`` lets move (True: all; ``keep`` False: none is kept, the lock there is no use),
    no newer than ``day`` (YYYY-MM-DD; "": as of now) but the projects ``current`` names (the
    developers' tools), with what it was made for in its ``[tool.torchbake]`` table. ``target`` is not written (a local
    wheel's path in it is relative to its folder)."""
    import tomli_w

    target = target.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".torchbake-lock-") as tmp:
        folder = Path(tmp)
        # beside the lock, a local wheel relative to it: uv writes its path relative, the lock holds on another checkout
        listed = target.parent / f".requirements-{os.getpid()}.in"
        listed.write_text("".join(f"{os.path.relpath(r, target.parent) if os.path.isabs(r) else r}\n"
                                  for r in requirements))
        # beside the lock (its paths are relative to its folder), named as uv wants an output: pylock.NAME.toml
        out = target.parent / f"pylock.{target.name.removeprefix('pylock.').removesuffix('.toml')}-new{os.getpid()}.toml"
        if keep and target.is_file() and upgrade is not True:
            out.write_bytes(target.read_bytes())  # uv prefers the versions its output file already holds
        argv: list[str | os.PathLike[str]] = [
            uv, "pip", "compile", "--format", "pylock.toml", "--no-header", "--quiet", "--only-binary", ":all:",
            "--python-version", python_version, "--python-platform", uv_platform(options.platforms),
            "--output-file", out, listed, *build_tools.exclude_newer(day, current)]
        if upgrade is True:
            argv.append("--upgrade")
        else:
            for name in upgrade or ():
                argv += ["--upgrade-package", name]
        try:
            result = command.run(argv, capture=True, log_file=log_file, check=False, echo=False, cwd=target.parent,
                                 env={"UV_NO_CONFIG": "1", "UV_CACHE_DIR": str(folder / "uv-cache"),
                                      **index_environment(options)})
            if result.returncode != 0:
                raise CommandError(f"uv could not lock {', '.join(requirements)} for Python {python_version}"
                                   f" ({platform or 'this engine'}):\n{redact(result.output[-3000:])}")
            text = out.read_text()
        finally:
            out.unlink(missing_ok=True)
            listed.unlink(missing_ok=True)
    data = tomllib.loads(text)
    mine = made_for(requirements, python_version, platform, base, debs, as_of, image)
    if "tool" in data:  # uv's file as it wrote it, else (a [tool] table of its own) as one document
        data["tool"][TOOL] = mine
        return tomli_w.dumps(data)
    return text.rstrip() + "\n\n" + tomli_w.dumps({"tool": {TOOL: mine}})


def index_environment(options: WheelOptions) -> dict[str, str]:
    """uv's environment for the indexes the unlocked builds' ``pip download`` asks: [wheels]
    index_url, extra_index_urls and find_links over pip's own configuration (its files and
    PIP_* variables, as ``pip config list`` shows them), and pip's configured constraints. In
    variables, not arguments: an index URL may carry a password, which ``ps`` shows in arguments."""
    try:
        return pip_configuration.uv_environment(_pip_configuration(), index_url=options.index_url,
                                                extra_index_urls=options.extra_index_urls,
                                                find_links=options.find_links)
    except ValueError as error:
        raise ConfigurationError(f"invoke lock: {error}; give that index or folder without it.") from None


def fetch(wheel: LockedWheel, lock_name: str, cache, options: WheelOptions):
    """``wheel`` of the lock ``lock_name``, fetched into the download cache (``cache``:
    :class:`torchbake.inputs.downloads.DownloadCache`) or found there, checked against its sha256;
    from a private index with its configured credentials. Returns the cache's artifact."""
    return cache.fetch(f"{index_credentials(wheel.location, options)}#sha256={wheel.sha256}",
                       key=f"{lock_name}: {wheel.name}", locked_by=lock_name)


def index_credentials(location: str, options: WheelOptions) -> str:
    """``location`` (a locked wheel's URL, which uv writes without credentials) with the user part
    of the configured index whose scheme, host and port it shares, as pip sends an index's
    credentials to the files it links; unchanged where no index with credentials matches."""
    import urllib.parse

    wanted = urllib.parse.urlsplit(location)
    if wanted.username is not None or wanted.scheme not in ("http", "https"):
        return location
    pip = _pip_configuration()
    for url in [options.index_url, *pip.get("index-url", []), *options.extra_index_urls,
                *pip.get("extra-index-url", []), *options.find_links, *pip.get("find-links", [])]:
        index = urllib.parse.urlsplit(url)
        if index.username is not None and (index.scheme, index.hostname, index.port) == (
                wanted.scheme, wanted.hostname, wanted.port):
            return urllib.parse.urlunsplit(wanted._replace(netloc=f"{index.netloc.rpartition('@')[0]}@{wanted.netloc}"))
    return location


@functools.cache
def _pip_configuration() -> dict[str, list[str]]:
    """pip's configuration where it decides what ``pip download`` resolves
    (:func:`torchbake.inputs.pip_configuration.parse`)."""
    import sys

    result = command.run([sys.executable, "-m", "pip", "config", "list"], capture=True, check=False, echo=False)
    return pip_configuration.parse(result.output, "download")


def changes(old: Lock | None, new: Lock) -> list[tuple[str, str, str]]:
    """(project, old version, new version) of every package the new lock adds, drops or moves
    ("" for none), as `invoke diff` words them."""
    before, after = (old.versions() if old else {}), new.versions()
    return [(name, before.get(name, ""), after.get(name, "")) for name in sorted({*before, *after})
            if before.get(name) != after.get(name)]
