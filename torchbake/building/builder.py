"""Carrying out a build plan (release, base or dev): preflight, context, ``docker build``,
labels, verify, clean up.

The image is built under a candidate tag and only tagged ``NAME:TAG`` once it passed
verification, so a failed build or a failed verification never takes the tag away from the
image it pointed to before.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from torchbake.adapters import command
from torchbake.adapters.engine import DockerClient, engine_is_local, marked_json
from torchbake.building import base_policy, compile_progress, compile_stats, diskspace, reproducible
from torchbake.building.candidates import let_go, new_candidate
from torchbake.building.input_hash import (
    INPUT_PARTS_LABEL,
    build_args,
    built_images_file,
    fingerprint,
    input_hash_of,
    input_parts,
    note_first_built,
    read_record,
    record_built,
)
from torchbake.building.publishing import ask_registry, build_cache, registry_of
from torchbake.checks.verify import Expectations, verify_facts
from torchbake.configuration import platforms
from torchbake.configuration.validation import is_location
from torchbake.core import output
from torchbake.core.build_time import source_date_epoch
from torchbake.core.errors import BuildError, DownloadError, EngineError, RegistryError, VerificationError
from torchbake.core.files import SecretSource, secret_files, secret_paths
from torchbake.core.output import human_size
from torchbake.core.redaction import redact
from torchbake.core.status import Status
from torchbake.inputs.context import (
    CA_BUNDLE_SECRET,
    PreparedContext,
    check_secret_mounts,
    choose_context_dir,
    context_name,
    load_prepared,
    named_contexts,
    program_contexts_of,
    remove_context,
)
from torchbake.inputs.downloads import DownloadCache, file_sha256, trust_bundle, trust_environment
from torchbake.planning.config import to_toml
from torchbake.planning.plan import describe_plan
from torchbake.supply_chain import attestations
from torchbake.supply_chain.inventory import SHA512_LABEL, TOOLS_LABEL
from torchbake.supply_chain.manifest import BuildRecord
from torchbake.variants import Plan, Preflight
from torchbake.variants.common import labels_name
from torchbake.variants.dev import DevPlan

CONTEXT_PLACEHOLDER = Path("<context>")
ASK = object()  # find_unchanged: the image's inspection is asked of the engine


@dataclass(frozen=True)
class BuildResult:
    image: str
    image_id: str
    size_bytes: int
    log_file: Path | None
    input_hash: str
    seconds: float
    status: Status = Status.BUILT
    reason: str = ""
    gpu_checks: dict = field(default_factory=dict)  # image → the GPU rows of its verify ([build] verify_gpus)
    compiles: dict = field(default_factory=dict)  # compile step → its counts (torchbake.building.compile_stats)
    compile_progress: dict = field(default_factory=dict)  # compile step → its objects (building.compile_progress)


def changed_since(plan: Plan, client: DockerClient, facts: Preflight) -> str:
    """Which inputs changed since the image NAME:TAG holds now (on this engine, or else in the
    registry), and the step of the image's Dockerfile that a build runs again from: what a plan
    can know before building. "" when there is no such image or it carries no parts."""
    held, where = client.inspect_image(plan.image), "this engine's image"
    remote = registry_of(plan, client) if held is None else None
    if remote is not None:
        with contextlib.suppress(RegistryError):  # unanswered: the plan says why elsewhere
            held, where = remote[0].inspect(remote[1], remote[2]), "the registry's image"
    recorded = ((held or {}).get("Config") or {}).get("Labels") or {}
    try:
        before = json.loads(recorded.get(INPUT_PARTS_LABEL, ""))
    except ValueError:
        return ""
    if not isinstance(before, dict):  # not torchbake's label (a user's image under that tag)
        return ""
    now = input_parts(plan, facts, plan.download_cache(read_only=True))
    changed = sorted(key for key in {*before, *now} if before.get(key) != now.get(key))
    if not changed:
        return ""
    return f"changed since {where}: {', '.join(changed)}; {plan.steps_again(changed)}"


def image_labels(plan: Plan, prepared: PreparedContext | None, facts: Preflight | None, digest: str) -> dict[str, str]:
    labels = {**plan.common_labels(facts, digest, prepared.inputs if prepared else None),
              **plan.labels(prepared, facts)}
    if prepared is not None:  # always: a FROM image's would otherwise stand for this one's files
        labels[SHA512_LABEL] = json.dumps(prepared.sha512, sort_keys=True, separators=(",", ":"))
    if prepared is not None and prepared.tools:  # images built FROM this one inherit it with the program
        labels[TOOLS_LABEL] = json.dumps(prepared.tools, sort_keys=True, separators=(",", ":"))
    elif facts is not None and facts.base_labels.get(TOOLS_LABEL):  # the FROM image's, for a stage not FROM it (slim)
        labels[TOOLS_LABEL] = facts.base_labels[TOOLS_LABEL]
    if facts is not None and digest:
        parts = input_parts(plan, facts, plan.download_cache(read_only=True))
        labels[INPUT_PARTS_LABEL] = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return {k: redact(v) for k, v in labels.items() if v}  # a label travels with the image: never a secret


def build_secrets(plan: Plan) -> list[tuple[str, SecretSource]]:
    """BuildKit secrets: present only while the steps that use them run, never in a layer (values
    become files only inside :func:`~torchbake.core.files.secret_files`, for the build)."""
    found: list[tuple[str, SecretSource]] = plan.secrets()
    bundle = trust_bundle(plan.download_options.ca_bundle, plan.path_options.cache_dir)
    if bundle is not None:
        found.append((CA_BUNDLE_SECRET, bundle))
    return found


def log_path(log_dir: Path, image: str) -> Path:
    """A build's own log (its manifest, SBOMs and provenance are named after it): the image, the
    second it started and a random part, so that two builds started in the same second (two
    terminals, two matrices) never share a log or a record."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return log_dir / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', image)}-{stamp}-{uuid.uuid4().hex[:6]}.log"




