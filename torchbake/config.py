"""Layered configuration: defaults file < --config files < environment < command line.

``configs/defaults.toml`` declares every option; its default value fixes the option's type.
Each layer is flattened to ``section.key`` → value, checked against that schema (unknown keys
fail with a "did you mean" suggestion), and the last layer that sets a key wins. The result is
validated value by value and frozen into :class:`Settings`; :class:`ResolvedConfig` remembers
where each value came from for ``invoke show-config``.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs
import tomli_w

from . import accelerators, derived, redaction, validation
from .accelerators import Accelerator
from .errors import ConfigurationError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = PROJECT_ROOT / "configs"
DOCKER_DIR = PROJECT_ROOT / "docker"  # Dockerfile templates (docker/<os>/) and in-image scripts (docker/common/)
COMMON_DIR = DOCKER_DIR / "common"
DEFAULTS_FILE = CONFIG_DIR / "defaults.toml"
ENV_PREFIX = "TORCHBAKE_"
FREE_SECTIONS = ("checksums",)  # sections whose keys are chosen by the user
TOOLKITS_SECTION = "toolkits"  # [toolkits] KEY: one option per toolkit the accelerators declare
MATRIX_SECTION = "matrix"  # read by build-all (torchbake.matrix), ignored as options
# Variables the legacy shell scripts read, mapped to the option they set (lower precedence than
# TORCHBAKE_* variables).
LEGACY_ENV = {
    "DOCKER_BUILD_DIR": "build.dir",
    "PYTORCH_REPO_ROOT_PATH": "sources.root",
    "TORCH_VISION_REPO_ROOT_PATH": "sources.vision_root",
}


EVERY_IMAGE = "every image"  # an option that decides the content of every variant's image


def option(check: Callable[[Any], object] | None = None, *, decides: tuple[str, ...] | str,
           input_file: bool = False) -> Any:
    """An option's field, declaring beside it what is known of the option:

    ``check`` validates its values (raising ValueError with what is accepted). ``decides``: the
    variants (``base``, ``dev``, ``release``, or :data:`EVERY_IMAGE`) whose image content its value
    decides: it is part of their input hash because it is declared so (``()``: it decides none,
    and the comment beside it says why, where another part counts for it). ``input_file``: the
    value names a file (a URL or path) whose digest counts, not the name."""
    metadata: dict[str, Any] = {"decides": decides, "input_file": input_file}
    if check is not None:
        metadata["check"] = check
    return field(metadata=metadata)


@dataclass(frozen=True, kw_only=True)
class ImageOptions:
    name: str = option(validation.image_name, decides=())  # a name, not content
    tag: str = option(lambda v: v and validation.image_tag(v), decides=())
    base: str = option(validation.image_reference, decides=())  # the FROM image counts by its id
    docker_file: str = option(validation.location, decides=())  # its text counts, as the Dockerfile's
    render_gid: int = option(validation.gid, decides=EVERY_IMAGE)
    env: Mapping[str, str] = option(validation.env_names, decides=EVERY_IMAGE)

    @property
    def reference(self) -> str:
        return f"{self.name}:{self.tag}"


@dataclass(frozen=True, kw_only=True)
class NamingOptions:
    name: str = option(lambda v: _check_template(v, "name"), decides=())
    base_tag: str = option(lambda v: _check_template(v, "base_tag"), decides=())
    dev_tag: str = option(lambda v: _check_template(v, "dev_tag"), decides=())
    release_tag: str = option(lambda v: _check_template(v, "release_tag"), decides=())


@dataclass(frozen=True, kw_only=True)
class PythonOptions:
    version: str = option(validation.python_version, decides=("base", "release"))
    provider: str = option(validation.one_of(validation.PYTHON_PROVIDERS), decides=("base", "release"))
    standalone_url: str = option(lambda v: validation.location(v.replace("{python}", "3.11")),
                                 decides=("base", "release"), input_file=True)
    installer: str = option(validation.one_of(("uv", "pip")), decides=EVERY_IMAGE)
    uv: str = option(validation.exact_pin, decides=EVERY_IMAGE)
    keep_uv: bool = option(decides=EVERY_IMAGE)


@dataclass(frozen=True, kw_only=True)
class WheelOptions:
    torch: str = option(validation.wheel_source, decides=("release",), input_file=True)
    default_torch: Mapping[str, str] = option(lambda v: [validation.wheel_source(source) for source in v.values()],
                                              decides=())  # counts as the wheels.torch it gives; keys checked in resolve
    extension: str = option(validation.wheel_source, decides=("release",), input_file=True)
    extension_module: str = option(decides=("dev", "release"))  # a label
    torchvision: str = option(validation.wheel_source, decides=("release",), input_file=True)
    torchaudio: str = option(validation.wheel_source, decides=("release",), input_file=True)
    extra: tuple[str, ...] = option(lambda v: [validation.requirement(r) for r in v], decides=("release",))
    platforms: tuple[str, ...] = option(decides=EVERY_IMAGE)
    index_url: str = option(decides=EVERY_IMAGE)
    extra_index_urls: tuple[str, ...] = option(decides=EVERY_IMAGE)
    find_links: tuple[str, ...] = option(decides=EVERY_IMAGE)


@dataclass(frozen=True, kw_only=True)
class AcceleratorOptions:
    profile: str = option(decides=EVERY_IMAGE)  # a label; one of the accelerators declared (checked in resolve)
    torch_cuda_arch_list: str = option(validation.cuda_arch_list, decides=EVERY_IMAGE)
    pytorch_rocm_arch: str = option(validation.rocm_arch, decides=EVERY_IMAGE)


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    variant: str = option(validation.one_of(validation.VARIANTS), decides=())  # the plan's variant counts
    dir: str = option(decides=())
    docker: str = option(validation.docker_binary, decides=())
    builder: str = option(validation.builder_name, decides=())
    compression: str = option(validation.one_of(validation.COMPRESSIONS), decides=EVERY_IMAGE)
    verify: bool = option(decides=())
    network: str = option(validation.one_of_or_empty(("default", "host", "none"), "Docker's default"), decides=())
    engine_timeout: int = option(lambda v: validation.bounded(v, 1, 86400, "seconds"), decides=())
    stall_timeout: int = option(lambda v: validation.bounded(v, 10, 7 * 86400, "seconds"), decides=())
    min_free_space: str = option(validation.byte_size, decides=())


@dataclass(frozen=True, kw_only=True)
class BootstrapOptions:
    auto: bool = option(decides=())  # the OS image made counts by its id
    mirror: str = option(lambda v: v and validation.mirror_url(v), decides=())
    variant: str = option(validation.one_of(("minbase", "buildd")), decides=())


@dataclass(frozen=True, kw_only=True)
class SourceOptions:
    root: str = option(validation.existing_folder, decides=())  # the commits found count
    vision_root: str = option(validation.existing_folder, decides=())  # the commits found count
    pytorch_repo: str = option(validation.git_repository, decides=())  # the commits found count
    pytorch_tag: str = option(validation.git_ref, decides=())  # the commits found count
    vision_repo: str = option(validation.git_repository, decides=())  # the commits found count
    vision_tag: str = option(validation.git_ref, decides=())  # the commits found count
    audio_repo: str = option(validation.git_repository, decides=())  # the commits found count
    audio_tag: str = option(validation.git_ref, decides=())  # the commits found count
    extension_repo: str = option(validation.git_repository, decides=("dev",))
    extension_tag: str = option(validation.git_ref, decides=())  # the commit it names counts
    keep_git: bool = option(decides=("base", "dev"))


@dataclass(frozen=True, kw_only=True)
class BaseOptions:
    sys: str = option(validation.image_reference, decides=())  # the FROM image counts by its id
    user: str = option(validation.user_name, decides=("base",))
    video_gid: int = option(validation.gid, decides=("base",))
    requirements: tuple[str, ...] = option(lambda v: [validation.requirement(r) for r in v], decides=("base",))


@dataclass(frozen=True, kw_only=True)
class DevOptions:
    max_jobs: int = option(validation.job_count, decides=("dev",))
    build_env: Mapping[str, str] = option(validation.env_names, decides=("dev",))
    extensions: tuple[str, ...] = option(lambda v: [validation.extension_source(e) for e in v], decides=("dev",))
    git_credential_file: str = option(validation.credential_file, decides=())  # a secret
    ccache_size: str = option(validation.size, decides=("dev",))
    ccache_remote: str = option(validation.ccache_remote, decides=())  # a secret, and a cache
    slim: bool = option(decides=())  # another image beside
    runtime_base: str = option(validation.image_reference, decides=("dev",))
    runtime_paths: tuple[str, ...] = option(lambda v: [validation.absolute_path(p) for p in v], decides=("dev",))


@dataclass(frozen=True, kw_only=True)
class DownloadOptions:
    retries: int = option(lambda v: validation.bounded(v, 0, 100, "retries"), decides=())
    retry_max_time: int = option(lambda v: validation.bounded(v, 1, 86400, "seconds"), decides=())
    retry_backoff: float = option(lambda v: validation.bounded(v, 0, 600, "seconds"), decides=())
    timeout: int = option(lambda v: validation.bounded(v, 1, 3600, "seconds"), decides=())
    require_hashes: bool = option(decides=())
    ca_bundle: str = option(validation.ca_bundle, decides=())  # its digest counts when it goes into the image
    ca_bundle_in_image: bool = option(decides=EVERY_IMAGE)


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    name: str = option(validation.container_name, decides=())
    shm_size: str = option(lambda v: v == "auto" or validation.byte_size(v), decides=())
    privileged: bool = option(decides=())
    env: Mapping[str, str] = option(validation.env_names, decides=())
    mounts: tuple[str, ...] = option(lambda v: [validation.mount_spec(m) for m in v], decides=())
    workdir: str = option(lambda v: v and validation.absolute_path(v), decides=())
    device_profile: str = option(decides=())  # "" = the image's profile; else a declared accelerator (checked in resolve)
    shell: str = option(validation.absolute_path, decides=())
    network: str = option(lambda v: v and validation.container_name(v), decides=())


@dataclass(frozen=True, kw_only=True)
class RegistryOptions:
    url: str = option(validation.registry_url, decides=())
    check: bool = option(decides=())
    require: bool = option(decides=())
    cache_ref: str = option(validation.cache_ref, decides=())
    cache_from: tuple[str, ...] = option(lambda v: [validation.cache_spec(s) for s in v], decides=())
    cache_to: tuple[str, ...] = option(lambda v: [validation.cache_spec(s) for s in v], decides=())

    def image(self, reference: str) -> str:
        return in_registry(reference, self.url)


def in_registry(reference: str, url: str) -> str:
    """``reference`` in the registry ``url``: prefixed with it unless it already starts with it."""
    prefix = url.rstrip("/")
    return reference if not prefix or reference.startswith(prefix + "/") else f"{prefix}/{reference}"


@dataclass(frozen=True, kw_only=True)
class GcOptions:
    keep: int = option(lambda v: validation.bounded(v, 0, 1000, "images"), decides=())
    older_than: str = option(validation.duration, decides=())
    max_cache: str = option(lambda v: v and validation.byte_size(v), decides=())
    max_build_cache: str = option(lambda v: v and validation.byte_size(v), decides=())
    after_build_all: bool = option(decides=())


@dataclass(frozen=True, kw_only=True)
class PathOptions:
    cache_dir: Path = option(decides=())
    log_dir: Path = option(decides=())


@dataclass(frozen=True, kw_only=True)
class Settings:
    image: ImageOptions
    naming: NamingOptions
    python: PythonOptions
    wheels: WheelOptions
    accelerator: AcceleratorOptions
    build: BuildOptions
    bootstrap: BootstrapOptions
    sources: SourceOptions
    base: BaseOptions
    dev: DevOptions
    downloads: DownloadOptions
    run: RunOptions
    registry: RegistryOptions
    gc: GcOptions
    paths: PathOptions
    checksums: Mapping[str, str] = field(default_factory=dict)
    toolkits: Mapping[str, str] = field(default_factory=dict)  # [toolkits]: toolkit key → URL or path ("" = none)
    accelerators: Mapping[str, Accelerator] = field(default_factory=dict)  # every one declared (torchbake.accelerators)
    # every option as resolved ("section.key" → value): what to_toml writes, and what a build
    # records so that `verify --reproducible` can plan it again
    values: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


SECTION_TYPES: dict[str, type] = {
    "image": ImageOptions,
    "naming": NamingOptions,
    "python": PythonOptions,
    "wheels": WheelOptions,
    "accelerator": AcceleratorOptions,
    "build": BuildOptions,
    "bootstrap": BootstrapOptions,
    "sources": SourceOptions,
    "base": BaseOptions,
    "dev": DevOptions,
    "downloads": DownloadOptions,
    "run": RunOptions,
    "registry": RegistryOptions,
    "gc": GcOptions,
    "paths": PathOptions,
}


@functools.cache
def image_options(variant: str) -> dict[str, bool]:
    """``section.key`` → whether it names an input file, of every option that decides the content
    of a ``variant`` image (what its input hash holds)."""
    return {f"{section}.{f.name}": f.metadata["input_file"] for section, cls in SECTION_TYPES.items()
            for f in dataclasses.fields(cls) if f.metadata["decides"] == EVERY_IMAGE or variant in f.metadata["decides"]}


@functools.cache
def validators() -> dict[str, Callable[[Any], None]]:
    """``section.key`` → the check beside that option's field."""
    return {f"{section}.{f.name}": f.metadata["check"] for section, cls in SECTION_TYPES.items()
            for f in dataclasses.fields(cls) if "check" in f.metadata}


