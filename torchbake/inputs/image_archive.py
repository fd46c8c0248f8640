"""An image archive that ``docker load`` reads, written byte for byte from a root file system
(and an OCI image layout folder of one layer, which a build takes as a named context).

``docker import`` stamps the image with the moment of the import, so the same root file system
imported twice is two images. Written here instead, everything in the archive comes from its
inputs: the layer is a tar of the tree with its entries sorted, owners numeric and every
modification time clamped to ``SOURCE_DATE_EPOCH``; it is compressed without a timestamp; the
config's and history's times are that same time. The same tree and the same labels give the same
manifest digest (the image id with the containerd image store) on any engine.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import zstandard

from torchbake.adapters import command
from torchbake.inputs.downloads import file_sha256, link_or_copy

LAYER_TYPES = {"gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
               "zstd": "application/vnd.oci.image.layer.v1.tar+zstd",
               "uncompressed": "application/vnd.oci.image.layer.v1.tar"}
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
CHUNK = 1 << 20


def tar_command(rootfs: Path, tarball: Path, epoch: int) -> list[str]:
    """GNU tar of ``rootfs`` with nothing of the moment or the machine in it: names sorted,
    owners as numbers, modification times after ``epoch`` set to it; never crossing into a file
    system mounted below it (a /proc left mounted in a root file system is the host's)."""
    return ["tar", "--sort=name", "--numeric-owner", "--format=gnu", f"--mtime=@{epoch}", "--clamp-mtime",
            "--one-file-system",
            "-C", str(rootfs), "-cf", str(tarball), "."]


def folder_tar(folder: Path, tarball: Path) -> None:
    """A tar of the small ``folder`` (its files and folders, no links) with nothing of the moment,
    the machine or the user in it: names sorted, every entry root's, time 0, writable by its owner
    alone and readable by all, whichever umask made it: the same programs give the same layer on
    every machine. Read here, not by GNU tar, which fails on a file whose inode another build
    touches meanwhile (a kept program's access time, through the hard link)."""
    with tarfile.open(tarball, "w", format=tarfile.GNU_FORMAT) as out:
        for path in [folder, *sorted(folder.rglob("*"))]:
            name = "./" + str(path.relative_to(folder)) if path != folder else "."
            info = out.gettarinfo(str(path), name)
            executable = path.is_dir() or info.mode & 0o100
            info.mode = 0o755 if executable else 0o644
            info.uid = info.gid = info.mtime = 0
            info.uname = info.gname = ""
            if path.is_file():
                with path.open("rb") as data:
                    out.addfile(info, data)
            else:
                out.addfile(info)


def compress(source: Path, target: Path, compression: str) -> None:
    """``source`` compressed as ``compression`` into ``target``: the same bytes in, the same out
    (gzip without a name or time in its header; zstd at its default level, one frame)."""
    with source.open("rb") as raw, target.open("wb") as out:
        if compression == "gzip":
            with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as packed:
                while chunk := raw.read(CHUNK):
                    packed.write(chunk)
        elif compression == "zstd":
            zstandard.ZstdCompressor(level=3).copy_stream(raw, out, size=source.stat().st_size)
        else:
            while chunk := raw.read(CHUNK):
                out.write(chunk)


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True, kw_only=True)
class ImageSpec:
    """What the archive's one image is besides its layer."""

    reference: str  # the name ``docker load`` gives it
    epoch: int  # SOURCE_DATE_EPOCH: the config's and history's time, and the files' latest
    created_by: str  # the history entry: how the layer was made
    compression: str  # of the layer: zstd, gzip or uncompressed ([build] compression)
    env: Sequence[str] = ()
    cmd: Sequence[str] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    architecture: str = "amd64"


def _image_blobs(tarball: Path, layer: Path, image: ImageSpec) -> tuple[bytes, bytes, str]:
    """The config and the manifest of the one-layer image ``tarball`` (its layer compressed into
    ``layer``), and the layer's digest."""
    compress(tarball, layer, image.compression)
    layer_digest = "sha256:" + file_sha256(layer)
    created = datetime.fromtimestamp(image.epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    config = _json({
        "architecture": image.architecture, "os": "linux", "created": created,
        "config": {"Env": list(image.env), "Cmd": list(image.cmd), "Labels": dict(image.labels)},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + file_sha256(tarball)]},
        "history": [{"created": created, "created_by": image.created_by}],
    })
    manifest = _json({
        "schemaVersion": 2, "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": len(config),
                   "digest": _digest(config)},
        "layers": [{"mediaType": LAYER_TYPES[image.compression], "size": layer.stat().st_size,
                    "digest": layer_digest}],
    })
    return config, manifest, layer_digest


def write_archive(tarball: Path, archive: Path, image: ImageSpec) -> str:
    """An OCI image layout archive at ``archive`` holding one image of the one layer ``tarball``;
    returns the manifest's digest."""
    return write_platforms_archive(archive, image.reference, [(tarball, image)])


