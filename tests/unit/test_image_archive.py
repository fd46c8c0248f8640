"""The base OS image written as an archive: the same tree gives the same bytes and digest,
whenever and wherever it is packed; what debootstrap writes of the moment is cleared first."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile

import pytest

from torchbake.building.reproducible import layer_tar
from torchbake.inputs import base_os, image_archive

SPEC = image_archive.ImageSpec(reference="debian:bookworm", epoch=1700000000, created_by="debootstrap bookworm",
                               compression="zstd", env=["PATH=/usr/bin:/bin"], cmd=["/bin/bash"],
                               labels={"torchbake.bootstrap.suite": "bookworm"})


def make_tree(root, stamp):
    (root / "etc").mkdir(parents=True)
    (root / "etc/os-release").write_text("ID=debian\n")
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/tool").write_text("#!/bin/sh\n")
    os.chmod(root / "usr/bin/tool", 0o755)
    (root / "usr/bin/sh").symlink_to("tool")
    for path in (root / "etc/os-release", root / "usr/bin/tool", root / "usr/bin", root / "etc", root):
        os.utime(path, (stamp, stamp))
    return root


def packed(tmp_path, name, stamp, spec=SPEC):
    work = tmp_path / name
    root = make_tree(work / "rootfs", stamp)
    return image_archive.pack(root, work, spec)


def test_the_same_tree_packed_at_other_times_is_the_same_archive_and_digest(tmp_path):
    (first, digest), (second, again) = packed(tmp_path, "a", 1800000000), packed(tmp_path, "b", 1900000000)
    assert digest == again
    assert hashlib.sha256(first.read_bytes()).digest() == hashlib.sha256(second.read_bytes()).digest()
    assert not (tmp_path / "a/rootfs.tar").exists()  # the uncompressed tarball is not left behind


def test_a_changed_file_or_label_is_another_digest(tmp_path):
    _, digest = packed(tmp_path, "a", 1800000000)
    work = tmp_path / "b"
    root = make_tree(work / "rootfs", 1800000000)
    (root / "etc/os-release").write_text("ID=debian\nVERSION=12\n")
    assert image_archive.pack(root, work, SPEC)[1] != digest
    relabelled = image_archive.ImageSpec(**{**SPEC.__dict__, "labels": {"torchbake.bootstrap.suite": "trixie"}})
    assert packed(tmp_path, "c", 1800000000, relabelled)[1] != digest


@pytest.mark.parametrize("compression", ["zstd", "gzip", "uncompressed"])
def test_the_archive_is_an_oci_layout_whose_digests_hold(tmp_path, compression):
    spec = image_archive.ImageSpec(**{**SPEC.__dict__, "compression": compression})
    archive, digest = packed(tmp_path, compression, 1800000000, spec)
    with tarfile.open(archive) as outer:
        def blob(name):
            return outer.extractfile("blobs/sha256/" + name.split(":", 1)[1]).read()
        index = json.load(outer.extractfile("index.json"))
        entry = index["manifests"][0]
        assert entry["digest"] == digest
        assert entry["annotations"]["io.containerd.image.name"] == "docker.io/library/debian:bookworm"
        manifest = json.loads(blob(digest))
        assert "sha256:" + hashlib.sha256(blob(digest)).hexdigest() == digest
        config = json.loads(blob(manifest["config"]["digest"]))
        assert config["created"] == "2023-11-14T22:13:20Z" and config["config"]["Cmd"] == ["/bin/bash"]
        assert manifest["layers"][0]["mediaType"] == image_archive.LAYER_TYPES[compression]
        layer = blob(manifest["layers"][0]["digest"])
        assert manifest["layers"][0]["digest"] == "sha256:" + hashlib.sha256(layer).hexdigest()
        tar_bytes = layer_tar(outer.extractfile("blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1])).read()
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(tar_bytes).hexdigest()]
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as layer_tarfile:
        members = layer_tarfile.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert {m.mtime for m in members} == {1700000000}  # clamped: every file was newer
    assert next(m for m in members if m.name == "./usr/bin/tool").mode == 0o755
    assert next(m for m in members if m.name == "./usr/bin/sh").linkname == "tool"


@pytest.mark.parametrize(("reference", "name"), [
    ("debian:bookworm", "docker.io/library/debian:bookworm"),
    ("torchbake/debian:bookworm", "docker.io/torchbake/debian:bookworm"),
    ("127.0.0.1:5000/team/debian:12", "127.0.0.1:5000/team/debian:12"),
    ("localhost/debian:12", "localhost/debian:12"),
])
def test_containerd_names_images_with_their_registry(reference, name):
    assert image_archive.containerd_name(reference) == name


def test_trim_clears_what_debootstrap_writes_of_the_moment_and_host(tmp_path):
    root = tmp_path
    for name in ("var/log/dpkg.log", "var/log/apt/history.log", "etc/hostname", "var/cache/ldconfig/aux-cache",
                 "var/cache/apt/archives/x.deb", "var/lib/apt/lists/deb.debian.org_Packages", "var/log/apt/eipp.log.xz"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("2026-11-24 19:00:00 status installed\n")
    (root / "etc/shadow").write_text("root:*:20416:0:99999:7:::\nnobody:!::0:99999:7:::\n")
    base_os._trim(root, 1700000000)
    assert (root / "var/log/dpkg.log").read_text() == "" and (root / "etc/hostname").read_text() == ""
    assert (root / "var/log/apt/history.log").read_text() == ""
    for gone in ("var/cache/ldconfig/aux-cache", "var/cache/apt/archives/x.deb",
                 "var/lib/apt/lists/deb.debian.org_Packages", "var/log/apt/eipp.log.xz"):
        assert not (root / gone).exists()
    assert (root / "etc/shadow").read_text() == "root:*:19675:0:99999:7:::\nnobody:!::0:99999:7:::\n"


def test_a_mirrors_credentials_are_not_in_the_image():
    spec = base_os.OsImageSpec(suite="bookworm", name="debian:bookworm", mirror="https://user:s3cret@mirror.example/debian")
    image = base_os.image_spec(spec)
    assert "s3cret" not in json.dumps(image.labels) + image.created_by
    assert image.labels["torchbake.bootstrap.mirror"] == "https://user:***@mirror.example/debian"
