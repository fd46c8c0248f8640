"""``invoke sbom``, ``provenance`` and ``diff``: what is inside images, where it came from, and
what changed between two of them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from invoke import Collection

from torchbake.configuration import writable
from torchbake.configuration.options import (
    CONFIG,
    DIFF_FLAGS,
    DOCKER,
    OUTPUT,
    PROVENANCE_FLAGS,
    SBOM_IMAGE,
    Flag,
    overrides,
)
from torchbake.core import output
from torchbake.core.errors import ConfigurationError, ImageNotFoundError
from torchbake.core.files import write_atomically
from torchbake.core.lazy import LazyModule
from torchbake.supply_chain import sbom_formats
from torchbake.tasks.cli import docker_client, flag_task, reports_errors, resolve_config

if TYPE_CHECKING:
    from torchbake.configuration import network
    from torchbake.supply_chain import attestations, image_diff
else:
    attestations = LazyModule("torchbake.supply_chain.attestations")  # the SBOM libraries: imported when a task runs
    image_diff = LazyModule("torchbake.supply_chain.image_diff")
    network = LazyModule("torchbake.configuration.network")

SBOM_FLAGS = (SBOM_IMAGE, Flag("format", f"SBOM format (default spdx). {sbom_formats.described()}", default="spdx"), OUTPUT, DOCKER, CONFIG)



def _document(given: dict, flags, kind: str) -> str:
    """The ``kind`` document of the image ``given["image"]``: what this host wrote when it built
    it; else what its registry holds beside it (a reference with a registry host); else, for a
    local image, an SBOM read from the image now."""
    from torchbake.adapters import registry
    from torchbake.core.errors import RegistryError
    from torchbake.supply_chain import inventory

    image = given["image"]
    settings = resolve_config(given["config"], overrides(flags, given)).settings()
    client = docker_client(settings, for_build=False)
    client.check_engine()
    info = client.inspect_image(image)
    if info is not None:
        labels = (info.get("Config") or {}).get("Labels") or {}
        name = f"{labels.get('org.opencontainers.image.title', '')}:{labels.get('org.opencontainers.image.version', '')}"
        found = attestations.recorded(settings.paths.log_dir, info["Id"], name).get(kind)
        if found:
            return found
    host, repository, tag = registry.split_reference(image)
    if host:
        remote = registry.for_host(host, client.engine_info(), network.DownloadPolicy.from_settings(settings.downloads))
        if info is None and remote.inspect(repository, tag) is None:  # the registry answered: no such image
            raise ConfigurationError(f"Image {image!r} does not exist on this engine, nor in registry {host} (it has"
                                     f" no {repository}:{tag}). `docker images` lists the local images.")
        try:
            found = attestations.fetch(remote, repository, tag, kind)
        except RegistryError:
            if info is None:  # nowhere else to look
                raise
            found = None
        if found is not None:
            return found
    if info is None:
        if not host:
            raise ImageNotFoundError(image)
        raise RegistryError(f"{image}: nothing in registry {host} refers to it as its {kind} (torchbake attaches the"
                            " SBOMs and provenance when it pushes an image it built).")
    if kind == "provenance":
        raise ConfigurationError(
            f"{image} has no provenance on this host (in {settings.paths.log_dir}){' or in its registry' if host else ''}:"
            " provenance is written when torchbake builds an image, and read from the registry for one it pushed."
            " Build it here, or give its registry reference.")
    output.channel().say(f"{image}: no SBOM recorded on this host; reading its packages from the image.")
    return sbom_formats.documents(inventory.take(client, image), supplier=settings.sbom.supplier)[kind]


def _print_or_write(given: dict, flags, kind: str) -> None:
    """The ``kind`` document of the image, on stdout or in ``--output`` (checked before any work)."""
    target = writable.check_output_file(given["output"], "--output") if given["output"] else None
    with output.channel_to(output.Channel(output.console(stderr=True))):  # stdout is the document's alone
        text = _document(given, flags, kind)
    if target:
        output.channel().say(f"Wrote {write_atomically(target, text)}")
    else:
        output.document(text)


@flag_task(*SBOM_FLAGS)
@reports_errors
def sbom(c, **given):
    """Print (or write) the image's SBOM.

    As SPDX 2.3 JSON, SPDX 3.0.1 JSON-LD or CycloneDX 1.6 JSON. Every Debian package, every Python
    distribution of every environment (with its wheel's sha256), toolkits, source trees and the
    base image."""
    if given["format"] not in sbom_formats.NAMES:
        raise ConfigurationError(f"--format {given['format']!r}: expected {', '.join(sbom_formats.NAMES)}.")
    _print_or_write(given, SBOM_FLAGS, given["format"])


@flag_task(*PROVENANCE_FLAGS)
@reports_errors
def provenance(c, **given):
    """Print (or write) the image's build provenance (SLSA v1).

    Where every input of the image's build came from, as an in-toto statement: the options as
    resolved, every dependency with its digest, the builder's versions, start and finish."""
    _print_or_write(given, PROVENANCE_FLAGS, "provenance")


@flag_task(*DIFF_FLAGS)
@reports_errors
def diff(c, **given):
    """Show what changed from image OLD to image NEW.

    Packages, layers, labels and inputs: Debian packages and Python distributions added, removed
    and changed, layers shared and new with their sizes, labels and recorded inputs that differ."""
    if given["format"] not in ("table", "json"):
        raise ConfigurationError(f"--format {given['format']!r}: expected table or json.")
    settings = resolve_config(given["config"], overrides(DIFF_FLAGS, given)).settings()
    client = docker_client(settings, for_build=False)
    client.check_engine()
    policy = network.DownloadPolicy.from_settings(settings.downloads)
    old, new = (image_diff.inventory_of(client, given[side], settings.paths.log_dir, policy) for side in ("old", "new"))
    found = image_diff.compare(given["old"], old, given["new"], new)
    if given["format"] == "json":
        output.result(json.dumps(found.to_json(), indent=2))
        return
    show_diff(found)


def show_diff(found) -> None:
    table = output.table(title=f"{found.old} → {found.new}")
    for column in ("what", "name", "old", "new"):
        table.add_column(column, overflow="fold")
    for change in found.changes:
        table.add_row(change.what, change.name, change.old or "(none)", change.new or "(none)")
    for layer in found.new_layers:
        table.add_row("layer", layer.diff_id[:19], "(none)", output.human_size(layer.size) if layer.size >= 0 else "?")
    for layer in found.removed_layers:
        table.add_row("layer", layer.diff_id[:19], output.human_size(layer.size) if layer.size >= 0 else "?", "(none)")
    output.channel().show(table)
    output.channel().say(f"{len(found.shared_layers)} layers shared ({output.human_size(found.shared_bytes)}),"
                         f" {len(found.new_layers)} new ({output.human_size(found.new_bytes)}),"
                         f" {len(found.removed_layers)} gone. {found.summary()}")
    for note in found.notes:
        output.channel().say(f"Note: {note}.")


ns = Collection(sbom, provenance, diff)
