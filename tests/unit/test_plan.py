"""Planning: every missing or impossible input is an error before any slow work."""

from __future__ import annotations

import dataclasses

import pytest

from torchbake.building import input_hash
from torchbake.configuration import settings as settings_module
from torchbake.core.errors import ConfigurationError, MissingValuesError
from torchbake.inputs.downloads import DownloadCache
from torchbake.planning import config
from torchbake.variants.common import Preflight, check_os_python, parse_os_release
from torchbake.variants.release import plan as plan_release


def settings(*files, **overrides):
    return config.resolve([config.CONFIG_DIR / f for f in files], {}, overrides).settings()


def test_cpu_profile_plans():
    plan = plan_release(settings("cpu.toml"))
    assert plan.image == "torchbake/pytorch-cpu:2.13.0-py3.11"
    assert plan.wheel_sources == {"torch": "torch==2.13.0"}
    assert plan.image_env == {}


def test_musa_profile_names_every_missing_value_and_its_flag():
    with pytest.raises(MissingValuesError) as info:
        plan_release(settings("musa.toml", **{"wheels.torch": "torch==2.13.0"}))
    assert [key for key, _ in info.value.missing] == [
        "wheels.extension", "toolkits.musa_toolkits_url", "toolkits.mudnn_url", "toolkits.mccl_url"]
    assert str(info.value).splitlines()[:2] == [
        "4 values this build needs are not set:",
        "  wheels.extension: [wheels] extension_module = 'torch_musa' names an extension to check. Set it with"
        " --torch-musa-whl-url, [wheels] extension = ... in a --config file or TORCHBAKE_WHEELS_EXTENSION.",
    ]


def test_another_profile_is_told_the_extension_flag_by_its_own_name_not_musa_s():
    """--torch-musa-whl-url is MUSA's legacy script's name for --extension-whl-url: an Ascend user
    is told the flag's own name (both spellings work everywhere)."""
    with pytest.raises(MissingValuesError) as info:
        plan_release(settings("ascend.toml", **{"wheels.torch": "torch==2.13.0"}))
    assert [key for key, _ in info.value.missing] == ["wheels.extension", "toolkits.cann_toolkit_url"]
    assert "'torch_npu' names an extension to check. Set it with --extension-whl-url, [wheels] extension" in str(info.value)
    assert "musa" not in str(info.value)


def test_musa_profile_requires_each_toolkit(tmp_path):
    wheel = tmp_path / "torch_musa-1.0-cp310-cp310-linux_x86_64.whl"
    wheel.write_bytes(b"")
    with pytest.raises(ConfigurationError) as info:
        plan_release(settings("musa.toml", **{"wheels.torch": "torch==2.13.0", "wheels.extension": str(wheel)}))
    assert "toolkits.musa_toolkits_url: the musa profile needs that toolkit." in str(info.value)
    assert "--musa-toolkits-url" in str(info.value)
    assert "TORCHBAKE_TOOLKITS_MUSA_TOOLKITS_URL" in str(info.value)


def test_cuda_profile_carries_the_arch_list_as_env():
    plan = plan_release(settings("cuda.toml", **{"wheels.torch": "torch==2.6.0"}))
    assert plan.image_env == {"TORCH_CUDA_ARCH_LIST": "7.5;8.0;8.6;8.9;9.0"}
    assert plan.arch_lists["torchbake.cuda-arch-list"] == "7.5;8.0;8.6;8.9;9.0"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"python.version": "3.14"}, "image.base is not set"),  # no OS image ships 3.14
        ({"image.name": "a/b", "image.base": "debian:12", "accelerator.profile": "rocm"}, "wheels.torch is not set"),
        ({"image.name": "a/b", "image.base": "debian:12", "wheels.torch": "torch", "python.provider": "standalone"},
         "python.standalone_url is not set"),
    ],
)
def test_missing_required_values(overrides, message):
    with pytest.raises(ConfigurationError, match=message):
        plan_release(settings(**{"build.variant": "release", **overrides}))


def test_no_prepare_needs_a_build_dir():
    with pytest.raises(ConfigurationError, match="--no-prepare reuses a context prepared earlier"):
        plan_release(settings("cpu.toml"), reuse_context=True)


def test_os_python_mismatch_is_explained():
    plan = plan_release(settings("cpu.toml", **{"python.version": "3.10", "image.base": "my/debian:12"}))
    os_release = parse_os_release('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n')
    with pytest.raises(ConfigurationError) as info:
        check_os_python(plan, os_release)
    assert str(info.value) == (
        "Python 3.10 was requested, but the base image my/debian:12 (--base-img) is debian 12, whose OS"
        " Python is 3.11. Use --python 3.11, a base image of ubuntu:22.04, or set [python] provider ="
        ' "standalone" with a standalone_url for that version.'
    )
    check_os_python(plan_release(settings("cpu.toml")), os_release)  # 3.11 on bookworm is fine


