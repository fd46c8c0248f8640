"""The SBOM formats torchbake writes, in one table: each format's name (``--format``'s value, the
attestation's kind), what it is, its media type, its in-toto predicate type, its file suffix and
its writer. Every place that lists the formats reads this table (the flag's help, the SBOM task,
the documents a build writes, the attestations and signatures).

Light on purpose (the command's start-up reads it): the writers (:mod:`torchbake.supply_chain.sbom`)
and the formats' libraries are imported when :func:`documents` runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchbake.supply_chain.inventory import Inventory
    from torchbake.supply_chain.sbom import Component

Writer = Callable[["Inventory", "list[Component]", str], str]


def _spdx(inventory: Inventory, parts: list[Component], tool_version: str) -> str:
    from torchbake.supply_chain import sbom

    return sbom.spdx_document(inventory, parts, tool_version)


def _spdx3(inventory: Inventory, parts: list[Component], tool_version: str) -> str:
    from torchbake.supply_chain import sbom

    return sbom.spdx3_document(inventory, parts, tool_version)


def _cyclonedx(inventory: Inventory, parts: list[Component], tool_version: str) -> str:
    from torchbake.supply_chain import sbom

    return sbom.cyclonedx_document(inventory, parts, tool_version)


@dataclass(frozen=True)
class SbomFormat:
    name: str  # --format's value and the attestation's kind
    title: str  # what it is, for help texts
    noun: str  # how a sentence names one document of it ("the SPDX SBOM")
    media_type: str  # the attestation's artifact type (SPDX's versions share one: the document says which)
    predicate_type: str  # an in-toto statement's predicateType when it is signed
    suffix: str  # the file beside the build's manifest
    writer: Writer


TABLE: tuple[SbomFormat, ...] = (
    SbomFormat("spdx", "SPDX 2.3 JSON", "SPDX SBOM", "application/spdx+json", "https://spdx.dev/Document",
               ".spdx.json", _spdx),
    SbomFormat("spdx3", "SPDX 3.0.1 JSON-LD", "SPDX 3 SBOM", "application/spdx+json",
               "https://spdx.dev/Document/v3.0.1", ".spdx3.json", _spdx3),
    SbomFormat("cyclonedx", "CycloneDX 1.6 JSON", "CycloneDX SBOM", "application/vnd.cyclonedx+json",
               "https://cyclonedx.org/bom", ".cdx.json", _cyclonedx),
)
NAMES = tuple(entry.name for entry in TABLE)


def documents(inventory: Inventory, inputs: Sequence[Mapping[str, Any]] = (), tool_version: str = "",
              supplier: str = "") -> dict[str, str]:
    """Format → the image's SBOM in it, for every format of the table (``inputs``: the build
    manifest's, where this host has it; ``supplier``: the image's, [sbom] supplier)."""
    from torchbake.supply_chain import sbom

    if not tool_version:
        import torchbake

        tool_version = torchbake.__version__
    parts = sbom.components(inventory, inputs, supplier)
    return {entry.name: entry.writer(inventory, parts, tool_version) for entry in TABLE}


def described() -> str:
    """The formats for a help text: "spdx (SPDX 2.3 JSON), … or cyclonedx (CycloneDX 1.6 JSON)"."""
    items = [f"{entry.name} ({entry.title})" for entry in TABLE]
    return ", ".join(items[:-1]) + " or " + items[-1]
