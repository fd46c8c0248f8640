"""What one ``invoke build`` will do, decided up front from the settings.

:func:`plan_release` checks everything that can be checked without slow work (required values,
the Dockerfile, the Python provider) and returns a frozen :class:`ReleasePlan`; nothing is
downloaded or built here. :func:`describe_plan` renders it for ``--dry-run``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar, TypeVar

from . import __version__, base_os, context, sources
from .config import COMMON_DIR, DOCKER_DIR, TOOLKITS, Settings, env_var_name
from .downloads import require_pinned
from .errors import ConfigurationError, MissingValuesError
from .validation import is_location

# Option → the flag that sets it, for messages that tell the user what to pass.
FLAGS = {
    "image.name": "--name",
    "image.base": "--base-img",
    "wheels.torch": "--torch-whl-url",
    "wheels.extension": "--torch-musa-whl-url",
    "base.sys": "--sys",
    **{f"toolkits.{k}": flag for k, (flag, _) in TOOLKITS.items()},
}


@dataclass(frozen=True, kw_only=True)
class PlanCommon:
    """What every plan has: the image, the profile, where its context goes, and the run's flags."""

    image: str  # name:tag
    profile: str
    build_dir: str  # "" = temporary
    reuse_context: bool
    verify: bool
    no_cache: bool = False
    settings: Settings = field(repr=False)

    target: ClassVar[str | None] = None  # the Dockerfile stage to build (None: the last)

    def common_labels(self, facts, digest: str, inputs: dict[str, str] | None) -> dict[str, str]:
        """The labels every image gets; ``facts`` is the preflight (None in a dry run)."""
        return {
            "org.opencontainers.image.title": self.image.rsplit(":", 1)[0],
            "org.opencontainers.image.version": self.image.rsplit(":", 1)[1],
            "org.opencontainers.image.created": (datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                                                 if facts else "<build time>"),
            "org.opencontainers.image.base.name": self.base_image,
            "org.opencontainers.image.base.digest": facts.base_id if facts else "<base image id>",
            "torchbake.version": __version__,
            "torchbake.variant": self.variant,
            "torchbake.profile": self.profile,
            "torchbake.python": self.image_python(facts) or "<from the base image>",
            "torchbake.input-hash": digest or PENDING,
            "torchbake.inputs": json.dumps(inputs, sort_keys=True) if inputs is not None else PENDING,
        }

    def image_python(self, facts) -> str:
        return self.python_version

    def secrets(self) -> list[tuple[str, Path]]:
        """BuildKit secrets of this variant (the CA bundle is every variant's)."""
        return []

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


def _accelerator_labels(plan) -> dict[str, str]:
    return {"torchbake.extension-module": plan.extension_module, "torchbake.cuda-arch-list": plan.cuda_arch_list,
            "torchbake.rocm-arch": plan.rocm_arch}


def _os_build_args(plan) -> dict[str, str]:
    return {"BASE_IMAGE": plan.base_image, "PYTHON_VERSION": plan.python_version,
            "PYTHON_PROVIDER": plan.python_provider, "RENDER_GID": str(plan.render_gid)}


def _hash_common(plan, cache) -> dict[str, str]:
    """Digests of the inputs every variant may have: toolkits and a CPython tarball."""
    digests = {f"toolkits.{key}": cache.known_digest(location) for key, location in getattr(plan, "toolkits", {}).items()}
    if getattr(plan, "python_source", ""):
        digests["python"] = cache.known_digest(plan.python_source)
    return digests


