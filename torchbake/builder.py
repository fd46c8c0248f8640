"""Carrying out a release build plan: preflight, context, ``docker build``, verify, clean up.

The image is built under a candidate tag and only tagged ``NAME:TAG`` once it passed
verification, so a failed build or a failed verification never takes the tag away from the
image it pointed to before.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console

from . import __version__
from .context import PreparedContext, choose_context_dir, load_prepared, prepare_release_context
from .downloads import DownloadCache
from .engine import DockerClient
from .errors import ConfigurationError, EngineError
from .plan import ReleasePlan, check_os_python, describe_plan, parse_os_release
from .verify import Expectations, verify_image

CONTEXT_PLACEHOLDER = Path("<context>")


@dataclass(frozen=True)
class BuildResult:
    image: str
    image_id: str
    size_bytes: int
    log_file: Path
    input_hash: str
    seconds: float


def build_args(plan: ReleasePlan) -> dict[str, str]:
    return {
        "BASE_IMAGE": plan.base_image,
        "PYTHON_VERSION": plan.python_version,
        "PYTHON_PROVIDER": plan.python_provider,
        "RENDER_GID": str(plan.render_gid),
    }


def input_hash(plan: ReleasePlan, prepared: PreparedContext, base_image_id: str) -> str:
    material = {
        "build_args": build_args(plan),
        "base_image_id": base_image_id,
        "dockerfile": prepared.dockerfile_sha256,
        "common": prepared.common_sha256,
        "inputs": prepared.inputs,
        "pins": prepared.pins,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def image_labels(plan: ReleasePlan, prepared: PreparedContext | None, base_image_id: str, digest: str) -> dict[str, str]:
    pending = "<computed after preparing the context>"
    labels = {
        "org.opencontainers.image.title": plan.image.rsplit(":", 1)[0],
        "org.opencontainers.image.version": plan.image.rsplit(":", 1)[1],
        "org.opencontainers.image.created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "org.opencontainers.image.base.name": plan.base_image,
        "org.opencontainers.image.base.digest": base_image_id,
        "torchbake.version": __version__,
        "torchbake.variant": "release",
        "torchbake.profile": plan.profile,
        "torchbake.python": plan.python_version,
        "torchbake.torch-version": prepared.torch_version if prepared else pending,
        "torchbake.extension": prepared.extension if prepared else pending,
        "torchbake.extension-module": plan.extension_module,
        "torchbake.cuda-arch-list": plan.cuda_arch_list,
        "torchbake.rocm-arch": plan.rocm_arch,
        "torchbake.input-hash": digest or pending,
        "torchbake.inputs": json.dumps(prepared.inputs, sort_keys=True) if prepared else pending,
    }
    return {k: v for k, v in labels.items() if v}


def log_path(log_dir: Path, image: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return log_dir / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', image)}-{stamp}.log"


def candidate_tag(image: str) -> str:
    name = image.rsplit(":", 1)[0]
    return f"{name}:torchbake-candidate-{uuid.uuid4().hex[:8]}"


def dry_run(plan: ReleasePlan, client: DockerClient, console: Console) -> str:
    """The plan as text, with the exact docker command (values known only after preparing the
    context are shown as placeholders). Touches nothing."""
    argv, env = client.build_command(
        context=CONTEXT_PLACEHOLDER, dockerfile=CONTEXT_PLACEHOLDER / "Dockerfile",
        tag=plan.image if not plan.verify else "<candidate tag>", build_args=build_args(plan),
        labels=image_labels(plan, None, "<base image id>", ""), no_cache=plan.no_cache,
    )
    text = describe_plan(plan, argv, env)
    console.print(text, markup=False, highlight=False, soft_wrap=True)
    return text


def preflight(plan: ReleasePlan, client: DockerClient) -> str:
    """Checks against the engine before any slow work; returns the base image id."""
    client.check_engine()
    base = client.inspect_image(plan.base_image)
    if base is None:
        raise ConfigurationError(
            f"Base image {plan.base_image!r} (--base-img) does not exist on this engine."
            f" Make one offline with `invoke bootstrap-os --suite bookworm --name {plan.base_image}`,"
            f" or `docker pull {plan.base_image}` where a registry is reachable."
        )
    result = client.run_capture(plan.base_image, ["/etc/os-release"], entrypoint="cat", timeout=120)
    if result.returncode == 0:
        check_os_python(plan, parse_os_release(result.output))
    return base["Id"]


def build_release(plan: ReleasePlan, client: DockerClient, console: Console) -> BuildResult:
    started = time.monotonic()
    settings = plan.settings
    base_id = preflight(plan, client)
    log_file = log_path(settings.paths.log_dir, plan.image)
    console.print(f"[bold]Building {plan.image}[/] (log: {log_file})")
    cache = DownloadCache(settings.paths.cache_dir, settings.checksums)
    if plan.reuse_context:
        folder = Path(plan.build_dir).expanduser().resolve()
        prepared, temporary = load_prepared(folder), False
    else:
        folder, temporary = choose_context_dir(plan, settings.paths.cache_dir / "contexts")
        prepared = None
    try:
        if prepared is None:
            console.print(f"Preparing the build context in {folder}")
            prepared = prepare_release_context(plan, cache, folder, temporary=temporary, log_file=log_file)
        digest = input_hash(plan, prepared, base_id)
        tag = candidate_tag(plan.image) if plan.verify else plan.image
        iidfile = settings.paths.cache_dir / "iid" / f"{uuid.uuid4().hex}.txt"
        iidfile.parent.mkdir(parents=True, exist_ok=True)
        argv, env = client.build_command(
            context=folder, dockerfile=folder / "Dockerfile", tag=tag, build_args=build_args(plan),
            labels=image_labels(plan, prepared, base_id, digest), iidfile=iidfile, no_cache=plan.no_cache,
        )
        client.build(argv, env, log_file)
        image_id = iidfile.read_text().strip()
        if plan.verify:
            _verify_candidate(plan, client, tag, console)
    finally:
        if prepared is not None:
            iidfile.unlink(missing_ok=True)
        if temporary:
            shutil.rmtree(folder, ignore_errors=True)
    info = client.inspect_image(plan.image) or {}
    result = BuildResult(image=plan.image, image_id=image_id, size_bytes=int(info.get("Size", 0)),
                         log_file=log_file, input_hash=digest, seconds=time.monotonic() - started)
    console.print(
        f"[bold green]Built {result.image}[/] {result.image_id[:19]} "
        f"{result.size_bytes / 1e9:.2f} GB in {result.seconds:.0f} s (log: {log_file})"
    )
    return result


def _verify_candidate(plan: ReleasePlan, client: DockerClient, candidate: str, console: Console) -> None:
    labels = client.image_labels(candidate)
    try:
        verify_image(client, candidate, Expectations.from_labels(labels), console)
    except Exception:
        console.print(
            f"[red]The new image failed verification. It is kept as {candidate} for inspection;"
            f" {plan.image} was not changed.[/]"
        )
        raise
    result = client.call("tag", candidate, plan.image, check=False)
    client.call("image", "rm", candidate, check=False)
    if result.returncode != 0:
        raise EngineError(f"Tagging {candidate} as {plan.image} failed: {result.output.strip()}")
