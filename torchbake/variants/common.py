"""What every variant's plan has, and what the variants share.

A plan is what one build will do, decided up front from the settings: every value it needs is
checked (all missing ones named at once) before anything is downloaded or built. Each variant
(``release``, ``base``, ``dev``: one module each) knows its own build args, input-hash material,
labels, secrets, context, preflight and dry-run rows; the builder calls those methods.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from torchbake import __version__, families
from torchbake.adapters.engine import content_id, manifest_digest
from torchbake.configuration import os_releases, platforms
from torchbake.configuration.accelerators import Accelerator, Toolkit
from torchbake.configuration.network import DownloadPolicy
from torchbake.configuration.options import flag_setting, legacy_names
from torchbake.configuration.settings import (
    BuildOptions,
    DownloadOptions,
    PathOptions,
    PythonOptions,
    RegistryOptions,
    Settings,
    SignOptions,
    VerifyOptions,
    WheelOptions,
    env_var_name,
)
from torchbake.core import output
from torchbake.core.build_time import created_time
from torchbake.core.data import DOCKER_DIR
from torchbake.core.errors import BaseImagePending, ConfigurationError, EngineError, MissingValuesError
from torchbake.core.files import SecretSource, read_back_object, write_atomically
from torchbake.inputs import base_os, wheelhouse
from torchbake.inputs.context import CA_BUNDLE_SECRET, OPTIONAL_STEPS, STEPS_MARKER, unknown_optional_steps
from torchbake.inputs.downloads import DownloadCache, require_pinned
from torchbake.supply_chain.inventory import INPUTS_LABEL


@dataclass(frozen=True, kw_only=True)
class PlanCommon:
    """What every plan has: the image, the profile, where its context goes, and the run's flags."""

    image: str  # name:tag
    profile: str
    build_dir: str  # "" = temporary
    reuse_context: bool
    verify: bool
    no_cache: bool = False
    # The resolved options the later stages read (a plan never reaches back into the settings):
    python_options: PythonOptions = field(repr=False)  # the installer, uv's pin, whether the image keeps uv
    wheel_options: WheelOptions = field(repr=False)  # indexes, find-links, platforms: how wheels resolve
    build_options: BuildOptions = field(repr=False)  # network, compression, stall timeout, free space
    download_options: DownloadOptions = field(repr=False)  # retries, timeouts, the CA bundle, --require-hashes
    registry_options: RegistryOptions = field(repr=False)  # where images and their build cache go
    sign_options: SignOptions = field(repr=False)  # the key that signs what a push publishes
    verify_options: VerifyOptions = field(repr=False)  # the evidence signed images carry; who must have signed a FROM image
    path_options: PathOptions = field(repr=False)  # the cache and log folders
    checksums: Mapping[str, str] = field(repr=False)  # [checksums]: location → sha256
    on_demand: base_os.OnDemand = field(repr=False)  # how a missing Debian FROM image is made
    configuration: Mapping[str, Any] = field(repr=False)  # every option as resolved: what a build records
    image_steps: str = field(default="", repr=False)  # [image] steps: the team's Dockerfile lines (their text)
    platform: str = ""  # the one platform this plan's image is for (linux/arm64); "" = the engine's own
    base_platforms: tuple[str, ...] = ()  # the platforms its FROM image must hold (every platform of the build)
    accelerator: Accelerator | None = field(default=None, repr=False)  # the profile's declaration: verify's GPU access

    def download_cache(self, *, read_only: bool = False) -> DownloadCache:
        """The download cache with this plan's checksums and [downloads] policy."""
        return DownloadCache(self.path_options.cache_dir, self.checksums,
                             policy=DownloadPolicy.from_settings(self.download_options), read_only=read_only)

    target: ClassVar[str | None] = None  # the Dockerfile stage to build (None: the last)
    # variants whose deciding options (settings.option's ``decides``) decide this one's image too
    decided_like: ClassVar[tuple[str, ...]] = ()
    from_flag: ClassVar[str] = "--base-img"  # the flag that names the FROM image
    # torch and the extension are built, so their versions are labelled after the build
    versions_known_after_build: ClassVar[bool] = False
    # its wheels are unpacked on the build platform: another platform's image emulates only the
    # OS steps and verify (what plans say of it: torchbake.configuration.platforms.how_built)
    wheels_unpacked_natively: ClassVar[bool] = False

    slim: ClassVar[bool] = False  # also build the slim runtime image (dev builds that ask for it)
    compile_cache_required: ClassVar[bool] = False  # compiles that missed the shared store fail the build (dev builds)
    # The Dockerfile's steps in order, each with the input-hash parts (builder.input_parts; a
    # trailing * matches a prefix) that only it and the steps after it read. A part no step names
    # (the base image, the Dockerfile, the scripts, most build args) feeds the first step.
    INPUT_STEPS: ClassVar[tuple[tuple[str, tuple[str, ...]], ...]] = ()
    # parts that change the export only (the blobs' compression, a label), not a step
    EXPORT_ONLY: ClassVar[frozenset[str]] = frozenset({"build.compression", "accelerator.profile", "wheels.extension_module"})

    def hash_inputs(self) -> dict[str, object]:
        """Input-hash material this variant computes beyond its options (input_hash.option_material)."""
        return {}

    def check_preflight(self, facts) -> None:
        """Refuse a FROM image this plan does not accept (its facts), before anything is fetched."""

    def check_dry_run(self, client) -> None:
        """Refuse in a dry run what :meth:`check_preflight` would refuse in the build, from what the
        engine holds now (nothing is made or pulled)."""

    def from_images(self, labels: Mapping[str, str] | None = None) -> list[str]:
        """Every FROM image of the build, the base first (``labels``: the base image's, once known)."""
        return [self.base_image]

    def base_note(self, client) -> str:
        """What a dry run says of the FROM image on this engine beyond the plan's rows ("": nothing)."""
        return ""

    def disk_needs(self, client) -> list[tuple[str, int, str]]:
        """(what, bytes, how it is counted) the build writes in the engine's storage beyond its inputs' layers."""
        return []

    def record_facts(self) -> dict[str, object]:
        """What the build's record keeps of this plan beyond the common facts."""
        return {}

    def dry_run_notes(self) -> list[str]:
        """What a dry run says beyond the plan's rows that only the host can tell (read, never written)."""
        return []

    def check_before_build(self, client) -> None:
        """Refuse, before anything is prepared or built, what would fail the build half-way."""

    def steps_again(self, changed: list[str]) -> str:
        """Which steps a build with these input-hash parts changed runs again, in words."""
        def step_of(part: str) -> int:
            return next((index for index, (_, parts) in enumerate(self.INPUT_STEPS, 1)
                         if any(part == p or (p.endswith("*") and part.startswith(p[:-1])) for p in parts)), 0)

        runs = [step_of(part) for part in changed if part not in self.EXPORT_ONLY]
        if not runs:
            return "no step runs again; the layers are exported anew"
        first = min(runs)
        return f"runs again from the {self.INPUT_STEPS[first - 1][0]} step on" if first else "runs every step again"

    def source_records(self, facts) -> dict[str, dict[str, str]]:
        """What the build manifest records of the sources this variant uses."""
        return {}

    def common_labels(self, facts, digest: str, inputs: dict[str, str] | None) -> dict[str, str]:
        """The labels every image gets; ``facts`` is the preflight (None in a dry run)."""
        return {
            "org.opencontainers.image.title": self.image.rsplit(":", 1)[0],
            "org.opencontainers.image.version": self.image.rsplit(":", 1)[1],
            "org.opencontainers.image.created": created_time(),  # SOURCE_DATE_EPOCH's, when given
            "org.opencontainers.image.base.name": self.base_image,
            # the FROM image's manifest digest, which a registry resolves (left out where none is known)
            **({"org.opencontainers.image.base.digest": facts.base_digest if facts else "<base image digest>"}
               if facts is None or facts.base_digest else {}),
            "torchbake.base.content-id": facts.base_id if facts else "<base image id>",
            "torchbake.version": __version__,
            "torchbake.variant": self.variant,
            "torchbake.profile": self.profile,
            "torchbake.python": self.image_python(facts) or "<from the base image>",
            "torchbake.input-hash": digest or PENDING,
            INPUTS_LABEL: json.dumps(inputs, sort_keys=True) if inputs is not None else PENDING,
        }

    def image_python(self, facts) -> str:
        return self.python_version

    def secrets(self) -> list[tuple[str, SecretSource]]:
        """BuildKit secrets of this variant (the CA bundle is every variant's)."""
        return []

    def passed_secrets(self) -> frozenset[str]:
        """The ids of the secrets its builds pass (torchbake.building.builder.build_secrets): its
        context's Dockerfile mounts those of torchbake's alone (torchbake.inputs.context.render_dockerfile)."""
        ids = {secret_id for secret_id, _ in self.secrets()}
        return frozenset((ids | {CA_BUNDLE_SECRET}) if self.download_options.ca_bundle else ids)

    def given_inputs(self) -> dict[str, str]:
        """Option → location of every input the user gave by URL, path or requirement (what
        --require-hashes, the disk-space check and the manifest look at)."""
        given = {f"toolkits.{key}": location for key, location in getattr(self, "toolkits", {}).items()}
        given.update({f"wheels.{role}": location for role, location in getattr(self, "wheel_sources", {}).items()})
        if getattr(self, "python_source", ""):
            given["python.standalone_url"] = self.python_source
        return given


