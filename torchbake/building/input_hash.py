"""The input hash of an image, and what this host remembers of the images built for each.

The input hash is everything declared that decides an image (the Dockerfile and scripts, build
args, the base image, every option declared so beside its field, an input file by its digest,
source commits), known before any context is prepared; an image carries it (label
``torchbake.input-hash``) and, part by part, ``torchbake.input-parts``. The cache folder remembers which images torchbake built for which
input hash (``built-images.json``: the builder writes it, `invoke gc` reads it and forgets the
images gone) and when those inputs were first built (``first-built.json``).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from torchbake.configuration.settings import TOOLKITS_SECTION, image_options
from torchbake.configuration.validation import is_location
from torchbake.core import output
from torchbake.core.build_time import source_date_epoch
from torchbake.core.data import COMMON_DIR, common_files
from torchbake.core.files import write_atomically
from torchbake.inputs.context import MARKER, load_prepared, tree_sha256
from torchbake.inputs.downloads import file_lock, file_sha256

if TYPE_CHECKING:
    from torchbake.inputs.downloads import DownloadCache
    from torchbake.variants import Plan, Preflight

INPUT_HASH_LABEL = "torchbake.input-hash"
INPUT_PARTS_LABEL = "torchbake.input-parts"
SPLIT_PARTS = ("build_args", "sources", "options")  # material whose entries are compared one by one
BUILT_IMAGES = "built-images.json"  # input hash -> ids of the images built (or used) for it, most recent last
FIRST_BUILT = "first-built.json"  # input hash -> when it was first built on this host


def build_args(plan: Plan, facts: Preflight | None = None) -> dict[str, str]:
    args = plan.build_args(facts)
    args["SOURCE_DATE_EPOCH"] = str(source_date_epoch())  # BuildKit's too: the config's and history's times
    trust = plan.download_options
    if trust.ca_bundle and trust.ca_bundle_in_image:  # the bundle's digest: a new bundle rebuilds that step
        args["INSTALL_CA"] = file_sha256(Path(trust.ca_bundle).expanduser())[:16]
    return args


def option_material(plan: Plan, cache: DownloadCache, *, files: bool = True) -> dict[str, object] | None:
    """Every option declared to decide this variant's image (``decides`` beside its field in
    torchbake.configuration.settings, or to decide a variant it is ``decided_like``; every toolkit it installs: torchbake.configuration.accelerators), by its value or, for an
    input file, by the file's digest (a requirement such as ``torch==2.13.0`` as written); None
    when a digest is known only after downloading.
    ``files``: with the input files (a kept context holds them: it is hashed as it is instead)."""
    given = plan.given_inputs()
    declared = {**{key: input_file for variant in (plan.variant, *plan.decided_like)
                   for key, input_file in image_options(variant).items()},  # and the toolkits, an accelerator's: data
                **{key: True for key in given if key.startswith(f"{TOOLKITS_SECTION}.")}}
    found: dict[str, object] = {}
    for key, input_file in declared.items():
        value = plan.configuration.get(key, "")
        if input_file:
            if not files:
                continue
            value = given.get(key, "")
            if value and is_location(value):
                value = cache.known_digest(value)
                if not value:
                    return None
        found[key] = value
    return found


# What torchbake records in an image beside what it builds (its labels: the base's manifest digest,
# torchbake.tools …): a new version makes every image again, so that no image a torchbake that
# recorded less made is taken as unchanged. 2: torchbake.base.content-id, torchbake.tools;
# 3: torchbake.inputs.sha512, /etc/torchbake/debs.tsv.
RECORDS = 3


def _hash_material(plan: Plan, facts: Preflight, cache: DownloadCache) -> dict[str, object] | None:
    """What the input hash is made of; None when an input's digest is known only after
    downloading it. A context the user keeps (``--no-prepare``) is hashed as it is on disk: what
    is built is what was hashed."""
    if plan.reuse_context:
        folder = Path(plan.build_dir).expanduser().resolve()
        load_prepared(folder)  # not a prepared context: the error, before anything is looked up
        return {"records": RECORDS, "variant": plan.variant, "build_args": build_args(plan, facts), "base_image_id": facts.base_id,
                "context": tree_sha256(folder, skip={MARKER}), "target": plan.target,
                "options": option_material(plan, cache, files=False)}
    options = option_material(plan, cache)
    if options is None:
        return None
    return {
        "records": RECORDS,
        "variant": plan.variant,
        "build_args": build_args(plan, facts),
        "base_image_id": facts.base_id,
        "dockerfile": plan.dockerfile_template.read_text(),
        **({"image_steps": plan.image_steps} if plan.image_steps else {}),  # [image] steps: part of the Dockerfile
        "env": plan.dockerfile_env,
        "common": tree_sha256(COMMON_DIR, files=common_files()),
        "sources": facts.source_commits,
        "options": options,
        **plan.hash_inputs(),
    }


def _digest_of(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=list).encode()).hexdigest()


def fingerprint(plan: Plan, facts: Preflight, cache: DownloadCache) -> str:
    """The input hash: everything declared that decides the image (Dockerfile, scripts, build
    args, base image id, every input's digest, source commits), known before any context is
    prepared. "" when an input's digest is known only after downloading it."""
    material = _hash_material(plan, facts, cache)
    return "" if material is None else _digest_of(material)


def input_parts(plan: Plan, facts: Preflight, cache: DownloadCache) -> dict[str, str]:
    """The input hash's material, part by part (``build_args.EXTENSION_COMMIT``,
    ``wheels.torch``, ``dockerfile``, …), each with a short digest: an image carries them (label
    ``torchbake.input-parts``), so that a later plan can say which inputs changed since."""
    parts: dict[str, str] = {}
    for key, value in (_hash_material(plan, facts, cache) or {}).items():
        if key in SPLIT_PARTS and isinstance(value, dict):
            parts.update({(name if key == "options" else f"{key}.{name}"): _digest_of(entry)[:12]
                          for name, entry in value.items()})
        else:
            parts[key] = _digest_of(value)[:12]
    return dict(sorted(parts.items()))


def input_hash_of(info: dict) -> str:
    """An image's input hash, from its label ("" when it has none)."""
    return ((info.get("Config") or {}).get("Labels") or {}).get(INPUT_HASH_LABEL, "")


def built_images_file(cache_dir: Path) -> Path:
    """Where torchbake records which image it built from which input hash."""
    return cache_dir / BUILT_IMAGES


def read_record(state: Path | None) -> dict:
    """A JSON record of the cache folder (built images, first-built times); {} if absent or unreadable."""
    if state is None or not state.is_file():
        return {}
    try:
        found = json.loads(state.read_text())
    except (ValueError, OSError) as exc:
        output.channel().say(f"{state} is unreadable ({type(exc).__name__}); torchbake starts it afresh.")
        return {}
    return found if isinstance(found, dict) else {}


def _record_lock(state: Path):
    """The lock every read-modify-write of a record holds (build-all workers and other runs write at once)."""
    return file_lock(state.with_name(state.name + ".lock"))


def record_built(state: Path, digest: str, image_id: str) -> None:
    """Remember that torchbake built (or just used) ``image_id`` for inputs ``digest``, most recently
    used last; an id stays until `invoke gc` finds its image gone from the engine. The read-modify-write
    holds a lock (build-all workers and other runs record at once) and the rewrite is atomic."""
    with _record_lock(state):
        data = read_record(state)
        data[digest] = [i for i in data.get(digest, []) if i != image_id] + [image_id]  # kept until gc finds it gone
        write_atomically(state, json.dumps(data, indent=1, sort_keys=True))


def forget_missing(state: Path, present: set[str]) -> None:
    """Drop from the record the ids not in ``present`` (the images the engine still has), under the
    same lock as :func:`record_built`: the record keeps every id until then, so an unchanged image
    is found however long ago it was built."""
    if not state.is_file():
        return
    with _record_lock(state):
        data = {digest: [i for i in ids if i in present] for digest, ids in read_record(state).items()
                if isinstance(ids, list)}
        write_atomically(state, json.dumps({d: ids for d, ids in data.items() if ids}, indent=1, sort_keys=True))


def built_image_ids(cache_dir: Path) -> set[str]:
    """Every image id torchbake recorded as built on this host."""
    return {image_id for ids in read_record(built_images_file(cache_dir)).values() if isinstance(ids, list)
            for image_id in ids}


def note_first_built(cache_dir: Path, digest: str) -> None:
    """Remember when these inputs (this input hash) were first built on this host: `invoke gc`
    keeps the newest images of a tag by it (the images themselves all carry the same time)."""
    state = cache_dir / FIRST_BUILT
    with _record_lock(state):
        times = read_record(state)
        if digest not in times:
            times[digest] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            write_atomically(state, json.dumps(times, indent=1, sort_keys=True))
