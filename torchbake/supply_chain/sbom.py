"""An image's software bill of materials, in SPDX 2.3 JSON, SPDX 3.0.1 JSON-LD and CycloneDX 1.6 JSON.

Made offline from what the image holds (:mod:`torchbake.supply_chain.inventory`: Debian packages, Python
distributions of every environment) and what torchbake recorded of its build (the image's labels:
the sha256 of every wheel and toolkit file, source trees at their commits, the base image and how
it was made; and, where the build manifest is on this host, the URL each input came from). Both
documents are made by the formats' own maintained libraries (``spdx-tools``,
``cyclonedx-python-lib``). Their validators are the tests' (on every kind of image torchbake
builds, with the standards' checker and syft beside them): spdx-tools' takes quadratic time in the
relationships of an image's 700 packages, seconds a build.

Every package is first described once as a :class:`Component`; the formats are views of the same
list (SPDX 3's in :mod:`torchbake.supply_chain.spdx3`).
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from torchbake.core.redaction import redact
from torchbake.supply_chain import licences, parties, spdx3
from torchbake.supply_chain.inventory import (
    LOCK_LABEL,
    SHA512_LABEL,
    Inventory,
    recorded_files,
    source_trees,
    wheel_files,
)

NAMESPACE = uuid.UUID("6f1d2a0e-5b7c-4f38-9a43-0c1f0e7b7a11")  # torchbake's: document ids from image ids


@dataclass(frozen=True)
class Component:
    """One package of the image, as both formats describe it."""

    ref: str  # unique within the document
    kind: str  # image, base-image, deb, python, toolkit, source
    name: str
    version: str
    purl: str = ""
    sha256: str = ""
    download: str = ""  # where it came from (a URL, never with credentials)
    licence: str = ""  # a valid SPDX expression (LicenseRef-s among its ids: see ``licence_refs``), or ""
    licence_text: str = ""  # what the package says of its licence, as it says it
    properties: Mapping[str, str] = field(default_factory=dict)
    supplier: str = ""  # NAME or NAME <EMAIL or URL>: the Debian maintainer, the wheel's author, the image's [sbom] supplier
    copyright: str = ""  # the copyright lines the package states
    depends_on: tuple[str, ...] = ()  # the refs of the components it depends on (dpkg Depends, Requires-Dist)
    licence_refs: Mapping[str, str] = field(default_factory=dict)  # LicenseRef-… → the text it stands for
    file_name: str = ""  # the file it was installed from (a wheel, a .deb, a tarball), where known
    sha512: str = ""  # that file's sha512 (``sha256`` is its sha256)


def purl(kind: str, namespace: str, name: str, version: str, **qualifiers: str) -> str:
    from packageurl import PackageURL

    return PackageURL(type=kind, namespace=namespace or None, name=name, version=version or None,
                      qualifiers={k: v for k, v in qualifiers.items() if v} or None).to_string()


def _distro(labels: Mapping[str, str], os_release: Mapping[str, str]) -> tuple[str, str]:
    """(purl namespace, distro qualifier) of the image's Debian packages: debian or ubuntu."""
    vendor = (os_release.get("ID") or "debian").lower()
    codename = os_release.get("VERSION_CODENAME") or labels.get("torchbake.bootstrap.suite", "")
    return vendor, f"{vendor}-{codename}" if codename else ""


