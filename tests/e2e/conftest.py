"""Real-engine fixtures. These tests are never skipped: without an engine they fail, and
scripts/test.sh (what CI runs) starts one first."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_invoke
from tests.leftovers import host_lock
from tests.support import git_server, serve_registry, start_second_engine

from .fixture_repos import dev_profile, git_credentials, make_repos
from .helpers import STAND_IN_PYTHON, docker, make_tiny_torch

CANARY = "canary-" + uuid.uuid4().hex


@pytest.fixture(scope="session")
def repos(tmp_path_factory):
    """The fixture source projects, served over smart HTTP on 127.0.0.1 for the whole session."""
    root = tmp_path_factory.mktemp("repos")
    (root / "srv").mkdir()
    with git_server(root / "srv", auth=f"builder:{CANARY}") as (url, seen_auth):
        commits = make_repos(root, url)
        yield {"url": url, "commits": commits, "root": root, "seen_auth": seen_auth}


def pytest_collection_modifyitems(items):
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.engine)


@pytest.fixture
def default_names_lock():
    """Held by the tests that make, set aside or watch images under torchbake's default names and
    debian:*/ubuntu:* (the as-typed commands, the bad-input catalogue): they take turns, also
    across pytest-xdist workers and across test runs on one machine."""
    import filelock

    with filelock.FileLock(host_lock("default-names")):
        yield


@pytest.fixture(scope="session")
def run_id() -> str:
    """This worker's id: what it makes under it, its base_image teardown removes."""
    return uuid.uuid4().hex[:8]


# The run's id, one for all its pytest-xdist workers (tests/conftest.py sets it): images made once
# per run for all of them are tagged run-RUN, and the run's end removes them.
RUN = os.environ["PYTEST_XDIST_TESTRUNUID"][:8]


@pytest.fixture(scope="session")
def run_folder(tmp_path_factory, worker_id) -> Path:
    """A folder all the workers of this run share (pytest's base folder of the run)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if worker_id != "master" else base


def once_per_run(run_folder: Path, name: str, make):
    """``make()``'s JSON-able result, made by the first worker that asks and read by the others
    (they wait for it): one image or file for the whole run, not one per worker. Where ``make``
    raised, every worker fails with its error (none makes it again)."""
    import filelock

    record = run_folder / f"{name}.json"
    with filelock.FileLock(run_folder / f"{name}.lock"):
        if not record.exists():
            try:
                made = {"result": make()}
            except BaseException as exc:  # recorded for the others (pytest.fail too), raised here as it was
                made = {"error": f"{type(exc).__name__}: {exc}"}
                raise
            finally:
                partial = record.with_suffix(".partial")
                partial.write_text(json.dumps(made))
                partial.replace(record)
    found = json.loads(record.read_text())
    if "error" in found:
        pytest.fail(f"{name}, made once for the run by another worker, failed: {found['error']}")
    return found["result"]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("torchbake-cache")


@pytest.fixture(scope="session")
def tb_env(cache_dir) -> dict[str, str]:
    """Environment for torchbake runs: a cache of the test session's own."""
    return {"TORCHBAKE_PATHS_CACHE_DIR": str(cache_dir)}


SUPPLIER = "ML Platform <ml-platform@example.com>"  # [sbom] supplier of the real CPU image: its SBOMs' supplier
SHARED_BASE = "torchbake-test/debian:bookworm"  # the tests' bootstrapped base, kept between runs
# The labels of the image `invoke bootstrap-os --suite bookworm` makes with its defaults
DEFAULT_BOOKWORM = {"torchbake.bootstrap.suite": "bookworm", "torchbake.bootstrap.mirror": "debootstrap's default",
                    "torchbake.bootstrap.variant": "minbase"}


