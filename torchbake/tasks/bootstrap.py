"""``invoke bootstrap-os``: a base OS image from debootstrap, no registry needed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from invoke import Collection

from torchbake.configuration import platforms, validation
from torchbake.configuration.options import BOOTSTRAP_OS_FLAGS, overrides
from torchbake.core.lazy import LazyModule
from torchbake.tasks.cli import check_folders, docker_client, flag_task, reports_errors, resolve_config

if TYPE_CHECKING:
    from torchbake.inputs import base_os
else:
    base_os = LazyModule("torchbake.inputs.base_os")  # imported when the task runs (see tasks/build.py)


@flag_task(*BOOTSTRAP_OS_FLAGS)
@reports_errors
def bootstrap_os(c, **given):
    """Make a base OS image with debootstrap, for air-gapped sites.

    The same mirror state gives the same digest. Builds do this by themselves for a missing
    debian:<suite> or ubuntu:<suite> FROM image."""
    settings = resolve_config(given["config"], overrides(BOOTSTRAP_OS_FLAGS, given)).settings()
    suite = given["suite"]
    spec = base_os.OsImageSpec(suite=suite, name=given["name"] or f"torchbake/debian:{suite}",
                               mirror=settings.bootstrap.mirror, variant=settings.bootstrap.variant,
                               force=given["force"], compression=settings.build.compression,
                               platforms=tuple(p.name for p in platforms.parse_all(settings.image.platforms)),
                               include=validation.debian_packages(settings.bootstrap.include))
    check_folders(settings, create=not given["dry_run"])
    client = docker_client(settings, writes=not given["dry_run"])
    base_os.bootstrap_os_image(spec, client, settings.paths.cache_dir / base_os.BOOTSTRAP_DIR, dry_run=given["dry_run"])


ns = Collection(bootstrap_os)