def watched(client: DockerClient, argv: list[str], env: Mapping[str, str], log_file: Path, record) -> None:
    """``client.build`` with its compile steps watched (torchbake.building.compile_progress): their
    progress said as they go (a line every minute in the output and the log; on a terminal also a
    live line at the bottom), their figures in the record, and a failed compile's own error lines
    in the failure's message."""
    with output.channel().live_line() as live:  # a terminal: objects done, rate and time left redrawn in place
        _watched(client, argv, env, log_file, record, compile_progress.CompileWatch(every=60.0, live=live))


def _watched(client: DockerClient, argv: list[str], env: Mapping[str, str], log_file: Path, record,
             watch: compile_progress.CompileWatch) -> None:
    token = command.line_watch.set(watch)
    try:
        client.build(argv, env, log_file)
    except BuildError as exc:
        if not watch.error_lines:
            raise
        raise BuildError(f"{exc}\nWhat the failing compile said first:\n{watch.errors()}") from exc
    finally:
        command.line_watch.reset(token)
        if figures := watch.figures():
            record.facts["compile_progress"] = figures


def base_labels(client: DockerClient, plan: Plan) -> dict[str, str]:
    """The labels of the engine's FROM image ({} when it holds none): what a dry run knows of it."""
    return ((client.inspect_image(plan.base_image) or {}).get("Config") or {}).get("Labels") or {}


def dry_run(plan: Plan, client: DockerClient, *, check_reproducible: bool = False) -> str:
    """The plan as text, with the exact docker command (values known only after preparing the
    context are shown as placeholders), and the comparison build ``check_reproducible`` adds.
    Touches nothing."""
    source_date_epoch()
    plan.check_dry_run(client)  # what the build would refuse before any work, refused here too
    verified, vouched = base_policy.check_registry(plan, client, base_labels(client, plan))
    pending = base_policy.check_engine_copy(plan, client, verified)  # the build's verdict on the engine's copies
    cache_from, cache_to = build_cache(plan)
    argv, env = client.build_command(
        context=CONTEXT_PLACEHOLDER, dockerfile=CONTEXT_PLACEHOLDER / "Dockerfile",
        tag="<candidate tag>", build_args=build_args(plan),
        labels=image_labels(plan, None, None, ""), secrets=secret_paths(build_secrets(plan)), no_cache=plan.no_cache,
        network=plan.build_options.network, target=plan.target, cache_from=cache_from, cache_to=cache_to,
        named_contexts=program_contexts_of(plan.dockerfile_template.read_text(), CONTEXT_PLACEHOLDER),
    )
    text = describe_plan(plan, argv, env)
    if note := plan.base_note(client):
        text += f"\nBase image: {note}"
    text += "".join(f"\n{line}" for line in plan.dry_run_notes())
    for reference, digest in verified.items():
        text += f"\nFROM image: {reference} is {digest} in its registry, signed by {vouched} ([verify] base_key)"
    text += "".join(f"\nFROM image: {note}" for note in pending)
    if check_reproducible:
        text += ("\nThen build the same context again with --no-cache under another candidate tag, compare the image"
                 " ids, and name the files that differ (exit 6) or say Reproducible; the comparison tag is removed.")
    output.channel().say(text)
    return text


