"""``invoke lock``: each release (and base) image's whole closure pinned in the team's repository."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

from invoke import Collection

from torchbake.configuration import writable
from torchbake.configuration.options import LOCK_FLAGS, overrides
from torchbake.core import output
from torchbake.core.errors import CommandError, ConfigurationError
from torchbake.core.files import write_atomically
from torchbake.core.lazy import LazyModule
from torchbake.tasks.cli import (
    check_folders,
    current_project,
    docker_client,
    flag_task,
    reports_errors,
    resolve_config,
)

if TYPE_CHECKING:
    from torchbake import variants
    from torchbake.building import platform_builds
    from torchbake.fleet import runner
    from torchbake.inputs import locks
    from torchbake.planning import config as configuration
    from torchbake.supply_chain import image_diff
else:
    locks = LazyModule("torchbake.inputs.locks")
    variants = LazyModule("torchbake.variants")
    platform_builds = LazyModule("torchbake.building.platform_builds")
    image_diff = LazyModule("torchbake.supply_chain.image_diff")
    runner = LazyModule("torchbake.fleet.runner")
    configuration = LazyModule("torchbake.planning.config")


@flag_task(*LOCK_FLAGS)
@reports_errors
def lock(c, **given):
    """Pin each release image's wheels in a lock file (PEP 751).

    The lock holds the image's whole closure and lives in your repository. One lock per image and
    platform in [build] locks (default locks/ beside torchbake.toml): every wheel file with its URL
    and sha256, resolved by uv for the image's Python and platform, and the Debian packages a build
    installs on its FROM image, at their versions. --base locks the base image build-base makes; a
    dev build's flags lock its extensions built from source distributions (each sdist's sha256).
    Take the flags and --config files of the build it is for. Locking again keeps every version;
    --upgrade (or --upgrade-package NAME) lets them move; what changed is printed as `invoke diff`
    words it. Builds follow the lock; --locked refuses one that no longer matches it."""
    if given["only"] and not given["matrix"]:
        raise ConfigurationError("--only picks cells of the matrix: add --matrix.")
    if given["upgrade"] and given["upgrade_package"]:
        raise ConfigurationError("--upgrade lets every version move, --upgrade-package only those named: give one.")
    from packaging.utils import InvalidName, canonicalize_name  # (--list and --help import no library)

    for name in given["upgrade_package"]:  # a project's name (PEP 508), checked before anything is resolved
        try:
            canonicalize_name(name, validate=True)
        except InvalidName:
            raise ConfigurationError(f"--upgrade-package {name!r}: expected a project's name, e.g. numpy or"
                                     " typing-extensions (letters, digits and . _ -, no version or spaces).") from None
    upgrade = True if given["upgrade"] else list(given["upgrade_package"])
    if given["matrix"] and given["base"]:
        raise ConfigurationError("--matrix locks the matrix's base cells with its release cells: leave out --base.")
    if given["matrix"]:
        _lock_matrix(given, upgrade, given["fetch"])
        return
    if given["base"] and given["release"]:
        raise ConfigurationError("--base locks the base image build-base makes, --release a release image: give one.")
    if given["base_img"] and given["base"]:
        raise ConfigurationError("--base-img names a release image's FROM image; a base image's is --sys.")
    if given["sys"] and not given["base"]:
        raise ConfigurationError("--sys names the FROM image of the base image build-base makes: add --base.")
    resolved = resolve_config(given["config"], {**overrides(LOCK_FLAGS, given), "build.locked": False},
                              variant="base" if given["base"] else None)
    settings = resolved.settings()
    if not given["base"] and settings.build.variant == "dev":
        _lock_dev_sdists(settings, upgrade, python_given=resolved.sources["python.version"] != "default")
        return
    if not given["base"] and settings.build.variant != "release":
        raise ConfigurationError("invoke lock locks release images, whose wheels are resolved: add --release (or set"
                                 " [build] variant = \"release\"), or --base for the base image build-base makes."
                                 " A dev image builds torch and the extension from source at their commits.")
    check_folders(settings, create=True)
    python_given = resolved.sources["python.version"] != "default"
    variant = variants.VARIANTS["base" if given["base"] else "release"]
    client = _engine(settings)
    for _, plan in platform_builds.plans(settings, lambda s: variant.plan(s, python_given=python_given)):
        _lock_plan(plan, upgrade, given["fetch"], client)


def _lock_matrix(given, upgrade, fetch: bool) -> None:
    """Each release and base cell of the matrix, locked as `invoke lock` locks one image."""
    from torchbake.tasks.matrix import selected_cells

    found = current_project()
    cells, files = selected_cells(list(given["config"] or []), given["only"], [], [], None, found)
    shared = [f for f in files if set(configuration.load_toml(Path(f))) - {"matrix"}]
    trust = {**overrides(LOCK_FLAGS, given), "build.locked": False}
    environ = dict(os.environ)
    released = [cell for cell in cells if variants.VARIANTS[cell.variant].lock_command]
    # a dev cell's lock holds its extensions' source distributions, where it builds any from one
    from torchbake.variants.dev import sdist_requirements

    from_sdists = [settings for settings in (runner.cell_settings(cell, shared, environ, overrides=trust, project=found)
                                             for cell in cells if cell.variant == "dev")
                   if sdist_requirements(settings.dev.extensions)]
    if not released and not from_sdists:
        raise ConfigurationError("--matrix: no release or base cell is selected, and no dev cell builds an extension"
                                 " from a source distribution; dev images are built from source at their commits.")
    plans = [runner.cell_plan(cell, shared, environ, overrides=trust, project=found) for cell in released]
    if released:
        settings = runner.cell_settings(released[0], shared, environ, overrides=trust, project=found)
        check_folders(settings, create=True)
        client = _engine(settings)
        for plan in plans:  # every cell planned (so checked) before any is locked
            _lock_plan(plan, upgrade, fetch, client)
    for settings in from_sdists:
        _lock_dev_sdists(settings, upgrade, python_given=True)


def _lock_dev_sdists(settings, upgrade, *, python_given: bool) -> None:
    """A dev image's lock: the source distribution of each requirement-style [dev] extension, its
    URL (or path) and sha256 (torchbake.inputs.sdists). Locking again keeps each locked version the
    requirement still allows; --upgrade (or --upgrade-package NAME) takes the newest again."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    from torchbake.core import redaction
    from torchbake.inputs import downloads, sdists
    from torchbake.variants.dev import sdist_requirements

    wanted = sdist_requirements(settings.dev.extensions)
    if not wanted:  # refused before anything is made
        raise ConfigurationError("invoke lock locks release images (add --release, or set [build] variant ="
                                 " \"release\"), the base image build-base makes (--base), and a dev image's"
                                 " extensions built from source distributions, of which [dev] extensions names none (a"
                                 " requirement such as torchsort==0.1.9): torch and the extension are built from source"
                                 " at their commits.")
    check_folders(settings, create=True)
    plan = variants.VARIANTS["dev"].plan(settings, python_given=python_given)
    target = Path(plan.sdist_lock_path)
    writable.check_folder(target.parent, "build.locks", create=True, example="./locks")
    locks.check_path(target)
    try:
        old = sdists.read_lock(target)
    except ConfigurationError as exc:  # made anew: nothing of it is kept
        output.channel().say(("Note:", "yellow"), f" {exc}")
        old = None
    if old is not None:
        locks.refuse_another_images(target, old.image, plan.image)
    freed = set() if upgrade is True else {canonicalize_name(name) for name in upgrade}
    if old is not None and upgrade is not True and (unknown := sorted(freed - set(old.sdists))):
        raise ConfigurationError(f"--upgrade-package {', '.join(unknown)}: not in {target} (it holds"
                                 f" {', '.join(sorted(old.sdists)) or 'nothing'}).")
    output.channel().say(("Locking", "bold"), f" the source distributions of {plan.image}'s extensions")
    cache, found = plan.download_cache(), []
    for requirement in wanted:
        kept = old.locked(requirement) if old is not None and upgrade is not True else None
        if kept is not None and kept.name not in freed and Requirement(requirement).specifier.contains(kept.version):
            found.append(kept)
            continue
        artifact, sdist = plan.newest_sdist(requirement, cache)
        location = redaction.split_credentials(downloads.split_fragment(sdist.url)[0])[0]  # never a password
        found.append(sdists.LockedSdist(sdist.name, sdist.version, location if "://" in location
                                        else str(Path(location).resolve()), artifact.sha256))
    write_atomically(target, sdists.lock_text(wanted, found, plan.image))
    changed = locks.changes(old, sdists.read_lock(target))  # read back: what a build will take
    for name, was, now in changed:
        output.channel().say("  " + image_diff.Change("python", name, was, now).text())
    what = "new" if old is None else f"{len(changed)} changed" if changed else "unchanged"
    output.channel().say(("Locked", "green"), f" {target}: {len(found)} source distribution{'s' * (len(found) != 1)},"
                                              f" {what}")


