"""Assembling a build context folder on the host.

Layout of a release context (every path is what the Dockerfile expects)::

    Dockerfile          the template plus the image's ENV from the configuration
    common/             docker/common/ (the in-image install scripts)
    constraints.txt     exact pins of torch and the extension, copied into the image
    wheelhouse/         resolved wheels + requirements.txt (bind-mounted, never in a layer)
    toolkits/           vendor tarballs + toolkits.txt (bind-mounted)
    python/             a standalone CPython tarball, or empty
    .torchbake-context.json   what was prepared: inputs, digests, versions

Files come from the download cache as hard links where the file system allows.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from . import wheelhouse
from .downloads import Artifact, DownloadCache, file_sha256, link_or_copy
from .errors import ConfigurationError, DownloadError
from .plan import COMMON_DIR, TOOLKITS, ReleasePlan

MARKER = ".torchbake-context.json"


@dataclass(frozen=True)
class PreparedContext:
    path: Path
    torch_version: str
    pins: dict[str, str]  # project → exact version (torch, extension, torchvision, torchaudio)
    extension: str  # "name==version" of the vendor extension, or ""
    inputs: dict[str, str]  # file name → sha256 (wheels, toolkits, python tarball)
    dockerfile_sha256: str
    common_sha256: str
    temporary: bool

    def to_json(self) -> str:
        data = asdict(self)
        data["path"] = str(self.path)
        return json.dumps(data, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, path: Path) -> PreparedContext:
        data = json.loads(text)
        data["path"] = path
        return cls(**data)


def render_dockerfile(template: str, env: Mapping[str, str], profile: str) -> str:
    """The Dockerfile of the context: the template, then the configured ENV (if any)."""
    text = template if template.endswith("\n") else template + "\n"
    if not env:
        return text
    lines = [f'{key}="{_escape(value)}"' for key, value in env.items()]
    block = " \\\n    ".join(lines)
    return text + f"\n# Added by torchbake from the configuration (profile {profile}).\nENV {block}\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def tree_sha256(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        digest.update(file_sha256(path).encode())
    return digest.hexdigest()


def choose_context_dir(plan: ReleasePlan, contexts_root: Path) -> tuple[Path, bool]:
    """The folder to prepare in, and whether it is temporary. Refuses to touch a user folder
    that torchbake did not create."""
    if not plan.build_dir:
        contexts_root.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="context-", dir=contexts_root)), True
    folder = Path(plan.build_dir).expanduser().resolve()
    if folder.exists() and not folder.is_dir():
        raise ConfigurationError(f"--build-dir {folder} exists and is not a folder.")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / MARKER).is_file():
        raise ConfigurationError(
            f"--build-dir {folder} holds files torchbake did not put there; refusing to overwrite them."
            " Pass an empty or new folder, or one torchbake prepared before."
        )
    return folder, False


def load_prepared(folder: Path) -> PreparedContext:
    marker = folder / MARKER
    if not marker.is_file():
        raise ConfigurationError(
            f"--no-prepare: {folder} is not a context torchbake prepared (no {MARKER})."
            " Run once without --no-prepare, with the same --build-dir."
        )
    return PreparedContext.from_json(marker.read_text(), folder)


def prepare_release_context(
    plan: ReleasePlan, cache: DownloadCache, folder: Path, *, temporary: bool, log_file: Path | None,
) -> PreparedContext:
    staging = folder.with_name(folder.name + ".preparing") if not temporary else folder
    if staging != folder:
        shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True, exist_ok=True)
    inputs: dict[str, str] = {}

    # Inputs given by URL: fetched (or found) and checked first.
    wheel_artifacts: dict[str, Artifact] = {}
    for role, location in plan.wheel_sources.items():
        if _is_requirement(location):
            continue
        wheel_artifacts[role] = cache.fetch(location, key=f"wheels.{role}")
    toolkit_artifacts = {key: cache.fetch(loc, key=f"toolkits.{key}") for key, loc in plan.toolkits.items()}
    python_artifact = cache.fetch(plan.python_source, key="python.standalone_url") if plan.python_source else None

    # Wheels and their dependencies for the image's Python.
    requirements = [str(wheel_artifacts[r].path) if r in wheel_artifacts else loc
                    for r, loc in plan.wheel_sources.items()] + list(plan.extra_requirements)
    house = staging / "wheelhouse"
    resolved = wheelhouse.resolve(requirements, cache.root / "wheelhouse" / f"cp{plan.python_version.replace('.', '')}",
                                  plan.python_version, plan.settings.wheels, link_into=house, log_file=log_file)
    versions = {w.name: w.version for w in resolved}
    for wheel in resolved:
        inputs[wheel.path.name] = file_sha256(wheel.path)
    pins: dict[str, str] = {}
    extension = ""
    for role, location in plan.wheel_sources.items():
        name = wheelhouse.requirement_name(location)
        if name not in versions:
            raise DownloadError(f"wheels.{role} = {location!r} did not resolve to a {name} wheel.")
        pins[name] = versions[name]
        if role == "extension":
            extension = f"{name}=={versions[name]}"
    top_level = list(pins) + [wheelhouse.requirement_name(r) for r in plan.extra_requirements]
    (house / "requirements.txt").write_text("".join(f"{n}=={versions[n]}\n" for n in dict.fromkeys(top_level)))
    (staging / "constraints.txt").write_text(
        "# Written by torchbake: the torch this image was built with stays installed.\n"
        "# Active for every pip install through PIP_CONSTRAINT / PIP_BUILD_CONSTRAINT.\n"
        + "".join(f"{name}=={version}\n" for name, version in pins.items())
    )

    toolkit_dir = staging / "toolkits"
    toolkit_dir.mkdir(exist_ok=True)
    manifest_lines = []
    for index, (key, artifact) in enumerate(toolkit_artifacts.items()):
        name = f"{index:02d}-{artifact.name}"
        link_or_copy(artifact.path, toolkit_dir / name)
        manifest_lines.append(f"{key}\t{name}\t{TOOLKITS[key][1]}\n")
        inputs[artifact.name] = artifact.sha256
    (toolkit_dir / "toolkits.txt").write_text("".join(manifest_lines))

    python_dir = staging / "python"
    python_dir.mkdir(exist_ok=True)
    (python_dir / ".keep").write_text("")
    if python_artifact is not None:
        link_or_copy(python_artifact.path, python_dir / python_artifact.name)
        inputs[python_artifact.name] = python_artifact.sha256

    shutil.copytree(COMMON_DIR, staging / "common", dirs_exist_ok=True)
    dockerfile = render_dockerfile(plan.dockerfile_template.read_text(), plan.image_env, plan.profile)
    (staging / "Dockerfile").write_text(dockerfile)
    (staging / ".dockerignore").write_text(MARKER + "\n")

    prepared = PreparedContext(
        path=folder,
        torch_version=pins["torch"],
        pins=pins,
        extension=extension,
        inputs=dict(sorted(inputs.items())),
        dockerfile_sha256=hashlib.sha256(dockerfile.encode()).hexdigest(),
        common_sha256=tree_sha256(staging / "common"),
        temporary=temporary,
    )
    (staging / MARKER).write_text(prepared.to_json())
    if staging != folder:
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
    return prepared


def _is_requirement(location: str) -> bool:
    from .validation import is_url

    return not (is_url(location) or "/" in location or location.endswith(".whl"))
