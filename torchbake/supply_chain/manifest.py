"""Build records: a JSON manifest written next to each build's log, and `invoke show-build`.

The manifest holds every input with its digest (or commit), the base image and its id, the exact
docker command, the tool version, the outcome and the timings of each phase. ``show-build``
finds the manifest of an image by its id and prints it with the image's own labels (which travel
with the image; the manifest stays on the machine that built it).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torchbake
from torchbake.core.files import write_atomically
from torchbake.core.redaction import redact_all
from torchbake.core.status import ON_THIS_ENGINE, Status
from torchbake.supply_chain.inventory import recorded_files


@dataclass
class BuildRecord:
    """Filled in while a build runs; :meth:`write` saves it (atomically) as JSON."""

    image: str
    variant: str
    profile: str
    log_file: Path
    started: float = field(default_factory=time.time)
    phases: dict[str, float] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    _mark: float = field(default_factory=time.monotonic)

    def phase(self, name: str) -> None:
        """The phase that just ended (seconds since the previous mark)."""
        now = time.monotonic()
        self.phases[name] = round(now - self._mark, 2)
        self._mark = now

    @property
    def path(self) -> Path:
        return manifest_path(self.log_file)

    def write(self, status: Status, error: str = "") -> Path:
        document = {
            "torchbake_version": torchbake.__version__,  # the installed distribution's (its metadata)
            "image": self.image,
            "variant": self.variant,
            "profile": self.profile,
            "status": status,
            "error": error,
            "started": datetime.fromtimestamp(self.started, UTC).isoformat(timespec="seconds"),
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
            "seconds": {**self.phases, "total": round(time.time() - self.started, 2)},
            "log": str(self.log_file),
            **self.facts,
        }
        return write_atomically(self.path, json.dumps(redact_all(document), indent=2, sort_keys=True) + "\n")


def update(path: Path, key: str, value: Any) -> None:
    """The manifest at ``path`` with ``key`` set to ``value``, written again atomically; its time
    kept (manifests are read newest first: one updated stays where its build put it)."""
    document = json.loads(path.read_text())
    document[key] = value
    times = path.stat()
    write_atomically(path, json.dumps(redact_all(document), indent=2, sort_keys=True) + "\n")
    os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))


def manifest_path(log_file: Path) -> Path:
    return log_file.with_name(log_file.stem + ".manifest.json")


def _manifests(log_dir: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every readable manifest in ``log_dir``, newest first (a manifest is written as its build ends)."""
    if not log_dir.is_dir():
        return
    for path in sorted(log_dir.glob("*.manifest.json"), key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(document, dict):
            yield path, document


def find_manifest(log_dir: Path, image_id: str) -> tuple[Path, dict[str, Any]] | None:
    """The newest manifest in ``log_dir`` of the build that made ``image_id`` (a dev build's slim
    image too)."""
    return next(((path, document) for path, document in _manifests(log_dir) if image_id and image_id in (
        document.get("image_id"), document.get("candidate_id"), document.get("slim_image_id"))), None)


def recent_builds(log_dir: Path) -> list[dict[str, Any]]:
    """The manifests of this host's successful builds (and of builds that found their image
    unchanged or re-tagged it), newest first."""
    return [document for _, document in _manifests(log_dir)
            if document.get("status") in ON_THIS_ENGINE and document.get("image")]


def describe(reference: str, info: Mapping[str, Any], found: tuple[Path, dict[str, Any]] | None) -> list[tuple[str, str]]:
    """Rows (what, value) for show-build: the image's labels, then its manifest."""
    labels = (info.get("Config") or {}).get("Labels") or {}
    rows = [("image", reference), ("id", info.get("Id", "")), ("created", labels.get("org.opencontainers.image.created", "")),
            ("torchbake", labels.get("torchbake.version", "(not built by torchbake)"))]
    for key in ("variant", "profile", "python", "torch-version", "extension", "input-hash"):
        if labels.get(f"torchbake.{key}"):
            rows.append((key, labels[f"torchbake.{key}"]))
    if labels.get("org.opencontainers.image.base.name"):
        rows.append(("base image", f"{labels['org.opencontainers.image.base.name']}"
                                   f" ({labels.get('org.opencontainers.image.base.digest', '')[:19] or 'digest not recorded'})"))
    for key, value in sorted(labels.items()):
        if key.startswith(("torchbake.source.", "torchbake.built.", "torchbake.extension-")) and value:
            rows.append((key.removeprefix("torchbake."), value))
    for name, digest in sorted(recorded_files(labels).items()):
        rows.append((f"input {name}", f"sha256:{digest}"))
    if found is None:
        rows.append(("manifest", "none on this host (built elsewhere, or its logs were removed);"
                                 " the rows above are what the image itself records"))
        return rows
    path, document = found
    rows.append(("manifest", str(path)))
    for entry in document.get("inputs", []):
        rows.append((f"given {entry['option']}", f"{entry['location']} sha256:{entry['sha256'] or '(resolved by pip)'}"))
    rows.append(("status", document.get("status", "")))
    rows.append(("built", f"{document.get('started', '')} → {document.get('finished', '')}"))
    seconds = document.get("seconds", {})
    rows.append(("seconds", ", ".join(f"{k} {v:g}" for k, v in seconds.items())))
    rows.append(("docker command", document.get("docker_command", "")))
    rows.append(("log", document.get("log", "")))
    return rows
