"""Fetching inputs given by URL or path into a content-checked cache.

A URL is downloaded once into ``<cache>/downloads/<key>/<file name>``: to a temporary name
first, renamed into place only after its whole body arrived (as long as the server said) and its
sha256 was computed (and matched the expected one, when known), so the cache never holds a
partial, spliced or wrong file. A cached file whose size or mtime changed since its digest was
recorded is fetched again, not used. Local paths and ``file://`` URLs are hashed where they are,
never copied into the cache; their digest is remembered with the file's identity (device, inode,
size, mtime and ctime: see ``RACY_NS``), so a file rewritten with its old size and mtime is
hashed again.

Connection failures, timeouts, 5xx answers and bodies cut short are retried with exponential
backoff (bounded in count and total time by :class:`DownloadPolicy`). A cut download resumes
with a Range request made conditional by If-Range on the validator it began with (a strong ETag,
else a strong Last-Modified): a file that changed meanwhile comes whole (200) and the part kept is
dropped. Without such a validator, or where the server cannot resume, the download starts over;
4xx answers are final. A URL whose server gives no ETag or Last-Modified is fetched again each
run and its content compared.
"""

from __future__ import annotations

import contextlib
import email.utils
import errno
import hashlib
import http.client
import json
import os
import re
import shutil
import ssl
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import filelock

from torchbake.configuration.network import DownloadPolicy
from torchbake.configuration.validation import is_url, local_name
from torchbake.core import output, redaction
from torchbake.core.errors import ConfigurationError, DiskSpaceError, DownloadError
from torchbake.core.files import mark_used, read_back, read_back_object, write_atomically
from torchbake.core.output import human_size, transfer_progress

CHUNK = 1024 * 1024
RETRYABLE_STATUS = {408, 425, 429}  # besides every 5xx


