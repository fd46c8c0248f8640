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

    def page() -> bytes:  # what the index holds when asked (a test may publish a release meanwhile)
        return "".join(f'<a href="../../files/{n}#sha256={hashlib.sha256(d).hexdigest()}"{" data-yanked" if "2.0" in n else ""}>'
                       f"{n}</a>\n" for n, d in files.items()).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802
            body = page() if self.path == "/simple/torch-ext/" else files.get(self.path.rsplit("/", 1)[-1])
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


def test_a_dev_images_sdists_are_locked_and_a_build_then_takes_exactly_those_files(index, tmp_path):
    """`invoke lock` of a dev build: each requirement-style extension's sdist with its URL and
    sha256 (PEP 751, packaging's model); the plan follows it (no index asked: a newer release on
    the index changes nothing), --locked refuses a lock made for other requirements, and another
    file behind the locked URL is a lock mismatch, not a build."""
    import tomllib

    from tests.conftest import run_invoke
    from torchbake.variants import dev

    url, files = index
    config = tmp_path / "torchbake.toml"
    private = url.replace("http://", "http://builder:sdist-canary-2718@")  # an index with credentials
    config.write_text(f'[image]\nbase = "team/dev-base:1"\n[wheels]\nindex_url = "{private}"\n'
                      f'[dev]\nextensions = ["torch-ext>=1.0"]\n[build]\nlocks = "{tmp_path / "locks"}"\n'
                      f'[paths]\ncache_dir = "{tmp_path / "cache"}"\n')
    env = {"PIP_CONFIG_FILE": "/dev/null", "PIP_FIND_LINKS": ""}
    made = run_invoke("lock", "--config", str(config), "--name", "team/dev", "--tag", "1", env=env, cwd=tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr
    (path,) = (tmp_path / "locks").glob("pylock.*.toml")
    assert "+torch-ext 1.1" in made.stdout and f"Locked {path}: 1 source distribution, new" in made.stdout, made.stdout
    locked = tomllib.loads(path.read_text())
    (package,) = locked["packages"]
    assert package["version"] == "1.1" and package["sdist"]["url"].endswith("/files/torch_ext-1.1.tar.gz")
    assert package["sdist"]["hashes"]["sha256"] == hashlib.sha256(files["torch_ext-1.1.tar.gz"]).hexdigest()
    assert locked["tool"]["torchbake"] == {"image": "team/dev:1", "requirements": ["torch-ext>=1.0"]}
    assert "sdist-canary-2718" not in path.read_text() + made.stdout + made.stderr  # the index's password: nowhere

    from torchbake.tasks.cli import resolve_config  # the plan as the build makes it

    resolved = resolve_config([str(config)], {"image.name": "team/dev", "image.tag": "1"}, variant=None)
    plan = dev.plan(resolved.settings())
    assert plan.sdist_lock is not None and "locked by" in plan.sdist_lock_state
    files["torch_ext-1.2.tar.gz"] = b"a newer release"  # on the index now: the lock holds
    cache = DownloadCache(tmp_path / "cache", {}, show_progress=False)
    assert plan.sdist("torch-ext>=1.0", cache).path.read_bytes() == files["torch_ext-1.1.tar.gz"]
    files["torch_ext-1.1.tar.gz"] = b"other bytes under the locked name"
    with pytest.raises(DownloadError, match="lock mismatch"):
        plan.sdist("torch-ext>=1.0", DownloadCache(tmp_path / "cache2", {}, show_progress=False))

    again = run_invoke("lock", "--config", str(config), "--name", "team/dev", "--tag", "1", env=env, cwd=tmp_path)
    assert again.returncode == 0 and "unchanged" in again.stdout and tomllib.loads(path.read_text()) == locked  # kept
    upgraded = run_invoke("lock", "--config", str(config), "--name", "team/dev", "--tag", "1", "--upgrade", env=env,
                          cwd=tmp_path)
    assert upgraded.returncode == 0 and "torch-ext 1.1 → 1.2" in upgraded.stdout, upgraded.stdout + upgraded.stderr
    # a matrix's dev cells too: `invoke lock --matrix` (what the nightly's --locked then holds)
    matrix = tmp_path / "nightly.toml"
    matrix.write_text(f'[matrix]\nprofiles = ["{config}"]\npythons = ["3.11"]\nvariants = ["dev"]\nname = "team/nightly"\n'
                      'tag = "{variant}"\n')
    cells = run_invoke("lock", "--matrix", "--config", str(matrix), env=env, cwd=tmp_path)
    assert cells.returncode == 0, cells.stdout + cells.stderr
    (cell_lock,) = (tmp_path / "locks").glob("pylock.team-nightly-dev-*.toml")
    assert [p["name"] for p in tomllib.loads(cell_lock.read_text())["packages"]] == ["torch-ext"]
    config.write_text(config.read_text().replace('"torch-ext>=1.0"', '"torch-ext>=1.0", "other-ext"'))
    refused = run_invoke("build", "--config", str(config), "--name", "team/dev", "--tag", "1", "--locked", "--dry-run",
                         env=env, cwd=tmp_path)
    assert refused.returncode == 2 and "was made for torch-ext>=1.0, not torch-ext>=1.0, other-ext" in refused.stdout + refused.stderr
    # another image whose lock's file name is this one's (case and punctuation fold): neither overwritten nor followed
    text = path.read_text()
    other = run_invoke("lock", "--config", str(config), "--name", "team/dev", "--tag", "1.", env=env, cwd=tmp_path)
    assert other.returncode == 2, other.stdout + other.stderr
    assert f"{path} is the lock of team/dev:1; team/dev:1.'s lock would take its place" in " ".join(other.stderr.split())
    assert path.read_text() == text
    followed = run_invoke("build", "--config", str(config), "--name", "team/dev", "--tag", "1.", "--locked", "--dry-run",
                          env=env, cwd=tmp_path)
    assert followed.returncode == 2 and f"its lock {path} is the lock of team/dev:1 (its file name is this image's too)" \
        in " ".join((followed.stdout + followed.stderr).split()), followed.stdout + followed.stderr
    assert "Traceback" not in refused.stdout + refused.stderr