def components(inventory: Inventory, inputs: Sequence[Mapping[str, Any]] = (), supplier: str = "") -> list[Component]:
    """Every package of the image: the image itself first, then its base image, Debian packages,
    Python distributions, toolkits and source trees. ``inputs``: the build manifest's entries
    (option, location, sha256) where this host has it; ``supplier``: the image's ([sbom] supplier)."""
    labels = inventory.labels
    name = labels.get("org.opencontainers.image.title", "") or "image"
    tag = labels.get("org.opencontainers.image.version", "")
    found = [Component("image", "image", name, tag, purl=purl("oci", "", name.rsplit("/", 1)[-1],
                                                                 f"sha256:{_hex(inventory.image_id)}",
                                                                 repository_url=name, tag=tag),
                       sha256=_hex(inventory.image_id), supplier=supplier, licence=licences.CONTENTS,
                       licence_refs={licences.CONTENTS: licences.CONTENTS_TEXT}, copyright=licences.CONTENTS_COPYRIGHT,
                       properties={"torchbake:variant": labels.get("torchbake.variant", ""),
                                   "torchbake:profile": labels.get("torchbake.profile", ""),
                                   "torchbake:input-hash": labels.get("torchbake.input-hash", ""),
                                   "torchbake:version": labels.get("torchbake.version", ""),
                                   "torchbake:lock": labels.get(LOCK_LABEL, "")})]
    base = labels.get("org.opencontainers.image.base.name", "")
    if base:
        bootstrap = {f"torchbake:bootstrap-{key.rsplit('.', 1)[1]}": value for key, value in labels.items()
                     if key.startswith("torchbake.bootstrap.")}
        base_id = _hex(labels.get("org.opencontainers.image.base.digest", ""))
        found.append(Component("base-image", "base-image", base.rsplit(":", 1)[0], base.rsplit(":", 1)[-1],
                               purl=purl("oci", "", base.rsplit(":", 1)[0].rsplit("/", 1)[-1],
                                         f"sha256:{base_id}" if base_id else "", repository_url=base.rsplit(":", 1)[0]),
                               sha256=base_id, properties=bootstrap, supplier=_os_supplier(inventory.os_release),
                               licence=licences.CONTENTS, licence_refs={licences.CONTENTS: licences.CONTENTS_TEXT},
                               copyright=licences.CONTENTS_COPYRIGHT))
    vendor, distro = _distro(labels, inventory.os_release)
    deb_refs = {deb.name: f"deb:{deb.name}:{deb.architecture}" for deb in inventory.debs}
    for deb in inventory.debs:
        licence, refs = licences.from_debian(deb.license)
        if not licence and deb.copyright:  # a copyright file that is not machine-readable: its terms are there
            licence, refs = licences.SEE_COPYRIGHT_FILE, licences.extracted({})
        unstated = "" if licence or deb.copyright else f"no copyright file states it (/usr/share/doc/{deb.name}/copyright)"
        found.append(Component(f"deb:{deb.name}:{deb.architecture}", "deb", deb.name, deb.version,
                               purl=deb_purl(deb, vendor, distro), download=deb.url,
                               # the archive's own name for it (apt's cache adds the epoch to it)
                               file_name=f"{deb.name}_{deb.version.split(':', 1)[-1]}_{deb.architecture}.deb"
                               if deb.file else "",
                               sha256=deb.sha256, sha512=deb.sha512,
                               properties={"torchbake:source-package": f"{deb.source} {deb.source_version}"},
                               supplier=deb.maintainer, licence=licence, licence_text=deb.license or unstated,
                               licence_refs={ref: text for ref, text in refs.items() if ref in licence},
                               copyright=deb.copyright,
                               depends_on=tuple(deb_refs[name] for name in deb.depends if name in deb_refs)))
    wheels = _wheel_files(labels)
    dist_refs = {(dist.environment, dist.key): f"python:{dist.environment}:{dist.key}" for dist in inventory.pythons
                 if not dist.vendored_by}
    for dist in inventory.pythons:
        wheel = wheels.get((dist.key, dist.version), {}) if dist.environment == inventory.main_environment else {}
        declared = dist.license_expression or dist.license
        licence, refs = licences.from_python(dist.license_expression, dist.license, dist.license_classifiers)
        requires = (dist_refs.get((dist.environment, _canonical(name))) for name in dist.requires)
        where = f"{dist.environment}:{dist.vendored_by}/_vendor" if dist.vendored_by else dist.environment
        unstated = [why for why, missing in ((NO_LICENCE, not licence), (NO_COPYRIGHT, not dist.copyright)) if missing]
        found.append(Component(
            f"python:{where}:{dist.key}", "python", dist.name, dist.version,
            purl=purl("pypi", "", dist.key, dist.version), licence=licence, licence_refs=refs,
            **wheel,
            licence_text="; ".join(filter(None, [declared, *dist.license_classifiers, *unstated])),
            properties={"torchbake:environment": dist.environment, "torchbake:vendored-by": dist.vendored_by},
            supplier=dist.author or dist.maintainer,
            copyright=dist.copyright, depends_on=tuple(ref for ref in requires if ref)))
    found += _binaries(inventory, {(dist.environment, dist.key): dist for dist in inventory.pythons}, wheels)
    found += _toolkits(labels, inputs, supplier)
    found += _sources(labels)
    return _unique_refs(found)


