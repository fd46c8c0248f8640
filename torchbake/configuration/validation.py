"""Checks for single option values. Each raises ``ValueError`` whose text says what is accepted;
``torchbake.planning.config`` turns that into a ``ConfigurationError`` naming the key, value and source."""

from __future__ import annotations

import re
import stat
import string
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from torchbake.configuration import platforms
from torchbake.core.lazy import LazyModule

if TYPE_CHECKING:
    from packaging import requirements as packaging_requirements
    from packaging import utils as packaging_utils
else:
    packaging_requirements = LazyModule("packaging.requirements")  # read when a requirement is checked
    packaging_utils = LazyModule("packaging.utils")


SUPPORTED_PYTHONS = ("3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "3.14")
PYTHON_PROVIDERS = ("os", "standalone")
COMPRESSIONS = ("zstd", "gzip", "uncompressed")  # BuildKit's layer compressions ([build] compression)

# Docker's reference grammar (distribution/reference), without the digest part for names.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?)"
_NAME_RE = re.compile(rf"^(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A number as typed on a command line or in an environment variable: digits, a sign, a decimal
# point for a float; not Python's wider literals (int("1_0") is 10, float("nan") and "inf" pass).
_NUMBER_RE = {int: re.compile(r"[+-]?[0-9]+"), float: re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")}
NUMBER_WORDS = {int: "a whole number", float: "a number"}  # what an error says each kind expects


def parse_number(text: str, kind: type[int] | type[float]) -> int | float:
    """``text`` (surrounding blanks allowed) as ``kind``; ValueError for anything else."""
    if not _NUMBER_RE[kind].fullmatch(text.strip()):
        raise ValueError(text)
    return kind(text)


def python_version(value: str) -> None:
    if not re.fullmatch(r"\d+\.\d+", value):
        raise ValueError(f"expected a Python version as X.Y, one of {', '.join(SUPPORTED_PYTHONS)}")
    if value not in SUPPORTED_PYTHONS:
        raise ValueError(f"supported Python versions are {', '.join(SUPPORTED_PYTHONS)}")


def image_name(value: str) -> None:
    if len(value) > 255:  # the engine's and the registries' limit
        raise ValueError(f"the name is {len(value)} characters long; an image name may be at most 255")
    if value and not _NAME_RE.fullmatch(value):
        raise ValueError(
            "expected an image name such as 'torchbake/pytorch-cpu' or 'registry:5000/team/torch'"
            " (lowercase letters, digits and separators . _ -, path parts joined by /)"
        )


def image_tag(value: str) -> None:
    if not _TAG_RE.fullmatch(value):
        raise ValueError(
            "expected a tag of up to 128 characters: letters, digits, _ . - (not starting with . or -)"
        )


def image_reference(value: str) -> None:
    """A full reference: NAME[:TAG][@sha256:DIGEST]."""
    if not value:
        return
    rest, at, digest = value.partition("@")
    if at and not _DIGEST_RE.fullmatch(digest):  # (an '@' with nothing after it too)
        raise ValueError("expected a digest as sha256:<64 hex digits> after '@'")
    name, tag = rest, None
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = rest.rsplit(":", 1)
    if not name:
        where = "before ':' " if tag is not None else ""
        raise ValueError(f"the image name {where}is empty; expected NAME[:TAG][@sha256:DIGEST], e.g. debian:bookworm")
    image_name(name)
    if tag == "":
        raise ValueError(f"the tag after {name}: is empty; give one (e.g. {name}:latest) or leave out the ':'")
    if tag is not None:
        image_tag(tag)


def sha256(value: str) -> None:
    if not _SHA256_RE.fullmatch(value):
        raise ValueError("expected a sha256 digest: 64 lowercase hex digits")


def is_url(value: str) -> bool:
    return value.startswith(("http://", "https://", "file://"))


def location(value: str) -> None:
    """An input location: http(s)://, file:// or an existing local path ('' = not set)."""
    if not value:
        return
    if is_url(value):
        base = value.split("#", 1)[0]
        if base.rstrip("/").endswith((":/", "://")) or "://" in base and not base.split("://", 1)[1]:
            raise ValueError("the URL has no host or path")
        _host_and_port(base)
        _fragment(value)
        return
    if "://" in value:
        raise ValueError("expected an http://, https:// or file:// URL or a local path")
    if not Path(value).expanduser().exists():
        raise ValueError(f"{_looked_at(Path(value).expanduser())}; expected an http(s):// or file:// URL or an"
                         " existing local path")
    if Path(value).expanduser().is_dir():
        raise ValueError("it is a folder; expected a file (a wheel, a tarball) or its URL")


def local_file(value: str) -> None:
    """A file read from this machine's disk, such as the Dockerfile template ('' = not set): a
    URL is no path here (its "//" would become "/")."""
    if "://" in value:
        raise ValueError("expected a local file; a URL is not fetched for this option: download it, then name the file")
    location(value)


def _host_and_port(url: str) -> None:
    """An http(s) URL's host and port as a client can reach them: no white space, a port of 1 to 65535."""
    if url.startswith("file://"):
        return
    parts = urllib.parse.urlsplit(url)
    if any(character.isspace() for character in parts.netloc.rpartition("@")[2]):
        raise ValueError("the URL has white space in its host")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise ValueError("the URL's port is not a number from 1 to 65535")


def _looked_at(path: Path) -> str:
    """"no such file", and where a relative path was looked for: the current folder (a --config
    file's relative paths are the current folder's; a project file's are its own folder's)."""
    if path.is_absolute():
        return "no such file"
    return f"no such file: {Path.cwd() / path} (a relative path is taken from the current folder, {Path.cwd()})"


def is_location(value: str) -> bool:
    """Whether a wheel source names a file (URL, path or wheel file name) rather than a pip
    requirement such as 'torch==2.13.0'."""
    return is_url(value) or "/" in value or value.endswith(".whl")


def wheel_source(value: str) -> None:
    """A wheel location (see ``location``) or a pip requirement such as 'torch==2.13.0'."""
    if not value or is_location(value):
        location(value)
        return
    try:
        packaging_requirements.Requirement(value)
    except packaging_requirements.InvalidRequirement as exc:
        raise ValueError(
            "expected a wheel URL (http(s):// or file://), a local wheel path,"
            f" or a pip requirement such as 'torch==2.13.0' ({exc})"
        ) from None


def local_name(location: str) -> str:
    """The file name an input (URL or path, a #sha256= fragment allowed) has once fetched: a URL's
    is its path's last segment (a presigned URL's query is not part of it)."""
    base = location.split("#", 1)[0]
    if is_url(base):
        return Path(urllib.parse.unquote(urllib.parse.urlsplit(base).path)).name or "download"
    return Path(base).name


def project_name(spec: str) -> str:
    """The project a wheel source installs, canonical: from a wheel file's name (see
    :func:`local_name`) or a requirement's name."""
    base = spec.split("#", 1)[0]
    last = local_name(spec)
    if last.endswith(".whl"):
        try:
            return str(packaging_utils.canonicalize_name(packaging_utils.parse_wheel_filename(last)[0]))
        except packaging_utils.InvalidWheelFilename as exc:
            raise ValueError(f"{last!r} is not a wheel file name ({exc})") from None
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", base)
    return str(packaging_utils.canonicalize_name(match.group(1))) if match else base


def wheel_of(project: str):
    """A check: a wheel source (see ``wheel_source``) that installs ``project`` (``wheels.torch`` is
    torch, never another package's requirement or wheel)."""
    def check(value: str) -> None:
        wheel_source(value)
        if value and is_location(value) and not (name := local_name(value)).endswith(".whl"):
            raise ValueError(f"a wheel's URL or path ends in its file name ({project}-VERSION-….whl), which pip"
                             f" needs to install it; {name!r} does not")
        if value and (given := project_name(value)) != project:
            raise ValueError(f"it installs {given!r}, not {project}; expected a {project} wheel URL or path,"
                             f" or a requirement such as '{project}==VERSION'")
    return check


def index_url(value: str) -> None:
    """A package index: an http(s):// or file:// URL ('' = pip's own)."""
    if value and (not is_url(value) or not value.split("://", 1)[1].strip("/")):
        raise ValueError("expected a package index URL (http://, https:// or file://)")


def wheel_platform(value: str) -> None:
    """A wheel platform tag such as manylinux_2_28_x86_64 (PEP 425: lower case, digits, '_')."""
    if not re.fullmatch(r"[a-z0-9_]+", value):
        raise ValueError(f"{value!r} is not a wheel platform tag; expected one such as manylinux_2_28_x86_64"
                         " or linux_aarch64")


def plain_text(value: object) -> None:
    """Any option's text: not white space alone, and no line break, tab or NUL (a value that would
    split a command line, a Dockerfile line or a label)."""
    if isinstance(value, dict):
        texts = [*value.keys(), *value.values()]
    elif isinstance(value, list):
        texts = value
    else:
        texts = [value]
    for text in texts:
        if not isinstance(text, str):
            continue
        if text and not text.strip():
            raise ValueError("it is only white space; leave it out (or \"\") for the default, or give a value")
        if any(c in text for c in "\n\r\t\0"):
            raise ValueError("it holds a line break, tab or NUL character, which no value may")


def requirement(value: str) -> None:
    wheel_source(value)


def exact_pin(value: str) -> None:
    """``name==version``, e.g. uv==0.13.9 (a tool the build uses is never left to a resolver)."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*", value):
        raise ValueError("expected an exact pin NAME==VERSION, e.g. uv==0.13.9")


def _fragment(url: str) -> None:
    if "#" not in url:
        return
    fragment = url.split("#", 1)[1]
    if fragment.startswith("sha256="):
        sha256(fragment[len("sha256=") :])
    else:
        raise ValueError("the only URL fragment understood is '#sha256=<64 hex digits>'")


def platform_table(check: Callable[[str], None]) -> Callable[[Mapping[str, str]], None]:
    """The check of a table of platform → a string, each string by ``check``."""

    def checked(value: Mapping[str, str]) -> None:
        for name, item in value.items():
            platforms.parse(name)
            if not isinstance(item, str):
                raise ValueError(f"{name!r} = {item!r}: expected a string for each platform,"
                                 ' e.g. { "linux/arm64" = "8.0;9.0" }')
            check(item)

    return checked


def env_names(value: dict) -> None:
    for key, item in value.items():
        if not _ENV_NAME_RE.fullmatch(key):
            raise ValueError(f"{key!r} is not a valid environment variable name")
        if not isinstance(item, str):
            raise ValueError(f"the value of {key} must be a string")


def module_name(value: str) -> None:
    """A Python module's import name (``torch_musa``, ``intel_extension_for_pytorch.xpu``): the probe imports it."""
    if value and not all(part.isidentifier() for part in value.split(".")):
        raise ValueError("expected a Python module's import name, e.g. torch_musa or package.module")


def gid(value: int) -> None:
    if not 0 <= value <= 65535:
        raise ValueError("expected a group id from 0 (none) to 65535")


def one_of(choices: tuple[str, ...]):
    def check(value: str) -> None:
        if value not in choices:
            raise ValueError(f"expected one of: {', '.join(choices)}")

    return check


def evidence(choices: tuple[str, ...]):
    """A non-empty list of ``choices`` (what ``verify --signatures`` requires): an empty list would
    read as "require nothing", the easy accident of an empty variable in a CI job."""
    def check(values: list[str]) -> None:
        if not values:
            raise ValueError(f"it is empty; list at least one of: {', '.join(choices)} (the manifest's own signature"
                             " is required whatever the list says)")
        for value in values:
            one_of(choices)(value)

    return check


def one_of_or_empty(choices: tuple[str, ...], empty: str):
    """Like :func:`one_of`, where "" is also accepted and means ``empty``."""
    def check(value: str) -> None:
        if value and value not in choices:
            raise ValueError(f"expected one of: {', '.join(choices)} (or \"\" for {empty})")

    return check


def docker_binary(value: str) -> None:
    if not value:
        raise ValueError("expected 'auto' or a docker client: a name on PATH or a path")


def debian_packages(values: Iterable[str]) -> tuple[str, ...]:
    """Debian package names (Debian policy 5.6.7), each entry one or several comma-separated."""
    names = tuple(name.strip() for value in values for name in str(value).split(","))
    for name in names:
        if not re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", name):
            raise ValueError(f"{name!r} is not a Debian package name (lower case letters, digits, + - .), e.g."
                             " python3-venv")
    return names


def builder_name(value: str) -> None:
    """A buildx builder's name ("" = buildx's current builder)."""
    if value and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", value):
        raise ValueError("expected the name of a buildx builder (letters, digits, '_', '.', '-'; `docker buildx ls`"
                         " lists them), or \"\" for buildx's current one")


def existing_folder(value: str) -> None:
    if value and not Path(value).expanduser().is_dir():
        raise ValueError("no such folder; expected an existing folder (or \"\" for none)")


def git_repository(value: str) -> None:
    """A git remote: http(s)://, ssh://, git://, file:// or user@host:path ('' = not set)."""
    if not value:
        return
    if "@" in value.split("://", 1)[-1].split("/", 1)[0] and value.startswith(("http://", "https://")):
        raise ValueError(
            "expected a repository URL without credentials in it (URLs land in logs and labels); give them to git"
            " instead: a credential file ([dev] git_credential_file, `invoke build -c FILE`) or your git credential helper"
        )
    if not (value.startswith(("http://", "https://", "ssh://", "git://", "file://"))
            or re.fullmatch(r"[\w.-]+@[\w.-]+:[\w./~-]+", value)):
        raise ValueError("expected a git URL: https://, ssh://, git://, file:// or user@host:path")


def git_ref(value: str) -> None:
    if not value or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/+-]*", value) or ".." in value or value.endswith((".lock", "/")):
        raise ValueError("expected a git tag or branch name such as v2.0.0")


def user_name(value: str) -> None:
    if value and not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", value):
        raise ValueError("expected a Linux user name: lowercase letters, digits, _ and -, up to 32 characters")


def job_count(value: int) -> None:
    if not 0 <= value <= 1024:
        raise ValueError("expected a number of jobs from 1 to 1024, or 0 for automatic")


def extension_source(value: str) -> None:
    """``git+URL@REF`` (cloned in the build) or a requirement / wheel location."""
    if not value.startswith("git+"):
        wheel_source(value)
        return
    url, sep, ref = value[len("git+"):].rpartition("@")
    if not sep or not url or "/" in ref and ":" in ref:
        raise ValueError("expected git+URL@REF, e.g. git+https://github.com/NVIDIA/apex.git@24.04.01")
    git_repository(url)
    git_ref(ref)


PATCHED_SOURCES = ("pytorch", "vision", "audio", "extension")


def patch_entry(value: str) -> None:
    """``SOURCE=PATH`` ([dev] patches): a source tree a dev build compiles, and a patch file or a
    folder of them."""
    source, sep, path = value.partition("=")
    if not sep or source not in PATCHED_SOURCES:
        raise ValueError(f"expected SOURCE=PATH with SOURCE one of {', '.join(PATCHED_SOURCES)}, e.g."
                         " pytorch=patches/pytorch/")
    found = Path(path).expanduser()
    if not found.exists():
        raise ValueError(f"{_looked_at(found)}; expected a patch file or a folder of them")
    files = [p for p in found.iterdir() if p.suffix in (".patch", ".diff")] if found.is_dir() else [found]
    if not files:
        raise ValueError("the folder holds no .patch or .diff file")
    for file in files:  # a FIFO would be read for ever, a device without end
        if not file.is_file():
            raise ValueError(f"{file} is not a regular file; expected a patch file or a folder of them")
        if file.stat().st_size > 64 * 2**20:
            raise ValueError(f"{file} is over 64 MiB; expected a patch")


def credential_file(value: str) -> None:
    if value and not Path(value).expanduser().is_file():
        raise ValueError("no such file; expected a git credential file (git-credential-store format)")


PARTY = re.compile(r"^[^<>\n]*[^<>\s][^<>\n]*(<[^<>\s]+>)?$")


def party(value: str) -> None:
    """A supplier: NAME, or NAME <EMAIL or URL>."""
    if value and not PARTY.match(value.strip()):
        raise ValueError("expected NAME or NAME <EMAIL or URL>, e.g. 'ML Platform <ml-platform@example.com>'")


def key_file(value: str) -> None:
    """A file of a secret (a key, a password): a regular file (a device, a FIFO or a folder under
    that name is refused, never read); what it holds is read only when used."""
    if not value:
        return
    path = Path(value).expanduser()
    if path.is_file():
        return
    if not path.exists():
        raise ValueError(f"{_looked_at(path)}; expected a file")
    mode = path.stat().st_mode
    what = ("a folder" if stat.S_ISDIR(mode) else "a FIFO (a named pipe)" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "not a regular file")
    through = f" (a link to {path.resolve()})" if path.is_symlink() else ""
    raise ValueError(f"it is {what}{through}; expected a regular file")


def steps_file(value: str) -> None:
    """[image] steps: a readable text file of Dockerfile lines ('' = none)."""
    if not value:
        return
    path = Path(value).expanduser()
    if not path.is_file():
        raise ValueError(f"{_looked_at(path)}; expected a file of Dockerfile lines (RUN, ENV, LABEL …)")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"it cannot be read as text ({exc})") from None
    if any(line.strip().upper().startswith("FROM ") for line in text.splitlines()):
        raise ValueError("its lines are steps of torchbake's image, which has its FROM already: leave out FROM"
                         " (an image of your own FROM torchbake's is another Dockerfile)")


def size(value: str) -> None:
    if not re.fullmatch(r"\d+(\.\d+)?[KMGT]?", value):
        raise ValueError("expected a size such as 500M or 20G")


def absolute_path(value: str) -> None:
    if not value.startswith("/") or " " in value:
        raise ValueError("expected absolute paths inside the image, without spaces, e.g. /usr/local/cuda")


_CONTAINER_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$")
_BYTE_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?) ?([kmgtp])?i?b?$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def container_name(value: str) -> None:
    if value and not _CONTAINER_NAME_RE.fullmatch(value):
        raise ValueError("expected a container name: letters, digits, '_', '.' and '-', starting with a letter or digit")


