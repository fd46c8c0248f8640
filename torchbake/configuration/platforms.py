"""The platforms an image is built for, as data: what Docker, Debian, the wheels and QEMU call
each one (the model: cibuildwheel's ``platforms/``, here one record per platform).

A user names a platform the way Docker does (``linux/arm64``) or the way a machine calls
itself (``aarch64``, ``arm64``); :func:`parse` accepts every spelling and refuses anything else
with the list of what is accepted. "Which platforms" is ``[image] platforms`` (``--platform``);
empty means the engine's own.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Platform:
    name: str  # Docker's and OCI's: os/architecture
    arch: str  # OCI's and Debian's architecture (debootstrap --arch, docker import --platform)
    machine: str  # what uname -m says in its containers, and the wheels' platform tags end with
    aliases: tuple[str, ...]  # what else users type for it
    github_runner: str  # the GitHub-hosted runner of this machine (build-all --emit-matrix github's runs-on)
    # What its programs read of the CPU from /sys that another machine's kernel does not have, for a
    # container of it emulated there: file below /sys/devices/system/cpu/cpuN/ → its text. arm64:
    # MIDR_EL1, which PyTorch's oneDNN (xbyak_aarch64) reads on import and without which it crashes
    # (an Arm Neoverse N1's; QEMU emulates an Armv8 CPU of at least its features).
    emulated_cpu: tuple[tuple[str, str], ...] = ()

    @property
    def wheel_tags(self) -> list[str]:
        """The wheel platform tags an image of this platform installs by default: PyTorch's
        manylinux_2_28 wheels (and every older manylinux, :func:`torchbake.inputs.wheelhouse.compatible_platforms`)
        and wheels built locally for the machine."""
        return [f"manylinux_2_28_{self.machine}", f"linux_{self.machine}"]

    @property
    def binfmt_handler(self) -> str:
        """The name QEMU's binfmt_misc handler for this machine is registered under."""
        return f"qemu-{self.machine}"

    @property
    def suffix(self) -> str:
        """The tag suffix of this platform's own image in a multi-platform build: ``-arm64``."""
        return f"-{self.arch}"


# The platforms PyTorch publishes Linux wheels for, and debootstrap and QEMU can make.
PLATFORMS = (
    Platform("linux/amd64", "amd64", "x86_64", ("amd64", "x86_64", "x86-64", "linux/x86_64"),
             "ubuntu-24.04"),
    Platform("linux/arm64", "arm64", "aarch64", ("arm64", "aarch64", "linux/aarch64", "linux/arm64/v8", "arm64/v8"),
             "ubuntu-24.04-arm", (("regs/identification/midr_el1", "0x00000000413fd0c1\n"),
                                  ("regs/identification/revidr_el1", "0x0000000000000000\n"))),
)
BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")


def accepted() -> str:
    """What :func:`parse` accepts, for errors and help."""
    return "; ".join(f"{p.name} (or {', '.join(p.aliases[:2])})" for p in PLATFORMS)


def parse(value: str) -> Platform:
    """The platform ``value`` names, in any spelling users type."""
    text = value.strip().lower()
    for platform in PLATFORMS:
        if text == platform.name or text in platform.aliases:
            return platform
    raise ValueError(f"{value!r} is not a platform torchbake builds; accepted: {accepted()}")


def parse_all(values: Iterable[str]) -> tuple[Platform, ...]:
    """Each platform of ``values`` once, in :data:`PLATFORMS`' order whatever order they were
    given in (the index of a multi-platform image lists them so: the same platforms, the same tag
    digest). Entries may hold several, comma-separated, as ``--platform linux/amd64,linux/arm64``."""
    found: list[Platform] = []
    for value in values:
        for part in str(value).split(","):
            if not part.strip():
                raise ValueError(f"{value!r} holds an empty platform name; accepted: {accepted()}")
            platform = parse(part)
            if platform not in found:
                found.append(platform)
    return tuple(sorted(found, key=PLATFORMS.index))


def by_machine(machine: str) -> Platform | None:
    """The platform of a machine name (``uname -m``, an engine's ``Architecture``)."""
    try:
        return parse(machine)
    except ValueError:
        return None


def host() -> Platform:
    """This machine's platform (linux/amd64 where it is none torchbake builds for)."""
    return by_machine(os.uname().machine) or PLATFORMS[0]


def wheel_tags_for(platform: Platform, configured: Sequence[str]) -> list[str]:
    """The wheel platform tags of ``platform``'s image: those of ``[wheels] platforms`` that end
    with its machine (a team's own list, e.g. manylinux_2_17), else its defaults."""
    own = [tag for tag in configured if tag.endswith("_" + platform.machine)]
    return own or platform.wheel_tags


def emulation_handler(platform: Platform, binfmt_dir: Path = BINFMT_DIR) -> str:
    """Why a container of ``platform`` cannot run emulated on this host, or "" when QEMU's
    handler is registered with the F flag (the interpreter opened at registration, so it runs
    inside containers and build steps too)."""
    if not (binfmt_dir / "status").exists():
        return (f"binfmt_misc is not mounted at {binfmt_dir}, so this host cannot run {platform.name} programs emulated."
                f" Mount it (`mount -t binfmt_misc binfmt_misc {binfmt_dir}`) and register QEMU:"
                " `bash scripts/ensure-emulation.sh` in torchbake's repository does both")
    handler = binfmt_dir / platform.binfmt_handler
    if not handler.exists():
        return (f"no QEMU handler for {platform.machine} is registered ({handler} is missing), so this host cannot run"
                f" {platform.name} programs. Install QEMU's user emulation (Debian, Ubuntu: apt-get install"
                " qemu-user-static): `bash scripts/ensure-emulation.sh` in torchbake's repository does it")
    text = handler.read_text(errors="replace")
    if "enabled" not in text.splitlines()[:1]:
        return f"{handler} is disabled; enable it: echo 1 > {handler}"
    flags = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("flags:")), "")
    if "F" not in flags:
        return (f"{handler} is registered without the F flag (flags: {flags or 'none'}), so the emulator cannot be"
                " found inside build containers. Register it again with F: Debian's qemu-user-static does"
                f" (`echo -1 > {handler}`, then `apt-get install --reinstall qemu-user-static`)")
    return ""


def why_not_here(platform: Platform) -> str:
    """Why this host cannot run ``platform``'s programs (build steps, debootstrap's second stage,
    containers), or "" when it can: natively, or emulated (:func:`emulation_handler`)."""
    return "" if platform.machine == host().machine else emulation_handler(platform)


def how_built(name: str, builder: str, *, from_wheels: bool) -> str:
    """Where a build for the platform ``name`` ("": the engine's own) runs, for plans: natively,
    on a builder's node of that platform, or emulated by QEMU (and what that costs)."""
    here = host()
    if not name or parse(name) == here:
        return f"{name or here.name}, native on this {here.machine} host"
    if builder:
        return f"{name}, on builder {builder}'s {parse(name).machine} node where it has one, else emulated there (QEMU)"
    if from_wheels:
        return (f"{name}, emulated on this {here.machine} host (QEMU) for the OS packages and verify only; the wheels"
                " are unpacked natively")
    return f"{name}, emulated on this {here.machine} host (QEMU): expect ~10x the native time"