def _host_of(url: str) -> str:
    """``HOST <scheme://HOST>`` of a URL: who serves a file or repository is its supplier; "" for none."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.hostname} <{parts.scheme}://{parts.hostname}>" if parts.scheme and parts.hostname else ""


def deb_purl(deb, vendor: str, distro: str) -> str:
    """The package URL of a Debian package (``vendor``, ``distro``: :func:`distro_of`'s)."""
    return purl("deb", vendor, deb.name, deb.version, arch=deb.architecture, distro=distro,
                upstream=deb.source if deb.source != deb.name else "")


def distro_of(inventory: Inventory) -> tuple[str, str]:
    """(purl namespace, distro qualifier) of the image's Debian packages."""
    return _distro(inventory.labels, inventory.os_release)


def _canonical(name: str) -> str:
    from packaging.utils import canonicalize_name

    return str(canonicalize_name(name))


def _os_supplier(os_release: Mapping[str, str]) -> str:
    """The distribution that supplies the base image: its name and home page (/etc/os-release)."""
    name = os_release.get("NAME", "").split(" GNU/Linux")[0] or os_release.get("ID", "").capitalize()
    home = os_release.get("HOME_URL", "")
    return f"{name} <{home}>" if name and home else name


def _unique_refs(parts: list[Component]) -> list[Component]:
    """Each reference once: a second copy of a distribution in one environment (two dist-info
    folders of a half-done upgrade) is listed as the image holds it, under a reference of its own."""
    import dataclasses

    seen: dict[str, int] = {}
    unique = []
    for part in parts:
        count = seen[part.ref] = seen.get(part.ref, 0) + 1
        unique.append(part if count == 1 else dataclasses.replace(part, ref=f"{part.ref}#{count}"))
    return unique


def _hex(digest: str) -> str:
    return digest.split(":", 1)[-1] if digest else ""


# why an entry has no licence or copyright: said in the entry (SPDX licenseComments, CycloneDX properties)
NO_LICENCE = "the distribution's metadata states no licence"
NO_COPYRIGHT = "its licence files state no copyright line"
CRATE_LICENCE = ("cargo-auditable, whose data the binary carries, records no licence or copyright of a crate:"
                 " the crate's own page on its registry states them")


def _wheel_files(labels: Mapping[str, str]) -> dict[tuple[str, str], dict[str, str]]:
    """(project, version) → the file name, sha256 and sha512 of each wheel the image was built
    from (its labels), as a :class:`Component` holds them."""
    sha256s, sha512s = recorded_files(labels), recorded_files(labels, SHA512_LABEL)
    return {key: {"file_name": file.rsplit("/", 1)[-1], "sha256": sha256s.get(file, ""),
                  "sha512": sha512s.get(file, "")} for key, file in wheel_files(labels).items()}


def _binaries(inventory: Inventory, dists: Mapping[tuple[str, str], Any],
              wheels: Mapping[tuple[str, str], Mapping[str, str]]) -> list[Component]:
    """Each executable built with cargo-auditable and the Rust crates it holds (those it runs
    with; build-time crates are not in it), with the dependencies its data records. The binary's
    own crates are supplied by whoever made its wheel (the Python distribution in the image, or the
    wheel the build took it from: the image's ``torchbake.tools`` label), a registry's crates by
    that registry; ``wheels``: :func:`_wheel_files`."""
    from torchbake.supply_chain.inventory import TOOLS_LABEL, PythonDist

    try:
        tools = json.loads(inventory.labels.get(TOOLS_LABEL) or "{}")
    except ValueError:
        tools = {}
    found = []
    for binary in inventory.binaries:
        packages = list(binary.packages)
        root = next((i for i, p in enumerate(packages) if p.get("root")), None)
        if root is None:
            continue
        environment = binary.path.rsplit("/bin/", 1)[0]
        name = _canonical(str(packages[root]["name"]))
        tool = tools.get(name) or {}
        owner = dists.get((environment, name)) or (PythonDist(
            name, tool.get("version", ""), environment, license_expression=tool.get("license_expression", ""),
            license=tool.get("license", ""), author=tool.get("author") or tool.get("author_email", ""),
            maintainer=tool.get("maintainer", "")) if tool else None)
        owner_supplier = (owner.author or owner.maintainer) if owner else ""
        wheel = wheels.get((name, owner.version if owner else ""), {})  # the wheel the build took it out of
        refs = {i: f"binary:{binary.path}" if i == root else f"crate:{binary.path}:{p['name']}@{p['version']}"
                for i, p in enumerate(packages) if p.get("kind", "runtime") == "runtime"}
        for index, package in enumerate(packages):
            if index not in refs:
                continue
            registry = package.get("source") == "crates.io"
            found.append(Component(
                refs[index], "binary" if index == root else "crate", str(package["name"]), str(package["version"]),
                purl=purl("cargo", "", str(package["name"]), str(package["version"])),
                supplier="crates.io <https://crates.io>" if registry else owner_supplier,
                licence=(owner_licence(owner) if not registry and owner else ""), licence_text=CRATE_LICENCE,
                copyright=owner.copyright if owner and not registry else "",
                properties={"torchbake:path": binary.path, "torchbake:crate-source": str(package.get("source", ""))},
                depends_on=tuple(refs[i] for i in package.get("dependencies", []) if i in refs),
                **(wheel if index == root else {})))
    return found


def owner_licence(owner) -> str:
    return licences.from_python(owner.license_expression, owner.license, owner.license_classifiers)[0]


def _toolkits(labels: Mapping[str, str], inputs: Sequence[Mapping[str, Any]], supplier: str = "") -> list[Component]:
    """Every input file that is not a wheel: toolkit tarballs, a Python tarball (its URL where the
    manifest on this host names it; its supplier the URL's host, else the image's: the team that
    gave the file)."""
    from torchbake.configuration.validation import local_name
    from torchbake.inputs.downloads import split_fragment

    locations = {local_name(str(entry.get("location", ""))):
                 (str(entry.get("option", "")), redact(split_fragment(str(entry.get("location", "")))[0]))
                 for entry in inputs}
    found = []
    sha512s = recorded_files(labels, SHA512_LABEL)
    for file_name, sha in sorted(recorded_files(labels).items()):
        if str(file_name).endswith(".whl"):
            continue
        option, location = locations.get(file_name, ("", ""))
        found.append(Component(f"file:{file_name}", "toolkit", file_name, "", sha256=sha,
                               file_name=file_name, sha512=sha512s.get(file_name, ""),
                               purl=purl("generic", "", file_name, "", checksum=f"sha256:{sha}",
                                         download_url=location if "://" in location else ""),
                               download=location if "://" in location else "",
                               supplier=_host_of(location) or supplier,
                               properties={"torchbake:option": option} if option else {}))
    return found


def _sources(labels: Mapping[str, str]) -> list[Component]:
    """Source trees (dev and base images): repository and commit."""
    found = []
    for tree, facts in sorted(source_trees(labels).items()):
        repo, commit = redact(facts.get("repo", "")), facts.get("commit", "")
        github = re.match(r"https://github\.com/([^/]+)/([^/]+?)(?:\.git)?/?$", repo)
        ref = (purl("github", github[1], github[2], commit) if github
               else purl("generic", "", tree, commit, vcs_url=f"git+{repo}@{commit}" if repo else ""))
        found.append(Component(f"source:{tree}", "source", tree, commit, purl=ref, download=repo,
                               supplier=f"{github[1]} <https://github.com/{github[1]}>" if github else _host_of(repo),
                               properties={"torchbake:git-tag": facts.get("tag", "")} if facts.get("tag") else {}))
    return found


def created_time(labels: Mapping[str, str]) -> datetime:
    """The image's creation time (its label; SOURCE_DATE_EPOCH's when the build had one)."""
    text = labels.get("org.opencontainers.image.created", "")
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC).replace(microsecond=0)
    except ValueError:
        return datetime.fromtimestamp(0, UTC)


