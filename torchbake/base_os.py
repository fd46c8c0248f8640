"""Making a base OS image without any registry: ``debootstrap`` + ``docker import``.

For air-gapped sites (and this project's tests): a minimal Debian or Ubuntu root file system
is bootstrapped from the distribution's package mirror into a temporary folder, packed, and
imported as an image. The temporary folder is always removed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from . import command, validation
from .engine import DockerClient
from .errors import CommandError, ConfigurationError

SCRIPTS_DIR = Path("/usr/share/debootstrap/scripts")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True, kw_only=True)
class OsImageSpec:
    suite: str
    name: str  # image reference
    mirror: str = ""  # "" = debootstrap's default mirror
    variant: str = "minbase"
    force: bool = False


def check_spec(spec: OsImageSpec) -> None:
    """Everything that can be wrong before debootstrap starts."""
    try:
        validation.image_reference(spec.name)
    except ValueError as exc:
        raise ConfigurationError(f"--name {spec.name!r} is not a valid image reference: {exc}.") from None
    if not spec.name:
        raise ConfigurationError("--name is required: the image to create, e.g. torchbake/debian:bookworm.")
    if spec.mirror and not spec.mirror.startswith(("http://", "https://", "file://")):
        raise ConfigurationError(f"--mirror {spec.mirror!r} must be an http(s):// or file:// URL of a Debian/Ubuntu mirror.")
    if spec.variant not in ("minbase", "buildd"):
        raise ConfigurationError(f"--variant {spec.variant!r}: expected minbase or buildd.")
    command.resolve_binary("debootstrap", hint="Install it: apt-get install debootstrap.", error=ConfigurationError)
    if SCRIPTS_DIR.is_dir() and not (SCRIPTS_DIR / spec.suite).exists():
        known = sorted(p.name for p in SCRIPTS_DIR.iterdir())
        raise ConfigurationError(
            f"--suite {spec.suite!r} is not a suite this debootstrap knows. Known suites: {', '.join(known)}."
        )
    if os.geteuid() != 0:
        raise ConfigurationError("bootstrap-os runs debootstrap, which needs root. Run it as root (or with sudo).")


def bootstrap_os_image(spec: OsImageSpec, client: DockerClient, work_root: Path, console: Console,
                       *, dry_run: bool = False) -> str:
    """Create the image; returns its id. An existing image is kept unless ``force``."""
    check_spec(spec)
    rootfs_cmd = ["debootstrap", f"--variant={spec.variant}", spec.suite, "<rootfs>"] + ([spec.mirror] if spec.mirror else [])
    import_cmd = [client.binary, "import", "--change", f"ENV PATH={DEFAULT_PATH}", "--change", 'CMD ["/bin/bash"]',
                  "--message", f"torchbake bootstrap-os {spec.suite}", "<rootfs.tar>", spec.name]
    if dry_run:
        console.print(f"Would run:\n  {command.format_command(rootfs_cmd)}\n  tar -C <rootfs> -cf <rootfs.tar> .\n"
                      f"  {command.format_command(import_cmd)}", markup=False)
        return ""
    client.check_engine()
    existing = client.inspect_image(spec.name)
    if existing is not None and not spec.force:
        console.print(f"{spec.name} already exists ({existing['Id'][:19]}); keeping it (--force rebuilds it).")
        return existing["Id"]
    work_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bootstrap-", dir=work_root))
    try:
        rootfs, tarball = work / "rootfs", work / "rootfs.tar"
        command.run([a if a != "<rootfs>" else str(rootfs) for a in rootfs_cmd], error=CommandError,
                    failure_hint="debootstrap needs the distribution mirror; pass --mirror URL for a local one.")
        _trim(rootfs)
        command.run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."])
        result = command.run([a if a != "<rootfs.tar>" else str(tarball) for a in import_cmd], capture=True)
        image_id = result.output.strip().splitlines()[-1]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    console.print(f"[bold green]Created {spec.name}[/] {image_id[:19]}")
    return image_id


def _trim(rootfs: Path) -> None:
    """Drop what debootstrap leaves behind that no image needs: downloaded .debs, apt lists."""
    for folder in (rootfs / "var/cache/apt/archives", rootfs / "var/lib/apt/lists"):
        for path in folder.glob("*"):
            if path.is_file() and path.name != "lock":
                path.unlink()
