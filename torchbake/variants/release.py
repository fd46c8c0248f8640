"""Release images: torch and the vendor extension from wheels, on a plain OS image (build.sh
--release). The wheels are resolved on the host into a wheelhouse for the image's Python; the
image is labelled with the versions the wheels carry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from torchbake import families
from torchbake.configuration.settings import Settings
from torchbake.configuration.validation import is_location, project_name
from torchbake.core import output
from torchbake.core.errors import DownloadError
from torchbake.inputs import context, wheelhouse
from torchbake.inputs.context import Staging
from torchbake.variants.common import (
    PENDING,
    Missing,
    PlanCommon,
    Variant,
    accelerator_labels,
    build_env_of,
    check_common,
    common_fields,
    installer_context,
    missing_python_source,
    missing_toolkits,
    os_base_note,
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
    toolkit_material,
    toolkit_scripts,
    toolkits_of,
    wheel_machine,
)
from torchbake.variants.locking import Lockable, lock_fields


@dataclass(frozen=True, kw_only=True)
class ReleasePlan(Lockable, PlanCommon):
    variant = "release"  # the image kind (labels, matrix cells, show-config --variant)
    wheels_unpacked_natively = True
    INPUT_STEPS = (("Python environment", ("python.*",)),
                   ("torch", ("wheels.torch", "wheels.platforms", "wheels.index_url", "wheels.extra_index_urls",
                              "wheels.find_links")),
                   ("companions", ("wheels.torchvision", "wheels.torchaudio", "wheels.extra")), ("toolkits", ("toolkits.*",)),
                   ("extension", ("wheels.extension",)), ("image environment", ("env", "image.env", "accelerator.*")))

    base_image: str
    dockerfile_template: Path
    python_version: str
    python_provider: str
    python_source: str  # standalone tarball location ("" for provider os)
    wheel_sources: dict[str, str]  # role (torch, extension, torchvision, torchaudio) → location/requirement
    extra_requirements: tuple[str, ...]
    toolkit_scripts: dict[str, str]  # toolkit key → the install script its tarball carries
    toolkits: dict[str, str]  # toolkit key → location, install order
    image_env: dict[str, str]
    render_gid: int
    extension_module: str
    arch_lists: Mapping[str, str]  # each family's arch list label → the list (torchbake.families)

    def hash_inputs(self) -> dict[str, object]:
        return toolkit_material(self.toolkit_scripts)

    def lock_requirements(self) -> list[str]:
        """What a lock of this image resolves: the configured wheels and extra requirements, as given."""
        return [*self.wheel_sources.values(), *self.extra_requirements]

    @property
    def dockerfile_env(self) -> dict[str, str]:
        return self.image_env

    def build_args(self, facts) -> dict[str, str]:
        """The OS image's arguments, and what the wheel stages unpack for: the image's machine and
        its wheel platform tags (the wheels are unpacked on the machine that builds)."""
        return {**os_build_args(self), "WHEEL_MACHINE": wheel_machine(self),
                "WHEEL_PLATFORMS": " ".join(wheelhouse.compatible_platforms(self.wheel_options.platforms)),
                **self.deb_pin_args()}

    def preflight(self, client, *, writes: bool):
        """The OS FROM image (pulled or bootstrapped if missing) ships the requested Python."""
        return os_preflight(self, client, writes=writes)

    def prepare(self, facts, cache, folder: Path, *, temporary: bool, log_file: Path) -> context.PreparedContext:
        """The context: wheels resolved for the image's Python, toolkits, constraints."""
        stage = Staging(folder, temporary, self.passed_secrets())
        options = self.wheel_options

        def resolve() -> dict[str, str]:  # without a lock: the inputs given by URL fetched (or found) and checked first
            wheel_artifacts = {role: cache.fetch(loc, key=f"wheels.{role}")
                               for role, loc in self.wheel_sources.items() if is_location(loc)}
            for role, artifact in wheel_artifacts.items():
                wheelhouse.check_wheel(artifact.path, artifact.location, f"wheels.{role}")
            requirements = [str(wheel_artifacts[r].path) if r in wheel_artifacts else loc
                            for r, loc in self.wheel_sources.items()] + list(self.extra_requirements)
            return stage.wheels(requirements, self.python_version, options, cache.root, log_file)

        versions = self.staged_wheels(stage, cache, resolve)
        toolkit_artifacts = {key: cache.fetch(loc, key=f"toolkits.{key}") for key, loc in self.toolkits.items()}
        python_artifact = cache.fetch(self.python_source, key="python.standalone_url") if self.python_source else None
        pins: dict[str, str] = {}
        extension = ""
        for role, location in self.wheel_sources.items():
            name = project_name(location)
            if name not in versions:
                raise DownloadError(f"wheels.{role} = {location!r} did not resolve to a {name} wheel.")
            pins[name] = versions[name]
            if role == "extension":
                extension = f"{name}=={versions[name]}"
        resolved = wheelhouse.wheels_in(stage.path / "wheelhouse")
        torch = wheelhouse.dependency_closure(resolved, ["torch"], self.python_version, options.platforms)
        companions = _companion_groups(self, resolved, torch)
        below = torch.union(*companions.values())
        added = {w.name for w in resolved} - below  # the extension and what it adds (installed last)
        stage.wheel_groups({"torch": torch, **{f"companions/{folder}": names for folder, names in companions.items()},
                            "extension": added})
        for name, file_pins in (("constraints-torch.txt", {"torch": pins["torch"]}), ("constraints.txt", pins)):
            (stage.path / name).write_text(
                "# Written by torchbake: the torch this image was built with stays installed.\n"
                "# Active for every pip and uv install: PIP_CONSTRAINT, UV_CONSTRAINT and their build variants.\n"
                + "".join(f"{project}=={version}\n" for project, version in file_pins.items())
            )
        stage.installer(self.python_options, self.python_version, options, cache.root, log_file,
                        machine=wheel_machine(self))
        if not self.python_options.keep_uv:  # no step for it (an empty layer): said here instead
            output.channel().say("torchbake: uv is not kept in the image ([python] keep_uv = false)")
        stage.toolkits(toolkit_artifacts, self.toolkit_scripts)
        stage.python(python_artifact)
        return stage.finish(self.dockerfile_template, self.image_env, self.profile, [],
                            companions=[folder for folder, names in companions.items() if names],
                            steps={"extension"} if added else set(), torch_version=pins["torch"], pins=pins, extension=extension,
                            image_steps=self.image_steps)

    def labels(self, prepared, facts) -> dict[str, str]:
        return {"torchbake.torch-version": prepared.torch_version if prepared else PENDING,
                "torchbake.extension": prepared.extension if prepared else PENDING, **accelerator_labels(self),
                **self.lock_label()}

    def base_image_text(self) -> str:
        return os_base_text(self)

    def base_note(self, client) -> str:
        return os_base_note(self, client)

    def input_rows(self) -> list[tuple[str, object]]:
        return [*python_rows(self), *self.wheel_sources.items(), *(("extra", r) for r in self.extra_requirements),
                ("closure", self.lock_state)]

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


