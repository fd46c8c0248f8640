"""A build's plan as text, for ``--dry-run``: the rows each variant gives (torchbake.variants),
the context it will prepare and the exact docker command."""

from __future__ import annotations

import os

from torchbake.adapters.command import format_command
from torchbake.configuration import platforms
from torchbake.core.data import common_files


def describe_plan(plan, docker_argv: list[str], docker_env: dict[str, str]) -> str:
    """The plan of any variant as text, for --dry-run: each plan gives its own rows."""
    rows = [("base image", plan.base_image_text()), *plan.input_rows(),
            *getattr(plan, "toolkits", {}).items(), *(("ENV", f"{k}={v}") for k, v in plan.dockerfile_env.items())]
    lines = [f"Plan for {plan.image} ({plan.variant}, profile {plan.profile})", ""]
    if plan.platform:
        lines += [f"Platform: {platforms.how_built(plan.platform, plan.build_options.builder, from_wheels=plan.wheels_unpacked_natively)}", ""]
    lines += ["Inputs:"]
    lines += [f"  {label:<15} {value}" for label, value in rows]
    lines += ["", "Context:" + (f" {plan.build_dir}" if plan.build_dir else " a temporary folder, removed after the build")]
    context = [("Dockerfile", "from " + os.path.relpath(plan.dockerfile_template)),
               ("common/", ", ".join(p.name for p in common_files())), *plan.context_lines()]
    width = max(16, *(len(name) for name, _ in context))
    lines += [f"  {name:<{width}} {text}" for name, text in context]
    lines += ["", "Docker command:", "  " + format_command(docker_argv, docker_env), ""]
    lines.append("Verify afterwards: " + ("yes" if plan.verify else "no (--no-verify)"))
    return "\n".join(lines)
