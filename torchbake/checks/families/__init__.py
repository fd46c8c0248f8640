"""The accelerator families whose device access and GPU judgement are code, one module each
(``nvidia``, ``rocm``). Every module of this package that declares a ``FAMILY`` (a
:class:`torchbake.checks.access.Family`) is one, and :data:`FAMILIES` is the one registry of them,
found as :data:`torchbake.variants.VARIANTS` is: another family is a new module here and an
``[accelerators.NAME]`` table whose ``devices.check`` names it, nothing else. An accelerator that
needs no code stays data (``configs/accelerators.toml``)."""

from __future__ import annotations

import importlib
import pkgutil

from torchbake.checks.access import Family


def _discover() -> dict[str, Family]:
    modules = (importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__))
    found = [module.FAMILY for module in modules if hasattr(module, "FAMILY")]
    return {family.check: family for family in sorted(found, key=lambda f: f.check)}


FAMILIES: dict[str, Family] = _discover()
NODES = tuple(dict.fromkeys(node for family in FAMILIES.values() for node in family.nodes))  # what the host is probed for
