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

import dataclasses
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from torchbake.adapters import command
from torchbake.adapters.engine import DockerClient
from torchbake.configuration import platforms, validation
from torchbake.configuration.os_releases import OS_RELEASES, python_mismatch, release_of_reference, suite_of
from torchbake.core import output
from torchbake.core.build_time import created_time, source_date_epoch
from torchbake.core.errors import CommandError, ConfigurationError
from torchbake.core.files import mount_table
from torchbake.core.redaction import redact, split_credentials
from torchbake.inputs import image_archive
from torchbake.inputs.downloads import file_digests, file_lock

SCRIPTS_DIR = Path("/usr/share/debootstrap/scripts")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LABEL_PREFIX = "torchbake.bootstrap."
BOOTSTRAP_DIR = "bootstrap"  # in the cache folder: bootstraps' temporary root file systems, locks, kept packages
PACKAGES_DIR = "debs"  # in BOOTSTRAP_DIR: the .deb files debootstrap downloaded, a folder per suite


def known_suites() -> list[str]:
    return sorted(p.name for p in SCRIPTS_DIR.iterdir()) if SCRIPTS_DIR.is_dir() else []


@dataclass(frozen=True, kw_only=True)
class OsImageSpec:
    suite: str
    name: str  # image reference
    mirror: str = ""  # "" = debootstrap's default mirror for the suite
    variant: str = "minbase"
    force: bool = False
    compression: str = "zstd"  # of the image's layer ([build] compression)
    platforms: tuple[str, ...] = ()  # one image per platform under one name (an index); () = this host's only
    include: tuple[str, ...] = ()  # packages debootstrap installs too


def check_spec(spec: OsImageSpec, *, flag: str = "--suite") -> None:
    """Everything that can be wrong before debootstrap starts."""
    if not re.fullmatch(r"[a-z][a-z0-9._-]*", spec.suite):  # the suite first: the default --name is made of it
        raise ConfigurationError(f"{flag} {spec.suite!r} is not a suite name; expected one such as bookworm"
                                 f" ({', '.join(known_suites()) or 'the suites debootstrap knows'}).")
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


PLATFORMS_LABEL = LABEL_PREFIX + "platforms"  # on a multi-platform image: every platform it holds


def platforms_of(info: dict) -> tuple[str, ...]:
    """The platforms an OS image torchbake made holds (its label), () when it did not say."""
    label = ((info.get("Config") or {}).get("Labels") or {}).get(PLATFORMS_LABEL, "")
    return tuple(name for name in label.split(",") if name)


def image_spec(spec: OsImageSpec, platform: platforms.Platform | None = None) -> image_archive.ImageSpec:
    """The image around the root file system: PATH, a shell, and labels saying how it was made
    (the date only with SOURCE_DATE_EPOCH, its date: the moment of making is not in the image). A
    mirror's credentials stay out of it."""
    mirror = redact(spec.mirror)
    labels = {"suite": spec.suite, "mirror": mirror or "debootstrap's default", "variant": spec.variant}
    if created := created_time():
        labels["date"] = created[:10]
    if spec.platforms:
        labels["platforms"] = ",".join(spec.platforms)
    if spec.include:
        labels["include"] = ",".join(spec.include)
    arch = f" --arch={platform.arch}" if platform else ""
    arch += f" --include={','.join(spec.include)}" if spec.include else ""
    return image_archive.ImageSpec(
        reference=spec.name, epoch=source_date_epoch(), compression=spec.compression,
        created_by=f"debootstrap --variant={spec.variant}{arch} {spec.suite} {mirror}".rstrip(),
        env=[f"PATH={DEFAULT_PATH}"], cmd=["/bin/bash"], labels={LABEL_PREFIX + k: v for k, v in labels.items()},
        architecture=platform.arch if platform else "amd64")