PlanT = TypeVar("PlanT", bound=PlanCommon)


PENDING = "<computed after preparing the context>"


def accelerator_labels(plan) -> dict[str, str]:
    return {"torchbake.extension-module": plan.extension_module, **plan.arch_lists}


def os_build_args(plan) -> dict[str, str]:
    python = plan.python_options
    return {"BASE_IMAGE": plan.base_image, "PYTHON_VERSION": plan.python_version,
            "PYTHON_PROVIDER": plan.python_provider, "RENDER_GID": str(plan.render_gid),
            "INSTALLER": python.installer, "KEEP_UV": "1" if python.keep_uv else "0"}


def wheel_machine(plan) -> str:
    """The machine the plan's image runs on, as its wheels' platform tags name it (x86_64, aarch64)."""
    if plan.platform:
        return platforms.parse(plan.platform).machine
    return wheelhouse.image_environment(plan.python_version, plan.wheel_options.platforms)["platform_machine"]


def installer_context(plan) -> tuple[str, str]:
    """The dry-run row of the uv/ folder."""
    python = plan.python_options
    if python.installer != "uv" and not python.keep_uv:
        return ("uv/", "(none: wheels install with pip)")
    kept = "; kept in the image" if python.keep_uv else ""
    return ("uv/", f"{python.uv}, resolved on the host" + (", installs the wheels" if python.installer == "uv" else "") + kept)


