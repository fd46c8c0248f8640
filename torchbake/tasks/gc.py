"""``invoke gc``: what torchbake left behind, removed within limits (and after build-all)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from invoke import Collection

from torchbake.configuration import validation
from torchbake.configuration.options import GC_FLAGS, overrides
from torchbake.core import output
from torchbake.core.errors import ConfigurationError
from torchbake.core.lazy import LazyModule
from torchbake.core.output import human_size
from torchbake.tasks.cli import check_folders, docker_client, flag_task, reports_errors, resolve_config

if TYPE_CHECKING:
    from torchbake.adapters.engine import DockerClient
    from torchbake.configuration.settings import Settings

if TYPE_CHECKING:
    from torchbake.housekeeping import cleanup
else:
    cleanup = LazyModule("torchbake.housekeeping.cleanup")  # imported when the task runs (see tasks/build.py)

def limits_of(settings: Settings) -> cleanup.Limits:
    gc = settings.gc
    if gc.engine_build_cache and not gc.max_build_cache:  # a scope with no budget: nothing would be cut, silently
        raise ConfigurationError("gc.engine_build_cache (--engine-build-cache) makes gc.max_build_cache"
                                 " (--max-build-cache) the budget of the engine's whole build cache, and none is set:"
                                 " set one, e.g. `invoke gc --engine-build-cache --max-build-cache 40G --dry-run`.")
    return cleanup.Limits(keep=gc.keep, older_than=validation.duration(gc.older_than),
                          max_cache=validation.byte_size(gc.max_cache) if gc.max_cache else 0,
                          max_build_cache=validation.byte_size(gc.max_build_cache) if gc.max_build_cache else 0,
                          engine_build_cache=gc.engine_build_cache)


def collect(settings: Settings, client: DockerClient, *, dry_run: bool) -> cleanup.Outcome | None:
    """Remove (or, with ``dry_run``, list) what the limits say, a line for each; what was done
    (None for a dry run)."""
    limits = limits_of(settings)
    removals = cleanup.plan(client, settings.paths.cache_dir, settings.paths.log_dir, limits)
    channel = output.channel()
    if dry_run:  # one line each, whole (paths and tags are never folded): what CI logs and grep need
        for r in removals:
            channel.say(f"would remove {r.kind} {r.what} ({human_size(r.size)}): {r.why}")
        channel.say(f"{len(removals)} items, {human_size(sum(r.size for r in removals))}; nothing was removed (--dry-run).")
        return None
    outcome = cleanup.carry_out(client, removals, settings.paths.cache_dir, limits)
    kept = outcome.kept
    gone = {r.what for r in removals} - {line.split(": ", 1)[0] for line in kept}
    for r in removals:
        if r.what in gone:
            channel.say(f"removed {r.kind} {r.what} ({human_size(r.size)}): {r.why}")
    for line in kept:
        channel.say(f"kept {line}")
    channel.say(f"Freed {human_size(outcome.freed)} ({len(removals) - len(kept)} items).")
    return outcome


@flag_task(*GC_FLAGS)
@reports_errors
def gc(c, **given):
    """Remove what torchbake left behind that nothing uses.

    Its images a newer build replaced and nothing uses (beyond the newest --keep per NAME:TAG),
    cache entries and logs older than --older-than, caches over budget. Never an image torchbake
    did not build on this host, one a container uses, a cache entry another torchbake holds, or
    anything while the engine does not answer."""
    if given["keep"] is not None:
        try:
            given["keep"] = validation.parse_number(str(given["keep"]), int)
        except ValueError:
            raise ConfigurationError(f"--keep {given['keep']!r}: expected a whole number of images, 0 or more.") from None
    settings = resolve_config(given["config"], overrides(GC_FLAGS, given)).settings()
    check_folders(settings, create=False)
    client = docker_client(settings, for_build=False, writes=not given["dry_run"])
    collect(settings, client, dry_run=given["dry_run"])


ns = Collection(gc)