def _engine(settings):
    """The engine's client, to read each FROM image; None where no engine answers (a lock needs none)."""
    from torchbake.core.errors import EngineError

    try:
        return docker_client(settings, for_build=False)
    except EngineError:
        return None


def _lock_plan(plan, upgrade, fetch: bool, client) -> None:
    """The lock of one plan's image written (its versions kept but those ``upgrade`` frees), and
    what changed printed; with ``fetch``, its wheels downloaded into the cache."""
    channel = output.channel()
    target = Path(plan.lock_path)
    writable.check_folder(target.parent, "build.locks", create=True, example="./locks")
    locks.check_path(target)
    try:
        old = locks.read(target, plan.python_version, plan.wheel_options.platforms)
    except ConfigurationError as exc:  # made anew: nothing of it is kept
        channel.say(("Note:", "yellow"), f" {exc}")
        old = None
    if old is not None:
        locks.refuse_another_images(target, old.image, plan.image)
    if old is not None and upgrade is not True:
        from packaging.utils import canonicalize_name

        unknown = [name for name in upgrade if canonicalize_name(name) not in old.versions()]
        debs = [name for name in unknown if name in old.debs()]
        if debs:
            raise ConfigurationError(f"--upgrade-package {', '.join(debs)}: a Debian package of {target}; the Debian"
                                     " versions move together, with --upgrade (the mirror asked again).")
        if unknown:
            raise ConfigurationError(f"--upgrade-package {', '.join(unknown)}: not in {target} (it holds"
                                     f" {', '.join(sorted(old.versions()))}).")
    day, current = plan.lock_day()  # a base's build requirements: as of their day (its PyTorch tree tells it)
    uv = locks.host_uv(plan.python_options, plan.wheel_options, plan.python_version,
                       Path(plan.path_options.cache_dir).expanduser(), None)
    channel.say(("Locking", "bold"), f" {plan.image} for Python {plan.python_version} on {plan.lock_platform}")
    base = _base_identity(plan, client)
    # the Debian versions: kept as locked while the base is the same (--upgrade asks the mirror again)
    kept = old is not None and "debs" in old.made_for and upgrade is not True and old.made_for.get("base") == base
    debs = old.debs() if kept else _debs_above(plan, client) if base else None
    text = locks.make(uv, plan.lock_requirements(), plan.python_version, plan.lock_platform, plan.wheel_options,
                      target=target, upgrade=upgrade, keep=old is not None, base=base, debs=debs, log_file=None,
                      day=day, current=current, as_of=plan.lock_as_of(), image=plan.image)
    checked = write_atomically(target.with_name(f".{target.name}.new"), text)  # beside it: its paths hold there
    try:
        new = locks.read(checked, plan.python_version, plan.wheel_options.platforms)
        checked.replace(target)
    finally:
        checked.unlink(missing_ok=True)
    new = dataclasses.replace(new, path=target)
    changed = locks.changes(old, new)
    before_debs, after_debs = (old.debs() if old is not None else {}), debs or {}
    changed += [(name, before_debs.get(name, ""), after_debs.get(name, "")) for name in sorted({*before_debs, *after_debs})
                if before_debs.get(name) != after_debs.get(name)]
    for name, before, after in changed:
        channel.say("  " + image_diff.Change("python", name, before, after).text())
    was = (old.made_for.get("base") or {}).get("content-id", "") if old is not None else ""
    if base and was and was != base["content-id"]:
        changed.append(("base", was, base["content-id"]))
        channel.say(f"  base {plan.base_image} {was[:19]} → {base['content-id'][:19]}")
    what = "new" if old is None else f"{len(changed)} changed" if changed else "unchanged"
    channel.say(("Locked", "green"), f" {target}: {len(new.wheels)} wheels, {len(after_debs)} Debian packages, {what}"
                + ("" if base else f"; its FROM image {plan.base_image} is not on the engine, so the lock does not"
                   " hold the build to it (build once, then lock again)"))
    if fetch:
        cache = plan.download_cache()
        for wheel in new.wheels:
            locks.fetch(wheel, target.name, cache, plan.wheel_options)
        channel.say(("Fetched", "green"), f" {len(new.wheels)} wheels into {cache.root}, each checked")


