"""An image's SBOMs and provenance: beside its build manifest on the host, and in the registry
beside the pushed image as OCI 1.1 artifacts whose ``subject`` is the image's manifest.

The image itself is never changed by them (its digest stays what the build made). In the
registry they are found through the referrers API (``GET /v2/<name>/referrers/<digest>``) or,
where the registry lacks it (Debian's docker-registry 2.8), through the referrers tag schema: an
index under the tag ``sha256-<hex>`` of the subject, listing them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from torchbake.core.errors import RegistryError, SignatureError
from torchbake.core.files import write_atomically
from torchbake.supply_chain import provenance, sbom, sbom_formats, signing

KINDS = (*sbom_formats.NAMES, "provenance")
SIGNATURE_PREFIX = "signature-"  # a Sigstore bundle: signature-image (the manifest's own), signature-spdx …
SIGNATURES = tuple(SIGNATURE_PREFIX + kind for kind in ("image", *KINDS))
MEDIA_TYPES = {**{f.name: f.media_type for f in sbom_formats.TABLE}, "provenance": provenance.MEDIA_TYPE,
               **dict.fromkeys(SIGNATURES, signing.BUNDLE_TYPE)}
INVENTORY = "inventory"  # what torchbake read in the image (packages, layers): kept on the host, for diffs
MADE_WITH = "sboms_made_with"  # the build manifest's key: image → sboms_made_with() of its SBOMs beside it
SUFFIXES = {**{f.name: f.suffix for f in sbom_formats.TABLE}, "provenance": provenance.SUFFIX, INVENTORY: ".inventory.json",
            **{kind: f".{kind.removeprefix(SIGNATURE_PREFIX)}.sigstore.json" for kind in SIGNATURES}}
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
EMPTY = {"mediaType": "application/vnd.oci.empty.v1+json",
         "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a", "size": 2, "data": "e30="}
KIND_ANNOTATION = "dev.torchbake.attestation"


def make(client, tag: str, image: str, *, found: Mapping[str, Any] | None, variant: str, configuration: Mapping[str, Any],
         inputs: list[Mapping[str, Any]], files: Mapping[str, str], base: Mapping[str, str], recipe: Mapping[str, str],
         started: float, invocation: str, cache_dir: Path) -> dict[str, str]:
    """Kind → text of the SBOMs (:mod:`torchbake.supply_chain.sbom`) and the provenance of the image a build
    made for ``image``, under ``tag`` (``found``: what the verify probe read of its packages, else
    they are read now, in a container without network; ``cache_dir``: where the FROM image's
    packages are kept, :func:`torchbake.supply_chain.inventory.base_debs`)."""
    import torchbake
    from torchbake.supply_chain.inventory import LOCK_LABEL, base_debs, source_trees, take

    taken = take(client, tag, found)
    documents = sbom_formats.documents(taken, inputs, supplier=supplier_of(configuration))
    in_image = base_debs(client, base, cache_dir) if base.get("reference") else ()
    vendor, distro = sbom.distro_of(taken)
    in_base = {(b.name, b.version, b.architecture) for b in in_image or ()}
    added = None if in_image is None else [
        {"name": deb.name, "version": deb.version, "architecture": deb.architecture,
         "purl": sbom.deb_purl(deb, vendor, distro), "url": deb.url,
         "digest": {alg: value for alg, value in (("sha256", deb.sha256), ("sha512", deb.sha512)) if value}}
        for deb in taken.debs if (deb.name, deb.version, deb.architecture) not in in_base]
    versions = {"torchbake": torchbake.__version__, "docker-client": client.version,
                "docker-engine": client.engine_version()}
    documents["provenance"] = provenance.to_text(provenance.statement(
        image=image, image_id=taken.image_id, variant=variant, configuration=configuration, inputs=inputs,
        files=files, base=base, sources=source_trees(taken.labels), recipe=recipe, builder=versions,
        started=_iso(started), finished=_iso(time.time()), invocation=invocation, debs_added=added,
        lock=taken.labels.get(LOCK_LABEL, "")))
    documents[INVENTORY] = json.dumps(taken.to_json(), indent=1, sort_keys=True) + "\n"
    return documents


def supplier_of(configuration: Mapping[str, Any]) -> str:
    """The image's supplier in a plan's configuration ([sbom] supplier), "" where none is set."""
    return str(configuration.get("sbom.supplier", ""))


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def paths_beside(manifest: Path) -> dict[str, Path]:
    """Kind → the file beside the build manifest ``X.manifest.json`` (``X.spdx.json`` …)."""
    stem = manifest.name.removesuffix(".manifest.json")
    return {kind: manifest.with_name(stem + suffix) for kind, suffix in SUFFIXES.items()}


def write_beside(manifest: Path, documents: Mapping[str, str]) -> dict[str, str]:
    """Write each document beside the manifest (atomically); kind → path."""
    targets = paths_beside(manifest)
    return {kind: str(write_atomically(targets[kind], text)) for kind, text in documents.items()}


def recorded(log_dir: Path, image_id: str, image: str = "") -> dict[str, str]:
    """Kind → text of the documents this host wrote when it built ``image_id`` (the build
    manifest names them; ``image``: which image of the build, NAME:TAG or NAME:TAG-slim); {} when
    it has none."""
    from torchbake.supply_chain.manifest import find_manifest

    found = find_manifest(log_dir, image_id)
    return _read(_paths(found[1], image)) if found is not None else {}


def _paths(manifest: Mapping[str, Any], image: str) -> dict[str, str]:
    """Kind → path of the documents a build manifest names for ``image`` (the build's only image's
    when it names one)."""
    return _of_image(manifest.get("attestations") or {}, image)


def _of_image(per_image: Mapping[str, Any], image: str) -> Any:
    """What a build manifest's map of image → value holds for ``image`` (the only image's when it
    has one); {} where it has none."""
    key = _key_of(per_image, image)
    return per_image[key] if key is not None else {}


def _key_of(per_image: Mapping[str, Any], image: str) -> str | None:
    """``image``'s key in a build manifest's map of image → value (the only image's when it has one)."""
    return image if image in per_image else next(iter(per_image)) if len(per_image) == 1 else None


def sboms_made_with(supplier: str) -> dict[str, str]:
    """What the SBOMs of a build's record are made from besides the record itself (``MADE_WITH``
    in its manifest, per image): the [sbom] supplier and this torchbake's version."""
    import torchbake

    return {"supplier": supplier, "torchbake": torchbake.__version__}


def _read(paths: Mapping[str, str]) -> dict[str, str]:
    """Kind → text of each document in ``paths`` that can be read."""
    documents = {}
    for kind, path in paths.items():
        try:
            documents[kind] = Path(path).read_text()
        except OSError:
            continue
    return documents


def recorded_with(log_dir: Path, image_id: str, image: str, supplier: str) -> tuple[dict[str, str], list[str]]:
    """:func:`recorded`, the SBOMs made again from the build's own record (what it read in the
    image, the inputs its manifest lists) with ``supplier`` ([sbom] supplier now): SBOM options
    set after a build reach what a push publishes and signs, without building the image again.
    The documents that changed are written back beside the manifest (``invoke sbom`` shows them
    too); returns the documents and the kinds made again."""
    from torchbake.supply_chain.inventory import Inventory
    from torchbake.supply_chain.manifest import find_manifest

    found = find_manifest(log_dir, image_id)
    if found is None:
        return {}, []
    path, manifest = found
    paths = _paths(manifest, image)
    documents = _read(paths)
    wanted = sboms_made_with(supplier)
    if INVENTORY not in documents or _of_image(manifest.get(MADE_WITH) or {}, image) == wanted:
        return documents, []  # (made from the same record with the same options: the same documents)
    inventory = Inventory.from_json(json.loads(documents[INVENTORY]))
    made = sbom_formats.documents(inventory, manifest.get("inputs", []), supplier=supplier)
    changed = {kind: text for kind, text in made.items() if documents.get(kind) not in (None, text)}
    for kind, text in changed.items():  # each changed one was read from its path
        write_atomically(Path(paths[kind]), text)
    record_made_with(path, image, wanted)
    return {**documents, **changed}, sorted(changed)


def record_made_with(manifest: Path, image: str, made_with: Mapping[str, str]) -> None:
    """The build manifest's record of what ``image``'s SBOMs beside it (the build's only image's
    where it names one) are now made with: the next push that would make the same ones reads them."""
    from torchbake.supply_chain import manifest as build_manifest

    document = json.loads(manifest.read_text())
    key = _key_of(document.get("attestations") or {}, image)
    if key is not None:
        with contextlib.suppress(OSError):  # a record it cannot write (another's logs): they are made again next time
            build_manifest.update(manifest, MADE_WITH, {**(document.get(MADE_WITH) or {}), key: dict(made_with)})


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Subject:
    """The pushed image's manifest (or index): what the artifacts refer to."""

    media_type: str
    digest: str
    size: int


def subject_of(client, repository: str, reference: str) -> Subject:
    """The manifest ``reference`` (a tag or digest) names in the registry, as a descriptor."""
    text, response = client.get_manifest_and_response(reference)
    data = text.encode()
    media_type = json.loads(text).get("mediaType") or response.headers.get("Content-Type", MANIFEST_TYPE)
    return Subject(media_type, response.headers.get("Docker-Content-Digest") or _sha(data), len(data))


def artifact_manifest(kind: str, document: bytes, subject: Subject, created: str) -> bytes:
    """The OCI 1.1 image manifest of one attestation or signature: the empty config, the document
    as its one layer, the image as its subject."""
    return json.dumps({
        "schemaVersion": 2, "mediaType": MANIFEST_TYPE, "artifactType": MEDIA_TYPES[kind], "config": EMPTY,
        "layers": [{"mediaType": MEDIA_TYPES[kind], "digest": _sha(document), "size": len(document),
                    "annotations": {"org.opencontainers.image.title": f"image{SUFFIXES[kind]}"}}],
        "subject": {"mediaType": subject.media_type, "digest": subject.digest, "size": subject.size},
        "annotations": _annotations(kind, created),
    }, sort_keys=True, separators=(",", ":")).encode()


def _annotations(kind: str, created: str) -> dict[str, str]:
    signed = kind.removeprefix(SIGNATURE_PREFIX)
    return {**({"org.opencontainers.image.created": created} if created else {}), KIND_ANNOTATION: kind,
            **({signing.PREDICATE_ANNOTATION: signing.PREDICATE_TYPES.get(signed, signing.IMAGE_PREDICATE)}
               if kind != signed else {})}


def attach(registry, repository: str, reference: str, documents: Mapping[str, str], created: str,
           signer: signing.Signer | None = None) -> dict[str, str]:
    """Push each document as an artifact referring to ``repository:reference`` and, with a
    ``signer``, a Sigstore bundle signing the manifest and one signing each document (kinds
    ``signature-image``, ``signature-spdx`` …); list them under the subject's referrers (the API
    where the registry has it, else the tag schema). Kind → the artifact's manifest digest. The
    image's manifest is not touched."""

    def push() -> dict[str, str]:
        client = registry._client(repository)
        subject = subject_of(client, repository, reference)
        client.push_blob(data=b"{}", digest=EMPTY["digest"])
        artifacts = {kind: documents[kind] for kind in KINDS if kind in documents}
        if signer is not None:
            statements = signing.statements(f"{registry.host}/{repository}", subject.digest, artifacts)
            artifacts.update({SIGNATURE_PREFIX + kind: signer.bundle(statement) for kind, statement in statements.items()})
        descriptors, pushed, response = [], {}, None
        for kind, text in artifacts.items():
            document = text.encode()
            client.push_blob(data=document, digest=_sha(document))
            manifest = artifact_manifest(kind, document, subject, created)
            digest = _sha(manifest)
            response = client._request("put", "manifests/" + digest, data=manifest,
                                       headers={"Content-Type": MANIFEST_TYPE})
            pushed[kind] = digest
            descriptors.append({"mediaType": MANIFEST_TYPE, "digest": digest, "size": len(manifest),
                                "artifactType": MEDIA_TYPES[kind], "annotations": _annotations(kind, created)})
        if response is not None and not response.headers.get("OCI-Subject"):  # no referrers API: the tag schema
            _update_tag_index(client, subject.digest, descriptors)
        return pushed

    return registry._ask(f"attach SBOM, provenance and signatures to {repository}@{reference}", push)


def referrers_tag(digest: str) -> str:
    """The tag of the referrers tag schema for ``digest`` (``sha256-<hex>``)."""
    return digest.replace(":", "-")


def _update_tag_index(client, subject_digest: str, descriptors: list[dict[str, Any]]) -> None:
    """Add ``descriptors`` to the index under the subject's referrers tag (made if missing),
    replacing older ones of the same kinds."""
    import requests

    tag = referrers_tag(subject_digest)
    try:
        text, _ = client.get_manifest_and_response(tag)
        index = json.loads(text)
    except requests.exceptions.HTTPError as exc:
        if exc.response is None or exc.response.status_code != 404:
            raise
        index = {"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": []}
    kinds = {d["annotations"][KIND_ANNOTATION] for d in descriptors}
    kept = [m for m in index.get("manifests", []) if (m.get("annotations") or {}).get(KIND_ANNOTATION) not in kinds]
    index["manifests"] = kept + descriptors
    client._request("put", "manifests/" + tag, data=json.dumps(index, sort_keys=True).encode(),
                    headers={"Content-Type": INDEX_TYPE})


def referrers(registry, repository: str, reference: str) -> list[dict[str, Any]]:
    """The descriptors of what refers to ``repository:reference`` (the referrers API, else the
    tag schema); [] when nothing does."""
    import requests

    def look() -> list[dict[str, Any]]:
        client = registry._client(repository)
        subject = subject_of(client, repository, reference)
        try:
            response = client._request("get", "referrers/" + subject.digest, headers={"Accept": INDEX_TYPE})
            if response.headers.get("Content-Type", "").startswith(INDEX_TYPE):
                return _descriptors(response.content)
        except requests.exceptions.HTTPError as exc:
            if exc.response is None or exc.response.status_code not in (404, 405):
                raise
        try:
            text, _ = client.get_manifest_and_response(referrers_tag(subject.digest))
        except requests.exceptions.HTTPError as exc:
            if exc.response is not None and exc.response.status_code == 404:
                return []
            raise
        return _descriptors(text)

    return registry._ask(f"list what refers to {repository}:{reference}", look)


def _descriptors(index: str | bytes) -> list[dict[str, Any]]:
    """The descriptors a referrers index lists (whoever can push writes it): each one that names a
    digest; an index that is not one lists none."""
    document = signing.load_json_bounded(index, "a referrers index", limit=MAX_DOCUMENT)
    found = document.get("manifests") if isinstance(document, dict) else None
    return [d for d in found if isinstance(d, dict) and isinstance(d.get("digest"), str)] if isinstance(found, list) else []


def fetch(registry, repository: str, reference: str, kind: str) -> str | None:
    """The document of ``kind`` attached to ``repository:reference`` in the registry, or None."""
    wanted = [d for d in referrers(registry, repository, reference) if d.get("artifactType") == MEDIA_TYPES[kind]
              and (d.get("annotations") or {}).get(KIND_ANNOTATION, kind) == kind]  # SPDX 2.3 and 3 share a type
    return read_artifact(registry, repository, wanted[-1]["digest"]) if wanted else None


def read_artifact(registry, repository: str, digest: str) -> str:
    """The document an artifact manifest (``digest``) carries as its one layer, checked against
    the layer's digest (as text: a document that is not UTF-8 is a RegistryError naming it)."""
    found = read_referrer(registry, repository, digest)
    if found.data is None:
        raise RegistryError(f"The artifact {repository}@{digest} carries no document that can be read:"
                            f" {found.unread or 'it has no layer'}.")
    try:
        return found.data.decode()
    except UnicodeDecodeError:
        raise RegistryError(f"The artifact {repository}@{digest} is not UTF-8 text.") from None


MAX_DOCUMENT = 64 * 2**20  # an SBOM of a large image is a few MiB; a referrer's layer beyond this is not read


@dataclass(frozen=True)
class Referrer:
    """What a referrer is by its own manifest (the referrers index is written by whoever can push,
    so its ``artifactType`` is only a claim) and the documents it carries."""

    digest: str
    types: frozenset[str]  # its manifest's artifactType, its config's media type (the empty one left out), its layers'
    data: bytes | None  # its first layer, checked against its digest; None: no layer, or not read
    others: tuple[bytes, ...] = ()  # its further layers, each checked against its digest
    unread: str = ""  # why its layers were not read ("": they were): over MAX_DOCUMENT, an index, no layer list


def read_referrer(registry, repository: str, digest: str) -> Referrer:
    """The referrer manifest ``digest`` (checked against that digest) and its layers, at most
    MAX_DOCUMENT in all."""

    def pull() -> Referrer:
        client = registry._client(repository)
        _, response = client.get_manifest_and_response(digest)
        if _sha(response.content) != digest:
            raise RegistryError(f"The registry served {repository}@{digest} with other content than that digest.")
        try:
            manifest = signing.load_json_bounded(response.content, "a manifest", limit=MAX_DOCUMENT)
        except SignatureError as exc:
            return Referrer(digest, frozenset(), None, unread=f"its manifest {exc}")
        if not isinstance(manifest, dict):
            return Referrer(digest, frozenset(), None, unread="its manifest is no JSON object")
        config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
        layers = manifest.get("layers") if isinstance(manifest.get("layers"), list) else []
        types = {manifest.get("artifactType"), config.get("mediaType"),
                 *(layer.get("mediaType") for layer in layers if isinstance(layer, dict))}
        types = frozenset(t for t in types if isinstance(t, str) and t != EMPTY["mediaType"])
        if "manifests" in manifest:
            return Referrer(digest, types, None, unread="it is an index, whose manifests are not read")
        if not all(isinstance(layer, dict) and isinstance(layer.get("digest"), str) and isinstance(layer.get("size"), int)
                   for layer in layers):
            return Referrer(digest, types, None, unread="a layer of it names no digest and size")
        if sum(layer["size"] for layer in layers) > MAX_DOCUMENT:
            return Referrer(digest, types, None, unread=f"its layers are over {MAX_DOCUMENT // 2**20} MiB")
        blobs = []
        for layer in layers:
            data = bytearray()
            for chunk in client.pull_blob(layer["digest"]):
                data += chunk
                if len(data) > layer["size"]:
                    break
            if _sha(bytes(data)) != layer["digest"]:
                raise RegistryError(f"The artifact {repository}@{digest} does not match its layer's digest.")
            blobs.append(bytes(data))
        return Referrer(digest, types, blobs[0] if blobs else None, tuple(blobs[1:]))

    return registry._ask(f"read {repository}@{digest}", pull)


def manifest_of(registry, repository: str, reference: str) -> tuple[Subject, dict[str, Any]] | None:
    """The manifest or index ``reference`` names, as a descriptor and as JSON; None when the
    registry has none."""
    from torchbake.adapters.registry import read_manifest

    def look() -> tuple[Subject, dict[str, Any]] | None:
        found = read_manifest(registry._client(repository), reference)
        if found is None:
            return None
        data, digest = found
        document = json.loads(data)
        return Subject(document.get("mediaType") or MANIFEST_TYPE, digest, len(data)), document

    return registry._ask(f"read the manifest of {repository}:{reference}", look)
