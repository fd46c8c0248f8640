"""What is inside an image, read from the image itself: every Debian package (``/var/lib/dpkg/status``)
and every Python distribution of every environment, and its layers with their sizes.

The packages are read by a small script in a throwaway container with ``--network none``
(:func:`script`; the verify probe runs the same script, so a verified build reads them in the
container it verifies with); the layers come from the engine's image record and history.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchbake.core import output
from torchbake.core.errors import ConfigurationError, EngineError
from torchbake.core.files import read_back_object, write_atomically
from torchbake.core.redaction import redact

if TYPE_CHECKING:  # the engine's client: a listing of the tasks imports this module and needs none
    from torchbake.adapters.engine import DockerClient

MARK = "TORCHBAKE-INVENTORY "
INPUTS_LABEL = "torchbake.inputs"  # input file name → sha256 (variants.common writes it)
SHA512_LABEL = "torchbake.inputs.sha512"  # input file name → sha512 (building.builder writes it)
LOCK_LABEL = "torchbake.lock"  # the lock a release image was built from: "<file name> sha256:<hex>" (variants.release)
TOOLS_LABEL = "torchbake.tools"  # a program taken out of its wheel (uv) → what the wheel says of it (for the SBOM)

DPKG_STATUS = "/var/lib/dpkg/status"


def parse_dpkg_status(text):
    """The installed packages of a dpkg status file (name, version, architecture, source package
    and its version). Plain Python 3.8: the in-image script holds this function's own text."""
    debs = []
    for block in text.split("\n\n"):
        fields = {}
        for line in block.splitlines():
            if line[:1] not in (" ", "\t") and ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields.get("Package") and fields.get("Status", "").endswith(" installed"):
            source = fields.get("Source", "").split(" ")
            relations = ", ".join(filter(None, (fields.get("Pre-Depends", ""), fields.get("Depends", ""))))
            debs.append({"name": fields["Package"], "version": fields.get("Version", ""),
                         "architecture": fields.get("Architecture", ""),
                         "source": source[0] or fields["Package"],
                         "source_version": source[1].strip("()") if len(source) > 1 else fields.get("Version", ""),
                         "maintainer": fields.get("Maintainer", ""),
                         # each dependency's first alternative, its name without version or architecture
                         "depends": sorted({part.split("|")[0].split("(")[0].split(":")[0].strip()
                                            for part in relations.split(",") if part.strip()})})
    return debs


def parse_debian_copyright(text):
    """(licence, copyright) of a Debian copyright file: a machine-readable one's (DEP-5) ``Files: *``
    paragraph (its licence's short name, its copyright lines); otherwise ("", the file's lines that
    state a copyright). Plain Python 3.8: the in-image script holds this function's own text."""
    paragraphs, current, key = [], {}, ""
    for line in text.splitlines():
        if not line.strip():
            if current:
                paragraphs.append(current)
            current, key = {}, ""
        elif line[:1] in (" ", "\t") and key:
            current[key] += "\n" + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            current[key] = value.strip()
    if current:
        paragraphs.append(current)
    if not paragraphs or "Format" not in paragraphs[0]:
        notices = [line.strip() for line in text.splitlines() if "copyright" in line.lower()
                   and any(ch.isdigit() for ch in line)]
        return "", "\n".join(notices[:10])
    files = [p for p in paragraphs[1:] if "Files" in p]
    chosen = [p for p in files if "*" in p["Files"].split()] or files  # Files: *, else every Files paragraph
    licences, notices = [], []
    for paragraph in chosen:
        licence = paragraph.get("License", "").split("\n")[0].strip()
        if licence and licence not in licences:
            licences.append(licence)
        notices += [line for line in paragraph.get("Copyright", "").splitlines() if line not in (".", "") and line not in notices]
    return " and ".join(f"({name})" if " or " in name else name for name in licences), "\n".join(notices[:10])


