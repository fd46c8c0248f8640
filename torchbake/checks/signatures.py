"""``invoke verify --signatures``: what a consumer with only the registry and the public key can
prove, decided as a policy on the whole set of referrers, in whatever order the registry lists
them. For the image's manifest (and, for an index, each platform's too):

- every Sigstore bundle hanging off it must be the key's, about that manifest, and sign either
  the manifest itself or a document that hangs beside it (every signed field: its subject, its
  predicate's type and its predicate);
- every SBOM or provenance hanging off it must be covered by such a bundle and describe that
  very image (its config's or its manifest's digest, as the engine that built it named it);
- the manifest's own signature, always, and the evidence the team requires (``[verify]
  require``: by default one SBOM of each format torchbake writes and the provenance) must be there.

What a referrer is comes from its own manifest (its artifact type, config and layer types) and
its content, never from the referrers index or annotations, which whoever can push writes.
Documents are read bounded (size, nesting): a hostile one is a row that fails. Any one that does
not hold fails (exit 11) and is named by its digest; a row per referrer and per required piece
says why. Other artifacts (no signature, SBOM or provenance by type or content) are listed, not
judged; one whose layers are not read (over 64 MiB, an index) fails.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torchbake.adapters import registry
from torchbake.configuration.settings import EVIDENCE
from torchbake.core.errors import SignatureError
from torchbake.supply_chain import attestations, provenance, sbom_formats, signing

NAMES = {"image": "manifest", **{f.name: f.noun for f in sbom_formats.TABLE}, "provenance": "provenance", "sbom": "SBOM"}
# artifact types of documents that tools read as an SBOM or a provenance: each one hanging off a
# manifest must be covered by a signature (torchbake's own, then others' that it never writes)
EVIDENCE_TYPES = {*(attestations.MEDIA_TYPES[kind] for kind in attestations.KINDS), "application/vnd.cyclonedx+xml",
                  "application/vnd.cyclonedx", "text/spdx", "text/spdx+xml", "application/vnd.syft+json",
                  "application/vnd.dev.cosign.artifact.sbom.v1+json", "application/vnd.in-toto.spdx+dsse",
                  "application/vnd.in-toto.provenance+dsse", "application/vnd.dsse.envelope.v1+json"}
KIND_OF_PREDICATE = {predicate: kind for kind, predicate in signing.PREDICATE_TYPES.items()}


@dataclass(frozen=True)
class Row:
    manifest: str  # "index" or the platform (os/arch), or the digest
    what: str
    ok: bool
    detail: str


def check(remote: registry.Registry, image: str, key: signing.PublicKey | signing.Identity,
          require: Sequence[str] = EVIDENCE) -> list[Row]:
    """A row per referrer of ``image``'s manifest and per piece of required evidence, for the
    manifest and, when it is an index, each of its platforms' manifests (the index itself needs
    its own signature only)."""
    host, repository, tag = registry.split_reference(image)  # ``remote`` is the registry it names
    top = attestations.manifest_of(remote, repository, tag)
    if top is None:
        raise SignatureError(f"{image} is not in the registry {host}: there is nothing signed to check.")
    subject, document = top
    rows = []
    if document.get("manifests"):  # an index: its own signature, then each platform's manifest
        rows += _check_manifest(remote, repository, "index", subject.digest, None, key,
                                [kind for kind in require if kind == "image"])
        for member in document["manifests"]:
            platform = member.get("platform") or {}
            label = "/".join(filter(None, (platform.get("os"), platform.get("architecture")))) or member["digest"]
            rows += _check_manifest(remote, repository, label, member["digest"],
                                    _config_digest(remote, repository, member["digest"]), key, require)
    else:
        rows += _check_manifest(remote, repository, "image", subject.digest,
                                document.get("config", {}).get("digest", ""), key, require)
    return rows


def failed(rows: Sequence[Row]) -> list[Row]:
    return [row for row in rows if not row.ok]


def _config_digest(remote, repository: str, digest: str) -> str:
    found = attestations.manifest_of(remote, repository, digest)
    return (found[1].get("config") or {}).get("digest", "") if found else ""


@dataclass(frozen=True)
class _Referrer:
    digest: str
    kind: str  # "bundle"; spdx, spdx3, cyclonedx, provenance; "sbom": a type torchbake does not read; "other";
    # "unread": its layers were not read (over attestations.MAX_DOCUMENT, an index): it fails, nothing says what it is
    label: str  # its own artifact type, as its manifest says
    data: bytes | None
    document: Any  # the parsed document; None when it is not (bounded) JSON; "unread": why


# torchbake's own types (SPDX 2.3 and 3 share one: told apart by content)
OURS = {attestations.MEDIA_TYPES[kind]: kind for kind in attestations.KINDS if kind != "spdx3"}


def parse(data: bytes | None) -> Any:
    """``data`` as JSON, or None: not UTF-8, not JSON, or nested too deep (a hostile document is a
    failing row, never a RecursionError: :func:`torchbake.supply_chain.signing.load_json_bounded`)."""
    if data is None:
        return None
    try:
        return signing.load_json_bounded(data, "JSON", limit=attestations.MAX_DOCUMENT)
    except SignatureError:
        return None


def _referrer(remote, repository: str, descriptor: Mapping[str, Any]) -> _Referrer:
    """What a referrer is, told from its own manifest and its content (every layer of it, a gzipped
    one opened): never from the referrers index, whose types and annotations whoever can push writes."""
    found = attestations.read_referrer(remote, repository, descriptor["digest"])
    label = next(iter(sorted(found.types)), "artifact")
    if found.unread:
        return _Referrer(found.digest, "unread", label, None, found.unread)
    data = _opened(found.data)
    document = parse(data)
    if signing.BUNDLE_TYPE in found.types or (isinstance(document, dict) and "dsseEnvelope" in document):
        return _Referrer(found.digest, "bundle", signing.BUNDLE_TYPE, found.data, document)
    ours = sorted(OURS[t] for t in found.types if t in OURS)
    kind = ours[0] if len(ours) == 1 else _kind_of_content(document, data)
    if kind == "spdx" and isinstance(document, dict) and "@graph" in document:  # SPDX 2.3 and 3 share a type
        kind = "spdx3"
    if kind == "other" and (found.types & EVIDENCE_TYPES or any(
            _kind_of_content(parse(_opened(layer)), _opened(layer)) != "other" for layer in found.others)):
        kind = "sbom"  # an SBOM, provenance or signature in a form or a layer torchbake does not read
    return _Referrer(found.digest, kind, label, data, document)


def _opened(data: bytes | None) -> bytes | None:
    """``data``, or what it holds where it is gzipped (at most MAX_DOCUMENT of it)."""
    if not data or not data.startswith(b"\x1f\x8b"):
        return data
    import zlib

    try:
        return zlib.decompressobj(wbits=31).decompress(data, attestations.MAX_DOCUMENT)
    except zlib.error:
        return data


def _kind_of_content(document: Any, data: bytes | None) -> str:
    """What a document is by what it holds, whatever type it is labelled with."""
    if isinstance(document, dict):
        if "spdxVersion" in document:
            return "spdx"
        if "@graph" in document and "spdx" in json.dumps(document.get("@context", "")).lower():
            return "spdx3"
        if document.get("bomFormat") == "CycloneDX":
            return "cyclonedx"
        if "in-toto.io/Statement" in str(document.get("_type", "")):
            return "provenance" if document.get("predicateType") == provenance.PREDICATE_TYPE else "sbom"
        if "dsseEnvelope" in document or "payloadType" in document:
            return "sbom"  # a signature or envelope where torchbake does not look for one: not judged as harmless
    head = (data or b"")[:4096].lower()
    if document is None and any(word in head for word in (b"spdxversion", b"cyclonedx", b"dsseenvelope", b"in-toto")):
        return "sbom"  # an SBOM in a text form torchbake does not read (tag-value SPDX, CycloneDX XML), or a broken one
    return "other"


def _check_manifest(remote, repository: str, label: str, digest: str, config: str | None,
                    key: signing.PublicKey | signing.Identity, require: Sequence[str]) -> list[Row]:
    """The rows of one manifest: each bundle, each SBOM or provenance, each other referrer, then
    each piece of required evidence that is not there."""
    found = [_referrer(remote, repository, d) for d in attestations.referrers(remote, repository, digest)]
    evidence = [item for item in found if item.kind not in ("bundle", "other", "unread")]
    rows, held, covered = [], set(), set()
    for item in found:
        if item.kind != "bundle":
            continue
        short = item.digest[:19]
        try:
            statement = key.open(item.data or b"")
            what, signed = _check_statement(statement, digest, evidence, config)
        except SignatureError as exc:
            rows.append(Row(label, f"signature {short}", False, f"the bundle {exc}"))
            continue
        covered |= signed
        if what == "image":
            held.add(what)
        rows.append(Row(label, f"signature of the {NAMES[what]} ({short})", True,
                        f"signed by {key.signer}; its subject is {digest}"))
    for item in evidence:
        what = f"{NAMES[item.kind]} {item.digest[:19]}"
        if item.digest in covered:
            held.add(item.kind)
            rows.append(Row(label, what, True, "covered by a signature of the key; describes this image"))
        elif item.kind == "sbom":
            rows.append(Row(label, what, False, "an SBOM or provenance of a type torchbake does not read"
                                                " hangs off the manifest, covered by no signature of the key"))
        else:
            rows.append(Row(label, what, False, "no signature of the key covers it: whoever pushed it, it is not"
                                                " the signer's"))
    for item in found:
        if item.kind == "unread":
            rows.append(Row(label, f"{item.label} {item.digest[:19]}", False,
                            f"not read ({item.document}), so not judged: nothing tells it is no unsigned SBOM"))
        elif item.kind == "other":
            rows.append(Row(label, f"{item.label} {item.digest[:19]}", True,
                            "not judged: no signature, SBOM or provenance"))
    for kind in dict.fromkeys(("image", *require)):  # the manifest's own signature, whatever else is required
        if kind not in held:
            rows.append(Row(label, f"signature of the {NAMES[kind]}" if kind == "image" else NAMES[kind], False,
                            "missing: no bundle signs it" if kind == "image" else
                            "missing: required ([verify] require), and none signed by the key hangs off the manifest"))
    return rows


def _check_statement(statement: Mapping[str, Any], digest: str, evidence: Sequence[_Referrer],
                     config: str | None) -> tuple[str, set[str]]:
    """What a bundle the key signed signs ("image" or a document kind) and the referrers it covers:
    it must be about this manifest, and a document it signs must hang beside it, unchanged, and
    (an SBOM) describe this image."""
    subjects = [(s.get("digest") or {}).get("sha256") if isinstance(s, dict) and isinstance(s.get("digest") or {}, dict)
                else None for s in (statement.get("subject") or [] if isinstance(statement.get("subject"), list) else [None])]
    if subjects != [digest.split(":", 1)[1]]:
        raise SignatureError(f"is about {', '.join(map(str, subjects)) or 'nothing'}, not this manifest ({digest})")
    predicate_type = statement.get("predicateType")
    if predicate_type == signing.IMAGE_PREDICATE:
        return "image", set()
    what = KIND_OF_PREDICATE.get(predicate_type)
    if what is None:
        raise SignatureError(f"signs a {predicate_type!r} predicate, not {signing.IMAGE_PREDICATE!r} or an SBOM's or"
                             " provenance's")
    same = [item for item in evidence if item.kind == what and isinstance(item.document, dict)
            and _signed_as(statement, item.document, what)]
    if not same:
        if any(item.kind == what for item in evidence):
            raise SignatureError(f"signs another {NAMES[what]} than the one beside the image")
        raise SignatureError(f"signs a {NAMES[what]} that the registry does not hold beside the image")
    # an engine names an image by its config's digest (the classic store) or its manifest's (containerd's)
    if config:  # each document it covers describes this very image; one of another image stays uncovered
        same = [item for item in same if _described(what, item.document) in (
            config.split(":", 1)[1], digest.split(":", 1)[1])]
        if not same:
            raise SignatureError(f"signs a {NAMES[what]} of another image than this manifest ({digest}, config {config})")
    return what, {item.digest for item in same}


def _described(kind: str, document: Mapping[str, Any]) -> str:
    """:func:`described_image` of a document anyone may have written: "" where its shape is not
    the format's."""
    try:
        return described_image(kind, document)
    except (AttributeError, TypeError):
        return ""


