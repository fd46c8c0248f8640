"""[verify] base_key: a FROM image must prove who made it before anything is built on it.

Asked of the registry the FROM image names, before any work (nothing pulled, fetched or
built): its signatures and the evidence ``[verify] require`` names, all by that key, judged by
:func:`torchbake.checks.signatures.check` as `verify --signatures` judges them. Then, once the
engine holds the image, it must be the registry's very manifest (an image of that name made or
changed on this host proves nothing). The build's provenance records the key that vouched for it.
"""

from __future__ import annotations

from torchbake.adapters import registry
from torchbake.checks import signatures
from torchbake.configuration.network import DownloadPolicy
from torchbake.core.errors import SignatureError
from torchbake.supply_chain import attestations, signing
from torchbake.variants import Plan, Preflight


def check_registry(plan: Plan, client) -> tuple[str, str]:
    """(the registry's digest of the FROM image, who vouched for it), or ("", "") with no
    [verify] base_key; a FROM image that does not prove it is exit 11, naming what failed."""
    key_file = plan.verify_options.base_key
    if not key_file:
        return "", ""
    key = signing.read_public_key(key_file)
    reference = plan.base_image
    host, repository, tag = registry.split_reference(reference)
    where = f"[verify] base_key {key_file}"
    if not host:
        raise SignatureError(f"{where}: the FROM image {reference} names no registry, so nothing can prove who made"
                             " it. Name it as HOST[:PORT]/NAME:TAG, from the registry its maker pushed it to, signed.")
    remote = registry.for_host(host, client.engine_info(), DownloadPolicy.from_settings(plan.download_options))
    found = attestations.manifest_of(remote, repository, tag)
    if found is None:
        raise SignatureError(f"{where}: the FROM image {reference} is not in the registry {host}, so nothing proves"
                             " who made it. Nothing was built.")
    rows = signatures.check(remote, reference, key, plan.verify_options.require)
    if failed := signatures.failed(rows):
        raise SignatureError(
            f"{where}: the FROM image {reference} ({found[0].digest}) does not prove it was made by {key.signer}: "
            + "; ".join(f"{row.manifest} {row.what}: {row.detail}" for row in failed)
            + f". Nothing was built. `invoke verify {reference} --signatures --key {key_file}` shows every row.")
    return found[0].digest, f"{key.signer} ({', '.join(plan.verify_options.require)})"


def check_engine_copy(plan: Plan, facts: Preflight, digest: str) -> None:
    """The engine's FROM image is the registry's manifest that was verified (by digest)."""
    if digest and facts.base_digest != digest:
        raise SignatureError(
            f"[verify] base_key: the engine's {plan.base_image} is {facts.base_digest or 'an image no registry knows'},"
            f" not the registry's verified {digest}: it was made or changed on this host, or the tag moved since."
            f" Take the registry's: `docker pull {plan.base_image}`, then build again. Nothing was built.")