def _check_template(template: str, key: str) -> None:
    """A [naming] template uses only the known fields."""
    fields = derived.template_fields("3.11", "release", "cpu", torch="2.13.0")
    try:
        template.format(**fields)
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"unknown field {exc} in the template; fields are {', '.join('{' + f + '}' for f in fields)}") from None
    if not template:
        raise ValueError("a name template is needed for images built without --name" if key == "name"
                         else "a tag template is needed for images built without --name")


@dataclass(frozen=True)
class ResolvedConfig:
    """Every option's final value and the layer it came from."""

    values: Mapping[str, Any]
    sources: Mapping[str, str]
    accelerators: Mapping[str, Accelerator] = dataclasses.field(default_factory=accelerators.bundled)

    def settings(self) -> Settings:
        return build_settings(self.values, self.accelerators)


def load_toml(path: Path) -> dict[str, Any]:
    try:
        data = path.read_bytes()
        # A UTF-8 byte-order mark (some Windows editors write one) is not TOML, but means no harm.
        return tomllib.loads(data.removeprefix(b"\xef\xbb\xbf").decode("utf-8"))
    except FileNotFoundError:
        raise ConfigurationError(
            f"Config file {path} does not exist. Profiles shipped with torchbake: "
            + ", ".join(str(p.relative_to(PROJECT_ROOT)) for p in sorted(CONFIG_DIR.glob("*.toml")))
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"Config file {path} is not valid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"Config file {path} is not UTF-8 text ({exc.reason} at byte {exc.start});"
                                 " save it as UTF-8.") from None
    except IsADirectoryError:
        raise ConfigurationError(f"Config file {path} is a folder; name a .toml file.") from None
    except OSError as exc:
        raise ConfigurationError(f"Config file {path} cannot be read: {exc.strerror or exc}") from None