@pytest.fixture(scope="session")
def base_image(run_id, tb_env):
    """A Debian bookworm base made by `invoke bootstrap-os` (debootstrap + docker import), under a
    name of the session's own. Where torchbake already made `debian:bookworm` on this engine (the
    main job, an earlier run), that image is used under the session's name instead of a minute of
    debootstrap (the bootstrap itself is proven by test_bootstrap (trixie) and test_as_typed (bookworm)).

    Only the image `bootstrap-os --suite bookworm` makes with its defaults will do: a bootstrap is
    reproducible, so it is the very image the main job makes on demand (test_as_typed), and the
    real CPU image's build (conftest's cpu_image) and the main job's then share every step in the
    engine's cache. (An image made for other platforms or packages is another image.)"""

    import filelock

    name = f"torchbake-test/debian:bookworm-{run_id}"

    def made_by_torchbake(image: str) -> str | None:
        """The ID of ``image`` where this torchbake made it with bootstrap-os's defaults (with its
        record of each .deb installed). By ID from the first look on: another test (test_as_typed)
        moves `debian:bookworm` aside and makes it again meanwhile, and a name read twice can name
        two images or none."""
        found = docker("image", "inspect", "--format", "{{.Id}} {{json .Config.Labels}}", image, check=False)
        image_id, _, text = found.stdout.strip().partition(" ")
        labels = (json.loads(text) if found.returncode == 0 else None) or {}
        if {key: value for key, value in labels.items() if key.startswith("torchbake.bootstrap.")} != DEFAULT_BOOKWORM:
            return None
        created = docker("create", image_id, "true", check=False)
        if created.returncode != 0:  # gone since
            return None
        try:
            recorded = docker("cp", f"{created.stdout.strip()}:/etc/torchbake/debs.tsv", "-", check=False)
            return image_id if recorded.returncode == 0 else None
        finally:
            docker("rm", "--force", created.stdout.strip(), check=False)

    # One bootstrap for the pytest-xdist workers of a run, kept for later runs on this engine
    # (a cache, as the engine's build cache is): the others wait for it and tag it.
    with filelock.FileLock(host_lock("base-image")):
        for made in ("debian:bookworm", SHARED_BASE):
            image_id = made_by_torchbake(made)
            if image_id and docker("tag", image_id, name, check=False).returncode == 0:
                break
        else:
            result = run_invoke("bootstrap-os", "--suite", "bookworm", "--name", SHARED_BASE, "--force", env=tb_env)
            assert result.returncode == 0, result.stdout + result.stderr
            assert f"Created {SHARED_BASE}" in result.stdout
            docker("tag", SHARED_BASE, name)
    yield name
    # Every image this session built (candidates of failed verifications and images a rebuild
    # left untagged included): their base is one of this session's images, all named with run_id.
    base_label = "org.opencontainers.image.base.name"
    for _ in range(3):  # children before parents
        built = docker("images", "-q", "--no-trunc", "--filter", f"label={base_label}", check=False).stdout
        for image_id in sorted(set(built.split())):
            found = docker("image", "inspect", "--format", f'{{{{index .Config.Labels "{base_label}"}}}}', image_id,
                           check=False).stdout
            if run_id in found:
                docker("image", "rm", "--force", image_id, check=False)
    docker("image", "rm", "--force", name, check=False)


@pytest.fixture(scope="session")
def packaged_base(run_base, run_folder) -> str:
    """run_base with the OS packages a release image needs already in it, once per run: an empty
    second engine builds FROM it without an apt run of its own (install_os_packages.sh installs only
    what the base lacks; its own list, run here as the image's step runs it). This engine's cache
    keeps the step across runs. For the tests whose second engines prove other things than a first
    build's apt run (the soak, an engine that dies)."""
    name = f"torchbake-test/debian-packaged:run-{RUN}"

    def build():
        context = run_folder / "packaged-base"
        context.mkdir(exist_ok=True)
        (context / "Dockerfile").write_text(
            f"FROM {run_base}\nRUN --mount=type=bind,source=common,target=/tmp/common"
            " bash /tmp/common/install_os_packages.sh os 0\n")
        shutil.copytree(ROOT / "docker" / "common", context / "common", dirs_exist_ok=True)
        docker("build", "--quiet", "--tag", name, str(context))
        return name

    return once_per_run(run_folder, "packaged-base", build)


@pytest.fixture(scope="session")
def cpu_env(run_folder) -> dict[str, str]:
    """The environment the real CPU image was built with: the run's shared cache (its build record
    and log) and its [sbom] supplier."""
    return {"TORCHBAKE_PATHS_CACHE_DIR": str(run_folder / "cpu-image-cache"), "TORCHBAKE_SBOM_SUPPLIER": SUPPLIER}