def bootstrap_command(spec: OsImageSpec, rootfs: str = "<rootfs>", packages: str = "<cache>/bootstrap/debs/<suite>",
                      platform: platforms.Platform | None = None) -> list[str]:
    """debootstrap's command line; ``packages``: where the .deb files it downloads are kept for
    the next bootstrap of the suite (it checks each against the mirror's index before using it;
    each file's name says its architecture). ``platform``: another architecture's system, its
    programs run under QEMU (debootstrap's second stage)."""
    return (["debootstrap", f"--variant={spec.variant}", *([f"--arch={platform.arch}"] if platform else []),
             *([f"--include={','.join(spec.include)}"] if spec.include else []),
             f"--cache-dir={packages}", "--keep-debootstrap-dir", spec.suite, rootfs]
            + ([spec.mirror] if spec.mirror else []))


def package_cache(work_root: Path, suite: str) -> Path:
    """The .deb files debootstrap downloaded for ``suite`` (the cache folder's ``bootstrap/debs/``;
    `invoke gc` removes them when they are old or over budget, under :func:`package_lock`)."""
    return work_root / PACKAGES_DIR / suite


def package_lock(packages: Path) -> Path:
    """The lock a bootstrap holds while debootstrap reads and writes ``packages``."""
    return packages.with_suffix(".lock")


def package_caches(cache_dir: Path) -> list[Path]:
    """Every suite's kept packages in the cache folder ``cache_dir``."""
    folder = cache_dir / BOOTSTRAP_DIR / PACKAGES_DIR
    return sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def bootstrap_os_image(spec: OsImageSpec, client: DockerClient, work_root: Path, *, dry_run: bool = False) -> str:
    """Create the image; returns its id. An existing image is kept unless ``force``. The same
    mirror state gives the same image digest on any engine: what debootstrap writes of the moment
    (logs, caches, dates) is cleared, and the image is written as an archive, not imported."""
    check_spec(spec)
    wanted = _platforms_to_make(spec)
    if dry_run:
        tar = image_archive.tar_command(Path("<rootfs>"), Path("<rootfs.tar>"), source_date_epoch())
        commands = "".join(f"  {command.format_command(bootstrap_command(spec, platform=p))}\n" for p in wanted)
        output.channel().say(f"Would run:\n{commands}"
                             f"  {command.format_command(tar)}\n"
                             f"  then load <rootfs.tar> as {spec.name}, its layer {spec.compression}-compressed"
                             f" (an OCI archive: docker load -i <image.oci.tar>)"
                             + (f", one image per platform ({', '.join(spec.platforms)}) under that one name"
                                if len(wanted) > 1 else ""))
        return ""
    client.check_engine()
    # One lock per image reference: two builds at once that need the same missing image make it once.
    with file_lock(work_root / (re.sub(r"[^A-Za-z0-9_.-]+", "_", spec.name) + ".lock")):
        existing = client.inspect_image(spec.name)
        if existing is not None and not spec.force and set(spec.platforms) <= set(_held(existing)):
            output.channel().say(f"{spec.name} already exists ({existing['Id'][:19]}); keeping it (--force rebuilds it).")
            return existing["Id"]
        if existing is not None and not spec.force:  # it lacks a platform: made again with every platform it had
            had = _held(existing)
            spec = dataclasses.replace(spec, platforms=tuple(dict.fromkeys((*had, *spec.platforms))))
            wanted = _platforms_to_make(spec)
            output.channel().say(f"{spec.name} holds {', '.join(had)}; making it again for {', '.join(spec.platforms)}")
        work_root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="bootstrap-", dir=work_root))
        try:
            packages = package_cache(work_root, spec.suite).resolve()
            packages.mkdir(parents=True, exist_ok=True)
            roots = []
            for platform in wanted:
                rootfs = work / (f"rootfs-{platform.arch}" if platform else "rootfs")
                if platform is not None:
                    output.channel().say(f"Bootstrapping {spec.suite} for {platform.name}"
                                         + ("" if platform == platforms.host() else " (emulated: a few minutes)"))
                with file_lock(package_lock(packages)):
                    command.run(bootstrap_command(spec, str(rootfs), str(packages), platform), error=CommandError,
                                env={"SOURCE_DATE_EPOCH": str(source_date_epoch())},
                                failure_hint=f"debootstrap could not make {spec.suite} from"
                                             f" {spec.mirror or 'its default mirror'}; nothing was imported. Check that"
                                             " the mirror answers, or name a reachable one: [bootstrap] mirror in a"
                                             " --config file, TORCHBAKE_BOOTSTRAP_MIRROR=URL, or `invoke bootstrap-os"
                                             " --mirror URL`.")
                unmount_below(rootfs)  # debootstrap's second stage mounts /proc and /sys; none is packed
                _trim(rootfs, source_date_epoch())
                roots.append((rootfs, image_spec(spec, platform)))
            archive, digest = image_archive.pack_platforms(roots, work, spec.name)
            output.channel().say(f"Loading {spec.name} ({digest[:19]})")
            client.load_image(archive)
            info = client.inspect_image(spec.name)
            if info is None:
                raise CommandError(f"Loading {archive.name} gave no image {spec.name}; see `docker images`.")
            image_id = info["Id"]
        finally:
            remove_rootfs(work)
    output.channel().say(f"Created {spec.name} {image_id[:19]} (debootstrap {spec.suite})")
    return image_id


