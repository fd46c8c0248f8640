"""One image published with ``invoke build --push``: the image, its SBOMs and its provenance in a
real local registry, read back with skopeo (a client nobody here wrote)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess

from tests.conftest import run_invoke

from .helpers import docker

SKOPEO = ["skopeo", "--override-os", "linux", "inspect", "--raw", "--tls-verify=false"]
ARTIFACTS = ["application/spdx+json", "application/vnd.cyclonedx+json", "application/vnd.in-toto+json"]


def skopeo(*argv: str) -> str:
    done = subprocess.run([*SKOPEO, *argv], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_build_push_publishes_one_image_with_its_attestations(registry, base_image, tiny_profile, tb_env, run_id):
    name = f"torchbake-test/solo-{run_id}"
    image = f"{registry}/team/{name}:1"
    args = ("build", "--config", str(tiny_profile), "--base-img", base_image, "--name", name, "--tag", "1",
            "--registry", f"{registry}/team", "--push")
    try:
        first = run_invoke(*args, env=tb_env)
        assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
        pushed = re.search(rf"pushed {re.escape(image)}@(sha256:[0-9a-f]{{64}})", first.stdout)
        assert pushed, first.stdout[-2000:]
        digest = pushed.group(1)
        assert hashlib.sha256(skopeo(f"docker://{image}").encode()).hexdigest() == digest.split(":")[1]
        referrers = json.loads(skopeo(f"docker://{image.rsplit(':', 1)[0]}:{digest.replace(':', '-')}"))
        assert sorted(m["artifactType"] for m in referrers["manifests"]) == ARTIFACTS
        # the inputs tag names the same image, so that a machine that never saw it finds it by its inputs
        tags = json.loads(skopeo(f"docker://{image}", "--config"))["config"]["Labels"]
        assert tags["torchbake.input-hash"]
        # a second run: the registry already holds this image; nothing is pushed again, the digest is said
        second = run_invoke(*args, env=tb_env)
        assert second.returncode == 0, (second.stdout + second.stderr)[-3000:]
        assert "unchanged" in second.stdout and f"pushed {image}@{digest}" in second.stdout
    finally:
        docker("image", "rm", "--force", image, check=False)


def test_push_of_an_image_that_names_no_registry_is_refused_before_any_work(tiny_profile, tb_env, run_id):
    result = run_invoke("build", "--config", str(tiny_profile), "--name", f"torchbake-test/nowhere-{run_id}", "--push",
                        env=tb_env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"--push: torchbake-test/nowhere-{run_id}:" in result.stderr and "names no registry" in result.stderr
    assert "--registry HOST[:PORT][/PATH]" in result.stderr
    assert docker("image", "ls", "--quiet", f"torchbake-test/nowhere-{run_id}").stdout.strip() == ""
