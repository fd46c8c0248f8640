"""The image variants, one module each: ``release`` (from wheels), ``base`` (sources and build
tools, for dev builds) and ``dev`` (from source). Each knows its plan, its preflight, its
context, its build args, labels and input-hash material, its verify checks and its dry-run rows.

Every module of this package that declares a ``VARIANT`` (a :class:`Variant`) is one, and :data:`VARIANTS`
is the one registry of them that the tasks, the matrix, the configuration and the runner read (as
cibuildwheel's ``platforms/__init__.py`` lists its platform modules). It is found, not written:
a new variant is a new module here (with its Dockerfile and its ``[naming]`` tag), nothing else.

May use: ``torchbake.supply_chain`` and the layers below it.
"""

from __future__ import annotations

import importlib
import pkgutil

from torchbake.variants.common import Missing, PlanCommon, Preflight, Variant, how_to_set, missing_error, ways_to_set

Plan = PlanCommon  # every variant's plan class is one


def _in_build_order(found: dict[str, Variant]) -> dict[str, Variant]:
    """Each variant after the one it is built from, otherwise by name."""
    ordered: dict[str, Variant] = {}

    def visit(name: str) -> None:
        if name not in ordered:
            built_from = found[name].built_from
            if built_from:
                visit(built_from)
            ordered[name] = found[name]

    for name in sorted(found):
        visit(name)
    return ordered


def _discover() -> dict[str, Variant]:
    modules = (importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__))
    return _in_build_order({module.VARIANT.name: module.VARIANT for module in modules if hasattr(module, "VARIANT")})


VARIANTS: dict[str, Variant] = _discover()  # in build order

__all__ = ["VARIANTS", "Missing", "Plan", "Preflight", "Variant", "how_to_set", "missing_error", "ways_to_set"]
