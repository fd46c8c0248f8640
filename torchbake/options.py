"""Every command-line flag of every task, declared once (the model: pip's ``cli/cmdoptions.py``).

A :class:`Flag` says what it is called (its parameter and the legacy spellings of the shell
scripts), its help, which configuration option it sets (and to what, for a switch), and the one
build variant it has an effect on. A task lists the flags it takes (:func:`flag_task`); its
parameters, ``invoke --help`` text, extra spellings and repeatable flags come from that list, its
configuration overrides from :func:`overrides`, and the error for a flag without effect on the
variant being built from :func:`check_effect`. The environment variable of an option and the
source ``show-config`` names come from its configuration key (``torchbake.config``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from invoke import task

from . import accelerators
from .cli import FlagTask
from .errors import ConfigurationError

VALUE = None  # the default of a flag that takes a value (none given: the option keeps its layers' value)
SWITCH = False  # the default of a flag that takes none


@dataclass(frozen=True)
class Flag:
    """One flag: ``--param-with-dashes`` (and ``aliases``), its help, and what it sets."""

    param: str  # the task's parameter
    help: str
    key: str = ""  # the configuration option it sets ("": the task reads the value itself)
    aliases: tuple[str, ...] = ()  # the legacy scripts' spellings: short flags, underscores
    default: Any = VALUE  # VALUE, SWITCH, or a value that also fixes the type (jobs=1)
    sets: Any = None  # what a SWITCH with a key sets when given (True, False, "release")
    repeatable: bool = False
    only: str = ""  # the one build variant it has an effect on ("dev" or "release")
    why: str = ""  # why it has none on the other (the error says it)
    positional: bool = False  # IMAGE, NAME: given without its flag

    @property
    def spelling(self) -> str:
        """How the user types it: ``--param-with-dashes``."""
        return f"--{self.param.replace('_', '-')}"


def flag_task(*flags: Flag, optional_positional: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Any]:
    """An invoke task of ``body(c, **given)`` that takes exactly ``flags``: its parameters (in
    this order), help, extra spellings and repeatable flags come from their declarations."""
    def decorate(body: Callable[..., Any]) -> Any:
        parameters = [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + [
            inspect.Parameter(f.param, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                              default=inspect.Parameter.empty if f.positional and f.param not in optional_positional
                              else f.default)
            for f in flags]
        body.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        return task(klass=FlagTask, help={f.param: f.help for f in flags},
                    names={f.param: list(f.aliases) for f in flags if f.aliases},
                    iterable=[f.param for f in flags if f.repeatable],
                    positional=[f.param for f in flags if f.positional],
                    optional_positional=optional_positional)(body)
    return decorate


def overrides(flags: tuple[Flag, ...], given: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration options the given flags set (the command line's layer); a flag left out
    sets nothing."""
    found: dict[str, Any] = {}
    for flag in flags:
        value = given.get(flag.param)
        if not flag.key or value is None or value is False or value == []:
            continue
        found[flag.key] = flag.sets if flag.default is SWITCH and flag.sets is not None else value
    return found


def check_effect(flags: tuple[Flag, ...], variant: str, given: Mapping[str, Any]) -> None:
    """A flag given that has no effect on a ``variant`` build is an error naming it and why."""
    for flag in flags:
        if flag.only and flag.only != variant and given.get(flag.param):
            other = "a dev image (leave out --release)" if variant == "release" else "a release image (add --release)"
            raise ConfigurationError(f"{flag.spelling} has no effect on a {variant} image: {flag.why}."
                                     f" Leave it out, or build {other}.")


def flag_setting(key: str) -> str:
    """The flag of ``invoke build`` (or else ``build-base``) that sets the option ``key``, for
    messages that tell the user what to pass ("" when no flag sets it)."""
    return next((flag.spelling for flag in (*BUILD_FLAGS, *BUILD_BASE_FLAGS)
                 if flag.key == key and flag.default is VALUE), "")


# --- flags many tasks take -------------------------------------------------------------------

