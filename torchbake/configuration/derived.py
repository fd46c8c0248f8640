"""Options derived from other options when nobody set them, so the commands work as typed.

- ``image.name`` / ``image.tag``: from the ``[naming]`` templates (``{profile}``, ``{variant}``,
  ``{python}``, ``{py}``, ``{cp}``, ``{torch}``); a name given without a tag gets ``latest``.
- The FROM image: ``base.sys`` (build-base) and a release's ``image.base`` are the OS image whose
  own Python is ``[python] version`` (debian:bookworm for 3.11); a dev build's ``image.base`` is
  the image ``invoke build-base`` names for the same profile and Python.
- ``wheels.torch``: the profile's ``[wheels] default_torch`` (torch==2.13.0 for cpu).

Each derived value's source reads "derived from …" (``invoke show-config``).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any
from urllib.parse import unquote

from packaging.requirements import InvalidRequirement, Requirement

from torchbake.configuration import os_releases, validation
from torchbake.core.errors import ConfigurationError

UNKNOWN_TORCH = "custom"  # {torch} when the torch source names no single version


def template_fields(python: str, variant: str, profile: str, **extra: str) -> dict[str, str]:
    """The fields of name, tag and option templates (the matrix adds {registry} and {name})."""
    py = python.replace(".", "")
    return {"python": python, "py": py, "cp": f"cp{py}", "variant": variant, "profile": profile, **extra}


def fill(template: Any, fields: Mapping[str, str], where: str) -> Any:
    """``template`` with its ``{field}``s filled (lists item by item)."""
    if isinstance(template, list):
        return [fill(item, fields, where) for item in template]
    if not isinstance(template, str):
        return template
    try:
        return template.format(**fields)
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigurationError(
            f"{where}: template {template!r} uses an unknown field ({exc}); fields are"
            f" {', '.join('{' + k + '}' for k in fields)}."
        ) from None


def torch_version(source: str) -> str:
    """The version a torch source names: torch==2.13.0 → 2.13.0, .../torch-2.0.0-cp310-….whl →
    2.0.0 (a local part such as +cpu left out); "" when it names none."""
    if not source:
        return ""
    if validation.is_location(source):
        name = unquote(source.split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1])
        parts = name.split("-")
        return parts[1].split("+")[0] if name.endswith(".whl") and len(parts) > 2 else ""
    try:
        requirement = Requirement(source)
    except InvalidRequirement:
        return ""
    pins = [s.version for s in requirement.specifier if s.operator in ("==", "===") and "*" not in s.version]
    return pins[0].split("+")[0] if len(pins) == 1 else ""


def _set(values: MutableMapping[str, Any], sources: MutableMapping[str, str], key: str, value: Any, why: str) -> None:
    values[key], sources[key] = value, f"derived from {why}"


def image_reference(values: Mapping[str, Any], variant: str) -> tuple[str, str]:
    """(name, tag) the ``[naming]`` templates give a ``variant`` image of these settings."""
    fields = template_fields(values["python.version"], variant, values["accelerator.profile"],
                             torch=torch_version(values["wheels.torch"]) or UNKNOWN_TORCH)
    name = fill(values["naming.name"], fields, "[naming] name")
    tag = fill(values[f"naming.{variant}_tag"], fields, f"[naming] {variant}_tag")
    for key, value, check in ((f"[naming] name ({values['naming.name']!r})", name, validation.image_name),
                              (f"[naming] {variant}_tag ({values[f'naming.{variant}_tag']!r})", tag, validation.image_tag)):
        try:
            check(value)
            if not value:
                raise ValueError("it is empty")
        except ValueError as exc:
            raise ConfigurationError(f"{key} gives {value!r}, which is not usable: {exc}.") from None
    return name, tag


def _os_image(values: Mapping[str, Any]) -> tuple[str, str]:
    """The OS image to start FROM and why ("" if no release ships the requested Python)."""
    python = values["python.version"]
    if values["python.provider"] == "standalone":
        return os_releases.DEFAULT_OS_IMAGE, '[python] provider = "standalone" (any OS; the default OS image)'
    image = os_releases.os_image_for_python(python)
    return image, f"[python] version {python} (the OS Python of {image})"


def apply(values: MutableMapping[str, Any], sources: MutableMapping[str, str], variant: str, *,
          from_option: str = "image.base", built_from: str | None = None) -> None:
    """Fill in, for a ``variant`` build, every derived option nobody set. ``from_option``: the option
    that names the variant's FROM image; ``built_from``: the variant whose image that is by default
    (else the OS image of the Python)."""
    profile = values["accelerator.profile"]
    if not values["wheels.torch"] and values["wheels.default_torch"].get(profile):
        _set(values, sources, "wheels.torch", values["wheels.default_torch"][profile],
             f"[wheels] default_torch.{profile}")
    os_image, why = _os_image(values)
    if not values["base.sys"] and os_image:
        _set(values, sources, "base.sys", os_image, why)
    if not values[from_option]:
        if built_from:
            name, tag = image_reference(values, built_from)
            _set(values, sources, from_option, f"{name}:{tag}", f"[naming]: the image build-{built_from} makes for"
                                                                f" profile {profile}, Python {values['python.version']}")
        elif os_image:
            _set(values, sources, from_option, os_image, why)
    if not values["image.name"]:
        name, tag = image_reference(values, variant)
        _set(values, sources, "image.name", name, "[naming] name")
        if not values["image.tag"]:
            _set(values, sources, "image.tag", tag, f"[naming] {variant}_tag")
    if not values["image.tag"]:
        _set(values, sources, "image.tag", "latest", "[image] tag: a name given without a tag")