def pinned(plan: PlanT) -> PlanT:
    """The plan, once --require-hashes (if set) found a sha256 for each of its URL inputs."""
    if plan.download_options.require_hashes:
        require_pinned(plan.given_inputs(), plan.checksums)
    return plan


class PlanMaker(Protocol):
    def __call__(self, settings: Settings, *, python_given: bool = False, reuse_context: bool = False,
                 no_cache: bool = False) -> PlanCommon:
        """The variant's plan from resolved settings; ``python_given``: --python was given (a dev
        image otherwise takes its base image's Python)."""


@dataclass(frozen=True, kw_only=True)
class Variant:
    """A variant, declared once by its module (``VARIANT = Variant(...)``), found by
    :data:`torchbake.variants.VARIANTS`."""

    name: str  # the image kind (labels, matrix cells, show-config --variant)
    build_variant: str | None  # the [build] variant its settings resolve with (None: only its own task builds it)
    built_from: str | None  # the variant whose image is this one's FROM image (a matrix builds it first)
    from_option: str  # the option naming its FROM image (derived when nobody sets it: torchbake.configuration.derived)
    verifies: frozenset[str]  # the verify checks its images get (torchbake.checks.verify.CHECKS)
    lock_command: str  # the command that locks its images' closure ("": not locked; torchbake.variants.locking)
    plan: PlanMaker


@dataclass(frozen=True)
class Missing:
    """A value a build needs that nobody set."""

    key: str  # section.key
    why: str