def byte_size(value: str) -> int:
    """Docker's sizes (``--shm-size 8G``, ``512m``, ``1.5GB``, plain bytes); binary units."""
    match = _BYTE_SIZE_RE.match(value.strip())
    if not match or float(match.group(1)) <= 0:
        raise ValueError("expected a size such as 512M, 8G or 80G: a positive number with an optional unit K, M, G or T")
    size = int(float(match.group(1)) * _UNITS[(match.group(2) or "").lower()])
    if size > _LARGEST_SIZE:  # the engine's sizes are 64-bit (a bigger --shm-size reached it and failed there)
        raise ValueError(f"expected a size of at most {_LARGEST_SIZE >> 40:,}T")
    return size


_LARGEST_SIZE = (1 << 63) - 1


def mirror_url(value: str) -> None:
    if not value.startswith(("http://", "https://", "file://")) or len(value.split("://", 1)[1]) == 0:
        raise ValueError("expected an http(s):// or file:// URL of a Debian/Ubuntu package mirror")


def mount_spec(value: str) -> None:
    """``HOST:CONTAINER`` or ``HOST:CONTAINER:ro|rw`` (syntax only: run-container checks HOST exists)."""
    parts = value.split(":")
    if len(parts) == 3 and parts[2] in ("ro", "rw"):
        parts = parts[:2]
    if len(parts) != 2 or not parts[0] or not parts[1].startswith("/"):
        raise ValueError("expected HOST:CONTAINER or HOST:CONTAINER:ro, with an absolute CONTAINER path, e.g. ~/data:/data:ro")


