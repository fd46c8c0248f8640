"""Where a plan's image goes beyond this engine: the registry that holds (or will hold) it, asking
that registry whether it already has the image's inputs, pushing it with the tag named by its
input hash beside the tag, and the registry build cache its builds read and write."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from pathlib import Path

from torchbake.adapters import registry
from torchbake.adapters.docker_cli import compression_options
from torchbake.adapters.engine import DockerClient
from torchbake.building import platform_builds
from torchbake.configuration.network import DownloadPolicy
from torchbake.configuration.platforms import Platform
from torchbake.configuration.settings import SignOptions
from torchbake.core import output
from torchbake.core.errors import ConfigurationError, FatalError, RegistryError
from torchbake.core.status import Status
from torchbake.supply_chain import attestations, signing
from torchbake.variants import Plan
from torchbake.variants.common import labels_name


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
    pointed at it inside the registry when ``apply``: no layer moves); None otherwise. As on the
    engine, a tag lands only on an image whose labels name that very tag: the same inputs built
    under another tag are built again (labels are part of the image, so its digest differs)."""
    found = registry_of(plan, client)
    if found is None or not digest:
        return None
    remote, repository, tag = found
    held = remote.held(repository, tag)
    if held and held.input_hash == digest and labels_name(held.labels, plan.image):
        return Status.UNCHANGED_IN_REGISTRY, held.digest
    by_inputs = remote.held(repository, registry.inputs_tag(digest))
    if by_inputs and by_inputs.input_hash == digest and labels_name(by_inputs.labels, plan.image):
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
            raise ConfigurationError(f"{member} ({platform.name}) is not in the registry, so {image} cannot name it;"
                                     f" build and push it first (`invoke build-all --push --platform {platform.name}`).")
        entries.append((platform, descriptor))
    document = platform_builds.index_document(entries)
    digest = "sha256:" + hashlib.sha256(document).hexdigest()
    held = remote.descriptor(repository, tag)
    if held is not None and held["digest"] == digest:
        return digest, True
    digest = remote.put_manifest(repository, tag, document)
    signer = signer_of(plan)
    if signer is not None:  # the index's own signature; each platform's manifest has its own
        attestations.attach(remote, repository, tag, {}, "", signer)
    return digest, False


def publish_showing_progress(plan: Plan, client: DockerClient, input_hash: str, log_file: Path,
                             channel: output.Channel) -> str:
    """:func:`publish` with a progress bar on a terminal (every event in ``log_file``)."""
    with channel.progress(transient=True) as bar:
        task = bar.add_task(f"push {plan.image}", total=None)
        return publish(plan, client, input_hash, log_file,
                       lambda done, total: bar.update(task, completed=done, total=total))


def check_publishable(images: Sequence[str], sign: SignOptions) -> None:
    """``--push`` of images that name no registry, or with a [sign] key that cannot sign, is
    refused before any work (exit 2); so is keyless signing without Sigstore (exit 10)."""
    signer = signer_from(sign)
    for image in images:
        if not registry.split_reference(image)[0]:
            raise ConfigurationError(
                f"--push: {image} names no registry, so there is nowhere to push it. Name one with --registry"
                f" HOST[:PORT][/PATH] ([registry] url), or give --name HOST[:PORT]/NAME.")
    if signer is not None:
        signer.ready()


def publish_build(client: DockerClient, builds: Sequence[tuple[Platform | None, Plan]], results: Sequence,
                  target: str, log_file: Path) -> list[tuple[str, str]]:
    """``invoke build --push``: each platform's image pushed as :func:`publish` pushes a matrix
    cell's (those the registry already held as they are stay), then, for several platforms, the
    tag made the index of them in the registry. (image, registry digest) of each, the tag last."""
    channel = output.channel()
    pushed = []
    for (_, plan), result in zip(builds, results, strict=True):
        if result.status.in_registry:  # the registry's NAME:TAG (or its inputs tag) is this image already
            pushed.append((plan.image, result.image_id))
            continue
        pushed.append((plan.image, publish_showing_progress(plan, client, result.input_hash,
                                                            result.log_file or log_file, channel)))
    if len(builds) > 1:
        members = [(platform, plan.image) for platform, plan in builds]
        digest, _ = publish_index(builds[0][1], client, target, members)
        pushed.append((target, digest))
    for image, digest in pushed:
        channel.say(("pushed", "green"), f" {image}@{digest}")
    return pushed


def attach_attestations(plan: Plan, client: DockerClient) -> dict[str, str]:
    """The SBOMs and provenance this host wrote when it built the plan's image, attached to the
    pushed image in its registry (OCI 1.1 referrers; the image's digest is unchanged), and with
    [sign] key, the signatures of the image and of each of them. Kind → artifact digest; {} when
    the image names no registry host, or has no documents here and nothing is signed."""
    host, repository, tag = registry.split_reference(plan.image)
    info = client.inspect_image(plan.image) or {}
    documents, remade = attestations.recorded_with(plan.path_options.log_dir, info.get("Id", ""), plan.image,
                                                   attestations.supplier_of(plan.configuration))
    if remade:
        output.channel().say(f"{plan.image}: its {', '.join(remade)} made again from its build's record, for the"
                             " [sbom] options of now (the image is unchanged)")
    signer = signer_of(plan)
    if not host or not (documents or signer):
        return {}
    remote = registry.for_host(host, client.engine_info(), DownloadPolicy.from_settings(plan.download_options))
    created = ((info.get("Config") or {}).get("Labels") or {}).get("org.opencontainers.image.created", "")
    return attestations.attach(remote, repository, tag, documents, created, signer)


def signer_of(plan: Plan) -> signing.Signer | None:
    """The key that signs what the plan's push publishes ([sign] key), None when unset."""
    return signer_from(plan.sign_options)


@functools.cache
def signer_from(options: SignOptions) -> signing.Signer | signing.KeylessSigner | None:
    """[sign] key, read (a key that cannot sign is exit 2), or the keyless signer of [sign]
    identity_token_file or [sign] ci_identity (a token that is none, or expired, is exit 2); None
    when none is set. Once a run."""
    chosen = [name for name, on in (("[sign] key", options.key), ("[sign] identity_token_file",
                                                                  options.identity_token_file),
                                    ("[sign] ci_identity", options.ci_identity)) if on]
    if len(chosen) > 1:
        raise ConfigurationError(f"{' and '.join(chosen)} are set: sign with a key or keylessly with one identity"
                                 " (unset all but one).")
    if options.password_file and not options.key:
        raise ConfigurationError("[sign] password_file is the password of [sign] key, and no key is set: set the key"
                                 " (--sign-key), or unset the password file.")
    if options.identity_token_file or options.ci_identity:
        return signing.KeylessSigner(options.identity_token_file, ci_identity=options.ci_identity)
    return signing.Signer(options.key, options.password_file or None) if options.key else None


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
