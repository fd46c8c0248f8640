"""Where a plan's image goes beyond this engine: the registry that holds (or will hold) it, asking
that registry whether it already has the image's inputs, pushing it with the tag named by its
input hash beside the tag, and the registry build cache its builds read and write."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from torchbake.adapters import registry
from torchbake.adapters.docker_cli import compression_options
from torchbake.adapters.engine import DockerClient
from torchbake.building import platform_builds
from torchbake.configuration.network import DownloadPolicy
from torchbake.configuration.platforms import Platform
from torchbake.core.errors import FatalError, RegistryError
from torchbake.core.status import Status
from torchbake.supply_chain import attestations
from torchbake.variants import Plan


def registry_of(plan: Plan, client: DockerClient, *, checking: bool = True) -> tuple[registry.Registry, str, str] | None:
    """(the registry, repository, tag) of the plan's image when a registry is configured (and,
    when ``checking``, the up-to-date check is on); None otherwise."""
    options = plan.registry_options
    host, repository, tag = registry.split_reference(plan.image)
    if not (options.url and host and (options.check or not checking)):
        return None
    policy = DownloadPolicy.from_settings(plan.download_options)
    return registry.for_host(host, client.engine_info(), policy), repository, tag


def find_in_registry(plan: Plan, client: DockerClient, digest: str, *, apply: bool = True) -> tuple[Status, str] | None:
    """("unchanged (registry)", manifest digest) when the registry's NAME:TAG has these inputs;
    ("retagged (registry)", digest) when the tag named by the input hash has them (NAME:TAG is
    pointed at it inside the registry when ``apply``: no layer moves); None otherwise."""
    found = registry_of(plan, client)
    if found is None or not digest:
        return None
    remote, repository, tag = found
    held = remote.held(repository, tag)
    if held and held.input_hash == digest:
        return Status.UNCHANGED_IN_REGISTRY, held.digest
    by_inputs = remote.held(repository, registry.inputs_tag(digest))
    if by_inputs and by_inputs.input_hash == digest:
        if apply:
            remote.copy_tag(repository, registry.inputs_tag(digest), tag)
        return Status.RETAGGED_IN_REGISTRY, by_inputs.digest
    return None


def ask_registry(plan: Plan, client: DockerClient, digest: str, *, apply: bool = True,
                 ) -> tuple[tuple[Status, str] | None, str]:
    """:func:`find_in_registry`, and why the registry could not be asked ("" when it answered).
    With ``[registry] require`` (--require-registry) that is an error instead."""
    try:
        return find_in_registry(plan, client, digest, apply=apply), ""
    except RegistryError as exc:
        if plan.registry_options.require:
            raise
        return None, str(exc).splitlines()[0]


def publish(plan: Plan, client: DockerClient, input_hash: str, log_file: Path | None,
            progress=None) -> str:
    """Push the plan's image, retrying connection resets and 5xx answers with backoff
    (``[downloads]`` retries; a 4xx is final, a refused login names ``docker login``); then point
    the tag named by its input hash at it, inside the registry, so that a machine that never saw
    the image finds it by its inputs. Returns the registry digest."""
    policy = DownloadPolicy.from_settings(plan.download_options)
    try:
        digest = registry.retrying(f"Pushing {plan.image}", lambda: client.push(plan.image, log_file, progress),
                                   policy, registry.push_transient)
    except FatalError as exc:
        raise registry.push_refused(exc, plan.image) or exc from None
    if not digest:
        info = client.inspect_image(plan.image) or {}
        repo = plan.image.rsplit(":", 1)[0]
        digest = next((d.split("@", 1)[1] for d in info.get("RepoDigests") or [] if d.startswith(repo + "@")), "")
    found = registry_of(plan, client, checking=False)
    if found and input_hash:
        remote, repository, tag = found
        remote.copy_tag(repository, tag, registry.inputs_tag(input_hash))
    attach_attestations(plan, client)
    return digest


def publish_index(plan: Plan, client: DockerClient, image: str, members: Sequence[tuple[Platform, str]],
                  ) -> tuple[str, bool]:
    """Make the registry's ``image`` (NAME:TAG) the index of ``members``, each platform's image
    (platform, NAME:TAG-ARCH) already pushed there: one small manifest written, no layer moved,
    nothing pulled (a nightly whose platforms were built on their own runners joins them so).
    (Its digest, whether the tag already named that very index.)"""
    host, repository, tag = registry.split_reference(image)
    if not host:
        raise RegistryError(f"{image} names no registry host; set [matrix] registry to publish its platforms' index.")
    remote = registry.for_host(host, client.engine_info(), DownloadPolicy.from_settings(plan.download_options))
    entries = []
    for platform, member in members:
        _, member_repository, member_tag = registry.split_reference(member)
        descriptor = remote.descriptor(member_repository, member_tag)
        if descriptor is None:
            raise RegistryError(f"{member} ({platform.name}) is not in the registry, so {image} cannot name it; build"
                                f" and push it first (`invoke build-all --push --platform {platform.name}`).")
        entries.append((platform, descriptor))
    document = platform_builds.index_document(entries)
    digest = "sha256:" + hashlib.sha256(document).hexdigest()
    held = remote.descriptor(repository, tag)
    if held is not None and held["digest"] == digest:
        return digest, True
    return remote.put_manifest(repository, tag, document), False


def attach_attestations(plan: Plan, client: DockerClient) -> dict[str, str]:
    """The SBOMs and provenance this host wrote when it built the plan's image, attached to the
    pushed image in its registry (OCI 1.1 referrers; the image's digest is unchanged). Kind →
    artifact digest; {} when the image names no registry host or has no documents here."""
    host, repository, tag = registry.split_reference(plan.image)
    info = client.inspect_image(plan.image) or {}
    documents = attestations.recorded(plan.path_options.log_dir, info.get("Id", ""), plan.image)
    if not host or not documents:
        return {}
    remote = registry.for_host(host, client.engine_info(), DownloadPolicy.from_settings(plan.download_options))
    created = ((info.get("Config") or {}).get("Labels") or {}).get("org.opencontainers.image.created", "")
    return attestations.attach(remote, repository, tag, documents, created)


def build_cache(plan: Plan, *, publish: bool = False, image: str = "") -> tuple[list[str], list[str]]:
    """The build cache's sources and destinations (``[registry] cache_from`` / ``cache_to``,
    their fields filled in); with a registry and none given, the cache of every stage (mode=max)
    at the image's ``[registry] cache_ref``: imported by every build, exported by one that
    publishes (``publish``: build-all --push), never failing it (a registry that refuses the
    cache refuses the push too, which says so). ``image``: another image of the plan's build (the
    slim runtime image), whose cache is its own."""
    options = plan.registry_options
    image = image or plan.image
    name, tag = image.rsplit(":", 1)
    fields = {"image": image, "name": name, "tag": tag}
    fields["cache"] = options.cache_ref.format(**fields)
    sources = options.cache_from or (("{cache}",) if options.url else ())
    layers = compression_options(plan.build_options.compression)  # the image's own blobs: each exported once
    targets = options.cache_to or ((f"type=registry,ref={{cache}},mode=max,{layers},ignore-error=true",)
                                   if options.url and publish else ())
    return [s.format(**fields) for s in sources], [t.format(**fields) for t in targets]
