"""What changed between two images: Debian packages and Python distributions added, removed and
changed (old → new version), layers shared and new with their sizes, and the labels and recorded
inputs that differ.

Each side is an :class:`~torchbake.supply_chain.inventory.Inventory`: read from a local image (its record
beside the build manifest where this host built it, else from the image itself), or from a
registry image's CycloneDX SBOM and configuration.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from torchbake.core.output import human_size
from torchbake.supply_chain.inventory import (
    INPUTS_LABEL,
    SHA512_LABEL,
    Deb,
    Inventory,
    Layer,
    PythonDist,
    recorded_files,
)

# Labels that differ between any two builds and say nothing of the content.
NOISE_LABELS = ("org.opencontainers.image.created", "torchbake.input-hash", "torchbake.input-parts", INPUTS_LABEL,
                SHA512_LABEL,
                "org.opencontainers.image.version")


@dataclass(frozen=True)
class Change:
    what: str  # deb, python, label, input
    name: str
    old: str  # "" when added
    new: str  # "" when removed

    def text(self) -> str:
        if not self.old:
            return f"+{self.name} {self.new}"
        if not self.new:
            return f"-{self.name} {self.old}"
        return f"{self.name} {self.old} → {self.new}"


@dataclass(frozen=True)
class ImageDiff:
    old: str
    new: str
    changes: tuple[Change, ...] = ()
    shared_layers: tuple[Layer, ...] = ()
    new_layers: tuple[Layer, ...] = ()
    removed_layers: tuple[Layer, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def new_bytes(self) -> int:
        return sum(max(layer.size, 0) for layer in self.new_layers)

    @property
    def shared_bytes(self) -> int:
        return sum(max(layer.size, 0) for layer in self.shared_layers)

    def of(self, what: str) -> list[Change]:
        return [c for c in self.changes if c.what == what]

    def summary(self) -> str:
        """One line: the packages that changed, then the new layers' bytes."""
        packages = [c.text() for c in self.changes if c.what in ("python", "deb")]
        shown = packages[:6] + ([f"{len(packages) - 6} more"] if len(packages) > 6 else [])
        layers = f"{human_size(self.new_bytes)} new layers" if self.new_layers else "no new layer"
        return "; ".join([*(shown or ["no package changed"]), layers])

    def to_json(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.new, "summary": self.summary(),
                "changes": [asdict(c) for c in self.changes],
                "layers": {"shared": [asdict(layer) for layer in self.shared_layers],
                           "new": [asdict(layer) for layer in self.new_layers],
                           "removed": [asdict(layer) for layer in self.removed_layers],
                           "new_bytes": self.new_bytes, "shared_bytes": self.shared_bytes},
                "notes": list(self.notes)}


def _versions_changed(what: str, old: Mapping[str, str], new: Mapping[str, str]) -> list[Change]:
    return [Change(what, name, old.get(name, ""), new.get(name, "")) for name in sorted({*old, *new})
            if old.get(name) != new.get(name)]


def _debs(inventory: Inventory) -> dict[str, str]:
    return {d.name if d.architecture in ("", "all", "amd64") else f"{d.name}:{d.architecture}": d.version
            for d in inventory.debs}


def _pythons(inventory: Inventory) -> dict[str, str]:
    """Project → version; a distribution outside the image's own environment is named with its
    environment (``/usr: pip``)."""
    main = inventory.main_environment
    return {(p.key if p.environment == main else f"{p.environment}: {p.key}")
            + (f" (in {p.vendored_by})" if p.vendored_by else ""): p.version for p in inventory.pythons}


def _inputs(inventory: Inventory) -> dict[str, str]:
    return {name: digest[:12] for name, digest in recorded_files(inventory.labels).items()}