def preflight(plan: Plan, client: DockerClient, *, writes: bool = True) -> Preflight:
    """Checks against the engine and the remotes before any slow work (each variant's own). With
    ``writes``, a missing FROM image is made and facts are remembered in the cache; without,
    nothing is changed."""
    client.check_engine()
    return plan.preflight(client, writes=writes)


def find_unchanged(client: DockerClient, image: str, digest: str, *, state: Path | None = None,
                   apply: bool = True, current: Any = ASK) -> tuple[Status, str] | None:
    """("unchanged", id) when ``image`` already has this input hash; ("retagged", id) when an
    image torchbake built for ``image`` (recorded in ``state``, however long ago) has it — tagged
    ``image`` when ``apply``; None when it must be built. ``current``: ``image``'s inspection
    (None: no such image) when the caller has just asked for it.

    A tag only ever lands on an image built from that tag's inputs *for that name*: the input
    hash, the record (images derived FROM a torchbake image inherit its labels) and the image's
    own title and version labels must all fit. An image built under another name keeps its
    labels, which would then lie about the tag, so it is never re-tagged."""
    recorded = read_record(state).get(digest)
    if current is ASK:
        current = client.inspect_image(image)
    if (current and input_hash_of(current) == digest and labels_fit(current, image)
            and (recorded is None or current["Id"] in recorded)):  # no record at all: the image's labels decide
        return Status.UNCHANGED, current["Id"]
    for image_id in reversed(recorded or []):
        info = client.inspect_image(image_id)
        if info and input_hash_of(info) == digest and labels_fit(info, image):
            if apply:
                client.tag(image_id, image)
            return Status.RETAGGED, image_id
    return None


def labels_fit(info: dict, image: str) -> bool:
    """Whether an image's own labels name ``image`` (NAME:TAG): what it says it is, it is."""
    return labels_name((info.get("Config") or {}).get("Labels") or {}, image)


def skip_reason(status: Status, image_id: str) -> str:
    """Why a build was skipped, for the output and the reports."""
    return {Status.UNCHANGED: "its input hash matches the image's",
            Status.RETAGGED: f"same inputs as {image_id[:19]}, re-tagged",
            Status.UNCHANGED_IN_REGISTRY: f"the registry's image ({image_id[:19]}) has these inputs; nothing pulled",
            Status.RETAGGED_IN_REGISTRY: f"the registry's image {image_id[:19]} has these inputs; the tag was pointed at it"
                                   " in the registry (nothing pulled or pushed)"}[status]


def remove_replaced(client: DockerClient, image_id: str, state: Path) -> None:
    """Remove the image a build took the tag from, when torchbake built it (recorded in
    ``state``) and no tag, container or child image uses it; a user's own image stays."""
    info = client.inspect_image(image_id)
    ours = any(image_id in ids for ids in read_record(state).values())
    if info is None or info.get("RepoTags") or not ours:
        return
    if client.containers_of(image_id):
        output.channel().say(f"Kept the replaced image {image_id[:19]}: a container uses it.")
        return
    try:
        client.remove_image(image_id, force=False)
    except EngineError as exc:  # e.g. an image built FROM it
        output.channel().say(f"Kept the replaced image {image_id[:19]}: {str(exc).splitlines()[0]}")
        return
    output.channel().say(f"Removed the replaced image {image_id[:19]} (no tag, container or image used it).")


def in_plan_environment(body):
    """Run ``body(plan, ...)`` with host commands (pip, git) trusting the plan's --ca-bundle and
    stopped after the plan's [build] stall_timeout of silence. Set here, in the thread that runs
    the plan (a build-all worker too), since context variables do not cross into new threads."""

    @functools.wraps(body)
    def wrapper(plan, *args, **kwargs):
        token = command.stall_timeout.set(plan.build_options.stall_timeout)
        try:
            with command.environment(trust_environment(plan.download_options.ca_bundle, plan.path_options.cache_dir)):
                return body(plan, *args, **kwargs)
        finally:
            command.stall_timeout.reset(token)

    return wrapper


