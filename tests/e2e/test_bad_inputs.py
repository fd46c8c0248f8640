"""The bad-input catalogue: every task, through the real CLI against the real engine. Each case
must exit with its class's code (README, "Exit codes") and a message naming the bad value and what is accepted, print no
traceback, run no `docker build`, and create or change nothing: images, containers, the
cache (downloads, wheelhouses, sources, logs, manifests), context folders and the user's files."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_invoke

from .helpers import docker, engine_state

pytestmark = pytest.mark.usefixtures("default_names_lock")  # see tests/e2e/conftest.py

CPU = ("--config", "configs/cpu.toml")
B = "BASE"  # replaced by the session's base image
NO_SUCH = "torchbake-test/no-such-image:1"

# (id, task arguments, extra environment, text the message must contain)
CASES = [
    # versions
    ("python-too-old", ["build", *CPU, "--python", "3.7", "--base-img", B], {},
     "python.version = '3.7' (from command line) is invalid: supported Python versions are 3.8"),
    ("python-not-in-base", ["build", *CPU, "--python", "3.10", "--base-img", B], {},
     "Python 3.10 was requested, but the base image BASE (--base-img) is debian 12, whose OS Python is 3.11"),
    ("python-not-in-named-os", ["build", "--release", "--base-img", "ubuntu:20.04"], {},  # known before any pull or bootstrap
     "Python 3.11 was requested, but the base image ubuntu:20.04 (--base-img) is ubuntu 20.04, whose OS Python is 3.8."
     " Use --python 3.8, a base image of debian:bookworm,"),
    ("python-not-a-version", ["build-base", "--python", "two.seven"], {},
     "python.version = 'two.seven' (from command line) is invalid: expected a Python version as X.Y"),
    ("verify-python", ["verify", B, "--python", "three"], {}, "--python 'three' is invalid: expected a Python version as X.Y"),
    # names and tags
    ("image-name", ["build", *CPU, "--name", "Bad Name", "--base-img", B], {},
     "image.name = 'Bad Name' (from command line) is invalid: expected an image name"),
    ("image-tag", ["build", *CPU, "--tag", "-x", "--base-img", B], {}, "image.tag = '-x' (from command line) is invalid"),
    ("base-sys-reference", ["build-base", "--sys", "UPPER:case"], {},
     "base.sys = 'UPPER:case' (from command line) is invalid: expected an image name"),
    ("bootstrap-name", ["bootstrap-os", "--name", "Bad:Name"], {}, "--name 'Bad:Name' is not a valid image reference"),
    ("bootstrap-suite", ["bootstrap-os", "--suite", "bookwurm", "--name", "torchbake-test/x:1"], {},
     "--suite 'bookwurm' is not a suite this debootstrap knows."),
    ("container-name", ["run-container", B, "--name", "bad name!", "--command", "true"], {}, "run.name = 'bad name!'"),
    # images that do not exist
    ("no-base-image", ["build", *CPU, "--base-img", NO_SUCH], {},
     f"Base image '{NO_SUCH}' (--base-img) does not exist on this engine and could not be pulled"),
    ("base-unknown-suite", ["build", "--release", "--base-img", "debian:no-such-suite"], {},
     "--base-img debian:no-such-suite: suite 'no-such-suite' is not a suite this debootstrap knows. Releases torchbake"
     " knows: bullseye (debian 11, Python 3.9), bookworm (debian 12, Python 3.11)"),
    ("base-empty-tag", ["build", "--release", "--base-img", "ubuntu:"], {},
     "image.base = 'ubuntu:' (from command line) is invalid: the tag after ubuntu: is empty"),
    ("base-sys-empty-tag", ["build-base", "--sys", "debian:"], {}, "base.sys = 'debian:' (from command line) is invalid"),
    ("no-bootstrap", ["build", "--release", "--base-img", "debian:buster", "--no-bootstrap"], {},
     "making it with debootstrap is switched off (--no-bootstrap or [bootstrap] auto = false). Load or pull it, or"
     " make it with `invoke bootstrap-os --suite buster --name debian:buster`."),
    ("bootstrap-mirror", ["build", "--release"], {"TORCHBAKE_BOOTSTRAP_MIRROR": "deb.debian.org"},
     "bootstrap.mirror = 'deb.debian.org' (from environment TORCHBAKE_BOOTSTRAP_MIRROR) is invalid: expected an http(s)://"),
    ("dev-base-missing", ["build", "--python", "3.9"], {},
     "Base image 'torchbake/pytorch-cpu:base-py3.9' (--base-img) does not exist on this engine. Make it with"
     " `invoke build-base --name torchbake/pytorch-cpu --tag base-py3.9 --python 3.9`"),
    ("not-a-torchbake-base", ["build", "--name", "a/b", "--base-img", B], {}, "is not a torchbake base image"),
    ("verify-no-image", ["verify", NO_SUCH], {}, f"Image '{NO_SUCH}' does not exist on this engine."),
    ("docker-file-misspelt-step", ["build", "--release", "--docker-file", "MISSPELT_STEP"], {},
     "'# @torchbake-if toolkit@' names no step torchbake knows; expected toolkits or extension"),
    ("verify-reproducible-checks", ["verify", B, "--reproducible", "--python", "3.11"], {},
     "--python: not with --reproducible, which compares the image with a build of its own recorded configuration"),
    ("verify-reproducible-no-record", ["verify", B, "--reproducible"], {},
     "has no build record with its configuration on this host"),
    ("show-build-no-image", ["show-build", NO_SUCH], {}, f"Image '{NO_SUCH}' does not exist on this engine."),
    ("run-no-image", ["run-container", NO_SUCH, "--command", "true"], {}, f"Image '{NO_SUCH}' does not exist on this engine"),
    # config files
    ("config-missing", ["build", "--config", "configs/nope.toml"], {}, "Config file (--config) configs/nope.toml does not exist."),
    ("config-unknown-key", ["build", *CPU, "--config", "BAD_KEY"], {}, "unknown option 'wheels.torch_url'. Did you mean 'torch'?"),
    ("config-unknown-section", ["show-config", "--config", "BAD_SECTION"], {}, "unknown section [wheel]. Did you mean 'wheels'?"),
    ("config-wrong-type", ["build", *CPU, "--config", "BAD_TYPE"], {},
     'build.verify = "yes" has the wrong type; expected true or false.'),
    ("config-not-toml", ["build", *CPU, "--config", "NOT_TOML"], {}, "is not valid TOML"),
    ("config-checksum", ["build", *CPU, "--config", "BAD_SUM", "--base-img", B], {},
     "checksums.kit.tar.gz = 'abc' (from BAD_SUM) is invalid: expected a sha256 digest: 64 lowercase hex digits."),
    ("config-profile", ["build", *CPU, "--config", "BAD_PROFILE"], {},
     "accelerator.profile = 'ipu' (from BAD_PROFILE) is invalid: expected one of: cpu, cuda, rocm, musa, ascend, tpu, xpu."),
    # environment variables
    ("env-unknown", ["show-config"], {"TORCHBAKE_PYTHON_VERSON": "3.11"},
     "Unknown environment variable TORCHBAKE_PYTHON_VERSON. Did you mean 'TORCHBAKE_PYTHON_VERSION'?"),
    ("env-bool", ["build", *CPU], {"TORCHBAKE_BUILD_VERIFY": "maybe"},
     "TORCHBAKE_BUILD_VERIFY='maybe': expected true/false (or 1/0, yes/no)."),
    ("env-installer", ["build", *CPU], {"TORCHBAKE_PYTHON_INSTALLER": "conda"},
     "python.installer = 'conda' (from environment TORCHBAKE_PYTHON_INSTALLER) is invalid: expected one of: uv, pip."),
    ("env-uv-pin", ["build", *CPU], {"TORCHBAKE_PYTHON_UV": "uv>=0.9"},
     "python.uv = 'uv>=0.9' (from environment TORCHBAKE_PYTHON_UV) is invalid: expected an exact pin NAME==VERSION"),
    ("source-date-epoch", ["build", *CPU], {"SOURCE_DATE_EPOCH": "yesterday"},
     "SOURCE_DATE_EPOCH='yesterday' is not a number of seconds since 1970-01-01 UTC"),
    ("env-int", ["build", *CPU], {"TORCHBAKE_DEV_MAX_JOBS": "lots"}, "TORCHBAKE_DEV_MAX_JOBS='lots': expected an integer."),
    ("env-jobs-range", ["build", *CPU], {"TORCHBAKE_DEV_MAX_JOBS": "5000"},
     "dev.max_jobs = 5000 (from environment TORCHBAKE_DEV_MAX_JOBS) is invalid: expected a number of jobs from 1 to 1024"),
    ("env-retries", ["build", *CPU], {"TORCHBAKE_DOWNLOADS_RETRIES": "-1"},
     "downloads.retries = -1 (from environment TORCHBAKE_DOWNLOADS_RETRIES) is invalid: expected 0 to 100 retries."),
    ("env-checksums", ["build", *CPU], {"TORCHBAKE_CHECKSUMS_KIT": "0" * 64},
     "TORCHBAKE_CHECKSUMS_KIT: checksums cannot be set from the environment"),
    ("env-network", ["build", *CPU], {"TORCHBAKE_BUILD_NETWORK": "bridge2"},
     "build.network = 'bridge2' (from environment TORCHBAKE_BUILD_NETWORK) is invalid: expected one of: default, host, none (or \"\" for Docker's default)."),
    ("env-image-env", ["build", *CPU], {"TORCHBAKE_IMAGE_ENV": "1BAD=x"}, "'1BAD' is not a valid environment variable name"),
    ("env-arch-list", ["build-base"], {"TORCHBAKE_ACCELERATOR_TORCH_CUDA_ARCH_LIST": "sm_90"},
     "accelerator.torch_cuda_arch_list = 'sm_90' (from environment TORCHBAKE_ACCELERATOR_TORCH_CUDA_ARCH_LIST) is invalid:"
     " expected compute capabilities separated by ';'"),
    # sizes
    ("size-ccache", ["build", *CPU], {"TORCHBAKE_DEV_CCACHE_SIZE": "huge"},
     "dev.ccache_size = 'huge' (from environment TORCHBAKE_DEV_CCACHE_SIZE) is invalid: expected a size such as 500M or 20G."),
    ("size-free-space", ["build", *CPU], {"TORCHBAKE_BUILD_MIN_FREE_SPACE": "lots"},
     "build.min_free_space = 'lots' (from environment TORCHBAKE_BUILD_MIN_FREE_SPACE) is invalid: expected a size such as 512M"),
    ("size-shm", ["run-container", B, "--shm-size", "lots", "--command", "true"], {},
     "run.shm_size = 'lots' (from command line) is invalid: expected a size such as 512M, 8G or 80G"),
    ("size-shm-env", ["run-container", B, "--command", "true"], {"TORCHBAKE_RUN_SHM_SIZE": "0"},
     "run.shm_size = '0' (from environment TORCHBAKE_RUN_SHM_SIZE) is invalid"),
    # URLs and digests
    ("url-scheme", ["build", *CPU, "--torch-whl-url", "ftp://example.invalid/torch.whl"], {},
     "wheels.torch = 'ftp://example.invalid/torch.whl' (from command line) is invalid: expected an http://, https:// or file:// URL"),
    ("url-not-a-path", ["build", *CPU, "--musa-toolkits-url", "notaurl"], {},
     "toolkits.musa_toolkits_url = 'notaurl' (from command line) is invalid: no such file: CHECKOUT_DIR/notaurl (a relative"
     " path is taken from the current folder, CHECKOUT_DIR); expected an http(s):// or file:// URL"),
    ("url-bad-digest", ["build", *CPU, "--torch-whl-url", "https://h.invalid/torch.whl#sha256=xyz"], {},
     "wheels.torch = 'https://h.invalid/torch.whl#sha256=xyz' (from command line) is invalid: expected a sha256 digest"),
    ("require-hashes", ["build", *CPU, "--base-img", B, "--require-hashes", "--musa-toolkits-url", "https://h.invalid/kit.tar.gz"],
     {}, "--require-hashes (downloads.require_hashes): these URLs have no sha256:\n  toolkits.musa_toolkits_url: https://h.invalid/kit.tar.gz"),
    ("ca-bundle-missing", ["build", *CPU, "--ca-bundle", "/no/such/ca.pem"], {},
     "downloads.ca_bundle = '/no/such/ca.pem' (from command line) is invalid: no such file; expected a PEM file of CA certificates"),
    ("ca-bundle-not-pem", ["build-all", "--ca-bundle", "NOT_PEM", "--plan"], {},
     "holds no '-----BEGIN CERTIFICATE-----' block; expected a PEM file of CA certificates"),
    # required inputs
    ("musa-release-extension", ["build", "--config", "configs/musa.toml", "-r", "--torch-whl-url", "torch==2.13.0"], {},
     "4 values this build needs are not set:\n  wheels.extension: [wheels] extension_module = 'torch_musa'"),
    ("musa-toolkit", ["build", "--config", "configs/musa.toml"], {},
     "3 values this build needs are not set:\n  toolkits.musa_toolkits_url: the musa profile needs that toolkit."
     " Set it with --musa-toolkits-url"),
    ("all-missing-values", ["build-all"], {},  # the shipped nightly matrix without vendor URLs: every value at once
     "6 of 9 cells need values that are not set; nothing was built:\n  toolkits.musa_toolkits_url (cells musa-dev-py38,"),
    # paths and folders
    ("build-dir-user-files", ["build", *CPU, "--base-img", B, "--build-dir", "USER_DIR"], {},
     "--build-dir USER_DIR holds files torchbake did not put there; refusing to overwrite them."),
    ("no-prepare-without-dir", ["build", *CPU, "--base-img", B, "--no-prepare"], {}, "--no-prepare reuses a context prepared earlier"),
    ("no-prepare-empty-dir", ["build", *CPU, "--base-img", B, "--build-dir", "EMPTY_DIR", "--no-prepare"], {},
     "is not a context torchbake prepared"),
    ("source-root", ["build-base", "--source-root", "/no/such/folder"], {},
     "sources.root = '/no/such/folder' (from command line) is invalid: no such folder; expected an existing folder"),
    ("git-ref", ["build-base", "--pytorch-tag", "bad..tag"], {},
     "sources.pytorch_tag = 'bad..tag' (from command line) is invalid: expected a git tag or branch name such as v2.0.0."),
    ("mount-missing", ["run-container", B, "--mount", "/no/such/folder:/data", "--command", "true"], {},
     "the host path /no/such/folder does not exist"),
    ("workdir-relative", ["run-container", B, "--workdir", "relative", "--command", "true"], {}, "run.workdir = 'relative'"),
    # credentials
    ("credential-file", ["build", "--config", "configs/musa.toml", "-c", "/no/such/credentials"], {},
     "dev.git_credential_file = '/no/such/credentials' (from command line) is invalid: no such file; expected a git credential file"),
    ("repo-with-credentials", ["build-base"], {"TORCHBAKE_SOURCES_PYTORCH_REPO": "https://user:pw@example.invalid/pytorch.git"},
     "expected a repository URL without credentials in it (URLs land in logs and labels); give them to git instead"),
    # flags of build-all, run-container, stop-container, the docker client
    ("docker-client", ["build", *CPU, "--docker", "/no/such/docker"], {},
     "Docker client '/no/such/docker' (build.docker / --docker) was not found"),
    ("docker-client-not-docker", ["build", *CPU, "--docker", "/bin/true"], {},
     "/bin/true: it is not a docker client: `/bin/true --version` printed 'true (GNU coreutils)"),
    ("all-jobs", ["build-all", "--jobs", "0"], {}, "--jobs 0: expected 1 or more."),
    ("all-shard", ["build-all", "--shard", "3/2", "--plan"], {}, "--shard '3/2': expected I/N with 1 <= I <= N, e.g. 1/2."),
    ("all-contradiction", ["build-all", "--keep-going", "--fail-fast"], {}, "--keep-going and --fail-fast contradict each other"),
    ("all-emit", ["build-all", "--emit-matrix", "gitlab"], {}, "--emit-matrix 'gitlab': the one format is 'github'."),
    ("all-only", ["build-all", "--only", "nomatch-*", "--plan"], {}, "--only 'nomatch-*' matches no cell."),
    ("all-no-matrix", ["build-all", *CPU, "--plan"], {}, "None of configs/cpu.toml has a [matrix] table"),
    ("run-env", ["run-container", B, "--env", "NOEQUALS", "--command", "true"], {}, "--env 'NOEQUALS' is not KEY=VALUE"),
    ("run-no-terminal", ["run-container", B], {}, "Standard input is not a terminal"),
    ("run-no-build-yet", ["run-container", "--command", "true"], {"TORCHBAKE_PATHS_LOG_DIR": "EMPTY_DIR"},
     "No IMAGE given, and this host has no successful build to run. Build one with `invoke build --release`"),
    ("stop-unknown", ["stop-container", "torchbake-test-no-such-container"], {},
     "No container named 'torchbake-test-no-such-container'."),
    ("stop-time", ["stop-container", "x", "--time", "-1"], {}, "--time -1: expected a number of seconds from 0 to 86,400"),
    # past what the engine's client can wait (it overflowed: a traceback, exit 1)
    ("stop-time-huge", ["stop-container", "x", "--time", "99999999999999999999"], {},
     "--time 99999999999999999999: expected a number of seconds from 0 to 86,400 (a day)."),
    # where torchbake writes: report files, the cache and log folders, a prepared --build-dir
    ("report-in-proc", ["build-all", "--report", "/proc/r.json"], {}, "--report /proc/r.json: /proc holds no ordinary files"),
    ("junit-is-a-folder", ["build-all", "--junit", "USER_DIR"], {}, "--junit USER_DIR is a folder; name a file in it"),
    ("report-under-a-file", ["build-all", "--report", "BAD_KEY/sub/r.json"], {},
     "--report BAD_KEY/sub/r.json: BAD_KEY is a file, so no folder can be made there"),
    ("report-read-only", ["build-all", "--report", "RO_DIR/r.json"], {},
     "--report RO_DIR/r.json cannot be written: Read-only file system"),
    ("report-with-plan", ["build-all", "--plan", "--report", "r.json"], {},
     "--report, --junit and --summary write the results of a run; --plan runs nothing."),
    ("cache-is-a-file", ["build", "--release"], {"TORCHBAKE_PATHS_CACHE_DIR": "BAD_KEY"},
     "paths.cache_dir BAD_KEY (set by [paths] cache_dir in a --config file or TORCHBAKE_PATHS_CACHE_DIR) is a file,"
     " not a folder. Point TORCHBAKE_PATHS_CACHE_DIR at a folder you can write"),
    ("cache-read-only-plan", ["build-all", "--plan"], {"TORCHBAKE_PATHS_CACHE_DIR": "RO_DIR/cache"},
     "paths.cache_dir RO_DIR/cache (set by [paths] cache_dir in a --config file or TORCHBAKE_PATHS_CACHE_DIR) is not writable"),
    ("log-read-only", ["build", "--release"], {"TORCHBAKE_PATHS_LOG_DIR": "RO_DIR"},
     "paths.log_dir RO_DIR (set by [paths] log_dir in a --config file or TORCHBAKE_PATHS_LOG_DIR) cannot be written:"
     " Read-only file system"),
    ("log-under-a-file-dry-run", ["build", "--release", "--dry-run"], {"TORCHBAKE_PATHS_LOG_DIR": "BAD_KEY/logs"},
     "cannot be made: BAD_KEY is a file, not a folder"),
    ("prepared-dir-user-files", ["build", *CPU, "--base-img", B, "--build-dir", "PREPARED_DIR"], {},
     "--build-dir PREPARED_DIR was prepared by torchbake, but now also holds files it did not write: NOTES.md,"
     " wheelhouse/mine.txt."),
    # options without effect
    ("slim-on-release", ["build", "--release", "--slim"], {}, "--slim has no effect on a release image"),
    ("musa-tag-on-release", ["build", "--release", "--torch-musa-tag", "v1"], {},
     "--torch-musa-tag has no effect on a release image"),
    ("wheel-on-dev", ["build", "--torch-whl-url", "torch==2.13.0"], {}, "--torch-whl-url has no effect on a dev image"),
    ("matrix-outside-build-all", ["build", "--config", "configs/nightly.toml"], {},
     "configs/nightly.toml has a [matrix] table, which only build-all reads"),
    ("command-empty", ["run-container", B, "--command", ""], {}, "--command is empty; give the command to run"),
    # containers torchbake did not create
    ("foreign-container", ["run-container", B, "--name", "FOREIGN", "--command", "true"], {},
     "Container 'FOREIGN' was not created by torchbake (it has no torchbake.container label), so run-container"
     " leaves it alone. Pass another name, e.g. --name FOREIGN-torchbake"),
    ("foreign-container-replace", ["run-container", B, "--name", "FOREIGN", "--replace", "--command", "true"], {},
     "Container 'FOREIGN' was not created by torchbake"),
    # text from outside, printed as it is
    ("markup-in-a-path", ["build", "--config", "/no/[red]such[/].toml"], {}, "Config file (--config) /no/[red]such[/].toml does not exist."),
    ("markup-in-a-value", ["show-config"], {"TORCHBAKE_IMAGE_NAME": "[bold]x"}, "image.name = '[bold]x' (from environment"),
    ("verify-no-python", ["verify", B], {}, "has no `python` on its PATH, so there is nothing to verify"),
    # a Python whose base this host cannot make: why, and what works here
    ("python-base-not-makeable", ["build", "--release", "--python", "3.12"], {},
     "ubuntu:24.04 (ubuntu 24.04, suite noble) cannot be made on this host: its debootstrap has no script for noble"),
    ("no-bootstrap-said-first", ["build", "--release", "--python", "3.12", "--no-bootstrap"], {},
     "making it with debootstrap is switched off (--no-bootstrap or [bootstrap] auto = false)"),
    # what is inside images, where it came from, what changed
    ("sbom-format", ["sbom", B, "--format", "xml"], {}, "--format 'xml': expected spdx, spdx3, cyclonedx."),
    ("sbom-output-folder", ["sbom", B, "--output", "/tmp"], {}, "--output /tmp is a folder; name a file in it"),
    ("provenance-not-built-here", ["provenance", B], {}, "has no provenance on this host"),
    ("diff-no-image", ["diff", B, NO_SUCH], {}, f"Image '{NO_SUCH}' does not exist on this engine."),
    ("diff-format", ["diff", B, B, "--format", "yaml"], {}, "--format 'yaml': expected table or json."),
]


# The exit code of each case's class (README, "Exit codes"): 2, a configuration error, unless named here.
EXIT_CODES = {
    "docker-client": 4, "docker-client-not-docker": 4,  # the docker client
    "verify-no-python": 6,  # verification: the image has nothing to verify
    "foreign-container": 8, "foreign-container-replace": 8,  # containers (device profiles: test_run_container)
}
assert set(EXIT_CODES) <= {case[0] for case in CASES}


@pytest.fixture(scope="module")
def files(tmp_path_factory, base_image):
    folder = tmp_path_factory.mktemp("bad-inputs")
    user_dir = folder / "my-files"
    user_dir.mkdir()
    (user_dir / "notes.txt").write_text("mine")
    written = {
        "BAD_KEY": '[wheels]\ntorch_url = "torch==2.13.0"\n',
        "BAD_SECTION": '[wheel]\ntorch = "torch==2.13.0"\n',
        "BAD_TYPE": '[build]\nverify = "yes"\n',
        "NOT_TOML": "not toml = = \n",
        "BAD_SUM": '[checksums]\n"kit.tar.gz" = "abc"\n',
        "BAD_PROFILE": '[accelerator]\nprofile = "ipu"\n',
        "NOT_PEM": "hello\n",
        "MISSPELT_STEP": "FROM scratch\n# @torchbake-if toolkit@\nRUN true\n",
    }
    prepared = user_dir / "prepared"  # a context torchbake prepared, and the user's files put in it since
    (prepared / "wheelhouse").mkdir(parents=True)
    (prepared / ".torchbake-context.json").write_text('{"files": ["Dockerfile", "wheelhouse/requirements.txt"]}')
    for name in ("Dockerfile", "wheelhouse/requirements.txt", "NOTES.md", "wheelhouse/mine.txt"):
        (prepared / name).write_text("x")
    read_only = folder / "read-only"
    read_only.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(read_only)], check=True)
    foreign = f"torchbake-test-foreign-{uuid.uuid4().hex[:8]}"
    docker("create", "--name", foreign, base_image, "true")
    paths = {"USER_DIR": str(user_dir), "EMPTY_DIR": str(folder / "empty"), "PREPARED_DIR": str(prepared),
             "RO_DIR": str(read_only), "FOREIGN": foreign}
    for key, text in written.items():
        path = folder / f"{key.lower()}.toml"
        path.write_text(text)
        paths[key] = str(path)
    yield paths
    docker("rm", "--force", foreign, check=False)
    subprocess.run(["umount", str(read_only)], check=False)


# The names torchbake gives when a command names none ([naming] in torchbake/configuration/settings.py, configs/musa.toml) and
# the OS images the catalogue's Pythons would be built FROM (3.11, 3.10, 3.8, 3.12; others are named
# in the cases' arguments).
DEFAULT_NAMES = ("torchbake/pytorch-cpu", "torchbake/torch-musa", "debian:bookworm", "ubuntu:22.04", "ubuntu:20.04",
                 "ubuntu:24.04")


def snapshot(cache_dir: Path, user_dir: Path, args: list[str]) -> dict:
    """The cache, the user's files, and what the engine holds under any name the case's arguments
    give (or torchbake's default names): what a bad input could create or change."""
    def tree(root: Path) -> set:
        return {(str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
                for p in root.rglob("*")} if root.exists() else set()

    return {**engine_state([*DEFAULT_NAMES, *args]), "cache": tree(cache_dir), "user": tree(user_dir)}


@pytest.fixture(scope="module")
def warm(base_image, tb_env):
    """Facts torchbake caches on first sight (the base image's os-release) are cached before the
    catalogue runs, so that what a case changes is its own doing."""
    result = run_invoke("build", *CPU, "--base-img", base_image, "--python", "3.10", env=tb_env)
    assert "whose OS Python is 3.11" in result.stderr


def task_flags() -> dict[str, set[str]]:
    """Every flag each task accepts, from the task collection itself."""
    import tasks as task_module

    accepted = {}
    for name in task_module.ns.task_names:
        arguments = copy.deepcopy(task_module.ns[name]).get_arguments()  # invoke pops help texts as it reads them
        accepted[name] = {("-" if len(n) == 1 else "--") + n.replace("_", "-") for a in arguments for n in a.names}
        accepted[name] |= {"--help", "--config"}
    return accepted


def unknown_hinted_flags(task: str, message: str) -> list[str]:
    """Flags a message suggests that the task meant does not accept: a `invoke TASK …` hint is
    checked against TASK, a bare --flag against the task that printed it. Other tools' commands in
    backticks (`docker …`, `pip …`) are theirs."""
    accepted, wrong = task_flags(), []
    for hint in re.findall(r"`([^`]*)`", message):
        words = hint.split()
        if words[:1] == ["invoke"] and len(words) > 1:
            wrong += [f"{words[1]} {w}" for w in words[2:] if w.startswith("--") and w.split("=")[0] not in accepted[words[1]]]
    for flag in re.findall(r"(?<![\w/.=-])(--[a-z][a-z0-9-]*)", re.sub(r"`[^`]*`", "", message)):
        if flag not in accepted[task] and flag not in OTHER_TOOLS_FLAGS:
            wrong.append(f"{task} {flag}")
    return wrong


def runnable_hints(message: str) -> list[list[str]]:
    """`invoke build …`, `invoke build-base …` and `invoke bootstrap-os …` hints without placeholders
    (FILE, URL): each can be run as a --dry-run."""
    hints = []
    for hint in re.findall(r"`invoke ((?:build|build-base|bootstrap-os) [^`]*|build-base|build)`", message):
        words = hint.split()
        if not any(w.isupper() or w.startswith(("$", "<")) or w in ("…", "...") for w in words):
            hints.append(words)
    return hints


# Flags of other tools that messages explain (docker's and pip's, named as theirs).
OTHER_TOOLS_FLAGS = {"--no-build-isolation", "--gpus", "--privileged", "--device", "--shm-size", "--network"}


def test_the_catalogue_has_at_least_40_cases_across_every_task():
    assert len(CASES) >= 40 and len({case[0] for case in CASES}) == len(CASES)
    tasks = {case[1][0] for case in CASES}
    assert tasks == {"build", "build-base", "build-all", "verify", "show-build", "show-config", "bootstrap-os",
                     "run-container", "stop-container", "sbom", "provenance", "diff"}


@pytest.mark.parametrize(("case", "args", "env", "message"), CASES, ids=[case[0] for case in CASES])
def test_bad_input_fails_before_any_work(case, args, env, message, base_image, tb_env, cache_dir, files, warm):
    def fill(text: str) -> str:
        for key, value in {**files, "BASE": base_image, "CHECKOUT_DIR": str(ROOT)}.items():
            text = text.replace(key, value)
        return text

    args, message = [fill(a) for a in args], fill(message)
    before = snapshot(cache_dir, Path(files["USER_DIR"]), args)
    result = run_invoke(*args, env={**tb_env, **{k: fill(v) for k, v in env.items()}})
    output = result.stdout + result.stderr
    assert result.returncode == EXIT_CODES.get(case, 2), (result.returncode, output[-2000:])
    assert message in output, output[-2000:]
    assert "Traceback" not in output
    assert "+ /usr/bin/docker build" not in output
    assert snapshot(cache_dir, Path(files["USER_DIR"]), args) == before
    assert not os.path.exists(files["EMPTY_DIR"])
    assert unknown_hinted_flags(args[0], output) == []
    for hint in runnable_hints(output):  # a hint is a command that works: run it (as a plan, which changes nothing)
        tried = run_invoke(*hint, "--dry-run", env={**tb_env, **{k: fill(v) for k, v in env.items()}})
        assert tried.returncode == 0, f"hint {' '.join(hint)} failed:\n{tried.stdout[-1000:]}{tried.stderr[-1000:]}"
