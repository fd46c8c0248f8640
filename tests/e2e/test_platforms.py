"""One tag for amd64 and arm64, built on this amd64 host with real QEMU: a debootstrapped arm64
Debian, the stand-in torch and the real numpy wheels of each machine, each platform's image
built, verified and recorded on its own, then joined. The arm64 wheels are unpacked natively."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import filelock
import pytest

from tests.conftest import run_invoke

from .helpers import docker

MULTI_BASE = "torchbake-test/debian:bookworm-multi"  # made once per engine, kept between runs (as SHARED_BASE)
NUMPY = "numpy==2.4.6"


@pytest.fixture(scope="module")
def multi_base(run_id, tb_env):
    """A bookworm base for linux/amd64 and linux/arm64 under one name, by `invoke bootstrap-os --platform`."""
    name = f"torchbake-test/debian:bookworm-multi-{run_id}"
    with filelock.FileLock(Path(tempfile.gettempdir()) / "torchbake-tests-multi-base.lock"):
        labels = docker("image", "inspect", "--format", "{{json .Config.Labels}}", MULTI_BASE, check=False).stdout
        if "linux/amd64,linux/arm64" not in labels:
            result = run_invoke("bootstrap-os", "--suite", "bookworm", "--name", MULTI_BASE,
                                "--platform", "arm64,amd64", env=tb_env)
            assert result.returncode == 0, result.stdout + result.stderr
            assert f"Created {MULTI_BASE}" in result.stdout
        docker("tag", MULTI_BASE, name)
    yield name
    docker("image", "rm", name, check=False)


@pytest.fixture(scope="module")
def two_platform_image(multi_base, tiny_torch, run_id, tb_env, tmp_path_factory):
    """torchbake-test/platforms:RUN for both platforms, and the build's output."""
    profile = tmp_path_factory.mktemp("platforms") / "tiny.toml"
    profile.write_text(f'[python]\nversion = "3.11"\n[wheels]\ntorch = "{tiny_torch}"\nextra = ["{NUMPY}"]\n'
                       '[build]\nvariant = "release"\n')
    args = ("build", "--config", str(profile), "--name", "torchbake-test/platforms", "--tag", run_id,
            "--base-img", multi_base, "--platform", "linux/amd64,aarch64")
    result = run_invoke(*args, env=tb_env)
    assert result.returncode == 0, result.stdout + result.stderr
    name = f"torchbake-test/platforms:{run_id}"
    yield name, result, args
    for tag in (name, f"{name}-amd64", f"{name}-arm64"):
        docker("image", "rm", "--force", tag, check=False)


def _in_container(image: str, platform: str, code: str) -> str:
    return docker("run", "--rm", "--network", "none", "--platform", platform, image, "python", "-c", code).stdout.strip()


def test_one_tag_runs_on_each_platform_with_that_platforms_numpy(two_platform_image):
    name, _, _ = two_platform_image
    code = ("import platform, numpy, torch; a = numpy.arange(4).reshape(2, 2);"
            " print(platform.machine(), torch.__version__, (a @ a).tolist())")
    assert _in_container(name, "linux/arm64", code) == "aarch64 2.13.0+tiny [[2, 3], [6, 11]]"
    assert _in_container(name, "linux/amd64", code) == "x86_64 2.13.0+tiny [[2, 3], [6, 11]]"


def test_each_platform_is_its_own_verified_image_with_its_own_wheels(two_platform_image):
    name, result, _ = two_platform_image
    for arch, machine in (("amd64", "x86_64"), ("arm64", "aarch64")):
        labels = json.loads(docker("image", "inspect", "--format", "{{json .Config.Labels}}", f"{name}-{arch}").stdout)
        wheels = json.loads(labels["torchbake.inputs"])
        assert [w for w in wheels if w.startswith("numpy-")] == [
            next(w for w in wheels if w.startswith("numpy-") and w.endswith(f"_{machine}.whl"))]
        assert f"Built {name}-{arch}" in result.stdout
    assert result.stdout.count("verify torchbake-test/platforms:torchbake-candidate-") == 2
    assert f"Joined {name} (linux/amd64, linux/arm64)" in result.stdout


def test_the_arm64_wheels_are_unpacked_on_this_machine_not_emulated(two_platform_image):
    name, result, _ = two_platform_image
    log = Path(next(line.rsplit("(log: ", 1)[1].rstrip(")") for line in result.stdout.splitlines()
                    if line.startswith(f"Built {name}-arm64")))
    text = log.read_text()
    assert "staged 1 wheels for manylinux_2_28_aarch64 with uv on x86_64" in text  # numpy's stage
    assert "staged 1 wheels for manylinux_2_28_aarch64 with uv on aarch64" not in text


def test_nothing_changed_means_both_platforms_unchanged_and_the_same_tag_digest(two_platform_image, tb_env):
    name, _, args = two_platform_image
    before = docker("image", "inspect", "--format", "{{.Id}}", name).stdout.strip()
    again = run_invoke(*args, env=tb_env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("unchanged") >= 2, again.stdout
    assert "Built " not in again.stdout
    assert docker("image", "inspect", "--format", "{{.Id}}", name).stdout.strip() == before


@pytest.mark.parametrize("typed", ["linux/s390x", "windows/amd64", "linux/arm/v7"])
def test_a_platform_torchbake_does_not_build_is_refused_before_any_work(typed, tb_env):
    result = run_invoke("build", "--release", "--platform", typed, "--dry-run", env=tb_env)
    assert result.returncode == 2
    assert f"{typed!r} is not a platform torchbake builds; accepted: linux/amd64" in result.stderr
    assert "Traceback" not in result.stderr