def spdx_document(inventory: Inventory, parts: list[Component], tool_version: str) -> str:
    """SPDX 2.3 JSON (the tests validate it with spdx-tools)."""
    import io

    from spdx_tools.spdx.model import (
        Actor,
        ActorType,
        Checksum,
        ChecksumAlgorithm,
        CreationInfo,
        Document,
        ExternalPackageRef,
        ExternalPackageRefCategory,
        ExtractedLicensingInfo,
        Package,
        PackagePurpose,
        Relationship,
        RelationshipType,
        SpdxNoAssertion,
    )
    from spdx_tools.spdx.validation.uri_validators import validate_download_location
    from spdx_tools.spdx.writer.json.json_writer import write_document_to_stream

    purposes = {"image": PackagePurpose.CONTAINER, "base-image": PackagePurpose.CONTAINER,
                "deb": PackagePurpose.LIBRARY, "python": PackagePurpose.LIBRARY, "toolkit": PackagePurpose.ARCHIVE,
                "source": PackagePurpose.SOURCE, "binary": PackagePurpose.APPLICATION, "crate": PackagePurpose.LIBRARY}
    parsed = functools.cache(licences.spdx_licensing().parse)  # each licence once: packages share a few
    ids: dict[str, str] = {}
    packages = []
    for part in parts:
        spdx_id = "SPDXRef-" + re.sub(r"[^A-Za-z0-9.-]+", "-", f"{part.kind}-{part.name}-{part.version}")[:150]
        while spdx_id in ids.values():
            spdx_id += "-1"
        ids[part.ref] = spdx_id
        comment = "; ".join(f"{k}={v}" for k, v in part.properties.items() if v) or None
        location = f"git+{part.download}@{part.version}" if part.kind == "source" and part.download else part.download
        # SPDX's own check refuses some real URLs (a host given by address and port): said in words then
        usable = bool(location) and not validate_download_location(location)
        packages.append(Package(
            spdx_id=spdx_id, name=part.name, download_location=location if usable else SpdxNoAssertion(),
            source_info=f"from {location}" if location and not usable else None,
            version=part.version or None, files_analyzed=False,
            checksums=[Checksum(ChecksumAlgorithm.SHA256, part.sha256)] if part.sha256 else [],
            supplier=(_actor(part.supplier, ActorType.ORGANIZATION if part.kind == "image" else None) if part.supplier
                      else SpdxNoAssertion()),
            # concluded as declared: torchbake reads what each package states and concludes nothing else
            license_declared=parsed(part.licence) if part.licence else SpdxNoAssertion(),
            license_concluded=parsed(part.licence) if part.licence else SpdxNoAssertion(),
            copyright_text=part.copyright or SpdxNoAssertion(),
            license_comment=part.licence_text or None, comment=comment,
            external_references=[ExternalPackageRef(ExternalPackageRefCategory.PACKAGE_MANAGER, "purl", part.purl)]
            if part.purl else [],
            primary_package_purpose=purposes[part.kind]))
    image = ids["image"]
    relationships = [Relationship("SPDXRef-DOCUMENT", RelationshipType.DESCRIBES, image)]
    for part in parts[1:]:
        if part.kind == "base-image":  # the image holds its base's layers, and is made from it
            relationships.append(Relationship(image, RelationshipType.DESCENDANT_OF, ids[part.ref]))
        relationships.append(Relationship(image, RelationshipType.CONTAINS, ids[part.ref]))
        relationships += [Relationship(ids[part.ref], RelationshipType.DEPENDS_ON, ids[ref]) for ref in part.depends_on]
    name = f"{parts[0].name}:{parts[0].version}"
    creators = [Actor(ActorType.TOOL, f"torchbake-{tool_version}")]
    if parts[0].supplier:
        creators.insert(0, _actor(parts[0].supplier, ActorType.ORGANIZATION))
    info = CreationInfo(
        spdx_version="SPDX-2.3", spdx_id="SPDXRef-DOCUMENT", name=name,
        document_namespace=f"urn:uuid:{uuid.uuid5(NAMESPACE, 'spdx ' + inventory.image_id)}",
        creators=creators, created=created_time(inventory.labels),
        creator_comment="SBOM type: analyzed (read from the built image) and build (its inputs as torchbake"
                        " recorded them). Licences are concluded as each package declares them.")
    refs = {ref: text for part in parts for ref, text in part.licence_refs.items()}
    extracted = [ExtractedLicensingInfo(license_id=ref, extracted_text=text, license_name=ref.removeprefix("LicenseRef-"))
                 for ref, text in sorted(refs.items())]
    document = Document(info, packages=packages, relationships=relationships, extracted_licensing_info=extracted)
    stream = io.StringIO()
    # no de-duplicating deep copy of the document (a third of the writer's time): each package's lists
    # here hold one checksum and one purl at most
    write_document_to_stream(document, stream, validate=False, drop_duplicates=False)
    return json.dumps(json.loads(stream.getvalue()), indent=2, sort_keys=True) + "\n"


