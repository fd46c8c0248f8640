"""The commands as a user types them, on the real engine: derived names, FROM images made on
demand with debootstrap (other Pythons on other Debian releases), run-container without IMAGE,
build-all with no flags, and a bootstrap whose mirror fails half-way."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import threading
import urllib.request
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_invoke

from .helpers import docker, engine_state

pytestmark = pytest.mark.usefixtures("default_names_lock")  # see tests/e2e/conftest.py

BOOTSTRAP_LABEL = "torchbake.bootstrap.suite"


def image_exists(reference: str) -> bool:
    return docker("image", "inspect", reference, check=False).returncode == 0


@contextmanager
def set_aside(reference: str):
    """An engine without ``reference`` for the block, whoever made it: an image already there is
    kept under a tag of the test's own meanwhile and given its name back afterwards (the image the
    test made instead goes), so that the test shows a bootstrap and the user's image is untouched."""
    import uuid

    aside = f"torchbake-test/aside:{uuid.uuid4().hex[:12]}"
    existed = image_exists(reference)
    if existed:
        docker("tag", reference, aside)
        docker("image", "rm", reference)  # the tag only: the image keeps the aside tag
    try:
        yield
    finally:
        if image_exists(reference):
            docker("image", "rm", "--force", reference, check=False)
        if existed:
            docker("tag", aside, reference)
            docker("image", "rm", aside)


@pytest.fixture(scope="module")
def other_python_config(dev_config, tmp_path_factory):
    """The fixture sources (as the dev tests use), with base requirements any Python resolves
    (torch 2.13.0 has CPU wheels only for 3.11 here)."""
    config, _ = dev_config
    extra = tmp_path_factory.mktemp("other-python") / "requirements.toml"
    extra.write_text('[base]\nrequirements = ["setuptools", "wheel"]\n')
    return config, extra


@pytest.mark.parametrize(("suite", "python"), [("trixie", "3.13"), ("bullseye", "3.9")])
def test_build_base_makes_its_debian_release_on_demand(suite, python, other_python_config, tb_env, run_id):
    config, extra = other_python_config
    os_image = f"debian:{suite}"
    name = f"torchbake-test/base-{suite}:{run_id}"
    args = ("build-base", "--config", str(config), "--config", str(extra), "--sys", os_image, "--python", python,
            "--name", name.split(":")[0], "--tag", run_id)
    with set_aside(os_image):
        try:
            first = run_invoke(*args, env=tb_env)
            output = first.stdout + first.stderr
            assert first.returncode == 0, output[-5000:]
            assert f"Making {os_image} with debootstrap ({suite})" in output
            assert f"+ /usr/sbin/debootstrap --variant=minbase {suite}" in output  # progress: debootstrap's own lines
            assert "I: Base system installed successfully." in output
            made = json.loads(docker("image", "inspect", os_image).stdout)[0]["Config"]["Labels"]
            assert made[BOOTSTRAP_LABEL] == suite and made["torchbake.bootstrap.mirror"] == "debootstrap's default"
            assert re.fullmatch(r"\d{4}-\d\d-\d\d", made["torchbake.bootstrap.date"])
            assert re.search(rf"python version\s*│\s*pass\s*│\s*{re.escape(python)}\.\d+", output), output[-3000:]
            inside = docker("run", "--rm", name, "python", "-c", "import sys; print('%d.%d' % sys.version_info[:2])").stdout
            assert inside.strip() == python
            assert docker("image", "inspect", "--format", '{{index .Config.Labels "torchbake.python"}}', name).stdout.strip() == python

            made_id = docker("image", "inspect", "--format", "{{.Id}}", os_image).stdout
            again = run_invoke(*args, env=tb_env)
            assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
            assert "debootstrap" not in again.stdout + again.stderr  # made once
            assert docker("image", "inspect", "--format", "{{.Id}}", os_image).stdout == made_id
        finally:
            docker("image", "rm", "--force", name, check=False)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A copy of the repository as a new user has it (default configuration), and a log folder of
    its own so that "the most recent build" is this test's."""
    folder = tmp_path_factory.mktemp("scratch") / "torchbake"
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    for relative in tracked:
        source = ROOT / relative
        if source.is_file():
            (folder / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, folder / relative)
    return folder


def as_typed(scratch: Path, tb_env: dict, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**tb_env, "TORCHBAKE_PATHS_LOG_DIR": str(scratch / ".logs")}
    return run_invoke(*args, env=env, cwd=scratch, root=scratch)


DEFAULT_RELEASE = "torchbake/pytorch-cpu:2.13.0-py3.11"


def test_build_base_dry_run_names_the_image_it_would_make(scratch, tb_env):
    result = as_typed(scratch, tb_env, "build-base", "--python", "3.10", "--dry-run")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "Plan for torchbake/pytorch-cpu:base-py3.10 (base, profile cpu)"
    assert any(re.fullmatch(r"  base image\s+ubuntu:22\.04 \(if not on the engine: pulled, or else made with"
                            r" debootstrap \(jammy, default mirror\)\)", line) for line in lines)
    assert "--tag '<candidate tag>'" in result.stdout and "--build-arg PYTHON_VERSION=3.10" in result.stdout
    assert "--label org.opencontainers.image.version=base-py3.10" in result.stdout