@in_plan_environment
def assess(plan: Plan, client: DockerClient, *, look: bool = True, apply: bool = True, make_base: bool = True,
           current: Any = ASK) -> tuple[Preflight, str, tuple[Status, str] | None]:
    """Preflight, the input hash ("" if an input is not downloaded yet) and, when ``look``,
    whether an image already has that hash (see :func:`find_unchanged`, which re-tags when
    ``apply``). A missing FROM image is made only when ``make_base`` (and ``apply``); otherwise
    :class:`BaseImagePending` says what a build would do."""
    verified, vouched = base_policy.check_registry(plan, client)  # who made the FROM images: asked before anything
    facts = preflight(plan, client, writes=make_base and apply)
    if verified and len(plan.from_images(facts.base_labels)) > len(verified):  # the slim stage's, named by the base
        verified, vouched = base_policy.check_registry(plan, client, facts.base_labels)
    base_policy.check_engine_copy(plan, client, verified, facts)
    facts = replace(facts, base_verified_by=vouched)
    plan.check_preflight(facts)  # what the plan holds the FROM image to (a lock's base): before any download
    digest = fingerprint(plan, facts, plan.download_cache(read_only=not apply))
    state = built_images_file(plan.path_options.cache_dir)
    found = find_unchanged(client, plan.image, digest, state=state, apply=apply, current=current) if look and digest else None
    if found and plan.slim and input_hash_of(client.inspect_image(f"{plan.image}-slim") or {}) != digest:
        found = None  # --slim asks for the runtime image too, and it is missing or older: build
    return facts, digest, found


def _fetch_inputs(plan: Plan, cache: DownloadCache) -> None:
    """Every input given by URL into the download cache (checked by its sha256 where one is given),
    so that the input hash is known before deciding to build: what `build-all --plan` predicts from a
    warm cache, a run with a cold one decides the same way."""
    for key, location in plan.given_inputs().items():
        if location and is_location(location):
            cache.fetch(location, key=key)


@in_plan_environment
def build_image(plan: Plan, client: DockerClient, *, skip_unchanged: bool = False,
                log_file: Path | None = None, publish: bool = False, check_reproducible: bool = False) -> BuildResult:
    """Build (or, with ``skip_unchanged``, skip or re-tag) the image of ``plan`` (``publish``: it
    is pushed afterwards, so its build cache goes to the registry too; ``check_reproducible``: then
    built again without any cache, and the two compared)."""
    started = time.monotonic()
    source_date_epoch()  # a bad value is an error before any work
    current = client.inspect_image(plan.image)
    tagged = (current or {}).get("Id", "")  # the image this run may replace
    facts, digest, found = assess(plan, client, look=skip_unchanged, current=current)
    say = output.channel().say
    if getattr(plan, "lock_unusable", False):  # a lock is there and not followed: said whether built or not
        say(("Warning:", "yellow"), f" {plan.image}'s closure {plan.lock_state}")
    cache = plan.download_cache()
    if skip_unchanged and not digest:  # an input is not downloaded yet: fetched first, then the same decision
        _check_space(plan, client, cache)  # before any download, as for a build
        _fetch_inputs(plan, cache)
        digest = fingerprint(plan, facts, cache)
        found = find_unchanged(client, plan.image, digest, state=built_images_file(plan.path_options.cache_dir))
    if skip_unchanged and not found:
        found, note = ask_registry(plan, client, digest)
        if note:
            say(f"{plan.image}: {note} Building it.")
    if found:
        status, image_id = found
        reason = skip_reason(status, image_id)
        say((plan.image, "bold"), f" {status}: {reason}")
        if not status.in_registry:  # the image is on this engine
            state = built_images_file(plan.path_options.cache_dir)
            record_built(state, digest, image_id)  # in use: keep it among the remembered ids
            if tagged and tagged != image_id:  # re-tagged: the image the tag left may now be unused
                remove_replaced(client, tagged, state)
        # run-container's default image is this host's latest build, and this run stands for one
        record = BuildRecord(image=plan.image, variant=plan.variant, profile=plan.profile,
                             log_file=log_path(plan.path_options.log_dir, plan.image))
        record.facts.update({"input_hash": digest, "unchanged_id": image_id, "reason": reason})
        record.write(status)
        info = (current if status is Status.UNCHANGED else client.inspect_image(plan.image)) or {}
        return BuildResult(image=plan.image, image_id=image_id, size_bytes=int(info.get("Size", 0)), log_file=None,
                           input_hash=digest, seconds=time.monotonic() - started, status=status, reason=reason)
    user_context = _user_context(plan)
    _check_space(plan, client, cache)
    log_file = log_file or log_path(plan.path_options.log_dir, plan.image)
    record = BuildRecord(image=plan.image, variant=plan.variant, profile=plan.profile, log_file=log_file)
    record.phase("preflight")
    say((f"Building {plan.image}", "bold"), f" ({plan.variant}; log: {log_file}; manifest: {record.path})")
    if lock_state := getattr(plan, "lock_state", ""):  # which lock it follows, or why none: as its plan says
        say(f"Closure: {lock_state}")
    try:
        result = _build(plan, client, cache, facts, digest, log_file, record, started, skip_unchanged,
                        user_context, tagged, publish, check_reproducible)
    except BaseException as exc:
        record.write(Status.INTERRUPTED if isinstance(exc, KeyboardInterrupt) else Status.FAILED, str(exc).split("\n")[0])
        raise
    record.facts["image_id"] = result.image_id
    record.write(Status.BUILT)
    return replace(result, gpu_checks=record.facts.get("gpu_checks", {}))


