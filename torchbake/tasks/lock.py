"""``invoke lock``: each release image's whole Python closure pinned in the team's repository."""

from __future__ import annotations

from pathlib import Path

from invoke import Collection

from torchbake.configuration.options import LOCK_FLAGS, overrides
from torchbake.core import output
from torchbake.core.errors import ConfigurationError
from torchbake.core.files import write_atomically
from torchbake.core.lazy import LazyModule
from torchbake.tasks.cli import check_folders, flag_task, reports_errors, resolve_config

locks = LazyModule("torchbake.inputs.locks")
variants = LazyModule("torchbake.variants")
platform_builds = LazyModule("torchbake.building.platform_builds")
image_diff = LazyModule("torchbake.supply_chain.image_diff")


@flag_task(*LOCK_FLAGS)
@reports_errors
def lock(c, **given):
    """Pin each release image's wheels, its whole closure, in a lock file (PEP 751) in your repository.

    One lock per image and platform in [build] locks (default locks/ beside torchbake.toml): every
    wheel file with its URL and sha256, resolved by uv for the image's Python and platform. Take
    the flags and --config files of the build it is for. Locking again keeps every version;
    --upgrade (or --upgrade-package NAME) lets them move; what changed is printed as `invoke diff`
    words it. Builds follow the lock; --locked refuses one that no longer matches it."""
    resolved = resolve_config(given["config"], {**overrides(LOCK_FLAGS, given), "build.locked": False})
    settings = resolved.settings()
    if settings.build.variant != "release":
        raise ConfigurationError("invoke lock locks release images, whose wheels are resolved: add --release (or set"
                                 " [build] variant = \"release\"). A dev image builds torch and the extension from"
                                 " source at their commits.")
    if given["upgrade"] and given["upgrade_package"]:
        raise ConfigurationError("--upgrade lets every version move, --upgrade-package only those named: give one.")
    check_folders(settings, create=True)
    python_given = resolved.sources["python.version"] != "default"
    release = variants.VARIANTS["release"]
    builds = platform_builds.plans(settings, lambda s: release.plan(s, python_given=python_given))
    channel = output.channel()
    for _, plan in builds:
        target = Path(plan.lock_path)
        old = locks.read(target, plan.python_version, plan.wheel_options.platforms) if target.is_file() else None
        uv = locks.host_uv(plan.python_options, plan.wheel_options, plan.python_version,
                           Path(plan.path_options.cache_dir).expanduser(), None)
        platform = plan.lock_platform
        channel.say(("Locking", "bold"), f" {plan.image} for Python {plan.python_version} on {platform}")
        text = locks.make(uv, plan.lock_requirements(), plan.python_version, platform, plan.wheel_options,
                          target=target, upgrade=True if given["upgrade"] else list(given["upgrade_package"]),
                          log_file=None)
        write_atomically(target, text)
        new = locks.read(target, plan.python_version, plan.wheel_options.platforms)
        changed = locks.changes(old, new)
        for name, before, after in changed:
            channel.say("  " + image_diff.Change("python", name, before, after).text())
        what = "new" if old is None else f"{len(changed)} changed" if changed else "unchanged"
        channel.say(("Locked", "green"), f" {target}: {len(new.wheels)} wheels, {what}")


ns = Collection(lock)