def test_build_release_then_run_container_as_typed(scratch, tb_env, tmp_path):
    """`invoke build --release` as on a new user's machine, whose engine has neither the default
    image nor its FROM image (the user's own under those names are set aside meanwhile and given
    back): debian:bookworm is made with debootstrap, the image built and verified; `run-container`
    without IMAGE then runs it. A cache of the test's own holds no record of earlier builds, so
    nothing can be re-tagged instead of built."""
    env = {**tb_env, "TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path / "cache")}
    with set_aside(DEFAULT_RELEASE), set_aside("debian:bookworm"):
        built = as_typed(scratch, env, "build", "--release")
        output = built.stdout + built.stderr
        assert built.returncode == 0, output[-5000:]
        assert "Making debian:bookworm with debootstrap (bookworm)" in output, output[-5000:]
        assert json.loads(docker("image", "inspect", "debian:bookworm").stdout)[0]["Config"]["Labels"][BOOTSTRAP_LABEL] == "bookworm"
        assert f"Built {DEFAULT_RELEASE}" in output
        assert re.search(r"torch version\s*│\s*pass\s*│\s*2\.13\.0\+cpu", output), output[-3000:]
        assert docker("image", "inspect", "--format", "{{index .Config.Labels \"org.opencontainers.image.base.name\"}}",
                      DEFAULT_RELEASE).stdout.strip() == "debian:bookworm"

        ran = as_typed(scratch, env, "run-container", "--rm", "--command",
                       'python -c "import torch; print(torch.__version__)"')
        assert ran.returncode == 0, ran.stderr[-3000:]
        assert ran.stdout.strip() == "2.13.0+cpu"
        assert f"no IMAGE given; using {DEFAULT_RELEASE}, the most recent successful build on this host" in ran.stderr


def test_a_missing_from_image_is_pulled_where_a_registry_answers(registry, base_image, tb_env, run_id, tiny_profile):
    """A FROM image a registry has is pulled, not bootstrapped (the build then runs as usual)."""
    remote = f"{registry}/team/os:{run_id}"
    docker("tag", base_image, remote)
    docker("push", remote)
    docker("image", "rm", remote)
    name = f"torchbake-test/pulled:{run_id}"
    try:
        result = run_invoke("build", "--config", str(tiny_profile), "--base-img", remote, "--name", name.split(":")[0],
                            "--tag", run_id, env=tb_env)
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-3000:]
        assert f"{remote} (--base-img) is not on this engine; trying `docker pull {remote}`" in output
        assert "debootstrap" not in output
        assert image_exists(remote) and f"Built {name}" in output
    finally:
        docker("image", "rm", "--force", name, remote, check=False)


NIGHTLY_CELLS = [f"musa-{variant}-py{py}" for py in ("38", "39", "310") for variant in ("base", "dev", "release")]
VENDOR_VALUES = ("toolkits.musa_toolkits_url", "toolkits.mudnn_url", "toolkits.mccl_url", "wheels.torch",
                 "wheels.extension")


def test_build_all_plan_lists_every_cell_and_every_missing_value(scratch, tb_env):
    names = ("torchbake/torch-musa", "torchbake/pytorch-cpu", "ubuntu", "debian")  # the nightly's names, its FROM images
    before = engine_state(names)
    result = as_typed(scratch, tb_env, "build-all", "--plan")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line for line in result.stdout.splitlines() if re.match(r"│ \d ", line)]
    assert [row.split("│")[2].strip() for row in rows] == NIGHTLY_CELLS
    flat = re.sub(r"\s*│\s*", " ", result.stdout)
    for key in VENDOR_VALUES:
        assert key in flat
    assert "toolkits.mccl_url: [toolkits] mccl_url / TORCHBAKE_TOOLKITS_MCCL_URL" in flat  # plain text, not markup
    assert result.stdout.count("needs values") == 6  # every dev and release cell
    assert "6 of 9 cells need values that are not set" in result.stdout
    assert engine_state(names) == before  # a plan makes nothing, not even a missing FROM image

    build = as_typed(scratch, tb_env, "build-all")
    assert build.returncode == 2
    for key in VENDOR_VALUES:  # every missing value at once, with where to set it
        assert re.search(rf"^  {re.escape(key)} \(cells musa-", build.stderr, re.M), build.stderr
    assert "+ /usr/bin/docker build" not in build.stdout
    assert engine_state(names) == before


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


def test_a_bootstrap_that_fails_half_way_leaves_nothing(tb_env, cache_dir, tmp_path):
    reference = "debian:stable"
    with set_aside(reference):
        before = engine_state(["debian", "torchbake/pytorch-cpu"])
        # debootstrap's wget retries a dropped connection 20 times by default, and debootstrap tries
        # every package of the release before it gives up: one try each, or minutes of retries
        wgetrc = tmp_path / "wgetrc"
        wgetrc.write_text("tries = 1\n")
        with mirror_that_drops_packages() as mirror:
            result = run_invoke("build", "--release", "--base-img", reference, "--python", "3.11",
                                env={**tb_env, "TORCHBAKE_BOOTSTRAP_MIRROR": mirror, "WGETRC": str(wgetrc)})
        output = result.stdout + result.stderr
        assert result.returncode == 7, output[-3000:]
        assert "I: Retrieving Packages" in output  # it got half-way
        assert f"debootstrap could not make stable from {mirror}; nothing was imported" in output
        assert "Traceback" not in output
        assert not image_exists(reference) and engine_state(["debian", "torchbake/pytorch-cpu"]) == before
        assert not list((cache_dir / "bootstrap").glob("bootstrap-*"))  # no temporary root file system
        assert str(cache_dir) not in Path("/proc/self/mounts").read_text()
