"""The SBOM formats are one table (torchbake.supply_chain.sbom_formats): the flag's help, the SBOM
task's choices, the documents a build writes, the attestations' kinds, media types and suffixes, the
signed statements' predicate types and verify-signature's names all read it, so a format added to
the table (or taken out) is one everywhere."""

from __future__ import annotations

import pytest

from tests.unit.test_sbom import INPUTS, image
from torchbake.checks import signatures
from torchbake.supply_chain import attestations, sbom_formats, signing
from torchbake.tasks import contents


def everywhere() -> dict[str, object]:
    import importlib

    for module in (attestations, signing, signatures, contents):
        importlib.reload(module)
    return {
        "help": next(f.help for f in contents.SBOM_FLAGS if f.param == "format"),
        "kinds": attestations.KINDS,
        "media types": [attestations.MEDIA_TYPES[k] for k in attestations.KINDS if k != "provenance"],
        "suffixes": [attestations.SUFFIXES[k] for k in attestations.KINDS if k != "provenance"],
        "predicates": [signing.PREDICATE_TYPES[k] for k in attestations.KINDS if k != "provenance"],
        "nouns": [signatures.NAMES[k] for k in attestations.KINDS if k != "provenance"],
        "documents": sorted(sbom_formats.documents(image(), INPUTS, tool_version="0.1.0")),
    }


def test_every_place_that_lists_the_formats_reads_the_table():
    found = everywhere()
    table = sbom_formats.TABLE
    assert found["help"] == ("SBOM format (default spdx). spdx (SPDX 2.3 JSON), spdx3 (SPDX 3.0.1 JSON-LD) or"
                             " cyclonedx (CycloneDX 1.6 JSON)")
    assert found["kinds"] == (*(f.name for f in table), "provenance")
    assert found["media types"] == [f.media_type for f in table]
    assert found["suffixes"] == [f.suffix for f in table]
    assert found["predicates"] == [f.predicate_type for f in table]
    assert found["nouns"] == [f.noun for f in table]
    assert found["documents"] == sorted(f.name for f in table)


def test_a_format_taken_out_of_the_table_is_gone_everywhere(monkeypatch):
    kept = tuple(f for f in sbom_formats.TABLE if f.name != "spdx3")
    monkeypatch.setattr(sbom_formats, "TABLE", kept)
    monkeypatch.setattr(sbom_formats, "NAMES", tuple(f.name for f in kept))
    try:
        found = everywhere()
        assert "spdx3" not in found["help"] and "spdx3" not in found["kinds"] and "spdx3" not in found["documents"]
        assert found["nouns"] == ["SPDX SBOM", "CycloneDX SBOM"]
    finally:
        monkeypatch.undo()
        everywhere()


MARKS = {"spdx": '"spdxVersion": "SPDX-2.3"', "spdx3": "https://spdx.org/rdf/3.0.1/", "cyclonedx": '"bomFormat": "CycloneDX"'}


@pytest.mark.parametrize("entry", sbom_formats.TABLE, ids=lambda e: e.name)
def test_each_writer_writes_its_own_format(entry):
    text = sbom_formats.documents(image(), INPUTS, tool_version="0.1.0")[entry.name]
    assert [name for name, mark in MARKS.items() if mark in text] == [entry.name]
