"""What torchbake may remove, and removing it (`invoke gc`): its own images no tag or container
uses (and beyond the newest N per repository), cache entries no build used for a while, old logs
and manifests, and the engine's build cache down to a budget.

Never: an image torchbake did not build on this host (the record of the images it built decides,
since images built FROM a torchbake image carry its labels), an image a container uses, a cache
entry another torchbake holds (its lock), anything while the engine does not answer. A dry run
lists exactly what a run would remove.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import filelock

from torchbake.adapters.engine import DockerClient, content_id
from torchbake.building.candidates import CANDIDATE_MARK, forget_gone, is_live
from torchbake.building.input_hash import (
    FIRST_BUILT,
    INPUT_HASH_LABEL,
    built_image_ids,
    built_images_file,
    forget_missing,
    read_record,
)
from torchbake.core.errors import EngineError
from torchbake.core.files import lock_held, read_back_object
from torchbake.core.output import human_size
from torchbake.core.status import ON_THIS_ENGINE
from torchbake.inputs.base_os import package_caches, package_lock
from torchbake.inputs.context import context_lock
from torchbake.supply_chain import attestations


@dataclass(frozen=True)
class Limits:
    keep: int  # newest images kept per repository (besides those a container uses)
    older_than: float  # seconds: cache entries unused, and logs, older than this go
    max_cache: int  # bytes the cache folder may hold (0 = no budget)
    max_build_cache: int  # bytes torchbake's build-cache records may hold (0 = no budget)
    engine_build_cache: bool = False  # the budget is the engine's whole, shared build cache's


@dataclass(frozen=True)
class Removal:
    kind: str  # image | container | download | wheel | program | debootstrap packages | context | log | build cache
    what: str  # as shown: tags, a path
    size: int  # bytes
    why: str
    target: str = ""  # what is removed: an image id, a path (default: ``what``)


def last_used(path: Path) -> float:
    info = path.stat()
    return max(info.st_atime, info.st_mtime)


# -- images -------------------------------------------------------------------------------------

# what a child image says of its FROM image: by content (torchbake.base.content-id; older images in the
# OCI label), by the manifest digest a registry knows, by the engine's id in the oldest
BASE_LABELS = ("torchbake.base.content-id", "org.opencontainers.image.base.digest")


def image_removals(client: DockerClient, cache_dir: Path, keep: int) -> list[Removal]:
    """torchbake's images that may go: candidate tags an interrupted build left, and images a newer
    build of the same NAME:TAG replaced (beyond the newest ``keep`` of each NAME:TAG, kept for a
    rollback). Never the current image of a tag, an image a container uses, or an image a kept
    image starts FROM (its ``torchbake.base.content-id`` or ``org.opencontainers.image.base.digest``)."""
    ours = built_image_ids(cache_dir)
    first_built = read_record(cache_dir / FIRST_BUILT)
    containers = client.call("ps", "containers", all=True)
    found = [Removal("container", c["Names"][0].lstrip("/"), 0, "a verification container a run cut off left behind",
                     c["Id"]) for c in containers if _stale_probe(c)]
    used = {c.get("ImageID", "") for c in containers if not _stale_probe(c)}
    listed = client.images()
    for image in listed:  # a build stopped between its build and its verification left this tag
        labels = image.get("Labels") or {}
        for tag in image.get("RepoTags") or []:
            if (CANDIDATE_MARK in tag and labels.get("torchbake.version") and image["Id"] not in used
                    and not is_live(tag)):  # a build still verifying or promoting it holds it
                found.append(Removal("image", tag, 0, "a candidate tag an interrupted build left", tag))
    kept = [i for i in listed if _tags(i) or i["Id"] in used or i["Id"] not in ours]
    starts_from = {(i.get("Labels") or {}).get(label, "") for i in kept for label in BASE_LABELS}
    replaced: dict[str, list[dict]] = {}
    for image in listed:
        # a child labels its base by content (engine.content_id); older children by image id
        if (image["Id"] in ours and not _tags(image) and image["Id"] not in used and image["Id"] not in starts_from
                and content_id(client.inspect_image(image["Id"]) or {}) not in starts_from):
            replaced.setdefault(_named(image), []).append(image)
    for name, members in replaced.items():
        # newest first: by when their inputs were first built here (every image carries the same
        # creation time, SOURCE_DATE_EPOCH), then by the engine's time, ties the same way
        members.sort(key=lambda i: (first_built.get((i.get("Labels") or {}).get(INPUT_HASH_LABEL, ""), ""),
                                    i.get("Created", 0), i["Id"]), reverse=True)
        for image in members[keep:]:
            found.append(Removal("image", image["Id"][:19], int(image.get("Size", 0)),
                                 f"a newer build of {name} took its tag; no tag, container or kept image uses it"
                                 + (f" (the newest {keep} such of {name} are kept)" if keep else ""), image["Id"]))
    return found


def _stale_probe(container: dict) -> bool:
    """A verification container (torchbake.probe) that has ended: its run was cut off (the engine
    died under it) before it could remove it. One running, or created and about to start, is a
    verification going on."""
    return (container.get("Labels") or {}).get("torchbake.probe") == "true" and container.get("State") in ("exited", "dead")


def _tags(image: dict) -> list[str]:
    """The image's real tags (no candidate tags, no ``<none>``)."""
    return [t for t in image.get("RepoTags") or [] if t != "<none>:<none>" and CANDIDATE_MARK not in t]