def ways_to_set(key: str, *, matrix: bool = False, accelerator: Accelerator | None = None) -> list[str]:
    """Where the user sets ``key``: the flag of ``invoke build`` (or, for build-all, the matrix
    option template), a --config file, or the environment. A flag shown by a legacy script's name
    (``flag_names``) is named by its own for an ``accelerator`` whose scripts never had it."""
    section, name = key.split(".", 1)
    ways = [f"[{section}] {name} = ... in a --config file", env_var_name(key)]
    flag = flag_setting(key)
    own = {legacy: own for own, legacy in legacy_names().items()}.get(flag.removeprefix("--").replace("-", "_"))
    if own and accelerator is not None and own not in accelerator.flag_names:
        flag = "--" + own.replace("_", "-")
    if matrix and section == "wheels":
        ways.insert(0, f'[matrix.options.release] "{key}" (a template: {{cp}} is cp310 for Python 3.10)')
    elif not matrix and flag:
        ways.insert(0, flag)
    return ways


def how_to_set(key: str, *, matrix: bool = False, accelerator: Accelerator | None = None) -> str:
    ways = ways_to_set(key, matrix=matrix, accelerator=accelerator)
    return ", ".join(ways[:-1]) + f" or {ways[-1]}"


def missing_error(missing: list[Missing], accelerator: Accelerator | None = None) -> MissingValuesError:
    lines = [f"  {m.key}: {m.why}. Set it with {how_to_set(m.key, accelerator=accelerator)}." for m in missing]
    head = (f"{missing[0].key} is not set" if len(missing) == 1
            else f"{len(missing)} values this build needs are not set")
    return MissingValuesError(head + ":\n" + "\n".join(lines), missing=[(m.key, m.why) for m in missing])


def raise_missing(missing: list[Missing], settings: Settings | None = None) -> None:
    """A MissingValuesError naming each of ``missing`` and how to set it (the flags as the
    profile's ``settings`` know them)."""
    if missing:
        raise missing_error(missing, settings.accelerators.get(settings.accelerator.profile) if settings else None)


def accelerator_of(settings: Settings) -> Accelerator:
    """The accelerator ``[accelerator] profile`` names (declared: torchbake.configuration.accelerators)."""
    return settings.accelerators[settings.accelerator.profile]


def missing_toolkits(settings: Settings) -> list[Missing]:
    """The toolkits the profile's accelerator declares required that no option gives."""
    accelerator = accelerator_of(settings)
    return [Missing(f"toolkits.{toolkit.key}", f"the {accelerator.name} profile needs that toolkit")
            for toolkit in accelerator.toolkits if toolkit.required and not settings.toolkits.get(toolkit.key)]


def given_toolkits(settings: Settings) -> list[Toolkit]:
    """The declared toolkits an option gives, in install order: the profile's accelerator's first
    (a toolkit of another accelerator given too is installed after them, as the legacy -m did on
    any build)."""
    ordered = [accelerator_of(settings), *(a for a in settings.accelerators.values() if a.name != settings.accelerator.profile)]
    return [toolkit for accelerator in ordered for toolkit in accelerator.toolkits if settings.toolkits.get(toolkit.key)]


def toolkits_of(settings: Settings) -> dict[str, str]:
    """Toolkit key → location of those given, in install order."""
    return {t.key: settings.toolkits[t.key] for t in given_toolkits(settings)}


def toolkit_material(scripts: Mapping[str, str]) -> dict[str, object]:
    """How each toolkit is installed (its script's name, or a .run installer's arguments), for the
    input hash: what its step runs (nothing when the image installs no toolkit)."""
    return {"toolkit_scripts": dict(scripts)} if scripts else {}


def toolkit_scripts(settings: Settings) -> dict[str, str]:
    """Toolkit key → the install script its tarball carries, of those given."""
    return {t.key: t.install for t in given_toolkits(settings)}


def check_os_python(plan, os_release: dict[str, str]) -> None:
    """Fail before any slow work when provider "os" cannot give the requested Python."""
    if plan.python_provider != "os":
        return
    release = os_releases.release_of(os_release.get("ID", ""), os_release.get("VERSION_ID", ""))
    if release is None or release.python == plan.python_version:
        return
    raise os_releases.python_mismatch(plan.python_version, plan.base_image, release, plan.from_flag)


