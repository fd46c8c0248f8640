"""Downloads under faults, against real servers on 127.0.0.1: dropped connections, 503s, bodies
cut short (resumed with Range and If-Range, or restarted where the server cannot or the file
changed meanwhile), 404s (never retried), stalls, bounded tries and time; servers without
validators; pinned inputs; TLS through a private CA (--ca-bundle)."""

from __future__ import annotations

import hashlib
import http.server
import json
import subprocess
import threading
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support import flaky_server, make_test_ca, serving
from torchbake.configuration.network import DownloadPolicy
from torchbake.core.errors import ConfigurationError, DiskSpaceError, DownloadError
from torchbake.core.output import human_size
from torchbake.inputs.downloads import DownloadCache, require_pinned, trust_bundle

PAYLOAD = bytes(range(256)) * 8192  # 2 MiB
DIGEST = hashlib.sha256(PAYLOAD).hexdigest()
FAST = DownloadPolicy(retries=4, retry_backoff=0.05, retry_max_time=30, timeout=1)


def cache_files(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*") if p.is_file() and p.suffix != ".lock")


def fetch(tmp_path, url, policy=FAST, **kwargs):
    cache = DownloadCache(tmp_path / "cache", {}, show_progress=False, policy=policy)
    return cache.fetch(f"{url}/kit.tar.gz#sha256={DIGEST}", key="toolkits.musa_toolkits_url", **kwargs)


def test_dropped_connections_and_503s_are_retried(tmp_path, capsys):
    with flaky_server(PAYLOAD, ["drop", "drop", "503"]) as (url, seen):
        artifact = fetch(tmp_path, url)
    assert artifact.sha256 == DIGEST and artifact.path.read_bytes() == PAYLOAD
    assert len(seen) == 4
    out = capsys.readouterr().out
    assert "failed (HTTP 503 Service Unavailable); try 4 of 5" in out
    assert cache_files(tmp_path / "cache") == ["kit.tar.gz", "kit.tar.gz.sha256", "kit.tar.gz.validators"]


NEW = bytes(reversed(PAYLOAD))  # what the server holds once the file changed: another file, as long


@contextmanager
def file_server(versions: list[bytes], script: list[str], *, validators=("etag", "last_modified"), if_range=True,
                part_validators=True):
    """A file server on 127.0.0.1 (as nginx is) serving ``versions[0]`` at any path, then the next
    version each time the file changes: a strong ETag and a Last-Modified for each version (those
    ``validators`` name), Range answered with 206, If-Range honoured (``if_range=False``: ignored,
    the range of what it holds now is sent; ``part_validators=False``: a 206 carries none). ``script``, one entry per request: "truncate" (half the
    body, then close), "truncate+change" (the same, and the file changes), "from-0" (a 206 from
    byte 0 whatever range was asked); "ok" after it. Yields (url, seen): each request's (Range,
    If-Range)."""
    seen: list[tuple[str, str]] = []
    lock, state = threading.Lock(), {"version": 0}

    def described(version: int) -> dict[str, str]:
        headers = {"etag": f'"{hashlib.sha256(versions[version]).hexdigest()[:16]}"',
                   "last_modified": f"Mon, 01 Jan 2024 00:00:{version:02d} GMT"}
        return {name: value for name, value in headers.items() if name in validators}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802
            with lock:
                action = script.pop(0) if script else "ok"
                seen.append((self.headers.get("Range", ""), self.headers.get("If-Range", "")))
                body, now = versions[state["version"]], described(state["version"])
                if action == "truncate+change":
                    state["version"] += 1
            requested, condition = self.headers.get("Range", ""), self.headers.get("If-Range", "")
            start = 0
            if requested.startswith("bytes=") and (not condition or not if_range or condition in now.values()):
                start = 0 if action == "from-0" else int(requested[len("bytes="):].split("-")[0])
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            else:
                self.send_response(200)
            for name, value in now.items() if part_validators or not start else ():
                self.send_header({"etag": "ETag", "last_modified": "Last-Modified"}[name], value)
            self.send_header("Content-Length", str(len(body) - start))
            self.end_headers()
            if action.startswith("truncate"):
                self.wfile.write(body[start:start + (len(body) - start) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body[start:])

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with serving(httpd):
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen


def fetch_unpinned(tmp_path, url):
    return DownloadCache(tmp_path / "cache", {}, show_progress=False, policy=FAST).fetch(f"{url}/kit.tar.gz")


def kept_validators(artifact) -> dict:
    return json.loads(artifact.path.with_name(artifact.name + ".validators").read_text())


@pytest.mark.parametrize(("validators", "sent"), [(("etag", "last_modified"), "etag"),
                                                  (("last_modified",), "last_modified")])
def test_a_body_cut_short_is_resumed_with_a_range_request_on_the_file_it_began(tmp_path, validators, sent):
    """The resume is conditional: If-Range carries the strong ETag, else the Last-Modified date."""
    with file_server([PAYLOAD], ["truncate"], validators=validators) as (url, seen):
        artifact = fetch_unpinned(tmp_path, url)
    assert artifact.path.read_bytes() == PAYLOAD
    began = {"etag": f'"{DIGEST[:16]}"', "last_modified": "Mon, 01 Jan 2024 00:00:00 GMT"}[sent]
    assert seen == [("", ""), (f"bytes={len(PAYLOAD) // 2}-", began)]


@pytest.mark.parametrize("validators", [("etag", "last_modified"), ("last_modified",)])
def test_a_file_that_changes_between_a_cut_and_its_resume_comes_whole_never_spliced(tmp_path, validators):
    """The server's file changes while the download is cut: the resume's If-Range no longer
    matches, the server sends the new file whole (200), and the half kept of the old one is
    dropped. The cache holds the new file, whole, under the new file's validators, and a later
    run finds it as it is (no splice of both halves that no digest could ever match)."""
    with file_server([PAYLOAD, NEW], ["truncate+change"], validators=validators) as (url, seen):
        artifact = fetch_unpinned(tmp_path, url)
        assert artifact.sha256 == hashlib.sha256(NEW).hexdigest() and artifact.path.read_bytes() == NEW
        assert len(seen) == 2 and seen[1][0] == f"bytes={len(PAYLOAD) // 2}-" and seen[1][1]
        new_validators = {"etag": f'"{hashlib.sha256(NEW).hexdigest()[:16]}"',
                          "last_modified": "Mon, 01 Jan 2024 00:00:01 GMT"}
        assert kept_validators(artifact) == {**{name: "" for name in new_validators},
                                             **{name: new_validators[name] for name in validators}, "length": len(NEW)}
        pinned = DownloadCache(tmp_path / "cache", {}, show_progress=False, policy=FAST)
        assert pinned.fetch(f"{url}/kit.tar.gz#sha256={hashlib.sha256(NEW).hexdigest()}").path.read_bytes() == NEW
    assert cache_files(tmp_path / "cache") == ["kit.tar.gz", "kit.tar.gz.sha256", "kit.tar.gz.validators"]


def test_a_server_that_ignores_if_range_is_caught_by_the_etag_of_its_part(tmp_path):
    """A server that answers the resume with 206 of the file it holds now, changed: the part's
    ETag is not the one the download began with, so the download starts over."""
    with file_server([PAYLOAD, NEW], ["truncate+change"], if_range=False) as (url, seen):
        artifact = fetch_unpinned(tmp_path, url)
    assert artifact.path.read_bytes() == NEW
    assert [asked for asked, _ in seen] == ["", f"bytes={len(PAYLOAD) // 2}-", ""]


def test_a_part_without_the_validator_the_resume_named_makes_the_download_start_over(tmp_path):
    """A server that ignores If-Range and sends its part (of the changed file) with no ETag: nothing
    says it is the file begun, so the download starts over rather than splice."""
    with file_server([PAYLOAD, NEW], ["truncate+change"], if_range=False, part_validators=False) as (url, seen):
        artifact = fetch_unpinned(tmp_path, url)
    assert artifact.path.read_bytes() == NEW
    assert [asked for asked, _ in seen] == ["", f"bytes={len(PAYLOAD) // 2}-", ""]


def test_a_part_that_does_not_start_where_asked_makes_the_download_start_over(tmp_path, capsys):
    with file_server([PAYLOAD], ["truncate", "from-0"]) as (url, seen):
        artifact = fetch(tmp_path, url)
    assert artifact.sha256 == DIGEST and artifact.path.read_bytes() == PAYLOAD
    assert [asked for asked, _ in seen] == ["", f"bytes={len(PAYLOAD) // 2}-", ""]
    assert f"is not the rest of the file from byte {len(PAYLOAD) // 2} (starting over)" in capsys.readouterr().out


def test_a_body_cut_short_by_a_server_without_validators_starts_over(tmp_path):
    """Nothing tells that what the server holds now is the file begun: no Range is asked."""
    with flaky_server(PAYLOAD, ["truncate"]) as (url, seen):
        artifact = fetch(tmp_path, url)
    assert artifact.path.read_bytes() == PAYLOAD
    assert seen == ["", ""]


def test_a_server_without_validators_is_asked_by_content(tmp_path, capsys, monkeypatch):
    """A URL whose server gives no ETag or Last-Modified: each run fetches it again and compares
    the content; the same is said as the same, not as a change."""
    from torchbake.inputs import downloads

    def next_run() -> None:
        downloads._UNCHANGED.clear()
        monkeypatch.setattr(downloads, "_STARTED", time.time() + 1)

    with file_server([PAYLOAD, NEW], ["ok", "ok", "truncate+change"], validators=()) as (url, seen):
        first = fetch_unpinned(tmp_path, url)
        assert first.sha256 == DIGEST
        capsys.readouterr()
        next_run()
        assert fetch_unpinned(tmp_path, url).sha256 == DIGEST
        out = capsys.readouterr().out
        assert f"{url}/kit.tar.gz: the server gives no ETag or Last-Modified: fetched again, same content." in out
        assert "changed" not in out
        next_run()
        second = fetch_unpinned(tmp_path, url)  # cut and changed meanwhile: no resume, the new file whole
        assert second.path.read_bytes() == NEW
        assert f"{url}/kit.tar.gz changed: sha256 {DIGEST} → {second.sha256}." in capsys.readouterr().out
    assert [asked for asked, _ in seen] == ["", "", "", ""]


def test_a_server_without_ranges_makes_the_download_start_over(tmp_path):
    with flaky_server(PAYLOAD, ["truncate"], ranges=False) as (url, seen):
        artifact = fetch(tmp_path, url)
    assert artifact.path.read_bytes() == PAYLOAD and len(seen) == 2


def test_a_stalled_server_times_out_and_is_tried_again(tmp_path):
    with flaky_server(PAYLOAD, ["stall"]) as (url, seen):
        assert fetch(tmp_path, url).sha256 == DIGEST
    assert len(seen) == 2


def test_404_is_final_and_named(tmp_path):
    with flaky_server(PAYLOAD, ["404"]) as (url, seen), pytest.raises(DownloadError) as error:
        fetch(tmp_path, url)
    assert len(seen) == 1
    assert str(error.value) == (f"Downloading {url}/kit.tar.gz (toolkits.musa_toolkits_url) failed: HTTP 404 Not Found"
                                " (not retried: a 4xx answer is final).")
    assert cache_files(tmp_path / "cache") == []


def test_tries_are_bounded_and_the_last_failure_is_named(tmp_path):
    policy = DownloadPolicy(retries=2, retry_backoff=0.05, retry_max_time=30, timeout=1)
    with flaky_server(PAYLOAD, ["503"] * 10) as (url, seen), pytest.raises(DownloadError) as error:
        fetch(tmp_path, url, policy)
    assert len(seen) == 3
    assert f"Downloading {url}/kit.tar.gz (toolkits.musa_toolkits_url) failed after 3 tries" in str(error.value)
    assert "the last: HTTP 503 Service Unavailable" in str(error.value)
    assert cache_files(tmp_path / "cache") == []  # no partial file left behind


def test_total_retry_time_is_bounded(tmp_path):
    policy = DownloadPolicy(retries=50, retry_backoff=0.4, retry_max_time=1, timeout=1)
    with flaky_server(PAYLOAD, ["503"] * 100) as (url, seen), pytest.raises(DownloadError, match="failed after 2 tries"):
        fetch(tmp_path, url, policy)
    assert len(seen) == 2  # 0.4 s, then 0.8 s more would pass the 1 s budget


def test_a_truncated_body_that_keeps_failing_leaves_no_partial_file(tmp_path):
    policy = DownloadPolicy(retries=1, retry_backoff=0.05, retry_max_time=30, timeout=1)
    with flaky_server(PAYLOAD, ["truncate"] * 5, ranges=False) as (url, _), pytest.raises(DownloadError) as error:
        fetch(tmp_path, url, policy)
    assert f"the body ended after {len(PAYLOAD) // 2} of {len(PAYLOAD)} bytes" in str(error.value)
    assert cache_files(tmp_path / "cache") == []


def test_require_hashes_names_every_unpinned_url():
    with pytest.raises(ConfigurationError) as error:
        require_pinned({"wheels.torch": "https://h.invalid/torch.whl", "wheels.extension": "torch_musa==1.0",
                        "toolkits.mudnn_url": "https://h.invalid/mudnn.tar.gz#sha256=" + "a" * 64,
                        "toolkits.mccl_url": "https://h.invalid/mccl.tar.gz", "toolkits.musa_toolkits_url": ""},
                       {"https://h.invalid/mccl.tar.gz": "b" * 64})
    assert str(error.value) == (
        "--require-hashes (downloads.require_hashes): these URLs have no sha256:\n"
        "  wheels.torch: https://h.invalid/torch.whl\n"
        "Append #sha256=<hex> to each URL or add it to [checksums] (sha256sum FILE prints it).")


@pytest.fixture(scope="module")
def test_ca(tmp_path_factory):
    return make_test_ca(tmp_path_factory.mktemp("ca"))


def test_https_through_a_private_ca_needs_the_bundle(tmp_path, test_ca):
    ca, cert, key = test_ca
    with flaky_server(PAYLOAD, [], tls=(cert, key)) as (url, seen):
        with pytest.raises(DownloadError) as error:
            fetch(tmp_path, url)
        assert "the server's certificate is not trusted" in str(error.value)
        assert "pass its CA with --ca-bundle FILE" in str(error.value)
        assert len(seen) == 0  # the handshake failed: nothing was asked, and nothing retried
        trusted = DownloadPolicy(retries=0, timeout=5, ca_bundle=str(ca))
        assert fetch(tmp_path, url, trusted).sha256 == DIGEST


def test_the_bundle_given_to_tools_keeps_the_system_cas(tmp_path, test_ca):
    ca, _, _ = test_ca
    bundle = trust_bundle(str(ca), tmp_path)
    text = bundle.read_text()
    assert text.endswith(ca.read_text())
    assert text.count("BEGIN CERTIFICATE") > 10  # the host's own CAs come first
    assert trust_bundle(str(ca), tmp_path) == bundle and trust_bundle("", tmp_path) is None


def test_a_full_disk_is_named_with_the_bytes_needed_and_leaves_nothing_partial(tmp_path):
    """A 1 MiB tmpfs as the cache folder and a 2 MiB download; then the same with room."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True)
    try:
        cache = DownloadCache(small / "cache", {}, show_progress=False, policy=FAST)
        location_of = f"/kit.tar.gz#sha256={DIGEST}"
        with flaky_server(PAYLOAD, []) as (url, _), pytest.raises(DiskSpaceError) as error:
            cache.fetch(url + location_of, key="toolkits.musa_toolkits_url")
        text = str(error.value)
        assert str(small / "cache" / "downloads") in text and f"needs {human_size(len(PAYLOAD))}" in text, text
        assert "invoke gc" in text and "Traceback" not in text
        assert cache_files(small / "cache") == []
        subprocess.run(["mount", "-o", "remount,size=8m", str(small)], check=True)
        with flaky_server(PAYLOAD, []) as (url, _):
            assert cache.fetch(url + location_of).path.read_bytes() == PAYLOAD
    finally:
        subprocess.run(["umount", "--lazy", str(small)], check=False)


def test_a_wheelhouse_that_fills_its_disk_is_named_and_keeps_no_wheel_cut_short(tmp_path):
    """pip downloading torch (~190 MB) into a 32 MiB tmpfs wheelhouse."""
    import os

    from torchbake.inputs import wheelhouse
    from torchbake.planning import config

    settings = config.resolve([], dict(os.environ), {}, variant="release").settings()
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(small)], check=True)
    try:
        with pytest.raises(DiskSpaceError) as error:
            wheelhouse.resolve(["torch==2.13.0"], small / "wheelhouse" / "cp311", "3.11", settings.wheels,
                               link_into=tmp_path / "context")
        assert str(small / "wheelhouse" / "cp311") in str(error.value) and "invoke gc" in str(error.value)
        assert [p.name for p in (small / "wheelhouse" / "cp311").glob("*.whl") if not zipfile.is_zipfile(p)] == []
    finally:
        subprocess.run(["umount", "--lazy", str(small)], check=False)