# One flag per vendor toolkit the bundled accelerators declare (configs/accelerators.toml: its help
# and legacy spellings there); a team's own accelerator sets its toolkits in its config file.
TOOLKIT_URLS = tuple(Flag(toolkit.key, toolkit.help or f"URL or path of the {toolkit.key} toolkit tarball",
                           key=f"toolkits.{toolkit.key}", aliases=toolkit.aliases)
                      for accelerator in accelerators.bundled().values() for toolkit in accelerator.toolkits)


CONFIG = Flag("config", "TOML config file layered over configs/defaults.toml; repeatable, later files win", repeatable=True)
DOCKER = Flag("docker", "Docker client binary ([build] docker; default auto: the first that can build with BuildKit)",
              key="build.docker")
BUILDER = Flag("builder", "buildx builder that runs the builds, e.g. a remote BuildKit fleet ([build] builder; default:"
                          " buildx's current one, the engine's own)", key="build.builder")
DRY_RUN = Flag("dry_run", "Print what would be done (the plan, the exact commands) and touch nothing", aliases=("dry_run",),
               default=SWITCH)
NO_CACHE = Flag("no_cache", "Build every step again, ignoring the engine's layer cache (what build_all.sh always did)",
                default=SWITCH)
FORCE = Flag("force", "Build even when the image under NAME:TAG already has these inputs (the same input hash);"
                      " without it such a build prints 'unchanged' and does nothing", default=SWITCH)
NO_BOOTSTRAP = Flag("no_bootstrap", "Never make a missing debian:/ubuntu: FROM image with debootstrap (pull it, or fail)."
                                    " [bootstrap] auto", key="bootstrap.auto", default=SWITCH, sets=False)
REQUIRE_HASHES = Flag("require_hashes", "Fail unless every URL input carries a sha256 (#sha256= or [checksums])."
                                        " [downloads] require_hashes", key="downloads.require_hashes", default=SWITCH,
                      sets=True)
CA_BUNDLE = Flag("ca_bundle", "PEM file of CAs to trust (an intercepting proxy's) for host downloads, pip, git and the"
                              " build's network steps (a BuildKit secret). [downloads] ca_bundle", key="downloads.ca_bundle")
REGISTRY = Flag("registry", "Registry host and path, e.g. registry.example.com/ml: the image name is prefixed with it, the"
                            " registry is asked (without pulling) whether it already holds an image with these inputs,"
                            " and it carries the build cache. [registry] url", key="registry.url")
REQUIRE_REGISTRY = Flag("require_registry", "Fail (a matrix: the cell) when the registry cannot be asked, instead of"
                                            " building. [registry] require", key="registry.require", default=SWITCH,
                        sets=True)
NO_REGISTRY_CHECK = Flag("no_registry_check", "Do not ask the registry whether it holds the image already."
                                              " [registry] check", key="registry.check", default=SWITCH, sets=False)
PYTHON = Flag("python", "Python version of the image, X.Y (build.sh and build_base.sh -v/--python_version). [python]"
                        " version", key="python.version", aliases=("v", "python-version"))
BUILD_DIR = Flag("build_dir", "Prepare the build context in this folder and keep it (DOCKER_BUILD_DIR); default a"
                              " temporary folder", key="build.dir", aliases=("build_dir",))
NO_PREPARE = Flag("no_prepare", "Reuse the context already prepared in --build-dir (build.sh --no_prepare)",
                  aliases=("no_prepare",), default=SWITCH)
NO_VERIFY = Flag("no_verify", "Skip `verify` after the build", key="build.verify", aliases=("no_verify",), default=SWITCH,
                 sets=False)
KEEP_GIT = Flag("keep_git", "Keep the .git folders of the source trees in the image", key="sources.keep_git",
                default=SWITCH, sets=True, only="dev", why="only dev builds copy source trees")
CHECK_REPRODUCIBLE = Flag("check_reproducible", "Then build the same context again without any cache and compare: the"
                                                " same image digest, or exit 6 naming the files that differ (implies"
                                                " --force)", default=SWITCH)

