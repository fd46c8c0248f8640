"""Plans whose closure a lock can hold (release and base images): the image's lock found and
checked against its configuration, and the build held to it: exactly its wheels (the input
hash), its FROM image, and its Debian packages at their versions (`invoke lock` writes it:
torchbake.tasks.lock; the file format: torchbake.inputs.locks)."""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchbake.adapters.engine import content_id
from torchbake.configuration import options, os_releases, platforms
from torchbake.configuration.settings import Settings
from torchbake.core.errors import ConfigurationError, DownloadError, EngineError
from torchbake.core.redaction import redact
from torchbake.inputs import locks, wheelhouse
from torchbake.supply_chain.inventory import LOCK_LABEL


@dataclass(frozen=True, kw_only=True)
class Lockable:
    """The lock fields and checks of a plan (a mixin beside PlanCommon); the plan names what its
    lock resolves (:meth:`lock_requirements`) and how its Dockerfile runs the OS step."""

    lock_path: str = ""  # where this image's lock is, or would be (`invoke lock`)
    lock_platform: str = ""  # the platform its wheels are for
    lock: locks.Lock | None = field(default=None, repr=False)  # the lock the build follows; None: the closure floats
    lock_state: str = ""  # what the plan says of it
    lock_command: str = "invoke lock"  # the command that locks it (its variant's lock_command)
    lock_unusable: bool = False  # a lock file is there, and the build cannot follow it (corrupt, other requirements)

    def lock_requirements(self) -> list[str]:
        """What a lock of this image resolves, as the configuration gives it."""
        raise NotImplementedError

    def os_step_args(self) -> list[str]:
        """install_os_packages.sh's arguments as the Dockerfile gives them (what `invoke lock` asks
        apt about: docker/common/install_os_packages.sh)."""
        return [self.python_provider, "0"]

    def check_preflight(self, facts) -> None:
        self.check_lock_base(facts.base_id)

    def check_dry_run(self, client) -> None:
        """An OS image named by its release (ubuntu:20.04) whose Python is not the one asked for, as
        the build refuses it once it reads the image; and the FROM image the engine holds now, held
        to the lock as the build holds it (a base that is not there yet is made or pulled by the
        build, then held to it)."""
        release = os_releases.release_of_reference(self.base_image)
        if self.python_provider == "os" and release is not None and release.python != self.python_version:
            raise os_releases.python_mismatch(self.python_version, self.base_image, release, self.from_flag)
        if self.lock is None or not self.build_options.locked:
            return
        try:
            held = client.inspect_image(self.base_image)
        except EngineError:  # no engine: the plan alone, as a dry run without one always was
            return
        if held is not None:
            self.check_lock_base(content_id(held, self.platform))

    def check_lock_base(self, base_id: str) -> None:
        """With [build] locked, the FROM image (``base_id``) must be the one the lock was made on
        (where the lock records it): another base is another image, locked again on purpose."""
        base = (self.lock.made_for.get("base") or {}) if self.lock is not None else {}
        if not (self.build_options.locked and base.get("content-id")) or base["content-id"] == base_id:
            return
        raise ConfigurationError(
            f"build.locked: {self.image} cannot be built as locked: its FROM image {self.base_image} is"
            f" {base_id[:19]}, and {self.lock_path} was made on {base.get('reference')} {base['content-id'][:19]}."
            f" Lock it on this base with this build's flags and --config files: `{self.lock_command}` (review the lock's"
            " diff, commit it).")

    def check_before_build(self, client) -> None:
        """A lock's Debian versions are all in the mirror (apt asked in a throwaway container of the
        FROM image, another platform's emulated, nothing installed), or none is built: each missing
        one named (exit 3)."""
        pins = self.deb_pins()
        if not pins:
            return
        wanted = " ".join(f"{name}={version}" for name, version in sorted(pins.items()))
        script = ('apt-get -qq -o Acquire::Languages=none update >/dev/null && apt-get -qq --print-uris install -y'
                  f' --no-install-recommends --allow-downgrades {wanted} >/dev/null')
        result = client.run_capture(self.base_image, ["-c", script], entrypoint="bash",
                                    network=self.build_options.network or None, platform=self.platform or None)
        if result.returncode != 0:
            missing = re.findall(r"Version '([^']+)' for '([^']+)' was not found", result.output)
            said = ", ".join(f"{name} {version}" for version, name in missing) or result.output.strip()[-1500:]
            raise DownloadError(f"{self.lock_path} locks Debian packages the mirror does not have (now): {said}."
                                " Nothing was built. Point the FROM image's apt sources at a snapshot mirror that"
                                f" holds them, or lock the versions the mirror has: `{self.lock_command} --upgrade`"
                                " (with this build's flags and --config files).")

    def hash_inputs(self) -> dict[str, object]:
        """A locked image's wheels are its lock's: unchanged whatever the index publishes."""
        if self.lock is None:
            return {}
        return {"lock": [(wheel.name, wheel.version, wheel.sha256) for wheel in self.lock.wheels]}

    def deb_pins(self) -> dict[str, str]:
        return self.lock.debs() if self.lock is not None else {}

    def deb_pin_args(self) -> dict[str, str]:
        """DEB_PINS: the Debian packages its lock holds, installed at their versions
        (common/install_os_packages.sh); none without a lock."""
        pins = self.deb_pins()
        return {"DEB_PINS": " ".join(f"{name}={version}" for name, version in sorted(pins.items()))} if pins else {}

    def lock_label(self) -> dict[str, str]:
        """Its lock, an input the SBOM and provenance name: by its file name (where the checkout is
        must not change the image) and digest."""
        return {LOCK_LABEL: f"{Path(self.lock.path).name} sha256:{self.lock.sha256}" if self.lock else ""}

    def lock_as_of(self) -> str:
        """How new a lock's requirements may be, as configured ("": as of the lock), recorded in it."""
        return ""

    def lock_day(self) -> tuple[str, list[str]]:
        """(the day a lock's resolution is held to, "" for none; the projects it does not hold)."""
        return "", []

    def staged_wheels(self, stage, cache, resolve) -> dict[str, str]:
        """Into wheelhouse/: the lock's wheels, each checked against its digest (no resolver), or,
        without a lock, what ``resolve()`` resolves. Returns project → version."""
        return stage.locked_wheels(self.lock, cache, self.wheel_options) if self.lock is not None else resolve()


