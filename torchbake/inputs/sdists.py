"""Extensions from source distributions: a requirement-style ``[dev] extensions`` entry
(``torch-scatter==2.1.2``) is an extension that must compile against the image's torch, and is
published as a source distribution. Its sdist is found on the host, without building anything
(pip would run its setup.py, which imports torch, to read its metadata): on the project's page of
each configured index (PEP 503, what pip reads: ``[wheels] index_url`` else pip's own, then the
extra ones) or in a find-links folder, the newest version the requirement allows; fetched into
the download cache, checked against the sha256 the index gives. The dev build unpacks it and
compiles it as the other source trees (docker/common/build_extras.sh → build_source.sh,
``--no-build-isolation``), its compiles counted and cached.

A dev image's sdists can be locked (``invoke lock`` of a dev build): a PEP 751 file beside the
release images' locks, one sdist per requirement with its URL (or path) and sha256; a build that
finds it takes exactly those files, checked against the lock, and asks no index. An sdist is
source: the lock holds for any Python and platform, made for the requirements alone.
"""

from __future__ import annotations

import hashlib
import html.parser
import tomllib
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import InvalidSdistFilename, canonicalize_name, parse_sdist_filename
from packaging.version import Version

from torchbake.core.errors import ConfigurationError, DownloadError

SUFFIXES = (".tar.gz", ".zip")


@dataclass(frozen=True)
class Sdist:
    name: str  # the project, canonical
    version: str
    url: str  # where it was found (an index's file URL or a local path), #sha256= where the index gave one
    file_name: str


class _Links(html.parser.HTMLParser):
    """The file links of a PEP 503 project page: (href, data-yanked present)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, bool]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            found = dict(attrs)
            if found.get("href"):
                self.links.append((found["href"] or "", "data-yanked" in found))


def _candidates(requirement: Requirement, files: Iterable[tuple[str, str]]) -> list[Sdist]:
    """The sdists among ``files`` ((file name, URL)) of the requirement's project and versions."""
    wanted, found = canonicalize_name(requirement.name), []
    for file_name, url in files:
        if not file_name.endswith(SUFFIXES):
            continue
        try:
            name, version = parse_sdist_filename(file_name)
        except InvalidSdistFilename:
            continue
        if name == wanted and requirement.specifier.contains(version):
            found.append(Sdist(name, str(version), url, file_name))
    return found


def find(requirement_text: str, indexes: Sequence[str], find_links: Sequence[str], read_page) -> Sdist:
    """The newest sdist ``requirement_text`` allows, on the indexes (their project pages, read
    with ``read_page(url) → (text, final url)``) or in the find-links folders; a DownloadError
    naming where it looked when none has one."""
    requirement = Requirement(requirement_text)
    found: list[Sdist] = []
    for folder in find_links:
        local = Path(urllib.parse.urlsplit(folder).path if folder.startswith("file:") else folder).expanduser()
        if local.is_dir():
            found += _candidates(requirement, ((p.name, str(p)) for p in local.iterdir()))
    for index in indexes:
        page_url = index.rstrip("/") + f"/{canonicalize_name(requirement.name)}/"
        try:
            text, final = read_page(page_url)
        except DownloadError:
            continue  # another index may have it; none: said below
        links = _Links()
        links.feed(text)
        scheme = urllib.parse.urlsplit(final).scheme
        found += _candidates(requirement, (
            (urllib.parse.unquote(urllib.parse.urlsplit(href).path.rsplit("/", 1)[-1]), url)
            for href, yanked in links.links if not yanked
            # a page on the network names files on the network: never a file of this host (file://)
            if urllib.parse.urlsplit(url := urllib.parse.urljoin(final, href)).scheme in (scheme, "https")))
    if not found:
        raise DownloadError(f"[dev] extensions: no source distribution of {requirement_text} on"
                            f" {', '.join([*indexes, *find_links]) or 'any index'}; an extension that compiles against"
                            " the image's torch is built from its sdist (a git+URL@REF works too).")
    return max(found, key=lambda sdist: Version(sdist.version))


