"""The image variants, one module each: ``release`` (from wheels), ``base`` (sources and build
tools, for dev builds) and ``dev`` (from source). Each knows its plan, its preflight, its
context, its build args, labels and input-hash material, and its dry-run rows.

Every variant module is a :class:`Variant`, and :data:`VARIANTS` is the one list of them that the
tasks, the matrix and the runner read (as cibuildwheel's ``platforms/__init__.py`` lists its
platform modules)."""

from __future__ import annotations

from typing import Protocol

from . import base, dev, release
from .base import BasePlan
from .common import Missing, Preflight, how_to_set, missing_error, ways_to_set
from .dev import DevPlan, default_max_jobs
from .release import ReleasePlan

Plan = ReleasePlan | BasePlan | DevPlan


class Variant(Protocol):
    """What a variant module declares beside its plan class."""

    NAME: str
    BUILD_VARIANT: str | None
    BUILT_FROM: str | None

    def plan(self, settings, *, python_given: bool = False, reuse_context: bool = False,
             no_cache: bool = False) -> Plan:
        """The variant's plan from resolved settings; ``python_given``: --python was given (a dev
        image otherwise takes its base image's Python)."""


VARIANTS: dict[str, Variant] = {module.NAME: module for module in (base, dev, release)}  # in build order

__all__ = ["VARIANTS", "BasePlan", "DevPlan", "Missing", "Plan", "Preflight", "ReleasePlan", "Variant",
           "default_max_jobs", "how_to_set", "missing_error", "ways_to_set"]
