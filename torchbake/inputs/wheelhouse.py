"""Resolving wheels and their dependencies on the host, for the image's Python and platform.

Inside the build, TLS to package indexes may be impossible (intercepting proxies) and is never
needed: the host runs ``pip download`` for the target interpreter (``--python-version``,
``--abi``, ``--platform``, binary wheels only) into a wheelhouse that the build installs from
with ``--no-index``. Mirrors come from config; otherwise pip's own configuration applies.
"""

from __future__ import annotations

import email.parser
import filecmp
import os
import re
import shutil
import ssl
import sys
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging import tags
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from torchbake.adapters import command
from torchbake.configuration.settings import WheelOptions
from torchbake.core import output
from torchbake.core.errors import CommandError, DiskSpaceError, DownloadError
from torchbake.core.files import mark_used, write_atomically
from torchbake.core.output import human_size
from torchbake.core.redaction import redact, split_credentials
from torchbake.inputs.downloads import file_lock, link_or_copy


@dataclass(frozen=True)
class Wheel:
    path: Path
    name: str  # canonical project name
    version: str  # exact version string, local part included (e.g. 2.13.0+cpu)


def pip_download_command(
    requirements: Sequence[str], dest: Path, python_version: str, options: WheelOptions,
    python: str = sys.executable,
) -> list[str]:
    abi = "cp" + python_version.replace(".", "")
    argv = [python, "-m", "pip", "download", "--dest", str(dest), "--only-binary=:all:",
            "--python-version", python_version, "--implementation", "cp", "--abi", abi,
            "--abi", "abi3", "--abi", "none"]
    for platform in compatible_platforms(options.platforms):
        argv += ["--platform", platform]
    argv += ["--platform", "any"]
    if options.index_url:
        argv += ["--index-url", options.index_url]
    for url in options.extra_index_urls:
        argv += ["--extra-index-url", url]
    for link in options.find_links:
        argv += ["--find-links", link]
    return argv + list(requirements)


def compatible_platforms(platforms: Sequence[str]) -> list[str]:
    """The platform tags an image of ``platforms`` runs, as pip would accept them: a
    manylinux_2_X platform runs every older manylinux down to manylinux1 (glibc 2.5), under
    their PEP 600 names and their old ones (manylinux2014, manylinux2010, manylinux1), which pip
    does not work out by itself when --platform is given (uv's wheels are manylinux2014; NVIDIA's
    CUDA libraries manylinux2010)."""
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    found: list[str] = []
    for platform in platforms:
        found.append(platform)
        match = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
        if match:
            arch = match.group(2)
            for minor in range(int(match.group(1)) - 1, 4, -1):
                found.append(f"manylinux_2_{minor}_{arch}")
                if minor in legacy and (minor == 17 or arch in ("x86_64", "i686")):
                    found.append(f"{legacy[minor]}_{arch}")
    return list(dict.fromkeys(found))