def parse_os_release(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip('"')
    return values


def os_base_text(plan) -> str:
    """A FROM image that is an OS image, with what happens when the engine lacks it."""
    how = base_os.how_missing_is_made(plan.base_image, plan.on_demand)
    return f"{plan.base_image} (if not on the engine: {how})"


def labels_name(labels: Mapping[str, str], image: str) -> bool:
    """Whether an image's own labels (PlanCommon.common_labels) name ``image``, NAME:TAG: a tag
    lands, on the engine or in a registry, only on an image that says it is that tag."""
    name, tag = image.rsplit(":", 1)
    return labels.get("org.opencontainers.image.title") == name and labels.get("org.opencontainers.image.version") == tag


def os_base_note(plan, client) -> str:
    """A dry run's word on an OS FROM image the engine holds for fewer platforms than the build's:
    made again for them all, or refused as the build would (:func:`base_os.pending_platforms`).
    Asked only of a build for another platform than this host's: the engine is not needed otherwise."""
    if plan.base_platforms in ((), (platforms.host().name,)):
        return ""
    try:
        base = client.inspect_image(plan.base_image)
    except EngineError:
        return ""
    if base is None:
        return ""
    return base_os.pending_platforms(client, plan.base_image, plan.from_flag, base, plan.on_demand, plan.base_platforms)


def python_rows(plan) -> list[tuple[str, object]]:
    rows: list[tuple[str, object]] = [("python", f"{plan.python_version} (provider {plan.python_provider})")]
    return rows + ([("python tarball", plan.python_source)] if plan.python_source else [])


def python_context(plan) -> tuple[str, str]:
    return "python/", "the CPython tarball" if plan.python_source else "(empty: OS Python)"


def toolkit_context(plan) -> tuple[str, str]:
    return "toolkits/", ", ".join(plan.toolkits) if plan.toolkits else "(none)"


def template_of(settings: Settings, variant: str) -> Path:
    path = Path(settings.image.docker_file) if settings.image.docker_file else DOCKER_DIR / "ubuntu" / f"dockerfile.{variant}"
    if not path.is_file():
        raise ConfigurationError(f"Dockerfile {path} (--docker-file) does not exist.")
    text = path.read_text(errors="replace")
    if settings.image.steps and STEPS_MARKER not in text:
        raise ConfigurationError(f"Dockerfile {path} (--docker-file) has no '{STEPS_MARKER}' line, where the lines of"
                                 f" [image] steps ({settings.image.steps}) go: add it before the step that records what"
                                 " is installed.")
    unknown = unknown_optional_steps(text)
    if unknown:
        raise ConfigurationError(
            f"Dockerfile {path} (--docker-file): '# @torchbake-if {unknown[0]}@' names no step torchbake knows;"
            f" expected {' or '.join(OPTIONAL_STEPS)} (a step without such a line always stays).")
    return path


def build_env_of(settings: Settings, *extra: dict[str, str]) -> dict[str, str]:
    env = dict(settings.image.env)
    for table in extra:
        env.update(table)
    env.update(families.arch_env(settings.accelerator))
    return env


def common_fields(settings: Settings, reuse_context: bool, no_cache: bool) -> dict:
    """Fields every plan has, from the settings and the run's flags."""
    chosen = platforms.parse_all(settings.image.platforms)
    return {"image": settings.registry.image(settings.image.reference), "profile": settings.accelerator.profile,
            "build_dir": settings.build.dir, "reuse_context": reuse_context, "verify": settings.build.verify,
            "no_cache": no_cache, "python_options": settings.python, "wheel_options": settings.wheels,
            "build_options": settings.build, "download_options": settings.downloads,
            "registry_options": settings.registry, "sign_options": settings.sign,
            "verify_options": settings.verify, "path_options": settings.paths, "checksums": settings.checksums,
            "on_demand": base_os.OnDemand.from_settings(settings), "configuration": settings.values,
            "platform": chosen[0].name if len(chosen) == 1 else "",
            "base_platforms": tuple(p.name for p in chosen),
            "accelerator": settings.accelerators.get(settings.accelerator.profile),
            "image_steps": Path(settings.image.steps).expanduser().read_text() if settings.image.steps else ""}


def python_source_of(settings: Settings) -> str:
    """The CPython tarball of provider "standalone" ("" for the OS Python)."""
    python = settings.python
    if python.provider != "standalone":
        return ""
    return python.standalone_url.replace("{python}", python.version)


def missing_python_source(settings: Settings) -> list[Missing]:
    if settings.python.provider == "standalone" and not settings.python.standalone_url:
        return [Missing("python.standalone_url", 'python.provider = "standalone" needs a CPython tarball')]
    return []


def check_common(settings: Settings, reuse_context: bool) -> list[Missing]:
    """Checks every plan makes; returns the values that are missing (the caller adds its own)."""
    if reuse_context and not settings.build.dir:
        raise ConfigurationError(
            "--no-prepare reuses a context prepared earlier, so it needs --build-dir (or DOCKER_BUILD_DIR)"
            " naming that folder."
        )
    return [] if settings.image.name else [Missing("image.name", "every build needs an image name")]


@dataclass(frozen=True)
class Preflight:
    """What the engine and the remotes said before any slow work."""

    base_id: str  # the FROM image by content (engine.content_id): what decides the input hash
    base_labels: dict[str, str] = field(default_factory=dict)
    base_digest: str = ""  # its manifest's (or index's) digest where a registry or the image store knows it
    base_image_id: str = ""  # the engine's id of it: the manifest's digest (containerd store) or the config's
    base_verified_by: str = ""  # [verify] base_key: whose signatures and evidence the registry's FROM image carried
    python_version: str = ""
    extension_commit: str = ""
    max_jobs: int = 1
    source_commits: dict[str, str] = field(default_factory=dict)  # tree name → commit


SUPPORTED_OS = ("debian", "ubuntu")  # apt-based: docker/ubuntu/ serves both


def os_release_of(client, image: str, image_id: str, cache_dir: Path, *,
                remember: bool = True) -> dict[str, str]:
    """The image's /etc/os-release, read once per image id (an id never changes content) when
    ``remember``."""
    record = cache_dir / "os-release" / f"{image_id.replace(':', '-')}.json"
    if record.is_file():
        remembered = read_back_object(record)
        if remembered is not None and all(isinstance(v, str) for v in remembered.values()):
            return remembered
        output.channel().say(f"{record} is damaged; reading {image}'s /etc/os-release again.")
    text = client.read_file(image, "/etc/os-release")  # None: the image has none
    values = parse_os_release(text) if text is not None else {}
    if values and remember:
        write_atomically(record, json.dumps(values))
    return values


def os_base_image(plan, client, *, writes: bool) -> dict:
    """The inspect record of an OS FROM image (release and base builds). A missing one is pulled
    or made with debootstrap when ``writes``; otherwise :class:`BaseImagePending` says what a
    build would do."""
    on_demand = plan.on_demand
    if not writes:
        base = client.inspect_image(plan.base_image)
        if base is None:
            raise BaseImagePending(f"{plan.base_image} is not on the engine yet; it will be"
                                   f" {base_os.how_missing_is_made(plan.base_image, on_demand)}")
        if pending := base_os.pending_platforms(client, plan.base_image, plan.from_flag, base, on_demand,
                                                plan.base_platforms):
            raise BaseImagePending(pending)
        return base
    python = plan.python_version if plan.python_provider == "os" else ""
    return base_os.ensure_os_image(plan.base_image, plan.from_flag, client, on_demand, python=python,
                                   platforms_wanted=plan.base_platforms)


def os_preflight(plan, client, *, writes: bool, source_commits: dict[str, str] | None = None,
                 supported: tuple[str, ...] = ()) -> Preflight:
    """Release and base builds: the OS FROM image (made if missing), its OS (one of ``supported``
    when given) and that its Python is the requested one."""
    base = os_base_image(plan, client, writes=writes)
    os_release = os_release_of(client, plan.base_image, base["Id"], plan.path_options.cache_dir, remember=writes)
    if supported and os_release.get("ID") not in supported:
        raise ConfigurationError(
            f"{plan.from_flag} {plan.base_image} is {os_release.get('ID', 'an unknown OS')}; torchbake's Dockerfiles"
            f" (docker/ubuntu/) support {', '.join(supported)}."
        )
    check_os_python(plan, os_release)
    return Preflight(base_id=content_id(base, plan.platform), base_digest=manifest_digest(base, plan.base_image),
                     base_image_id=base.get("Id", ""),
                     base_labels=dict((base.get("Config") or {}).get("Labels") or {}),
                     python_version=plan.python_version, source_commits=source_commits or {})