def _context_dir(plan: Plan) -> tuple[Path, bool]:
    """The folder ``plan``'s context is prepared in, and whether it is temporary."""
    return choose_context_dir(plan.build_dir, plan.path_options.cache_dir / "contexts",
                              context_name(plan.variant, plan.platform))


def _user_context(plan: Plan) -> tuple[Path, PreparedContext | None] | None:
    """The context folder the user named (--build-dir), checked, and with --no-prepare the context
    kept there: before anything is written. None: a temporary folder will be made."""
    if plan.reuse_context:
        folder = Path(plan.build_dir).expanduser().resolve()
        prepared = load_prepared(folder)
        check_secret_mounts(prepared, plan.dockerfile_template.read_text(), plan.passed_secrets())
        return folder, prepared
    if plan.build_dir:
        return _context_dir(plan)[0], None
    return None


def _build(plan: Plan, client: DockerClient, cache: DownloadCache, facts: Preflight, digest: str,
           log_file: Path, record: BuildRecord, started: float, skip_unchanged: bool,
           user_context: tuple[Path, PreparedContext | None] | None, replaced: str, publish: bool,
           check_reproducible: bool) -> BuildResult:
    if digest:
        note_first_built(plan.path_options.cache_dir, digest)
    record.facts.update({
        "input_hash": digest, "base_image": {"reference": plan.base_image, "content_id": facts.base_id,
                                             "digest": facts.base_digest, "image_id": facts.base_image_id,
                                             **({"verified_by": facts.base_verified_by} if facts.base_verified_by else {})},
        "sources": {name: {"commit": commit} for name, commit in facts.source_commits.items()},
        "inputs": [{"option": option, "location": location, "sha256": cache.known_digest(location)}
                   for option, location in plan.given_inputs().items()],
    })
    record.facts["sources"].update(plan.source_records(facts))
    record.facts.update(plan.record_facts())
    record.facts["configuration"] = to_toml(plan.configuration)  # what `verify --reproducible` plans again
    plan.check_before_build(client)  # what only the build needs (a lock's Debian versions in the mirror): first
    if user_context is not None:
        (folder, prepared), temporary = user_context, False
    else:
        folder, temporary = _context_dir(plan)
        prepared = None
    held = contextlib.ExitStack()  # secret files: they exist while the builds below run, no longer
    try:
        if prepared is None:
            output.channel().say(f"Preparing the build context in {folder}")
            prepared = plan.prepare(facts, cache, folder, temporary=temporary, log_file=log_file)
            folder = prepared.path  # a temporary one is named after what it holds once prepared
        record.phase("prepare")
        digest = digest or fingerprint(plan, facts, cache)  # downloads are in the cache now
        if prepared.build_tools:
            record.facts["build_tools"] = prepared.build_tools
        record.facts.update({
            "input_hash": digest, "files": prepared.inputs,
            "inputs": [{**entry, "sha256": cache.known_digest(entry["location"])} for entry in record.facts["inputs"]],
        })
        # always a candidate tag of its own: two builds of one NAME:TAG at once never export to one name (the
        # image store refuses the second: "already exists"), and a failed build never leaves the real tag half-made
        tag = new_candidate(plan.image)
        cache_from, cache_to = build_cache(plan, publish=publish)
        secrets = held.enter_context(secret_files(build_secrets(plan)))
        args, labels = build_args(plan, facts), image_labels(plan, prepared, facts, digest)
        argv, env = client.build_command(
            context=folder, dockerfile=folder / "Dockerfile", tag=tag, build_args=args, labels=labels, secrets=secrets,
            no_cache=plan.no_cache, network=plan.build_options.network, target=plan.target,
            cache_from=cache_from, cache_to=cache_to, platform=plan.platform, named_contexts=named_contexts(folder),
        )
        record.facts["docker_command"] = command.format_command(argv, env)
        try:
            logged = log_file.stat().st_size if log_file.exists() else 0
            watched(client, argv, env, log_file, record)
            _compiles(log_file, logged, record, required=plan.compile_cache_required,
                      store=bool(getattr(plan, "compile_cache", "")))
            image_id = built_image_id(client, tag)
            if plan.versions_known_after_build:
                image_id = _label_built_versions(client, tag, log_file)
            record.facts["candidate_id"] = image_id
            record.phase("build")
            found = None
            if plan.verify:
                found = _verify_candidate(plan, plan.image, client, tag, record)
                record.phase("verify")
            # the documents before the tag moves: a build that cannot describe its image leaves the tag alone
            recipe = {"Dockerfile": file_sha256(folder / "Dockerfile"), "common/": prepared.common_sha256}
            _attest(plan, client, tag, plan.image, record, found, recipe)
            _promote(client, tag, plan.image)
        except BaseException as exc:  # failed or interrupted: the candidate goes; the real tag was never touched
            if not getattr(exc, KEPT_FOR_INSPECTION, False) and not isinstance(exc, EngineError):
                client.remove_image(tag)  # one that failed verification stays; an engine that died: gc finds it later
                let_go(tag)
            raise
        if plan.slim:
            _build_slim(plan, client, folder, facts, prepared, digest, log_file, secrets, publish, record, recipe)
        if check_reproducible:
            _check_reproducible(plan, client, image_id, folder, args, labels, secrets, log_file)
    finally:
        held.close()
        if temporary:
            remove_context(folder)
    info = client.inspect_image(plan.image) or {}
    state = built_images_file(plan.path_options.cache_dir)
    record_built(state, digest, info.get("Id", image_id))
    if replaced and replaced != info.get("Id"):
        remove_replaced(client, replaced, state)
    result = BuildResult(image=plan.image, image_id=image_id, size_bytes=int(info.get("Size", 0)),
                         log_file=log_file, input_hash=digest, seconds=time.monotonic() - started,
                         reason="forced" if not skip_unchanged else "inputs changed or no image yet",
                         compiles=record.facts.get("compiles", {}),
                         compile_progress=record.facts.get("compile_progress", {}))
    output.channel().say((f"Built {result.image}", "bold green"), f" {result.image_id[:19]} "
                         f"{human_size(result.size_bytes)} of compressed layers (`docker images` shows them unpacked)"
                         f" in {result.seconds:.0f} s (log: {log_file})")
    return result


