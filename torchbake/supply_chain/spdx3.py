"""An image's SBOM in SPDX 3.0.1 JSON-LD, made by SPDX's own bindings (``spdx-python-model``).

The same components as the SPDX 2.3 and CycloneDX documents (:mod:`torchbake.supply_chain.sbom`),
in the version whose model holds what SPDX 2.3 cannot and the standards ask: the SBOM's type
(analyzed and build: CISA's FSCT3), and for BSI TR-03183-2 every agent's address (e-mail or web
page), each package's distribution file by name with its SHA-512, and the licence each package
declares as a licence expression of its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from torchbake.supply_chain import parties

SBOM_TYPES = ("analyzed", "build")  # read from the built image, and its inputs as the build recorded them

# what each kind of component is (SPDX's software purposes)
PURPOSES = {"image": "container", "base-image": "container", "deb": "library", "python": "library",
            "toolkit": "archive", "source": "source", "binary": "application", "crate": "library"}


# why a package names no file it was installed from (BSI's distribution filename and SHA-512): said in it
NO_FILE = {
    "image": "an OCI image: distributed as a manifest and its layers (its digest identifies it), not one file",
    "base-image": "an OCI image: distributed as a manifest and its layers (its digest identifies it), not one file",
    "deb": "installed in the base image with no record of its .deb (a base torchbake did not make, or made before"
           " it recorded them): the file is not in the image and its digest was not kept",
    "python": "not installed from a wheel of this build (an environment's own, or vendored inside another"
              " distribution)",
    "crate": "compiled into the binary: cargo-auditable records no file or checksum of a crate",
    "binary": "taken out of its wheel, which the build's records name",
    "source": "a git tree at a commit (the commit identifies it), not one file",
}


class _Graph:
    """The elements of one document, each made once (agents and licences are shared)."""

    def __init__(self, spdx3, prefix: str, info):
        self.spdx3, self.prefix, self.info = spdx3, prefix, info
        self.made: list[Any] = []
        self.agents: dict[str, Any] = {}
        self.expressions: dict[str, Any] = {}
        self.custom: dict[str, Any] = {}

    def new(self, kind, local: str, **values):
        element = kind(spdxId=self.prefix + re.sub(r"[^A-Za-z0-9._~-]+", "-", local), creationInfo=self.info,
                       **{key: value for key, value in values.items() if value not in (None, "", [])})
        self.made.append(element)
        return element

    def agent(self, party: str, organisation: bool | None = None):
        """An Organization or Person of ``NAME <EMAIL or URL>``, its address as an identifier."""
        if party not in self.agents:
            spdx3 = self.spdx3
            name, contact = parties.split(party)
            if organisation is None:
                organisation = parties.is_organisation(name)
            kind = "urlScheme" if "://" in contact else "email" if "@" in contact else ""
            identifiers = [spdx3.ExternalIdentifier(
                identifier=contact, externalIdentifierType=spdx3.ExternalIdentifierType.NAMED_INDIVIDUALS[kind])
                           ] if kind else []
            self.agents[party] = self.new(spdx3.Organization if organisation else spdx3.Person,
                                          f"agent-{len(self.agents)}", name=name or contact,
                                          externalIdentifier=identifiers)
        return self.agents[party]

    def licence(self, part):
        """The licence expression of ``part``, its LicenseRef-s custom licences with their text."""
        spdx3 = self.spdx3
        if part.licence not in self.expressions:
            for ref, text in part.licence_refs.items():
                if ref not in self.custom:
                    self.custom[ref] = self.new(spdx3.expandedlicensing_CustomLicense, ref,
                                                name=ref.removeprefix("LicenseRef-"), simplelicensing_licenseText=text)
            used = sorted(ref for ref in self.custom if ref in part.licence)
            self.expressions[part.licence] = self.new(
                spdx3.simplelicensing_LicenseExpression, f"licence-{len(self.expressions)}",
                simplelicensing_licenseExpression=part.licence,
                simplelicensing_customIdToUri=[spdx3.DictionaryEntry(key=ref, value=self.custom[ref].spdxId)
                                               for ref in used])
        return self.expressions[part.licence]

    def relate(self, source, kind: str, targets: list) -> None:
        if targets:
            self.new(self.spdx3.Relationship, f"rel-{len(self.made)}", from_=source, to=targets,
                     relationshipType=self.spdx3.RelationshipType.NAMED_INDIVIDUALS[kind])

    def package(self, part, index: int):
        """The package of ``part``, its licences and the file it was installed from."""
        spdx3 = self.spdx3
        purposes = spdx3.software_SoftwarePurpose.NAMED_INDIVIDUALS
        supplier = self.agent(part.supplier, True if part.kind == "image" else None) if part.supplier else None
        said = [part.licence_text, *(f"{k}={v}" for k, v in part.properties.items() if v),
                "" if part.file_name else f"no distribution file: {NO_FILE[part.kind]}"]
        package = self.new(
            spdx3.software_Package, f"{part.kind}-{part.name}-{part.version}-{index}", name=part.name,
            software_packageVersion=part.version, software_packageUrl=part.purl,
            software_downloadLocation=part.download if "://" in part.download else None,
            software_copyrightText=part.copyright, comment="; ".join(filter(None, said)),
            software_primaryPurpose=purposes[PURPOSES[part.kind]],
            suppliedBy=supplier, originatedBy=[supplier] if supplier else [],
            verifiedUsing=[_hash(spdx3, "sha256", part.sha256)] if part.sha256 and not part.file_name else [])
        if part.licence:  # concluded as declared: torchbake reads what each package states
            self.relate(package, "hasDeclaredLicense", [self.licence(part)])
            self.relate(package, "hasConcludedLicense", [self.licence(part)])
        if part.file_name:  # a wheel, a .deb, a tarball: an archive that keeps its files' structure
            hashes = [_hash(spdx3, name, value) for name, value in (("sha256", part.sha256), ("sha512", part.sha512))
                      if value]
            self.relate(package, "hasDistributionArtifact", [self.new(
                spdx3.software_File, f"file-{part.file_name}-{index}", name=part.file_name, verifiedUsing=hashes,
                software_primaryPurpose=purposes["archive"], software_additionalPurpose=[purposes["container"]])])
        return package


def document(parts: Sequence[Any], tool_version: str, created: datetime, document_id: str) -> str:
    """The SPDX 3.0.1 JSON-LD document of ``parts`` (:class:`torchbake.supply_chain.sbom.Component`;
    the first is the image itself), made at ``created``, its elements' ids below ``document_id``."""
    from spdx_python_model.bindings import v3_0_1 as spdx3

    info = spdx3.CreationInfo(specVersion="3.0.1", created=created,
                              comment="SBOM type: analyzed (read from the built image) and build (its inputs as"
                                      " torchbake recorded them). Licences are concluded as each package declares them.")
    graph = _Graph(spdx3, f"{document_id}#", info)
    info.createdUsing = [graph.new(spdx3.Tool, "tool-torchbake", name=f"torchbake-{tool_version}")]
    info.createdBy = [graph.agent(parts[0].supplier, True) if parts[0].supplier else graph.new(
        spdx3.Agent, "agent-unnamed", name="the builder of this image (no [sbom] supplier was given)")]
    packages = {part.ref: graph.package(part, index) for index, part in enumerate(parts)}
    image = packages[parts[0].ref]
    graph.relate(image, "contains", [packages[part.ref] for part in parts[1:]])
    for part in parts[1:]:
        if part.kind == "base-image":  # the image holds its base's layers, and is made from it
            graph.relate(image, "descendantOf", [packages[part.ref]])
        graph.relate(packages[part.ref], "dependsOn", [packages[ref] for ref in part.depends_on if ref in packages])
    types = spdx3.software_SbomType.NAMED_INDIVIDUALS
    bom = graph.new(spdx3.software_Sbom, "sbom", software_sbomType=[types[kind] for kind in SBOM_TYPES],
                    rootElement=[image], element=list(graph.made))
    profiles = spdx3.ProfileIdentifierType.NAMED_INDIVIDUALS
    doc = spdx3.SpdxDocument(spdxId=graph.prefix + "document", creationInfo=info,
                             name=f"{parts[0].name}:{parts[0].version}", rootElement=[bom],
                             element=[e for e in graph.made if e is not bom],
                             profileConformance=[profiles[p] for p in ("core", "software", "simpleLicensing",
                                                                       "expandedLicensing")])
    data = spdx3.JSONLDSerializer().serialize_data(spdx3.SHACLObjectSet([*graph.made, doc]))
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _hash(spdx3, algorithm: str, value: str):
    return spdx3.Hash(algorithm=spdx3.HashAlgorithm.NAMED_INDIVIDUALS[algorithm], hashValue=value)