def schema(declared: Mapping[str, Accelerator] | None = None) -> dict[str, Any]:
    """``section.key`` → default value: the defaults file's, and ``[toolkits] KEY`` = "" for every
    toolkit the accelerators declare (by default the bundled ones)."""
    known = _flatten(load_toml(DEFAULTS_FILE), {}, str(DEFAULTS_FILE))
    for accelerator in (accelerators.bundled() if declared is None else declared).values():
        known.update({f"{TOOLKITS_SECTION}.{toolkit.key}": "" for toolkit in accelerator.toolkits})
    return known


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """" Did you mean 'x'?" for the closest choice, or ""; every unknown name is answered this way."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def _flatten(data: Mapping[str, Any], known: Mapping[str, Any], source: str, *,
             matrix_ok: bool = False) -> dict[str, Any]:
    """Turn ``{section: {key: value}}`` into ``{"section.key": value}``, rejecting unknown keys
    (when ``known`` is given) and values of the wrong type. A ``[matrix]`` table is build-all's
    (``matrix_ok``); anywhere else it would be ignored, so it is an error."""
    flat: dict[str, Any] = {}
    sections = {k.split(".", 1)[0] for k in known} | set(FREE_SECTIONS) | {TOOLKITS_SECTION}
    for section, table in data.items():
        if section == accelerators.SECTION:  # declarations, not options (torchbake.accelerators reads them)
            continue
        if known and section == MATRIX_SECTION:
            if not matrix_ok:
                raise ConfigurationError(
                    f"{source} has a [matrix] table, which only build-all reads: run `invoke build-all --config"
                    f" {source}`, or give this task a config file without [matrix]."
                )
            continue
        if known and section not in sections:
            raise ConfigurationError(
                f"{source}: unknown section [{section}].{did_you_mean(section, sections)}"
                f" Known sections: {', '.join(sorted(sections))}."
            )
        if not isinstance(table, dict):
            raise ConfigurationError(
                f"{source}: {section!r} must be a table ([{section}]), not a {type(table).__name__}."
            )
        if section in FREE_SECTIONS:
            for key, value in table.items():
                flat[f"{section}.{key}"] = value
            continue
        for key, value in table.items():
            name = f"{section}.{key}"
            if known and name not in known:
                section_keys = [k.split(".", 1)[1] for k in known if k.startswith(section + ".")]
                raise ConfigurationError(
                    f"{source}: unknown option {name!r}.{did_you_mean(key, section_keys)}"
                    f" Options in [{section}]: {', '.join(section_keys)}."
                )
            if known:
                value = _check_type(name, value, known[name], source)
            flat[name] = value
    return flat


def _type_name(default: Any) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            list: "a list of strings", dict: "a table of strings"}[type(default)]


def _check_type(name: str, value: Any, default: Any, source: str) -> Any:
    expected = type(default)
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    ok = isinstance(value, expected) and not (expected is int and isinstance(value, bool))
    if ok and expected is list:
        ok = all(isinstance(v, str) for v in value)
    if not ok:
        raise ConfigurationError(
            f"{source}: {name} = {value!r} has the wrong type; expected {_type_name(default)}."
        )
    return value


def _parse_env_value(name: str, text: str, default: Any, source: str) -> Any:
    if isinstance(default, bool):
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigurationError(f"{source}={text!r}: expected true/false (or 1/0, yes/no).")
    if isinstance(default, int | float):
        try:
            return type(default)(text)
        except ValueError:
            raise ConfigurationError(f"{source}={text!r}: expected {_type_name(default)}.") from None
    if isinstance(default, list):
        return [part.strip() for part in text.split(",") if part.strip()]
    if isinstance(default, dict):
        table: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            if not sep:
                raise ConfigurationError(f"{source}={text!r}: expected KEY=VALUE pairs separated by commas.")
            table[key.strip()] = value.strip()
        return table
    return text


def env_var_name(key: str) -> str:
    return ENV_PREFIX + key.replace(".", "_").upper()


def environment_layer(environ: Mapping[str, str], known: Mapping[str, Any]) -> dict[str, tuple[Any, str]]:
    """Options set by ``TORCHBAKE_<SECTION>_<KEY>`` (and the legacy variables)."""
    by_var = {env_var_name(key): key for key in known}
    layer: dict[str, tuple[Any, str]] = {}
    for var, key in LEGACY_ENV.items():
        if environ.get(var):
            layer[key] = (_parse_env_value(key, environ[var], known[key], var), f"environment {var}")
    for var, text in sorted(environ.items()):
        if not var.startswith(ENV_PREFIX):
            continue
        if var.startswith(ENV_PREFIX + "CHECKSUMS"):
            raise ConfigurationError(f"{var}: checksums cannot be set from the environment; put them in a --config file or append #sha256=<hex> to the URL.")
        key = by_var.get(var)
        if key is None:
            if var in RESERVED_ENV:
                continue
            raise ConfigurationError(
                f"Unknown environment variable {var}.{did_you_mean(var, list(by_var) + list(RESERVED_ENV))}"
                " Options are set as TORCHBAKE_<SECTION>_<KEY>, e.g. TORCHBAKE_PYTHON_VERSION=3.11."
            )
        layer[key] = (_parse_env_value(key, text, known[key], var), f"environment {var}")
    return layer


# TORCHBAKE_* variables that are not options.
RESERVED_ENV = ("TORCHBAKE_KEEP_CONTAINERS",)


def resolve(
    config_files: Iterable[str | Path] = (),
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    override_source: str = "command line",
    variant: str | None = None,
    matrix_ok: bool = False,
) -> ResolvedConfig:
    """Merge every layer. ``overrides`` maps ``section.key`` (or a flag label) to a value; a
    ``None`` value means "not given" and is skipped. Options nobody set are then derived for a
    ``variant`` build (base, dev or release; default ``build.variant``): see torchbake.derived."""
    files = [(Path(raw).expanduser(), load_toml(Path(raw).expanduser())) for raw in config_files]
    declared = accelerators.declared((data.get(accelerators.SECTION, {}), str(path)) for path, data in files)
    known = schema(declared)
    values: dict[str, Any] = dict(known)
    sources = {key: "default" for key in known}
    for path, data in files:
        for key, value in _flatten(data, known, str(path), matrix_ok=matrix_ok).items():
            if key.startswith(tuple(f"{s}." for s in FREE_SECTIONS)):
                values[key] = value
            elif isinstance(value, dict) and isinstance(values.get(key), dict):
                values[key] = {**values[key], **value}
            else:
                values[key] = value
            sources[key] = str(path)
    for key, (value, source) in environment_layer(environ or {}, known).items():
        values[key], sources[key] = value, source
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in known:
            raise ConfigurationError(f"internal: no option {key!r}")
        values[key] = _check_type(key, value, known[key], override_source)
        sources[key] = override_source
    redaction.register_in(values)  # every URL's credentials are masked wherever they would be shown
    if values["dev.git_credential_file"]:  # its passwords too (git prints none, but a failing step might)
        redaction.register_credential_file(values["dev.git_credential_file"])
    _validate(values, sources, declared)
    derived.apply(values, sources, variant or values["build.variant"])
    _validate(values, sources, declared)
    return ResolvedConfig(values=values, sources=sources, accelerators=declared)


def _validate(values: Mapping[str, Any], sources: Mapping[str, str], declared: Mapping[str, Accelerator]) -> None:
    names = tuple(declared)
    checks = {**validators(), "accelerator.profile": validation.one_of(names),
              "run.device_profile": validation.one_of_or_empty(names, "the image's profile"),
              "wheels.default_torch": lambda v: [validation.one_of(names)(profile) for profile in v],
              **{key: validation.location for key in values if key.startswith(f"{TOOLKITS_SECTION}.")}}
    for key, check in checks.items():
        try:
            check(values[key])
        except ValueError as exc:
            raise ConfigurationError(
                f"{key} = {values[key]!r} (from {sources[key]}) is invalid: {exc}."
            ) from None
    for key, value in values.items():
        if key.startswith("checksums."):
            if not isinstance(value, str):
                raise ConfigurationError(f"{key} (from {sources[key]}) must be a string of 64 hex digits.")
            try:
                validation.sha256(value)
            except ValueError as exc:
                raise ConfigurationError(f"{key} = {value!r} (from {sources[key]}) is invalid: {exc}.") from None


def build_settings(values: Mapping[str, Any], declared: Mapping[str, Accelerator]) -> Settings:
    sections: dict[str, Any] = {}
    for section, cls in SECTION_TYPES.items():
        kwargs = {}
        for f in dataclasses.fields(cls):
            value = values[f"{section}.{f.name}"]
            if isinstance(value, list):
                value = tuple(value)
            kwargs[f.name] = value
        sections[section] = kwargs
    cache_dir = Path(sections["paths"]["cache_dir"] or platformdirs.user_cache_dir("torchbake")).expanduser()
    log_dir = sections["paths"]["log_dir"]
    sections["paths"] = PathOptions(
        cache_dir=cache_dir, log_dir=Path(log_dir).expanduser() if log_dir else cache_dir / "logs"
    )
    built = {
        name: (cls(**sections[name]) if name != "paths" else sections[name])
        for name, cls in SECTION_TYPES.items()
    }
    checksums = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("checksums.")}
    toolkits = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith(f"{TOOLKITS_SECTION}.")}
    return Settings(**built, checksums=checksums, toolkits=toolkits, accelerators=dict(declared), values=dict(values))


def to_toml(values: Mapping[str, Any]) -> str:
    """The resolved configuration (``ResolvedConfig.values``, ``Settings.values``) as a TOML file
    that --config reads back to the same settings, credentials masked."""
    tables: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        section, name = key.split(".", 1)
        tables.setdefault(section, {})[name] = redaction.redact_all(value)
    text = tomli_w.dumps(tables)
    note = ("# Credentials are shown as ***: give them again (e.g. in TORCHBAKE_<SECTION>_<KEY>) to use this file.\n"
            if redaction.MASK in text else "")
    return "# torchbake show-config --format toml: every option, as resolved\n" + note + text


def describe(resolved: ResolvedConfig) -> list[tuple[str, str, str]]:
    """Rows of (option, value, source) for display."""
    rows = []
    for key in sorted(resolved.values, key=lambda k: (k.split(".")[0], k)):
        value = resolved.values[key]
        shown = redaction.redact(tomlish(value))
        rows.append((key, shown, resolved.sources[key]))
    return rows


def tomlish(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(tomlish(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {tomlish(v)}" for k, v in value.items()) + "}"
    return str(value)
