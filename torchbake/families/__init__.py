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

import functools
import importlib
import pkgutil
from typing import TYPE_CHECKING

from torchbake.families.family import Family

if TYPE_CHECKING:  # found on first use (__getattr__): `python -m torchbake.families.gpu_probe` imports no family
    FAMILIES: dict[str, Family]
    NODES: tuple[str, ...]  # the host's device nodes the families look at (patterns)


@functools.cache
def found() -> dict[str, Family]:
    """Every family of this package, by its ``check`` name: the modules that declare a ``FAMILY``."""
    modules = (importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__))
    families = [module.FAMILY for module in modules if hasattr(module, "FAMILY")]
    return {family.check: family for family in sorted(families, key=lambda f: f.check)}


def __getattr__(name: str) -> object:
    """:data:`FAMILIES` and :data:`NODES`, found when first asked for."""
    if name == "FAMILIES":
        return found()
    if name == "NODES":
        return tuple(dict.fromkeys(node for family in found().values() for node in family.nodes))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def arch_labels(options: object) -> dict[str, str]:
    """Each family's arch list label → the list ``options`` (the settings' ``[accelerator]``) sets
    ("" where none), in the families' order."""
    return {family.arch.label: getattr(options, family.arch.setting) for family in found().values()}


def arch_env(options: object) -> dict[str, str]:
    """The ENV an image keeps of the arch lists ``options`` sets (PyTorch's build reads them)."""
    return {family.arch.env: value for family in found().values() if (value := getattr(options, family.arch.setting))}