def lock_platform(settings: Settings) -> str:
    """The platform the image's wheels are for (the machine its wheel platform tags name)."""
    machine = wheelhouse.image_environment(settings.python.version, settings.wheels.platforms)["platform_machine"]
    return (platforms.by_machine(machine) or platforms.host()).name


BUILD_TASKS = ("build", "build-base")  # the tasks whose flags `invoke lock` takes as they are


def lock_command(command: str) -> str:
    """``command`` (the variant's lock_command) with the flags this run's build was typed with that
    the lock task takes too (the image's name, tag, Python, platforms, wheels, --config files):
    the lock it writes is the one that build looks for. A cell of build-all's matrix is locked by
    `invoke lock --matrix` with the matrix's --config files (a cell locked already keeps its
    versions); other runs get ``command`` as it is."""
    task = next((index for index, token in enumerate(sys.argv) if token in (*BUILD_TASKS, "build-all", "lock")), None)
    if task is not None and sys.argv[task] == "build-all":
        configs = [_unsecret(token) for token in options.typed_among((options.CONFIG,), sys.argv[task + 1:])]
        return shlex.join(["invoke", "lock", "--matrix", *configs])
    if task is None or sys.argv[task] not in BUILD_TASKS:  # invoke's own options come before the task's name
        return command
    typed = [_unsecret(token) for token in options.typed_among(options.LOCK_FLAGS, sys.argv[task + 1:])]
    return shlex.join([*shlex.split(command), *(token for token in typed if token not in shlex.split(command))])


SECRET_HELD = "<as you typed it: it holds a secret>"


def _unsecret(token: str) -> str:
    """A typed word for the hint: as it was, or, where it holds a secret (a URL's password), a
    placeholder that says so: never the secret, nor a masked copy that would send *** when typed."""
    if redact(token) == token:
        return token
    flag, equals, _ = token.partition("=")
    return f"{flag}={SECRET_HELD}" if token.startswith("-") and equals else SECRET_HELD


def lock_fields(settings: Settings, command: str, requirements: list[str], reuse_context: bool,
                as_of: str = "") -> dict[str, Any]:
    """The :class:`Lockable` fields of a plan for ``settings`` (``command``: the one that locks it):
    its lock, the one its build follows
    (None: its closure floats), and what the plan says of it; with [build] locked, no lock or one
    made for other requirements is refused here, before anything is fetched."""
    command = lock_command(command)
    platform = lock_platform(settings)
    path = locks.path_for(Path(settings.build.locks).expanduser(), settings.image.reference, platform)
    fields: dict[str, Any] = {"lock_path": str(path), "lock_platform": platform, "lock_command": command}
    try:
        found = locks.read(path, settings.python.version, settings.wheels.platforms)
    except ConfigurationError as exc:  # refused with --locked; else the closure floats, and the plan says why
        if settings.build.locked:
            raise
        return {**fields, "lock_state": f"floats: {exc}", "lock_unusable": True}
    differs = locks.mismatch(found, requirements, settings.python.version, platform, as_of,
                             settings.image.reference) if found else []
    if found and not differs and (changed := locks.changed_files(found, requirements)):
        raise ConfigurationError(f"{settings.image.reference}: a local wheel is not the one its lock holds: "
                                 f"{'; '.join(changed)}. The file changed under its name since it was locked. If the"
                                 f" new file is the one to build, lock it again: `{command}` (review the lock's diff,"
                                 " commit it); else put the locked file back.")
    if settings.build.locked and (found is None or differs):
        why = f"its lock {path} was made for other {'; '.join(differs)}" if found else f"it has no lock ({path})"
        raise ConfigurationError(f"build.locked: {settings.image.reference} cannot be built as locked: {why}. Lock it"
                                 f" with this build's flags and --config files: `{command}` (review the lock's diff,"
                                 " commit it).")
    if reuse_context:
        return {**fields, "lock_state": "as the kept context holds it (--no-prepare)"}
    if found is None:
        return {**fields, "lock_state": f"floats: no lock ({path}; `{command}` writes one)"}
    if differs:
        return {**fields, "lock_state": f"floats: the lock {path} was made for other {'; '.join(differs)}"
                                        f" (`{command}` again)", "lock_unusable": True}
    return {**fields, "lock": found,
            "lock_state": f"locked by {path} ({len(found.wheels)} wheels, sha256 {found.sha256[:12]})"}
