"""Reproducible release images on a real engine: `build --check-reproducible` passes for the
release image and, later, `verify --reproducible IMAGE` names the file a step that is not
reproducible wrote (the two share one comparison: each is run once, the no-cache build being
a minute of the suite's). (The same inputs on two engines with nothing in common push the same digest:
test_locks' fresh engine.)

The image installs the small stand-in torch (tests.e2e.helpers.make_tiny_torch) through every
step of the release Dockerfile; the real torch wheel goes through the same steps."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.conftest import run_invoke

from .conftest import TINY_PROFILE
from .helpers import docker, engine_state, labels, listing

NAME = "torchbake-test/reproducible"


def test_check_reproducible_builds_the_image_again_without_any_cache_and_gets_the_same_image_as_force_does(
        tiny_torch, packaged_base, tb_env, tmp_path, run_id):
    """Engine A builds with --check-reproducible: the same context built again without any cache
    gives the same image id; built again, the image is unchanged, and --force makes the same image
    from the layer cache. FROM the run's base with the OS packages in it: the build without any
    cache runs no apt download (an apt step run anew, on an engine with nothing in common, gives the
    same image: test_locks' fresh engine, which also pushes the same digest; a changed input changes
    the digest: test_release's diff pair, test_layers' toolkit sibling; SOURCE_DATE_EPOCH is an
    input: tests/unit/test_wheel_groups.py; `verify --reproducible` makes the same comparison later,
    from this host's record: the next test.)"""
    profile = tmp_path / "tiny.toml"
    profile.write_text(TINY_PROFILE.format(wheel=tiny_torch))
    image = f"{NAME}:{run_id}"
    try:
        args = ("build", "--config", str(profile), "--name", NAME, "--base-img", packaged_base, "--tag", run_id)
        on_a = run_invoke(*args, "--check-reproducible", env=tb_env)
        assert on_a.returncode == 0, (on_a.stdout + on_a.stderr)[-4000:]
        digest_a = docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
        assert f"Reproducible: {image} a build without any cache gave the same image {digest_a}" in on_a.stdout
        assert "org.opencontainers.image.created" not in labels(image)  # no moment of the build in the image
        # uv (38 MB, kept in the image) came as an OCI layout by its digest, not in the context the
        # engine is sent anew for every new context: each context sent here is the stand-in wheel and scripts
        log = Path(json.loads(Path(re.search(r"manifest: (\S+)\)", on_a.stdout).group(1)).read_text())["log"])
        assert "[context torchbake-uv] OCI load from client" in log.read_text()
        sent = [float(size) * {"B": 1e-6, "kB": 1e-3, "MB": 1}[unit]
                for size, unit in re.findall(r"transferring context: ([\d.]+)(B|kB|MB)", log.read_text())]
        assert sent and max(sent) < 5, sent  # megabytes

        # built again unchanged: nothing runs and nothing on the engine changes; with --force, the
        # layer cache gives the very same image and leaves no image behind
        ours = ("--filter", "dangling=true", "--filter", f"label=org.opencontainers.image.title={NAME}")
        images, dangling = engine_state([image])["images"], listing("images", "-q", *ours).split()
        unchanged = run_invoke(*args, env=tb_env)
        assert unchanged.returncode == 0, unchanged.stderr
        assert f"{image} unchanged" in unchanged.stdout and "docker build" not in unchanged.stdout
        assert engine_state([image])["images"] == images
        forced = run_invoke(*args, "--force", env=tb_env)
        assert forced.returncode == 0, forced.stdout[-3000:] + forced.stderr
        assert "docker build" in forced.stdout
        assert docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip() == digest_a
        now_dangling = listing("images", "-q", *ours).split()
        assert sorted(now_dangling) == sorted(dangling), [
            docker("image", "inspect", "--format", "{{.Id}} {{.Created}} {{json .Config.Labels}}", i).stdout[:400]
            for i in set(now_dangling) ^ set(dangling)] + [forced.stdout[-2500:]]
    finally:
        docker("image", "rm", "--force", image, check=False)


def test_verify_reproducible_names_the_files_a_step_that_is_not_reproducible_wrote(tiny_profile, packaged_base, tb_env,
                                                                                   tmp_path, run_id):
    """FROM the run's base with the OS packages in it, as the test before: the comparison's build
    without any cache runs no apt download."""
    template = tmp_path / "dockerfile.stamp"
    template.write_text((Path(__file__).parents[2] / "docker/ubuntu/dockerfile.release").read_text().replace(
        'CMD ["/bin/bash"]', 'RUN date +%s%N > /opt/stamp\nCMD ["/bin/bash"]'))
    name = f"{NAME}-stamp-{run_id}"  # a repository of this run's own: its tags are this test's alone
    image = f"{name}:stamp"
    try:
        result = run_invoke("build", "--config", str(tiny_profile), "--name", name, "--tag", "stamp",
                            "--base-img", packaged_base, "--docker-file", str(template), env=tb_env)
        assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
        built = docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
        later = run_invoke("verify", image, "--reproducible", env=tb_env)  # from this host's record of the build
        output = later.stdout + later.stderr
        assert later.returncode == 6, output[-4000:]
        assert f"{image} is not reproducible: a build of the same context without any cache gave sha256:" in output
        assert "/opt/stamp (content, modification time)" in output and "The image itself is unchanged" in output
        assert "Traceback" not in output
        assert docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip() == built
        assert listing("images", "--format", "{{.Tag}}", name).split() == ["stamp"]  # only the comparison's candidate is gone

        moved = tmp_path / "moved.toml"  # a file over the record that changes an input: nothing to compare
        moved.write_text('[image]\nenv = { TORCHBAKE_TEST_MOVED = "1" }\n')
        refused = run_invoke("verify", image, "--reproducible", "--config", str(moved), env=tb_env)
        assert refused.returncode == 6, (refused.stdout + refused.stderr)[-3000:]
        assert f"{image} cannot be built again from its inputs: they have moved since it was built" in refused.stderr
        assert "Building" not in refused.stdout + refused.stderr
    finally:
        docker("image", "rm", "--force", image, check=False)


def test_an_import_in_a_build_step_writes_no_pyc_only_the_installers_compilation_does(packaged_base, run_id):
    """uv's compile workers import what a .pth file names as they start; a .pyc an import wrote
    over the compiled one was stale once step.sh gave its source SOURCE_DATE_EPOCH's time, and a
    later step wrote it again: one image in thirty differed from its no-cache build by that file."""
    common = Path(__file__).parents[2] / "docker/common"
    script = ('mkdir /tmp/m && echo "x = 1" > /tmp/m/mod.py'
              ' && bash /opt/torchbake/common/step.sh python3 -c "import sys; sys.path.insert(0, \\"/tmp/m\\"); import mod"'
              ' && ls -A /tmp/m')
    result = docker("run", "--rm", "--name", f"torchbake-test-pyc-{run_id}", "--network", "none",
                    "-e", "SOURCE_DATE_EPOCH=1700000000", "-v", f"{common}:/opt/torchbake/common:ro",
                    packaged_base, "bash", "-c", script)
    assert result.stdout.split() == ["mod.py"], result.stdout + result.stderr