def _platforms_to_make(spec: OsImageSpec) -> list[platforms.Platform | None]:
    """The platforms ``spec`` makes (None: this host's alone, no --arch), each one this host can
    run: debootstrap's second stage runs the platform's own programs."""
    wanted = [platforms.parse(name) for name in spec.platforms] or [None]
    for platform in wanted:
        if platform is not None and (why := platforms.why_not_here(platform)):
            raise ConfigurationError(f"Cannot bootstrap {spec.suite} for {platform.name}: {why}.")
    return wanted


def mounts_below(folder: Path) -> list[str]:
    """Mount points at or below ``folder`` (debootstrap mounts /proc and /sys in its target)."""
    prefix = folder.resolve()
    found = [str(point) for point, _kind in mount_table() or () if point == prefix or prefix in point.parents]
    return sorted(found, key=len, reverse=True)


def unmount_below(folder: Path, consequence: str = "nothing was packed. Unmount them (umount --lazy PATH) and run"
                                                    " the command again") -> None:
    """Unmount everything mounted at or below ``folder`` (deepest first); fails naming what stays
    and ``consequence``."""
    for point in mounts_below(folder):
        command.run(["umount", "--lazy", point], check=False, capture=True, echo=False)
    if left := mounts_below(folder):
        raise CommandError(f"{folder} still has mounts below it ({', '.join(left)}); {consequence}.")


def remove_rootfs(work: Path) -> None:
    """Remove a temporary root file system: unmount what debootstrap left mounted below it, then
    delete it without crossing into any file system still mounted there."""
    unmount_below(work, "it was not removed. Unmount them (umount --lazy PATH), then delete the folder")
    # rm: a quarter of shutil.rmtree's time on a root file system's 7,000 files (1 s against 4 s)
    command.run(["rm", "-rf", "--one-file-system", "--", str(work)], check=False, capture=True, echo=False)


# What debootstrap writes of the moment or of this host, emptied or removed (reproducible-builds.org's
# list for Debian chroots, as mmdebstrap clears it): logs, caches, the host's name and resolver.
EMPTIED = ("var/log/dpkg.log", "var/log/alternatives.log", "var/log/bootstrap.log", "var/log/apt/history.log",
           "var/log/apt/term.log", "etc/machine-id", "etc/hostname", "etc/resolv.conf")
REMOVED = ("var/cache/ldconfig/aux-cache", "var/cache/apt/pkgcache.bin", "var/cache/apt/srcpkgcache.bin",
           "var/lib/dbus/machine-id", "var/log/apt/eipp.log.xz")


DEBS_RECORD = "etc/torchbake/debs.tsv"  # in an image: file, URL, sha256, sha512 of each .deb installed (common/install_os_packages.sh)


