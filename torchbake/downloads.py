"""Fetching inputs given by URL or path into a content-checked cache.

A URL is downloaded once into ``<cache>/downloads/<key>/<file name>``: to a temporary name
first, renamed into place only after its sha256 was computed (and matched the expected one,
when known), so the cache never holds a partial or wrong file. A cached file is re-hashed on
use and fetched again if it no longer matches its recorded digest. Local paths and ``file://``
URLs are hashed where they are, never copied into the cache.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                           TransferSpeedColumn)

from .errors import DownloadError
from .validation import is_url

CHUNK = 1024 * 1024


@dataclass(frozen=True)
class Artifact:
    """An input available on this host."""

    location: str  # as the user gave it (without the #sha256 fragment)
    path: Path
    sha256: str

    @property
    def name(self) -> str:
        return self.path.name


def split_fragment(location: str) -> tuple[str, str]:
    """``URL#sha256=HEX`` → (URL, HEX); no fragment → (location, "")."""
    base, _, fragment = location.partition("#")
    return base, fragment[len("sha256="):] if fragment.startswith("sha256=") else ""


@contextlib.contextmanager
def file_lock(path: Path):
    """An exclusive lock on ``path`` (created if missing) shared by every torchbake process on
    this host, e.g. two builds filling the same cache."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _stamp(path: Path) -> str:
    info = path.stat()
    return f"{info.st_size} {info.st_mtime_ns}"


def write_record(path: Path, record: Path, digest: str) -> None:
    """Remember ``path``'s digest with its size and mtime (written atomically)."""
    tmp = record.with_name(record.name + f".{os.getpid()}.tmp")
    tmp.write_text(f"{digest} {_stamp(path)}\n")
    os.replace(tmp, record)


def recorded_digest(path: Path, record: Path) -> str:
    """The digest recorded for ``path`` if the file is unchanged since (same size and mtime);
    "" otherwise. Unchanged gigabytes are never read again."""
    try:
        digest, _, stamp = record.read_text().strip().partition(" ")
        return digest if stamp == _stamp(path) else ""
    except OSError:
        return ""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_name_of(url: str) -> str:
    name = Path(urllib.parse.unquote(urllib.parse.urlparse(url).path)).name
    return name or "download"


def expected_digest(location: str, checksums: Mapping[str, str]) -> str:
    base, fragment = split_fragment(location)
    return fragment or checksums.get(base, "") or checksums.get(file_name_of(base) if is_url(base) else Path(base).name, "")


class DownloadCache:
    def __init__(self, root: Path, checksums: Mapping[str, str], *, show_progress: bool = True):
        self.root = root
        self.checksums = checksums
        self.show_progress = show_progress

    def fetch(self, location: str, *, key: str = "") -> Artifact:
        """Make ``location`` available locally; ``key`` names the option it came from (for errors)."""
        base, _ = split_fragment(location)
        expected = expected_digest(location, self.checksums)
        what = f" ({key})" if key else ""
        if base.startswith("file://"):
            base_path = Path(urllib.parse.unquote(urllib.parse.urlparse(base).path))
            return self._local(base, base_path, expected, what)
        if not is_url(base):
            return self._local(base, Path(base).expanduser(), expected, what)
        return self._remote(base, expected, what)

    def local_digest(self, path: Path) -> str:
        """sha256 of a local file, remembered (by path, size and mtime) in the cache."""
        record = self.root / "digests" / (hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:24] + ".sha256")
        digest = recorded_digest(path, record)
        if not digest:
            digest = file_sha256(path)
            record.parent.mkdir(parents=True, exist_ok=True)
            write_record(path, record, digest)
        return digest

    def known_digest(self, location: str) -> str:
        """The digest of an input without fetching it: from the URL fragment or [checksums], a
        verified cache entry, or a local file; "" when only a download would tell."""
        base, _ = split_fragment(location)
        expected = expected_digest(location, self.checksums)
        if expected:
            return expected
        if base.startswith("file://"):
            path = Path(urllib.parse.unquote(urllib.parse.urlparse(base).path))
            return self.local_digest(path) if path.is_file() else ""
        if not is_url(base):
            path = Path(base).expanduser()
            return self.local_digest(path) if path.is_file() else ""
        target = self.root / "downloads" / hashlib.sha256(base.encode()).hexdigest()[:16] / file_name_of(base)
        return recorded_digest(target, target.with_name(target.name + ".sha256")) if target.is_file() else ""

    def _local(self, location: str, path: Path, expected: str, what: str) -> Artifact:
        if not path.is_file():
            raise DownloadError(f"Input {location}{what} is not a file on this host.")
        digest = self.local_digest(path)
        _check(location, digest, expected, what)
        return Artifact(location=location, path=path.resolve(), sha256=digest)

    def _remote(self, url: str, expected: str, what: str) -> Artifact:
        folder = self.root / "downloads" / hashlib.sha256(url.encode()).hexdigest()[:16]
        target = folder / file_name_of(url)
        record = target.with_name(target.name + ".sha256")
        if target.is_file() and record.is_file():
            digest = recorded_digest(target, record)
            if digest and (not expected or digest == expected):
                return Artifact(location=url, path=target, sha256=digest)
            print(f"Cached {target} changed since it was verified (or its digest differs); fetching it again.")
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=folder)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out:
                digest = self._download(url, out, what)
            _check(url, digest, expected, what)
            os.replace(tmp, target)
            write_record(target, record, digest)
        finally:
            tmp.unlink(missing_ok=True)
        return Artifact(location=url, path=target, sha256=digest)

    def _download(self, url: str, out, what: str) -> str:
        digest = hashlib.sha256()
        request = urllib.request.Request(url, headers={"User-Agent": "torchbake"})
        try:
            response = urllib.request.urlopen(request, timeout=60)  # noqa: S310 - scheme validated
        except urllib.error.HTTPError as exc:
            raise DownloadError(f"Downloading {url}{what} failed: HTTP {exc.code} {exc.reason}.") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise DownloadError(f"Downloading {url}{what} failed: {reason}.") from None
        total = int(response.headers.get("Content-Length") or 0) or None
        received = 0
        with response, _progress(self.show_progress) as progress:
            task = progress.add_task(file_name_of(url), total=total)
            try:
                for chunk in iter(lambda: response.read(CHUNK), b""):
                    out.write(chunk)
                    digest.update(chunk)
                    received += len(chunk)
                    progress.update(task, advance=len(chunk))
            except OSError as exc:
                raise DownloadError(f"Downloading {url}{what} broke off after {received} bytes: {exc}.") from None
        if total is not None and received != total:
            raise DownloadError(f"Downloading {url}{what} got {received} of {total} bytes; the server closed early.")
        return digest.hexdigest()


def _check(location: str, digest: str, expected: str, what: str) -> None:
    if expected and digest != expected:
        raise DownloadError(
            f"sha256 mismatch for {location}{what}:\n  expected {expected}\n  got      {digest}\n"
            "The file was not cached. Fix the digest in [checksums] / the #sha256= fragment, or the URL."
        )


def _progress(enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
        TimeRemainingColumn(), disable=not enabled, transient=False,
    )


def link_or_copy(source: Path, target: Path) -> None:
    """Hard-link ``source`` to ``target`` (same file system), else copy it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
