"""Bad input fails fast through the real CLI: a clear message naming the bad value and what is
accepted, no traceback, and nothing created or changed (images, containers, caches, contexts)."""

from __future__ import annotations


from tests.conftest import run_invoke

from .helpers import container_ids, image_ids

CPU = ("--config", "configs/cpu.toml")


def cases(base_image: str, tmp_path):
    user_dir = tmp_path / "my-files"
    user_dir.mkdir()
    (user_dir / "notes.txt").write_text("mine")
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text('[wheels]\ntorch_url = "torch==2.13.0"\n')
    return [
        (["build", *CPU, "--python", "3.7", "--base-img", base_image],
         "python.version = '3.7' (from command line) is invalid: supported Python versions are 3.8"),
        (["build", *CPU, "--python", "3.10", "--base-img", base_image],
         f"Python 3.10 was requested, but the base image {base_image} is debian 12, whose OS Python is 3.11"),
        (["build", *CPU, "--base-img", "torchbake-test/no-such-base:1"],
         "Base image 'torchbake-test/no-such-base:1' (--base-img) does not exist on this engine. Make one offline with `invoke bootstrap-os"),
        (["build", *CPU, "--name", "Bad Name", "--base-img", base_image],
         "image.name = 'Bad Name' (from command line) is invalid: expected an image name"),
        (["build", *CPU, "--tag", "-x", "--base-img", base_image], "image.tag = '-x' (from command line) is invalid"),
        (["build", *CPU, "--config", str(bad_toml)], "unknown option 'wheels.torch_url'. Did you mean 'torch'?"),
        (["build", *CPU, "--torch-whl-url", "ftp://example.invalid/torch.whl"],
         "wheels.torch = 'ftp://example.invalid/torch.whl' (from command line) is invalid: expected an http://, https:// or file:// URL"),
        (["build", "--config", "configs/musa.toml", "-r", "--torch-whl-url", "torch==2.13.0"],
         "wheels.extension is not set"),
        (["build", "--config", "configs/musa.toml"],
         "toolkits.musa_toolkits_url is not set, but the musa profile needs that toolkit. Set it with --musa-toolkits-url"),
        (["build", *CPU, "--base-img", base_image, "--build-dir", str(user_dir)],
         f"--build-dir {user_dir} holds files torchbake did not put there; refusing to overwrite them."),
        (["build", *CPU, "--base-img", base_image, "--no-prepare"], "--no-prepare reuses a context prepared earlier"),
        (["build", *CPU, "--base-img", base_image, "--build-dir", str(tmp_path / "empty"), "--no-prepare"],
         "is not a context torchbake prepared"),
        (["build", *CPU, "--docker", "/no/such/docker"], "Docker client '/no/such/docker' (build.docker / --docker) was not found"),
        (["build", "--name", "a/b", "--base-img", base_image], "is not a torchbake base image"),
        (["build", "--config", "configs/nope.toml"], "Config file configs/nope.toml does not exist."),
        (["verify", "torchbake-test/no-such-image:1"], "Image 'torchbake-test/no-such-image:1' does not exist on this engine."),
        (["bootstrap-os", "--suite", "bookwurm", "--name", "torchbake-test/x:1"], "--suite 'bookwurm' is not a suite this debootstrap knows."),
        (["bootstrap-os", "--name", "Bad:Name"], "--name 'Bad:Name' is not a valid image reference"),
        (["show-config", "--config", str(bad_toml)], "Did you mean 'torch'?"),
    ]


def test_bad_inputs_fail_before_any_work(base_image, tb_env, cache_dir, tmp_path):
    images, containers = image_ids(), container_ids()
    contexts = cache_dir / "contexts"
    before = sorted(p.name for p in contexts.iterdir()) if contexts.exists() else []
    failures = []
    for args, message in cases(base_image, tmp_path):
        result = run_invoke(*args, env=tb_env)
        output = result.stdout + result.stderr
        if result.returncode == 0 or "Traceback" in output or message not in output or "+ /usr/bin/docker build" in output:
            failures.append(f"{args}: rc={result.returncode}\n{output[-1500:]}")
    assert not failures, "\n\n".join(failures)
    assert image_ids() == images
    assert container_ids() == containers
    assert (sorted(p.name for p in contexts.iterdir()) if contexts.exists() else []) == before
    assert (tmp_path / "my-files" / "notes.txt").read_text() == "mine"
    assert not (tmp_path / "empty").exists()
