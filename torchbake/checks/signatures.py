"""``invoke verify --signatures``: what a consumer with only the registry and the public key can
prove. For the image's manifest (and, for an index, each platform's too): a signature of the
manifest itself, and one of each attestation hanging off it, every one a Sigstore bundle that the
key signed, whose statement's subject is that manifest, whose predicate is the attestation the
registry holds, and whose SBOMs describe that very image (its config's or its manifest's digest,
as the engine that built it named it). Every bundle there
must hold: one made by another key, or tampered with, fails as a missing one does (exit 11).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torchbake.adapters import registry
from torchbake.core.errors import SignatureError
from torchbake.supply_chain import attestations, signing

NAMES = {"image": "manifest", "spdx": "SPDX SBOM", "spdx3": "SPDX 3 SBOM", "cyclonedx": "CycloneDX SBOM",
         "provenance": "provenance"}


@dataclass(frozen=True)
class Row:
    manifest: str  # "index" or the platform (os/arch), or the digest
    what: str
    ok: bool
    detail: str


def check(remote: registry.Registry, image: str, key: signing.PublicKey | signing.Identity) -> list[Row]:
    """A row per bundle and per signature that should be there, for ``image`` and, when it is an
    index, each of its platforms' manifests."""
    host, repository, tag = registry.split_reference(image)  # ``remote`` is the registry it names
    top = attestations.manifest_of(remote, repository, tag)
    if top is None:
        raise SignatureError(f"{image} is not in the registry {host}: there is nothing signed to check.")
    subject, document = top
    rows = []
    if document.get("manifests"):  # an index: its own signature, then each platform's manifest
        rows += _check_manifest(remote, repository, f"{host}/{repository}", "index", subject.digest, None, key)
        for member in document["manifests"]:
            platform = member.get("platform") or {}
            label = "/".join(filter(None, (platform.get("os"), platform.get("architecture")))) or member["digest"]
            rows += _check_manifest(remote, repository, f"{host}/{repository}", label, member["digest"],
                                    _config_digest(remote, repository, member["digest"]), key)
    else:
        rows += _check_manifest(remote, repository, f"{host}/{repository}", "image", subject.digest,
                                document.get("config", {}).get("digest", ""), key)
    return rows


def _config_digest(remote, repository: str, digest: str) -> str:
    found = attestations.manifest_of(remote, repository, digest)
    return (found[1].get("config") or {}).get("digest", "") if found else ""


def _check_manifest(remote, repository: str, name: str, label: str, digest: str, config: str | None,
                    key: signing.PublicKey | signing.Identity) -> list[Row]:
    """The rows of one manifest: each bundle hanging off it checked, then each signature missing."""
    found = attestations.referrers(remote, repository, digest)
    kinds = [(d.get("annotations") or {}).get(attestations.KIND_ANNOTATION, "") for d in found]
    documents = {kind: attestations.read_artifact(remote, repository, d["digest"])
                 for kind, d in zip(kinds, found, strict=True) if kind in attestations.KINDS}
    rows, signed = [], set()
    for kind, descriptor in zip(kinds, found, strict=True):
        if descriptor.get("artifactType") != signing.BUNDLE_TYPE:
            continue
        what = kind.removeprefix(attestations.SIGNATURE_PREFIX)
        try:
            statement = key.open(attestations.read_artifact(remote, repository, descriptor["digest"]))
            _check_statement(statement, what, digest, documents, config)
        except SignatureError as exc:
            rows.append(Row(label, f"signature of the {NAMES.get(what, what)}", False, f"the bundle {exc}"))
            continue
        signed.add(what)
        rows.append(Row(label, f"signature of the {NAMES.get(what, what)}", True,
                        f"signed by {key.signer}; its subject is {digest}"))
    for what in ("image", *documents):
        if what not in signed and not any(not row.ok and row.what.endswith(NAMES[what]) for row in rows):
            rows.append(Row(label, f"signature of the {NAMES[what]}", False, "missing: no bundle signs it"))
    return rows


def _check_statement(statement: Mapping[str, Any], what: str, digest: str, documents: Mapping[str, str],
                     config: str | None) -> None:
    subjects = [(s.get("digest") or {}).get("sha256") if isinstance(s, dict) and isinstance(s.get("digest") or {}, dict)
                else None for s in (statement.get("subject") or [] if isinstance(statement.get("subject"), list) else [None])]
    if subjects != [digest.split(":", 1)[1]]:
        raise SignatureError(f"is about {', '.join(map(str, subjects)) or 'nothing'}, not this manifest ({digest})")
    wanted = signing.PREDICATE_TYPES.get(what, signing.IMAGE_PREDICATE)
    if statement.get("predicateType") != wanted:
        raise SignatureError(f"signs a {statement.get('predicateType')!r} predicate, not {wanted!r}")
    if what not in attestations.KINDS:
        return
    if what not in documents:
        raise SignatureError(f"signs a {NAMES[what]} that the registry does not hold beside the image")
    document = json.loads(documents[what])
    if statement.get("predicate") != (document["predicate"] if what == "provenance" else document):
        raise SignatureError(f"signs another {NAMES[what]} than the one beside the image")
    # an engine names an image by its config's digest (the classic store) or its manifest's (containerd's)
    if config and what != "provenance" and described_image(what, document) not in (config.split(":", 1)[1],
                                                                                   digest.split(":", 1)[1]):
        raise SignatureError(f"signs a {NAMES[what]} of another image than this manifest ({digest}, config {config})")


def described_image(kind: str, document: Mapping[str, Any]) -> str:
    """The image (its config digest, hex) an SBOM says it describes; "" when it says none."""
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
