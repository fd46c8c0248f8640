"""The build tools of the source's day: a base image's build requirements ([base] requirements:
cmake, ninja, numpy …) resolved on the host no newer than the PyTorch tag they build, by uv's
``--exclude-newer`` at the date of the tag's commit. PyTorch 2.0's tree predates CMake 4, which
refuses its bundled third-party projects' ``cmake_minimum_required`` (pytorch/pytorch#150149), and
numpy 2: resolved today, its build stops at configure; resolved as of its day, it builds.

Where no release of that day has a wheel for the image's Python (numpy of March 2023 for Python
3.13), the oldest release that has one is taken, and said. The developers' tools ([base] tools:
pytest, black …) are not dated. Requirements given as a path or URL (a stand-in torch wheel) are
taken as they are. CMake 4's own escape (``CMAKE_POLICY_VERSION_MINIMUM=3.5``) and a sed over
``third_party`` (seed 001's) are stopgaps torchbake does not use: the CMake of the tag's day needs
neither.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, timedelta
from pathlib import Path

from torchbake.adapters import command
from torchbake.configuration.validation import is_location
from torchbake.core.errors import CommandError
from torchbake.core.files import read_back, write_atomically
from torchbake.core.redaction import redact

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)")


@dataclasses.dataclass(frozen=True)
class DatedRequirements:
    """What a base image installs of its build requirements, as of a day."""

    day: str  # YYYY-MM-DD the resolution was held to ("": not dated, resolved as of now)
    pins: tuple[str, ...]  # name==version: the whole closure of the dated requirements
    newer: Mapping[str, str] = dataclasses.field(default_factory=dict)  # name → the oldest version with a wheel
    # for the image's Python, where none of that day has one
    given: tuple[str, ...] = ()  # paths and URLs, taken as they are

    def requirements(self) -> list[str]:
        """What the wheelhouse resolves: the pins and the given files."""
        return [*self.pins, *self.given]

    def describe(self, tag: str) -> str:
        """"no newer than 2023-03-15 (pytorch v2.0.0's commit): cmake==3.26.0, …; numpy 2.1.0 (the oldest …)"."""
        text = (f"no newer than {self.day} ({tag}): " if self.day else "as of now: ") + ", ".join(self.pins)
        for name, version in sorted(self.newer.items()):
            text += f"; {name} {version} (the oldest with a wheel for this Python: none of {self.day} has one)"
        return text

    def to_record(self) -> dict:
        return {"day": self.day, "pins": list(self.pins), "newer": dict(self.newer), "given": list(self.given)}


def commit_day(tree: Path, commit: str) -> str:
    """The date (YYYY-MM-DD, UTC) of ``commit`` in the clone ``tree``: the day its tag was made."""
    shown = command.run(["git", "show", "-s", "--format=%cd", "--date=format-local:%Y-%m-%d", commit], capture=True,
                        echo=False, cwd=tree, env={"TZ": "UTC"})
    return shown.output.strip()


def resolve(requirements: Sequence[str], day: str, python_version: str, platform: str, uv: Path,
            index: Mapping[str, str], cache_root: Path, *, log_file: Path | None, remember: bool = True
            ) -> DatedRequirements:
    """``requirements`` resolved for the image's Python and platform, no newer than ``day`` ("":
    as of now), by ``uv`` asking ``index`` (uv's environment: the indexes pip is configured with).
    Kept in ``<cache>/build-tools/`` by what it was asked (``remember``: a dry run keeps nothing)."""
    given = tuple(r for r in requirements if is_location(r))
    wanted = [r for r in requirements if r not in given]
    key = hashlib.sha256(json.dumps([wanted, day, python_version, platform, sorted(index.items())]).encode()).hexdigest()
    kept = cache_root / "build-tools" / f"{key[:32]}.json"
    if (text := read_back(kept)) is not None:
        found = json.loads(text)
        return DatedRequirements(found["day"], tuple(found["pins"]), found["newer"], given)
    newer: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="torchbake-uv-cache-") as scratch:  # a dry run keeps nothing
        uv_cache = cache_root / "build-tools" / "uv-cache" if remember else Path(scratch)  # the indexes' pages
        found = _resolve(wanted, day, python_version, platform, uv, index, newer, log_file, uv_cache, given)
    if remember:
        write_atomically(kept, json.dumps({**found.to_record(), "given": []}, indent=1) + "\n")
    return found


def _resolve(wanted: list[str], day: str, python_version: str, platform: str, uv: Path, index: Mapping[str, str],
             newer: dict[str, str], log_file: Path | None, uv_cache: Path, given: tuple[str, ...]) -> DatedRequirements:
    """:func:`resolve`'s resolution: all as of the day, else each alone, the ones with no wheel of
    that day for this Python at their oldest release that has one (and what they pull in, newer)."""
    where = f"the log ({log_file}) shows why" if log_file else "a build's log shows uv's answer"
    if not wanted:
        return DatedRequirements(day, (), {}, given)
    asked = _compile(wanted, day, python_version, platform, uv, index, {}, log_file, uv_cache)
    if asked is None:  # some requirement has no wheel of that day for this Python: each is asked alone
        for requirement in wanted:
            if _compile([requirement], day, python_version, platform, uv, index, {}, log_file, uv_cache) is None:
                oldest = _compile([requirement], "", python_version, platform, uv, index, {}, log_file, uv_cache, lowest=True)
                if oldest is None:
                    raise CommandError(f"uv finds no wheel of {requirement} for Python {python_version} ({platform}),"
                                       f" of any day: {where}.")
                newer.update(_pins(oldest))  # and what it pulls in (jinja2's markupsafe), newer too
        asked = _compile([*wanted, *(f"{name}=={version}" for name, version in newer.items())], day, python_version,
                         platform, uv, index, newer, log_file, uv_cache)
        if asked is None:
            raise CommandError(f"uv could not resolve {', '.join(wanted)} for Python {python_version} ({platform}) as of"
                               f" {day}, even with the oldest release of {', '.join(newer)} that has a wheel for it:"
                               f" {where}. Pin them in [base] requirements, or set [base] requirements_date.")
    return DatedRequirements(day, tuple(f"{n}=={v}" for n, v in sorted(_pins(asked).items())), newer, given)


def _pins(text: str, only: Sequence[str] = ()) -> dict[str, str]:
    """name → version of uv's requirements output (``only``: the projects those requirements name)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    names = {canonicalize_name(Requirement(r).name) for r in only}
    return {m[1]: m[2] for line in text.splitlines() if (m := _PIN.match(line.strip()))
            and (not names or canonicalize_name(m[1]) in names)}


def exclude_newer(day: str, current: Iterable[str] = ()) -> list[str]:
    """uv's arguments that hold a resolution to ``day`` ("": none), but the projects ``current`` names."""
    if not day:
        return []
    tomorrow = (date.today() + timedelta(days=1)).isoformat()
    return ["--exclude-newer", (date.fromisoformat(day) + timedelta(days=1)).isoformat(),  # the whole day counts
            *(word for name in current for word in ("--exclude-newer-package", f"{name}={tomorrow}"))]


def _compile(requirements: Sequence[str], day: str, python_version: str, platform: str, uv: Path,
             index: Mapping[str, str], newer: Mapping[str, str], log_file: Path | None, uv_cache: Path, *,
             lowest: bool = False) -> str | None:
    """uv's resolution (its requirements output), or None where none satisfies (no wheel of that
    day); a failure of any other kind (an index that does not answer) is an error."""
    with tempfile.TemporaryDirectory(prefix="torchbake-build-tools-") as tmp:
        listed = Path(tmp) / "requirements.in"
        listed.write_text("".join(f"{r}\n" for r in requirements))
        argv: list[str | Path] = [uv, "pip", "compile", "--no-header", "--quiet", "--only-binary", ":all:",
                                  "--python-version", python_version, "--python-platform", platform, listed]
        argv += exclude_newer(day, newer)  # the oldest release that has a wheel for this Python: newer than the day
        if lowest:
            argv += ["--resolution", "lowest-direct"]
        result = command.run(argv, capture=True, check=False, echo=False,
                             env={"UV_NO_CONFIG": "1", "UV_CACHE_DIR": str(uv_cache), **index})
    if log_file is not None:  # the build's log keeps what uv was asked and said (not the output: too long to read)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with log_file.open("a", encoding="utf-8") as log:
            log.write(redact(f"+ {command.format_command(argv)}\n{result.output}"))
    if result.returncode == 0:
        return result.output
    if "No solution found" in result.output:
        return None
    raise CommandError(f"uv could not resolve {', '.join(requirements)} for Python {python_version} ({platform}):\n"
                       + result.output[-2000:])
