"""Options derived when nobody set them: names and tags, FROM images, the profile's torch."""

from __future__ import annotations

import pytest

from torchbake.configuration import derived, os_releases
from torchbake.core.errors import ConfigurationError
from torchbake.planning import config


def resolved(variant=None, files=(), **overrides):
    return config.resolve([config.CONFIG_DIR / f for f in files], {}, overrides, variant=variant)


@pytest.mark.parametrize(("variant", "python", "image", "base"), [
    ("base", "3.10", "torchbake/pytorch-cpu:base-py3.10", None),
    ("dev", "3.10", "torchbake/pytorch-cpu:dev-py3.10", "torchbake/pytorch-cpu:base-py3.10"),
    ("release", "3.11", "torchbake/pytorch-cpu:2.13.0-py3.11", "debian:bookworm"),
    ("release", "3.13", "torchbake/pytorch-cpu:2.13.0-py3.13", "debian:trixie"),
])
def test_names_tags_and_from_images_follow_variant_and_python(variant, python, image, base):
    found = resolved(variant, **{"python.version": python})
    settings = found.settings()
    assert settings.image.reference == image
    assert found.sources["image.name"] == "derived from [naming] name"
    assert found.sources["image.tag"] == f"derived from [naming] {variant}_tag"
    if base:
        assert settings.image.base == base and found.sources["image.base"].startswith("derived from")


def test_build_base_and_dev_meet_without_flags():
    base = resolved("base", **{"python.version": "3.10"}).settings()
    dev = resolved("dev", **{"python.version": "3.10"}).settings()
    assert dev.image.base == base.image.reference
    assert base.base.sys == "ubuntu:22.04"


def test_given_values_are_never_replaced():
    settings = resolved("release", **{"image.name": "me/torch", "image.base": "my/os:1", "wheels.torch": "torch==2.6.0"}).settings()
    assert settings.image.reference == "me/torch:latest"  # a name without a tag: latest, as before
    assert settings.image.base == "my/os:1" and settings.wheels.torch == "torch==2.6.0"
    tagged = resolved("release", **{"image.tag": "nightly"}).settings()
    assert tagged.image.reference == "torchbake/pytorch-cpu:nightly"


def test_profile_templates_and_default_torch():
    musa = resolved("dev", ["musa.toml"]).settings()
    assert musa.image.reference == "torchbake/torch-musa:dev-py3.10"
    assert musa.image.base == "torchbake/torch-musa:base-py3.10"
    assert musa.wheels.torch == ""  # musa has no default torch: a release names it as missing
    cpu = resolved("release")
    assert cpu.values["wheels.torch"] == "torch==2.13.0"
    assert cpu.sources["wheels.torch"] == "derived from [wheels] default_torch.cpu"


def test_standalone_python_starts_from_the_default_os():
    settings = resolved("release", **{"python.version": "3.12", "python.provider": "standalone"}).settings()
    assert settings.image.base == "debian:bookworm"


@pytest.mark.parametrize(("source", "version"), [
    ("torch==2.13.0", "2.13.0"), ("torch==2.13.0+cpu", "2.13.0"), ("torch>=2", ""), ("torch", ""),
    ("https://h.example/torch-2.0.0-cp310-cp310-linux_x86_64.whl#sha256=" + "0" * 64, "2.0.0"),
    ("https://h.example/torch-2.1.0%2Bcpu-cp310-cp310-linux_x86_64.whl", "2.1.0"),
    ("https://h.example/wheels/", ""),
])
def test_torch_version_of_a_source(source, version):
    assert derived.torch_version(source) == version


def test_a_release_of_an_unversioned_torch_is_tagged_custom():
    settings = resolved("release", **{"wheels.torch": "torch>=2"}).settings()
    assert settings.image.tag == "custom-py3.11"


def test_naming_templates_are_checked():
    with pytest.raises(ConfigurationError, match=r"naming.name = 'x/{flavour}' .* unknown field 'flavour'"):
        config.resolve([], {"TORCHBAKE_NAMING_NAME": "x/{flavour}"}, {})
    with pytest.raises(ConfigurationError, match=r"\[naming\] release_tag \('-{py}'\) gives '-311', which is not usable"):
        config.resolve([], {"TORCHBAKE_NAMING_RELEASE_TAG": "-{py}"}, {}, variant="release")


@pytest.mark.parametrize(("reference", "suite", "python"), [
    ("debian:bookworm", "bookworm", "3.11"), ("debian:12", "bookworm", "3.11"), ("docker.io/library/debian:trixie", "trixie", "3.13"),
    ("ubuntu:22.04", "jammy", "3.10"), ("ubuntu:focal", "focal", "3.8"), ("debian:sid", "sid", None),
    ("nvidia/cuda:12.4.1-devel-ubuntu22.04", "", None), ("my/debian:12", "", None),
    # pinned by digest: still its release, but no suite to make (debootstrap cannot make those bytes)
    ("ubuntu:22.04@sha256:" + "a" * 64, "", "3.10"),
])
def test_os_references(reference, suite, python):
    assert os_releases.suite_of(reference) == suite
    release = os_releases.release_of_reference(reference)
    assert (release.python if release else None) == python


def test_every_python_with_an_os_image_round_trips():
    for release in os_releases.OS_RELEASES:
        assert os_releases.release_of_reference(os_releases.os_image_for_python(release.python)) == release
    assert os_releases.os_image_for_python("3.14") == ""


def test_empty_tags_and_names_are_refused():
    with pytest.raises(ConfigurationError, match=r"image.base = 'ubuntu:' \(from command line\) is invalid: the tag"
                                                 r" after ubuntu: is empty"):
        config.resolve([], {}, {"image.base": "ubuntu:"})
    with pytest.raises(ConfigurationError, match="the image name before ':' is empty"):
        config.resolve([], {}, {"base.sys": ":22.04"})