@dataclass(frozen=True, kw_only=True)
class ReleasePlan(PlanCommon):
    variant = "release"

    base_image: str
    dockerfile_template: Path
    python_version: str
    python_provider: str
    python_source: str  # standalone tarball location ("" for provider os)
    wheel_sources: dict[str, str]  # role (torch, extension, torchvision, torchaudio) → location/requirement
    extra_requirements: tuple[str, ...]
    toolkits: dict[str, str]  # toolkit key → location, install order
    image_env: dict[str, str]
    render_gid: int
    extension_module: str
    cuda_arch_list: str
    rocm_arch: str

    @property
    def dockerfile_env(self) -> dict[str, str]:
        return self.image_env

    def build_args(self, facts) -> dict[str, str]:
        return _os_build_args(self)

    def hash_inputs(self, cache) -> tuple[dict[str, object], dict[str, str]]:
        """(material, input digests) of the input hash beyond what every variant has; a wheel
        given as a requirement is hashed as written."""
        digests = {f"wheels.{role}": cache.known_digest(source) if is_location(source) else source
                   for role, source in self.wheel_sources.items()}
        return {"extra": self.extra_requirements}, {**_hash_common(self, cache), **digests}

    def prepare(self, facts, cache, folder: Path, *, temporary: bool, log_file: Path) -> context.PreparedContext:
        """The context: wheels resolved for the image's Python, toolkits, constraints."""
        return context.prepare_release_context(self, cache, folder, temporary=temporary, log_file=log_file)

    def labels(self, prepared, facts) -> dict[str, str]:
        return {"torchbake.torch-version": prepared.torch_version if prepared else PENDING,
                "torchbake.extension": prepared.extension if prepared else PENDING, **_accelerator_labels(self)}

    def base_image_text(self) -> str:
        return _os_base_text(self)

    def input_rows(self) -> list[tuple[str, object]]:
        return [*_python_rows(self), *self.wheel_sources.items(), *(("extra", r) for r in self.extra_requirements)]

    def context_lines(self) -> list[tuple[str, str]]:
        return [("constraints.txt", "pins of torch" + (" and the extension" if "extension" in self.wheel_sources else "")),
                ("wheelhouse/", f"the wheels above and their dependencies for cp{self.python_version.replace('.', '')},"
                                " with requirements.txt"),
                _toolkit_context(self), _python_context(self)]


def _pinned(plan: PlanT) -> PlanT:
    """The plan, once --require-hashes (if set) found a sha256 for each of its URL inputs."""
    if plan.settings.downloads.require_hashes:
        require_pinned(plan.given_inputs(), plan.settings.checksums)
    return plan


@dataclass(frozen=True)
class Missing:
    """A value a build needs that nobody set."""

    key: str  # section.key
    why: str


def ways_to_set(key: str, *, matrix: bool = False) -> list[str]:
    """Where the user sets ``key``: the flag of ``invoke build`` (or, for build-all, the matrix
    option template), a --config file, or the environment."""
    section, name = key.split(".", 1)
    ways = [f"[{section}] {name} = ... in a --config file", env_var_name(key)]
    if matrix and section == "wheels":
        ways.insert(0, f'[matrix.options.release] "{key}" (a template: {{cp}} is cp310 for Python 3.10)')
    elif not matrix and key in FLAGS:
        ways.insert(0, FLAGS[key])
    return ways


def how_to_set(key: str, *, matrix: bool = False) -> str:
    ways = ways_to_set(key, matrix=matrix)
    return ", ".join(ways[:-1]) + f" or {ways[-1]}"


def missing_error(missing: list[Missing]) -> MissingValuesError:
    lines = [f"  {m.key}: {m.why}. Set it with {how_to_set(m.key)}." for m in missing]
    head = (f"{missing[0].key} is not set" if len(missing) == 1
            else f"{len(missing)} values this build needs are not set")
    return MissingValuesError(head + ":\n" + "\n".join(lines), missing=[(m.key, m.why) for m in missing])


def _raise_missing(missing: list[Missing]) -> None:
    if missing:
        raise missing_error(missing)


def plan_release(settings: Settings, *, reuse_context: bool = False, no_cache: bool = False) -> ReleasePlan:
    image, python, wheels = settings.image, settings.python, settings.wheels
    missing = _check_common(settings, reuse_context)
    if not image.base:
        missing.append(Missing("image.base", "a release image is built FROM a plain OS image, and no OS image"
                                             f" torchbake knows ships Python {python.version}"))
    if not reuse_context:  # with --no-prepare the inputs are those of the prepared context
        missing += _missing_inputs(settings)
    missing += _missing_python_source(settings)
    _raise_missing(missing)
    template = _template(settings, "release")
    env = dict(image.env)
    if settings.accelerator.torch_cuda_arch_list:
        env["TORCH_CUDA_ARCH_LIST"] = settings.accelerator.torch_cuda_arch_list
    if settings.accelerator.pytorch_rocm_arch:
        env["PYTORCH_ROCM_ARCH"] = settings.accelerator.pytorch_rocm_arch
    sources = {"torch": wheels.torch, "extension": wheels.extension,
               "torchvision": wheels.torchvision, "torchaudio": wheels.torchaudio}
    return _pinned(ReleasePlan(
        **_common_fields(settings, reuse_context, no_cache),
        base_image=image.base,
        dockerfile_template=template,
        python_version=python.version,
        python_provider=python.provider,
        python_source=_python_source(settings),
        wheel_sources={role: loc for role, loc in sources.items() if loc},
        extra_requirements=wheels.extra,
        toolkits=settings.toolkits.given(),
        image_env=env,
        render_gid=image.render_gid,
        extension_module=wheels.extension_module,
        cuda_arch_list=settings.accelerator.torch_cuda_arch_list,
        rocm_arch=settings.accelerator.pytorch_rocm_arch,
    ))


