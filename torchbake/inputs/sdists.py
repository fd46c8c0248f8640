"""Extensions from source distributions: a requirement-style ``[dev] extensions`` entry
(``torch-scatter==2.1.2``) is an extension that must compile against the image's torch, and is
published as a source distribution. Its sdist is found on the host, without building anything
(pip would run its setup.py, which imports torch, to read its metadata): on the project's page of
each configured index (PEP 503, what pip reads: ``[wheels] index_url`` else pip's own, then the
extra ones) or in a find-links folder, the newest version the requirement allows; fetched into
the download cache, checked against the sha256 the index gives. The dev build unpacks it and
compiles it as the other source trees (docker/common/build_extras.sh → build_source.sh,
``--no-build-isolation``), its compiles counted and cached.
"""

from __future__ import annotations

import html.parser
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import InvalidSdistFilename, canonicalize_name, parse_sdist_filename
from packaging.version import Version

from torchbake.core.errors import DownloadError

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
