"""``invoke verify`` (and ``verify --reproducible``), ``show-build`` and ``show-config``: looking at images and settings."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from invoke import Collection

from torchbake.configuration import validation
from torchbake.configuration.network import DownloadPolicy
from torchbake.configuration.options import (
    SHOW_BUILD_FLAGS,
    SHOW_CONFIG_FLAGS,
    VERIFY_CHECKS,
    VERIFY_FLAGS,
    VERIFY_GPUS,
    overrides,
)
from torchbake.core import output, redaction
from torchbake.core.errors import ConfigurationError, ImageNotFoundError, SignatureError
from torchbake.core.lazy import LazyModule
from torchbake.families import FAMILIES
from torchbake.supply_chain.manifest import describe, find_manifest
from torchbake.tasks.cli import docker_client, flag_task, reports_errors, resolve_config

if TYPE_CHECKING:
    from torchbake.planning import config as configuration
else:
    configuration = LazyModule("torchbake.planning.config")  # read when the task runs

if TYPE_CHECKING:
    from torchbake import variants
    from torchbake.adapters import registry
    from torchbake.building import builder, publishing
    from torchbake.checks import signatures
    from torchbake.supply_chain import signing
else:
    builder = LazyModule("torchbake.building.builder")  # verify --reproducible's build: imported when it runs
    publishing = LazyModule("torchbake.building.publishing")  # verify --signatures: the registry, the key
    registry = LazyModule("torchbake.adapters.registry")
    signatures = LazyModule("torchbake.checks.signatures")
    signing = LazyModule("torchbake.supply_chain.signing")
    variants = LazyModule("torchbake.variants")


@flag_task(*VERIFY_FLAGS)
@reports_errors
def verify(c, **given):
    """Run the image's checks in a throwaway container.

    Print a pass/fail table; fail if any check fails. With --reproducible: build the image again
    without any cache and compare."""
    image, config, cli = given["image"], given["config"], overrides(VERIFY_FLAGS, given)
    python = given["python"]
    arches = {family.arch.verify_flag: family.arch for family in FAMILIES.values() if family.arch.verify_flag}
    arch_flags = [(flag, arches[flag.param]) for flag in VERIFY_CHECKS if flag.param in arches]  # --cuda-arch-list
    if given["signatures"]:
        checks = [flag.spelling for flag in (*VERIFY_CHECKS, VERIFY_GPUS) if given[flag.param]]
        if checks or given["reproducible"]:
            raise ConfigurationError(f"{', '.join(checks or ['--reproducible'])}: not with --signatures, which reads"
                                     " the registry only (run verify without --signatures for the other checks).")
        _verify_signatures(image, config, cli, given["key"], given["identity"], given["issuer"])
        return
    for flag in ("key", "identity", "issuer", "require"):
        if given[flag]:
            raise ConfigurationError(f"--{flag} says " + ("what evidence" if flag == "require" else "whose signatures")
                                     + " --signatures checks; add --signatures.")
    if given["reproducible"]:
        checks = [flag.spelling for flag in (*VERIFY_CHECKS, VERIFY_GPUS) if given[flag.param]]
        if checks:
            raise ConfigurationError(f"{', '.join(checks)}: not with --reproducible, which compares the image with a"
                                     " build of its own recorded configuration (run verify without --reproducible"
                                     " for the checks).")
        _verify_reproducible(image, config or [], cli)
        return
    settings = resolve_config(config, cli).settings()
    for flag, value, check in (("--python", python, validation.python_version),
                               ("--extension-module", given["extension_module"], validation.module_name),
                               *((flag.spelling, given[flag.param], arch.check) for flag, arch in arch_flags)):
        try:
            if value:
                check(value)
        except ValueError as exc:
            raise ConfigurationError(f"{flag} {value!r} is invalid: {exc}.") from None
    from torchbake.checks.verify import Expectations, verify_image  # the engine's checks: when one runs

    client = docker_client(settings, for_build=False)
    client.check_engine()
    expected = Expectations.of_image(client, image, python=python, torch=given["torch_version"],
                                     extension_module=given["extension_module"],
                                     arch_lists={arch.label: given[flag.param] for flag, arch in arch_flags})
    verify_image(client, image, expected, gpus=given["gpus"], accelerator=settings.accelerators.get(expected.profile))


def _verify_signatures(image: str, config_files: list[str] | None, cli: dict[str, object], key_file: str,
                       identity: str, issuer: str) -> None:
    """verify --signatures: a row per signature of the image in its registry; exit 11 when one
    does not hold."""
    settings = resolve_config(config_files, cli).settings()
    if (identity or issuer) and key_file:
        raise ConfigurationError("--key checks key-signed bundles, --identity and --issuer keyless ones: give one"
                                 " or the other.")
    if bool(identity) != bool(issuer):
        raise ConfigurationError("--identity and --issuer go together: a keyless signature names both (e.g."
                                 " --issuer https://token.actions.githubusercontent.com).")
    if issuer and not issuer.startswith("https://"):
        raise ConfigurationError(f"--issuer {issuer!r} is invalid: expected the OIDC issuer's https:// URL.")
    if identity:
        key = signing.Identity(identity, issuer)
    elif key_file:
        key = signing.read_public_key(key_file)
    elif settings.sign.key:
        key = publishing.signer_from(settings.sign).public_key
    else:
        raise ConfigurationError("verify --signatures needs whose signatures to check: --key FILE (PEM), [sign] key"
                                 " (its public half), or --identity and --issuer for keyless ones.")
    host = registry.split_reference(image)[0]
    if not host:
        raise ConfigurationError(f"verify --signatures reads the registry, and {image} names none: give"
                                 " HOST[:PORT]/NAME:TAG.")
    client = docker_client(settings, for_build=False)
    remote = registry.for_host(host, client.engine_info(), DownloadPolicy.from_settings(settings.downloads))
    rows = signatures.check(remote, image, key, settings.verify.require)
    table = output.table(title=f"signatures of {image}")
    for column in ("manifest", "what", "result"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row.manifest, row.what, output.styled((("ok: " if row.ok else "FAILED: ") + row.detail,
                                                             "green" if row.ok else "bold red")))
    output.channel().show(table)
    if failed := signatures.failed(rows):
        raise SignatureError(f"{len(failed)} of {len(rows)} rows of {image}'s signatures and evidence do not hold: "
                             + "; ".join(f"{row.manifest} {row.what}: {row.detail}" for row in failed))


def _verify_reproducible(image: str, config_files: list[str], cli: dict[str, object]) -> None:
    """The image's build as this host recorded it (its manifest's configuration, with
    ``config_files`` and the command line's options over it), made again without any cache and
    compared with the image."""
    settings = resolve_config(config_files, cli).settings()
    client = docker_client(settings)
    client.check_engine()
    info = client.inspect_image(image)
    if info is None:
        raise ImageNotFoundError(image)
    found = find_manifest(settings.paths.log_dir, info["Id"])
    recorded = found[1].get("configuration") if found else None
    if not recorded:
        raise ConfigurationError(
            f"{image} has no build record with its configuration on this host (in {settings.paths.log_dir}):"
            " verify --reproducible builds an image again from what the host that built it recorded. Build it"
            " here and compare at once with `invoke build ... --check-reproducible`, or run this where it was built.")
    variant = found[1].get("variant")
    if variant != "release":
        raise ConfigurationError(f"{image} is a {variant} image; verify --reproducible compares release images"
                                 " (dev and base images compile or clone at build time and are not made reproducible).")
    with tempfile.TemporaryDirectory(prefix="torchbake-recorded-") as folder:
        path = Path(folder) / "recorded.toml"
        path.write_text(recorded)
        resolved = resolve_config([str(path), *config_files], cli, variant="release")
        masked = sorted(key for key, value in resolved.values.items() if redaction.MASK in str(value))
        if masked:
            raise ConfigurationError(
                f"{image} was built with credentials, which its record keeps masked: {', '.join(masked)}. Give them"
                " again with --config FILE (a TOML file with just those options) or TORCHBAKE_<SECTION>_<KEY>.")
        # a context of its own, in a temporary folder: never the one a --build-dir of the build keeps
        plan = dataclasses.replace(variants.VARIANTS["release"].plan(resolved.settings(), no_cache=True), build_dir="")
        if plan.image != found[1].get("image"):
            raise ConfigurationError(f"The recorded configuration names {plan.image}, not {found[1].get('image')}.")
        labels = (info.get("Config") or {}).get("Labels") or {}
        builder.reproduce(plan, client, info["Id"], labels.get("torchbake.input-hash", ""))


@flag_task(*SHOW_BUILD_FLAGS)
@reports_errors
def show_build(c, **given):
    """Print how an image was built.

    Its labels and, from this host's build manifest, every input with its digest, the docker
    command and the timings."""
    image = given["image"]
    settings = resolve_config(given["config"], overrides(SHOW_BUILD_FLAGS, given)).settings()
    client = docker_client(settings, for_build=False)
    client.check_engine()
    info = client.inspect_image(image)
    if info is None:
        raise ImageNotFoundError(image)
    table = output.table(title=f"how {image} was built")
    table.add_column("what", overflow="fold")
    table.add_column("value", overflow="fold")
    for what, value in describe(image, info, find_manifest(settings.paths.log_dir, info["Id"])):
        table.add_row(what, value)
    output.channel().show(table)


@flag_task(*SHOW_CONFIG_FLAGS)
@reports_errors
def show_config(c, **given):
    """Print the resolved configuration and each value's source.

    Where each value came from: names, tags and FROM images nobody set say "derived from …"."""
    config, variant, format = given["config"], given["variant"], given["format"]  # noqa: A001 - the flag's name
    if variant is not None and variant not in variants.VARIANTS:
        raise ConfigurationError(f"--variant {variant!r}: expected one of: {', '.join(variants.VARIANTS)}.")
    if format not in ("table", "toml"):
        raise ConfigurationError(f"--format {format!r}: expected table or toml.")
    # the variant asked for is the file's too: read back, it plans the same kind of build
    resolved = resolve_config(config, {"build.variant": variants.VARIANTS[variant].build_variant if variant else None},
                              variant=variant)
    if format == "toml":
        output.result(configuration.to_toml(resolved.values, documented=True, declared=resolved.accelerators))
        return
    table = output.table(title="torchbake configuration" + (f" ({variant} build)" if variant else ""))
    for column in ("option", "value", "source"):
        table.add_column(column, overflow="fold")
    for row in configuration.describe(resolved):
        table.add_row(*(output.styled(cell) for cell in row))  # plain text: values and sources are never markup
    output.channel().show(table)


ns = Collection(verify, show_build, show_config)