def _missing_toolkits(settings: Settings) -> list[Missing]:
    return [Missing(f"toolkits.{key}", f"the {settings.accelerator.profile} profile needs that toolkit")
            for key in settings.toolkits.required if not settings.toolkits.urls()[key]]


def _missing_inputs(settings: Settings) -> list[Missing]:
    wheels = settings.wheels
    missing = []
    if not wheels.torch:
        missing.append(Missing("wheels.torch", "a release image installs torch from a wheel, and the"
                                               f" {settings.accelerator.profile} profile has no [wheels] default_torch"))
    if wheels.extension_module and not wheels.extension:
        missing.append(Missing("wheels.extension",
                               f"[wheels] extension_module = {wheels.extension_module!r} names an extension to check"))
    return missing + _missing_toolkits(settings)


def check_os_python(plan: ReleasePlan, os_release: dict[str, str]) -> None:
    """Fail before any slow work when provider "os" cannot give the requested Python."""
    if plan.python_provider != "os":
        return
    release = base_os.release_of(os_release.get("ID", ""), os_release.get("VERSION_ID", ""))
    if release is None or release.python == plan.python_version:
        return
    raise base_os.python_mismatch(plan.python_version, plan.base_image, release,
                                  "--sys" if plan.variant == "base" else "--base-img")