def _record_debs(rootfs: Path) -> None:
    """Each .deb debootstrap installed, with the URL it came from (never its credentials) and its
    digests, in the image's record of them: the SBOMs name the base's packages by file and SHA-512."""
    urls = {}
    deburis = rootfs / "debootstrap" / "deburis"  # "PACKAGE VERSION URL" lines
    for line in deburis.read_text().splitlines() if deburis.is_file() else ():
        package, version, url = (line.split(" ", 2) + ["", ""])[:3]
        urls[(package, version)] = split_credentials(url)[0]  # never a mirror's credentials in the image
    lines = []
    for deb in sorted((rootfs / "var/cache/apt/archives").glob("*.deb")):
        package, version, _arch = (unquote(deb.name[:-len(".deb")]).split("_") + ["", ""])[:3]
        sha256, sha512 = file_digests(deb, "sha256", "sha512")
        lines.append(f"{deb.name}\t{urls.get((package, version), '')}\t{sha256}\t{sha512}\n")
    if lines:
        record = rootfs / DEBS_RECORD
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text("".join(lines))


def _trim(rootfs: Path, epoch: int) -> None:
    """Drop what no image needs (downloaded .debs, apt lists, debootstrap's own folder) and what
    would make two bootstraps of the same mirror differ: logs, caches, host files, and the day of
    each password change. What was installed from which .deb is kept (:func:`_record_debs`)."""
    _record_debs(rootfs)
    shutil.rmtree(rootfs / "debootstrap", ignore_errors=True)
    for folder in (rootfs / "var/cache/apt/archives", rootfs / "var/lib/apt/lists"):
        for path in folder.glob("*"):
            if path.is_file() and path.name != "lock":
                path.unlink()
    for name in EMPTIED:
        path = rootfs / name
        if path.is_file() and not path.is_symlink():
            path.write_bytes(b"")
    for name in REMOVED:
        (rootfs / name).unlink(missing_ok=True)
    day = str(epoch // 86400)
    for name in ("etc/shadow", "etc/shadow-"):  # field 3: the day of the last password change
        path = rootfs / name
        if path.is_file():
            lines = [line.split(":") for line in path.read_text().splitlines()]
            path.write_text("".join(":".join(f[:2] + [day] + f[3:] if len(f) > 2 and f[2] else f) + "\n" for f in lines))


@dataclass(frozen=True, kw_only=True)
class OnDemand:
    """How a missing FROM image may be made: ``[bootstrap]`` settings and where to work."""

    auto: bool
    mirror: str
    variant: str
    compression: str
    work_root: Path
    include: tuple[str, ...] = ()

    @classmethod
    def from_settings(cls, settings) -> OnDemand:
        return cls(auto=settings.bootstrap.auto, mirror=settings.bootstrap.mirror, variant=settings.bootstrap.variant,
                   compression=settings.build.compression, work_root=settings.paths.cache_dir / BOOTSTRAP_DIR,
                   include=validation.debian_packages(settings.bootstrap.include))


def _held(info: dict) -> tuple[str, ...]:
    """The platforms an OS image holds: its label's, else (one image) its architecture's."""
    return platforms_of(info) or (f"{info.get('Os') or 'linux'}/{info.get('Architecture') or 'amd64'}",)


def _made_here(info: dict) -> bool:
    """An OS image torchbake bootstrapped (its labels say so): it can be made again for more platforms."""
    return LABEL_PREFIX + "suite" in ((info.get("Config") or {}).get("Labels") or {})


def lacking_platforms(client: DockerClient, reference: str, info: dict, wanted: tuple[str, ...]) -> tuple[str, ...]:
    """The platforms of ``wanted`` the engine holds no image of ``reference`` for. An image
    torchbake made says which it holds (its label, else its one architecture); any other is
    asked per platform: the engine inspects an index as this host's platform only. No image is
    ever built FROM another platform's: BuildKit would run the arm64 steps on an amd64 root."""
    held = set(_held(info))
    if _made_here(info):
        return tuple(name for name in wanted if name not in held)
    return tuple(name for name in wanted if name not in held and not client.holds_platform(reference, name))


def _lacking_error(reference: str, flag: str, info: dict, lacking: tuple[str, ...], why: str) -> ConfigurationError:
    """A FROM image the engine holds for other platforms than a build's, and the command that makes it."""
    suite = suite_of(reference)
    if _made_here(info) or suite in known_suites():
        wanted = tuple(dict.fromkeys((*_held(info), *lacking)))
        fix = (f"Make it: `invoke bootstrap-os --suite {suite or info['Config']['Labels'][LABEL_PREFIX + 'suite']}"
               f" --name {reference} --platform {','.join(wanted)} --force`.")
    else:
        fix = (f"Pull that platform's image (`{' && '.join(f'docker pull --platform {name} {reference}' for name in lacking)}`),"
               " or build it and load it under this name.")
    return ConfigurationError(
        f"Base image {reference!r} ({flag}) is on this engine for {', '.join(_held(info))} only, not for"
        f" {', '.join(lacking)}{why}; no image is built FROM another platform's. {fix}")


def _refuse_unless_remade(reference: str, flag: str, info: dict, lacking: tuple[str, ...], on_demand: OnDemand) -> None:
    """A build and its plan alike: a base lacking platforms is made again only where torchbake
    made it and may bootstrap; otherwise refused, naming the command that makes it."""
    if not _made_here(info):
        raise _lacking_error(reference, flag, info, lacking, "")
    if not on_demand.auto:
        raise _lacking_error(reference, flag, info, lacking, " and making it again with debootstrap is switched"
                             " off (--no-bootstrap or [bootstrap] auto = false)")


def pending_platforms(client: DockerClient, reference: str, flag: str, info: dict, on_demand: OnDemand,
                      wanted: tuple[str, ...]) -> str:
    """What a build would do about a FROM image the engine holds for fewer platforms than
    ``wanted``, in words for a plan ("" when it holds them all); a build that would refuse it
    refuses the plan the same way (:func:`ensure_os_image` decides both)."""
    lacking = lacking_platforms(client, reference, info, wanted)
    if not lacking:
        return ""
    _refuse_unless_remade(reference, flag, info, lacking, on_demand)
    return (f"{reference} is on this engine for {', '.join(_held(info))} only; it will be made again with"
            f" debootstrap for {', '.join(dict.fromkeys((*_held(info), *lacking)))}")


def how_missing_is_made(reference: str, on_demand: OnDemand) -> str:
    """What a build would do about a missing FROM image, in words (for plans)."""
    suite = suite_of(reference)
    if suite and on_demand.auto:
        return f"pulled, or else made with debootstrap ({suite}, {on_demand.mirror or 'default mirror'})"
    return "pulled"


def ensure_os_image(reference: str, flag: str, client: DockerClient, on_demand: OnDemand,
                    *, python: str = "", platforms_wanted: tuple[str, ...] = ()) -> dict:
    """The FROM image's inspect record, pulling or bootstrapping it when it is missing, or (one
    torchbake made) when it lacks one of ``platforms_wanted``.

    Checks first (no slow work): that a Debian/Ubuntu reference names a suite debootstrap
    knows, and that its release ships ``python`` (when given: provider "os")."""
    info = client.inspect_image(reference)
    lacking = lacking_platforms(client, reference, info, platforms_wanted) if info is not None else ()
    if info is not None and not lacking:
        return info
    if info is not None:  # one torchbake made, for fewer platforms: made again with them all
        _refuse_unless_remade(reference, flag, info, lacking, on_demand)
        output.channel().say(f"{reference} ({flag}) is on this engine for {', '.join(_held(info))} only; making it"
                             f" for {', '.join(lacking)} too with debootstrap")
        spec = OsImageSpec(suite=info["Config"]["Labels"][LABEL_PREFIX + "suite"], name=reference,
                           mirror=on_demand.mirror, variant=on_demand.variant, compression=on_demand.compression,
                           platforms=platforms_wanted, include=on_demand.include)
        bootstrap_os_image(spec, client, on_demand.work_root)
        return _made(client, reference)
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
    spec = OsImageSpec(suite=suite, name=reference, mirror=on_demand.mirror, variant=on_demand.variant,
                       compression=on_demand.compression, platforms=platforms_wanted, include=on_demand.include)
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
    return _made(client, reference)


def _made(client: DockerClient, reference: str) -> dict:
    """The inspect record of the OS image a bootstrap just loaded."""
    made = client.inspect_image(reference)
    if made is None:
        raise CommandError(f"{reference} was imported but the engine does not list it; see `docker images`.")
    return made