def resolve(
    requirements: Sequence[str], cache_dir: Path, python_version: str, options: WheelOptions, *,
    link_into: Path, log_file: Path | None = None,
) -> list[Wheel]:
    """Download ``requirements`` (paths or requirement strings) and all their dependencies into
    the persistent ``cache_dir`` (pip skips files already there), then link exactly the resolved
    set into ``link_into``."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(cache_dir.with_name(cache_dir.name + ".lock")):  # one pip at a time; gc waits its turn
        drop_broken_wheels(cache_dir)
        drop_replaced_files(requirements, cache_dir)
        here = already_resolved(requirements, cache_dir, python_version, options.platforms)
        if here is not None:
            _say_resolved(requirements, here, cache_dir, log_file)
            names = dict.fromkeys(here)
        else:
            argv = pip_download_command(requirements, cache_dir, python_version, options)
            unanswered = unanswered_indexes(options)
            if unanswered and options.require_index:
                check_index_reached("", options, unanswered)  # before pip: nothing resolved from elsewhere
            result = _pip_download(argv, cache_dir, python_version, options, log_file)
            names = dict.fromkeys(Path(m).name for m in _SAVED_RE.findall(result.output))
            if not names:
                raise CommandError(f"pip download reported no wheels for {' '.join(requirements)}:\n{result.output[-2000:]}")
            check_index_reached(result.output, options, unanswered)
        link_into.mkdir(parents=True, exist_ok=True)
        for name in names:
            link_or_copy(cache_dir / name, link_into / name)
            mark_used(cache_dir / name)  # `invoke gc` keeps what builds use
    return [w for w in wheels_in(link_into) if w.path.name in names]


def supported_tags(python_version: str, platforms: Sequence[str]) -> list[tags.Tag]:
    """The wheel tags pip accepts for the image (``pip download --python-version X.Y
    --implementation cp --abi cpXY --abi abi3 --abi none --platform …``), as pip works them out,
    most preferred first (the newest manylinux before the older ones), as an installer picks
    among a release's wheels: ninja 1.11.1's manylinux1 wheel crashes on bookworm, its
    manylinux_2_12 one runs."""
    major, minor = (int(part) for part in python_version.split(".")[:2])
    abi = f"cp{major}{minor}"
    platform_tags = [*compatible_platforms(platforms), "any"]
    return list(dict.fromkeys([*tags.cpython_tags((major, minor), [abi, "abi3", "none"], platform_tags),
                               *tags.compatible_tags((major, minor), abi, platform_tags)]))


def already_resolved(requirements: Sequence[str], cache_dir: Path, python_version: str,
                     platforms: Sequence[str]) -> list[str] | None:
    """The file names in ``cache_dir`` that are the whole resolution of ``requirements`` without
    asking pip, or None when pip must resolve. That is so when each requirement is an exact pin
    (``uv==0.13.9``) or a wheel file, met by exactly one wheel already in the wheelhouse that the
    image can install (a wheel file: a byte-identical copy), and none of those wheels requires
    anything for the image: then no index could change the answer, and pip would only say
    "File was already downloaded" after a second or two of start-up and index requests."""
    supported = set(supported_tags(python_version, platforms))
    present = [wheel for wheel in wheels_in(cache_dir)
               if supported & parse_wheel_filename(wheel.path.name)[3]]
    found: list[str] = []
    for spec in requirements:
        if spec.endswith(".whl") and Path(spec).is_file():
            copy = cache_dir / Path(spec).name
            if not (copy in [w.path for w in present] and filecmp.cmp(spec, copy, shallow=False)):
                return None
            found.append(copy.name)
            continue
        try:
            requirement = Requirement(spec)
        except InvalidRequirement:
            return None
        pins = list(requirement.specifier)
        if (requirement.url or requirement.extras or requirement.marker or len(pins) != 1
                or pins[0].operator != "==" or pins[0].version.endswith(".*")):
            return None
        name = str(canonicalize_name(requirement.name))
        matches = [w for w in present if w.name == name and requirement.specifier.contains(w.version, prereleases=True)]
        if len(matches) != 1:
            return None
        found.append(matches[0].path.name)
    if not found or any(requires_for_image(cache_dir / name, python_version, platforms) for name in found):
        return None
    return list(dict.fromkeys(found))


def _say_resolved(requirements: Sequence[str], names: Sequence[str], cache_dir: Path, log_file: Path | None) -> None:
    line = (f"Wheelhouse {cache_dir}: {' '.join(requirements)} is {', '.join(names)}, already there and"
            " needing nothing else (pip not run)")
    output.channel().say(line)
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with log_file.open("a", encoding="utf-8") as log:
            log.write(redact(line) + "\n")  # as command.run writes its lines (the console redacts its own)


def drop_replaced_files(requirements: Sequence[str], cache_dir: Path) -> None:
    """A wheel file given by its path whose name the wheelhouse holds with other bytes (rebuilt
    under the same name, a vendor nightly that keeps its version): the old copy goes, or pip would
    say "File was already downloaded" and the image would get it."""
    for spec in requirements:
        if spec.endswith(".whl") and Path(spec).is_file():
            copy = cache_dir / Path(spec).name
            if copy.is_file() and not filecmp.cmp(spec, copy, shallow=False):
                copy.unlink()


def drop_broken_wheels(folder: Path) -> None:
    """Remove wheels of the wheelhouse that are not whole zip files (a download or a clean-up cut
    short), saying so: pip fetches them again instead of reusing them."""
    for wheel in sorted(folder.glob("*.whl")):
        if not zipfile.is_zipfile(wheel):
            output.channel().say(f"{wheel} is not a whole wheel (cut short?); removed, pip fetches it again.")
            wheel.unlink(missing_ok=True)


def _pip_download(argv: list[str], cache_dir: Path, python_version: str, options: WheelOptions,
                  log_file: Path | None) -> command.CommandResult:
    try:
        return command.run(
            argv, log_file=log_file, capture=True, error=CommandError, cwd=cache_dir, idle_timeout=command.STALL,
            failure_hint=(
                f"pip could not resolve these wheels for Python {python_version} on"
                f" {', '.join(options.platforms)}. Check that each wheel exists for that Python"
                " (a cp311 wheel needs --python 3.11), or set [wheels] index_url / find_links."
            ),
        )
    except CommandError as exc:
        if "No space left on device" not in str(exc) and "[Errno 28]" not in str(exc):
            raise
        drop_broken_wheels(cache_dir)  # what pip was writing when the disk filled
        raise DiskSpaceError(
            f"The disk of the wheelhouse {cache_dir} filled while pip downloaded wheels"
            f" ({human_size(shutil.disk_usage(cache_dir).free)} free there); no wheel cut short was kept."
            " Free space there (`invoke gc` removes wheels no build used lately) or set paths.cache_dir to a"
            " bigger disk, then run the command again.") from None


# what pip prints when an index it was told to use does not answer (it goes on with what it can reach)
_INDEX_FAILURE_RE = re.compile(r"^WARNING: (?:Retrying \(Retry\(.*\)\) after connection broken by .*?: (\S+)"
                               r"|Could not fetch URL (\S+?):.*)$", re.MULTILINE)


def index_failures(pip_output: str) -> list[str]:
    """The index pages pip could not fetch, as it names them, once each."""
    return list(dict.fromkeys(a or b for a, b in _INDEX_FAILURE_RE.findall(pip_output)))


def unanswered_indexes(options: WheelOptions, timeout: float = 10.0) -> list[str]:
    """The index URLs torchbake passes to pip (``index_url``, ``extra_index_urls``) that do not
    answer at all (any HTTP answer counts: a 404 root is still an index that is up). pip itself says
    nothing of an index it cannot reach once its retries are spent; it goes on without it. Asked
    trusting what pip is told to trust (``PIP_CERT``: the host's CAs and --ca-bundle's, set for the
    commands of a build), so an index behind an intercepting proxy is not taken for one that is down."""
    bundle = {**os.environ, **command.extra_env.get()}.get("PIP_CERT")
    context = ssl.create_default_context(cafile=bundle) if bundle else ssl.create_default_context()
    failed = []
    for given in [options.index_url, *options.extra_index_urls]:
        if not given.startswith(("http://", "https://")):
            continue
        url, authorization = split_credentials(given)
        request = urllib.request.Request(url.rstrip("/") + "/", method="HEAD",
                                         headers={"Authorization": authorization} if authorization else {})
        try:
            urllib.request.urlopen(request, timeout=timeout, context=context).close()  # noqa: S310 - an index URL
        except urllib.error.HTTPError:
            continue
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            failed.append(f"{redact(given)} ({reason})")
    return failed


def check_index_reached(pip_output: str, options: WheelOptions, unanswered: Sequence[str] = ()) -> None:
    """A resolution that could not reach an index is said plainly (its wheels may be older than the
    index's: pip took what it could reach); with ``[wheels] require_index`` it is an error."""
    failed = [*unanswered, *index_failures(pip_output)]
    if not failed:
        return
    shown = ", ".join(failed[:3]) + (f" and {len(failed) - 3} more" if len(failed) > 3 else "")
    text = (f"pip could not reach a package index it was told to use ({shown}); it resolved the wheels from what it"
            " could reach (local files, other indexes), which may be older than the index's.")
    if options.require_index:
        raise DownloadError(f"{text} --require-index ([wheels] require_index) makes that an error: check the index"
                            " and the proxy, then run the command again.")
    output.channel().say((f"warning: {text} --require-index makes that an error.", "yellow"))


_SAVED_RE = re.compile(r"^\s*(?:Saved|File was already downloaded)\s+(\S+\.whl)\s*$", re.MULTILINE)


def check_wheel(path: Path, location: str, key: str) -> None:
    """The file given as ``key`` (from ``location``) is a wheel: named NAME-VERSION-TAGS.whl and a
    zip archive with a ``*.dist-info/WHEEL`` record. Said before pip runs, naming the option and
    the URL (an HTML login page or a text file named .whl would otherwise end in pip's own words)."""
    what = f"{key} = {location}"
    try:
        parse_wheel_filename(path.name)
    except ValueError:
        raise DownloadError(f"{what}: the file it gives, {path.name!r}, is not named as a wheel"
                            " (NAME-VERSION-PYTHON-ABI-PLATFORM.whl). Give the URL of the .whl file itself.") from None
    try:
        with zipfile.ZipFile(path) as archive:
            if any(n.endswith(".dist-info/WHEEL") and n.count("/") == 1 for n in archive.namelist()):
                return
    except (zipfile.BadZipFile, OSError):
        with path.open("rb") as handle:
            start = handle.read(200).decode("utf-8", "replace").strip().lower()
        kind = ("an HTML page (a login or error page?)" if start.startswith(("<!doctype html", "<html"))
                else "not a zip archive")
        raise DownloadError(f"{what}: what it gives is not a wheel: {path.name} is {kind}. Check the URL (and its"
                            " credentials) in a browser or with curl.") from None
    raise DownloadError(f"{what}: {path.name} is a zip archive without a *.dist-info/WHEEL record, so not a wheel.")


def wheels_in(folder: Path) -> list[Wheel]:
    found = []
    for path in sorted(folder.glob("*.whl")):
        name, version, _build, _tags = parse_wheel_filename(path.name)
        found.append(Wheel(path=path, name=str(canonicalize_name(name)), version=str(version)))
    return found


def requires(wheel: Path) -> list[str]:
    """The wheel's Requires-Dist lines (read from its METADATA, not by unpacking it)."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(name for name in archive.namelist()
                        if name.count("/") == 1 and name.endswith(".dist-info/METADATA"))
        headers = email.parser.HeaderParser().parsestr(archive.read(metadata).decode(errors="replace"))
    return headers.get_all("Requires-Dist") or []


def image_environment(python_version: str, platforms: Sequence[str]) -> dict[str, str]:
    """Marker values of the image (its Python, Linux, its machine), for Requires-Dist markers."""
    machine = next((m for p in platforms for m in ("x86_64", "aarch64", "ppc64le", "s390x") if p.endswith(m)), "x86_64")
    return {"python_version": python_version, "python_full_version": f"{python_version}.0",
            "implementation_name": "cpython", "platform_python_implementation": "CPython",
            "sys_platform": "linux", "os_name": "posix", "platform_system": "Linux",
            "platform_machine": machine, "extra": ""}


def requires_for_image(wheel: Path, python_version: str, platforms: Sequence[str]) -> list[str]:
    """The projects ``wheel`` requires on the image: its Requires-Dist whose marker holds there (a
    line that does not parse is kept as it is: something may be required)."""
    environment = image_environment(python_version, platforms)
    found = []
    for line in requires(wheel):
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            found.append(line)
            continue
        if requirement.marker is None or requirement.marker.evaluate(environment):
            found.append(str(canonicalize_name(requirement.name)))
    return found


def dependency_closure(wheels: Sequence[Wheel], roots: Iterable[str], python_version: str,
                       platforms: Sequence[str]) -> set[str]:
    """``roots`` and everything they require, among ``wheels`` (one resolved set): their
    Requires-Dist with markers evaluated for the image (its Python, Linux, its machine)."""
    by_name = {wheel.name: wheel for wheel in wheels}
    found: set[str] = set()
    todo = [str(canonicalize_name(root)) for root in roots]
    while todo:
        name = todo.pop()
        if name in found or name not in by_name:
            continue
        found.add(name)
        todo += requires_for_image(by_name[name].path, python_version, platforms)
    return found


def wheel_metadata(wheel: Path) -> dict[str, str]:
    """What a wheel's METADATA says of who made it and under which licence (name, version,
    author, maintainer, licence expression or text)."""
    from email.parser import HeaderParser

    with zipfile.ZipFile(wheel) as archive:
        member = next((m for m in archive.namelist() if m.endswith(".dist-info/METADATA") and m.count("/") == 1), None)
        meta = HeaderParser().parsestr(archive.read(member).decode("utf-8", "replace")) if member else {}
    return {key: str(meta.get(field) or "") for key, field in (
        ("name", "Name"), ("version", "Version"), ("author", "Author"), ("author_email", "Author-email"),
        ("maintainer", "Maintainer"), ("license_expression", "License-Expression"), ("license", "License"))}


def _script_member(archive: zipfile.ZipFile, wheel: Path, name: str) -> zipfile.ZipInfo:
    member = next((m for m in archive.infolist() if m.filename.endswith(f".data/scripts/{name}")), None)
    if member is None:
        raise CommandError(f"{wheel.name} holds no {name} program (expected {name}-*.data/scripts/{name}).")
    return member


def extract_script(wheel: Path, name: str, target: Path) -> None:
    """The wheel's ``<dist>.data/scripts/<name>`` (e.g. uv's binary) as ``target``, executable."""
    with zipfile.ZipFile(wheel) as archive:
        target.write_bytes(archive.read(_script_member(archive, wheel, name)))
    target.chmod(0o755)


def kept_script(wheel: Path, name: str, tools: Path) -> Path:
    """The wheel's ``<dist>.data/scripts/<name>`` program, unpacked once into the cache folder
    ``tools`` (``<name>-<size>-<crc32>``, as the wheel's own directory names it) and read from
    there by later builds: uv is 38 MB unpacked, 0.2 s of CPU each time. A kept copy whose bytes
    no longer match the wheel's record of them (damaged, cut short) is unpacked again."""
    import zlib

    with zipfile.ZipFile(wheel) as archive:
        member = _script_member(archive, wheel, name)
        program = tools / f"{name}-{member.file_size}-{member.CRC:08x}"
        try:
            kept = program.read_bytes()
        except OSError:
            kept = None
        if kept is None or len(kept) != member.file_size or zlib.crc32(kept) != member.CRC:
            try:  # through a file of this call's own: build-all's cells unpack side by side in one process
                write_atomically(program, archive.read(member), mode=0o755)
            except OSError as exc:
                raise CommandError(f"Cannot keep {name} unpacked in {tools} ({exc.strerror or exc}): the cache"
                                   " folder ([paths] cache_dir) must be writable by whoever builds.") from None
    mark_used(program)
    return program