def _compiles(log_file: Path, since: int, record: BuildRecord, *, required: bool, store: bool) -> None:
    """What the build's compile steps compiled and found (their lines in the log, from byte
    ``since`` on): said, and kept in the build's record (``compiles``). Compiles that missed the shared
    store (``store``: the build was given one):
    a warning, or with ``required`` ([dev] compile_cache_required) an error (the image is not tagged)."""
    with log_file.open(encoding="utf-8", errors="replace") as log:
        log.seek(since)
        found = compile_stats.read(log)
    progress = record.facts.get("compile_progress", {})
    if found:
        record.facts["compiles"] = compile_stats.to_record(found)
    if found or progress:
        say = output.channel().say
        say(("Compiled:", "bold"), f" {compile_stats.summary(found, progress)}")
        if missed := compile_stats.unreachable(found, store=store):
            text = (f"the compile cache's store ([dev] compile_cache) could not be reached from the {', '.join(missed)}"
                    " step(s): their objects were compiled here and not shared.")
            if required:
                raise DownloadError(f"{text[0].upper()}{text[1:]} --require-compile-cache ([dev] compile_cache_required)"
                                    f" makes that an error: check that the store answers from the build, then build"
                                    f" again (the log: {log_file}).")
            say(("Warning:", "yellow"), f" {text} --require-compile-cache makes that an error.")


def _check_reproducible(plan: Plan, client: DockerClient, image_id: str, folder: Path, args: dict[str, str],
                        labels: dict[str, str], secrets: list[tuple[str, Path]], log_file: Path,
                        kept: str = "The image itself was built and tagged") -> None:
    """Build the context in ``folder`` again (the same build args, labels and secrets) with no
    cache at all, under a candidate tag, and compare with ``image_id``: the same image, or a
    VerificationError naming the files that differ (``kept``: what became of the image compared with)."""
    tag = new_candidate(plan.image)
    argv, env = client.build_command(
        context=folder, dockerfile=folder / "Dockerfile", tag=tag, build_args=args, labels=labels, secrets=secrets,
        no_cache=True, network=plan.build_options.network, target=plan.target, named_contexts=named_contexts(folder))
    say = output.channel().say
    say(f"Building {plan.image} again without any cache, to compare")
    try:
        client.build(argv, env, log_file)
        again = built_image_id(client, tag)
        if again == image_id:
            say((f"Reproducible: {plan.image}", "bold green"), f" a build without any cache gave the same image {image_id}")
            return
        found = reproducible.differences(client, image_id, tag, plan.path_options.cache_dir)
    finally:
        client.remove_image(tag, force=False)  # the tag only, when the image is the same
        let_go(tag)
    raise VerificationError(
        f"{plan.image} is not reproducible: a build of the same context without any cache gave {again}, not"
        f" {image_id}.\n" + "\n".join(found or ["(no file differs: the manifests do)"])
        + f"\n{kept}; the log: {log_file}")