def _named(image: dict) -> str:
    """The NAME:TAG an image was built as (its labels), or its id when they do not say."""
    labels = image.get("Labels") or {}
    title, version = labels.get("org.opencontainers.image.title"), labels.get("org.opencontainers.image.version")
    return f"{title}:{version}" if title and version else image["Id"][:19]


# -- cache folder -------------------------------------------------------------------------------

def _entries(cache_dir: Path) -> Iterator[tuple[str, Path, Path | None]]:
    """(kind, path, lock) of each removable cache entry: a download's folder, a wheel, a program
    unpacked from its wheel, a suite's debootstrap packages, a kept context."""
    downloads = cache_dir / "downloads"
    if downloads.is_dir():
        for folder in sorted(downloads.iterdir()):
            if folder.is_dir():
                yield "download", folder, downloads / f"{folder.name}.lock"
    wheelhouse = cache_dir / "wheelhouse"
    if wheelhouse.is_dir():
        for wheel in sorted(wheelhouse.glob("*/*.whl")):
            yield "wheel", wheel, wheel.parent.with_suffix(".lock")
    tools = cache_dir / "tools"  # programs unpacked from their wheels (uv), one per wheel's bytes, and their layers
    if tools.is_dir():
        for program in sorted(tools.iterdir()):
            try:
                unpacking = program.name.startswith(".") and time.time() - program.stat().st_mtime < 86400
            except OSError:  # renamed or removed meanwhile
                continue
            if program.is_file() and not unpacking:  # .NAME.PID.*.tmp: another run's, until a day old
                yield "program", program, None
    for folder in package_caches(cache_dir):
        yield "debootstrap packages", folder, package_lock(folder)
    contexts = cache_dir / "contexts"  # builds' temporary contexts (each locked while its build lives), kept ones
    if contexts.is_dir():
        for folder in sorted(contexts.iterdir()):
            if folder.is_dir():
                lock = context_lock(folder)
                yield "context", folder, lock if lock.is_file() else None


def tree_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _entry_used(path: Path) -> float:
    if path.is_file():
        return last_used(path)
    return max((last_used(p) for p in path.rglob("*") if p.is_file()), default=last_used(path))


