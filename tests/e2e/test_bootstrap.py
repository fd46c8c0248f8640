"""FROM images made on demand with debootstrap, on the real engine: another Python on another Debian
release (build --release --base-img debian:trixie, made once; made again from the same mirror state it is the
same image id, byte for byte, from the packages the first one downloaded), and a bootstrap whose
mirror fails half-way (nothing imported, nothing left). An image of the user's under those names
is set aside for the test and given back."""

from __future__ import annotations

import json
import re
import socket
import threading
import urllib.request
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.conftest import run_invoke

from .helpers import BOOTSTRAP_LABEL, docker, engine_state, image_exists, set_aside


def test_a_build_makes_its_debian_release_on_demand(tiny_profile, tb_env, run_id):
    """One release beside the default bookworm (a second one, bullseye's Python 3.9, cost the suite
    three minutes and proved nothing more: the releases are data, torchbake.configuration.os_releases).
    A release image on the stand-in torch: the FROM image is made the same way for every variant
    (variants.common.os_preflight), and a base image's compilers on trixie cost two minutes more."""
    suite, python = "trixie", "3.13"
    os_image = f"debian:{suite}"
    name = f"torchbake-test/release-{suite}:{run_id}"
    args = ("build", "--config", str(tiny_profile), "--base-img", os_image, "--python", python,
            "--name", name.split(":")[0], "--tag", run_id)
    with set_aside(os_image):
        try:
            first = run_invoke(*args, env=tb_env)
            output = first.stdout + first.stderr
            assert first.returncode == 0, output[-5000:]
            assert f"Making {os_image} with debootstrap ({suite})" in output
            # progress: debootstrap's own lines, under the one time the image holds
            packages = Path(tb_env["TORCHBAKE_PATHS_CACHE_DIR"]).resolve() / "bootstrap" / "debs" / suite
            assert (f"+ SOURCE_DATE_EPOCH=0 /usr/sbin/debootstrap --variant=minbase --cache-dir={packages} --keep-debootstrap-dir {suite}"
                    in output)
            assert "I: Base system installed successfully." in output
            made = json.loads(docker("image", "inspect", os_image).stdout)[0]["Config"]["Labels"]
            assert made[BOOTSTRAP_LABEL] == suite and made["torchbake.bootstrap.mirror"] == "debootstrap's default"
            assert "torchbake.bootstrap.date" not in made  # no SOURCE_DATE_EPOCH: no moment of its making in it
            assert re.search(rf"python version\s*│\s*pass\s*│\s*{re.escape(python)}\.\d+", output), output[-3000:]
            inside = docker("run", "--rm", name, "python", "-c", "import sys; print('%d.%d' % sys.version_info[:2])").stdout
            assert inside.strip() == python
            assert docker("image", "inspect", "--format", '{{index .Config.Labels "torchbake.python"}}', name).stdout.strip() == python

            made_id = docker("image", "inspect", "--format", "{{.Id}}", os_image).stdout
            again = run_invoke(*args, env=tb_env)
            assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
            assert "debootstrap" not in again.stdout + again.stderr  # made once
            assert docker("image", "inspect", "--format", "{{.Id}}", os_image).stdout == made_id

            # made again from the same mirror state: the same image, byte for byte
            remade = run_invoke("bootstrap-os", "--suite", suite, "--name", f"{name}-os", env=tb_env)
            assert remade.returncode == 0, (remade.stdout + remade.stderr)[-3000:]
            assert docker("image", "inspect", "--format", "{{.Id}}", f"{name}-os").stdout == made_id
            # the packages came from the first bootstrap's downloads: only the mirror's index was fetched
            fetched = re.findall(r"^I: Retrieving (\S+)", remade.stdout, re.M)
            assert fetched and set(fetched) <= {"InRelease", "Release", "Release.gpg", "Packages"}, fetched
        finally:
            docker("image", "rm", "--force", name, f"{name}-os", check=False)




@contextmanager
def mirror_that_drops_packages():
    """A package mirror that answers index requests from debootstrap's own default mirror and
    drops the connection on every .deb: debootstrap fails half-way, after it started writing the
    root file system."""
    upstream = re.search(r'^DEF_MIRROR="([^"]+)"', Path("/usr/sbin/debootstrap").read_text(), re.M).group(1)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path.endswith(".deb"):
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            try:
                with urllib.request.urlopen(upstream + self.path, timeout=60) as answer:
                    body = answer.read()
            except OSError:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_bootstrap_that_fails_half_way_leaves_nothing(tb_env, cache_dir, tmp_path, run_id):
    reference, name = "debian:stable", f"torchbake-test/half-way-{run_id}"
    with set_aside(reference):
        before = engine_state([reference, name])
        # debootstrap's wget retries a dropped connection 20 times by default, and debootstrap tries
        # every package of the release before it gives up: one try each, or minutes of retries
        wgetrc = tmp_path / "wgetrc"
        wgetrc.write_text("tries = 1\n")
        with mirror_that_drops_packages() as mirror:
            result = run_invoke("build", "--release", "--base-img", reference, "--python", "3.11", "--name", name,
                                env={**tb_env, "TORCHBAKE_BOOTSTRAP_MIRROR": mirror, "WGETRC": str(wgetrc)})
        output = result.stdout + result.stderr
        assert result.returncode == 7, output[-3000:]
        assert "I: Retrieving Packages" in output  # it got half-way
        assert f"debootstrap could not make stable from {mirror}; nothing was imported" in output
        assert "Traceback" not in output
        assert not image_exists(reference) and engine_state([reference, name]) == before
        assert not list((cache_dir / "bootstrap").glob("bootstrap-*"))  # no temporary root file system
        assert str(cache_dir) not in Path("/proc/self/mounts").read_text()