def image_or_id(value: str) -> None:
    """An image a task's argument names: an image id, or a reference (NAME[:TAG][@sha256:DIGEST])."""
    if not is_image_id(value):
        image_reference(value)


def is_image_id(value: str) -> bool:
    """An image id as `docker images` shows it (12+ hex digits, optionally ``sha256:``)."""
    return bool(re.fullmatch(r"(sha256:)?[0-9a-f]{12,64}", value))


def bounded(value: float, low: float, high: float, unit: str) -> None:
    if not low <= value <= high:
        raise ValueError(f"expected {low:g} to {high:g} {unit}")


def ca_bundle(value: str) -> None:
    """A PEM file holding at least one certificate ('' = none)."""
    if not value:
        return
    path = Path(value).expanduser()
    if not path.is_file():
        raise ValueError("no such file; expected a PEM file of CA certificates")
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise ValueError(f"cannot be read ({exc.strerror}); expected a readable PEM file of CA certificates") from None
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ValueError("holds no '-----BEGIN CERTIFICATE-----' block; expected a PEM file of CA certificates")


_REGISTRY_RE = re.compile(r"^(localhost|[a-z0-9-]+(\.[a-z0-9-]+)+|[a-z0-9-]+:\d+|[a-z0-9-]+(\.[a-z0-9-]+)+:\d+)(/[a-z0-9._-]+)*$")


