"""Base images for dev builds (build_base.sh): compilers, a Python environment with PyTorch's
build requirements, and the PyTorch, torchvision and torchaudio source trees at pinned tags."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torchbake.configuration.settings import Settings
from torchbake.configuration.validation import project_name
from torchbake.inputs import build_tools, context, sources
from torchbake.inputs.context import Staging
from torchbake.inputs.locks import host_uv, index_environment, kept_uv, uv_platform
from torchbake.variants.common import (
    PENDING,
    SUPPORTED_OS,
    Missing,
    PlanCommon,
    Variant,
    build_env_of,
    check_common,
    common_fields,
    installer_context,
    missing_python_source,
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
)
from torchbake.variants.locking import Lockable, lock_fields

SOURCE_NAMES = ("pytorch", "vision", "audio")




@dataclass(frozen=True, kw_only=True)
class BasePlan(Lockable, PlanCommon):
    """``invoke build-base``: OS + build tools + Python + the three source trees."""

    variant = "base"  # the image kind (labels, matrix cells, show-config --variant)
    from_flag = "--sys"
    INPUT_STEPS = (("Python environment", ("python.*",)), ("requirements", ("base.requirements", "wheels.*")),
                   ("sources", ("sources.*",)), ("image environment", ("env", "image.env", "accelerator.*")))
    base_image: str  # the OS image (--sys)
    dockerfile_template: Path
    python_version: str
    python_provider: str
    python_source: str
    sources: tuple[sources.SourceSpec, ...]
    source_root: str
    keep_git: bool
    requirements: tuple[str, ...]  # PyTorch's build requirements: dated (torchbake.inputs.build_tools)
    requirements_date: str  # "tag", "latest" or YYYY-MM-DD
    tools: tuple[str, ...]  # the developers' tools: current
    render_gid: int
    video_gid: int
    user: str
    image_env: dict[str, str]

    @property
    def dockerfile_env(self) -> dict[str, str]:
        return self.image_env

    def lock_requirements(self) -> list[str]:
        return [*self.requirements, *self.tools]

    def lock_as_of(self) -> str:
        return self.requirements_date

    def lock_day(self) -> tuple[str, list[str]]:
        """`invoke lock --base`: the build requirements as of their day (the PyTorch tree on this host
        tells it), the developers' tools current."""
        trees = []
        if self.requirements_date == "tag":
            spec, cache = self.pytorch_spec, self.path_options.cache_dir / "sources"
            found, missing = sources.locate([spec], self.source_root, cache)  # the tree the build would take
            trees = found or sources.resolve([spec], self.source_root, cache, missing, None)  # cloned as the build would
        day = self.requirements_day(trees)[0]
        return day, [project_name(tool) for tool in self.tools] if day else []

    @property
    def pytorch_spec(self) -> sources.SourceSpec:
        return next(s for s in self.sources if s.name == "pytorch")

    def requirements_day(self, trees) -> tuple[str, str]:
        """(the day [base] requirements are resolved as of, what it is: "pytorch v2.0.0's commit"); ("", …) latest."""
        if self.requirements_date == "latest":
            return "", "latest"
        if self.requirements_date != "tag":
            return self.requirements_date, "[base] requirements_date"
        tree = next(t for t in trees if t.spec.name == "pytorch")
        return build_tools.commit_day(tree.path, tree.commit), f"pytorch {tree.spec.tag}'s commit"

    def dated_requirements(self, trees, cache_root: Path, log_file: Path | None, *, uv: Path | None = None,
                           remember: bool = True):
        """[base] requirements as of their day (:mod:`torchbake.inputs.build_tools`), by ``uv`` (by
        default the one [python] uv pins, fetched into the cache)."""
        day, _ = self.requirements_day(trees)
        uv = uv or host_uv(self.python_options, self.wheel_options, self.python_version, cache_root, log_file)
        return build_tools.resolve(list(self.requirements), day, self.python_version,
                                   uv_platform(self.wheel_options.platforms), uv, index_environment(self.wheel_options),
                                   cache_root, log_file=log_file, remember=remember)

    def os_step_args(self) -> list[str]:
        return [self.python_provider, "0", "dev", "0", ""]  # its OS step installs the compilers too

    def build_args(self, facts) -> dict[str, str]:
        return {**os_build_args(self), "VIDEO_GID": str(self.video_gid), "USER_NAME": self.user,
                **self.deb_pin_args()}

    def source_records(self, facts) -> dict[str, dict[str, str]]:
        return {spec.name: {"repo": spec.repo, "tag": spec.tag, "commit": facts.source_commits.get(spec.name, "")}
                for spec in self.sources}

    def preflight(self, client, *, writes: bool):
        """The source trees first (found, or their remotes asked: no slow work), then the OS FROM
        image (made if missing), which must be Debian or Ubuntu with the requested Python."""
        found, missing = sources.locate(list(self.sources), self.source_root, self.path_options.cache_dir / "sources")
        commits = {**{t.spec.name: t.commit for t in found}, **missing}
        return os_preflight(self, client, writes=writes, source_commits=commits, supported=SUPPORTED_OS)

    def prepare(self, facts, cache, folder: Path, *, temporary: bool, log_file: Path) -> context.PreparedContext:
        """The context: the three source trees (found or cloned), the wheelhouse."""
        trees = sources.resolve(list(self.sources), self.source_root, self.path_options.cache_dir / "sources",
                                facts.source_commits, log_file)
        stage = Staging(folder, temporary, self.passed_secrets())
        python_artifact = cache.fetch(self.python_source, key="python.standalone_url") if self.python_source else None
        dated = self.dated_requirements(trees, cache.root, log_file) if self.lock is None else None
        versions = self.staged_wheels(stage, cache, lambda: stage.wheels(
            [*dated.requirements(), *self.tools], self.python_version, self.wheel_options, cache.root, log_file))
        stage.requirements_file(sorted(versions), versions)  # every wheel pinned: the install resolves nothing
        stage.installer(self.python_options, self.python_version, self.wheel_options, cache.root, log_file)
        stage.python(python_artifact)
        recorded = stage.sources(trees, self.keep_git)
        ignore = [] if self.keep_git else ["**/.git"]
        return stage.finish(self.dockerfile_template, self.image_env, self.profile, ignore + ["**/__pycache__"],
                            sources=recorded, torch_version=versions.get("torch", ""), image_steps=self.image_steps,
                            build_tools=dated.to_record() if dated else {})

    def labels(self, prepared, facts) -> dict[str, str]:
        labels = {"torchbake.python-provider": self.python_provider}
        for spec in self.sources:
            tree = prepared.sources.get(spec.name, {}) if prepared else {}
            labels[f"torchbake.source.{spec.name}.repo"] = spec.repo
            labels[f"torchbake.source.{spec.name}.tag"] = spec.tag
            labels[f"torchbake.source.{spec.name}.commit"] = tree.get("commit", PENDING)
        return {**labels, **self.lock_label()}

    def base_image_text(self) -> str:
        return os_base_text(self)

    def base_note(self, client) -> str:
        return os_base_note(self, client)

    def dry_run_notes(self) -> list[str]:
        """The build requirements as the build would resolve them, where the PyTorch tree is on this
        host already (its commit's date) and uv is kept in the cache: nothing is cloned, fetched or written."""
        if self.lock is not None or not self.requirements:
            return []
        spec, cache_root = self.pytorch_spec, self.path_options.cache_dir
        tree = sources.find_in_root(self.source_root, spec) or sources.cached_tree(cache_root / "sources", spec)
        if self.requirements_date == "tag" and tree is None:
            return [f"Build requirements: as of the day of pytorch {spec.tag}'s commit, resolved once the build has"
                    " its tree (it clones it)"]
        if (uv := kept_uv(cache_root)) is None:
            return [f"Build requirements: as of {self.requirements_date}, resolved by uv when the build runs"]
        trees = [tree] if tree else []
        dated = self.dated_requirements(trees, cache_root, None, uv=uv, remember=False)
        return [f"Build requirements: {dated.describe(self.requirements_day(trees)[1])}"]

    def input_rows(self) -> list[tuple[str, object]]:
        return [*python_rows(self), *((spec.name, f"{spec.repo} at {spec.tag}") for spec in self.sources),
                ("source root", self.source_root or "(none: shallow clones into the source cache)"),
                *(("requirement", r) for r in self.requirements),
                ("  as of", {"tag": "the date of the pytorch tag's commit (the tools of its day)",
                             "latest": "now (latest)"}.get(self.requirements_date, self.requirements_date)),
                *(("tool", r) for r in self.tools), ("closure", self.lock_state)]

    def context_lines(self) -> list[tuple[str, str]]:
        return [("wheelhouse/", f"the requirements above for cp{self.python_version.replace('.', '')}, every wheel pinned"),
                installer_context(self),
                ("sources/", ", ".join(s.name for s in self.sources)
                 + (" (hard links, .git left out)" if not self.keep_git else " (hard links, with .git)")),
                python_context(self)]


