"""Release images: torch and the vendor extension from wheels, on a plain OS image (build.sh
--release). The wheels are resolved on the host into a wheelhouse for the image's Python; the
image is labelled with the versions the wheels carry."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import context
from ..config import Settings
from ..validation import is_location
from .common import (
    PENDING,
    Missing,
    PlanCommon,
    accelerator_labels,
    build_env_of,
    check_common,
    common_fields,
    hash_common,
    installer_context,
    missing_python_source,
    missing_toolkits,
    os_base_text,
    os_build_args,
    os_preflight,
    pinned,
    python_context,
    python_rows,
    python_source_of,
    raise_missing,
    template_of,
    toolkit_context,
)


@dataclass(frozen=True, kw_only=True)
class ReleasePlan(PlanCommon):
    variant = "release"
    INPUT_STEPS = (("Python environment", ("python", "installer")), ("torch", ("wheels.torch", "wheel_options")),
                   ("companions", ("wheels.torchvision", "wheels.torchaudio", "extra")), ("toolkits", ("toolkits.*",)),
                   ("extension", ("wheels.extension",)), ("image environment", ("env",)))

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
        return os_build_args(self)

    def hash_inputs(self, cache) -> tuple[dict[str, object], dict[str, str]]:
        """(material, input digests) of the input hash beyond what every variant has; a wheel
        given as a requirement is hashed as written."""
        digests = {f"wheels.{role}": cache.known_digest(source) if is_location(source) else source
                   for role, source in self.wheel_sources.items()}
        return {"extra": self.extra_requirements}, {**hash_common(self, cache), **digests}

    def preflight(self, client, *, writes: bool):
        """The OS FROM image (pulled or bootstrapped if missing) ships the requested Python."""
        return os_preflight(self, client, writes=writes)

    def prepare(self, facts, cache, folder: Path, *, temporary: bool, log_file: Path) -> context.PreparedContext:
        """The context: wheels resolved for the image's Python, toolkits, constraints."""
        return context.prepare_release_context(self, cache, folder, temporary=temporary, log_file=log_file)

    def labels(self, prepared, facts) -> dict[str, str]:
        return {"torchbake.torch-version": prepared.torch_version if prepared else PENDING,
                "torchbake.extension": prepared.extension if prepared else PENDING, **accelerator_labels(self)}

    def base_image_text(self) -> str:
        return os_base_text(self)

    def input_rows(self) -> list[tuple[str, object]]:
        return [*python_rows(self), *self.wheel_sources.items(), *(("extra", r) for r in self.extra_requirements)]

    def context_lines(self) -> list[tuple[str, str]]:
        cp = f"cp{self.python_version.replace('.', '')}"
        companions = [role for role in ("torchvision", "torchaudio") if role in self.wheel_sources]
        companions += self.extra_requirements
        return [("constraints-torch.txt", "torch's pin, active from the step after torch's"),
                ("constraints.txt", "pins of torch" + (" and the extension" if "extension" in self.wheel_sources else "")),
                ("wheelhouse/torch/", f"torch and its dependency closure for {cp}, each wheel pinned (its own layer)"),
                ("wheelhouse/companions/", "one folder (and layer) per companion, in order: "
                 + (", ".join(companions) or "(none)")),
                ("wheelhouse/extension/", "the extension and what it adds (the last layer)"
                 if "extension" in self.wheel_sources else "(none)"),
                installer_context(self), toolkit_context(self), python_context(self)]


def plan_release(settings: Settings, *, reuse_context: bool = False, no_cache: bool = False) -> ReleasePlan:
    image, python, wheels = settings.image, settings.python, settings.wheels
    missing = check_common(settings, reuse_context)
    if not image.base:
        missing.append(Missing("image.base", "a release image is built FROM a plain OS image, and no OS image"
                                             f" torchbake knows ships Python {python.version}"))
    if not reuse_context:  # with --no-prepare the inputs are those of the prepared context
        missing += missing_inputs(settings)
    missing += missing_python_source(settings)
    raise_missing(missing)
    template = template_of(settings, "release")
    sources = {"torch": wheels.torch, "extension": wheels.extension,
               "torchvision": wheels.torchvision, "torchaudio": wheels.torchaudio}
    return pinned(ReleasePlan(
        **common_fields(settings, reuse_context, no_cache),
        base_image=image.base,
        dockerfile_template=template,
        python_version=python.version,
        python_provider=python.provider,
        python_source=python_source_of(settings),
        wheel_sources={role: loc for role, loc in sources.items() if loc},
        extra_requirements=wheels.extra,
        toolkits=settings.toolkits.given(),
        image_env=build_env_of(settings),
        render_gid=image.render_gid,
        extension_module=wheels.extension_module,
        cuda_arch_list=settings.accelerator.torch_cuda_arch_list,
        rocm_arch=settings.accelerator.pytorch_rocm_arch,
    ))


def missing_inputs(settings: Settings) -> list[Missing]:
    wheels = settings.wheels
    missing = []
    if not wheels.torch:
        missing.append(Missing("wheels.torch", "a release image installs torch from a wheel, and the"
                                               f" {settings.accelerator.profile} profile has no [wheels] default_torch"))
    if wheels.extension_module and not wheels.extension:
        missing.append(Missing("wheels.extension",
                               f"[wheels] extension_module = {wheels.extension_module!r} names an extension to check"))
    return missing + missing_toolkits(settings)