def compare(old_name: str, old: Inventory, new_name: str, new: Inventory) -> ImageDiff:
    """What changed from ``old`` to ``new``."""
    changes = [*_versions_changed("python", _pythons(old), _pythons(new)),
               *_versions_changed("deb", _debs(old), _debs(new))]
    labels_old = {k: v for k, v in old.labels.items() if k not in NOISE_LABELS}
    labels_new = {k: v for k, v in new.labels.items() if k not in NOISE_LABELS}
    changes += _versions_changed("label", labels_old, labels_new)
    old_inputs, new_inputs = _inputs(old), _inputs(new)
    changes += [Change("input", name, old_inputs.get(name, ""), new_inputs.get(name, ""))
                for name in sorted({*old_inputs, *new_inputs}) if old_inputs.get(name) != new_inputs.get(name)]
    before = {layer.diff_id for layer in old.layers}
    after = {layer.diff_id for layer in new.layers}
    notes = []
    if any(layer.size < 0 for layer in (*old.layers, *new.layers)):
        notes.append("some layer sizes are not known (the engine's history did not match the layers)")
    if not old.pythons and not old.debs or not new.pythons and not new.debs:
        notes.append("one side lists no packages (no SBOM, or an image without Python)")
    return ImageDiff(old_name, new_name, tuple(changes),
                     shared_layers=tuple(layer for layer in new.layers if layer.diff_id in before),
                     new_layers=tuple(layer for layer in new.layers if layer.diff_id not in before),
                     removed_layers=tuple(layer for layer in old.layers if layer.diff_id not in after),
                     notes=tuple(notes))


def from_cyclonedx(document: Mapping[str, Any], labels: Mapping[str, str], layers: tuple[Layer, ...],
                   image_id: str) -> Inventory:
    """The inventory a CycloneDX SBOM of torchbake's describes (an image in a registry)."""
    from packageurl import PackageURL

    debs, pythons, main = [], [], ""
    for component in document.get("components", []):
        purl = component.get("purl", "")
        properties = {p["name"]: p.get("value", "") for p in component.get("properties", [])}
        if purl.startswith("pkg:deb/"):
            parsed = PackageURL.from_string(purl)
            source = properties.get("torchbake:source-package", "").split(" ")
            debs.append(Deb(component["name"], component.get("version", ""), parsed.qualifiers.get("arch", ""),
                            source[0], source[-1]))
        elif purl.startswith("pkg:pypi/"):
            environment = properties.get("torchbake:environment", "")
            pythons.append(PythonDist(component["name"], component.get("version", ""), environment))
            main = main or (environment if component.get("hashes") else "")
    main = main or next((p.environment for p in pythons if p.environment.startswith("/opt/venv")), "")
    return Inventory(debs=tuple(debs), pythons=tuple(pythons), main_python=f"{main}/bin/python" if main else "",
                     layers=layers, labels=labels, image_id=image_id)


def inventory_of(client, reference: str, log_dir, policy) -> Inventory:
    """The inventory of a local image (what this host recorded when it built it, else read from
    the image now) or, when the engine has no such image, of a registry image (its CycloneDX
    SBOM attached there, and its configuration)."""
    from torchbake.adapters import registry
    from torchbake.core.errors import ImageNotFoundError, RegistryError
    from torchbake.supply_chain import attestations, inventory

    info = client.inspect_image(reference)
    if info is not None:
        return recorded_inventory(log_dir, info["Id"], _name_of(info)) or inventory.take(client, reference)
    host, repository, tag = registry.split_reference(reference)
    if not host:
        raise ImageNotFoundError(reference)
    remote = registry.for_host(host, client.engine_info(), policy)
    found = remote.inspect(repository, tag)
    if found is None:
        raise RegistryError(f"Registry {host} has no {repository}:{tag}.")
    document = attestations.fetch(remote, repository, tag, "cyclonedx")
    if document is None:
        raise RegistryError(f"{reference} has no CycloneDX SBOM attached in its registry (torchbake attaches one"
                            " when it pushes: build --push or build-all --push); its packages cannot be compared.")
    layers = tuple(Layer(diff_id, -1) for diff_id in (found.get("RootFS") or {}).get("Layers", []))
    return from_cyclonedx(json.loads(document), found["Config"].get("Labels") or {}, layers, found["Id"])


def recorded_inventory(log_dir, image_id: str, image: str) -> Inventory | None:
    """The inventory this host recorded when it built ``image_id`` (as ``image``), or None."""
    from torchbake.supply_chain import attestations

    text = attestations.recorded(log_dir, image_id, image).get(attestations.INVENTORY)
    return Inventory.from_json(json.loads(text)) if text else None


def _name_of(info: Mapping[str, Any]) -> str:
    labels = (info.get("Config") or {}).get("Labels") or {}
    return f"{labels.get('org.opencontainers.image.title', '')}:{labels.get('org.opencontainers.image.version', '')}"
