"""Base OS images: making a missing one (which release ships which Python: os_releases).

A build's FROM image (``--sys``, ``--base-img``, ``image.base``) that is not on the engine is
pulled where a registry answers; otherwise a ``debian:<suite>`` or ``ubuntu:<suite>`` reference
is made without any registry, as ``invoke bootstrap-os`` makes one: a minimal root file system
from the distribution's package mirror (``debootstrap``, progress shown), packed and imported
with labels that say how it was made. It is made once: a lock per reference makes a second build
wait for the first, and an existing image is kept. The temporary root file system is always
removed, mounts below it first, and an image appears only when the whole bootstrap succeeded.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from . import command, output, validation
from .downloads import file_lock
from .engine import DockerClient
from .errors import CommandError, ConfigurationError
from .os_releases import OS_RELEASES, python_mismatch, release_of_reference, suite_of

SCRIPTS_DIR = Path("/usr/share/debootstrap/scripts")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LABEL_PREFIX = "torchbake.bootstrap."


def known_suites() -> list[str]:
    return sorted(p.name for p in SCRIPTS_DIR.iterdir()) if SCRIPTS_DIR.is_dir() else []


@dataclass(frozen=True, kw_only=True)
class OsImageSpec:
    suite: str
    name: str  # image reference
    mirror: str = ""  # "" = debootstrap's default mirror for the suite
    variant: str = "minbase"
    force: bool = False


def check_spec(spec: OsImageSpec, *, flag: str = "--suite") -> None:
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
    suites = known_suites()
    release = next((r for r in OS_RELEASES if r.suite == spec.suite), None)
    if release is not None and suites and spec.suite not in suites:  # a release torchbake knows; this host cannot make it
        makeable = ", ".join(f"{r.os_id}:{r.suite} (Python {r.python})" for r in OS_RELEASES if r.suite in suites)
        raise ConfigurationError(
            f"{spec.name} ({release.os_id} {release.version}, suite {spec.suite}) cannot be made on this host: its"
            f" debootstrap has no script for {spec.suite} (it is older than that release). What works here: load the"
            f" image (`docker load -i FILE`) or pull it where a registry answers; install a debootstrap that knows"
            f" {spec.suite} (e.g. from backports); choose a base this host can make: {makeable}; or keep a base and set"
            f' [python] provider = "standalone" with a standalone_url for Python {release.python}.'
        )
    if not spec.suite or (suites and spec.suite not in suites):
        releases = ", ".join(f"{r.suite} ({r.os_id} {r.version}, Python {r.python})" for r in OS_RELEASES)
        raise ConfigurationError(
            f"{flag} {spec.suite!r} is not a suite this debootstrap knows. Releases torchbake knows: {releases};"
            f" every suite debootstrap knows: {', '.join(suites)}."
        )
    if os.geteuid() != 0:
        raise ConfigurationError("debootstrap needs root: run this as root (or with sudo).")


def import_changes(spec: OsImageSpec) -> list[str]:
    """The Dockerfile instructions the import applies: PATH, a shell, and labels saying how it was made."""
    labels = {"suite": spec.suite, "mirror": spec.mirror or "debootstrap's default", "variant": spec.variant,
              "date": datetime.now(UTC).strftime("%Y-%m-%d")}
    return [f"ENV PATH={DEFAULT_PATH}", 'CMD ["/bin/bash"]',
            *(f'LABEL {LABEL_PREFIX}{key}="{value}"' for key, value in labels.items())]


def bootstrap_commands(spec: OsImageSpec, binary: str, rootfs: str = "<rootfs>",
                       tarball: str = "<rootfs.tar>") -> tuple[list[str], list[str]]:
    """The debootstrap command line, and the `docker import` one that does what torchbake does
    through the Engine API (shown, so a user can do it by hand)."""
    rootfs_cmd = ["debootstrap", f"--variant={spec.variant}", spec.suite, rootfs] + ([spec.mirror] if spec.mirror else [])
    import_cmd = [binary, "import"]
    for change in import_changes(spec):
        import_cmd += ["--change", change]
    return rootfs_cmd, import_cmd + [tarball, spec.name]


def bootstrap_os_image(spec: OsImageSpec, client: DockerClient, work_root: Path, *, dry_run: bool = False) -> str:
    """Create the image; returns its id. An existing image is kept unless ``force``."""
    check_spec(spec)
    if dry_run:
        rootfs_cmd, import_cmd = bootstrap_commands(spec, client.binary)
        output.channel().say(f"Would run:\n  {command.format_command(rootfs_cmd)}\n  tar -C <rootfs> -cf <rootfs.tar> .\n"
            f"  {command.format_command(import_cmd)}")
        return ""
    client.check_engine()
    # One lock per image reference: two builds at once that need the same missing image make it once.
    with file_lock(work_root / (re.sub(r"[^A-Za-z0-9_.-]+", "_", spec.name) + ".lock")):
        existing = client.inspect_image(spec.name)
        if existing is not None and not spec.force:
            output.channel().say(f"{spec.name} already exists ({existing['Id'][:19]}); keeping it (--force rebuilds it).")
            return existing["Id"]
        work_root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="bootstrap-", dir=work_root))
        try:
            rootfs, tarball = work / "rootfs", work / "rootfs.tar"
            rootfs_cmd, import_cmd = bootstrap_commands(spec, client.binary, str(rootfs), str(tarball))
            command.run(rootfs_cmd, error=CommandError,
                        failure_hint=f"debootstrap could not make {spec.suite} from"
                                     f" {spec.mirror or 'its default mirror'}; nothing was imported. Check that the"
                                     " mirror answers, or name a reachable one: [bootstrap] mirror in a --config file,"
                                     " TORCHBAKE_BOOTSTRAP_MIRROR=URL, or `invoke bootstrap-os --mirror URL`.")
            _trim(rootfs)
            command.run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."])
            command.show_command(import_cmd)
            image_id = client.import_image(tarball, spec.name, import_changes(spec))
        finally:
            remove_rootfs(work)
    output.channel().say(f"Created {spec.name} {image_id[:19]} (debootstrap {spec.suite})")
    return image_id


def mounts_below(folder: Path) -> list[str]:
    """Mount points at or below ``folder`` (debootstrap mounts /proc and /sys in its target)."""
    prefix = str(folder.resolve())
    found = []
    with contextlib.suppress(OSError), open("/proc/self/mounts") as fh:
        for line in fh:
            point = line.split()[1].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return sorted(found, key=len, reverse=True)


def remove_rootfs(work: Path) -> None:
    """Remove a temporary root file system: unmount what debootstrap left mounted below it, then
    delete it without crossing into any file system still mounted there."""
    for point in mounts_below(work):
        command.run(["umount", "--lazy", point], check=False, capture=True, echo=False)
    if mounts_below(work):
        raise CommandError(f"{work} still has mounts below it ({', '.join(mounts_below(work))}); it was not"
                           " removed. Unmount them (umount --lazy PATH), then delete the folder.")
    shutil.rmtree(work, ignore_errors=True)


def _trim(rootfs: Path) -> None:
    """Drop what debootstrap leaves behind that no image needs: downloaded .debs, apt lists."""
    for folder in (rootfs / "var/cache/apt/archives", rootfs / "var/lib/apt/lists"):
        for path in folder.glob("*"):
            if path.is_file() and path.name != "lock":
                path.unlink()


@dataclass(frozen=True, kw_only=True)
class OnDemand:
    """How a missing FROM image may be made: ``[bootstrap]`` settings and where to work."""

    auto: bool
    mirror: str
    variant: str
    work_root: Path

    @classmethod
    def from_settings(cls, settings) -> OnDemand:
        return cls(auto=settings.bootstrap.auto, mirror=settings.bootstrap.mirror,
                   variant=settings.bootstrap.variant, work_root=settings.paths.cache_dir / "bootstrap")


def how_missing_is_made(reference: str, on_demand: OnDemand) -> str:
    """What a build would do about a missing FROM image, in words (for plans)."""
    suite = suite_of(reference)
    if suite and on_demand.auto:
        return f"pulled, or else made with debootstrap ({suite}, {on_demand.mirror or 'default mirror'})"
    return "pulled"


def ensure_os_image(reference: str, flag: str, client: DockerClient, on_demand: OnDemand,
                    *, python: str = "") -> dict:
    """The FROM image's inspect record, pulling or bootstrapping it when it is missing.

    Checks first (no slow work): that a Debian/Ubuntu reference names a suite debootstrap
    knows, and that its release ships ``python`` (when given: provider "os")."""
    info = client.inspect_image(reference)
    if info is not None:
        return info
    suite = suite_of(reference)
    release = release_of_reference(reference)
    if suite and python and release and release.python != python:
        raise python_mismatch(python, reference, release, flag)
    output.channel().say(f"{reference} ({flag}) is not on this engine; trying `docker pull {reference}`")
    registry_said = client.pull(reference)
    if not registry_said:
        found = client.inspect_image(reference)
        if found is not None:
            return found
        registry_said = "the pull gave no image"
    if not suite:
        raise ConfigurationError(
            f"Base image {reference!r} ({flag}) does not exist on this engine and could not be pulled"
            f" ({registry_said}). Load it (`docker load -i FILE`) or pull it where a registry answers; only"
            " debian:<suite> and ubuntu:<suite> images are made offline."
        )
    spec = OsImageSpec(suite=suite, name=reference, mirror=on_demand.mirror, variant=on_demand.variant)
    if not on_demand.auto:  # said first: whether this host's debootstrap could make it does not matter then
        raise ConfigurationError(
            f"Base image {reference!r} ({flag}) does not exist on this engine and could not be pulled"
            f" ({registry_said}); making it with debootstrap is switched off (--no-bootstrap or [bootstrap] auto"
            " = false). Load or pull it"
            + (f", or make it with `invoke bootstrap-os --suite {suite} --name {reference}`." if suite in known_suites()
               else f" (this host's debootstrap cannot make suite {suite} either).")
        )
    check_spec(spec, flag=f"{flag} {reference}: suite")
    output.channel().say(f"Making {reference} with debootstrap ({suite}); it is kept for later builds")
    bootstrap_os_image(spec, client, on_demand.work_root)
    made = client.inspect_image(reference)
    if made is None:
        raise CommandError(f"{reference} was imported but the engine does not list it; see `docker images`.")
    return made
