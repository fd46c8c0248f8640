"""Whether two builds of the same inputs gave the same image, and if not, which files differ.

``invoke build --check-reproducible`` builds the image, then builds the same prepared context
again with no cache at all and compares: the same image id (with the containerd image store, the
manifest's digest, the digest a push gives) or the files that differ, layer by layer, with what
differs of each (content, modification time, mode, owner, present in one image only).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import zstandard

from torchbake.adapters.engine import DockerClient
from torchbake.adapters.registry import image_entry

NAMED = 12  # files named per comparison: enough to see the cause, short enough to read


def differences(client: DockerClient, first: str, second: str, work_dir: Path) -> list[str]:
    """What differs between images ``first`` and ``second`` (same Dockerfile, same context): the
    config's fields, then each differing layer's files, as lines to print; [] when they are equal."""
    with tempfile.TemporaryDirectory(prefix="torchbake-compare-", dir=work_dir) as tmp:
        saved = [_save(client, image, Path(tmp) / f"{index}.tar") for index, image in enumerate((first, second))]
        with tarfile.open(saved[0]) as one, tarfile.open(saved[1]) as two:
            (config_a, layers_a), (config_b, layers_b) = _image(one), _image(two)
            found = [f"config: {key} differs" for key in sorted(set(config_a) | set(config_b))
                     if key != "rootfs" and config_a.get(key) != config_b.get(key)]
            if len(layers_a) != len(layers_b):
                return [*found, f"the images have {len(layers_a)} and {len(layers_b)} layers"]
            for index, (blob_a, blob_b) in enumerate(zip(layers_a, layers_b, strict=True)):
                if blob_a == blob_b:
                    continue
                entries_a, entries_b = (_entries(archive, blob) for archive, blob in ((one, blob_a), (two, blob_b)))
                changed = sorted(name for name in set(entries_a) | set(entries_b)
                                 if entries_a.get(name) != entries_b.get(name))
                found.append(f"layer {index + 1}: {len(changed)} of {len(entries_a)} files differ")
                found += [f"  /{name} ({_what_differs(entries_a.get(name), entries_b.get(name))})"
                          for name in changed[:NAMED]]
                if len(changed) > NAMED:
                    found.append(f"  ... and {len(changed) - NAMED} more")
            return found


FIELDS = ("content", "modification time", "mode", "owner", "link target")


def _what_differs(a: tuple | None, b: tuple | None) -> str:
    if a is None or b is None:
        return f"only in the {'second' if a is None else 'first'} build"
    return ", ".join(field for field, x, y in zip(FIELDS, a, b, strict=True) if x != y) or "tar header"


def _save(client: DockerClient, image: str, path: Path) -> Path:
    with path.open("wb") as out:
        for chunk in client.call("save", "get_image", image):
            out.write(chunk)
    return path


def _blob(archive: tarfile.TarFile, digest: str) -> IO[bytes]:
    member = archive.extractfile("blobs/sha256/" + digest.split(":", 1)[1])
    assert member is not None
    return member


def _image(archive: tarfile.TarFile) -> tuple[dict[str, Any], list[str]]:
    """The config and the layer digests of the one image in a `docker save` archive."""
    manifest = json.loads(_blob(archive, json.load(archive.extractfile("index.json"))["manifests"][0]["digest"]).read())
    while "manifests" in manifest:  # an index (the containerd image store saves one): its image manifest
        entry = image_entry(manifest) or manifest["manifests"][0]  # not a provenance attestation beside it
        manifest = json.loads(_blob(archive, entry["digest"]).read())
    config = json.loads(_blob(archive, manifest["config"]["digest"]).read())
    return config, [layer["digest"] for layer in manifest["layers"]]


def _entries(archive: tarfile.TarFile, digest: str) -> dict[str, tuple]:
    """Each file of a layer: (content digest, mtime, mode, owner, link target)."""
    found = {}
    for member, content in _members(_blob(archive, digest)):
        found[member.name] = (content, member.mtime, member.mode, (member.uid, member.gid), member.linkname)
    return found


GZIP_MAGIC, ZSTD_MAGIC = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"


def layer_tar(stream: IO[bytes]) -> IO[bytes]:
    """A layer blob's tar stream, whichever compression it has (gzip, zstd or none): told by its
    first bytes, as containerd does, not by a media type the blob may have lost on the way."""
    head = stream.read(4)
    stream.seek(0)
    if head[:2] == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=stream)
    if head == ZSTD_MAGIC:
        return zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True)
    return stream


def _members(stream: IO[bytes]) -> Iterator[tuple[tarfile.TarInfo, str]]:
    with tarfile.open(fileobj=layer_tar(stream), mode="r|") as tar:
        for member in tar:
            digest = hashlib.sha256()
            if member.isfile():
                data = tar.extractfile(member)
                while chunk := data.read(1 << 20):
                    digest.update(chunk)
            yield member, digest.hexdigest()