def parse_os_release(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip('"')
    return values


def describe_plan(plan, docker_argv: list[str], docker_env: dict[str, str]) -> str:
    """The plan of any variant as text, for --dry-run: each plan gives its own rows."""
    from .command import format_command

    rows = [("base image", plan.base_image_text()), *plan.input_rows(),
            *getattr(plan, "toolkits", {}).items(), *(("ENV", f"{k}={v}") for k, v in plan.dockerfile_env.items())]
    lines = [f"Plan for {plan.image} ({plan.variant}, profile {plan.profile})", "", "Inputs:"]
    lines += [f"  {label:<15} {value}" for label, value in rows]
    lines += ["", "Context:" + (f" {plan.build_dir}" if plan.build_dir else " a temporary folder, removed after the build")]
    lines.append("  Dockerfile       from " + os.path.relpath(plan.dockerfile_template))
    lines.append("  common/          " + ", ".join(sorted(p.name for p in COMMON_DIR.iterdir())))
    lines += [f"  {name:<16} {text}" for name, text in plan.context_lines()]
    lines += ["", "Docker command:", "  " + format_command(docker_argv, docker_env), ""]
    lines.append("Verify afterwards: " + ("yes" if plan.verify else "no (--no-verify)"))
    return "\n".join(lines)


def _os_base_text(plan) -> str:
    """A FROM image that is an OS image, with what happens when the engine lacks it."""
    how = base_os.how_missing_is_made(plan.base_image, base_os.OnDemand.from_settings(plan.settings))
    return f"{plan.base_image} (if not on the engine: {how})"


def _python_rows(plan) -> list[tuple[str, object]]:
    rows: list[tuple[str, object]] = [("python", f"{plan.python_version} (provider {plan.python_provider})")]
    return rows + ([("python tarball", plan.python_source)] if plan.python_source else [])


def _python_context(plan) -> tuple[str, str]:
    return "python/", "the CPython tarball" if plan.python_source else "(empty: OS Python)"


def _toolkit_context(plan) -> tuple[str, str]:
    return "toolkits/", ", ".join(plan.toolkits) if plan.toolkits else "(none)"


def _template(settings: Settings, variant: str) -> Path:
    path = Path(settings.image.docker_file) if settings.image.docker_file else DOCKER_DIR / "ubuntu" / f"dockerfile.{variant}"
    if not path.is_file():
        raise ConfigurationError(f"Dockerfile {path} (--docker-file) does not exist.")
    return path


def _build_env(settings: Settings, *extra: dict[str, str]) -> dict[str, str]:
    env = dict(settings.image.env)
    for table in extra:
        env.update(table)
    if settings.accelerator.torch_cuda_arch_list:
        env["TORCH_CUDA_ARCH_LIST"] = settings.accelerator.torch_cuda_arch_list
    if settings.accelerator.pytorch_rocm_arch:
        env["PYTORCH_ROCM_ARCH"] = settings.accelerator.pytorch_rocm_arch
    return env


SOURCE_NAMES = ("pytorch", "vision", "audio")


@dataclass(frozen=True, kw_only=True)
class BasePlan(PlanCommon):
    """``invoke build-base``: OS + build tools + Python + the three source trees."""

    variant = "base"
    base_image: str  # the OS image (--sys)
    dockerfile_template: Path
    python_version: str
    python_provider: str
    python_source: str
    sources: tuple[sources.SourceSpec, ...]
    source_root: str
    keep_git: bool
    requirements: tuple[str, ...]
    render_gid: int
    video_gid: int
    user: str
    image_env: dict[str, str]

    @property
    def dockerfile_env(self) -> dict[str, str]:
        return self.image_env

    def build_args(self, facts) -> dict[str, str]:
        return {**_os_build_args(self), "VIDEO_GID": str(self.video_gid), "USER_NAME": self.user}

    def hash_inputs(self, cache) -> tuple[dict[str, object], dict[str, str]]:
        return {"requirements": self.requirements, "keep_git": self.keep_git}, _hash_common(self, cache)

    def prepare(self, facts, cache, folder: Path, *, temporary: bool, log_file: Path) -> context.PreparedContext:
        """The context: the three source trees (found or cloned), the wheelhouse."""
        trees = sources.resolve(list(self.sources), self.source_root, self.settings.paths.cache_dir / "sources", log_file)
        return context.prepare_base_context(self, cache, folder, trees, temporary=temporary, log_file=log_file)

    def labels(self, prepared, facts) -> dict[str, str]:
        labels = {"torchbake.python-provider": self.python_provider}
        for spec in self.sources:
            tree = prepared.sources.get(spec.name, {}) if prepared else {}
            labels[f"torchbake.source.{spec.name}.repo"] = spec.repo
            labels[f"torchbake.source.{spec.name}.tag"] = spec.tag
            labels[f"torchbake.source.{spec.name}.commit"] = tree.get("commit", PENDING)
        return labels

    def base_image_text(self) -> str:
        return _os_base_text(self)

    def input_rows(self) -> list[tuple[str, object]]:
        return [*_python_rows(self), *((spec.name, f"{spec.repo} at {spec.tag}") for spec in self.sources),
                ("source root", self.source_root or "(none: shallow clones into the source cache)"),
                *(("requirement", r) for r in self.requirements)]

    def context_lines(self) -> list[tuple[str, str]]:
        return [("wheelhouse/", f"the requirements above for cp{self.python_version.replace('.', '')}"),
                ("sources/", ", ".join(s.name for s in self.sources)
                 + (" (hard links, .git left out)" if not self.keep_git else " (hard links, with .git)")),
                _python_context(self)]


def _common_fields(settings: Settings, reuse_context: bool, no_cache: bool) -> dict:
    """Fields every plan has, from the settings and the run's flags."""
    return {"image": settings.image.reference, "profile": settings.accelerator.profile,
            "build_dir": settings.build.dir, "reuse_context": reuse_context, "verify": settings.build.verify,
            "no_cache": no_cache, "settings": settings}


def _python_source(settings: Settings) -> str:
    """The CPython tarball of provider "standalone" ("" for the OS Python)."""
    python = settings.python
    if python.provider != "standalone":
        return ""
    return python.standalone_url.replace("{python}", python.version)


def _missing_python_source(settings: Settings) -> list[Missing]:
    if settings.python.provider == "standalone" and not settings.python.standalone_url:
        return [Missing("python.standalone_url", 'python.provider = "standalone" needs a CPython tarball')]
    return []


def _check_common(settings: Settings, reuse_context: bool) -> list[Missing]:
    """Checks every plan makes; returns the values that are missing (the caller adds its own)."""
    if reuse_context and not settings.build.dir:
        raise ConfigurationError(
            "--no-prepare reuses a context prepared earlier, so it needs --build-dir (or DOCKER_BUILD_DIR)"
            " naming that folder."
        )
    return [] if settings.image.name else [Missing("image.name", "every build needs an image name")]


def plan_base(settings: Settings, *, reuse_context: bool = False, no_cache: bool = False) -> BasePlan:
    missing = _check_common(settings, reuse_context)
    python = settings.python
    src = settings.sources
    if not settings.base.sys:
        missing.append(Missing("base.sys", f"build-base starts FROM an OS image, and no OS image torchbake knows"
                                           f" ships Python {python.version}"))
    missing += [Missing(f"sources.{name}_repo", f"build-base clones {name}")
                for name in SOURCE_NAMES if not getattr(src, f"{name}_repo")]
    missing += _missing_python_source(settings)
    _raise_missing(missing)
    return _pinned(BasePlan(
        **_common_fields(settings, reuse_context, no_cache),
        base_image=settings.base.sys,
        dockerfile_template=_template(settings, "base"),
        python_version=python.version,
        python_provider=python.provider,
        python_source=_python_source(settings),
        sources=tuple(sources.SourceSpec(n, getattr(src, f"{n}_repo"), getattr(src, f"{n}_tag")) for n in SOURCE_NAMES),
        source_root=src.root,
        keep_git=src.keep_git,
        requirements=settings.base.requirements,
        render_gid=settings.image.render_gid,
        video_gid=settings.base.video_gid,
        user=settings.base.user,
        image_env=_build_env(settings),
    ))


@dataclass(frozen=True, kw_only=True)
class DevPlan(PlanCommon):
    """``invoke build`` without ``--release``: torch and the extension from source."""

    variant = "dev"
    base_image: str  # a torchbake base image
    dockerfile_template: Path
    python_version: str  # "" = the base image's
    toolkits: dict[str, str]
    extension: sources.SourceSpec | None
    extension_module: str
    extensions: tuple[str, ...]
    git_credential_file: str
    vision: sources.SourceSpec | None  # a vision clone from sources.vision_root, or None (the base's)
    vision_root: str
    build_env: dict[str, str]
    max_jobs: int  # 0 = from the engine
    ccache_size: str
    slim: bool
    runtime_base: str  # "" = the OS image of the base image
    runtime_paths: tuple[str, ...]
    runtime_env: dict[str, str]
    cuda_arch_list: str
    rocm_arch: str
    keep_git: bool

    target = "dev"  # the slim image is the "runtime" stage of the same Dockerfile

    @property
    def dockerfile_env(self) -> dict[str, str]:
        return self.build_env

    def image_python(self, facts) -> str:
        return facts.python_version if facts else ""  # the base image's

    def secrets(self) -> list[tuple[str, Path]]:
        return [("git_credentials", Path(self.git_credential_file))] if self.git_credential_file else []

    def build_args(self, facts) -> dict[str, str]:
        labels = facts.base_labels if facts else {}
        return {
            "BASE_IMAGE": self.base_image,
            "RUNTIME_BASE": self.runtime_base or labels.get("org.opencontainers.image.base.name", "<the base image's OS image>"),
            "RUNTIME_PATHS": " ".join(self.runtime_paths),
            "PYTHON_PROVIDER": labels.get("torchbake.python-provider", "os"),
            "RENDER_GID": str(self.settings.image.render_gid),
            "MAX_JOBS": str(self.max_jobs or (facts.max_jobs if facts else "<from the engine>")),
            "CCACHE_MAXSIZE": self.ccache_size,
            "EXTENSION_REPO": self.extension.repo if self.extension else "",
            "EXTENSION_REF": self.extension.tag if self.extension else "",
            "EXTENSION_COMMIT": (facts.extension_commit if facts else "<resolved with git ls-remote>") if self.extension else "",
        }

    def hash_inputs(self, cache) -> tuple[dict[str, object], dict[str, str]]:
        return ({"extensions": self.extensions, "keep_git": self.keep_git, "runtime_env": self.runtime_env},
                _hash_common(self, cache))

    def vision_tree(self) -> sources.SourceTree | None:
        """The vision clone of sources.vision_root (None: the base image's /home/vision)."""
        if self.vision is None:
            return None
        tree = sources.find_in_root(self.vision_root, self.vision)
        if tree is None:
            raise ConfigurationError(f"sources.vision_root {self.vision_root} has no vision/ clone.")
        return tree

    def prepare(self, facts, cache, folder: Path, *, temporary: bool, log_file: Path) -> context.PreparedContext:
        """The context: toolkits, the requirement-style extensions' wheels, a vision clone."""
        return context.prepare_dev_context(self, cache, folder, self.vision_tree(), facts.python_version,
                                           temporary=temporary, log_file=log_file)

    def labels(self, prepared, facts) -> dict[str, str]:
        labels = {}
        if self.extension:
            labels["torchbake.extension-repo"] = self.extension.repo
            labels["torchbake.extension-ref"] = self.extension.tag
            labels["torchbake.extension-commit"] = facts.extension_commit if facts else "<resolved with git ls-remote>"
        if facts:  # what the base image's sources were, carried forward
            labels.update({k: v for k, v in facts.base_labels.items()
                           if k.startswith("torchbake.source.") or k == "torchbake.python-provider"})
        if prepared and "vision" in prepared.sources:
            labels["torchbake.source.vision.commit"] = prepared.sources["vision"]["commit"]
        return {**labels, **_accelerator_labels(self)}

    def base_image_text(self) -> str:
        return self.base_image

    def input_rows(self) -> list[tuple[str, object]]:
        rows: list[tuple[str, object]] = [
            ("python", self.python_version or "the base image's"),
            ("MAX_JOBS", self.max_jobs or "from the engine's cores and memory (3 GiB a job)")]
        if self.extension:
            rows.append(("extension", f"{self.extension.repo} at {self.extension.tag}"))
        if self.git_credential_file:
            rows.append(("credentials", f"{self.git_credential_file} (BuildKit secret git_credentials)"))
        rows += [("then", f"{item} (--no-build-isolation)") for item in self.extensions]
        rows.append(("vision", f"{self.vision_root}/vision at {self.vision.tag}" if self.vision
                     else "the base image's /home/vision"))
        if self.slim:
            rows.append(("slim", f"also {self.image}-slim FROM {self.runtime_base or 'the base image’s OS image'},"
                                 f" with {' '.join(self.runtime_paths) or 'no extra folders'}"))
        return rows

    def context_lines(self) -> list[tuple[str, str]]:
        return [("wheelhouse/", "wheels of the requirement-style extensions"),
                ("extensions.txt", ", ".join(self.extensions) if self.extensions else "(none)"),
                ("sources/", "vision" if self.vision else "(empty)"), _toolkit_context(self)]


def plan_dev(settings: Settings, *, python_given: bool = False, reuse_context: bool = False,
             no_cache: bool = False) -> DevPlan:
    missing = _check_common(settings, reuse_context)
    if not settings.image.base:
        missing.append(Missing("image.base", "a dev image is built FROM a base image made by `invoke build-base`"))
    src = settings.sources
    if not reuse_context:
        missing += _missing_toolkits(settings)
        if settings.wheels.extension_module and not src.extension_repo:
            missing.append(Missing("sources.extension_repo", f"[wheels] extension_module ="
                                   f" {settings.wheels.extension_module!r} names an extension to build"))
    _raise_missing(missing)
    extension = sources.SourceSpec("extension", src.extension_repo, src.extension_tag) if src.extension_repo else None
    vision = sources.SourceSpec("vision", src.vision_repo, src.vision_tag) if src.vision_root else None
    return _pinned(DevPlan(
        **_common_fields(settings, reuse_context, no_cache),
        base_image=settings.image.base,
        dockerfile_template=_template(settings, "dev"),
        python_version=settings.python.version if python_given else "",
        toolkits=settings.toolkits.given(),
        extension=extension,
        extension_module=settings.wheels.extension_module,
        extensions=settings.dev.extensions,
        git_credential_file=str(Path(settings.dev.git_credential_file).expanduser().resolve()) if settings.dev.git_credential_file else "",
        vision=vision,
        vision_root=src.vision_root,
        build_env=_build_env(settings, dict(settings.dev.build_env)),
        max_jobs=settings.dev.max_jobs,
        ccache_size=settings.dev.ccache_size,
        slim=settings.dev.slim,
        runtime_base=settings.dev.runtime_base,
        runtime_paths=settings.dev.runtime_paths,
        runtime_env=_build_env(settings),
        cuda_arch_list=settings.accelerator.torch_cuda_arch_list,
        rocm_arch=settings.accelerator.pytorch_rocm_arch,
        keep_git=src.keep_git,
    ))


def default_max_jobs(cpus: int, memory_bytes: int) -> int:
    """Source builds die of OOM long before they run out of cores: one job per 3 GiB."""
    by_memory = memory_bytes // (3 * 1024**3)
    return max(1, min(cpus, by_memory))
