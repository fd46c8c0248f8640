"""Downloads into the cache: checked, atomic, re-verified. A real HTTP server on 127.0.0.1."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.support import http_server
from torchbake.core.errors import DownloadError
from torchbake.inputs.downloads import DownloadCache, expected_digest, split_fragment


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    with http_server(root) as url:
        yield root, url


def files_in(folder: Path) -> list[str]:
    """Files in the cache (lock files, which hold nothing, left out)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p.suffix != ".lock")


def test_download_is_cached_with_its_digest(server, tmp_path):
    root, url = server
    (root / "kit.tar.gz").write_bytes(b"x" * 3_000_000)
    digest = hashlib.sha256(b"x" * 3_000_000).hexdigest()
    cache = DownloadCache(tmp_path / "cache", {}, show_progress=False)
    first = cache.fetch(f"{url}/kit.tar.gz#sha256={digest}")
    assert first.sha256 == digest and first.path.read_bytes() == b"x" * 3_000_000
    (root / "kit.tar.gz").unlink()  # a second fetch must not need the server
    assert cache.fetch(f"{url}/kit.tar.gz").path == first.path
    names = files_in(tmp_path / "cache")
    assert [n.rsplit("/", 1)[1] for n in names] == ["kit.tar.gz", "kit.tar.gz.sha256", "kit.tar.gz.validators"]


def test_a_url_that_serves_new_bytes_under_its_name_is_a_new_input(server, tmp_path, capsys, monkeypatch):
    """A URL without a digest names whatever its server holds now: each run asks it once, with the
    validators the download kept (here Last-Modified, as http.server sends it), and a changed file
    is fetched again and said, old → new; an unchanged one is not downloaded; a server that does
    not answer leaves the cached copy in use, said."""
    import os
    import time

    from torchbake.inputs import downloads

    def next_run() -> None:  # a later run: it has asked nothing yet, and began after the files were cached
        downloads._UNCHANGED.clear()
        monkeypatch.setattr(downloads, "_STARTED", time.time() + 1)

    root, url = server
    wheel = root / "torch_musa-2.0-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"first night")
    cache = DownloadCache(tmp_path / "cache", {}, show_progress=False)
    first = cache.fetch(f"{url}/{wheel.name}")
    old = hashlib.sha256(b"first night").hexdigest()
    assert first.sha256 == old
    next_run()  # a night later
    assert cache.known_digest(f"{url}/{wheel.name}") == old  # asked: 304, nothing downloaded
    wheel.write_bytes(b"second night")
    os.utime(wheel, (wheel.stat().st_mtime + 86400,) * 2)
    next_run()
    assert cache.known_digest(f"{url}/{wheel.name}") == ""  # known once fetched again
    new = hashlib.sha256(b"second night").hexdigest()
    second = cache.fetch(f"{url}/{wheel.name}")
    assert second.sha256 == new and second.path.read_bytes() == b"second night"
    assert f"changed: sha256 {old} → {new}" in capsys.readouterr().out
    next_run()
    wheel.unlink()
    root.rename(tmp_path / "gone")  # the server answers 404 now
    assert cache.known_digest(f"{url}/{wheel.name}") == new
    assert "answered HTTP 404 when asked whether it changed; the cached copy" in capsys.readouterr().out


def test_mismatch_leaves_nothing_in_the_cache(server, tmp_path):
    root, url = server
    (root / "kit.tar.gz").write_bytes(b"payload")
    cache = DownloadCache(tmp_path / "cache", {"kit.tar.gz": "0" * 64}, show_progress=False)
    with pytest.raises(DownloadError) as info:
        cache.fetch(f"{url}/kit.tar.gz", key="toolkits.mudnn_url")
    text = str(info.value)
    assert f"sha256 mismatch for {url}/kit.tar.gz (toolkits.mudnn_url)" in text
    assert "expected " + "0" * 64 in text
    assert "got      " + hashlib.sha256(b"payload").hexdigest() in text
    assert files_in(tmp_path / "cache") == []


def test_corrupted_cache_entry_is_fetched_again(server, tmp_path):
    root, url = server
    (root / "w.whl").write_bytes(b"good")
    cache = DownloadCache(tmp_path / "cache", {}, show_progress=False)
    artifact = cache.fetch(f"{url}/w.whl")
    artifact.path.write_bytes(b"evil")
    again = cache.fetch(f"{url}/w.whl")
    assert again.path.read_bytes() == b"good"


def test_http_error_names_url_and_status(server, tmp_path):
    _root, url = server
    cache = DownloadCache(tmp_path / "cache", {}, show_progress=False)
    with pytest.raises(DownloadError, match=r"Downloading .*/missing.whl \(wheels.torch\) failed: HTTP 404"):
        cache.fetch(f"{url}/missing.whl", key="wheels.torch")
    assert files_in(tmp_path / "cache") == []


@pytest.fixture
def settled(monkeypatch):
    """Files as if written long before they are hashed (not "racily" new: see downloads.RACY_NS)."""
    from torchbake.inputs import downloads
    monkeypatch.setattr(downloads, "RACY_NS", 0, raising=False)


def test_local_files_are_hashed_in_place(tmp_path, settled):
    wheel = tmp_path / "t.whl"
    wheel.write_bytes(b"abc")
    cache = DownloadCache(tmp_path / "cache", {}, show_progress=False)
    assert cache.fetch(str(wheel)).path == wheel
    assert cache.fetch(f"file://{wheel}").sha256 == hashlib.sha256(b"abc").hexdigest()
    with pytest.raises(DownloadError, match="sha256 mismatch"):
        cache.fetch(f"{wheel}#sha256={'1' * 64}")
    # the file is never copied into the cache; only its digest is remembered
    assert [p.rsplit("/", 1)[0] for p in files_in(tmp_path / "cache")] == ["digests"]