def _signed_as(statement: Mapping[str, Any], document: Mapping[str, Any], what: str) -> bool:
    """Whether ``document`` is what ``statement`` signs: an SBOM is its predicate; a provenance is a
    statement itself, and every field of it that is signed must be the same (its type, its
    predicate's type and its predicate), with no field besides them and one subject, its digest
    alone (the image it names is compared by the caller; its name is the build's tag, not signed)."""
    if what != "provenance":
        return statement.get("predicate") == document
    subjects = document.get("subject")
    return (set(document) == {"_type", "subject", "predicateType", "predicate"}  # no field the signature leaves out
            and isinstance(subjects, list) and len(subjects) == 1 and isinstance(subjects[0], dict)
            and set(subjects[0]) <= {"name", "digest"} and isinstance(subjects[0].get("digest"), dict)
            and set(subjects[0]["digest"]) == {"sha256"}
            and document.get("_type") == provenance.STATEMENT_TYPE
            and document.get("predicateType") == statement.get("predicateType")
            and document.get("predicate") == statement.get("predicate"))


def described_image(kind: str, document: Mapping[str, Any]) -> str:
    """The image (its config digest, hex) an SBOM or a provenance says it describes; "" when it
    says none, or (a provenance) more than one."""
    if kind == "provenance":
        subjects = document.get("subject") if isinstance(document.get("subject"), list) else []
        digests = [(s.get("digest") or {}).get("sha256", "") if isinstance(s, dict) and isinstance(s.get("digest"), dict)
                   else "" for s in subjects]
        return digests[0] if len(digests) == 1 and isinstance(digests[0], str) else ""
    if kind == "cyclonedx":
        component = (document.get("metadata") or {}).get("component") or {}
        return next((h.get("content", "") for h in component.get("hashes") or [] if h.get("alg") == "SHA-256"), "")
    if kind == "spdx3":  # the root of its Sbom element: the image's package, its sha256
        graph = {e.get("spdxId"): e for e in document.get("@graph") or [] if isinstance(e, dict)}
        roots = [r for e in graph.values() if e.get("type") == "software_Sbom" for r in e.get("rootElement") or []]
        return next((h.get("hashValue", "") for r in roots for h in (graph.get(r) or {}).get("verifiedUsing") or []
                     if h.get("algorithm") == "sha256"), "")
    described = {r.get("relatedSpdxElement") for r in document.get("relationships") or []
                 if r.get("spdxElementId") == "SPDXRef-DOCUMENT" and r.get("relationshipType") == "DESCRIBES"}
    return next((c.get("checksumValue", "") for p in document.get("packages") or [] if p.get("SPDXID") in described
                 for c in p.get("checksums") or [] if c.get("algorithm") == "SHA256"), "")
