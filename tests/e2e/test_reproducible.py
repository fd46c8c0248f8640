"""Reproducible release images on real engines: the same inputs give the same digest, pushed, on
two engines with nothing in common; `build --check-reproducible` and, later, `verify --reproducible
IMAGE` pass for the release image and name the file a step that is not reproducible wrote.

The image installs the small stand-in torch (tests.e2e.helpers.make_tiny_torch) through every
step of the release Dockerfile; the real torch wheel goes through the same steps."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import run_invoke
from tests.support import registry_digest, serve_registry

from .conftest import TINY_PROFILE
from .helpers import copy_image, docker, labels, listing

NAME = "torchbake-test/reproducible"


def cached_run_steps(log: str) -> list[str]:
    """The RUN steps a BuildKit log (--progress=plain) shows as CACHED."""
    steps = dict(re.findall(r"^(#\d+) \[[^\]]+\] (RUN .*)$", log, re.MULTILINE))
    return [steps[step] for step in re.findall(r"^(#\d+) CACHED$", log, re.MULTILINE) if step in steps]


def push(image: str, target: str, engine: dict | None = None) -> None:
    for args in (("tag", image, target), ("push", target)):
        result = docker(*args, env=engine, check=False)
        assert result.returncode == 0, result.stdout + result.stderr


def test_two_engines_with_nothing_in_common_push_the_same_digest(second_engine, tiny_torch, base_image, tb_env,
                                                                  tmp_path, run_id):
    """Engine A, then `verify --reproducible` (built again without any cache, from what this host
    recorded), and engine B (empty but for the OS image, its own cache folder) build the same
    inputs: the same image id, the same digest in the registry. (A changed input changes the
    digest: test_layers' rebuilds; SOURCE_DATE_EPOCH is an input: tests/unit/test_wheel_groups.py;
    `build --check-reproducible` makes the same comparison: the next test.)"""
    profile = tmp_path / "tiny.toml"
    profile.write_text(TINY_PROFILE.format(wheel=tiny_torch) + 'network = "host"\n')  # B has no NAT
    args = ("build", "--config", str(profile), "--name", NAME, "--base-img", base_image)
    image = f"{NAME}:{run_id}"
    copy_image(base_image, second_engine)
    try:
        on_a = run_invoke(*args, "--tag", run_id, env=tb_env)
        assert on_a.returncode == 0, (on_a.stdout + on_a.stderr)[-4000:]
        digest_a = docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
        # later, from the configuration this host recorded: built again without cache, compared
        again = run_invoke("verify", image, "--reproducible", env=tb_env)
        assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
        assert f"Reproducible: {image} a build without any cache gave the same image {digest_a}" in again.stdout

        on_b = run_invoke(*args, "--tag", run_id,
                          env={**tb_env, **second_engine, "TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path / "cache-b")})
        assert on_b.returncode == 0, (on_b.stdout + on_b.stderr)[-4000:]
        assert cached_run_steps("".join(p.read_text() for p in (tmp_path / "cache-b").rglob("*.log"))) == []
        digest_b = docker("image", "inspect", "--format", "{{.Id}}", image, env=second_engine).stdout.strip()
        assert digest_b == digest_a
        assert "org.opencontainers.image.created" not in labels(image)

        with serve_registry(tmp_path) as host:
            push(image, f"{host}/team/reproducible:a")
            push(image, f"{host}/team/reproducible:b", second_engine)
            assert registry_digest(host, f"{host}/team/reproducible:a") == digest_a
            assert registry_digest(host, f"{host}/team/reproducible:b") == digest_a
    finally:
        docker("image", "rm", "--force", image, check=False)


def test_check_reproducible_names_the_files_a_step_that_is_not_reproducible_wrote(tiny_profile, base_image, tb_env,
                                                                                   tmp_path, run_id):
    template = tmp_path / "dockerfile.stamp"
    template.write_text((Path(__file__).parents[2] / "docker/ubuntu/dockerfile.release").read_text().replace(
        'CMD ["/bin/bash"]', 'RUN date +%s%N > /opt/stamp\nCMD ["/bin/bash"]'))
    name = f"{NAME}-stamp-{run_id}"  # a repository of this run's own: its tags are this test's alone
    image = f"{name}:stamp"
    try:
        result = run_invoke("build", "--config", str(tiny_profile), "--name", name, "--tag", "stamp",
                            "--base-img", base_image, "--docker-file", str(template), "--check-reproducible", env=tb_env)
        output = result.stdout + result.stderr
        assert result.returncode == 6, output[-4000:]
        assert f"{image} is not reproducible: a build of the same context without any cache gave sha256:" in output
        assert "/opt/stamp (content, modification time)" in output
        assert "Traceback" not in output
        # the image was built and verified; only the comparison's candidate is gone
        assert docker("image", "inspect", image, check=False).returncode == 0
        assert listing("images", "--format", "{{.Tag}}", name).split() == ["stamp"]

        built = docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
        later = run_invoke("verify", image, "--reproducible", env=tb_env)  # from this host's record of the build
        output = later.stdout + later.stderr
        assert later.returncode == 6, output[-4000:]
        assert f"{image} is not reproducible: a build of the same context without any cache gave sha256:" in output
        assert "/opt/stamp (content, modification time)" in output and "The image itself is unchanged" in output
        assert docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip() == built
        assert listing("images", "--format", "{{.Tag}}", name).split() == ["stamp"]

        moved = tmp_path / "moved.toml"  # a file over the record that changes an input: nothing to compare
        moved.write_text('[image]\nenv = { TORCHBAKE_TEST_MOVED = "1" }\n')
        refused = run_invoke("verify", image, "--reproducible", "--config", str(moved), env=tb_env)
        assert refused.returncode == 6, (refused.stdout + refused.stderr)[-3000:]
        assert f"{image} cannot be built again from its inputs: they have moved since it was built" in refused.stderr
        assert "Building" not in refused.stdout + refused.stderr
    finally:
        docker("image", "rm", "--force", image, check=False)
