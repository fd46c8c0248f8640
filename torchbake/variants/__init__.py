"""The image variants, one module each: ``release`` (from wheels), ``base`` (sources and build
tools, for dev builds) and ``dev`` (from source). Each knows its plan, its preflight, its
context, its build args, labels and input-hash material, and its dry-run rows."""

from .base import BasePlan, plan_base
from .common import Missing, Preflight, how_to_set, missing_error, ways_to_set
from .dev import DevPlan, default_max_jobs, plan_dev
from .release import ReleasePlan, plan_release

Plan = ReleasePlan | BasePlan | DevPlan

__all__ = ["BasePlan", "DevPlan", "Missing", "Plan", "Preflight", "ReleasePlan", "default_max_jobs", "how_to_set",
           "missing_error", "plan_base", "plan_dev", "plan_release", "ways_to_set"]