def plan(settings: Settings, *, python_given: bool = False, reuse_context: bool = False,
         no_cache: bool = False) -> BasePlan:
    """The base plan (``python_given`` is the dev variant's concern: an OS image's Python is always
    the one asked for)."""
    missing = check_common(settings, reuse_context)
    python = settings.python
    src = settings.sources
    if not settings.base.sys:
        missing.append(Missing("base.sys", f"build-base starts FROM an OS image, and no OS image torchbake knows"
                                           f" ships Python {python.version}"))
    missing += [Missing(f"sources.{name}_repo", f"build-base clones {name}")
                for name in SOURCE_NAMES if not getattr(src, f"{name}_repo")]
    missing += missing_python_source(settings)
    raise_missing(missing, settings)
    return pinned(BasePlan(
        **common_fields(settings, reuse_context, no_cache),
        base_image=settings.base.sys,
        dockerfile_template=template_of(settings, "base"),
        python_version=python.version,
        python_provider=python.provider,
        python_source=python_source_of(settings),
        sources=tuple(sources.SourceSpec(n, getattr(src, f"{n}_repo"), getattr(src, f"{n}_tag")) for n in SOURCE_NAMES),
        source_root=src.root,
        keep_git=src.keep_git,
        requirements=settings.base.requirements,
        requirements_date=settings.base.requirements_date,
        tools=settings.base.tools,
        render_gid=settings.image.render_gid,
        video_gid=settings.base.video_gid,
        user=settings.base.user,
        image_env=build_env_of(settings),
        **lock_fields(settings, VARIANT.lock_command, [*settings.base.requirements, *settings.base.tools], reuse_context,
                      as_of=settings.base.requirements_date),
    ))


VARIANT = Variant(name=BasePlan.variant, build_variant=None, built_from=None,
                  from_option="base.sys", verifies=frozenset({"sources"}),
                  lock_command="invoke lock --base", plan=plan)