def plan(settings: Settings, *, python_given: bool = False, reuse_context: bool = False,
         no_cache: bool = False) -> ReleasePlan:
    """The release plan (``python_given`` is the dev variant's concern: an OS image's Python is always
    the one asked for)."""
    image, python, wheels = settings.image, settings.python, settings.wheels
    missing = check_common(settings, reuse_context)
    if not image.base:
        missing.append(Missing("image.base", "a release image is built FROM a plain OS image, and no OS image"
                                             f" torchbake knows ships Python {python.version}"))
    if not reuse_context:  # with --no-prepare the inputs are those of the prepared context
        missing += missing_inputs(settings)
    missing += missing_python_source(settings)
    raise_missing(missing, settings)
    template = template_of(settings, "release")
    sources = {"torch": wheels.torch, "extension": wheels.extension,
               "torchvision": wheels.torchvision, "torchaudio": wheels.torchaudio}
    requirements = [*(loc for loc in sources.values() if loc), *wheels.extra]
    return pinned(ReleasePlan(
        **common_fields(settings, reuse_context, no_cache),
        base_image=image.base,
        dockerfile_template=template,
        python_version=python.version,
        python_provider=python.provider,
        python_source=python_source_of(settings),
        wheel_sources={role: loc for role, loc in sources.items() if loc},
        extra_requirements=wheels.extra,
        toolkits=toolkits_of(settings),
        toolkit_scripts=toolkit_scripts(settings),
        image_env=build_env_of(settings),
        render_gid=image.render_gid,
        extension_module=wheels.extension_module,
        arch_lists=families.arch_labels(settings.accelerator),
        **lock_fields(settings, VARIANT.lock_command, requirements, reuse_context),
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


def _companion_groups(plan: ReleasePlan, resolved: list[wheelhouse.Wheel], below: set[str]) -> dict[str, set[str]]:
    """One wheel folder per companion (torchvision, torchaudio, then [wheels] extra, in order):
    what it adds beyond torch and the companions before it. A companion added at the end so adds
    one layer and changes none of the others."""
    options = plan.wheel_options
    roots = [plan.wheel_sources[role] for role in ("torchvision", "torchaudio") if role in plan.wheel_sources]
    groups: dict[str, set[str]] = {}
    taken = set(below)
    for index, root in enumerate([*roots, *plan.extra_requirements], 1):
        name = project_name(root)
        names = wheelhouse.dependency_closure(resolved, [name], plan.python_version, options.platforms) - taken
        groups[f"{index:02d}-{name}"] = names
        taken |= names
    return groups


VARIANT = Variant(name=ReleasePlan.variant, build_variant="release", built_from=None,
                  from_option="image.base", verifies=frozenset({"torch"}),
                  lock_command="invoke lock", plan=plan)