# --- build ------------------------------------------------------------------------------------

BUILD_FLAGS = (
    Flag("name", "Image name (build.sh -n/--name). [image] name, default from [naming]: torchbake/pytorch-<profile>",
         key="image.name", aliases=("n", "i")),
    Flag("tag", "Image tag (build.sh -t/--tag). [image] tag, default from [naming] (dev-py3.11; release:"
                " 2.13.0-py3.11), or latest with --name", key="image.tag", aliases=("t",)),
    Flag("base_img", "Image to build FROM (build.sh -b/--base_img). [image] base, default: release the OS image of the"
                     " Python (debian:bookworm for 3.11, pulled or made with debootstrap); dev the image build-base"
                     " names", key="image.base", aliases=("b", "base_img")),
    Flag("docker_file", "Dockerfile template (build.sh -f/--docker_file). Default docker/ubuntu/dockerfile.<variant>",
         key="image.docker_file", aliases=("f", "docker_file")),
    PYTHON,
    *TOOLKIT_URLS,
    Flag("torch_whl_url", "torch wheel: URL, path or requirement such as torch==2.13.0; append #sha256=HEX to pin"
                          " (build.sh --torch_whl_url)", key="wheels.torch", aliases=("torch_whl_url",),
         only="release", why="a dev image builds torch from source"),
    Flag("torch_musa_whl_url", "Vendor extension wheel: URL, path or requirement (build.sh --torch_musa_whl_url)",
         key="wheels.extension", aliases=("torch_musa_whl_url",), only="release",
         why="a dev image builds the extension from source"),
    Flag("release", "Build a release image from wheels instead of a dev image from source (build.sh -r/--release)",
         key="build.variant", aliases=("r",), default=SWITCH, sets="release"),
    Flag("torch_musa_tag", "Git ref of the vendor extension to build (dev; build.sh --torch_musa_tag). [sources]"
                           " extension_tag", key="sources.extension_tag", only="dev",
         why="the vendor extension is cloned at a tag only in dev builds"),
    Flag("git_credential_file", "git credentials (store format) for private repos, given to the build only as a"
                                " BuildKit secret (dev; build.sh -c)", key="dev.git_credential_file", aliases=("c",),
         only="dev", why="only dev builds clone private sources"),
    KEEP_GIT,
    Flag("slim", "Dev: also build NAME:TAG-slim, the runtime stage without compilers and sources, and report both"
                 " sizes", key="dev.slim", default=SWITCH, sets=True, only="dev",
         why="the slim image is the runtime stage of a dev build"),
    BUILD_DIR, NO_PREPARE, CONFIG, DRY_RUN, NO_VERIFY, NO_CACHE, DOCKER, BUILDER, NO_BOOTSTRAP, REQUIRE_HASHES,
    CA_BUNDLE, FORCE, REGISTRY, REQUIRE_REGISTRY, NO_REGISTRY_CHECK, CHECK_REPRODUCIBLE,
)

# --- build-base -------------------------------------------------------------------------------

BUILD_BASE_FLAGS = (
    Flag("name", "Image name of the base image (build_base.sh -n/--name). [image] name, default from [naming]:"
                 " torchbake/pytorch-<profile>", key="image.name", aliases=("n",)),
    Flag("tag", "Image tag (build_base.sh -t/--tag). [image] tag, default from [naming]: base-py<python>, or latest"
                " with --name", key="image.tag", aliases=("t",)),
    Flag("sys", "OS image to start FROM, e.g. debian:trixie (build_base.sh -s/--sys). [base] sys, default the OS image"
                " of the Python (debian:bookworm for 3.11); a missing debian:/ubuntu: image is pulled or made with"
                " debootstrap", key="base.sys", aliases=("s",)),
    PYTHON,
    Flag("pytorch_tag", "PyTorch git tag. [sources] pytorch_tag, default v2.0.0", key="sources.pytorch_tag"),
    Flag("vision_tag", "torchvision git tag. [sources] vision_tag, default v0.15.2", key="sources.vision_tag"),
    Flag("audio_tag", "torchaudio git tag. [sources] audio_tag, default v2.0.1", key="sources.audio_tag"),
    Flag("source_root", "Folder holding pytorch/, vision/, audio/ clones to use if at the tags (PYTORCH_REPO_ROOT_PATH)",
         key="sources.root"),
    KEEP_GIT, BUILD_DIR, NO_PREPARE, CONFIG, DRY_RUN, NO_VERIFY, NO_CACHE, DOCKER, BUILDER, NO_BOOTSTRAP,
    REQUIRE_HASHES, CA_BUNDLE, FORCE, REGISTRY, REQUIRE_REGISTRY, NO_REGISTRY_CHECK,
)