def system_ca_file() -> Path | None:
    """This host's CA bundle (what TLS trusts without --ca-bundle)."""
    paths = ssl.get_default_verify_paths()
    for candidate in (paths.cafile, paths.openssl_cafile, "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def trust_bundle(ca_bundle: str, cache_root: Path) -> Path | None:
    """The bundle tools are pointed at: the host's CAs plus the user's (pip's --cert and git's
    sslCAInfo replace the default list, so the user's alone would break every other host).
    Written once per content into ``<cache>/trust/``; None without --ca-bundle."""
    if not ca_bundle:
        return None
    user = Path(ca_bundle).expanduser().read_bytes()
    system = system_ca_file()
    content = (system.read_bytes() if system else b"").rstrip(b"\n") + b"\n" + user
    target = cache_root / "trust" / f"ca-bundle-{hashlib.sha256(content).hexdigest()[:16]}.pem"
    if not target.is_file():
        write_atomically(target, content)
    return target


def trust_environment(ca_bundle: str, cache_root: Path) -> dict[str, str]:
    """Variables that make pip, git, curl and Python on the host trust the bundle."""
    bundle = trust_bundle(ca_bundle, cache_root)
    if bundle is None:
        return {}
    return {name: str(bundle) for name in ("PIP_CERT", "GIT_SSL_CAINFO", "SSL_CERT_FILE", "CURL_CA_BUNDLE",
                                            "REQUESTS_CA_BUNDLE")}


class _Retryable(Exception):
    """A failure worth another try; ``status`` describes it for the final message."""

    def __init__(self, status: str):
        super().__init__(status)
        self.status = status


class _DiskFull(Exception):
    """The cache's disk filled while a download was written (never retried)."""

    def __init__(self, needed: int | None, written: int):
        super().__init__("no space left on the device")
        self.needed, self.written = needed, written


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def require_pinned(locations: Mapping[str, str], checksums: Mapping[str, str]) -> None:
    """With ``require_hashes``: every URL input needs a sha256 (fragment or [checksums])."""
    unpinned = [f"  {key}: {location}" for key, location in locations.items()
                if location and is_url(split_fragment(location)[0]) and not split_fragment(location)[0].startswith("file://")
                and not expected_digest(location, checksums)]
    if unpinned:
        raise ConfigurationError(
            "--require-hashes (downloads.require_hashes): these URLs have no sha256:\n" + "\n".join(unpinned)
            + "\nAppend #sha256=<hex> to each URL or add it to [checksums] (sha256sum FILE prints it)."
        )


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
    """An exclusive lock on ``path`` (created if missing) shared by every torchbake process and
    thread on this host, e.g. two builds filling the same cache."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(path):  # a lock per thread too: two workers of one build-all exclude each other
        yield


def _stamp(path: Path) -> str:
    """A cached download's size and mtime: the cache's own files, written and renamed into place
    by torchbake under its lock (a check against damage, not the input's identity; its utime in
    mark_used and the hard links into contexts change the ctime on every use)."""
    info = path.stat()
    return f"{info.st_size} {info.st_mtime_ns}"


# A local input's identity, without reading it: a 200 MB file takes 0.17 s to hash here (SHA-NI,
# from the page cache; more from a cold disk), a 2 GB torch wheel some seconds, on every look of
# every run, and a nightly where nothing changed takes seconds in all. So the digest is kept with
# the file's device, inode, size, mtime and ctime. Size and mtime alone are not the bytes: a tool
# (or a person) writing other bytes of the same size and setting the old mtime back (os.utime,
# touch -r, cp -p, SOURCE_DATE_EPOCH) keeps both. The ctime cannot be set by utime (utime itself
# sets it to now) and changes on every write, chmod, link and rename; a file replaced by another
# has another inode. The ctime is the kernel's coarse clock (a tick, 1 to 10 ms) or a file
# server's: a file changed within RACY_NS before it was hashed could change again within the same
# tick unseen, so its digest is not kept with its identity and the next look hashes it again (as
# git treats a "racily clean" file). A build that hard-links a local wheel into its context
# changes its ctime, so that wheel is hashed once more on the next run: correct, and bounded.
RACY_NS = 2_000_000_000


def _identity(info: os.stat_result) -> str:
    return f"{info.st_dev}:{info.st_ino} {info.st_size} {info.st_mtime_ns} {info.st_ctime_ns}"


def write_record(path: Path, record: Path, digest: str, stamp: str = "") -> None:
    """Remember ``path``'s digest with ``stamp`` (by default its size and mtime), atomically."""
    write_atomically(record, f"{digest} {stamp or _stamp(path)}\n")


def recorded_digest(path: Path, record: Path, stamp: Callable[[Path], str] = _stamp) -> str:
    """The digest recorded for ``path`` if the file is unchanged since (the same ``stamp(path)``:
    by default its size and mtime); "" otherwise. Unchanged gigabytes are never read again."""
    text = read_back(record)
    digest, _, kept = (text or "").strip().partition(" ")
    try:
        return digest if text and len(digest) == 64 and kept == stamp(path) else ""
    except OSError:
        return ""  # a damaged record reads as none: the file is hashed (or fetched) again


def _local_identity(path: Path) -> str:
    return _identity(path.stat())


# This process's digests of local files by device, inode, size and mtime, with the ctime and link
# count they were hashed at: a build hard-links a local wheel into its context (its ctime moves with
# its link count, its record no longer holds), then looks at it again and again (input hash,
# context, labels); within one run it is read once, not on every look (measured: a 190 MB torch
# wheel, 0.4 to 1 s a look, several looks a build). A ctime that moved while the link count did not
# is a write: read again.
_HASHED_THIS_RUN: dict[str, tuple[str, int, int]] = {}


def _hash_with_identity(path: Path) -> tuple[str, str]:
    """``path``'s sha256 and the identity to keep it with: "" when the file changed while it was
    read, or so shortly before that a change now could leave its identity as it was."""
    began = time.time_ns()
    before = path.stat()
    seen = f"{before.st_dev}:{before.st_ino} {before.st_size} {before.st_mtime_ns}"
    known, ctime, links = _HASHED_THIS_RUN.get(seen, ("", 0, 0))
    if known and (before.st_ctime_ns == ctime or before.st_nlink != links):  # unchanged, or only linked
        _HASHED_THIS_RUN[seen] = (known, before.st_ctime_ns, before.st_nlink)
        return known, ""
    digest = file_sha256(path)
    _HASHED_THIS_RUN[seen] = (digest, before.st_ctime_ns, before.st_nlink)
    identity = _identity(before)
    if _identity(path.stat()) != identity or before.st_ctime_ns > began - RACY_NS:
        identity = ""
    return digest, identity


def file_sha256(path: Path) -> str:
    return file_digests(path)[0]


def file_digests(path: Path, *algorithms: str) -> tuple[str, ...]:
    """The hex digests of a file, read once: sha256 unless ``algorithms`` name others."""
    digests = [hashlib.new(name) for name in algorithms or ("sha256",)]
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            for digest in digests:
                digest.update(chunk)
    return tuple(digest.hexdigest() for digest in digests)


def expected_digest(location: str, checksums: Mapping[str, str]) -> str:
    base, fragment = split_fragment(location)
    return fragment or checksums.get(base, "") or checksums.get(local_name(base), "")


# What this run learnt of URLs without a digest: whether each still serves the cached file (asked
# once a run: a matrix asks once a night)
_STARTED = time.time()  # when this run began: a file cached since is this run's
_UNCHANGED: dict[str, bool] = {}


def _validators_file(target: Path) -> Path:
    return target.with_name(target.name + ".validators")


def _kept_validators(target: Path) -> dict:
    return read_back_object(_validators_file(target)) or {}


_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$")


def _content_range(value: str) -> tuple[int, int, int | None] | None:
    """``bytes FIRST-LAST/TOTAL`` → (first, last, total or None for ``*``); None if not that."""
    match = _CONTENT_RANGE.match(value.strip())
    if not match:
        return None
    return int(match[1]), int(match[2]), int(match[3]) if match[3] != "*" else None


def _resume_validator(headers) -> str:
    """What a resume's If-Range may carry (RFC 9110 13.1.5): the ETag if strong, else the
    Last-Modified date if strong (at least a second before the answer's Date); "" if neither."""
    etag = headers.get("ETag", "")
    if etag and not etag.startswith("W/"):
        return etag
    modified, date = headers.get("Last-Modified", ""), headers.get("Date", "")
    try:
        if modified and date and (email.utils.parsedate_to_datetime(date)
                                  - email.utils.parsedate_to_datetime(modified)).total_seconds() >= 1:
            return modified
    except (TypeError, ValueError):  # a date that does not parse, or one without its zone
        pass
    return ""


@dataclass
class _Transfer:
    """One download's file as its server described it: the validators and total length of the
    answer the body's first byte came from, and what a resumed part must match to follow it."""

    etag: str = ""
    last_modified: str = ""
    total: int | None = None
    if_range: str = ""  # the validator a resume is conditional on; "" = none: a cut starts over

    def begin(self, headers, total: int | None) -> None:
        self.etag, self.last_modified = headers.get("ETag", ""), headers.get("Last-Modified", "")
        self.total, self.if_range = total, _resume_validator(headers)

    def forget(self) -> None:
        self.etag, self.last_modified, self.total, self.if_range = "", "", None, ""

    def continues(self, headers, total: int | None) -> bool:
        """Whether a 206 answer is of the same file (a server may ignore If-Range): it carries the
        validator the resume was conditional on, the same, and no other that differs."""
        etag, modified = headers.get("ETag", ""), headers.get("Last-Modified", "")
        said = etag if self.if_range == self.etag else modified  # the one If-Range named must be there
        return (said == self.if_range and (not etag or etag == self.etag)
                and (not modified or modified == self.last_modified)
                and (total is None or self.total is None or total == self.total))

    def validators(self) -> dict[str, str]:
        return {"etag": self.etag, "last_modified": self.last_modified}


def _start_over(out, transfer: _Transfer) -> None:
    """Drop the part kept: what follows is another download from the first byte."""
    out.seek(0)
    out.truncate()
    transfer.forget()


class DownloadCache:
    def __init__(self, root: Path, checksums: Mapping[str, str], *, show_progress: bool = True,
                 policy: DownloadPolicy = DownloadPolicy(), read_only: bool = False):  # noqa: B008 - frozen
        self.root = root
        self.checksums = checksums
        self.show_progress = show_progress
        self.policy = policy
        self.read_only = read_only  # a plan looks, and remembers nothing

    @classmethod
    def for_settings(cls, settings, *, read_only: bool = False) -> DownloadCache:
        """The cache of ``settings.paths.cache_dir`` with its checksums and [downloads] policy."""
        return cls(settings.paths.cache_dir, settings.checksums,
                   policy=DownloadPolicy.from_settings(settings.downloads), read_only=read_only)

    def fetch(self, location: str, *, key: str = "", locked_by: str = "") -> Artifact:
        """Make ``location`` available locally; ``key`` names the option it came from (for errors);
        ``locked_by``: the lock whose digest it must have (a mismatch is the lock's, not a typo)."""
        base, _ = split_fragment(location)
        expected = expected_digest(location, self.checksums)
        what = f" ({key})" if key else ""
        advice = (f"A lock mismatch: the file is not the one {locked_by} holds, and nothing was built with it. If the"
                  " new file is meant, lock again from an index you trust (`invoke lock --upgrade-package NAME`) and"
                  " review the diff; never change a lock's digest by hand." if locked_by else
                  "The file was not cached. Fix the digest in [checksums] / the #sha256= fragment, or the URL.")
        if base.startswith("file://"):
            base_path = Path(urllib.parse.unquote(urllib.parse.urlparse(base).path))
            return self._local(base, base_path, expected, what, advice)
        if not is_url(base):
            return self._local(base, Path(base).expanduser(), expected, what, advice)
        return self._remote(base, expected, what, advice)

    def cached_path(self, url: str) -> Path | None:
        """The cached, verified file of ``url``, or None if it is not in the cache."""
        target = self._folder_of(url) / local_name(url)
        record = target.with_name(target.name + ".sha256")
        return target if target.is_file() and recorded_digest(target, record) else None

    def _folder_of(self, url: str) -> Path:
        """Where a URL's file is cached: keyed by the URL less its credentials, secret query
        parameters and expiry (redaction.cache_key_url), so a re-signed URL finds the same file."""
        return self.root / "downloads" / hashlib.sha256(redaction.cache_key_url(url).encode()).hexdigest()[:16]

    def local_digest(self, path: Path) -> str:
        """sha256 of a local file, remembered in the cache by its path and identity (device,
        inode, size, mtime, ctime: see RACY_NS); a file rewritten since is hashed again."""
        record = self.root / "digests" / (hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:24] + ".sha256")
        digest = recorded_digest(path, record, _local_identity)
        if not digest:
            digest, identity = _hash_with_identity(path)
            if not self.read_only:
                record.parent.mkdir(parents=True, exist_ok=True)
                if identity:
                    write_record(path, record, digest, identity)
                else:
                    record.unlink(missing_ok=True)  # nothing to trust it by: hashed again next time
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
        url, authorization = redaction.split_credentials(base)
        cached = self.cached_path(url)
        if cached is None or not self._served_unchanged(url, cached, authorization):
            return ""  # known once fetched (again)
        return recorded_digest(cached, cached.with_name(cached.name + ".sha256"))

    def _local(self, location: str, path: Path, expected: str, what: str, advice: str) -> Artifact:
        if not path.is_file():
            raise DownloadError(f"Input {location}{what} is not a file on this host.")
        digest = self.local_digest(path)
        _check(location, digest, expected, what, advice)
        return Artifact(location=location, path=path.resolve(), sha256=digest)

    def _remote(self, location: str, expected: str, what: str, advice: str) -> Artifact:
        # Credentials in the URL go as the request's authorization, never into the host, the
        # cache's key, a message or a record: every name of the download is the URL without them.
        url, authorization = redaction.split_credentials(location)
        folder = self._folder_of(url)
        with file_lock(folder.with_name(folder.name + ".lock")):  # another run fetching it: wait, then use it
            artifact = self._remote_locked(url, folder, expected, what, authorization, advice)
            mark_used(artifact.path)  # `invoke gc` keeps what builds use
            return artifact

    def _remote_locked(self, url: str, folder: Path, expected: str, what: str, authorization: str,
                       advice: str) -> Artifact:
        target = folder / local_name(url)
        record = target.with_name(target.name + ".sha256")
        old, by_content = "", False
        if target.is_file() and record.is_file():
            old = digest = recorded_digest(target, record)
            if digest and (digest == expected or not expected and self._served_unchanged(url, target, authorization)):
                return Artifact(location=url, path=target, sha256=digest)
            kept = _kept_validators(target)
            if digest and not expected and not (kept.get("etag") or kept.get("last_modified")):
                by_content = True  # nothing to ask the server by: its content tells, said once fetched
            elif digest and not expected:
                output.channel().say(f"{url}{what} changed on its server since it was downloaded; fetching it again.")
            else:
                output.channel().say(f"Cached {target} changed since it was verified (or its digest differs);"
                                     " fetching it again.")
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=folder)
        tmp = Path(tmp_name)
        try:
            try:
                with os.fdopen(fd, "wb") as out:
                    transfer = self._download(url, out, what, authorization)
            except (_DiskFull, OSError) as exc:
                if isinstance(exc, OSError) and exc.errno not in DISK_FULL:
                    raise
                needed = getattr(exc, "needed", None)
                needs = f"needs {human_size(needed)}" if needed else "needs more than is free"
                raise DiskSpaceError(
                    f"The disk of the download cache {folder} is full: {url}{what} {needs}"
                    f" ({human_size(shutil.disk_usage(folder).free)} free there); nothing partial was kept."
                    " Free space there (`invoke gc` removes cache entries no build used lately) or set"
                    " paths.cache_dir to a bigger disk, then run the command again.") from None
            size = tmp.stat().st_size
            if transfer.total is not None and size != transfer.total:  # (a short body was retried already)
                raise DownloadError(f"Downloading {url}{what} gave {size} bytes where its server said"
                                    f" {transfer.total}; nothing was kept.")
            digest = file_sha256(tmp)
            _check(url, digest, expected, what, advice)
            os.replace(tmp, target)
            write_record(target, record, digest)
            # the validators of the answer the whole body came from (a resumed part matched them)
            write_atomically(_validators_file(target), json.dumps({**transfer.validators(), "length": size}))
            _UNCHANGED[url] = True
        finally:
            tmp.unlink(missing_ok=True)
        if old and old != digest:  # a new file under the same URL is a new input
            output.channel().say(f"{url}{what} changed: sha256 {old} → {digest}.")
        elif old:  # the cached copy was good: fetched again to learn whether the server's changed
            why = ("" if not by_content else "the server gives no ETag or Last-Modified: "
                   if not (transfer.etag or transfer.last_modified) else
                   "its cached copy kept no ETag or Last-Modified to ask the server by: ")
            output.channel().say(f"{url}{what}: {why}fetched again, same content.")
        return Artifact(location=url, path=target, sha256=digest)

    def read_page(self, url: str, limit: int = 64 * 2**20) -> tuple[str, str]:
        """(the text of a small page ``url`` serves now, the URL it came from after redirects): an
        index's project page, under the [downloads] timeout and CA bundle, its credentials sent as
        a header; never cached (a new release must be seen). A failure is a DownloadError naming it."""
        plain, authorization = redaction.split_credentials(url)
        try:
            with self._open(plain, {"Accept": "text/html"}, authorization) as response:
                return response.read(limit).decode("utf-8", errors="replace"), response.geturl()
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            raise DownloadError(f"{redaction.redact(url)} could not be read ({getattr(exc, 'reason', exc)}).") from None

    def _open(self, url: str, headers: Mapping[str, str], authorization: str = "", context=None):
        """A GET of ``url`` under the [downloads] timeout and CA bundle; ``authorization`` is not sent
        on to another host a redirect names (an object store's signed URL)."""
        request = urllib.request.Request(url, headers=dict(headers))
        if authorization:
            request.add_unredirected_header("Authorization", authorization)
        if context is None and url.startswith("https://"):
            context = self.policy.ssl_context()
        return urllib.request.urlopen(request, timeout=self.policy.timeout, context=context)  # noqa: S310

    def _served_unchanged(self, url: str, target: Path, authorization: str) -> bool:
        """Whether ``url`` still serves the file cached as ``target`` (a URL without a digest names
        whatever its server holds now): asked once a run with the validators its download kept
        (ETag, Last-Modified, length), as pip's HTTP cache asks. None kept: no (it is fetched
        again). A server that does not answer: the cached file, and the run says so."""
        if url in _UNCHANGED:
            return _UNCHANGED[url]
        record = target.with_name(target.name + ".sha256")
        if record.is_file() and record.stat().st_mtime >= _STARTED:  # fetched during this run (by another one
            _UNCHANGED[url] = True                                    # that this one waited for): as good as ours
            return True
        kept = _kept_validators(target)
        if not (kept.get("etag") or kept.get("last_modified")):
            _UNCHANGED[url] = False
            return False
        headers = {"User-Agent": "torchbake", **({"If-None-Match": kept["etag"]} if kept.get("etag") else {}),
                   **({"If-Modified-Since": kept["last_modified"]} if kept.get("last_modified") else {})}
        try:
            with self._open(url, headers, authorization) as response:
                now = {"etag": response.headers.get("ETag", ""), "last_modified": response.headers.get("Last-Modified", ""),
                       "length": int(response.headers.get("Content-Length") or kept.get("length") or 0)}
            unchanged = all(now[key] == kept.get(key) for key in ("etag", "last_modified", "length") if kept.get(key))
        except urllib.error.HTTPError as exc:
            exc.close()
            unchanged = True
            if exc.code != 304:  # not modified: the one answer that says so; others say nothing of it
                output.channel().say(f"{url} answered HTTP {exc.code} when asked whether it changed; the cached"
                                     f" copy {target} is used.")
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            unchanged = True
            output.channel().say(f"{url} did not answer whether it changed ({exc}); the cached copy {target} is used.")
        _UNCHANGED[url] = unchanged
        return unchanged

    def _download(self, url: str, out, what: str, authorization: str = "") -> _Transfer:
        """Fetch ``url`` into ``out`` with retries (``authorization``: the header's value, or "");
        returns what the server said of the file the body is."""
        policy = self.policy
        context = policy.ssl_context() if url.startswith("https://") else None
        started, tries, wait = time.monotonic(), 0, policy.retry_backoff
        transfer = _Transfer()
        with transfer_progress(enabled=self.show_progress, console=output.channel().console) as progress:
            task = progress.add_task(local_name(url), total=None)
            while True:
                tries += 1
                try:
                    self._attempt(url, out, transfer, (context, progress, task), what, authorization)
                    return transfer
                except _Retryable as failure:
                    elapsed = time.monotonic() - started
                    if tries > policy.retries or elapsed + wait > policy.retry_max_time:
                        raise DownloadError(
                            f"Downloading {url}{what} failed after {tries} {'try' if tries == 1 else 'tries'}"
                            f" in {elapsed:.0f} s; the last: {failure.status}. Check the URL and the server,"
                            " or raise downloads.retries / downloads.retry_max_time."
                        ) from None
                    output.channel().say(f"Download of {url} failed ({failure.status}); try {tries + 1} of"
                                         f" {policy.retries + 1} in {wait:g} s.")
                    time.sleep(wait)
                    wait = min(wait * 2, 30.0)

    def _attempt(self, url: str, out, transfer: _Transfer, display, what: str, authorization: str = "") -> None:
        """One connection: resume from what ``out`` holds, if the file it began with is still the
        one served (Range with If-Range on its validator), else start over; ``display``: the TLS
        context, progress and its task. Raises ``_Retryable`` for transient failures,
        ``DownloadError`` for final ones."""
        context, progress, task = display
        have = out.tell()
        if have and not transfer.if_range:  # nothing to tell the part kept is of the file served now
            _start_over(out, transfer)
            have = 0
        headers = {"User-Agent": "torchbake"}
        if have:
            headers["Range"] = f"bytes={have}-"
            headers["If-Range"] = transfer.if_range  # changed since: the whole new file (200), not its tail
        try:
            response = self._open(url, headers, authorization, context)
        except urllib.error.HTTPError as exc:
            exc.close()  # the error carries the open response
            if exc.code >= 500 or exc.code in RETRYABLE_STATUS:
                raise _Retryable(f"HTTP {exc.code} {exc.reason}") from None
            if exc.code == 416 and have:  # our partial file is not a prefix any more
                _start_over(out, transfer)
                raise _Retryable("HTTP 416 for the resumed range (starting over)") from None
            hint = ""
            if exc.code in (401, 403):
                hint = (" The server refused the credentials in the URL (https://USER:TOKEN@host/…); check them."
                        if authorization else " It needs credentials: give them in the URL, https://USER:TOKEN@host/….")
            raise DownloadError(
                f"Downloading {url}{what} failed: HTTP {exc.code} {exc.reason} (not retried: a 4xx answer is final).{hint}"
            ) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc  # urllib wraps what it met
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise DownloadError(
                    f"Downloading {url}{what} failed: the server's certificate is not trusted"
                    f" ({reason.verify_message}). Behind an intercepting proxy, pass its CA with --ca-bundle"
                    " FILE (downloads.ca_bundle)."
                ) from None
            raise _Retryable(f"{type(reason).__name__}: {reason}" if str(reason) else type(reason).__name__) from None
        with response:
            have, body_end = _place(response, out, transfer, have)
            total = transfer.total
            progress.update(task, total=total, completed=have)
            received = have
            try:
                for chunk in iter(lambda: response.read(CHUNK), b""):
                    out.write(chunk)
                    received += len(chunk)
                    progress.update(task, completed=received)
                out.flush()
            except OSError as exc:
                if exc.errno in DISK_FULL:
                    raise _DiskFull(total, received) from None
                raise _Retryable(f"the connection broke after {received} bytes ({type(exc).__name__})") from None
            except http.client.HTTPException as exc:
                raise _Retryable(f"the connection broke after {received} bytes ({type(exc).__name__})") from None
            if body_end is not None and received != body_end or total is not None and received != total:
                raise _Retryable(f"the body ended after {received} of {total or body_end} bytes")