def webhook(value: str) -> None:
    """An http(s) URL that takes a POST ([notify] webhook): a host, a port that is a number, no
    user part (a webhook's secret is in its path, as Slack's and its likes' are)."""
    if not value:
        return
    parts = urllib.parse.urlsplit(value)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1 or any(c.isspace() for c in value):
        raise ValueError("expected the http(s):// URL of a webhook with a host (and a numeric port, if any), e.g. a"
                         " Slack incoming webhook's https://hooks.slack.com/services/…")
    if "@" in parts.netloc:
        raise ValueError("a webhook's URL takes no USER:PASSWORD@ (its secret is the URL's path, as the service"
                         " gives it)")


def registry_url(value: str) -> None:
    """A registry host (with a port when it has no dot) and an optional path: where images go."""
    if value and not _REGISTRY_RE.fullmatch(value.rstrip("/")):
        raise ValueError("expected a registry host and an optional path, such as 'registry.example.com/team',"
                         " '127.0.0.1:5000' or 'localhost:5000/ml' (no scheme; a host without a dot needs a port)")
    _, colon, port = value.split("/", 1)[0].rpartition(":")
    if colon and not 1 <= int(port) <= 65535:
        raise ValueError(f"the registry's port {port} is not a number from 1 to 65535")


CACHE_FIELDS = ("image", "name", "tag", "cache")


