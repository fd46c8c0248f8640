"""Extensions from source distributions: a requirement-style extension's sdist found on a PEP 503
index page (as pip reads one, yanked files left out) or in a find-links folder, the newest its
requirement allows, fetched and checked by the index's sha256; none: an error naming where it
looked. The real index is asked too (a real PyTorch C++ extension published as an sdist)."""

from __future__ import annotations

import hashlib
import http.server
import threading
from pathlib import Path

import pytest

from torchbake.core.errors import DownloadError
from torchbake.inputs import locks, sdists
from torchbake.inputs.downloads import DownloadCache


@pytest.fixture
def index(tmp_path):
    """A PEP 503 index on 127.0.0.1 with an extension's sdists (1.0, 1.1, a yanked 2.0) and a wheel."""
    files = {name: f"{name} contents".encode() for name in
             ("torch_ext-1.0.tar.gz", "torch_ext-1.1.tar.gz", "torch_ext-2.0.tar.gz", "torch_ext-1.1-py3-none-any.whl")}
    page = "".join(f'<a href="../../files/{n}#sha256={hashlib.sha256(d).hexdigest()}"{" data-yanked" if "2.0" in n else ""}>'
                   f"{n}</a>\n" for n, d in files.items()).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802
            body = page if self.path == "/simple/torch-ext/" else files.get(self.path.rsplit("/", 1)[-1])
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple", files
    server.shutdown()
    server.server_close()


def test_the_newest_sdist_the_requirement_allows_is_fetched_and_checked(index, tmp_path):
    url, files = index
    cache = DownloadCache(tmp_path / "cache", {}, show_progress=False)
    found = sdists.find("torch-ext", [url], [], cache.read_page)
    assert (found.name, found.version, found.file_name) == ("torch-ext", "1.1", "torch_ext-1.1.tar.gz")  # 2.0 is yanked
    assert found.url.endswith(f"/files/torch_ext-1.1.tar.gz#sha256={hashlib.sha256(files['torch_ext-1.1.tar.gz']).hexdigest()}")
    assert cache.fetch(found.url).path.read_bytes() == files["torch_ext-1.1.tar.gz"]
    assert sdists.find("torch_ext<1.1", [url], [], cache.read_page).version == "1.0"
    local = tmp_path / "links"
    local.mkdir()
    (local / "torch_ext-1.2.tar.gz").write_bytes(b"x")
    assert sdists.find("torch-ext", [url], [str(local)], cache.read_page).version == "1.2"  # find-links count too


def test_no_sdist_anywhere_is_an_error_naming_where_it_looked(index, tmp_path):
    url, _ = index
    cache = DownloadCache(tmp_path / "cache", {}, show_progress=False)
    with pytest.raises(DownloadError, match=rf"no source distribution of torch-ext>=3 on {url}, /nowhere"):
        sdists.find("torch-ext>=3", [url], ["/nowhere"], cache.read_page)
    with pytest.raises(DownloadError, match="no source distribution of other-ext"):
        sdists.find("other-ext", [url], [], cache.read_page)


def test_a_real_pytorch_extension_is_found_as_its_sdist_on_the_configured_index(tmp_path):
    """torch-scatter publishes an sdist (its wheels live elsewhere): the index pip is configured
    with serves it, with its sha256."""
    from types import SimpleNamespace

    indexes, links = locks.configured_indexes(SimpleNamespace(index_url="", extra_index_urls=[], find_links=[]))
    cache = DownloadCache(tmp_path / "cache", {}, show_progress=False)
    found = sdists.find("torch-scatter==2.1.2", indexes, links, cache.read_page)
    assert found.file_name == "torch_scatter-2.1.2.tar.gz" and "#sha256=" in found.url
    assert Path(found.url.split("#")[0]).name == "torch_scatter-2.1.2.tar.gz"


def test_an_sdist_is_unpacked_in_its_folder_or_not_at_all(tmp_path):
    """docker/common/unpack_sdist.py, as build_extras.sh runs it in the build: a member that would
    land outside the folder (.., an absolute path, a link out) refuses the whole archive."""
    import io
    import subprocess
    import sys
    import tarfile

    from tests.conftest import ROOT

    def archive(name: str, members: dict[str, bytes], link: tuple[str, str] | None = None) -> Path:
        path = tmp_path / name
        with tarfile.open(path, "w:gz") as made:
            for member, data in members.items():
                info = tarfile.TarInfo(member)
                info.size = len(data)
                made.addfile(info, io.BytesIO(data))
            if link:
                info = tarfile.TarInfo(link[0])
                info.type, info.linkname = tarfile.SYMTYPE, link[1]
                made.addfile(info)
        return path

    script = ROOT / "docker/common/unpack_sdist.py"
    good = archive("ext-1.0.tar.gz", {"ext-1.0/setup.py": b"x", "ext-1.0/csrc/a.c": b"y"}, ("ext-1.0/b.c", "csrc/a.c"))
    assert subprocess.run([sys.executable, script, good, tmp_path / "good"]).returncode == 0
    assert (tmp_path / "good" / "ext-1.0" / "csrc" / "a.c").read_bytes() == b"y"
    for name, members, link in (("up.tar.gz", {"../../escaped.txt": b"x"}, None),
                                ("abs.tar.gz", {str(tmp_path / "absolute.txt"): b"x"}, None),
                                ("link.tar.gz", {"ext-1.0/setup.py": b"x"}, ("ext-1.0/out", "../../../etc/passwd"))):
        refused = subprocess.run([sys.executable, script, archive(name, members, link), tmp_path / name.split(".")[0]],
                                 capture_output=True, text=True)
        assert refused.returncode == 1 and "it is not unpacked" in refused.stderr, (name, refused.stderr)
    assert not (tmp_path.parent / "escaped.txt").exists() and not (tmp_path / "absolute.txt").exists()
