"""The accelerator families whose parts are code, one module each (``nvidia``, ``rocm``): an arch
list (its option, its check, the ENV and label it becomes, verify's row of it), device access,
the host's GPUs and the GPU judgement. Every module of this package that declares a ``FAMILY`` (a
:class:`torchbake.families.family.Family`) is one, and :data:`FAMILIES` is the one registry of them,
found as :data:`torchbake.variants.VARIANTS` is: another family is a new module here and an
``[accelerators.NAME]`` table whose ``devices.check`` names it, nothing else. An accelerator that
needs no code stays data (``configs/accelerators.toml``).

May use: ``torchbake.core``.
"""

from __future__ import annotations

import importlib
import pkgutil

from torchbake.families.family import Family


def _discover() -> dict[str, Family]:
    modules = (importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__))
    found = [module.FAMILY for module in modules if hasattr(module, "FAMILY")]
    return {family.check: family for family in sorted(found, key=lambda f: f.check)}


FAMILIES: dict[str, Family] = _discover()
NODES = tuple(dict.fromkeys(node for family in FAMILIES.values() for node in family.nodes))  # what the host is probed for


def arch_labels(options: object) -> dict[str, str]:
    """Each family's arch list label → the list ``options`` (the settings' ``[accelerator]``) sets
    ("" where none), in the families' order."""
    return {family.arch.label: getattr(options, family.arch.setting) for family in FAMILIES.values()}


def arch_env(options: object) -> dict[str, str]:
    """The ENV an image keeps of the arch lists ``options`` sets (PyTorch's build reads them)."""
    return {family.arch.env: value for family in FAMILIES.values() if (value := getattr(options, family.arch.setting))}