@dataclass(frozen=True)
class LockedSdist:
    """One requirement's source distribution as a lock holds it."""

    name: str  # the project, canonical
    version: str
    location: str  # its URL (no credentials, no fragment) or its absolute path
    sha256: str

    def fetchable(self) -> str:
        """Its location with the sha256 a download is checked against."""
        return f"{self.location}#sha256={self.sha256}"


@dataclass(frozen=True)
class SdistLock:
    path: Path
    requirements: tuple[str, ...]  # what it was made for: the requirement-style [dev] extensions
    sdists: Mapping[str, LockedSdist]  # project (canonical) → its locked sdist
    sha256: str  # of the file as written
    image: str = ""  # the image it was made for ("": a lock older than that record)

    def locked(self, requirement: str) -> LockedSdist | None:
        return self.sdists.get(canonicalize_name(Requirement(requirement).name))

    def versions(self) -> dict[str, str]:
        """Project → version, as torchbake.inputs.locks.changes compares two locks."""
        return {name: sdist.version for name, sdist in self.sdists.items()}


def read_lock(path: Path) -> SdistLock | None:
    """The sdist lock at ``path`` (None where there is none); one torchbake cannot use is exit 2
    naming it."""
    from packaging.pylock import Pylock, PylockValidationError

    from torchbake.inputs.locks import REMAKE as remake
    from torchbake.inputs.locks import check_path

    if not path.exists() and not path.is_symlink():
        return None
    check_path(path)  # a folder, a device or a dangling link there: exit 2, as for any lock
    data = path.read_bytes()
    try:
        lock = Pylock.from_dict(tomllib.loads(data.decode()))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, PylockValidationError) as exc:
        raise ConfigurationError(f"{path} is not a lock torchbake can use ({exc}). {remake}") from None
    tool = (lock.tool or {}).get("torchbake", {})
    found = {}
    for package in lock.packages:
        sdist = package.sdist
        sha256 = ((sdist.hashes if sdist else None) or {}).get("sha256", "")
        location = (sdist.url or (str((path.parent / sdist.path).resolve()) if sdist.path else "")) if sdist else ""
        if not sha256 or not location:
            raise ConfigurationError(f"{path}: {package.name} is locked to something other than a source distribution"
                                     f" with its URL or path and sha256 (what a dev image's lock holds). {remake}")
        name = str(canonicalize_name(package.name))
        found[name] = LockedSdist(name, str(package.version), location, sha256)
    requirements = tool.get("requirements") if isinstance(tool, dict) else None
    if not isinstance(requirements, list) or not all(isinstance(r, str) for r in requirements):
        raise ConfigurationError(f"{path} does not say what it was made for ([tool.torchbake] requirements). {remake}")
    image = tool.get("image", "")
    return SdistLock(path, tuple(requirements), found, hashlib.sha256(data).hexdigest(),
                     image if isinstance(image, str) else "")


def lock_text(requirements: Sequence[str], found: Sequence[LockedSdist], image: str = "") -> str:
    """A PEP 751 lock of ``found`` made for ``requirements`` of ``image``, checked by packaging's model."""
    import tomli_w
    from packaging.pylock import Pylock

    packages = []
    for sdist in found:
        where = "url" if "://" in sdist.location else "path"
        file_name = urllib.parse.unquote(urllib.parse.urlsplit(sdist.location).path).rsplit("/", 1)[-1]
        packages.append({"name": sdist.name, "version": sdist.version,
                         "sdist": {"name": file_name, where: sdist.location, "hashes": {"sha256": sdist.sha256}}})
    text = tomli_w.dumps({"lock-version": "1.0", "created-by": "torchbake", "packages": packages,
                          "tool": {"torchbake": {**({"image": image} if image else {}),
                                                 "requirements": list(requirements)}}})
    Pylock.from_dict(tomllib.loads(text))
    return text
