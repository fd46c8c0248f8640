"""The commands as a user types them, on the real engine: derived names, `build --release` on an
engine without its FROM image (made with debootstrap), run-container without IMAGE, build-all
with no flags, a FROM image pulled from a registry. (Other Debian releases made on demand, and a
bootstrap that fails half-way: test_bootstrap.py.)"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_invoke

from .helpers import BOOTSTRAP_LABEL, docker, engine_state, image_exists, set_aside

pytestmark = pytest.mark.usefixtures("default_names_lock")  # see tests/e2e/conftest.py

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


def test_build_release_then_run_container_then_your_repository_as_typed(scratch, tb_env, tmp_path):
    """`invoke build --release` as on a new user's machine, whose engine has neither the default
    image nor its FROM image (the user's own under those names are set aside meanwhile and given
    back): debian:bookworm is made with debootstrap, the image built and verified; `run-container`
    without IMAGE then runs it. A cache of the test's own holds no record of earlier builds, so
    nothing can be re-tagged instead of built; built again, it is unchanged, and deciding so
    imports neither the engine's SDK nor rich (benchmarks/startup.py times it). Then, on that
    engine, the "your own repository" page as typed (:func:`follow_your_repository_page`)."""
    env = {**tb_env, "TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path / "cache")}
    with set_aside(DEFAULT_RELEASE), set_aside("debian:bookworm"), set_aside(PAGE_IMAGE):
        built = as_typed(scratch, env, "build", "--release")
        output = built.stdout + built.stderr
        assert built.returncode == 0, output[-5000:]
        assert "Making debian:bookworm with debootstrap (bookworm)" in output, output[-5000:]
        assert json.loads(docker("image", "inspect", "debian:bookworm").stdout)[0]["Config"]["Labels"][BOOTSTRAP_LABEL] == "bookworm"
        assert f"Built {DEFAULT_RELEASE}" in output
        assert re.search(r"torch version\s*│\s*pass\s*│\s*2\.13\.0\+cpu", output), output[-3000:]
        assert docker("image", "inspect", "--format", "{{index .Config.Labels \"org.opencontainers.image.base.name\"}}",
                      DEFAULT_RELEASE).stdout.strip() == "debian:bookworm"
        again = as_typed(scratch, {**env, "PYTHONPROFILEIMPORTTIME": "1"}, "build", "--release")
        assert again.returncode == 0 and f"{DEFAULT_RELEASE} unchanged: " in again.stdout, again.stdout[-3000:]
        libraries = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in again.stderr.splitlines()
                     if line.startswith("import time:")}
        assert "torchbake" in libraries and not libraries & {"docker", "requests", "urllib3", "rich"}, sorted(libraries)

        ran = as_typed(scratch, env, "run-container", "--rm", "--command",
                       'python -c "import torch; print(torch.__version__)"')
        assert ran.returncode == 0, ran.stderr[-3000:]
        assert ran.stdout.strip() == "2.13.0+cpu"
        assert f"no IMAGE given; using {DEFAULT_RELEASE}, the most recent successful build on this host" in ran.stderr

        follow_your_repository_page(scratch, tmp_path, {"TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path / "cache")})


PAGE = (ROOT / "docs/your-repository.md").read_text()
PAGE_IMAGE = re.search(r"`torchbake build` then builds and verifies `([^`]+)`", PAGE)[1]


def page_block(language: str) -> str:
    """The first ``language`` code block of the "your own repository" page."""
    return re.search(rf"^```{language}\n(.*?)^```", PAGE, re.S | re.M)[1]


def follow_your_repository_page(checkout: Path, tmp_path: Path, env: dict) -> None:
    """docs/your-repository.md's commands, read from the page: the wheel made in the checkout as
    typed, installed with pipx (the page's alternative) and `uv tool` into folders of the test's
    own (online, as typed: dependencies from pip's configured index), its example torchbake.toml
    in a new repository folder, then each `torchbake` line with the pipx-installed command from
    that folder; `run-container` in a terminal, where the user types into its shell."""
    import shlex
    import sys

    tools = Path(sys.executable).parent  # the pinned pipx and uv of the test tools; pip: this Python's
    homes = {"PIPX_HOME": tmp_path / "pipx/home", "PIPX_BIN_DIR": tmp_path / "pipx/bin", "PIPX_MAN_DIR": tmp_path / "pipx/man",
             "UV_TOOL_DIR": tmp_path / "uv/tools", "UV_TOOL_BIN_DIR": tmp_path / "uv/bin", "UV_CACHE_DIR": tmp_path / "uv/cache",
             "TMPDIR": tmp_path / "temp"}  # (uv left its build locks in the shared /tmp, four a run)
    homes["TMPDIR"].mkdir()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHBAKE_", "VIRTUAL_ENV", "UV_", "PIPX_"))}

    def run(line: str, cwd: Path, **options) -> subprocess.CompletedProcess[str]:
        argv = shlex.split(line)
        program = {"pip": [sys.executable, "-m", "pip"], "pipx": [str(tools / "pipx")], "uv": [str(tools / "uv")],
                   "torchbake": [str(tmp_path / "pipx/bin/torchbake")]}[argv[0]]
        result = subprocess.run([*program, *argv[1:]], cwd=cwd, capture_output=True, text=True, timeout=900,
                                env={**clean, **{k: str(v) for k, v in homes.items()}, **env}, **options)
        assert result.returncode == 0, (line, result.stdout[-3000:], result.stderr[-3000:])
        return result

    repository = None
    for line in page_block("sh").splitlines():
        if line.startswith("#"):  # a comment line: other ways, not steps
            continue
        command, _, comment = (part.strip() for part in line.partition("  #"))
        if command.startswith("cd "):
            repository = tmp_path / command.split()[1]
            repository.mkdir()
            (repository / "torchbake.toml").write_text(page_block("toml"))
            continue
        if repository is None:  # the wheel and its installation, in the checkout ("here")
            run(command, checkout)
            if alternative := comment.partition("or: ")[2].strip():
                run(alternative, checkout)
            continue
        if command == "torchbake run-container":  # in a terminal (script(1)), the user typing into its shell
            typed = 'python -c "import torch, numpy; print(torch.__version__, numpy.__name__)"\nexit 7\n'
            shell = subprocess.run(["script", "-qec", str(tmp_path / "pipx/bin/torchbake") + " run-container",
                                    "/dev/null"], cwd=repository, input=typed, capture_output=True, text=True,
                                   timeout=300, env={**clean, **env})
            assert shell.returncode == 7, shell.stdout[-3000:]  # the shell's own exit status
            assert "2.13.0+cpu numpy" in shell.stdout, shell.stdout[-3000:]
            docker("rm", "--force", *docker("ps", "--all", "--quiet", "--filter",
                                            f"label=torchbake.image={PAGE_IMAGE}").stdout.split(), check=False)
            continue
        result = run(command, repository)
        if command == "torchbake build --release":
            assert f"Built {PAGE_IMAGE}" in result.stdout and re.search(r"torch version\s*│\s*pass", result.stdout), \
                result.stdout[-3000:]
        if command == "torchbake show-config":  # the page's values, from the file it wrote
            assert result.stderr == f"torchbake: project file {repository}/torchbake.toml\n", result.stderr
            assert re.search(rf'^│ image\.name\s*│ "{PAGE_IMAGE.split(":")[0]}"', result.stdout, re.M), result.stdout
    assert repository is not None and image_exists(PAGE_IMAGE)
    version = subprocess.run([str(tmp_path / "uv/bin/torchbake"), "--version"], capture_output=True, text=True)
    assert version.stdout.strip() == "torchbake 0.1.0"  # the uv tool line installed it too


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
        # the image names its FROM image by the manifest digest the registry resolves (skopeo: nobody here wrote it)
        raw = subprocess.run(["skopeo", "--override-os", "linux", "inspect", "--raw", "--tls-verify=false",
                              f"docker://{remote}"], capture_output=True, timeout=120, check=True).stdout
        label = docker("image", "inspect", "--format", '{{index .Config.Labels "org.opencontainers.image.base.digest"}}',
                       name).stdout.strip()
        assert label == "sha256:" + hashlib.sha256(raw).hexdigest()
    finally:
        docker("image", "rm", "--force", name, remote, check=False)


NIGHTLY_CELLS = [f"musa-{variant}-py{py}" for py in ("38", "39", "310") for variant in ("base", "dev", "release")]
VENDOR_VALUES = ("toolkits.musa_toolkits_url", "toolkits.mudnn_url", "toolkits.mccl_url", "wheels.torch",
                 "wheels.extension")


def test_build_all_plan_lists_every_cell_and_every_missing_value(scratch, tb_env):
    # the nightly's names and FROM images (debian:bullseye, which test_bootstrap sets aside meanwhile,
    # is watched through the output: making it would print "Making debian:bullseye with debootstrap")
    names = ("torchbake/torch-musa", "torchbake/pytorch-cpu", "ubuntu:20.04", "ubuntu:22.04")
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
    assert "debootstrap" not in result.stdout + result.stderr

    build = as_typed(scratch, tb_env, "build-all")
    assert build.returncode == 2
    for key in VENDOR_VALUES:  # every missing value at once, with where to set it
        assert re.search(rf"^  {re.escape(key)} \(cells musa-", build.stderr, re.M), build.stderr
    assert "+ /usr/bin/docker build" not in build.stdout and "debootstrap" not in build.stdout + build.stderr
    assert engine_state(names) == before
