"""Layered configuration: defaults < --config files < environment < command line.

``torchbake.configuration.settings`` declares every option; its default value fixes the option's type.
Each layer is flattened to ``section.key`` → value, checked against that schema (unknown keys
fail with a "did you mean" suggestion), and the last layer that sets a key wins. The result is
validated value by value and frozen into :class:`Settings`; :class:`ResolvedConfig` remembers
where each value came from for ``invoke show-config``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import shlex
import textwrap
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs
import tomli_w

from torchbake.configuration import accelerators, derived, settings, validation
from torchbake.configuration.accelerators import Accelerator
from torchbake.configuration.project import Project
from torchbake.configuration.settings import (
    ENV_PREFIX,
    FREE_SECTIONS,
    SECTION_TYPES,
    TOOLKITS_SECTION,
    PathOptions,
    Settings,
    env_var_name,
    schema,
)
from torchbake.core import redaction
from torchbake.core.data import CONFIG_DIR, bundled_configs, config_file  # noqa: F401 - tests read CONFIG_DIR here
from torchbake.core.errors import ConfigurationError
from torchbake.variants import VARIANTS

MATRIX_SECTION = "matrix"  # read by build-all (torchbake.fleet.matrix), ignored as options
# Variables the legacy shell scripts read, mapped to the option they set (lower precedence than
# TORCHBAKE_* variables).
LEGACY_ENV = {
    "DOCKER_BUILD_DIR": "build.dir",
    "PYTORCH_REPO_ROOT_PATH": "sources.root",
    "TORCH_VISION_REPO_ROOT_PATH": "sources.vision_root",
}


@dataclass(frozen=True)
class ResolvedConfig:
    """Every option's final value and the layer it came from."""

    values: Mapping[str, Any]
    sources: Mapping[str, str]
    accelerators: Mapping[str, Accelerator] = dataclasses.field(default_factory=accelerators.bundled)

    def settings(self) -> Settings:
        return build_settings(self.values, self.accelerators)


