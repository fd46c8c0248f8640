"""What packages say of their licences and copyrights, read as the in-image script reads them and
mapped to SPDX ids where the words name one."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.unit.test_sbom import INPUTS, image
from torchbake.supply_chain import licences, sbom_formats
from torchbake.supply_chain.inventory import Deb, PythonDist, parse_debian_copyright, parse_dpkg_status

DEP5 = """Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: zlib

Files: *
Copyright: 1995-2022 Jean-loup Gailly and Mark Adler
 .
 2003 Someone Else
License: Zlib
 This software is provided 'as-is' ...

Files: debian/*
Copyright: 2020 Debian
License: GPL-2+
"""
DEP5_NO_STAR = """Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/

Files: debian/*
Copyright: 2020, Aurelien Jarno
License: LGPL-2.1+

Files: src/*
Copyright: 2014 Thorsten Kukuk
License: BSD-3-clause or GPL-2
"""
FREE = """This is Debian GNU's GnuPG keyrings of archive keys.

Debian support files Copyright (C) 2006 Michael Vogt <mvo@debian.org>
The keys in the keyrings don't fall under any copyright.
"""


@pytest.mark.parametrize(("text", "licence", "notice"), [
    (DEP5, "Zlib", "1995-2022 Jean-loup Gailly and Mark Adler\n2003 Someone Else"),
    (DEP5_NO_STAR, "LGPL-2.1+ and (BSD-3-clause or GPL-2)", "2020, Aurelien Jarno\n2014 Thorsten Kukuk"),
    (FREE, "", "Debian support files Copyright (C) 2006 Michael Vogt <mvo@debian.org>"),
    ("", "", ""),
])
def test_a_debian_copyright_file_gives_its_licence_and_copyright_lines(text, licence, notice):
    assert parse_debian_copyright(text) == (licence, notice)


def test_dpkg_status_gives_each_packages_maintainer_and_dependencies():
    status = ("Package: python3.11-minimal\nStatus: install ok installed\nVersion: 3.11.2\nArchitecture: amd64\n"
              "Maintainer: Matthias Klose <doko@debian.org>\nPre-Depends: libc6 (>= 2.35)\n"
              "Depends: libpython3.11-minimal (= 3.11.2), libexpat1:amd64 (>= 2.1), media-types | mime-support\n")
    (deb,) = parse_dpkg_status(status)
    assert deb["maintainer"] == "Matthias Klose <doko@debian.org>"
    assert deb["depends"] == ["libc6", "libexpat1", "libpython3.11-minimal", "media-types"]


@pytest.mark.parametrize(("debian", "spdx"), [
    ("GPL-2+", "GPL-2.0-or-later"), ("Expat", "MIT"), ("BSD-3-clause or GPL-2", "BSD-3-Clause OR GPL-2.0-only"),
    ("LGPL-2.1+ and (BSD-3-clause or GPL-2)", "LGPL-2.1-or-later AND (BSD-3-Clause OR GPL-2.0-only)"),
    ("GFDL-NIV-1.3+", "GFDL-1.3-no-invariants-or-later"), ("Apache-2.0", "Apache-2.0"),
    ("public-domain", "LicenseRef-debian-public-domain"), ("", ""),
])
def test_debians_licence_names_become_spdx_expressions_or_references_with_their_text(debian, spdx):
    expression, refs = licences.from_debian(debian)
    assert expression == spdx
    assert set(refs) == {part for part in spdx.split() if part.startswith("LicenseRef-")}
    assert all(debian in text for text in refs.values())


def test_a_python_licence_is_its_expression_else_a_reference_to_what_it_says():
    assert licences.from_python("BSD-3-Clause AND MIT", "", ()) == ("BSD-3-Clause AND MIT", {})
    assert licences.from_python("", "MIT", ()) == ("MIT", {})
    ref, refs = licences.from_python("", "BSD License", ("BSD License",))
    assert ref == "LicenseRef-python-BSD-License" and refs[ref].endswith("states: BSD License")
    assert licences.from_python("", "", ()) == ("", {})


def test_an_image_of_known_packages_passes_ntias_minimum_elements(tmp_path):
    """The checker nobody here wrote, on a document made from a known image: suppliers, licences,
    copyrights and dependencies as the packages state them; the image's supplier as [sbom] says."""
    base = image()
    debs = (Deb("libc6", "2.36-9", "amd64", "glibc", "2.36-9", maintainer="GNU Libc Maintainers <debian-glibc@lists.debian.org>",
                license="", copyright="Copyright (C) 1991-2023 Free Software Foundation, Inc."),
            Deb("python3.11", "3.11.2-6", "amd64", "python3.11", "3.11.2-6", maintainer="Matthias Klose <doko@debian.org>",
                depends=("libc6", "not-installed"), license="PSF-2", copyright="2001-2023 Python Software Foundation"))
    pythons = (PythonDist("torch", "2.13.0+cpu", "/opt/venv", license_expression="BSD-3-Clause",
                          author="PyTorch Team <packages@pytorch.org>", requires=("sympy", "absent"),
                          copyright="Copyright (c) 2016- Facebook, Inc"),
               PythonDist("sympy", "1.13", "/opt/venv", license="BSD", author="SymPy development team <sympy@googlegroups.com>",
                          copyright="Copyright (c) 2006-2023 SymPy Development Team"))
    import dataclasses

    known = dataclasses.replace(base, debs=debs, pythons=pythons, labels={**base.labels, "torchbake.inputs": "{}"})
    documents = sbom_formats.documents(known, INPUTS, tool_version="0.1.0", supplier="ML Platform <ml-platform@example.com>")
    spdx = json.loads(documents["spdx"])
    path = tmp_path / "image.spdx.json"
    path.write_text(documents["spdx"])
    checker = Path(sys.executable).with_name("ntia-checker")
    judged = subprocess.run([str(checker), "--comply", "ntia", str(path)], capture_output=True, text=True, timeout=120)
    assert judged.returncode == 0 and "Conformant: True" in judged.stdout, judged.stdout + judged.stderr
    packages = {p["name"]: p for p in spdx["packages"]}
    assert packages["libc6"]["supplier"] == "Organization: GNU Libc Maintainers (debian-glibc@lists.debian.org)"
    assert packages["python3.11"]["supplier"] == "Person: Matthias Klose (doko@debian.org)"
    assert packages["python3.11"]["licenseConcluded"] == packages["python3.11"]["licenseDeclared"] == "PSF-2.0"
    assert packages["libc6"]["licenseConcluded"] == "LicenseRef-see-debian-copyright-file"  # its file is free-form
    assert packages["torchbake/pytorch-cpu"]["supplier"] == "Organization: ML Platform (ml-platform@example.com)"
    ids = {p["SPDXID"]: p["name"] for p in spdx["packages"]}
    depends = {(ids[r["spdxElementId"]], ids[r["relatedSpdxElement"]]) for r in spdx["relationships"]
               if r["relationshipType"] == "DEPENDS_ON"}
    assert depends == {("python3.11", "libc6"), ("torch", "sympy")}  # what is not installed is not invented
    refs = {info["licenseId"] for info in spdx["hasExtractedLicensingInfos"]}
    assert {"LicenseRef-see-debian-copyright-file", "LicenseRef-image-contents"} <= refs
    cdx = json.loads(documents["cyclonedx"])
    torch = next(c for c in cdx["components"] if c["name"] == "torch")
    assert torch["supplier"]["name"] == "PyTorch Team" and torch["copyright"] == "Copyright (c) 2016- Facebook, Inc"
    assert {d["ref"]: d.get("dependsOn", []) for d in cdx["dependencies"]}[torch["bom-ref"]] == [
        next(c["bom-ref"] for c in cdx["components"] if c["name"] == "sympy")]


def test_a_thread_that_parses_while_another_builds_the_tokenizer_gets_its_licence(monkeypatch):
    """build-all --jobs 2: two builds write their SBOMs at once, each parsing licences in a thread
    of one process. license-expression builds its tokenizer at the first parse and publishes it
    before it is whole: a second thread parsing then failed its cell ("'object' object has no
    attribute 'children'"). Here the build of the tokenizer is slowed so that the second thread
    surely parses while the first builds it; the second gets its licence right."""
    import threading

    from license_expression import _pyahocorasick

    monkeypatch.setattr(licences, "_LICENSING", [])
    monkeypatch.setattr(licences, "_spdx_id", functools.cache(licences._spdx_id.__wrapped__))  # fresh, undone after
    building, whole = threading.Event(), _pyahocorasick.Trie.make_automaton

    def slow_make_automaton(self):
        building.set()
        time.sleep(0.3)
        return whole(self)

    monkeypatch.setattr(_pyahocorasick.Trie, "make_automaton", slow_make_automaton)
    results = {}  # (from_python says an unreadable licence as a reference of its own: a wrong result)

    def parse(name: str, after: threading.Event | None) -> None:
        if after is not None:
            assert after.wait(30), "the first thread never built the tokenizer"
        results[name] = licences.from_python("", name)

    threads = [threading.Thread(target=parse, args=("MIT", None)), threading.Thread(target=parse, args=("Apache-2.0 OR MIT", building))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results == {"MIT": ("MIT", {}), "Apache-2.0 OR MIT": ("Apache-2.0 OR MIT", {})}