@in_plan_environment
def reproduce(plan: Plan, client: DockerClient, image_id: str, input_hash: str) -> None:
    """`verify --reproducible`: build ``plan`` (the configuration recorded when ``image_id`` was
    built here) without any cache under a candidate tag and compare with ``image_id``. Its inputs
    must still be the image's (``input_hash``, its label), or the comparison would say nothing."""
    source_date_epoch()
    facts, digest, _found = assess(plan, client, look=False)
    cache = plan.download_cache()
    log_file = log_path(plan.path_options.log_dir, plan.image)
    folder, temporary = _context_dir(plan)
    with contextlib.ExitStack() as held:
        if temporary:
            held.callback(remove_context, folder)
        output.channel().say(f"Preparing the build context of {plan.image} in {folder} (log: {log_file})")
        prepared = plan.prepare(facts, cache, folder, temporary=temporary, log_file=log_file)
        folder = prepared.path  # a temporary one is named after what it holds once prepared
        digest = digest or fingerprint(plan, facts, cache)
        if digest != input_hash:
            raise VerificationError(
                f"{plan.image} cannot be built again from its inputs: they have moved since it was built (input"
                f" hash {digest[:16]}, the image's {input_hash[:16] or '(none)'}); a URL may now give another file,"
                " or the base image was made again. Nothing was built.")
        secrets = held.enter_context(secret_files(build_secrets(plan)))
        _check_reproducible(plan, client, image_id, folder, build_args(plan, facts),
                            image_labels(plan, prepared, facts, digest), secrets, log_file,
                            kept="The image itself is unchanged")


def _check_space(plan: Plan, client: DockerClient, cache: DownloadCache) -> None:
    """Fail before any download or context when the disks cannot hold the build."""
    locations = plan.given_inputs()
    docker_root = str(client.engine_info().get("DockerRootDir", "")) if engine_is_local() else ""
    if docker_root and not Path(docker_root).exists():
        docker_root = ""
    needs = diskspace.build_needs(locations=locations, cache=cache, cache_dir=plan.path_options.cache_dir,
                                  docker_root=docker_root, timeout=plan.download_options.timeout)
    if docker_root:  # a dev build's compile writes there too
        needs += [diskspace.Need(Path(docker_root), role, size, detail) for role, size, detail in plan.disk_needs(client)]
    diskspace.check(needs, plan.build_options.min_free_space)


BUILT_PROBE = (
    "import glob, json\n"
    "from importlib import metadata\n"
    "out = {'built': [json.load(open(p)) for p in sorted(glob.glob('/etc/torchbake/built/*.json'))]}\n"
    "try:\n    out['torch'] = metadata.version('torch')\nexcept metadata.PackageNotFoundError:\n    out['torch'] = ''\n"
    "print('TORCHBAKE-BUILT ' + json.dumps(out))\n"
)


def built_image_id(client: DockerClient, tag: str) -> str:
    """The id of the image a build just left under ``tag`` (its own tag: no other build writes it).
    Asked of the engine, not read from ``--iidfile``: with the containerd image store an image's id
    is its manifest's digest, while the iidfile holds the config's."""
    info = client.inspect_image(tag)
    if info is None:
        raise EngineError(f"The build finished but the engine has no image {tag}.")
    return info["Id"]


def _label_built_versions(client: DockerClient, tag: str, log_file: Path) -> str:
    """Versions built from source are known only after the build: add them as labels (a
    FROM-only build, no new layer). Returns the labelled image's id."""
    result = client.run_capture(tag, ["-c", BUILT_PROBE], entrypoint="python")
    facts = marked_json(result.output, "TORCHBAKE-BUILT ")
    if facts is None:
        raise EngineError(f"Could not read what the dev build installed in {tag}:\n{result.output[-1500:]}")
    labels = {"torchbake.torch-version": facts["torch"]}
    for record in facts["built"]:
        if record["role"] == "extension":
            labels["torchbake.extension"] = f"{record['name']}=={record['version']}"
        labels[f"torchbake.built.{record['role']}"] = f"{record['name']}=={record['version']}@{record['commit']}"
    with tempfile.TemporaryDirectory(prefix="torchbake-label-") as tmp:
        folder = Path(tmp)
        (folder / "Dockerfile").write_text(f"FROM {tag}\n")
        argv, env = client.build_command(context=folder, dockerfile=folder / "Dockerfile", tag=tag,
                                         labels={k: v for k, v in labels.items() if v})
        client.build(argv, env, log_file)
        return built_image_id(client, tag)