def load_toml(path: Path) -> dict[str, Any]:
    """A config file's tables; every way it can be wrong is a ConfigurationError naming it (--config)."""
    try:
        data = path.read_bytes()
        # A UTF-8 byte-order mark (some Windows editors write one) is not TOML, but means no harm.
        return tomllib.loads(data.removeprefix(b"\xef\xbb\xbf").decode("utf-8"))
    except FileNotFoundError:
        raise ConfigurationError(
            f"Config file (--config) {path} does not exist. Configs torchbake ships, named by name (--config"
            " cuda): " + ", ".join(f"{name} ({what})" for name, what in bundled_configs().items())
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


# the options whose value is a registry or an image reference: user:password@host/… is their secret too
REFERENCE_CHECKS = (validation.image_name, validation.image_reference, validation.registry_url)


# options that had another name: a configuration that still uses it is told the new one
RENAMED = {"dev.ccache_remote": "dev.compile_cache", "dev.ccache_required": "dev.compile_cache_required"}


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """" Did you mean 'x'?" for the closest choice, or ""; every unknown name is answered this way."""
    for old, new in RENAMED.items():
        variable = ENV_PREFIX + old.replace(".", "_").upper()
        if word in (old, old.split(".", 1)[1], variable):
            renamed = {old: new, variable: ENV_PREFIX + new.replace(".", "_").upper()}.get(word, new.split(".", 1)[1])
            return f" It was renamed: {renamed}."
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
        if section == accelerators.SECTION:  # declarations, not options (torchbake.configuration.accelerators reads them)
            continue
        if known and section == MATRIX_SECTION:
            if not matrix_ok:
                raise ConfigurationError(
                    f"{source} has a [matrix] table, which only build-all reads: run `invoke build-all --config"
                    f" {shlex.quote(source)}`, or give this task a config file without [matrix]."
                )
            continue
        if known and section not in sections:
            raise ConfigurationError(
                f"{source}: unknown section [{section}].{did_you_mean(section, sections)}"
                f" Known sections: {', '.join(sorted(sections))}."
            )
        if not isinstance(table, dict):
            raise ConfigurationError(
                f"{source}: {section} = {_inline(table)} must be a table ([{section}]), not a value."
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
            f"{source}: {name} = {_inline(value)} has the wrong type; expected {_type_name(default)}."
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
            return validation.parse_number(text, type(default))
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


# TORCHBAKE_* variables that are not options: the tests' own, and those of the set-up scripts (scripts/*.sh).
RESERVED_ENV = ("TORCHBAKE_KEEP_CONTAINERS", "TORCHBAKE_ENGINE_CLIENT", "TORCHBAKE_DOCKERD", "TORCHBAKE_DOCKERD_LOG",
                "TORCHBAKE_DOCKERD_SETTINGS", "TORCHBAKE_ENGINE_WAIT_S", "TORCHBAKE_DEV_WHEELS", "TORCHBAKE_BINFMT_DIR")


def resolve(
    config_files: Iterable[str | Path] = (),
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    override_source: str = "command line",
    variant: str | None = None,
    matrix_ok: bool = False,
    project: Project | None = None,
) -> ResolvedConfig:
    """Merge every layer. ``overrides`` maps ``section.key`` (or a flag label) to a value; a
    ``None`` value means "not given" and is skipped. ``project``: the team's torchbake.toml
    (torchbake.configuration.project), a layer under the --config files whose relative paths are its folder's.
    Options nobody set are then derived for a ``variant`` build (base, dev or release; default
    ``build.variant``): see torchbake.configuration.derived."""
    paths = [Path(config_file(raw)).expanduser() for raw in config_files]
    files = [(str(path), load_toml(path), None) for path in paths]
    if project is not None:
        files.insert(0, (project.source, dict(project.data), project))
    declared = accelerators.declared((data.get(accelerators.SECTION, {}), source) for source, data, _ in files)
    known = schema(declared)
    values: dict[str, Any] = dict(known)
    sources = {key: "default" for key in known}
    for source, data, anchor in files:
        # a project file's [matrix] is build-all's (it reads it itself): other tasks pass it by
        flat = _flatten({k: v for k, v in data.items() if anchor is None or k != MATRIX_SECTION}, known, source,
                        matrix_ok=matrix_ok)
        for key, value in flat.items():
            if anchor is not None and (kind := _path_kind(key)):
                value = anchor.anchored(kind, value)
            if key.startswith(tuple(f"{s}." for s in FREE_SECTIONS)):
                values[key] = value
            elif isinstance(value, dict) and isinstance(values.get(key), dict):
                values[key] = {**values[key], **value}
            else:
                values[key] = value
            sources[key] = source
    for key, (value, source) in environment_layer(environ or {}, known).items():
        values[key], sources[key] = value, source
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in known:
            raise ConfigurationError(f"internal: no option {key!r}")
        values[key] = _check_type(key, value, known[key], override_source)
        sources[key] = override_source
    _refuse_masked(values, sources)
    _register_secrets(values)
    _validate(values, sources, declared)
    if values["dev.git_credential_file"]:  # its passwords too (git prints none, but a failing step might)
        redaction.register_credential_file(values["dev.git_credential_file"])
    kind = VARIANTS[variant or values["build.variant"]]
    derived.apply(values, sources, kind.name, from_option=kind.from_option, built_from=kind.built_from)
    _validate(values, sources, declared)
    return ResolvedConfig(values=values, sources=sources, accelerators=declared)


def _register_secrets(values: Mapping[str, Any]) -> None:
    """Every secret the options hold, masked wherever it would be shown: URLs' credentials, a
    registry's or an image's (no scheme), a webhook's whole URL, and the values of variables named
    as credentials (HF_TOKEN=… given to an image, a build or a container)."""
    redaction.register_in(values)
    for key, declaration in settings.declarations().items():
        if declaration.check in REFERENCE_CHECKS:
            redaction.register_reference(values.get(key))
        elif declaration.check is validation.env_names and isinstance(values.get(key), dict):
            redaction.register_environment(values[key])
    redaction.register(values["notify.webhook"])


def _refuse_masked(values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    """A URL whose secret reads ``***`` is a value torchbake masked when it wrote it (``show-config
    --format toml``): sent as it is, ``***`` would be the password. Refused before any work."""
    for key, value in values.items():
        if redaction.carries_mask(value):
            raise ConfigurationError(
                f"{key} (from {sources[key]}) holds a URL whose password, token or signature was masked as"
                f" {redaction.MASK}: torchbake writes secrets masked (show-config), so a value copied from what it"
                f" printed or wrote cannot give them back."
                f" Put the real URL in {key}, or give it for this run only in the environment"
                f" ({env_var_name(key)}=…) or with the option's flag.")


def _path_kind(key: str) -> str:
    """Whether option ``key`` names a file or folder ("path"), may ("location"), or neither ("")."""
    if key.startswith(f"{TOOLKITS_SECTION}."):
        return "location"
    declared = settings.declarations().get(key)
    return declared.path if declared else ""


def _validate(values: Mapping[str, Any], sources: Mapping[str, str], declared: Mapping[str, Accelerator]) -> None:
    names = tuple(declared)
    checks = {**settings.validators(), "accelerator.profile": validation.one_of(names),
              "build.variant": validation.one_of(tuple(name for name, kind in VARIANTS.items()
                                                       if name == kind.build_variant)),
              "run.device_profile": validation.one_of_or_empty(names, "the image's profile"),
              "wheels.default_torch": lambda v: [validation.one_of(names)(profile) for profile in v],
              **{key: validation.location for key in values if key.startswith(f"{TOOLKITS_SECTION}.")}}
    for key, value in values.items():  # every value's text, then the check declared for it
        try:
            validation.plain_text(value)
            if key in checks:
                checks[key](value)
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


def default_cache_dir() -> Path:
    """torchbake's cache folder where [paths] cache_dir names none: the user cache folder of this
    OS ($XDG_CACHE_HOME/torchbake, else ~/.cache/torchbake on Linux)."""
    return Path(platformdirs.user_cache_dir("torchbake"))


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
    cache_dir = Path(sections["paths"]["cache_dir"] or default_cache_dir()).expanduser()
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


def to_toml(values: Mapping[str, Any], *, documented: bool = False,
            declared: Mapping[str, Accelerator] | None = None) -> str:
    """The resolved configuration (``ResolvedConfig.values``, ``Settings.values``) as a TOML file
    that --config reads back to the same settings, credentials masked; ``documented``: each
    section and option with its help as a comment above it (what ``show-config`` prints)."""
    tables: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        section, name = key.split(".", 1)
        tables.setdefault(section, {})[name] = redaction.redact_all(value)
    text = _documented(tables, declared) if documented else tomli_w.dumps(tables)
    note = ("# Credentials are shown as ***: give them again (e.g. in TORCHBAKE_<SECTION>_<KEY>) to use this file.\n"
            if redaction.MASK in text else "")
    return "# torchbake show-config --format toml: every option, as resolved\n" + note + text


def _comment(text: str, indent: str = "") -> str:
    return "".join(f"{indent}# {line}\n" for line in textwrap.wrap(text, 100 - len(indent) - 2, break_on_hyphens=False))


def _documented(tables: Mapping[str, Mapping[str, Any]], declared: Mapping[str, Accelerator] | None) -> str:
    """TOML of ``tables`` with every value inline, under its help (:mod:`torchbake.configuration.settings`;
    a toolkit's, the accelerators ``declared``: by default the bundled ones)."""
    helps = {**{key: option.help for key, option in settings.declarations().items()},
             **{f"{TOOLKITS_SECTION}.{toolkit.key}": toolkit.help
                for accelerator in (accelerators.bundled() if declared is None else declared).values()
                for toolkit in accelerator.toolkits}}
    parts = []
    for section, table in tables.items():
        lines = [f"[{section}]\n", _comment(settings.section_help(section))]
        for name, value in table.items():
            text = helps.get(f"{section}.{name}", "")
            lines.append(("\n" + _comment(text) if text else "") + f"{_bare_or_quoted(name)} = {_inline(value)}\n")
        parts.append("".join(lines))
    return "\n".join(parts)


def _bare_or_quoted(key: str) -> str:
    return key if key and all(c.isalnum() or c in "_-" for c in key) and key.isascii() else json.dumps(key)


def _inline(value: Any) -> str:
    """``value`` as a TOML value on one line (JSON's string escapes are TOML's too)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_inline(item) for item in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_bare_or_quoted(k)} = {_inline(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value))


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