def _actor(party: str, kind=None):
    """An SPDX actor of ``NAME <EMAIL or URL>``: an organisation when its name says it is one (or
    ``kind`` says so), else a person."""
    from spdx_tools.spdx.model import Actor, ActorType

    name, contact = parties.split(party)
    if kind is None:
        kind = ActorType.ORGANIZATION if parties.is_organisation(name) else ActorType.PERSON
    email = contact if "@" in contact and "://" not in contact else None
    return Actor(kind, name or contact, email)


def _organisation(party: str):
    """A CycloneDX organisational entity of ``NAME <EMAIL or URL>``."""
    from cyclonedx.model import XsUri
    from cyclonedx.model.contact import OrganizationalContact, OrganizationalEntity

    name, contact = parties.split(party)
    if "://" in contact:
        return OrganizationalEntity(name=name or contact, urls=[XsUri(contact)])
    return OrganizationalEntity(name=name or contact,
                                contacts=[OrganizationalContact(email=contact)] if "@" in contact else None)


def spdx3_document(inventory: Inventory, parts: list[Component], tool_version: str) -> str:
    """SPDX 3.0.1 JSON-LD (:mod:`torchbake.supply_chain.spdx3`), its id from the image's."""
    return spdx3.document(parts, tool_version, created_time(inventory.labels),
                          f"urn:uuid:{uuid.uuid5(NAMESPACE, 'spdx3 ' + inventory.image_id)}")


