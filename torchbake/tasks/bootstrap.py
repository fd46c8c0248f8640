"""``invoke bootstrap-os``: a base OS image from debootstrap, no registry needed."""

from __future__ import annotations

from invoke import Collection, task

from ..cli import COMMON_HELP, FlagTask, check_folders, docker_client, reports_errors, resolve_config
from ..lazy import LazyModule

base_os = LazyModule("torchbake.base_os")  # imported when the task runs (see tasks/build.py)


@task(
    klass=FlagTask,
    help={
        **COMMON_HELP,
        "suite": "Debian/Ubuntu suite to bootstrap, e.g. bookworm or jammy (default bookworm)",
        "name": "Image to create (default torchbake/debian:<suite>)",
        "mirror": "Package mirror URL. [bootstrap] mirror, default debootstrap's own for the suite",
        "variant": "debootstrap variant: minbase or buildd. [bootstrap] variant, default minbase",
        "force": "Rebuild even if the image exists",
        "dry_run": "Print the commands and touch nothing",
    },
    iterable=["config"],
)
@reports_errors
def bootstrap_os(c, suite="bookworm", name=None, mirror=None, variant=None, force=False, docker=None,
                 config=None, dry_run=False):
    """Make a base OS image with debootstrap (for air-gapped sites): the same mirror state, the same digest.

    Builds do this by themselves for a missing debian:<suite> or ubuntu:<suite> FROM image."""
    settings = resolve_config(config, {"build.docker": docker, "bootstrap.mirror": mirror,
                                       "bootstrap.variant": variant}).settings()
    spec = base_os.OsImageSpec(suite=suite, name=name or f"torchbake/debian:{suite}", mirror=settings.bootstrap.mirror,
                               variant=settings.bootstrap.variant, force=force, compression=settings.build.compression)
    check_folders(settings, create=not dry_run)
    client = docker_client(settings)
    base_os.bootstrap_os_image(spec, client, settings.paths.cache_dir / "bootstrap", dry_run=dry_run)


ns = Collection(bootstrap_os)