# Standard library only, for any Python >= 3.8 in the image. The environments are the running
# interpreter's own site-packages and every site-packages or dist-packages folder where Debian,
# venvs under /opt, python-build-standalone and pip --user put them.
_INVENTORY = r'''

def _party(name, email, home):
    """NAME <EMAIL> of a wheel's Author/Author-email (or Maintainer…) fields, NAME <HOME PAGE> where
    it gives no address; "" for none."""
    name, email = (name or "").strip(), (email or "").strip()
    if "<" in email or not (name or email):  # Author-email: "Name <address>, Other <address>" already
        return email
    contact = email.split(",")[0].strip() or home
    return "%s <%s>" % (name, contact) if name and contact else name or contact


def _distributions(place, real, environment, vendored_by):
    from importlib import metadata

    found = []
    for dist in metadata.distributions(path=[place]):
        meta = dist.metadata
        name = meta["Name"]
        if not name:
            continue
        licence = meta.get("License-Expression") or ""
        text = (meta.get("License") or "").strip()
        classifiers = [c.split(" :: ")[-1] for c in (meta.get_all("Classifier") or []) if c.startswith("License ::")]
        requires = []
        for requirement in dist.requires or []:
            if "extra ==" not in requirement.replace("extra==", "extra =="):
                requires.append(requirement.split(";")[0].split("[")[0].split("(")[0].strip().split(" ")[0]
                                .split("<")[0].split(">")[0].split("=")[0].split("!")[0].split("~")[0])
        urls = [u.split(",", 1)[-1].strip() for u in (meta.get_all("Project-URL") or [])]
        home = next((u for u in [meta.get("Home-page") or ""] + urls if u.startswith(("https://", "http://"))), "")
        notices = []
        for file in dist.files or []:
            if file.name.upper().startswith(("LICENSE", "LICENCE", "COPYING", "NOTICE", "AUTHORS")):
                try:
                    notices += [line.strip() for line in file.read_text().splitlines()
                                if line.strip().lower().startswith("copyright") and any(c.isdigit() for c in line)]
                except (OSError, UnicodeDecodeError):
                    pass
        found.append({"name": name, "version": dist.version, "environment": environment, "folder": real,
                        "license_expression": licence, "license": text if len(text) <= 200 and "\n" not in text
                        else "", "license_classifiers": classifiers,
                        "author": _party(meta.get("Author"), meta.get("Author-email"), home),
                        "maintainer": _party(meta.get("Maintainer"), meta.get("Maintainer-email"), home),
                        "requires": sorted(set(r for r in requires if r)),
                        "copyright": "\n".join(list(dict.fromkeys(notices))[:10]), "vendored_by": vendored_by})
    return found


def _elf_section(path, wanted):
    """The bytes of section ``wanted`` of a 64-bit ELF file, or None (not ELF, no such section)."""
    import struct

    with open(path, "rb") as fh:
        head = fh.read(64)
        if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2:
            return None
        endian = "<" if head[5] == 1 else ">"
        table_offset = struct.unpack_from(endian + "Q", head, 0x28)[0]
        entry_size, count, names_index = struct.unpack_from(endian + "HHH", head, 0x3A)
        fh.seek(table_offset)
        table = fh.read(entry_size * count)
        if len(table) < entry_size * count or names_index >= count:
            return None
        sections = [struct.unpack_from(endian + "I4xQQQQ", table, i * entry_size) for i in range(count)]
        fh.seek(sections[names_index][3])
        names = fh.read(sections[names_index][4])
        for name, _flags, _address, offset, size in sections:
            if names[name:names.find(b"\0", name)] == wanted:
                fh.seek(offset)
                return fh.read(size)
    return None


def _auditable_binaries(folders):
    """The executables of each environment's bin/ that carry the Rust crates they were built from
    (cargo-auditable's .dep-v0 section, zlib-compressed JSON): path → its packages."""
    import glob, json, os, zlib

    found = []
    for folder in folders:
        for path in sorted(glob.glob(os.path.join(folder, "bin", "*"))):
            if not os.path.isfile(path) or os.path.islink(path) or not os.access(path, os.X_OK):
                continue
            try:
                data = _elf_section(path, b".dep-v0")
                packages = json.loads(zlib.decompress(data))["packages"] if data else None
            except (OSError, ValueError, KeyError, zlib.error):
                continue
            if packages:
                found.append({"path": path, "packages": packages})
    return found


def torchbake_inventory():
    import glob, os, sys
    from importlib import metadata

    try:
        with open("/var/lib/dpkg/status", encoding="utf-8", errors="replace") as fh:
            debs = parse_dpkg_status(fh.read())
    except OSError:
        debs = []
    for deb in debs:
        try:
            with open("/usr/share/doc/%s/copyright" % deb["name"], encoding="utf-8", errors="replace") as fh:
                deb["license"], deb["copyright"] = parse_debian_copyright(fh.read(200000))
        except OSError:
            deb["license"], deb["copyright"] = "", ""
    # the .deb files apt fetched in torchbake's builds (install_os_packages.sh): file, URL, sha256, sha512
    from urllib.parse import unquote
    fetched = {}
    try:
        with open("/etc/torchbake/debs.tsv", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                fields = (line.rstrip("\n").split("\t") + ["", "", "", ""])[:4]
                parts = unquote(fields[0])[:-len(".deb")].split("_")  # NAME_[EPOCH:]VERSION_ARCH.deb
                if len(parts) == 3 and fields[0].endswith(".deb"):
                    key = (parts[0], parts[1].split(":", 1)[-1], parts[2])
                    fetched[key] = dict(zip(("file", "url", "sha256", "sha512"), fields))
    except OSError:
        pass
    for deb in debs:
        deb.update(fetched.get((deb["name"], deb["version"].split(":", 1)[-1], deb["architecture"]), {}))
    patterns = ["/opt/*/lib/python3*/site-packages", "/usr/lib/python3/dist-packages", "/usr/lib/python3*/site-packages",
                "/usr/local/lib/python3*/site-packages", "/usr/local/lib/python3*/dist-packages",
                "/root/.local/lib/python3*/site-packages", "/home/*/.local/lib/python3*/site-packages"]
    folders = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    for pattern in patterns:
        folders += sorted(glob.glob(pattern))
    seen, pythons = set(), []
    for folder in folders:
        real = os.path.realpath(folder)
        if real in seen or not os.path.isdir(real):
            continue
        seen.add(real)
        environment = real.split("/lib/python")[0] if "/lib/python" in real else real
        # and the distributions a package vendors with their metadata (setuptools/_vendor/*.dist-info)
        places = [(real, "")] + [(v, v.rsplit("/", 2)[-2]) for v in sorted(glob.glob(os.path.join(real, "*", "_vendor")))]
        for place, vendored_by in places:
            pythons += _distributions(place, real, environment, vendored_by)
    os_release = {}
    try:
        with open("/etc/os-release", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.strip().partition("=")
                if key in ("ID", "VERSION_ID", "VERSION_CODENAME", "PRETTY_NAME", "NAME", "HOME_URL"):
                    os_release[key] = value.strip('"')
    except OSError:
        pass
    pythons.sort(key=lambda p: (p["environment"], p["name"].lower(), p["version"]))
    environments = sorted(set(p["environment"] for p in pythons))
    return {"debs": sorted(debs, key=lambda d: (d["name"], d["architecture"])), "pythons": pythons,
            "python": sys.executable, "os": os_release, "binaries": _auditable_binaries(environments)}
'''