def write_platforms_archive(archive: Path, reference: str, images: Sequence[tuple[Path, ImageSpec]]) -> str:
    """An OCI image layout archive at ``archive`` naming ``reference``: one image per
    (layer tarball, spec) of ``images``. One image is its manifest; several (one per platform,
    each spec's ``architecture``) are an image index holding their manifests in the order given,
    as a multi-platform image is. Returns the digest ``reference`` will have (its image id)."""
    epoch = images[0][1].epoch
    blobs: list[bytes] = []
    layers: dict[Path, str] = {}  # compressed layer → its digest
    descriptors: list[dict] = []
    try:
        for number, (tarball, image) in enumerate(images):
            layer = archive.with_suffix(f".layer{number}")
            layers[layer] = ""  # removed at the end, made or not
            config, manifest, layers[layer] = _image_blobs(tarball, layer, image)
            blobs += [config, manifest]
            descriptors.append({"mediaType": MANIFEST_TYPE, "size": len(manifest), "digest": _digest(manifest),
                                "platform": {"architecture": image.architecture, "os": "linux"}})
        if len(descriptors) == 1:
            top = {key: value for key, value in descriptors[0].items() if key != "platform"}
        else:
            inner = _json({"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": descriptors})
            blobs.append(inner)
            top = {"mediaType": INDEX_TYPE, "size": len(inner), "digest": _digest(inner)}
        index = _json({
            "schemaVersion": 2, "mediaType": INDEX_TYPE,
            "manifests": [{**top, "annotations": {"io.containerd.image.name": containerd_name(reference),
                                                  "org.opencontainers.image.ref.name": reference.rsplit(":", 1)[-1]}}],
        })
        with tarfile.open(archive, "w", format=tarfile.GNU_FORMAT) as out:
            _add_bytes(out, "oci-layout", _json({"imageLayoutVersion": "1.0.0"}), epoch)
            _add_bytes(out, "index.json", index, epoch)
            for blob in blobs:
                _add_bytes(out, "blobs/sha256/" + hashlib.sha256(blob).hexdigest(), blob, epoch)
            written = set()
            for layer, digest in layers.items():
                name = "blobs/sha256/" + digest.split(":", 1)[1]
                if name in written:  # the same tree twice: one blob
                    continue
                written.add(name)
                info = out.gettarinfo(str(layer), name)
                info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
                with layer.open("rb") as fh:
                    out.addfile(info, fh)
    finally:
        for layer in layers:
            layer.unlink(missing_ok=True)
    return top["digest"]


def write_layout(layer: Path, layout: Path, architecture: str, tag: str) -> str:
    """An OCI image layout folder at ``layout`` (new) holding one image whose one layer is the
    uncompressed tar ``layer``, hard-linked in as its blob where the file system allows; nothing of
    the moment in it, so the same layer gives the same manifest, named ``tag``. Returns the manifest's
    digest, by which a build names it (``--build-context NAME=oci-layout://LAYOUT:TAG@DIGEST``): the engine
    reads a blob it already holds from its own store, not again from the folder."""
    layer_digest = "sha256:" + file_sha256(layer)
    config = _json({"architecture": architecture, "os": "linux",
                    "rootfs": {"type": "layers", "diff_ids": [layer_digest]}})
    manifest = _json({
        "schemaVersion": 2, "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": len(config),
                   "digest": _digest(config)},
        "layers": [{"mediaType": LAYER_TYPES["uncompressed"], "size": layer.stat().st_size, "digest": layer_digest}],
    })
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    link_or_copy(layer, blobs / layer_digest.split(":", 1)[1])
    for blob in (config, manifest):
        (blobs / hashlib.sha256(blob).hexdigest()).write_bytes(blob)
    (layout / "oci-layout").write_bytes(_json({"imageLayoutVersion": "1.0.0"}))
    (layout / "index.json").write_bytes(_json({"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": [
        {"mediaType": MANIFEST_TYPE, "size": len(manifest), "digest": _digest(manifest),
         "annotations": {"org.opencontainers.image.ref.name": tag}}]}))
    return _digest(manifest)


def _digest(blob: bytes) -> str:
    return "sha256:" + hashlib.sha256(blob).hexdigest()


def containerd_name(reference: str) -> str:
    """``reference`` as containerd names images: with its registry and, for Docker Hub's
    official images, ``library/`` (``debian:bookworm`` → ``docker.io/library/debian:bookworm``)."""
    first = reference.split("/", 1)[0]
    if "/" in reference and ("." in first or ":" in first or first == "localhost"):
        return reference
    return f"docker.io/{reference if '/' in reference else 'library/' + reference}"


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes, epoch: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), epoch, 0o644
    archive.addfile(info, io.BytesIO(data))


def pack(rootfs: Path, work: Path, image: ImageSpec) -> tuple[Path, str]:
    """``rootfs`` as a loadable archive in ``work``; returns the archive and the manifest digest
    the engine will give the image."""
    return pack_platforms([(rootfs, image)], work, image.reference)


def pack_platforms(roots: Sequence[tuple[Path, ImageSpec]], work: Path, reference: str) -> tuple[Path, str]:
    """One root file system per platform as one loadable archive in ``work`` naming
    ``reference`` (an image index when there are several); returns the archive and the digest
    the engine will give the image."""
    archive = work / "image.oci.tar"
    tarballs = [work / f"rootfs{number}.tar" for number in range(len(roots))]
    try:
        for (rootfs, image), tarball in zip(roots, tarballs, strict=True):
            command.run(tar_command(rootfs, tarball, image.epoch))
        return archive, write_platforms_archive(archive, reference, list(zip(tarballs, [s for _, s in roots], strict=True)))
    finally:
        for tarball in tarballs:
            tarball.unlink(missing_ok=True)