def cache_removals(cache_dir: Path, older_than: float, max_cache: int, now: float) -> list[Removal]:
    listed = list(_entries(cache_dir))
    entries = [(kind, path, _entry_used(path), tree_size(path)) for kind, path, _ in listed]
    abandoned = {path for kind, path, lock in listed if kind == "context" and lock and not lock_held(lock)}
    found = [Removal(kind, str(path), size, "the temporary context of a build that was killed (no torchbake holds it)"
                     if path in abandoned else f"no build used it for {(now - used) / 86400:.0f} days")
             for kind, path, used, size in entries if path in abandoned or now - used > older_than]
    if max_cache:
        total = tree_size(cache_dir) - sum(r.size for r in found) if cache_dir.is_dir() else 0
        gone = {r.what for r in found}
        for kind, path, _used, size in sorted(entries, key=lambda e: e[2]):  # least recently used first
            if total <= max_cache:
                break
            if str(path) not in gone:
                found.append(Removal(kind, str(path), size, "the cache is over its budget; least recently used"))
                total -= size
    return found


def log_removals(log_dir: Path, older_than: float, now: float) -> list[Removal]:
    """Logs and manifests older than ``older_than``, with the SBOMs, provenance and inventories
    written beside them; a failed build's stay until a later build of that image succeeded."""
    if not log_dir.is_dir():
        return []
    manifests = []
    for path in log_dir.glob("*.manifest.json"):
        manifests.append((path, read_back_object(path) or {}))  # a damaged one is a log like any other
    succeeded: dict[str, float] = {}
    for path, document in manifests:
        if document.get("status") in ON_THIS_ENGINE:
            image = document.get("image", "")
            succeeded[image] = max(succeeded.get(image, 0.0), path.stat().st_mtime)
    found = []
    for path, document in manifests:
        if now - path.stat().st_mtime <= older_than:
            continue
        if document.get("status") not in ON_THIS_ENGINE and succeeded.get(document.get("image", ""), 0.0) < path.stat().st_mtime:
            continue  # the newest word on that image is a failure: keep its log
        log = path.with_name(path.name.removesuffix(".manifest.json") + ".log")
        # the documents the manifest names (its slim image's too), where they are this folder's
        written = [Path(p) for paths in (document.get("attestations") or {}).values() if isinstance(paths, dict)
                   for p in paths.values() if isinstance(p, str)]
        beside = [*attestations.paths_beside(path).values(), *(p for p in written if p.parent == log_dir)]
        for item in dict.fromkeys((path, log, *beside)):
            if item.exists():
                found.append(Removal("log", str(item), item.stat().st_size,
                                     f"{(now - item.stat().st_mtime) / 86400:.0f} days old"))
    return found


# -- the engine's build cache ---------------------------------------------------------------------

def disk_use(client: DockerClient, cache_dir: Path) -> tuple[int, int]:
    """(bytes of the engine's image layers and build cache, bytes of the cache folder)."""
    df = client.disk_usage()
    engine = int(df.get("LayersSize") or 0) + _own_bytes(df.get("BuildCache") or [])
    return engine, tree_size(cache_dir) if cache_dir.is_dir() else 0


def _own_bytes(records: list[dict]) -> int:
    return sum(int(r.get("Size", 0)) for r in records if not r.get("Shared"))


def plan(client: DockerClient, cache_dir: Path, log_dir: Path, limits: Limits, *, now: float | None = None) -> list[Removal]:
    """Everything a run would remove, and why."""
    client.check_engine()  # nothing at all without an engine that answers
    now = time.time() if now is None else now
    found = image_removals(client, cache_dir, limits.keep)
    found += cache_removals(cache_dir, limits.older_than, limits.max_cache, now)
    found += log_removals(log_dir, limits.older_than, now)
    if limits.max_build_cache:
        found += build_cache_removals(client, limits)
    return found


OWN_STEP_MARK = "/torchbake/common/"  # every step of torchbake's Dockerfiles runs a script from there