@functools.cache
def script() -> str:
    """The in-image script that defines ``torchbake_inventory()`` (its dpkg parser the host's
    own, by its text): read when a probe runs, not when torchbake's modules are imported."""
    return inspect.getsource(parse_dpkg_status) + "\n\n" + inspect.getsource(parse_debian_copyright) + _INVENTORY


def probe() -> str:
    """:func:`script`, printing its result after :data:`MARK`."""
    return script() + f"\nimport json\nprint({MARK!r} + json.dumps(torchbake_inventory()))\n"


@dataclass(frozen=True)
class Deb:
    name: str
    version: str
    architecture: str
    source: str
    source_version: str
    maintainer: str = ""  # "Name <email>": the package's supplier
    depends: tuple[str, ...] = ()  # the packages it depends on (each dependency's first alternative)
    license: str = ""  # the licence its copyright file states for its files (DEP-5 short name)
    copyright: str = ""  # the copyright lines its copyright file states
    # the .deb a torchbake build fetched for it (/etc/torchbake/debs.tsv); "" for the base's own
    file: str = ""
    url: str = ""
    sha256: str = ""
    sha512: str = ""

    @classmethod
    def from_json(cls, found: Mapping[str, Any]) -> Deb:
        """A package as the in-image script (or a recorded inventory) gives it."""
        return cls(**{**found, "depends": tuple(found.get("depends", ())), "url": redact(found.get("url", ""))})


@dataclass(frozen=True)
class PythonDist:
    name: str
    version: str
    environment: str  # the prefix: /opt/venv, /usr, /opt/python
    folder: str = ""
    license_expression: str = ""
    license: str = ""  # a short License field (long ones are the licence's text)
    license_classifiers: tuple[str, ...] = ()
    author: str = ""  # NAME <EMAIL or HOME PAGE> of Author and Author-email
    maintainer: str = ""  # the same of Maintainer and Maintainer-email
    requires: tuple[str, ...] = ()  # the projects it requires (Requires-Dist without extras)
    copyright: str = ""  # the copyright lines of its licence files
    vendored_by: str = ""  # the package that carries it inside itself (setuptools/_vendor), "" for one installed

    @property
    def key(self) -> str:
        """The project name as package indexes compare it (PEP 503)."""
        from packaging.utils import canonicalize_name

        return str(canonicalize_name(self.name))


