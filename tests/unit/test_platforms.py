"""Platforms as users type them, what each build of a multi-platform image gets, and the checks
made before any slow work (emulation registered, names accepted)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from torchbake.building import platform_builds
from torchbake.configuration import platforms
from torchbake.core.errors import ConfigurationError
from torchbake.inputs import image_archive
from torchbake.planning import config


@pytest.mark.parametrize("typed", ["linux/arm64", "arm64", "aarch64", "AARCH64", "linux/arm64/v8", " arm64 "])
def test_every_spelling_of_arm64_is_linux_arm64(typed):
    assert platforms.parse(typed).name == "linux/arm64"


@pytest.mark.parametrize("typed", ["linux/amd64", "amd64", "x86_64", "x86-64"])
def test_every_spelling_of_amd64_is_linux_amd64(typed):
    assert platforms.parse(typed).name == "linux/amd64"


@pytest.mark.parametrize("typed", ["linux/s390x", "windows/amd64", "linux/arm/v7", "arm", ""])
def test_anything_else_is_refused_naming_what_is_accepted(typed):
    with pytest.raises(ValueError) as error:
        platforms.parse(typed)
    assert repr(typed) in str(error.value)
    assert "accepted: linux/amd64 (or amd64, x86_64); linux/arm64 (or arm64, aarch64)" in str(error.value)


def test_the_platforms_of_a_build_are_listed_once_in_one_order_whatever_order_they_were_given_in():
    assert [p.name for p in platforms.parse_all(["arm64,amd64", "aarch64"])] == ["linux/amd64", "linux/arm64"]
    with pytest.raises(ValueError, match="empty platform name"):
        platforms.parse_all(["amd64,"])


def test_an_arm64_image_gets_arm64_wheels_unless_the_team_named_its_own_tags():
    arm64 = platforms.parse("arm64")
    assert platforms.wheel_tags_for(arm64, ["manylinux_2_28_x86_64", "linux_x86_64"]) == [
        "manylinux_2_28_aarch64", "linux_aarch64"]
    assert platforms.wheel_tags_for(arm64, ["manylinux_2_17_aarch64"]) == ["manylinux_2_17_aarch64"]


def _handler(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "status").write_text("enabled\n")
    (folder / "qemu-aarch64").write_text(text)
    return folder


def test_emulation_needs_binfmt_mounted_a_qemu_handler_enabled_and_the_f_flag(tmp_path):
    arm64 = platforms.parse("arm64")
    assert "binfmt_misc is not mounted" in platforms.emulation_handler(arm64, tmp_path / "absent")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "status").write_text("enabled\n")
    assert "no QEMU handler for aarch64" in platforms.emulation_handler(arm64, empty)
    disabled = _handler(tmp_path / "disabled", "disabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: PF\n")
    assert "is disabled" in platforms.emulation_handler(arm64, disabled)
    no_f = _handler(tmp_path / "no-f", "enabled\ninterpreter /usr/bin/qemu-aarch64-static\nflags: \n")
    assert "without the F flag" in platforms.emulation_handler(arm64, no_f)
    good = _handler(tmp_path / "good", "enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: PF\n")
    assert platforms.emulation_handler(arm64, good) == ""


def _settings(**values):
    resolved = config.resolve([], {}, values, variant="release")
    return resolved.settings()


def test_each_platform_of_several_is_built_under_its_own_tag_with_its_own_wheels():
    settings = _settings(**{"image.platforms": ["arm64", "amd64"], "wheels.torch": "torch==2.13.0"})
    builds = platform_builds.per_platform(settings)
    assert [(p.name, s.image.tag, s.image.platforms, s.wheels.platforms) for p, s in builds] == [
        ("linux/amd64", "2.13.0-py3.11-amd64", ("linux/amd64",), ("manylinux_2_28_x86_64", "linux_x86_64")),
        ("linux/arm64", "2.13.0-py3.11-arm64", ("linux/arm64",), ("manylinux_2_28_aarch64", "linux_aarch64")),
    ]


def test_one_platform_keeps_the_tag_and_no_platform_keeps_the_settings():
    one = _settings(**{"image.platforms": ["aarch64"], "wheels.torch": "torch==2.13.0"})
    [(platform, settings)] = platform_builds.per_platform(one)
    assert (platform.name, settings.image.tag, settings.wheels.platforms) == (
        "linux/arm64", "2.13.0-py3.11", ("manylinux_2_28_aarch64", "linux_aarch64"))
    none = _settings(**{"wheels.torch": "torch==2.13.0"})
    assert platform_builds.per_platform(none) == [(None, none)]


def test_the_join_takes_each_platforms_image_as_it_is_and_records_no_provenance(tmp_path):
    amd64, arm64 = platforms.PLATFORMS
    images = [(amd64, "t/x:1-amd64"), (arm64, "t/x:1-arm64")]
    assert platform_builds.join_dockerfile(images) == (
        "FROM t/x:1-amd64 AS amd64\nFROM t/x:1-arm64 AS arm64\nFROM ${TARGETARCH}\n")
    argv = platform_builds.join_command("docker", "", "t/x:1", images, "zstd", tmp_path / "Dockerfile", tmp_path)
    assert argv[:4] == ["docker", "buildx", "build", "--progress=plain"]
    assert "--provenance=false" in argv and argv[argv.index("--platform") + 1] == "linux/amd64,linux/arm64"
    assert "--output=type=image,name=t/x:1,compression=zstd,oci-mediatypes=true,force-compression=true" in argv


def test_a_foreign_platform_without_emulation_is_refused_before_any_build(monkeypatch):
    arm64 = platforms.parse("arm64")
    monkeypatch.setattr(platforms, "host", lambda: platforms.parse("amd64"))
    monkeypatch.setattr(platforms, "emulation_handler", lambda platform: "binfmt_misc is not mounted at /x")
    with pytest.raises(ConfigurationError, match=r"Cannot build for linux/arm64 on this x86_64 host: binfmt_misc"):
        platform_builds.check_can_build(arm64, "")
    platform_builds.check_can_build(arm64, "remote-builder")  # its nodes are BuildKit's to know
    platform_builds.check_can_build(platforms.parse("amd64"), "")


def test_an_os_image_of_two_platforms_is_one_index_of_two_manifests(tmp_path):
    layer = tmp_path / "rootfs.tar"
    with tarfile.open(layer, "w") as tar:
        info = tarfile.TarInfo("etc/hostname")
        tar.addfile(info)
    spec = image_archive.ImageSpec(reference="debian:bookworm", epoch=1700000000, created_by="debootstrap",
                                   compression="gzip")
    arm = image_archive.ImageSpec(**{**spec.__dict__, "architecture": "arm64"})
    archive = tmp_path / "image.oci.tar"
    digest = image_archive.write_platforms_archive(archive, "debian:bookworm", [(layer, spec), (layer, arm)])
    with tarfile.open(archive) as tar:
        top = json.load(tar.extractfile("index.json"))["manifests"][0]
        inner = json.load(tar.extractfile("blobs/sha256/" + digest.split(":")[1]))
    assert top["mediaType"] == image_archive.INDEX_TYPE and top["digest"] == digest
    assert [m["platform"] for m in inner["manifests"]] == [{"architecture": "amd64", "os": "linux"},
                                                          {"architecture": "arm64", "os": "linux"}]
    single = image_archive.write_archive(layer, tmp_path / "one.oci.tar", spec)
    assert single == inner["manifests"][0]["digest"]  # one platform: its manifest, the same as inside the index


def test_the_registry_join_writes_the_index_buildkit_writes_byte_for_byte():
    """Two images BuildKit joined on this engine (docker 26.1.5, buildx 0.13.1): the index it
    stored had this digest; a registry join of the same manifests must have the same."""
    import hashlib

    from torchbake.building.platform_builds import index_document
    manifest = "application/vnd.oci.image.manifest.v1+json"
    entries = [(platforms.parse("arm64"), {"mediaType": manifest, "size": 2008, "digest":
                "sha256:a59eceac3828eb428ed67d5c50d0ec68bdcc36c7e4de397b2eb5a6d36e9f4789"}),
               (platforms.parse("amd64"), {"mediaType": manifest, "size": 2008, "digest":
                "sha256:a81a7bd313ec6929656b46964e70de8962496c942cfba88b49d08dc924a5aa99"})]
    assert hashlib.sha256(index_document(entries)).hexdigest() == (
        "7d56d6b7c9062dd72c2413a42e56eb7c1f4cb8ea1e170f3d98d189f34dec543f")


@pytest.mark.parametrize(("name", "builder", "wheels", "says"), [
    ("linux/arm64", "", True, "emulated on this x86_64 host (QEMU) for the OS packages and verify only"),
    ("linux/arm64", "", False, "emulated on this x86_64 host (QEMU): expect ~10x the native time"),
    ("linux/arm64", "fleet", False, "on builder fleet's aarch64 node where it has one"),
    ("linux/amd64", "", False, "native on this x86_64 host"),
])
def test_plans_say_where_each_platform_builds(monkeypatch, name, builder, wheels, says):
    monkeypatch.setattr(platforms, "host", lambda: platforms.parse("amd64"))
    assert says in platforms.how_built(name, builder, from_wheels=wheels)


def test_each_platform_gets_the_arch_list_its_torch_wheel_was_built_with():
    settings = _settings(**{"image.platforms": ["amd64", "arm64"], "wheels.torch": "torch==2.13.0",
                            "accelerator.torch_cuda_arch_list": "7.5;8.0;9.0",
                            "accelerator.platform_arch_lists": {"aarch64": "8.0;9.0;10.0;11.0;12.0+PTX"}})
    assert [(p.name, s.accelerator.torch_cuda_arch_list) for p, s in platform_builds.per_platform(settings)] == [
        ("linux/amd64", "7.5;8.0;9.0"), ("linux/arm64", "8.0;9.0;10.0;11.0;12.0+PTX")]


@pytest.mark.parametrize(("value", "said"), [
    ({"linux/s390x": "9.0"}, "'linux/s390x' is not a platform torchbake builds"),
    ({"arm64": "sm_90"}, "expected compute capabilities"),
    ("9.0", "has the wrong type; expected a table of strings"),
])
def test_bad_platform_arch_lists_are_refused_naming_the_value(value, said):
    with pytest.raises(ConfigurationError) as info:
        _settings(**{"accelerator.platform_arch_lists": value})
    assert said in str(info.value) and "accelerator.platform_arch_lists" in str(info.value)


def test_a_multi_platform_from_image_counts_by_its_index_for_the_other_platforms_build():
    """The engine inspects a two-platform image as its own platform's: the other platform's
    build counts the index digest too, so a change to that platform's image changes its inputs."""
    from torchbake.adapters.engine import content_id
    inspected = {"Id": "sha256:" + "a" * 64, "Architecture": "amd64", "RootFS": {"Layers": ["sha256:" + "1" * 64]},
                 "Config": {"Env": ["PATH=/usr/bin"]}}
    own = content_id(inspected, "linux/amd64")
    assert own == content_id(inspected) == content_id({**inspected, "Id": "sha256:" + "b" * 64}, "linux/amd64")
    other = content_id(inspected, "linux/arm64")
    assert other != own and other.startswith("sha256:") and len(other) == 71
    assert content_id({**inspected, "Id": "sha256:" + "b" * 64}, "linux/arm64") != other