def build_cache_removals(client: DockerClient, limits: Limits) -> list[Removal]:
    """Down to the budget: torchbake's own build-cache records (its steps), least recently used
    first; other users' and tools' records are never touched. With ``engine_build_cache`` (asked
    for by name), the engine's whole shared build cache instead."""
    budget = limits.max_build_cache
    records = client.disk_usage().get("BuildCache") or []
    if limits.engine_build_cache:
        size = _own_bytes(records)
        if size <= budget:
            return []
        return [Removal("build cache", "the engine's whole build cache (every user's and tool's records,"
                        " --engine-build-cache)", size - budget, f"down to its budget of {human_size(budget)}")]
    ours = sorted((r for r in records if OWN_STEP_MARK in r.get("Description", "") and not r.get("InUse")
                   and not r.get("Shared")), key=lambda r: r.get("LastUsedAt") or "")
    total = sum(int(r.get("Size", 0)) for r in ours)
    chosen = []
    for record in ours:
        if total <= budget:
            break
        chosen.append(record)
        total -= int(record.get("Size", 0))
    if not chosen:
        return []
    freed = sum(int(r.get("Size", 0)) for r in chosen)
    return [Removal("build cache", f"{len(chosen)} of torchbake's build-cache records (other users' and tools'"
                    " records stay)", freed,
                    f"least recently used first, down to the budget of {human_size(budget)}",
                    target=",".join(r["ID"] for r in chosen))]


@dataclass(frozen=True)
class Outcome:
    """What a gc run did: what it kept (and why), and the disk use it measured before and after
    (``docker system df`` and the cache folder: layers other images share free nothing, whatever
    an image's size says)."""

    kept: list[str]
    before: tuple[int, int]  # (engine bytes, cache folder bytes), as disk_use gives them
    after: tuple[int, int]

    @property
    def freed(self) -> int:
        return sum(max(0, b - a) for b, a in zip(self.before, self.after, strict=True))


def carry_out(client: DockerClient, removals: list[Removal], cache_dir: Path, limits: Limits) -> Outcome:
    """Remove, then forget the recorded images the engine no longer has."""
    before = disk_use(client, cache_dir)
    kept: list[str] = []
    locks = {str(path): lock for _, path, lock in _entries(cache_dir)}
    for removal in removals:
        if removal.kind == "container":
            try:
                client.call(f"rm {removal.what}", "remove_container", removal.target, force=False)
            except EngineError as exc:
                kept.append(f"{removal.what}: {str(exc).splitlines()[0]}")
            continue
        if removal.kind == "image":
            try:  # every tag of it goes; the engine still refuses an image that others are built FROM
                client.call(f"image rm {removal.what}", "remove_image", removal.target,
                            force=CANDIDATE_MARK not in removal.target)  # a candidate: only its tag
            except EngineError as exc:
                kept.append(f"{removal.what}: {str(exc).splitlines()[0]}")
                continue
        elif (removal.target or removal.what) in locks:  # a cache folder entry, of any kind _entries lists
            lock = locks[removal.target or removal.what]
            try:
                with filelock.FileLock(lock, timeout=0) if lock else contextlib.nullcontext():
                    _remove(Path(removal.what))
                    if removal.kind == "context" and lock:
                        Path(lock).unlink(missing_ok=True)  # a context's lock is its own, gone with it
            except filelock.Timeout:
                kept.append(f"{removal.what}: another torchbake holds it")
                continue
        elif removal.kind == "log":
            Path(removal.what).unlink(missing_ok=True)
        elif removal.kind == "build cache":
            carry_out_build_cache(client, removal, limits)
    forget_missing(built_images_file(cache_dir), {i["Id"] for i in client.images(all=True)})
    forget_gone()  # the candidate locks of builds that are gone (empty files in the host's /tmp)
    return Outcome(kept=kept, before=before, after=disk_use(client, cache_dir))


def carry_out_build_cache(client: DockerClient, removal: Removal, limits: Limits) -> None:
    """Prune what :func:`build_cache_removals` chose: torchbake's records one by one (the engine
    takes one id a prune), or the engine's whole cache down to the budget when asked for by name."""
    if limits.engine_build_cache:
        client.call("builder prune", "prune_builds", keep_storage=limits.max_build_cache, limit=3600)
        return
    for record in removal.target.split(","):
        client.call("builder prune", "prune_builds", filters={"id": record}, all=True, limit=3600)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
