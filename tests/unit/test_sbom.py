"""SBOMs, provenance and image diffs from fact tables: what the documents say of a known image,
validated by the formats' own maintained libraries; no secret in any of them."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from torchbake.supply_chain import attestations, image_diff, provenance, sbom_formats
from torchbake.supply_chain.inventory import Deb, Inventory, Layer, PythonDist

TORCH_SHA = "6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b"
SECRET = "s3cr3t-token-4711"


def image(*, torch="2.13.0+cpu", extra=(), layers=None, inputs=None) -> Inventory:
    labels = {
        "org.opencontainers.image.title": "torchbake/pytorch-cpu", "org.opencontainers.image.version": "2.13.0-py3.11",
        "org.opencontainers.image.created": "1970-01-01T00:00:00Z",
        "org.opencontainers.image.base.name": "debian:bookworm",
        "org.opencontainers.image.base.digest": "sha256:" + "b" * 64,
        "torchbake.bootstrap.suite": "bookworm", "torchbake.bootstrap.mirror": "debootstrap's default",
        "torchbake.variant": "release", "torchbake.profile": "cpu",
        "torchbake.inputs": json.dumps(inputs if inputs is not None else {
            f"torch-{torch}-cp311-cp311-manylinux_2_28_x86_64.whl": TORCH_SHA,
            "musa_toolkits-3.1.tar.gz": "c" * 64}),
        "torchbake.source.pytorch.repo": "https://github.com/pytorch/pytorch.git",
        "torchbake.source.pytorch.commit": "d" * 40, "torchbake.source.pytorch.tag": "v2.0.0",
        "torchbake.source.vision.repo": "http://127.0.0.1:9/vision.git", "torchbake.source.vision.commit": "e" * 40,
    }
    pythons = (PythonDist("torch", torch, "/opt/venv", license="BSD-3-Clause"),
               PythonDist("numpy", "2.4.6", "/opt/venv", license_classifiers=("BSD License",)),
               PythonDist("pip", "23.0.1", "/usr"), *extra)
    return Inventory(
        debs=(Deb("libc6", "2.36-9+deb12u14", "amd64", "glibc", "2.36-9+deb12u14"),
              Deb("python3.11", "3.11.2-6+deb12u8", "amd64", "python3.11", "3.11.2-6+deb12u8")),
        pythons=pythons, main_python="/opt/venv/bin/python", os_release={"ID": "debian", "VERSION_CODENAME": "bookworm"},
        layers=layers or (Layer("sha256:" + "1" * 64, 1000), Layer("sha256:" + "2" * 64, 2000)),
        labels=labels, image_id="sha256:" + "a" * 64)


INPUTS = [{"option": "toolkits.musa_toolkits_url", "location": f"https://ci:{SECRET}@files.example/musa_toolkits-3.1.tar.gz",
           "sha256": "c" * 64}]


def parts_by_purl(document: dict) -> dict[str, dict]:
    return {c["purl"]: c for c in document["components"]}


def test_both_documents_are_valid_by_their_formats_own_validators():
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator
    from spdx_tools.spdx.parser.jsonlikedict.json_like_dict_parser import JsonLikeDictParser
    from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

    documents = sbom_formats.documents(image(), INPUTS, tool_version="0.1.0")
    assert validate_full_spdx_document(JsonLikeDictParser().parse(json.loads(documents["spdx"]))) == []
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(documents["cyclonedx"]) is None
    spdx = json.loads(documents["spdx"])
    assert spdx["spdxVersion"] == "SPDX-2.3"
    assert {"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
            "relatedSpdxElement": "SPDXRef-image-torchbake-pytorch-cpu-2.13.0-py3.11"} in spdx["relationships"]
    torch = next(p for p in spdx["packages"] if p["name"] == "torch")
    assert torch["checksums"] == [{"algorithm": "SHA256", "checksumValue": TORCH_SHA}]
    assert torch["externalRefs"][0]["referenceLocator"] == "pkg:pypi/torch@2.13.0%2Bcpu"
    cdx = json.loads(documents["cyclonedx"])
    assert cdx["specVersion"] == "1.6"


def test_every_package_is_listed_with_its_package_url_and_torch_with_its_wheels_sha256():
    cdx = json.loads(sbom_formats.documents(image(), INPUTS, tool_version="0.1.0")["cyclonedx"])
    found = parts_by_purl(cdx)
    torch = found["pkg:pypi/torch@2.13.0%2Bcpu"]
    assert torch["hashes"] == [{"alg": "SHA-256", "content": TORCH_SHA}]
    assert torch["licenses"] == [{"expression": "BSD-3-Clause"}]
    assert "pkg:deb/debian/libc6@2.36-9%2Bdeb12u14?arch=amd64&distro=debian-bookworm&upstream=glibc" in found
    assert "pkg:deb/debian/python3.11@3.11.2-6%2Bdeb12u8?arch=amd64&distro=debian-bookworm" in found
    assert "pkg:github/pytorch/pytorch@" + "d" * 40 in found  # a source tree at its commit
    assert f"pkg:generic/vision@{'e' * 40}?vcs_url=git%2Bhttp://127.0.0.1:9/vision.git%40{'e' * 40}" in found
    toolkit = next(c for c in cdx["components"] if c["name"] == "musa_toolkits-3.1.tar.gz")
    assert toolkit["hashes"][0]["content"] == "c" * 64
    assert toolkit["externalReferences"][0]["url"] == "https://ci:***@files.example/musa_toolkits-3.1.tar.gz"
    base = next(c for c in cdx["components"] if c["type"] == "container")
    assert base["name"] == "debian" and base["hashes"][0]["content"] == "b" * 64
    assert {"name": "torchbake:bootstrap-suite", "value": "bookworm"} in base["properties"]
    pythons = [(c["name"], c["version"]) for c in cdx["components"] if c["purl"].startswith("pkg:pypi/")]
    assert sorted(pythons) == [("numpy", "2.4.6"), ("pip", "23.0.1"), ("torch", "2.13.0+cpu")]  # none invented
    # the pip of /usr is not the venv's: its environment says so
    pip = next(c for c in cdx["components"] if c["name"] == "pip")
    assert {"name": "torchbake:environment", "value": "/usr"} in pip["properties"] and "hashes" not in pip


def test_two_copies_of_a_distribution_in_one_environment_are_both_listed_and_the_documents_stay_valid():
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    twice = image(extra=(PythonDist("numpy", "2.4.5", "/opt/venv"),))
    documents = sbom_formats.documents(twice, INPUTS, tool_version="0.1.0")
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(documents["cyclonedx"]) is None
    numpys = sorted(c["version"] for c in json.loads(documents["cyclonedx"])["components"] if c["name"] == "numpy")
    assert numpys == ["2.4.5", "2.4.6"]
    assert sbom_formats.documents(twice, INPUTS, tool_version="0.1.0") == documents  # no made-up reference in it


def test_the_documents_of_one_image_are_the_same_every_time():
    assert sbom_formats.documents(image(), INPUTS, tool_version="0.1.0") == sbom_formats.documents(image(), INPUTS, tool_version="0.1.0")


def statement() -> dict:
    return provenance.statement(
        image="torchbake/pytorch-cpu:2.13.0-py3.11", image_id="sha256:" + "a" * 64, variant="release",
        configuration={"wheels.torch": "torch==2.13.0", "dev.compile_cache": f"redis://:{SECRET}@cache:6379",
                       "dev.git_credential_file": "/home/ci/.git-credentials", "sources.pytorch_tag": "v2.6.0",
                       "base.requirements": ["numpy"], "build.verify": True,
                       "wheels.index_url": f"https://user:{SECRET}@pypi.example/simple", "wheels.extra": ["numpy"]},
        inputs=INPUTS + [{"option": "wheels.torch", "location": "torch==2.13.0", "sha256": ""}],
        files={"torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl": TORCH_SHA, "musa_toolkits-3.1.tar.gz": "c" * 64},
        base={"reference": "debian:bookworm", "content_id": "sha256:" + "9" * 64, "digest": "sha256:" + "b" * 64},
        sources={"pytorch": {"repo": f"https://x:{SECRET}@github.com/pytorch/pytorch.git", "commit": "d" * 40}},
        recipe={"Dockerfile": "f" * 64}, builder={"torchbake": "0.1.0", "docker-client": "26.1.5"},
        started="2026-11-25T08:00:00Z", finished="2026-11-25T08:01:00Z", invocation="build-1",
        debs_added=[{"name": "libgomp1", "version": "12.2.0-14", "architecture": "amd64",
                     "purl": "pkg:deb/debian/libgomp1@12.2.0-14?arch=amd64&distro=debian-bookworm"}])


def test_provenance_is_an_in_toto_statement_naming_every_input_with_its_digest():
    document = json.loads(provenance.to_text(statement()))
    assert document["_type"] == "https://in-toto.io/Statement/v1"
    assert document["predicateType"] == "https://slsa.dev/provenance/v1"
    assert document["subject"] == [{"name": "torchbake/pytorch-cpu:2.13.0-py3.11", "digest": {"sha256": "a" * 64}}]
    definition = document["predicate"]["buildDefinition"]
    dependencies = {d["name"]: d for d in definition["resolvedDependencies"]}
    assert dependencies["torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"]["digest"] == {"sha256": TORCH_SHA}
    assert dependencies["musa_toolkits-3.1.tar.gz"]["uri"] == "https://ci:***@files.example/musa_toolkits-3.1.tar.gz"
    assert dependencies["base image"] == {"name": "base image", "digest": {"sha256": "b" * 64},
                                          "uri": f"pkg:oci/debian@sha256:{'b' * 64}?repository_url=debian&tag=bookworm"}
    assert dependencies["source pytorch"]["digest"] == {"gitCommit": "d" * 40}
    assert dependencies["wheels.torch"]["uri"] == "pkg:pypi/torch@2.13.0"  # the requirement, as a package URL
    assert dependencies["Dockerfile"]["uri"] == "pkg:pypi/torchbake@0.1.0#docker/ubuntu"
    assert dependencies["deb libgomp1"]["uri"].startswith("pkg:deb/debian/libgomp1@12.2.0-14")
    wheel = dependencies["torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"]
    assert wheel["annotations"]["index"] == "https://user:***@pypi.example/simple"
    # exactly the options that decide a release image: no dev, source or base-image option, no verify switch
    assert definition["externalParameters"] == {"wheels.torch": "torch==2.13.0", "wheels.extra": ["numpy"],
                                                "wheels.index_url": "https://user:***@pypi.example/simple"}
    from packageurl import PackageURL

    for dependency in definition["resolvedDependencies"]:  # every uri that is a package URL parses as one
        if dependency.get("uri", "").startswith("pkg:"):
            assert PackageURL.from_string(dependency["uri"]).to_string() == dependency["uri"]
    run = document["predicate"]["runDetails"]
    assert run["metadata"] == {"invocationId": "build-1", "startedOn": "2026-11-25T08:00:00Z",
                               "finishedOn": "2026-11-25T08:01:00Z"}


@pytest.mark.parametrize(("reference", "purl"), [
    ("127.0.0.1:5000/team/base:1", "pkg:oci/base@sha256:{b}?repository_url=127.0.0.1:5000/team/base&tag=1"),
    ("127.0.0.1:5000/team/base", "pkg:oci/base@sha256:{b}?repository_url=127.0.0.1:5000/team/base"),
    # pinned by digest, with or without its tag: the digest is no tag, the repository no part of one
    (f"team/base:1@sha256:{'c' * 64}", "pkg:oci/base@sha256:{b}?repository_url=team/base&tag=1"),
    (f"team/base@sha256:{'c' * 64}", "pkg:oci/base@sha256:{b}?repository_url=team/base"),
])
def test_the_base_images_package_url_names_its_repository_and_tag_whatever_the_reference_holds(reference, purl):
    found = provenance.base_dependency({"reference": reference, "digest": "sha256:" + "b" * 64})
    assert found["uri"] == purl.format(b="b" * 64)


@pytest.mark.parametrize("make", [lambda: provenance.to_text(statement()),
                                  lambda: "".join(sbom_formats.documents(image(), INPUTS, tool_version="0.1.0").values())])
def test_no_secret_in_any_document(make):
    assert SECRET not in make()


def test_a_diff_names_exactly_the_packages_layers_and_inputs_that_changed():
    old = image()
    new = image(torch="2.13.1+cpu", extra=(PythonDist("teamlib", "1.0", "/opt/venv"),),
                layers=(Layer("sha256:" + "1" * 64, 1000), Layer("sha256:" + "3" * 64, 3600)))
    found = image_diff.compare("a", old, "b", new)
    assert [c.text() for c in found.of("python")] == ["+teamlib 1.0", "torch 2.13.0+cpu → 2.13.1+cpu"]
    assert found.of("deb") == [] and found.of("label") == []
    assert [c.name for c in found.of("input")] == ["torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                                                   "torch-2.13.1+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"]
    assert found.new_bytes == 3600 and found.shared_bytes == 1000 and len(found.removed_layers) == 1
    assert found.summary() == "+teamlib 1.0; torch 2.13.0+cpu → 2.13.1+cpu; 3.6 kB new layers"
    assert image_diff.compare("a", old, "a", old).summary() == "no package changed; no new layer"


def test_a_registry_images_inventory_is_read_back_from_its_cyclonedx_sbom():
    cdx = json.loads(sbom_formats.documents(image(), INPUTS, tool_version="0.1.0")["cyclonedx"])
    back = image_diff.from_cyclonedx(cdx, image().labels, image().layers, image().image_id)
    assert image_diff.compare("local", image(), "registry", back).changes == ()


def test_an_attestation_is_an_oci_artifact_whose_subject_is_the_image():
    subject = attestations.Subject("application/vnd.oci.image.index.v1+json", "sha256:" + "9" * 64, 1234)
    manifest = json.loads(attestations.artifact_manifest("spdx", b'{"spdxVersion": "SPDX-2.3"}', subject, "1970"))
    assert manifest["artifactType"] == "application/spdx+json"
    assert manifest["config"]["mediaType"] == "application/vnd.oci.empty.v1+json"
    assert manifest["subject"] == {"mediaType": subject.media_type, "digest": subject.digest, "size": 1234}
    assert manifest["layers"][0]["mediaType"] == "application/spdx+json"
    assert attestations.referrers_tag("sha256:" + "9" * 64) == "sha256-" + "9" * 64


def test_the_cyclonedx_dependency_graph_is_flat_and_merged_as_the_librarys_merger_makes_it():
    """One entry a component (the image's entry lists every other one), each naming exactly the
    components it depends on and none nested: what cyclonedx's BomDependencyGraphFlatMerger would
    make of it, which the writer leaves out (it made every entry again: a third of its time)."""
    from cyclonedx.contrib.bom.utils import BomDependencyGraphFlatMerger
    from cyclonedx.model.dependency import Dependency

    from torchbake.supply_chain import sbom

    inventory = dataclasses.replace(
        image(extra=(PythonDist("torchvision", "0.28.0", "/opt/venv", requires=("torch", "numpy")),)),
        debs=(Deb("libc6", "2.36-9+deb12u14", "amd64", "glibc", "2.36-9+deb12u14"),
              Deb("python3.11", "3.11.2-6+deb12u8", "amd64", "python3.11", "3.11.2-6+deb12u8", depends=("libc6",))))
    parts = sbom.components(inventory, INPUTS, "")
    entries = json.loads(sbom.cyclonedx_document(inventory, parts, "0.1.0"))["dependencies"]
    refs = [entry["ref"] for entry in entries]
    assert sorted(refs) == sorted(part.ref for part in parts)  # each component once
    assert any(part.depends_on for part in parts[1:])  # the graph has edges to hold
    graph = {entry["ref"]: sorted(entry.get("dependsOn", [])) for entry in entries}
    assert graph == {parts[0].ref: sorted(part.ref for part in parts[1:]),
                     **{part.ref: sorted(part.depends_on) for part in parts[1:]}}
    merged = BomDependencyGraphFlatMerger._flatten_merge(  # the library's merge of the written graph
        [Dependency(ref, [Dependency(d) for d in needs]) for ref, needs in graph.items()])
    assert {str(d.ref): sorted(str(n.ref) for n in d.dependencies) for d in merged} == graph


STATUS = ("Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2.36-9+deb12u14\n"
          "Source: glibc\nMaintainer: GNU Libc Maintainers <debian-glibc@lists.debian.org>\n\n")


class StatusEngine:
    """An engine whose images hold STATUS as their dpkg database; ``ids``: reference → image id."""

    def __init__(self, ids: dict[str, str]):
        self.ids, self.containers = ids, 0

    def read_file(self, image, path):
        self.containers += 1
        return STATUS

    def inspect_image(self, reference):
        return {"Id": self.ids[reference]} if reference in self.ids else None


def test_a_from_images_packages_are_read_once_per_image_id_and_kept_only_while_its_name_holds_it(tmp_path):
    from torchbake.supply_chain.inventory import base_debs

    base = {"reference": "debian:bookworm", "image_id": "sha256:" + "7" * 64}
    engine = StatusEngine({"debian:bookworm": base["image_id"]})
    first = base_debs(engine, base, tmp_path)
    assert [deb.name for deb in first] == ["libc6"] and engine.containers == 1
    assert base_debs(engine, base, tmp_path) == first and engine.containers == 1  # from the record, no container
    (tmp_path / "base-debs" / f"sha256-{'7' * 64}.json").write_text('{"debs": [{"name": 1}]}')  # damaged
    assert base_debs(engine, base, tmp_path) == first and engine.containers == 2
    moved = {**base, "image_id": "sha256:" + "8" * 64}  # the name now holds another image: read, not kept
    assert base_debs(engine, moved, tmp_path) == first and engine.containers == 3
    assert not (tmp_path / "base-debs" / f"sha256-{'8' * 64}.json").exists()
    base_debs(engine, moved, tmp_path)
    assert engine.containers == 4


def built(tmp_path, made_with: dict | None) -> tuple:
    """The documents of image() beside a build manifest in ``tmp_path``, as a build writes them
    (``made_with``: the manifest's record of what they were made with; None: an older build's)."""
    inventory = Inventory.from_json(json.loads(json.dumps(image().to_json(), sort_keys=True)))  # labels by key, as
    manifest = tmp_path / "build-1.manifest.json"  # the engine gives them
    documents = {**sbom_formats.documents(inventory, INPUTS),
                 attestations.INVENTORY: json.dumps(inventory.to_json(), indent=1, sort_keys=True) + "\n"}
    paths = attestations.write_beside(manifest, documents)
    record = {"image_id": inventory.image_id, "inputs": INPUTS, "attestations": {"team/cpu:1": paths},
              **({attestations.MADE_WITH: {"team/cpu:1": made_with}} if made_with is not None else {})}
    manifest.write_text(json.dumps(record))
    os.utime(manifest, (1_000_000, 1_000_000))
    return inventory.image_id, manifest, documents


def counted(monkeypatch) -> list[str]:
    """The supplier of every SBOM set made from here on, in order."""
    made: list[str] = []
    documents = sbom_formats.documents
    monkeypatch.setattr(sbom_formats, "documents", lambda *a, **k: made.append(k.get("supplier")) or documents(*a, **k))
    return made


def test_a_push_makes_the_sboms_again_only_for_options_they_were_not_made_with(tmp_path, monkeypatch):
    image_id, manifest, written = built(tmp_path, attestations.sboms_made_with(""))
    made = counted(monkeypatch)
    # as built: what is beside the manifest, nothing made again
    assert attestations.recorded_with(tmp_path, image_id, "team/cpu:1", "") == (written, [])
    assert made == []
    # another [sbom] supplier: made again, written back, and the manifest says with what (its time kept)
    supplier = "ML Platform <ml-platform@example.com>"
    found, remade = attestations.recorded_with(tmp_path, image_id, "team/cpu:1", supplier)
    assert remade == ["cyclonedx", "spdx", "spdx3"] and made == [supplier]
    assert all(supplier.split(" <")[0] in found[kind] for kind in remade)
    assert json.loads(manifest.read_text())[attestations.MADE_WITH] == {"team/cpu:1": attestations.sboms_made_with(supplier)}
    assert manifest.stat().st_mtime == 1_000_000
    # ... then read as they are; and the first supplier again: made again
    assert attestations.recorded_with(tmp_path, image_id, "team/cpu:1", supplier) == (found, [])
    assert made == [supplier]
    assert attestations.recorded_with(tmp_path, image_id, "team/cpu:1", "")[1] == ["cyclonedx", "spdx", "spdx3"]


def test_an_older_builds_sboms_are_made_again_once_then_read(tmp_path, monkeypatch):
    image_id, manifest, written = built(tmp_path, None)
    made = counted(monkeypatch)
    assert attestations.recorded_with(tmp_path, image_id, "team/cpu:1", "") == (written, [])
    assert made == [""]
    assert attestations.recorded_with(tmp_path, image_id, "team/cpu:1", "") == (written, [])
    assert made == [""]


def test_a_record_that_cannot_be_written_leaves_the_push_as_it_was(tmp_path, monkeypatch):
    """An older build's record in logs this user cannot write: its SBOMs are made again, as every
    push made them before, and the push goes on."""
    from torchbake.supply_chain import manifest as build_manifest

    image_id, manifest, written = built(tmp_path, None)

    def refused(*_):
        raise PermissionError(13, "Permission denied", str(manifest))

    monkeypatch.setattr(build_manifest, "update", refused)
    assert attestations.recorded_with(tmp_path, image_id, "team/cpu:1", "") == (written, [])
    assert attestations.MADE_WITH not in json.loads(manifest.read_text())