@dataclass(frozen=True)
class Binary:
    """An executable that carries the Rust crates it was built from (cargo-auditable): each crate's
    name, version, source ("crates.io", "local", "git" …), kind and the indexes it depends on; the
    one marked root is the binary's own."""

    path: str
    packages: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Layer:
    diff_id: str  # sha256 of the uncompressed layer
    size: int  # bytes, as the engine reports them (-1: not known)
    created_by: str = ""


@dataclass(frozen=True)
class Inventory:
    debs: tuple[Deb, ...] = ()
    pythons: tuple[PythonDist, ...] = ()
    os_release: Mapping[str, str] = field(default_factory=dict)  # /etc/os-release: ID, VERSION_CODENAME …
    main_python: str = ""  # the interpreter `python` is in the image (its environment is the image's own)
    layers: tuple[Layer, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    image_id: str = ""
    binaries: tuple[Binary, ...] = ()

    @classmethod
    def from_probe(cls, found: Mapping[str, Any], **more: Any) -> Inventory:
        return cls(debs=tuple(Deb.from_json(d) for d in found.get("debs", [])),
                   pythons=tuple(PythonDist(**{**p, "license_classifiers": tuple(p.get("license_classifiers", ())),
                                               "requires": tuple(p.get("requires", ()))})
                                 for p in found.get("pythons", [])),
                   main_python=found.get("python", ""), os_release=found.get("os", {}),
                   binaries=tuple(Binary(b["path"], tuple(b.get("packages", ()))) for b in found.get("binaries", [])),
                   **more)

    def to_json(self) -> dict[str, Any]:
        return {"image_id": self.image_id, "main_python": self.main_python, "os": dict(self.os_release),
                "debs": [{**vars(d), "depends": list(d.depends)} for d in self.debs],
                "pythons": [{**vars(p), "license_classifiers": list(p.license_classifiers), "requires": list(p.requires)}
                            for p in self.pythons],
                "layers": [vars(layer) for layer in self.layers], "labels": dict(self.labels),
                "binaries": [{"path": b.path, "packages": list(b.packages)} for b in self.binaries]}

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Inventory:
        return cls.from_probe({"debs": document.get("debs", []), "pythons": document.get("pythons", []),
                               "python": document.get("main_python", ""), "os": document.get("os", {}),
                               "binaries": document.get("binaries", [])},
                              layers=tuple(Layer(**layer) for layer in document.get("layers", [])),
                              labels=document.get("labels", {}), image_id=document.get("image_id", ""))

    @property
    def main_environment(self) -> str:
        """The prefix of the image's own Python environment (/opt/venv)."""
        return self.main_python.rsplit("/bin/", 1)[0] if "/bin/" in self.main_python else ""


# Dockerfile instructions that change only the image's configuration: no layer of their own.
CONFIG_ONLY = ("ENV", "ARG", "CMD", "LABEL", "WORKDIR", "USER", "EXPOSE", "ENTRYPOINT", "VOLUME", "STOPSIGNAL",
               "HEALTHCHECK", "SHELL", "ONBUILD", "MAINTAINER")


def layers_of(client: DockerClient, image: str, info: Mapping[str, Any]) -> tuple[Layer, ...]:
    """The image's layers, oldest first, with the size of each where the engine's history says it
    (its steps that made a layer, matched in order; -1 where they cannot be matched)."""
    diff_ids = list((info.get("RootFS") or {}).get("Layers") or [])
    steps = [entry for entry in reversed(client.history(image))
             if not str(entry.get("CreatedBy", "")).split("#(nop)")[-1].strip().startswith(CONFIG_ONLY)]
    if len(steps) != len(diff_ids):
        return tuple(Layer(diff_id, -1) for diff_id in diff_ids)
    return tuple(Layer(diff_id, int(step.get("Size", 0)), str(step.get("CreatedBy", ""))[:200])
                 for diff_id, step in zip(diff_ids, steps, strict=True))


def take(client: DockerClient, image: str, found: Mapping[str, Any] | None = None) -> Inventory:
    """The inventory of ``image`` (``found``: what the verify probe already read in it)."""
    info = client.inspect_image(image)
    if info is None:
        raise EngineError(f"The engine has no image {image} to list the contents of.")
    if found is None:
        result = client.run_capture(image, ["-c", probe()], entrypoint="python")
        from torchbake.adapters.engine import marked_json

        found = marked_json(result.output, MARK)
        if found is None and "executable file not found" in result.output:  # no Python: its Debian packages only
            status = client.read_file(image, DPKG_STATUS)
            if status is not None:
                found = {"debs": parse_dpkg_status(status), "pythons": []}
            else:
                raise ConfigurationError(
                    f"{image} has neither `python` on its PATH nor Debian's package database ({DPKG_STATUS}):"
                    " torchbake lists the packages of images that have one of them (every image it builds has"
                    " both). Name an image `invoke build` made, or one with Python or dpkg.")
        if found is None:
            raise EngineError(f"Could not list the packages of {image}: `python` in the image did not answer"
                              f" (exit {result.returncode}). Its last output:\n{result.output.strip()[-1500:]}")
    return Inventory.from_probe(found, layers=layers_of(client, image, info),
                                labels=(info.get("Config") or {}).get("Labels") or {}, image_id=info["Id"])


def debs_of(client: DockerClient, image: str) -> tuple[Deb, ...] | None:
    """The Debian packages of ``image`` (its dpkg status, read from a container never started:
    DockerClient.read_file); None when they cannot be read."""
    try:
        status = client.read_file(image, DPKG_STATUS)
    except EngineError:
        return None
    return None if status is None else tuple(Deb.from_json(d) for d in parse_dpkg_status(status))


def base_debs(client: DockerClient, base: Mapping[str, str], cache_dir: Path) -> tuple[Deb, ...] | None:
    """The Debian packages of a build's FROM image (``base``: the build record's, its reference
    and the engine's id of it), read once per image id (an id never changes content, as
    variants.common.os_release_of reads /etc/os-release) and kept in ``cache_dir``: each build on
    that image ran a container for them. Kept only while the reference still names that id; a
    damaged record is read again. None when they cannot be read."""
    reference, image_id = base.get("reference", ""), base.get("image_id", "")
    record = cache_dir / "base-debs" / f"{image_id.replace(':', '-')}.json" if image_id.startswith("sha256:") else None
    if record is not None and record.is_file():
        kept = read_back_object(record)
        try:
            return tuple(Deb.from_json(found) for found in kept["debs"])
        except (TypeError, KeyError, AttributeError):
            output.channel().say(f"{record} is damaged; reading {reference}'s Debian packages again.")
    debs = debs_of(client, reference)
    if debs is not None and record is not None and (client.inspect_image(reference) or {}).get("Id") == image_id:
        write_atomically(record, json.dumps({"debs": [dataclasses.asdict(deb) for deb in debs]}))
    return debs


def installed(inventory: Inventory, environment: str = "") -> dict[str, str]:
    """Project (canonical name) → version in ``environment`` (default the image's own)."""
    wanted = environment or inventory.main_environment
    return {p.key: p.version for p in inventory.pythons if p.environment == wanted and not p.vendored_by}


def source_trees(labels: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Tree → {repo, commit, tag} of the source trees an image records (``torchbake.source.*``
    labels; the vendor extension's ``torchbake.extension-*``)."""
    trees: dict[str, dict[str, str]] = {}
    for key, value in labels.items():
        if key.startswith("torchbake.source.") and key.count(".") == 3:
            _, _, tree, what = key.split(".")
            trees.setdefault(tree, {})[what] = value
    if labels.get("torchbake.extension-repo"):
        trees["extension"] = {"repo": labels["torchbake.extension-repo"],
                              "commit": labels.get("torchbake.extension-commit", ""),
                              "tag": labels.get("torchbake.extension-ref", "")}
    return trees


def recorded_files(labels: Mapping[str, str], label: str = INPUTS_LABEL) -> dict[str, str]:
    """File name → sha256 of every input file the image was built from (wheels, toolkit and Python
    tarballs: its ``torchbake.inputs`` label; their sha512 with ``label=SHA512_LABEL``); {} when it
    records none, or a label not torchbake's."""
    try:
        inputs = json.loads(labels.get(label) or "{}")
    except ValueError:
        return {}
    return {str(name): str(digest) for name, digest in inputs.items()} if isinstance(inputs, dict) else {}


def wheel_files(labels: Mapping[str, str]) -> dict[tuple[str, str], str]:
    """(project, version) → the file name of each wheel the image was built from."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    found = {}
    for file_name in recorded_files(labels):
        if not str(file_name).endswith(".whl"):
            continue
        try:
            name, version, _build, _tags = parse_wheel_filename(file_name.rsplit("/", 1)[-1])
        except InvalidWheelFilename:
            continue
        found[(str(name), str(version))] = file_name
    return found