@pytest.fixture(scope="session")
def run_base(base_image, run_folder) -> str:
    """The bookworm base the run's shared images build FROM: the first worker's base_image, chosen
    once and tagged for the run (other workers' bases are the same image unless test_as_typed
    made debian:bookworm again meanwhile)."""
    name = f"torchbake-test/debian:run-{RUN}"

    def tag():
        docker("tag", docker("image", "inspect", "--format", "{{.Id}}", base_image).stdout.strip(), name)
        return name

    return once_per_run(run_folder, "run-base", tag)


@pytest.fixture(scope="session")
def cpu_image(run_base, cpu_env, run_folder):
    """The real CPU release image: torch 2.13.0 from its wheel, built with the cpu profile, once per
    run for all the workers (the first that needs it builds it; the others wait and read its result)."""
    name = f"torchbake-test/pytorch-cpu:run-{RUN}"

    def build():
        done = run_invoke("build", "--config", "configs/cpu.toml", "--name", name.split(":")[0],
                          "--tag", name.split(":")[1], "--base-img", run_base, env=cpu_env)
        return {"args": done.args, "returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}

    return name, subprocess.CompletedProcess(**once_per_run(run_folder, "cpu-image", build))


@pytest.fixture(scope="session")
def tiny_torch(run_folder) -> Path:
    """The small stand-in torch wheel (tests.e2e.helpers.make_tiny_torch), made once per run: the
    same bytes in every worker, so their builds share its install step in the engine's cache."""
    return Path(once_per_run(run_folder, "tiny-torch", lambda: str(make_tiny_torch(run_folder / "tiny-torch"))))


@pytest.fixture(scope="session")
def tiny_profile(tiny_torch, tmp_path_factory) -> Path:
    """A release profile "tiny" for tests about torchbake's machinery (matrix, registry, gc,
    faults, secrets): torch is the stand-in wheel, no companions. The real torch wheel stays in
    the tests about it (the main job, layer sharing, verify, the pip/uv pin, run-container)."""
    path = tmp_path_factory.mktemp("tiny-profile") / "tiny.toml"
    path.write_text(TINY_PROFILE.format(wheel=tiny_torch))
    return path


TINY_PROFILE = STAND_IN_PYTHON + '[wheels]\ntorch = "{wheel}"\nextra = []\n[build]\nvariant = "release"\n'


@pytest.fixture(scope="session")
def dev_config(repos, tiny_torch, tmp_path_factory):
    """A profile for the fixture projects (the same keys as configs/musa.toml uses) on the stand-in
    torch, and git credentials."""
    folder = tmp_path_factory.mktemp("dev-config")
    url = repos["url"]
    config = folder / "fixture.toml"
    config.write_text(dev_profile(url, supplier=SUPPLIER, torch=str(tiny_torch)))
    credentials = folder / "git-credentials"
    credentials.write_text(git_credentials(url, CANARY))
    return config, credentials


@pytest.fixture(scope="session")
def lite_dev_config(dev_config, tiny_torch, repos):
    """dev_config ("fixture-lite") with the one-file extension (fixture_repos: extension-lite) and no
    further extension (apex's step is test_dev's; a dev image without one has no step for them):
    for the tests about the matrix, the registry and the compile cache (test_dev moves dev_config's
    extension's tag)."""
    config, credentials = dev_config
    lite = config.with_name("fixture-lite.toml")
    lite.write_text(dev_profile(repos["url"], supplier=SUPPLIER, torch=str(tiny_torch), extension="private/extension-lite",
                                extras=False))
    return lite, credentials


@pytest.fixture
def registry(tmp_path):
    """A real local registry on 127.0.0.1 for this test."""
    with serve_registry(tmp_path) as host:
        yield host


@pytest.fixture(scope="module")
def second_engine(tmp_path_factory):
    """A second, empty Docker engine without NAT (see tests.support.second_engine): its DOCKER_HOST."""
    with start_second_engine(tmp_path_factory.mktemp("engine-b")) as env:
        yield env