def _build_slim(plan: DevPlan, client: DockerClient, folder: Path, facts: Preflight, prepared: PreparedContext,
                digest: str, log_file: Path, secrets: list[tuple[str, Path]], publish: bool, record: BuildRecord,
                recipe: dict[str, str]) -> None:
    """The runtime stage of the same Dockerfile (the dev stages come from the layer cache, or the
    dev image's registry cache)."""
    image = f"{plan.image}-slim"
    slim_from, cache_to = build_cache(plan, publish=publish, image=image)
    dev_from, _ = build_cache(plan)
    tag = new_candidate(image)
    labels = {**image_labels(plan, prepared, facts, digest), "torchbake.slim": "true",
              "org.opencontainers.image.version": image.rsplit(":", 1)[1]}
    argv, env = client.build_command(
        context=folder, dockerfile=folder / "Dockerfile", tag=tag, build_args=build_args(plan, facts),
        labels=labels, secrets=secrets, network=plan.build_options.network, target="runtime",
        cache_from=list(dict.fromkeys(slim_from + dev_from)), cache_to=cache_to, named_contexts=named_contexts(folder),
    )
    client.build(argv, env, log_file)
    record.facts["slim_image_id"] = _label_built_versions(client, tag, log_file)  # `invoke sbom` finds its documents by it
    found = _verify_candidate(plan, image, client, tag, record) if plan.verify else None
    record.phase("slim")
    _attest(plan, client, tag, image, record, found, recipe)
    _promote(client, tag, image)
    dev_size, slim_size = (int((client.inspect_image(ref) or {}).get("Size", 0)) for ref in (plan.image, image))
    output.channel().say(("Sizes:", "bold"), f" dev {plan.image} {human_size(dev_size)}, slim {image}"
                         f" {human_size(slim_size)} ({100 * slim_size / max(dev_size, 1):.0f}%)")


def _attest(plan: Plan, client: DockerClient, tag: str, image: str, record: BuildRecord, found: dict | None,
            recipe: dict[str, str]) -> None:
    """The SBOMs and provenance of ``image`` (built under ``tag``), written beside the build
    manifest (the slim image's beside it too, named by the image); the manifest names them."""
    documents = attestations.make(
        client, tag, image, found=found, variant=plan.variant, configuration=plan.configuration,
        inputs=record.facts.get("inputs", []), files=record.facts.get("files", {}),
        base=record.facts.get("base_image", {}), recipe=recipe, started=record.started,
        invocation=record.path.name.removesuffix(".manifest.json"), cache_dir=plan.path_options.cache_dir)
    suffix = image.removeprefix(plan.image)  # "" or "-slim"
    where = record.path.with_name(record.path.name.replace(".manifest.json", f"{suffix}.manifest.json"))
    record.facts.setdefault("attestations", {})[image] = attestations.write_beside(where, documents)
    record.facts.setdefault(attestations.MADE_WITH, {})[image] = attestations.sboms_made_with(
        attestations.supplier_of(plan.configuration))
    record.phase(f"{suffix.lstrip('-')} attestations".lstrip())  # "attestations", "slim attestations"


def _verify_candidate(plan: Plan, image: str, client: DockerClient, candidate: str, record: BuildRecord) -> dict | None:
    """Verify the candidate (and run the GPU checks when [build] verify_gpus asks); the packages
    the probe found in it. The GPU rows go into the build manifest."""
    expected = Expectations.of_image(client, candidate)
    if plan.platform and platforms.parse(plan.platform) != platforms.host():
        output.channel().say(f"Verifying {candidate} emulated by QEMU ({plan.platform}): its Python and torch start"
                             f" ten or more times slower than natively (up to [build] stall_timeout,"
                             f" {plan.build_options.stall_timeout} s).")
    try:
        _checks, facts = verify_facts(client, candidate, expected, gpus=plan.build_options.verify_gpus,
                                      accelerator=plan.accelerator)
        if "gpu_checks" in facts:
            record.facts.setdefault("gpu_checks", {})[image] = facts["gpu_checks"]
    except Exception as exc:
        output.channel().say((f"The new image failed verification. It is kept as {candidate} for inspection;"
                              f" {image} was not changed.", "red"))
        setattr(exc, KEPT_FOR_INSPECTION, True)
        raise
    return facts.get("inventory")


KEPT_FOR_INSPECTION = "torchbake_candidate_kept"  # set on the error of a candidate that failed verification


def _promote(client: DockerClient, candidate: str, image: str) -> None:
    """The verified candidate takes the real tag."""
    client.tag(candidate, image)
    client.remove_image(candidate)  # the candidate tag only: the image keeps its real tag
    let_go(candidate)