def cyclonedx_document(inventory: Inventory, parts: list[Component], tool_version: str) -> str:
    """CycloneDX 1.6 JSON, made by cyclonedx-python-lib's model and serializer (its JSON-schema
    validator costs a second and a half of imports a build: the tests run it on every kind of
    image torchbake builds). Serialized as the library's ``JsonV1Dot6.generate`` does, less its
    ``Bom.validate`` (deprecated there; its dependency registration scans every entry for each
    component: a tenth of the writer's time for an image of 700 packages) and its dependency graph's
    flat merge (it makes every entry again: a third of the writer's time). What they would add is
    here already: every component has one dependency entry, made once, naming only components of
    the BOM, none nested, and no component has a licence expression beside another licence."""
    from cyclonedx.contrib.bom.utils import BomRefDiscriminator
    from cyclonedx.model import ExternalReference, ExternalReferenceType, HashAlgorithm, HashType, Property, XsUri
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component as CdxComponent
    from cyclonedx.model.component import ComponentType
    from cyclonedx.model.contact import OrganizationalEntity
    from cyclonedx.model.dependency import Dependency
    from cyclonedx.model.license import DisjunctiveLicense, LicenseExpression
    from cyclonedx.model.tool import ToolRepository
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.schema.schema import SCHEMA_VERSIONS
    from packageurl import PackageURL

    organisation = functools.cache(_organisation)  # each supplier once: a base's packages share one
    kinds = {"image": ComponentType.CONTAINER, "base-image": ComponentType.CONTAINER, "deb": ComponentType.LIBRARY,
             "python": ComponentType.LIBRARY, "toolkit": ComponentType.FILE, "source": ComponentType.LIBRARY,
             "binary": ComponentType.APPLICATION, "crate": ComponentType.LIBRARY}

    def make(part: Component) -> CdxComponent:
        licences = ([LicenseExpression(part.licence)] if part.licence
                    else [DisjunctiveLicense(name=part.licence_text[:200])] if part.licence_text else [])
        references = [ExternalReference(type=ExternalReferenceType.DISTRIBUTION if part.kind != "source"
                                        else ExternalReferenceType.VCS, url=XsUri(part.download))] if part.download else []
        return CdxComponent(
            name=part.name, version=part.version or None, type=kinds[part.kind], bom_ref=part.ref,
            supplier=organisation(part.supplier) if part.supplier else None, copyright=part.copyright or None,
            purl=PackageURL.from_string(part.purl) if part.purl else None,
            hashes=[HashType(alg=HashAlgorithm.SHA_256, content=part.sha256)] if part.sha256 else [],
            licenses=licences, external_references=references,
            properties=[Property(name=k, value=v) for k, v in part.properties.items() if v])

    bom = Bom(serial_number=uuid.uuid5(NAMESPACE, "cyclonedx " + inventory.image_id))
    bom.metadata.timestamp = created_time(inventory.labels)
    bom.metadata.component = root = make(parts[0])
    if parts[0].supplier:
        bom.metadata.supplier = _organisation(parts[0].supplier)
    bom.metadata.tools = ToolRepository(components=[CdxComponent(
        name="torchbake", version=tool_version, type=ComponentType.APPLICATION,
        supplier=OrganizationalEntity(name="torchbake"))])
    made = {parts[0].ref: root}
    for part in parts[1:]:
        made[part.ref] = make(part)
    bom.components.update(made[part.ref] for part in parts[1:])
    # every component's entry at once (Bom.register_dependency scans the entries for each one it adds)
    needs = {parts[0].ref: [part.ref for part in parts[1:]], **{part.ref: list(part.depends_on) for part in parts[1:]}}
    bom.dependencies.update(Dependency(ref=made[ref].bom_ref, dependencies=[Dependency(ref=made[d].bom_ref) for d in deps])
                            for ref, deps in needs.items())
    with BomRefDiscriminator.from_bom(bom):
        document = json.loads(bom.as_json(view_=SCHEMA_VERSIONS[SchemaVersion.V1_6]))
    document.update({"$schema": "http://cyclonedx.org/schema/bom-1.6.schema.json", "bomFormat": "CycloneDX",
                     "specVersion": "1.6"})
    return json.dumps(document, indent=2, sort_keys=True) + "\n"