# --- build-all --------------------------------------------------------------------------------

BUILD_ALL_FLAGS = (
    Flag("config", "TOML file(s): the [matrix] table (default configs/nightly.toml) and options shared by every cell"
                   " (e.g. vendor URLs); repeatable", repeatable=True),
    Flag("only", "Build only cells whose id matches this glob (e.g. 'cuda-*-py310'); repeatable; their dependencies"
                 " come along", repeatable=True),
    Flag("skip", "Leave out cells whose id matches this glob; repeatable", repeatable=True),
    Flag("jobs", "Cells built at once (independent cells only), default 1", default=1),
    Flag("keep_going", "After a failure, still build the cells that do not depend on it (the default)", default=SWITCH),
    Flag("fail_fast", "Stop at the first failed cell", default=SWITCH),
    Flag("push", "Push each verified image to its registry and record its digest", default=SWITCH),
    Flag("force", "Build every cell even if its image already has the same input hash", default=SWITCH),
    Flag("no_cache", "With --force: build every step again, ignoring the engine's layer cache (build_all.sh's way)",
         default=SWITCH),
    Flag("report", "Write a JSON report to this file"),
    Flag("junit", "Write a JUnit XML report to this file"),
    Flag("plan", "Print the ordered plan (build, skip, re-tag, which inputs changed and from which step, and why) and"
                 " touch nothing", default=SWITCH),
    Flag("shard", "Build only slice I of N of the plan (I/N, e.g. 1/2); dependent cells stay together"),
    Flag("emit_matrix", "Print the matrix for a CI fan-out and exit: 'github' (JSON with one entry per shard)"),
    DOCKER, BUILDER, REQUIRE_HASHES, CA_BUNDLE, REQUIRE_REGISTRY, NO_REGISTRY_CHECK,
)

# --- run-container, containers, stop-container ------------------------------------------------

RUN_CONTAINER_FLAGS = (
    Flag("image", "Image to run, NAME:TAG or id (its torchbake.profile label picks the device profile); default the"
                  " image of this host's most recent successful build", positional=True),
    Flag("name", "Container name; reused if it exists (started if stopped). [run] name, default <repository>-<tag>",
         key="run.name"),
    Flag("shm_size", "Size of /dev/shm, e.g. 80G; under 1G warns (DataLoader workers need it). [run] shm_size, default"
                     " auto = half the host's memory", key="run.shm_size", aliases=("shm_size",)),
    Flag("privileged", "Give the container every host device and capability. [run] privileged", key="run.privileged",
         default=SWITCH, sets=True),
    Flag("env", "KEY=VALUE for the container and this shell; repeatable, adds to [run] env", repeatable=True),
    Flag("mount", "Bind mount HOST:CONTAINER or HOST:CONTAINER:ro (HOST must exist); repeatable, adds to [run] mounts",
         repeatable=True),
    Flag("workdir", "Working directory in the container. [run] workdir, default the image's", key="run.workdir"),
    Flag("device_profile", " | ".join(f"{a.name} ({a.description})" for a in accelerators.bundled().values())
         + ", or an accelerator of your --config; default the image's profile", key="run.device_profile",
         aliases=("device_profile",)),
    Flag("rm", "Run a throwaway container, removed when the shell or command ends", default=SWITCH),
    Flag("command", "Run this with SHELL -c instead of an interactive shell; its exit status becomes this task's"),
    Flag("replace", "Remove a container of this name that torchbake created (other image or settings) and create it"
                    " again", default=SWITCH),
    DRY_RUN, CONFIG, DOCKER,
)
CONTAINERS_FLAGS = (DOCKER, CONFIG)
STOP_CONTAINER_FLAGS = (
    Flag("name", "Container to stop (one torchbake created; `invoke containers` lists them)", positional=True),
    Flag("rm", "Also remove it", default=SWITCH),
    Flag("time", "Seconds to wait for it to stop before it is killed (default 10)", default=10),
    DOCKER, CONFIG,
)

