"""Disk-space preflight: will this build fit? Checked before any download or context.

The estimate counts what is known up front: inputs given by URL that are not cached yet (their
size from a HEAD request), local inputs, and the layers the image will add (about three times
the compressed inputs: wheels and tarballs unpack larger). Each file system involved — the
cache (downloads, wheelhouse, context) and, for a local engine, Docker's data root — must hold
its part plus ``build.min_free_space``.
"""

from __future__ import annotations

import http.client
import os
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from torchbake.configuration.validation import byte_size, is_url
from torchbake.core.errors import DiskSpaceError
from torchbake.core.files import nearest_existing
from torchbake.core.output import human_size
from torchbake.core.redaction import split_credentials
from torchbake.inputs.downloads import DownloadCache, split_fragment

UNPACK_FACTOR = 3


@dataclass(frozen=True)
class Need:
    folder: Path
    role: str  # what the folder is, for the message
    bytes: int
    detail: str


def input_sizes(locations: Iterable[str], cache: DownloadCache, timeout: float) -> tuple[int, int]:
    """(bytes still to download, bytes of every input known) for these locations."""
    to_fetch = known = 0
    for location in locations:
        base, _ = split_fragment(location)
        if not base:
            continue
        if base.startswith("file://") or not is_url(base):
            path = Path(base.removeprefix("file://")).expanduser()
            known += path.stat().st_size if path.is_file() else 0
            continue
        cached = cache.cached_path(base)
        if cached is not None:
            known += cached.stat().st_size
            continue
        size = _remote_size(base, timeout)
        to_fetch += size
        known += size
    return to_fetch, known


def _remote_size(url: str, timeout: float) -> int:
    """The size a HEAD request of ``url`` answers, 0 when unknown. The URL's user part goes as the
    download sends it: an ``Authorization`` header, never in the request's URL (urllib would take
    ``user:password@host`` for a host and a port, and name them in its error)."""
    try:
        plain, authorization = split_credentials(url)
        headers = {"User-Agent": "torchbake", **({"Authorization": authorization} if authorization else {})}
        request = urllib.request.Request(plain, method="HEAD", headers=headers)
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - scheme validated
            return int(response.headers.get("Content-Length") or 0)
    except (OSError, ValueError, http.client.HTTPException):
        return 0  # unknown here; the download itself reports what went wrong


def free_bytes(folder: Path) -> int:
    stats = os.statvfs(nearest_existing(folder))
    return stats.f_bavail * stats.f_frsize


def check(needs: list[Need], margin: str) -> None:
    """Raise DiskSpaceError naming each file system that cannot hold its part plus the margin."""
    keep = byte_size(margin)
    by_device: dict[int, list[Need]] = {}
    for need in needs:
        by_device.setdefault(os.stat(nearest_existing(need.folder)).st_dev, []).append(need)
    problems = []
    for group in by_device.values():
        total = sum(n.bytes for n in group)
        free = free_bytes(group[0].folder)
        if total + keep > free:
            parts = "; ".join(f"{n.role} {human_size(n.bytes)} ({n.detail})" for n in group)
            problems.append(f"  {group[0].folder}: needs about {human_size(total)} ({parts}) + {human_size(keep)} kept free"
                            f" (build.min_free_space), has {human_size(free)} free")
    if problems:
        raise DiskSpaceError(
            "Not enough free disk space for this build (checked before any download):\n" + "\n".join(problems)
            + "\nFree some space (docker builder prune, docker image prune), point paths.cache_dir"
            " (TORCHBAKE_PATHS_CACHE_DIR) at a larger disk, or lower build.min_free_space."
        )


def build_needs(*, locations: Mapping[str, str], cache: DownloadCache, cache_dir: Path,
                docker_root: str, timeout: float) -> list[Need]:
    """What a build of these inputs needs where: downloads in the cache, layers in Docker's root."""
    to_fetch, known = input_sizes([v for v in locations.values() if v], cache, timeout)
    needs = [Need(cache_dir, "downloads", to_fetch, "inputs not cached yet")]
    if docker_root:
        needs.append(Need(Path(docker_root), "image layers", known * UNPACK_FACTOR,
                          f"about {UNPACK_FACTOR}x the {human_size(known)} of inputs"))
    return needs
