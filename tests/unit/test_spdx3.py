"""The SPDX 3.0.1 SBOM judged by the standards' checker nobody here wrote (ntia-conformance-checker):
NTIA minimum elements and CISA FSCT3-min pass on an image whose packages state everything; BSI
TR-03183-2 passes but for the packages no single file stands for (the image, its base, its
sources), each saying why in the document."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.unit.test_sbom import image
from torchbake.checks import signatures
from torchbake.supply_chain import sbom_formats
from torchbake.supply_chain.inventory import Deb, PythonDist

WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
SUPPLIER = "ML Platform <ml-platform@example.com>"


def known(*, sha512: bool = True, deb_file: bool = True):
    base = image()
    debs = (Deb("libc6", "2.36-9", "amd64", "glibc", "2.36-9", maintainer="GNU Libc Maintainers <debian-glibc@lists.debian.org>",
                license="LGPL-2.1+", copyright="Copyright (C) 1991-2023 Free Software Foundation, Inc.",
                **({"file": "libc6_2.36-9_amd64.deb", "url": "http://deb.debian.org/debian/pool/main/g/glibc/libc6_2.36-9_amd64.deb",
                    "sha256": "1" * 64, "sha512": "2" * 128} if deb_file else {})),)
    pythons = (PythonDist("torch", "2.13.0+cpu", "/opt/venv", license_expression="BSD-3-Clause",
                          author="PyTorch Team <packages@pytorch.org>", copyright="Copyright (c) 2016- Facebook, Inc"),)
    labels = {**base.labels, "torchbake.inputs": json.dumps({WHEEL: "3" * 64}),
              "torchbake.inputs.sha512": json.dumps({WHEEL: "4" * 128} if sha512 else {})}
    for key in [k for k in labels if k.startswith("torchbake.source.")]:
        del labels[key]
    return dataclasses.replace(base, debs=debs, pythons=pythons, labels=labels, os_release={
        **base.os_release, "NAME": "Debian GNU/Linux", "HOME_URL": "https://www.debian.org/"})


def judged(tmp_path, inventory, standard: str):
    from ntia_conformance_checker.bsi_checker import BSIChecker
    from ntia_conformance_checker.fsct_checker import FSCT3Checker
    from ntia_conformance_checker.ntia_checker import NTIAChecker

    path = tmp_path / "image.spdx3.json"
    path.write_text(sbom_formats.documents(inventory, tool_version="0.1.0", supplier=SUPPLIER)["spdx3"])
    checker = {"ntia": NTIAChecker, "fsct3-min": FSCT3Checker, "bsi": BSIChecker}[standard]
    return checker(str(path), sbom_spec="spdx3"), json.loads(path.read_text())


@pytest.mark.parametrize("standard", ["ntia", "fsct3-min"])
def test_the_spdx3_sbom_passes_ntia_and_fsct3_with_its_sbom_type(tmp_path, standard):
    checker, document = judged(tmp_path, known(), standard)
    assert checker._parsing_errors == [] and checker._validation_messages == []
    assert checker.compliant, checker.output_json()
    bom = next(e for e in document["@graph"] if e["type"] == "software_Sbom")
    assert sorted(bom["software_sbomType"]) == ["analyzed", "build"]


def test_bsi_fails_only_on_the_files_no_single_file_stands_for_each_saying_why(tmp_path):
    checker, document = judged(tmp_path, known(), "bsi")
    assert checker.doc_creator and checker.doc_uri and checker.doc_timestamp and checker.dependency_completeness
    for field in ("creators", "concluded_licenses", "sha512_hashes", "structured_prop", "names", "versions"):
        assert getattr(checker, f"components_without_{field}") == [], field
    no_file = {name for name, _ in checker.components_without_filenames}
    assert no_file == {"torchbake/pytorch-cpu", "debian"}  # the image and its base image: OCI images, not files
    packages = {e["name"]: e for e in document["@graph"] if e["type"] == "software_Package"}
    assert all("no distribution file: an OCI image" in packages[name]["comment"] for name in no_file)
    files = {e["name"]: e for e in document["@graph"] if e["type"] == "software_File"}
    assert {h["algorithm"]: h["hashValue"] for h in files[WHEEL]["verifiedUsing"]} == {"sha256": "3" * 64,
                                                                                       "sha512": "4" * 128}
    assert set(files) == {WHEEL, "libc6_2.36-9_amd64.deb"}


def test_a_file_without_its_sha512_or_a_deb_without_its_file_fails_bsi(tmp_path):
    checker, _ = judged(tmp_path, known(sha512=False), "bsi")
    assert [name for name, _ in checker.components_without_sha512_hashes] == ["torch"]
    checker, _ = judged(tmp_path, known(deb_file=False), "bsi")
    assert "libc6" in {name for name, _ in checker.components_without_filenames}


def test_the_spdx3_sbom_names_the_image_it_describes():
    document = json.loads(sbom_formats.documents(known(), tool_version="0.1.0")["spdx3"])
    assert signatures.described_image("spdx3", document) == "a" * 64
    creator = next(e for e in document["@graph"] if e["type"] == "CreationInfo")
    agents = {e["spdxId"]: e for e in document["@graph"] if e["type"] in ("Agent", "Organization", "Person")}
    assert [agents[a]["name"] for a in creator["createdBy"]] == ["the builder of this image (no [sbom] supplier was given)"]
