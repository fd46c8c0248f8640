"""[verify] base_key: every FROM image must prove who made it before anything is built on it.

Asked of the registry each FROM image names (the base image and, for a slim dev image, the slim
stage's), before any work (nothing pulled, fetched or built): its signature and the evidence
``[verify] require`` names, all by that key, judged by :func:`torchbake.checks.signatures.check`
as `verify --signatures` judges them. Then the engine's copy must be the registry's very manifest
(an image of that name made or changed on this host proves nothing): a dry run gives that verdict
from what the engine holds now, a build once it holds the base. The build's provenance records
the key that vouched for them.
"""

from __future__ import annotations

from collections.abc import Mapping

from torchbake.adapters import registry
from torchbake.adapters.engine import manifest_digest
from torchbake.checks import signatures
from torchbake.configuration.network import DownloadPolicy
from torchbake.core.errors import SignatureError
from torchbake.supply_chain import attestations, signing
from torchbake.variants import Plan, Preflight

FLAG = "--base-key"  # [verify] base_key's flag: what its messages name


def check_registry(plan: Plan, client, labels: Mapping[str, str] | None = None) -> tuple[dict[str, str], str]:
    """(each FROM image → the registry's digest of it, who vouched for them), or ({}, "") with no
    [verify] base_key (``labels``: the base image's, which name the slim stage's default FROM
    image). A FROM image that does not prove it is exit 11, naming what failed."""
    key_file = plan.verify_options.base_key
    if not key_file:
        return {}, ""
    key = signing.read_public_key(key_file, where=f"{FLAG} ([verify] base_key)")
    required = list(dict.fromkeys(("image", *plan.verify_options.require)))
    verified = {reference: _proven(plan, client, key, key_file, reference) for reference in plan.from_images(labels)}
    return verified, f"{key.signer} ({', '.join(required)})"


def _proven(plan: Plan, client, key: signing.PublicKey, key_file: str, reference: str) -> str:
    """The registry's digest of ``reference``, once its signatures and evidence proved it."""
    where = f"{FLAG} {key_file}"
    name = reference.split("@", 1)[0]  # HOST/NAME:TAG@DIGEST: the registry is asked for that digest
    host, repository, tag = registry.split_reference(name)
    pinned = reference.partition("@")[2]
    if not host:
        raise SignatureError(f"{where}: the FROM image {reference} names no registry, so nothing can prove who made"
                             " it. Name it as HOST[:PORT]/NAME:TAG, from the registry its maker pushed it to, signed.")
    remote = registry.for_host(host, client.engine_info(), DownloadPolicy.from_settings(plan.download_options))
    found = attestations.manifest_of(remote, repository, pinned or tag)
    if found is None:
        raise SignatureError(f"{where}: the FROM image {reference} is not in the registry {host}, so nothing proves"
                             " who made it. Nothing was built.")
    # the manifest just found, by its digest: the tag cannot move between the look and the check
    rows = signatures.check(remote, f"{host}/{repository}@{found[0].digest}", key, plan.verify_options.require)
    if failed := signatures.failed(rows):
        raise SignatureError(
            f"{where}: the FROM image {reference} ({found[0].digest}) does not prove it was made by {key.signer}: "
            + "; ".join(f"{row.manifest} {row.what}: {row.detail}" for row in failed)
            + f". Nothing was built. `invoke verify {reference} --signatures --key {key_file}` shows every row.")
    return found[0].digest


def check_engine_copy(plan: Plan, client, verified: Mapping[str, str], facts: Preflight | None = None) -> list[str]:
    """Each verified FROM image the engine holds is the registry's manifest that was verified (by
    digest); exit 11 where it is another. ``facts``: the build's preflight (the engine holds the
    base by then); without, a dry run's verdict from what the engine holds now. The notes of a
    dry run: the FROM images the engine does not hold yet (the build pulls them, then compares)."""
    notes = []
    for reference, digest in verified.items():
        if facts is not None and reference == plan.base_image:
            held = facts.base_digest
        else:
            info = client.inspect_image(reference)
            if info is None:
                if facts is not None:  # the slim stage's FROM image: the build would take the registry's tag as it is then
                    raise SignatureError(
                        f"{FLAG}: the engine does not hold {reference}, the slim stage's FROM image, so the image"
                        f" built FROM it could be another than the registry's verified {digest}. Take the registry's:"
                        f" `docker pull {reference}`, then build again. Nothing was built.")
                notes.append(f"{reference}: not in the engine yet; the build compares the engine's copy with {digest}")
                continue
            held = manifest_digest(info, reference)
        if held != digest:
            raise SignatureError(
                f"{FLAG}: the engine's {reference} is {held or 'an image no registry knows'}, not the registry's"
                f" verified {digest}: it was made or changed on this host, or the tag moved since. Take the"
                f" registry's: `docker pull {reference}`, then build again. Nothing was built.")
    return notes
