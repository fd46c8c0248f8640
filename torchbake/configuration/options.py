"""Every command-line flag of every task (the model: pip's ``cli/cmdoptions.py``).

A flag that sets a configuration option is declared with the option (``torchbake.configuration.settings``:
its name, legacy spellings, help, what a switch sets and the one build variant it has an effect
on); :func:`option_flags` makes its :class:`Flag`. The flags that set no option (``--config``,
``--dry-run``, ``--force`` …) are declared here. A task lists the flags it takes
(``torchbake.tasks.cli.flag_task``); its parameters, ``invoke --help`` text, extra spellings and repeatable flags
come from that list, its configuration overrides from :func:`overrides`, and the error for a flag
without effect on the variant being built from :func:`check_effect`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchbake.configuration import accelerators, settings, validation
from torchbake.core.data import bundled_configs
from torchbake.core.errors import ConfigurationError
from torchbake.families import FAMILIES

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


@functools.cache
def legacy_names() -> dict[str, str]:
    """A flag's name → the name the bundled accelerators' legacy scripts gave it (``flag_names``):
    the flag is shown by that name, and its own stays a spelling of it."""
    return {flag: legacy for accelerator in accelerators.bundled().values()
            for flag, legacy in accelerator.flag_names.items()}


def option_flag(key: str) -> Flag:
    """The flag declared with the option ``key`` (``torchbake.configuration.settings``)."""
    declared = settings.declaration(key)
    if not declared.flag:
        raise ValueError(f"internal: option {key} declares no flag")
    param, aliases = declared.flag, declared.aliases
    if legacy := legacy_names().get(param):
        param, aliases = legacy, (legacy, *aliases, param.replace("_", "-"))
    section, name = key.split(".", 1)
    help_text = f"{declared.flag_help or declared.help}. [{section}] {name}"
    return Flag(param, help_text, key=key, aliases=aliases, default=SWITCH if declared.switch else VALUE,
                sets=declared.sets, only=declared.only, why=declared.why,
                repeatable=isinstance(declared.default, list))  # a list option's flag: given once per value


def option_flags(*keys: str) -> tuple[Flag, ...]:
    return tuple(option_flag(key) for key in keys)


# spellings of the legacy scripts that the help leaves out (an older build.sh's name for --name, a
# revision's misspelling of build_base.sh's --python_version): read as the flag they meant
UNSHOWN_SPELLINGS = {"--image-docker-name": "--name", "--python-verison": "--python"}


def typed_among(flags: tuple[Flag, ...], typed: Sequence[str]) -> list[str]:
    """The flags of ``typed`` (a task's command line after its name) that
    ``flags`` declares, with their values, as typed: what another task taking ``flags`` needs
    to act on the same image (a hint's command). Anything else typed is left out."""
    def dashed(name: str) -> str:  # a long flag's underscores are its dashes (the parser reads them so)
        return UNSHOWN_SPELLINGS.get(name.replace("_", "-"), name.replace("_", "-")) if name.startswith("--") else name

    spelled = {}
    for flag in flags:
        spelled[dashed(flag.spelling)] = flag
        for alias in flag.aliases:
            spelled[dashed(f"-{alias}" if len(alias) == 1 else f"--{alias}")] = flag
    kept, tokens = [], list(typed)
    while tokens:
        token = tokens.pop(0)
        name, has_value, _ = token.partition("=")
        flag = spelled.get(dashed(name))
        if flag is None:
            continue
        kept.append(token)
        if flag.default is not SWITCH and not has_value and tokens:
            kept.append(tokens.pop(0))
    return kept


def overrides(flags: tuple[Flag, ...], given: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration options the given flags set (the command line's layer); a flag left out
    sets nothing."""
    found: dict[str, Any] = {}
    for flag in flags:
        value = given.get(flag.param)
        if not flag.key or value is None or value is False or value == []:
            continue
        if isinstance(value, str) and not value.strip() and flag.default is not SWITCH:
            # not "unset": an unset shell variable (--torch-whl-url "$URL") would build the default silently
            raise ConfigurationError(f"{flag.spelling} {value!r} is empty: give it a value, or leave the flag out"
                                     f" ({flag.key} then comes from the configuration or its default).")
        found[flag.key] = flag.sets if flag.default is SWITCH and flag.sets is not None else _typed(flag, value)
    return found


def option_default(flag: Flag) -> Any:
    """The default of the option ``flag`` sets ("" for a [toolkits] key, which is text), else the flag's own."""
    if not flag.key:
        return flag.default
    declared = settings.declarations().get(flag.key)
    return declared.default if declared is not None else ""


def _typed(flag: Flag, value: Any) -> Any:
    """A number option's flag value (invoke gives text) as its option's type, or an error naming it."""
    default = option_default(flag)
    if not isinstance(value, str) or isinstance(default, bool) or not isinstance(default, int | float):
        return value
    try:
        return validation.parse_number(value, type(default))
    except ValueError:
        raise ConfigurationError(f"{flag.spelling} {value!r}: expected {validation.NUMBER_WORDS[type(default)]}"
                                 f" ({flag.key}).") from None


def check_effect(flags: tuple[Flag, ...], variant: str, given: Mapping[str, Any]) -> None:
    """A flag given that has no effect on a ``variant`` build is an error naming it and why."""
    for flag in flags:
        if flag.only and flag.only != variant and given.get(flag.param):
            other = "a dev image (leave out --release)" if variant == "release" else "a release image (add --release)"
            raise ConfigurationError(f"{flag.spelling} has no effect on a {variant} image: {flag.why}."
                                     f" Leave it out, or build {other}.")


def check_profile_uses(flags: tuple[Flag, ...], settings, given: Mapping[str, Any]) -> None:
    """The vendor extension's git ref given (``--torch-musa-tag``) where the profile builds no
    vendor extension ([sources] extension_repo unset): an error naming the profiles that build one,
    never a flag silently ignored."""
    if settings.sources.extension_repo:
        return
    patch_flag = next((f for f in flags if f.key == "dev.patches"), None)
    if patch_flag is not None and any(entry.startswith("extension=") for entry in settings.dev.patches):
        raise ConfigurationError(
            f"{patch_flag.spelling} extension=…: the {settings.accelerator.profile} profile builds no vendor extension"
            " ([sources] extension_repo is unset), so its patches would never be applied. Leave them out, or give a"
            " profile that builds one.")
    flag = next((f for f in flags if f.key == "sources.extension_tag"), None)
    if flag is None or not given.get(flag.param):
        return
    import tomllib

    from torchbake.core.data import config_file

    users = [name for name in bundled_configs() if (tomllib.loads(Path(config_file(name)).read_text())
                                                    .get("sources") or {}).get("extension_repo")]
    raise ConfigurationError(
        f"{flag.spelling} names the vendor extension's git ref, and the {settings.accelerator.profile} profile builds"
        f" no vendor extension ([sources] extension_repo is unset). It is for "
        + (" or ".join(f"--config {name}" for name in users) or "a profile that sets [sources] extension_repo")
        + "; leave it out, or give that profile.")


def flag_setting(key: str) -> str:
    """The flag of ``invoke build`` (or else ``build-base``) that sets the option ``key``, for
    messages that tell the user what to pass ("" when no flag sets it)."""
    return next((flag.spelling for flag in (*BUILD_FLAGS, *BUILD_BASE_FLAGS)
                 if flag.key == key and flag.default is VALUE), "")


# --- flags many tasks take -------------------------------------------------------------------

# One flag per vendor toolkit the bundled accelerators declare (configs/accelerators.toml: its help
# and legacy spellings there); a team's own accelerator sets its toolkits in its config file.
TOOLKIT_URLS = tuple(Flag(toolkit.key, toolkit.help or f"URL or path of the {toolkit.key} toolkit tarball",
                           key=f"{settings.TOOLKITS_SECTION}.{toolkit.key}", aliases=toolkit.aliases)
                      for accelerator in accelerators.bundled().values() for toolkit in accelerator.toolkits)

CONFIG = Flag("config", "TOML config file, or a bundled one's name. Layered over torchbake's defaults (`invoke show-config --format toml` shows"
                        " every option), or the name of one torchbake ships: "
                        + ", ".join(name for name, kind in bundled_configs().items() if kind == "a profile")
                        + " (profiles), nightly (build-all's matrix); repeatable, later files win", repeatable=True)
DRY_RUN = Flag("dry_run", "Print what would be done; touch nothing. The plan and the exact commands", aliases=("dry_run",),
               default=SWITCH)
NO_CACHE = Flag("no_cache", "Build every step again, ignoring the cache. The engine's layer cache (what build_all.sh always did)",
                default=SWITCH)
FORCE = Flag("force", "Build even if the image is unchanged. Even when the image under NAME:TAG already has these inputs (the same input hash);"
                      " without it such a build prints 'unchanged' and does nothing", default=SWITCH)
NO_PREPARE = Flag("no_prepare", "Reuse the context prepared in --build-dir. As build.sh --no_prepare",
                  aliases=("no_prepare",), default=SWITCH)
CHECK_REPRODUCIBLE = Flag("check_reproducible", "Build twice and compare the digests. The same context again without any cache: the"
                                                " same image digest, or exit 6 naming the files that differ (implies"
                                                " --force)", default=SWITCH)
(DOCKER, BUILDER, NO_BOOTSTRAP, REQUIRE_HASHES, CA_BUNDLE, REGISTRY, REQUIRE_REGISTRY, NO_REGISTRY_CHECK,
 REQUIRE_INDEX, SIGN_KEY) = option_flags(
    "build.docker", "build.builder", "bootstrap.auto", "downloads.require_hashes", "downloads.ca_bundle",
    "registry.url", "registry.require", "registry.check", "wheels.require_index", "sign.key")
PUSH = Flag("push", "Push each verified image to its registry. Each platform's, then the index of them under the"
                    " tag) with its SBOMs and provenance attached, and print its digest", default=SWITCH)
BASE_KEY = option_flag("verify.base_key")
ENGINE = (DOCKER, BUILDER, NO_BOOTSTRAP, REQUIRE_HASHES, CA_BUNDLE, FORCE, REGISTRY, REQUIRE_REGISTRY,
          NO_REGISTRY_CHECK, REQUIRE_INDEX, PUSH, SIGN_KEY, BASE_KEY)  # how a build runs, what it may fetch, where it publishes: build and build-base

# --- build ------------------------------------------------------------------------------------

BUILD_FLAGS = (
    *option_flags("image.name", "image.tag", "image.base", "image.docker_file", "python.version", "image.platforms"),
    *TOOLKIT_URLS,
    *option_flags("wheels.torch", "wheels.extension", "build.variant", "sources.extension_tag",
                  "dev.git_credential_file", "dev.patches", "sources.keep_git", "dev.slim", "dev.compile_cache_required",
                  "build.dir"),
    NO_PREPARE, CONFIG, DRY_RUN, option_flag("build.verify"), option_flag("build.verify_gpus"), NO_CACHE, *ENGINE,
    CHECK_REPRODUCIBLE, LOCKED := option_flag("build.locked"),
)

# --- lock -------------------------------------------------------------------------------------

LOCK_FLAGS = (
    *option_flags("image.name", "image.tag", "image.base", "python.version", "image.platforms"),
    *TOOLKIT_URLS,
    *option_flags("wheels.torch", "wheels.extension", "build.variant", "base.sys", "base.requirements_date"),
    Flag("base", "Lock the base image instead of a release one. The image `invoke build-base` makes: its [base]"
                 " requirements, and the Debian packages on its --sys image", default=SWITCH),
    CONFIG,
    Flag("upgrade", "Let every locked version move. To what the index offers now (without it, locking again keeps"
                    " each version the lock holds)", default=SWITCH),
    Flag("upgrade_package", "Let this project's locked version move. E.g. numpy; repeatable", repeatable=True),
    Flag("matrix", "Lock every cell of the build-all matrix. Every release and base cell, instead (the [matrix] of the last --config file"
                   " that has one, else the project file's, else configs/nightly.toml), each for its own Python and"
                   " platform", default=SWITCH),
    Flag("only", "With --matrix: only cells matching this glob. Repeatable", repeatable=True),
    Flag("fetch", "Also download every locked wheel. Into the download cache, checked against the lock, so that"
                  " builds from it need no index: the cache a CI workflow restores", default=SWITCH),
)

# --- build-base -------------------------------------------------------------------------------

BUILD_BASE_FLAGS = (
    *option_flags("image.name", "image.tag", "base.sys", "python.version", "sources.pytorch_tag", "sources.vision_tag",
                  "sources.audio_tag", "sources.root", "sources.keep_git", "base.requirements_date", "build.dir",
                  "image.platforms"),
    NO_PREPARE, CONFIG, DRY_RUN, option_flag("build.verify"), NO_CACHE, *ENGINE, LOCKED,
)

# --- build-all --------------------------------------------------------------------------------

BUILD_ALL_FLAGS = (
    Flag("config", "TOML file(s): the matrix and shared options. The [matrix] table (default configs/nightly.toml) and options shared by every cell"
                   " (e.g. vendor URLs); repeatable", repeatable=True),
    Flag("only", "Build only cells whose id matches this glob. E.g. 'cuda-*-py310'; repeatable; their dependencies"
                 " come along", repeatable=True),
    Flag("skip", "Leave out cells whose id matches this glob. Repeatable", repeatable=True),
    Flag("registry", "Registry of every cell's image and cache. Instead of [matrix] registry (HOST[:PORT]"
                     "[/PATH]; '' for none)"),
    Flag("skip_incomplete", "Skip cells that need values not set. One line each, \"skipped\" in the reports,"
                            " instead of refusing the run: a shared workflow before its vendor URLs are given",
         default=SWITCH),
    Flag("jobs", "Cells built at once (default 1). Independent cells only", default=1),
    Flag("keep_going", "Build what does not depend on a failure. The default: after a failure, still build the cells that do not depend on it", default=SWITCH),
    Flag("fail_fast", "Stop at the first failed cell", default=SWITCH),
    PUSH,
    Flag("force", "Build every cell, even unchanged ones. Even if its image already has the same input hash", default=SWITCH),
    Flag("no_cache", "With --force: build every step again. Ignoring the engine's layer cache (build_all.sh's way)",
         default=SWITCH),
    Flag("report", "Write a JSON report to this file"),
    Flag("junit", "Write a JUnit XML report to this file"),
    Flag("summary", "Append a Markdown summary to this file. In GitHub Actions: \"$GITHUB_STEP_SUMMARY\""),
    Flag("plan", "Print the ordered plan; touch nothing. Each cell's action (build, skip, re-tag), which inputs"
                 " changed and from which step, and why", default=SWITCH),
    Flag("shard", "Build only shard I of N (I/N, e.g. 1/2). Shards of about equal expected minutes ([matrix]"
                  " minutes, or what a dev cell's last image in the registry records its build took); dependent"
                  " cells stay together"),
    Flag("platform", "Build only the cells of this platform. One of [matrix] platforms, e.g. linux/arm64; repeatable:"
                     " a native runner's share of the nightly", repeatable=True),
    Flag("join_only", "Only join the platforms' pushed images. Build nothing: make each image's tag the index of its platforms' images already pushed to the"
                      " registry (the last job of a nightly whose platforms ran on their own runners)", default=SWITCH),
    Flag("emit_matrix", "Print the CI fan-out matrix and exit. 'github': JSON with one entry per shard"),
    Flag("shards", "With --emit-matrix: how many shards. Each of about equal expected minutes (as --shard's); 0 (the"
                   " default): one per group of cells that depend on each other", default=0),
    DOCKER, BUILDER, REQUIRE_HASHES, CA_BUNDLE, REQUIRE_REGISTRY, NO_REGISTRY_CHECK, REQUIRE_INDEX, SIGN_KEY, BASE_KEY,
    LOCKED,
)

# --- run-container, containers, stop-container ------------------------------------------------

RUN_CONTAINER_FLAGS = (
    Flag("image", "Image to run, NAME:TAG or id. Its torchbake.profile label picks the device profile; default the"
                  " image of this host's most recent successful build", positional=True),
    *option_flags("run.name", "run.shm_size", "run.privileged", "run.gpu_check", "run.platform"),
    Flag("env", "KEY=VALUE for the container; repeatable. For the container and this shell; adds to [run] env", repeatable=True),
    Flag("mount", "Bind mount HOST:CONTAINER[:ro]; repeatable. HOST must exist; adds to [run] mounts",
         repeatable=True),
    option_flag("run.workdir"),
    (lambda flag: dataclasses.replace(flag, help=flag.help.replace(". [run] device_profile", "; one of: " + " | ".join(
        f"{a.name} ({a.description})" for a in accelerators.bundled().values())
        + ", or an accelerator of your --config. [run] device_profile")))(
        option_flag("run.device_profile")),
    Flag("rm", "Remove the container when it ends. A throwaway container, removed when the shell or command ends", default=SWITCH),
    Flag("command", "Run this command instead of a shell. With SHELL -c; its exit status becomes this task's; a"
                    " container it creates is removed when it ends, one it starts is stopped again (unless --keep)"),
    Flag("keep", "Keep what a --command creates or starts. Its container stays, running", default=SWITCH),
    Flag("replace", "Replace the container of this name. One torchbake created (other image or settings): removed and"
                    " created again, and kept (also for a --command)", default=SWITCH),
    DRY_RUN, CONFIG, DOCKER,
)
CONTAINERS_FLAGS = (DOCKER, CONFIG)
STOP_CONTAINER_FLAGS = (
    Flag("name", "Container to stop. One torchbake created; `invoke containers` lists them", positional=True),
    Flag("rm", "Also remove it", default=SWITCH),
    Flag("time", "Seconds to wait before it is killed (default 10)", default=10),
    DOCKER, CONFIG,
)

# --- gc ---------------------------------------------------------------------------------------

GC_FLAGS = (
    Flag("dry_run", "List what would be removed; remove nothing. Exactly what, and why", default=SWITCH),
    *option_flags("gc.keep", "gc.older_than", "gc.max_cache", "gc.max_build_cache", "gc.engine_build_cache"),
    DOCKER, CONFIG,
)

# --- verify, show-build, show-config ----------------------------------------------------------

VERIFY_CHECKS = (  # what verify expects of the image; not with --reproducible
    Flag("python", "Expected Python X.Y. Default: the image's torchbake.python label"),
    Flag("torch_version", "Expected torch version. Default: the torchbake.torch-version label"),
    Flag("extension_module", "Extension module that must import. Default: the torchbake.extension-module label"),
    *(Flag(f.arch.verify_flag, f.arch.verify_help) for f in FAMILIES.values() if f.arch.verify_flag),  # --cuda-arch-list
)
VERIFY_FLAGS = (
    Flag("image", "Image to verify, NAME:TAG or id", positional=True),
    *VERIFY_CHECKS,
    Flag("reproducible", "Instead: rebuild it and compare the digests. Build the image again without any cache from the configuration this host recorded"
                         " when it built it, and compare (exit 6 naming the files that differ); --config adds files"
                         " over that configuration (e.g. credentials, which records keep masked)", default=SWITCH),
    VERIFY_GPUS := Flag("gpus", "Also run the GPU checks on this host's GPUs. On every GPU of this host, with the image's device"
                                " profile's access, a matmul and a convolution, and a judgement of torch's kernels"
                                " for it (native, compatible, PTX only, none); without GPUs, the table says they were"
                                " not run and why", default=SWITCH),
    Flag("signatures", "Instead: check the signatures in the registry. That the image's manifest (each platform's and the index)"
                       " and each of its SBOMs and provenance carry a Sigstore bundle signed by --key, about that"
                       " manifest (exit 11 when one is missing, by another key or tampered with)", default=SWITCH),
    Flag("key", "With --signatures: the public key (PEM). The key to check with; default the public half of [sign] key"),
    Flag("identity", "With --signatures: the keyless identity. Instead of --key: check keyless signatures, whose Fulcio certificate must"
                     " name this identity (an e-mail, a CI workflow's URI), against Sigstore's public trust root"),
    Flag("issuer", "With --identity: the OIDC issuer it needs. The issuer that must have vouched for it (e.g."
                   " https://token.actions.githubusercontent.com)"),
    option_flag("verify.require"),
    DOCKER, CONFIG,
)
SHOW_BUILD_FLAGS = (Flag("image", "Image to describe, NAME:TAG or id", positional=True), DOCKER, CONFIG)
SHOW_CONFIG_FLAGS = (
    CONFIG,
    Flag("variant", "Values derived for a kind of build. base (build-base), dev or release (build"
                    " --release); default [build] variant"),
    Flag("format", "table (default) or toml. table: each value and where it came from; toml: a file --config reads back to the same"
                   " settings)", default="table"),
)

# --- sbom, provenance, diff -------------------------------------------------------------------

OUTPUT = Flag("output", "Write it to this file instead of printing it. Atomically")
SBOM_IMAGE = Flag("image", "Image: NAME:TAG, id or registry reference. One the engine does not hold (host/name:tag):"
                              " whose SBOM is read from the registry", positional=True)  # then --format: tasks/contents.py
PROVENANCE_FLAGS = (
    Flag("image", "Image: NAME:TAG, id or registry reference. NAME:TAG or id of one built on this host; a registry reference's provenance is read from"
                  " the registry", positional=True),
    OUTPUT, DOCKER, CONFIG,
)
DIFF_FLAGS = (
    Flag("old", "The image compared against. NAME:TAG, id, or a registry reference", positional=True),
    Flag("new", "The image compared. NAME:TAG, id, or a registry reference", positional=True),
    Flag("format", "table (default) or json (the whole diff)", default="table"),
    DOCKER, CONFIG,
)

# --- bootstrap-os -----------------------------------------------------------------------------

BOOTSTRAP_OS_FLAGS = (
    Flag("suite", "Debian or Ubuntu suite (default bookworm). E.g. jammy, trixie, noble", default="bookworm"),
    Flag("name", "Image to create. Default torchbake/debian:<suite>"),
    *option_flags("bootstrap.mirror", "bootstrap.variant", "bootstrap.include", "image.platforms"),
    Flag("force", "Make the image again even if it exists", default=SWITCH),
    DOCKER, CONFIG,
    Flag("dry_run", "Print the commands and touch nothing", default=SWITCH),
)