def _place(response, out, transfer: _Transfer, have: int) -> tuple[int, int | None]:
    """Where ``response``'s body goes in ``out``, which holds ``have`` bytes: after them (a 206
    from that byte on, of the file begun), or from the first byte (a 200: the part kept is
    dropped). Returns that offset and where the body should end (None: unsaid)."""
    headers = response.headers
    if response.status != 206:  # the whole file: a server that cannot resume, or whose file changed
        if have:
            _start_over(out, transfer)
        length = int(headers.get("Content-Length") or 0) or None
        transfer.begin(headers, length)
        return 0, length
    where = _content_range(headers.get("Content-Range", ""))
    if where is None or where[0] != have or (have and not transfer.continues(headers, where[2])):
        _start_over(out, transfer)
        raise _Retryable(f"the server's part (Content-Range {headers.get('Content-Range', '')!r}) is not the rest"
                         f" of the file from byte {have} (starting over)")
    if not have:
        transfer.begin(headers, where[2])
    return have, where[1] + 1


def _check(location: str, digest: str, expected: str, what: str, advice: str) -> None:
    if expected and digest != expected:
        raise DownloadError(f"sha256 mismatch for {location}{what}:\n  expected {expected}\n  got      {digest}\n{advice}")


def link_or_copy(source: Path, target: Path) -> None:
    """Hard-link ``source`` to ``target`` (same file system), else copy it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