def _cache_fields(value: str, fields: tuple[str, ...]) -> None:
    for _literal, field_name, _spec, _conversion in string.Formatter().parse(value):
        if field_name is not None and field_name not in fields:
            raise ValueError(f"unknown field {{{field_name}}}; the fields are {', '.join('{' + f + '}' for f in fields)}")


def cache_ref(value: str) -> None:
    """The registry reference of an image's build cache, with {image}, {name} and {tag} filled in."""
    _cache_fields(value, CACHE_FIELDS[:3])
    if not re.fullmatch(r"[^\s:]\S*:[\w{][\w.{}-]*", value.strip()):
        raise ValueError('expected a reference NAME:TAG such as "{name}-buildcache:{tag}" or "{name}:cache-{tag}"')


def cache_spec(value: str) -> None:
    """A build cache source or destination: "inline", an image reference or a buildx ``type=…``
    spec, with {image}, {name}, {tag} and {cache} filled in per image."""
    _cache_fields(value, CACHE_FIELDS)
    if not value.strip():
        raise ValueError('expected "inline", an image reference such as "{image}" or a buildx spec such as'
                         ' "type=registry,ref={name}:cache"')


def compile_cache(value: str) -> None:
    """The compile cache's store: a URL of a kind ccache or sccache speaks (torchbake.configuration.compile_cache)."""
    from torchbake.configuration import compile_cache as stores

    if value:
        stores.store_of(value.strip())


_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def requirements_date(value: str) -> None:
    """tag, latest, or a calendar date YYYY-MM-DD ([base] requirements_date)."""
    import datetime

    if value in ("tag", "latest"):
        return
    expected = "expected tag (the PyTorch tag's commit date), latest, or a date YYYY-MM-DD"
    try:
        day = datetime.date.fromisoformat(value)
    except ValueError:
        raise ValueError(expected) from None
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        raise ValueError(expected)
    if not datetime.date(2016, 1, 1) <= day <= datetime.date.today():  # no manylinux wheel predates 2016
        raise ValueError(f"{expected} from 2016-01-01 (the first manylinux wheels) to today (latest for now)")


def duration(value: str) -> float:
    """A duration such as 30d, 12h, 90m or 2w, in seconds."""
    match = _DURATION_RE.match(value.strip())
    if not match:
        raise ValueError("expected a duration such as 30d, 12h, 90m or 2w (a number and one of s, m, h, d, w)")
    return float(match.group(1)) * _SECONDS[match.group(2)]