def test_a_plan_names_the_inputs_that_changed_and_the_step_a_build_runs_again_from(tmp_path):
    """input_hash.input_parts: the input hash's material part by part (an image's
    torchbake.input-parts label); the variant's INPUT_STEPS map changed parts to a step."""
    facts = Preflight(base_id="sha256:" + "0" * 64)

    def planned(**overrides):
        resolved = settings("cpu.toml", **{"paths.cache_dir": str(tmp_path), **overrides})
        plan = plan_release(resolved)
        cache = DownloadCache.for_settings(resolved, read_only=True)
        return plan, input_hash.input_parts(plan, facts, cache), input_hash.fingerprint(plan, facts, cache)

    plan, before, digest = planned()
    for overrides, changed, steps in [
        ({"wheels.torch": "torch==2.12.0"}, ["wheels.torch"], "runs again from the torch step on"),
        ({"wheels.extra": ["numpy", "packaging"]}, ["wheels.extra"], "runs again from the companions step on"),
        ({"build.compression": "gzip"}, ["build.compression"], "no step runs again; the layers are exported anew"),
        ({"image.render_gid": 7}, ["build_args.RENDER_GID", "image.render_gid"], "runs every step again"),
        ({"image.env": {"A": "1"}}, ["env", "image.env"], "runs again from the image environment step on"),
    ]:
        other, after, other_digest = planned(**overrides)
        assert other_digest != digest  # every part the input hash has is a part the label names
        found = sorted(key for key in {*before, *after} if before.get(key) != after.get(key))
        assert (found, other.steps_again(found)) == (changed, steps)
    assert plan.steps_again(["wheels.extension", "toolkits.mccl_url"]) == "runs again from the toolkits step on"
    assert plan.steps_again(["base_image_id", "wheels.extension"]) == "runs every step again"


def test_every_option_declares_which_images_it_decides_and_those_are_hashed(tmp_path):
    """settings.option's ``decides``: each option says, beside its field, which variants' image
    content its value decides; the input hash holds exactly those (an option forgotten there
    cannot happen: the declaration is what puts it in)."""
    undeclared = [f"{section}.{f.name}" for section, cls in settings_module.SECTION_TYPES.items()
                  for f in dataclasses.fields(cls) if "option" not in f.metadata]
    assert undeclared == []
    facts = Preflight(base_id="sha256:" + "0" * 64)
    resolved = settings("cpu.toml", **{"paths.cache_dir": str(tmp_path)})
    plan = plan_release(resolved)
    cache = DownloadCache.for_settings(resolved, read_only=True)
    digest = input_hash.fingerprint(plan, facts, cache)
    declared = settings_module.image_options("release")
    assert {"wheels.torch", "wheels.extra", "image.env", "build.compression", "python.installer"} <= set(declared)
    assert not {"run.shm_size", "build.verify", "image.name", "dev.git_credential_file", "base.user"} & set(declared)
    kit = tmp_path / "kit.tar.gz"
    kit.write_bytes(b"a toolkit")
    with_kit = plan_release(settings("cpu.toml", **{"paths.cache_dir": str(tmp_path), "toolkits.mccl_url": str(kit)}))
    assert input_hash.input_parts(with_kit, facts, cache)["toolkits.mccl_url"] == input_hash._digest_of(
        DownloadCache.for_settings(resolved).known_digest(str(kit)))[:12]  # a toolkit: an accelerator's, as data
    values = [key for key, input_file in declared.items() if not input_file]  # files count by digest: above
    for key in [*values, "run.shm_size", "build.verify", "image.name", "dev.git_credential_file", "base.user"]:
        other = dataclasses.replace(plan, configuration={**plan.configuration, key: ["another value"]})
        changed = input_hash.fingerprint(other, facts, cache) != digest
        assert changed == (key in declared), key


def test_how_a_toolkit_is_installed_is_in_the_input_hash(tmp_path):
    """A toolkit's install script, or a .run installer's arguments, is what its step runs: another
    one is another image (an image of no toolkit hashes as before)."""
    facts = Preflight(base_id="sha256:" + "0" * 64)
    kit = tmp_path / "kit.tar.gz"
    kit.write_bytes(b"a toolkit")
    resolved = settings("cpu.toml", **{"paths.cache_dir": str(tmp_path), "toolkits.mccl_url": str(kit)})
    cache = DownloadCache.for_settings(resolved)
    cache.known_digest(str(kit))
    plan = plan_release(resolved)
    assert plan.toolkit_scripts == {"mccl_url": "install.sh"}
    other = dataclasses.replace(plan, toolkit_scripts={"mccl_url": "--install --quiet"})
    assert input_hash.fingerprint(other, facts, cache) != input_hash.fingerprint(plan, facts, cache)
    assert plan_release(settings("cpu.toml", **{"paths.cache_dir": str(tmp_path)})).hash_inputs() == {}
