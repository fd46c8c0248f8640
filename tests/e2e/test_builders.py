"""`--builder NAME` on real buildx builders, reached through docker contexts (the builders of
the docker driver): the current context's builds the image (its name in the build command); one
of another context (the second engine, which buildx would refuse) is refused before any work,
naming the DOCKER_CONTEXT that makes its engine the one for the whole run; a builder that does
not exist is named with `docker buildx ls`; `[build] compression = "gzip"` gives every layer gzip. Contexts live in a DOCKER_CONFIG of the test's own."""

from __future__ import annotations

import pytest

from tests.conftest import run_invoke

from .helpers import DOCKER, docker, engine_state, layer_media_types

REAL_SOCKET = "unix:///var/run/docker.sock"


@pytest.fixture
def contexts(tmp_path, second_engine):
    """A DOCKER_CONFIG holding two contexts: "tb-here" (this engine) and "tb-there" (the second)."""
    config = tmp_path / "docker-config"
    config.mkdir()
    env = {"DOCKER_CONFIG": str(config)}
    docker("context", "create", "tb-here", "--docker", f"host={REAL_SOCKET}", env=env)
    docker("context", "create", "tb-there", "--docker", f"host={second_engine['DOCKER_HOST']}", env=env)
    return env


def test_a_builder_of_this_engine_builds_one_elsewhere_is_refused_before_any_work(
        contexts, base_image, tb_env, tiny_profile, run_id):
    name = f"torchbake-test/builder-{run_id}"
    args = ("build", "--config", str(tiny_profile), "--base-img", base_image, "--name", name, "--tag", "1",
            "--no-verify", "--docker", DOCKER)
    env = {**tb_env, **contexts, "DOCKER_CONTEXT": "tb-here"}
    try:
        before = engine_state([name])
        elsewhere = run_invoke(*args, "--builder", "tb-there", env=env)
        assert elsewhere.returncode == 4, elsewhere.stdout + elsewhere.stderr
        said = elsewhere.stderr
        assert ("Builder 'tb-there' is the docker driver of context 'tb-there', and buildx builds with it only where"
                " that context is the current one (here it is 'tb-here')") in said, said
        assert "(DOCKER_CONTEXT=tb-there, DOCKER_HOST unset)" in said, said
        assert "Preparing the build context" not in elsewhere.stdout  # before any work
        assert engine_state([name]) == before

        missing = run_invoke(*args, "--builder", "tb-nosuch", env=env)
        assert missing.returncode == 4, missing.stdout + missing.stderr
        assert "No buildx builder 'tb-nosuch' ([build] builder / --builder)" in missing.stderr
        assert f"`{DOCKER} buildx ls` lists the builders" in missing.stderr

        # ... and builds here, every layer gzip-compressed when asked (for clients that cannot read zstd)
        here = run_invoke(*args, "--builder", "tb-here", env={**env, "TORCHBAKE_BUILD_COMPRESSION": "gzip"})
        assert here.returncode == 0, (here.stdout + here.stderr)[-3000:]
        assert (f"{DOCKER} buildx build --output=type=docker,compression=gzip,oci-mediatypes=true,force-compression=true"
                " --provenance=false --builder tb-here --progress=plain") in here.stdout
        assert set(layer_media_types(f"{name}:1")) == {"application/vnd.oci.image.layer.v1.tar+gzip"}
        assert docker("image", "inspect", "--format", "{{index .Config.Labels \"torchbake.variant\"}}",
                      f"{name}:1").stdout.strip() == "release"
    finally:
        docker("image", "rm", "--force", f"{name}:1", check=False)
