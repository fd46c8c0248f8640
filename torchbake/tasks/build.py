"""``invoke build`` (release from wheels, or dev from source) and ``invoke build-base``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from invoke import Collection

from torchbake.configuration.options import BUILD_BASE_FLAGS, BUILD_FLAGS, check_effect, check_profile_uses, overrides
from torchbake.core import output
from torchbake.core.errors import ConfigurationError
from torchbake.core.lazy import LazyModule
from torchbake.tasks.cli import check_folders, docker_client, flag_task, reports_errors, resolve_config

# The work behind a task is imported when the task runs: invoke imports every task module to
# parse any command line, and a command that fails on its flags should not pay for all of them.
if TYPE_CHECKING:
    from torchbake import variants
    from torchbake.building import builder, platform_builds, publishing
else:
    builder = LazyModule("torchbake.building.builder")
    variants = LazyModule("torchbake.variants")
    platform_builds = LazyModule("torchbake.building.platform_builds")
    publishing = LazyModule("torchbake.building.publishing")


def _run(make_plan, settings, given) -> None:
    """Each platform's image (``make_plan`` of its settings), then, for several, their one tag;
    with --push, each pushed and the tag made their index in the registry."""
    dry_run, push, check_reproducible = given["dry_run"], given["push"], given.get("check_reproducible", False)
    if given["sign_key"] and not push:
        raise ConfigurationError("--sign-key signs what --push publishes, and nothing is pushed: add --push (a key"
                                 " set in [sign] key of a config file stays unused by builds that do not push).")
    builds = platform_builds.plans(settings, make_plan)
    target = settings.registry.image(settings.image.reference)
    if push:
        publishing.check_publishable([target, *(plan.image for _, plan in builds)], settings.sign)
    check_folders(settings, create=not dry_run)
    client = docker_client(settings, writes=not dry_run)
    results = []
    for _, plan in builds:
        if dry_run:
            builder.dry_run(plan, client, check_reproducible=check_reproducible)
        else:
            skip = not (given["force"] or plan.no_cache or check_reproducible)
            results.append(builder.build_image(plan, client, skip_unchanged=skip, publish=push,
                                               check_reproducible=check_reproducible))
    log = builder.log_path(settings.paths.log_dir, target)
    if len(builds) > 1:
        platform_builds.join(client, target, [(platform, plan.image) for platform, plan in builds],
                             settings.build.compression, log, dry_run=dry_run)
    if push and dry_run:
        output.channel().say(f"Then pushes {target} to its registry with its SBOMs and provenance attached.")
    elif push:
        publishing.publish_build(client, builds, results, target, log)


@flag_task(*BUILD_FLAGS)
@reports_errors
def build(c, **given):
    """Build a PyTorch image, release or dev, then verify it.

    A release image installs torch and the extension from wheels; a dev image builds them from
    source. With no flags: a dev image FROM the base image `invoke build-base` made for the same
    Python; with --release alone: the CPU release image torchbake/pytorch-cpu:2.13.0-py3.11 on
    debian:bookworm."""
    resolved = resolve_config(given["config"], overrides(BUILD_FLAGS, given))
    settings = resolved.settings()
    check_effect(BUILD_FLAGS, settings.build.variant, given)
    check_profile_uses(BUILD_FLAGS, settings, given)
    no_prepare, no_cache = given["no_prepare"], given["no_cache"]
    python_given = resolved.sources["python.version"] != "default"
    variant = variants.VARIANTS[settings.build.variant]
    _run(lambda s: variant.plan(s, python_given=python_given, reuse_context=no_prepare, no_cache=no_cache),
         settings, given)


@flag_task(*BUILD_BASE_FLAGS)
@reports_errors
def build_base(c, **given):
    """Build the base image that dev builds start FROM.

    It holds the build tools, Python, and the PyTorch/vision/audio sources at pinned tags.
    `invoke build-base --python 3.10` makes torchbake/pytorch-cpu:base-py3.10 FROM ubuntu:22.04 (the
    OS image whose Python is 3.10); `invoke build --python 3.10` then finds it."""
    settings = resolve_config(given["config"], overrides(BUILD_BASE_FLAGS, given), variant="base").settings()
    _run(lambda s: variants.VARIANTS["base"].plan(s, reuse_context=given["no_prepare"], no_cache=given["no_cache"]),
         settings, given)


ns = Collection(build, build_base)
