"""The Debian and Ubuntu releases torchbake knows: their names, the Python and ccache each ships, and how an
image reference names one. Data and lookups only; making a missing base OS image is base_os's job."""

from __future__ import annotations

import re
from dataclasses import dataclass

from torchbake.core import references
from torchbake.core.errors import ConfigurationError

DEFAULT_OS_IMAGE = "debian:bookworm"  # the FROM image when the Python does not decide it (provider standalone)


@dataclass(frozen=True)
class OsRelease:
    """A Debian or Ubuntu release torchbake knows: its names and the Python it ships."""

    os_id: str  # /etc/os-release ID
    version: str  # /etc/os-release VERSION_ID
    suite: str  # the codename debootstrap knows
    python: str  # the OS's python3
    ccache: str  # the OS's ccache (what a dev image of this release compiles through)

    @property
    def reference(self) -> str:
        """How torchbake names the release's image: debian:<suite>, ubuntu:<version> (Docker Hub's spellings)."""
        return f"debian:{self.suite}" if self.os_id == "debian" else f"ubuntu:{self.version}"


OS_RELEASES = (
    OsRelease("debian", "11", "bullseye", "3.9", "4.2"),
    OsRelease("debian", "12", "bookworm", "3.11", "4.7.5"),
    OsRelease("debian", "13", "trixie", "3.13", "4.11.2"),
    OsRelease("ubuntu", "20.04", "focal", "3.8", "3.7.7"),
    OsRelease("ubuntu", "22.04", "jammy", "3.10", "4.5.1"),
    OsRelease("ubuntu", "24.04", "noble", "3.12", "4.9.1"),
)
_LIBRARY = re.compile(r"^(?:docker\.io/)?(?:library/)?(debian|ubuntu):([^@]*)$")


def release_of(os_id: str, version: str) -> OsRelease | None:
    return next((r for r in OS_RELEASES if (r.os_id, r.version) == (os_id, version)), None)


def split_os_reference(reference: str) -> tuple[str, str] | None:
    """("debian", "bookworm") for debian:bookworm (docker.io/library/ spellings too); None for
    any other image."""
    match = _LIBRARY.match(reference)
    return (match.group(1), match.group(2)) if match else None


def release_of_reference(reference: str) -> OsRelease | None:
    """The release a debian:/ubuntu: reference names by codename or version (debian:12, ubuntu:jammy),
    pinned by digest or not (ubuntu:22.04@sha256:… is still 22.04)."""
    name, tag, _ = references.split(reference)
    parts = split_os_reference(f"{name}:{tag}" if tag else name)
    if parts is None:
        return None
    os_id, tag = parts
    return next((r for r in OS_RELEASES if r.os_id == os_id and tag in (r.suite, r.version)), None)


def os_image_for_python(python: str) -> str:
    """The OS image whose own Python is ``python`` ("" if no release torchbake knows ships it)."""
    return next((r.reference for r in OS_RELEASES if r.python == python), "")


def releases_with_python(python: str) -> list[str]:
    return [r.reference for r in OS_RELEASES if r.python == python]


def suite_of(reference: str) -> str:
    """The debootstrap suite that makes ``reference``: the codename of debian:<suite> or
    ubuntu:<suite>, or of a version torchbake knows (debian:12 → bookworm)."""
    parts = split_os_reference(reference)
    if parts is None:
        return ""
    release = release_of_reference(reference)
    return release.suite if release else parts[1]


def python_mismatch(python: str, reference: str, release: OsRelease, flag: str) -> ConfigurationError:
    others = [r for r in releases_with_python(python) if r != reference]
    return ConfigurationError(
        f"Python {python} was requested, but the base image {reference} ({flag}) is {release.os_id}"
        f" {release.version}, whose OS Python is {release.python}. Use --python {release.python},"
        + (f" a base image of {' or '.join(others)}," if others else "")
        + ' or set [python] provider = "standalone" with a standalone_url for that version.'
    )
