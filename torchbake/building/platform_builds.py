"""An image for several platforms: one build per platform, then one tag that holds them all.

Each platform's image is built, verified and recorded on its own, under ``NAME:TAG-ARCH``
(``torchbake/pytorch-cpu:2.13.0-py3.11-arm64``): its own input hash, "unchanged", log, SBOM and
provenance, exactly as a one-platform build. Then :func:`join` makes ``NAME:TAG`` an image
index holding those very manifests (the same digests: nothing is built again), so ``docker run
NAME:TAG`` picks the host's platform and ``docker run --platform linux/arm64 NAME:TAG`` the
other. A registry's nightly on native runners builds one platform per runner and joins there
(the same index: the tag's digest is the same).
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from torchbake.adapters import command
from torchbake.adapters.docker_cli import compression_options
from torchbake.configuration import platforms
from torchbake.configuration.platforms import Platform
from torchbake.configuration.settings import Settings
from torchbake.core import output
from torchbake.core.errors import BuildError, ConfigurationError
from torchbake.families import FAMILIES
from torchbake.planning import config


def per_platform(settings: Settings) -> list[tuple[Platform | None, Settings]]:
    """The settings of each platform's build: that one platform, its wheel tags, and (when there
    are several) the tag suffixed with its architecture. No platforms named: the settings as they are."""
    wanted = platforms.parse_all(settings.image.platforms)
    if not wanted:
        return [(None, settings)]
    several = len(wanted) > 1
    return [(platform, config.build_settings({
        **settings.values,
        "image.platforms": [platform.name],
        "wheels.platforms": platforms.wheel_tags_for(platform, settings.wheels.platforms),
        "image.tag": settings.image.tag + (platform.suffix if several else ""),
        **_arch_lists_of(platform, settings),
    }, settings.accelerators)) for platform in wanted]


def _arch_lists_of(platform: Platform, settings: Settings) -> dict[str, str]:
    """The arch lists of ``platform``'s image: a family's per-platform table's entry for it, else
    its one list (torchbake.families)."""
    found = {}
    for family in FAMILIES.values():
        arch = family.arch
        if arch.per_platform:
            given = {platforms.parse(name): text for name, text in getattr(settings.accelerator, arch.per_platform).items()}
            found[f"accelerator.{arch.setting}"] = given.get(platform, getattr(settings.accelerator, arch.setting))
    return found


def plans(settings: Settings, make_plan: Callable[[Settings], Any]) -> list[tuple[Platform | None, Any]]:
    """Each platform's plan (``make_plan`` of its settings), every one made (so checked) before
    any build starts; each knows every platform of the build, which its FROM image must hold
    (an OS image torchbake makes is made once, for them all)."""
    made = [(platform, make_plan(platform_settings)) for platform, platform_settings in per_platform(settings)]
    for platform, _ in made:
        check_can_build(platform, settings.build.builder)
    everyone = tuple(platform.name for platform, _ in made if platform is not None)
    return [(platform, dataclasses.replace(plan, base_platforms=everyone) if everyone else plan)
            for platform, plan in made]


def check_can_build(platform: Platform | None, builder: str) -> None:
    """An image of another machine than this one is built with QEMU's help (a builder named with
    [build] builder may have a native node for it: BuildKit knows, this host does not)."""
    if platform is None or builder:
        return
    if why := platforms.why_not_here(platform):
        raise ConfigurationError(f"Cannot build for {platform.name} on this {platforms.host().machine} host: {why}."
                                 " Or name a buildx builder with a native node for it: --builder NAME.")


def join_dockerfile(images: Sequence[tuple[Platform, str]]) -> str:
    """A Dockerfile whose image for each platform is that platform's built image, unchanged."""
    stages = "".join(f"FROM {image} AS {platform.arch}\n" for platform, image in images)
    return stages + "FROM ${TARGETARCH}\n"


def join_command(binary: str, builder: str, target: str, images: Sequence[tuple[Platform, str]],
                 compression: str, dockerfile: Path, context: Path) -> list[str]:
    """``docker buildx build`` that stores ``target`` as the index of ``images``: no provenance
    (it would carry the moment of the join, and the tag's digest would change every night), the
    layers' blobs as they are."""
    argv = [binary, "buildx", "build", "--progress=plain", "--provenance=false",
            "--platform", ",".join(platform.name for platform, _ in images),
            f"--output=type=image,name={target},{compression_options(compression)}"]
    argv += ["--builder", builder] if builder else []
    return argv + ["--file", str(dockerfile), str(context)]


INDEX_TYPE = "application/vnd.oci.image.index.v1+json"


def index_document(entries: Sequence[tuple[Platform, Mapping[str, Any]]]) -> bytes:
    """The OCI image index of each platform's manifest (its descriptor: mediaType, digest, size),
    byte for byte as :func:`join` (BuildKit) writes it: the registry's join of the same images
    and this engine's have the same digest."""
    manifests = [{"mediaType": descriptor["mediaType"], "digest": descriptor["digest"], "size": descriptor["size"],
                  "platform": {"architecture": platform.arch, "os": platform.name.split("/", 1)[0]}}
                 for platform, descriptor in sorted(entries, key=lambda entry: platforms.PLATFORMS.index(entry[0]))]
    return json.dumps({"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": manifests}, indent=2).encode()


def join(client, target: str, images: Sequence[tuple[Platform, str]], compression: str, log_file: Path,
         *, dry_run: bool = False) -> None:
    """``target`` becomes one tag for every platform's image in ``images`` (platform, NAME:TAG-ARCH)."""
    with tempfile.TemporaryDirectory(prefix="torchbake-join-") as folder:
        dockerfile = Path(folder) / "Dockerfile"
        dockerfile.write_text(join_dockerfile(images))
        argv = join_command(client.binary, client.builder, target, images, compression, dockerfile, Path(folder))
        if dry_run:
            output.channel().say(f"Then {target} joins the platforms' images into one index (nothing is built"
                                 f" again):\n  {command.format_command(argv)}")
            return
        output.channel().say(f"Joining {', '.join(image for _, image in images)} as {target}")
        command.run(argv, log_file=log_file, error=BuildError,
                    failure_hint=f"Joining the platforms' images as {target} failed; the log ({log_file}) says why."
                                 " Each platform's image is kept under its own tag.")
    output.channel().say((f"Joined {target}", "bold green"),
                         f" ({', '.join(platform.name for platform, _ in images)})")