def _debs_above(plan, client) -> dict[str, str]:
    """Name → version of each Debian package a build of ``plan`` installs on top of its FROM image,
    as the mirror has them now: the image's own OS step (common/install_os_packages.sh) asked in a
    throwaway container of the FROM image what apt would fetch; another platform's asked emulated
    (QEMU, about 10 s). {} where this host cannot run that platform's programs (said)."""
    from torchbake.configuration import platforms
    from torchbake.core.data import COMMON_DIR

    foreign = bool(plan.platform) and plan.platform != platforms.host().name
    why_not = platforms.why_not_here(platforms.parse(plan.platform)) if foreign else ""
    if why_not:
        output.channel().say(f"  Debian packages: not locked for {plan.platform}: {why_not}")
        return {}
    if foreign:
        output.channel().say(f"  Debian packages: asking apt in {plan.base_image} for {plan.platform}, emulated")
    script = (COMMON_DIR / "install_os_packages.sh").read_text()
    result = client.run_capture(plan.base_image, ["-c", script, "install_os_packages.sh", *plan.os_step_args()],
                                entrypoint="bash", network=plan.build_options.network or None,
                                environment={"TORCHBAKE_APT_PLAN": "1"}, platform=plan.platform or None)
    if result.returncode != 0:
        raise CommandError(f"Could not ask apt in {plan.base_image} which Debian packages a build installs:\n"
                           f"{result.output[-2000:]}")
    return {line.split()[1]: line.split()[2] for line in result.output.splitlines()
            if line.startswith("torchbake-deb ") and len(line.split()) == 3}


def _base_identity(plan, client) -> dict[str, str]:
    """The plan's FROM image as the engine holds it (reference, content-id, manifest digest); {}
    when no engine answers or it lacks the image (a lock needs no engine; it then holds no base)."""
    from torchbake.adapters.engine import content_id, manifest_digest
    from torchbake.core.errors import EngineError

    try:
        info = client.inspect_image(plan.base_image) if client is not None else None
    except EngineError:
        return {}
    if info is None:
        return {}
    digest = manifest_digest(info, plan.base_image)
    return {"reference": plan.base_image, "content-id": content_id(info, plan.platform), **({"digest": digest} if digest
                                                                                              else {})}


ns = Collection(lock)