# --- gc ---------------------------------------------------------------------------------------

GC_FLAGS = (
    Flag("dry_run", "List exactly what would be removed, and why; remove nothing", default=SWITCH),
    Flag("keep", "Replaced images (a newer build took their NAME:TAG) kept per NAME:TAG for a rollback; the current"
                 " image of a tag always stays. [gc] keep, default 3", key="gc.keep"),
    Flag("older_than", "Cache entries no build used, and logs and manifests, older than this go, e.g. 30d, 12h."
                       " [gc] older_than, default 30d", key="gc.older_than"),
    Flag("max_cache", "Budget of the cache folder, e.g. 50G: least recently used entries go beyond it. [gc] max_cache",
         key="gc.max_cache"),
    Flag("max_build_cache", "Budget of the engine's build cache, e.g. 20G (docker builder prune --keep-storage)."
                            " [gc] max_build_cache", key="gc.max_build_cache"),
    DOCKER, CONFIG,
)

# --- verify, show-build, show-config ----------------------------------------------------------

VERIFY_CHECKS = (  # what verify expects of the image; not with --reproducible
    Flag("python", "Expected Python X.Y (default: the image's torchbake.python label)"),
    Flag("torch_version", "Expected torch version (default: the torchbake.torch-version label)"),
    Flag("extension_module", "Extension module that must import (default: the torchbake.extension-module label)"),
    Flag("cuda_arch_list", "CUDA archs torch must be built for, e.g. 8.0;9.0 (default: the torchbake.cuda-arch-list"
                           " label)"),
)
VERIFY_FLAGS = (
    Flag("image", "Image to verify, NAME:TAG or id", positional=True),
    *VERIFY_CHECKS,
    Flag("reproducible", "Instead: build the image again without any cache from the configuration this host recorded"
                         " when it built it, and compare (exit 6 naming the files that differ); --config adds files"
                         " over that configuration (e.g. credentials, which records keep masked)", default=SWITCH),
    DOCKER, CONFIG,
)
SHOW_BUILD_FLAGS = (Flag("image", "Image to describe, NAME:TAG or id", positional=True), DOCKER, CONFIG)
SHOW_CONFIG_FLAGS = (
    CONFIG,
    Flag("variant", "Show the values derived for this kind of build: base (build-base), dev or release (build"
                    " --release); default [build] variant"),
    Flag("format", "table (default: each value and where it came from) or toml (a file --config reads back to the same"
                   " settings)", default="table"),
)

# --- bootstrap-os -----------------------------------------------------------------------------

BOOTSTRAP_OS_FLAGS = (
    Flag("suite", "Debian/Ubuntu suite to bootstrap, e.g. bookworm or jammy (default bookworm)", default="bookworm"),
    Flag("name", "Image to create (default torchbake/debian:<suite>)"),
    Flag("mirror", "Package mirror URL. [bootstrap] mirror, default debootstrap's own for the suite",
         key="bootstrap.mirror"),
    Flag("variant", "debootstrap variant: minbase or buildd. [bootstrap] variant, default minbase",
         key="bootstrap.variant"),
    Flag("force", "Make the image again even if it exists", default=SWITCH),
    DOCKER, CONFIG,
    Flag("dry_run", "Print the commands and touch nothing", default=SWITCH),
)