def test_unchanged_files_are_not_read_again(tmp_path, monkeypatch, settled):
    import torchbake.inputs.downloads as downloads

    wheel = tmp_path / "big.whl"
    wheel.write_bytes(b"x" * 1000)
    cache = DownloadCache(tmp_path / "cache", {}, show_progress=False)
    first = cache.known_digest(str(wheel))
    reads = []
    real = downloads.file_sha256
    monkeypatch.setattr(downloads, "file_sha256", lambda p: reads.append(p) or real(p))
    assert cache.known_digest(str(wheel)) == first and cache.fetch(str(wheel)).sha256 == first
    assert reads == []
    wheel.write_bytes(b"y" * 1001)  # changed: read again
    assert cache.known_digest(str(wheel)) == hashlib.sha256(b"y" * 1001).hexdigest()
    assert len(reads) == 1


def test_a_local_file_rewritten_with_its_old_size_and_mtime_is_hashed_again(tmp_path):
    """Other bytes of the same size with the old mtime set back (as cp -p, touch -r or a build
    under SOURCE_DATE_EPOCH leave them) are another input: its digest is the new bytes'."""
    import os

    wheel = tmp_path / "torch_musa-2.0-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"first build")
    cache = DownloadCache(tmp_path / "cache", {}, show_progress=False)
    assert cache.fetch(str(wheel)).sha256 == hashlib.sha256(b"first build").hexdigest()
    before = wheel.stat()
    wheel.write_bytes(b"other build")
    os.utime(wheel, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (wheel.stat().st_size, wheel.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert cache.known_digest(str(wheel)) == hashlib.sha256(b"other build").hexdigest()
    assert cache.fetch(f"file://{wheel}").sha256 == hashlib.sha256(b"other build").hexdigest()


def test_a_settled_file_rewritten_with_its_old_size_and_mtime_is_told_by_its_ctime(tmp_path, settled, monkeypatch):
    """A digest kept with the file's identity: the ctime, which utime cannot set back, tells the
    rewrite; the file is read again once, then no more."""
    import os
    import time

    import torchbake.inputs.downloads as downloads

    wheel = tmp_path / "t.whl"
    wheel.write_bytes(b"first build")
    cache = DownloadCache(tmp_path / "cache", {}, show_progress=False)
    assert cache.known_digest(str(wheel)) == hashlib.sha256(b"first build").hexdigest()
    reads = []
    real = downloads.file_sha256
    monkeypatch.setattr(downloads, "file_sha256", lambda p: reads.append(p) or real(p))
    assert cache.known_digest(str(wheel)) == hashlib.sha256(b"first build").hexdigest() and reads == []
    time.sleep(0.05)  # past the kernel's clock tick (the ctime's granularity)
    before = wheel.stat()
    wheel.write_bytes(b"other build")
    os.utime(wheel, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert cache.known_digest(str(wheel)) == hashlib.sha256(b"other build").hexdigest() and len(reads) == 1
    assert cache.known_digest(str(wheel)) == hashlib.sha256(b"other build").hexdigest() and len(reads) == 1


def test_fragment_and_checksum_table():
    assert split_fragment("https://h/x.whl#sha256=" + "a" * 64) == ("https://h/x.whl", "a" * 64)
    assert expected_digest("https://h/x.whl", {"x.whl": "b" * 64}) == "b" * 64
    assert expected_digest("https://h/x.whl", {"https://h/x.whl": "c" * 64}) == "c" * 64


@pytest.mark.parametrize(("url", "clean", "user_password"), [
    ("https://u:p%40ss@Host.example:8443/a/b.whl?x=1", "https://Host.example:8443/a/b.whl?x=1", "u:p@ss"),
    ("https://TOKEN@[::1]:9/x.whl", "https://[::1]:9/x.whl", "TOKEN:"),
    ("http://u:pw9@host:notaport/x.whl", "http://host:notaport/x.whl", "u:pw9"),  # a bad port fails later, as any URL's
])
def test_credentials_leave_the_url_for_the_authorization_header(url, clean, user_password):
    import base64

    from torchbake.core.redaction import redact, split_credentials
    without, header = split_credentials(url)
    assert without == clean
    assert base64.b64decode(header.removeprefix("Basic ")).decode() == user_password
    secret = url.split("://", 1)[1].split("@", 1)[0].split(":")[-1]  # the password, or a token given as the user
    assert redact(f"fetching {url}") == f"fetching {url.replace(secret, '***', 1)}"


def test_the_disk_check_asks_a_urls_size_with_its_credentials_in_a_header_never_in_the_url():
    """The disk-space preflight's HEAD request sends a URL's user part as the download does (an
    Authorization header): urllib given ``user:password@host`` takes the password for a port and
    ends the build with a traceback naming it."""
    import base64
    import http.server

    from tests.support import serving
    from torchbake.building.diskspace import _remote_size

    asked: list[tuple[str, str]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):  # noqa: N802 - http.server's name
            asked.append((self.path, self.headers.get("Authorization", "")))
            self.send_response(200)
            self.send_header("Content-Length", "12345")
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with serving(httpd):
        size = _remote_size(f"http://alice:S3cret%40PW@127.0.0.1:{httpd.server_address[1]}/t.whl", timeout=10)
    assert size == 12345
    assert asked == [("/t.whl", "Basic " + base64.b64encode(b"alice:S3cret@PW").decode())]
