"""Helpers for real-engine tests: the docker CLI, fake wheels, a local HTTP server."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import zipfile
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import recorded
from tests.support import http_server  # noqa: F401 - re-exported for the e2e tests
from torchbake.building.reproducible import layer_tar

DOCKER = "/usr/bin/docker"  # the engine's own client (scripts/ensure-engine.sh): `docker build` is buildx


# The SBOM standards' checker nobody here wrote (ntia-conformance-checker, the test extra): NTIA, CISA FSCT3-min, BSI
NTIA_CHECKER = str(Path(sys.executable).with_name("ntia-checker"))


def docker(*args: str, check: bool = True, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    if args[:2] == ("run", "--rm"):
        return _run_reading_the_log(args[2:], check=check, env=env, timeout=timeout)
    with recorded(["docker", *args]):
        return subprocess.run([DOCKER, *args], capture_output=True, text=True, check=check, timeout=timeout,
                              env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def _run_reading_the_log(args: tuple[str, ...], *, check: bool, env: dict | None,
                         timeout: float) -> subprocess.CompletedProcess[str]:
    """`docker run --rm ARGS` with the output read from the container's log once it has exited:
    an attached `docker run` of a short-lived container can lose its output (moby/moby#45689; seen
    here in CI: `python -c "print(...)"` with an empty stdout and exit status 0). The log can lose
    it too: after a container exits, the engine waits a bounded time for its output to reach the
    log, then closes the streams (moby's handleContainerExit, Container.Reset), and under the
    suite's load that is not always enough (run 32: `print(...)` with exit status 0 and an empty log). A container that
    exits 0 with an empty log is run once more; whether its output is right is the test's to say."""
    result = _run_once(args, check=check, env=env, timeout=timeout)
    if result.returncode == 0 and not result.stdout and not result.stderr:
        result = _run_once(args, check=check, env=env, timeout=timeout)
    return result


def _run_once(args: tuple[str, ...], *, check: bool, env: dict | None,
              timeout: float) -> subprocess.CompletedProcess[str]:
    created = docker("create", *args, check=check, env=env, timeout=timeout)
    if created.returncode:
        return created
    container = created.stdout.strip()
    try:
        docker("start", container, env=env, timeout=timeout)
        status = int(docker("wait", container, env=env, timeout=timeout).stdout.strip())
        log = docker("logs", container, env=env, timeout=timeout)
    finally:
        docker("rm", "--force", container, check=False, env=env)
    result = subprocess.CompletedProcess([DOCKER, "run", "--rm", *args], status, log.stdout, log.stderr)
    if check:
        result.check_returncode()
    return result


def file_in_image(image: str, path: str, env: dict | None = None) -> str:
    """The text of the file ``path`` in ``image``, copied out of a container created (never
    started) from it: nothing runs, so no output stream can lose it (under load, a container's
    log can miss what it wrote: `cat` with exit status 0 and an empty log, seen in run 11)."""
    container = docker("create", image, "true", env=env).stdout.strip()
    try:
        archive = subprocess.run([DOCKER, "cp", f"{container}:{path}", "-"], capture_output=True, check=True,
                                 env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL).stdout
    finally:
        docker("rm", "--force", container, check=False, env=env)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return tar.extractfile(tar.next()).read().decode()


def listing(*args: str, env: dict | None = None) -> str:
    """`docker images …` / `docker ps -a …`: on the containerd image store a listing reads each
    image's content, and fails as "not found" when another test removes an image meanwhile; such a
    listing is asked again (a lasting failure still fails), as torchbake's DockerClient.images does."""
    for _attempt in range(4):
        result = docker(*args, env=env, check=False)
        if result.returncode == 0 or "not found" not in result.stderr:
            break
    assert result.returncode == 0, (args, result.stderr)
    return result.stdout


def copy_image(image: str, engine: dict) -> None:
    """``image`` from this machine's engine into another one (``engine``: its DOCKER_HOST),
    streamed through `docker save | docker load` (never held in memory); nothing to do where
    that engine has the very image under the name already (a module's engine, a second test)."""
    ours = docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
    if docker("image", "inspect", "--format", "{{.Id}}", image, env=engine, check=False).stdout.strip() == ours:
        return
    save = subprocess.Popen([DOCKER, "save", image], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    load = subprocess.run([DOCKER, "load"], stdin=save.stdout, capture_output=True, env={**os.environ, **engine})
    save.stdout.close()
    assert save.wait() == 0 and load.returncode == 0, load.stdout + load.stderr


def image_ids(env: dict | None = None) -> set[str]:
    return set(listing("images", "-aq", "--no-trunc", env=env).split())


def container_ids() -> set[str]:
    return set(listing("ps", "-aq", "--no-trunc").split())


def labels(image: str) -> dict[str, str]:
    return json.loads(docker("image", "inspect", image).stdout)[0]["Config"]["Labels"]


def saved_layer_paths(outer: tarfile.TarFile) -> list[str]:
    """The layers' paths in an open `docker save` archive, bottom first (its manifest.json names them:
    blobs/sha256/… in an OCI layout, gzip, zstd or uncompressed: ``layer_tar`` reads each)."""
    return json.load(outer.extractfile("manifest.json"))[0]["Layers"]


def layer_media_types(image: str) -> list[str]:
    """The media type of each layer of ``image``, from its manifest as `docker save` writes it."""
    saved = subprocess.run([DOCKER, "save", image], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(saved)) as outer:
        def blob(digest):
            return json.load(outer.extractfile("blobs/sha256/" + digest.split(":", 1)[1]))
        manifest = blob(json.load(outer.extractfile("index.json"))["manifests"][0]["digest"])
        while "manifests" in manifest:
            manifest = blob(manifest["manifests"][0]["digest"])
        return [layer["mediaType"] for layer in manifest["layers"]]


def saved_contents(image: str) -> bytes:
    """Everything `docker save` writes of the image, to search: its config, manifests and history,
    and every layer uncompressed (a compressed layer would hide any string it holds)."""
    saved = subprocess.run([DOCKER, "save", image], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(saved)) as outer:
        layer_paths = saved_layer_paths(outer)
        others = [outer.extractfile(member).read() for member in outer.getmembers()
                  if member.isfile() and member.name not in layer_paths]
        layers = [layer_tar(outer.extractfile(path)).read() for path in layer_paths]
    return b"\n".join([*others, *layers])


def layer_file_names(image: str, folder: Path) -> list[str]:
    """Every path in every layer of the image, read from `docker save` written into ``folder``, each
    layer streamed (the CPU image read whole into memory took 6.5 s of CPU and 2.2 GB; streamed, 4.0 s
    and 63 MB, the same 35,332 names, 2026-11-30)."""
    archive = folder / "saved.tar"
    subprocess.run([DOCKER, "save", "--output", str(archive), image], capture_output=True, check=True)
    names = []
    try:
        with tarfile.open(archive) as outer:
            for path in saved_layer_paths(outer):
                with tarfile.open(fileobj=layer_tar(outer.extractfile(path)), mode="r|") as layer:
                    names += [member.name for member in layer]
    finally:
        archive.unlink()
    return names


def make_wheel(folder: Path, name: str, version: str, requires: list[str], files: dict[str, str],
               metadata_lines: str = "") -> Path:
    """A real (pure Python) wheel, as pip expects it (``metadata_lines``: more of its METADATA),
    the same bytes for the same arguments."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{metadata_lines}" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    entries = {**files, f"{dist}.dist-info/METADATA": metadata,
               f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: torchbake-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for entry, text in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{entry},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}.dist-info/RECORD,,")
    entries[f"{dist}.dist-info/RECORD"] = "\n".join(record) + "\n"
    with zipfile.ZipFile(path, "w") as zf:
        for entry, text in entries.items():
            # the same files make the same bytes, run after run (no time of making in the archive):
            # an engine that built with the wheel before finds its steps in its build cache
            info = zipfile.ZipInfo(entry, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, text)
    return path


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def layers(image: str) -> list[tuple[str, int]]:
    """(diff id, bytes) of each layer of the image, bottom first: the sizes of its manifest's
    layer blobs (what a registry ships and a fresh engine pulls, compressed), read from the
    engine's containerd content store."""
    info = json.loads(docker("image", "inspect", image).stdout)[0]
    root = json.loads(docker("info", "--format", "{{json .}}").stdout)["DockerRootDir"]
    blobs = Path(root) / "containerd" / "daemon" / "io.containerd.content.v1.content" / "blobs" / "sha256"
    manifest = json.loads((blobs / info["Id"].split(":", 1)[1]).read_text())
    if "manifests" in manifest:  # an index: this machine's manifest
        entry = next(m for m in manifest["manifests"] if m.get("platform", {}).get("architecture") == "amd64")
        manifest = json.loads((blobs / entry["digest"].split(":", 1)[1]).read_text())
    sizes = [layer["size"] for layer in manifest["layers"]]
    assert len(sizes) == len(info["RootFS"]["Layers"]), (image, manifest)
    return list(zip(info["RootFS"]["Layers"], sizes, strict=True))


def new_layer_bytes(image: str, other: str) -> tuple[int, int]:
    """(how many bottom layers ``image`` shares with ``other``, bytes of its layers above them)."""
    mine, theirs = layers(image), layers(other)
    shared = 0
    while shared < min(len(mine), len(theirs)) and mine[shared][0] == theirs[shared][0]:
        shared += 1
    return shared, sum(size for _, size in mine[shared:])


def torch_layer(image: str) -> int:
    """The index of the real CPU image's largest layer: torch's (about 1 GB)."""
    sizes = [size for _, size in layers(image)]
    return sizes.index(max(sizes))


TINY_TORCH_VERSION = "2.13.0+tiny"
# The [python] section of every profile on the stand-in torch: uv is not kept in those images. A
# kept uv carries 530 Rust crates, four fifths of an image's SBOM components and a third of a
# stand-in build's own CPU time (its SBOMs, 2026-11-27: 3.6 s → 2.4 s user); uv kept, its crates
# in the SBOMs and its pin check are proven on the real CPU image (test_release, test_as_typed).
STAND_IN_PYTHON = '[python]\nversion = "3.11"\nkeep_uv = false\n'


def as_in_a_terminal() -> None:
    """A started command's Ctrl-C as a terminal user's: the default disposition of SIGINT (a `preexec_fn`).
    A job started in the background by a shell without job control (a CI step, `cmd &`) inherits
    SIGINT ignored, and Python then keeps ignoring it: a test's SIGINT would reach nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def make_tiny_torch(folder: Path) -> Path:
    """A real wheel of a small stand-in ``torch`` (a real ``torch/__init__.py``, version
    2.13.0+tiny): for tests about torchbake's machinery (matrix, registry, gc, faults), where
    the 900 MB of the real CPU wheel only cost time. What verify reads is there: the version,
    ``torch.version``, ``torch.cuda``; ``torch._C`` is missing as in any CPU build without CUDA."""
    folder.mkdir(parents=True, exist_ok=True)
    return make_wheel(folder, "torch", TINY_TORCH_VERSION, [], {
        "torch/__init__.py": f"__version__ = {TINY_TORCH_VERSION!r}\nfrom . import cuda, version\n",
        "torch/version.py": f"__version__ = {TINY_TORCH_VERSION!r}\ncuda = None\nhip = None\ngit_version = 'tiny'\n",
        "torch/cuda.py": "def is_available():\n    return False\n\n\ndef get_arch_list():\n    return []\n",
    }, metadata_lines="Author-email: PyTorch Team <packages@pytorch.org>\nLicense: BSD-3-Clause\n")  # who supplies it, as the real wheel says


_UNITS = {"B": 1, "kB": 1000, "KB": 1000, "MB": 1000 ** 2, "GB": 1000 ** 3, "TB": 1000 ** 4}


def system_df(env: dict | None = None) -> dict[str, int]:
    """Bytes per type ("Images", "Build Cache", …) as `docker system df` prints them (the engine's
    own account, not torchbake's: decimal units, three or four significant digits)."""
    import re

    found = {}
    for line in docker("system", "df", "--format", "{{.Type}}\t{{.Size}}", env=env).stdout.splitlines():
        kind, size = line.split("\t")
        number, unit = re.fullmatch(r"([\d.]+)\s*([kKMGT]?B)", size.strip()).groups()
        found[kind] = int(float(number) * _UNITS[unit])
    return found


REPOSITORY = re.compile(r"[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*")


def engine_state(names, env: dict | None = None) -> dict[str, set[str]]:
    """What the engine holds under ``names`` (image references: NAME:TAG and the candidate tags of
    NAME:TAG; a name without a tag, its whole repository) and the containers made from those images
    or named one of ``names``:
    the things a command given those names could create, and nothing another user of the engine
    makes meanwhile (a whole-engine listing would count theirs too). A candidate tag belongs to the
    NAME:TAG its build was for (its org.opencontainers.image.version label): the candidates other
    tests build beside this one under the same NAME, for their own tags, are theirs."""
    names = set(names)
    tagged = {name for name in names if ":" in name.rsplit("/", 1)[-1]}
    tags_of = {}
    for name in tagged:
        repository, _, tag = name.rpartition(":")
        tags_of.setdefault(repository, set()).add(tag)
    whole = names - tagged  # a name without a tag: its whole repository

    def split(reference: str) -> tuple[str, str]:
        repository, _, tag = reference.rpartition(":") if ":" in reference.rsplit("/", 1)[-1] else (reference, "", "")
        return repository, tag

    # Only the repositories of ``names``, by the engine's reference filter: a whole listing reads every
    # image's content on the containerd store (0.33 s of the engine's CPU with 48 images, 0.02 s
    # filtered), and the bad-input catalogue asks twice a case. A name that cannot be a repository
    # (upper case, a flag, a path) holds no image.
    repositories = sorted({split(name)[0] for name in names if REPOSITORY.fullmatch(split(name)[0])})
    listed = [line.rsplit(" ", 1) for line in listing(
        "images", "--no-trunc", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}",
        *(f"--filter=reference={repository}" for repository in repositories), env=env).splitlines()] if repositories else []
    candidates = {ref: image_id for ref, image_id in listed
                  if split(ref)[0] in tags_of and split(ref)[1].startswith("torchbake-candidate-")}
    built_for = {}  # candidate reference -> the tag its build was for
    if candidates:
        inspected = json.loads(docker("image", "inspect", *set(candidates.values()), check=False, env=env).stdout or "[]")
        version = {i["Id"]: (i["Config"].get("Labels") or {}).get("org.opencontainers.image.version") for i in inspected}
        built_for = {ref: version.get(image_id) for ref, image_id in candidates.items()}

    def concerns(reference: str) -> bool:
        repository, _ = split(reference)
        return reference in names or repository in whole or built_for.get(reference) in tags_of.get(repository, ())

    images = {f"{ref} {image_id}" for ref, image_id in listed if concerns(ref)}
    containers = set()
    # A probe container (label torchbake.probe) lives only during the call that made it, and any
    # command on a shared image makes them, on any worker: counting them would count another test's
    # command. Their leaks are test_faults' leftovers check.
    for line in listing("ps", "-a", "--no-trunc", "--format", 'probe={{.Label "torchbake.probe"}} {{.ID}} {{.Image}} {{.Names}}',
                        env=env).splitlines():
        probe, line = line.split(" ", 1)
        _container_id, image, name = line.split(" ", 2)
        if probe != "probe=true" and (concerns(image) or name in names):
            containers.add(line)
    return {"images": images, "containers": containers}


# A view of this host without GPUs, for one command: a private mount namespace whose /dev holds
# only null, zero, random, urandom, full and the host's shm (a tmpfs every host has; the suite's
# temporary folder where it has room: scripts/test.sh), and where the container toolkits' runtime
# hooks are not executable. With an engine that has no GPU runtimes (the second engine's daemon configuration is
# empty), the device profiles' checks see a GPU-less host on any machine, GPU hosts included.
_GPU_LESS = r"""
set -e
temp=${TMPDIR:-/tmp}
case "$temp" in /dev | /dev/*) temp=/tmp ;; esac  # not under /dev, which the view replaces
host_dev=$(mktemp -d "$temp/gpu-less-dev.XXXXXX")
trap 'umount -R "$host_dev" 2>/dev/null; rmdir "$host_dev"' EXIT  # a mount that fails leaves nothing either
mount --rbind /dev "$host_dev"  # with the mounts below /dev (its shm)
mount -t tmpfs -o size=1m,mode=755 tmpfs /dev
for node in null zero random urandom full; do
    touch "/dev/$node"
    mount --bind "$host_dev/$node" "/dev/$node"
done
mkdir /dev/shm
mount --bind "$host_dev/shm" /dev/shm
for hook in $(command -v nvidia-container-runtime-hook mthreads-container-runtime-hook || true); do
    mount --bind /dev/null "$hook"
done
umount -R "$host_dev"  # the nodes stay bound; the folder goes (it is the host's)
rmdir "$host_dev"
exec "$@"
"""


def gpu_less(argv: list[str]) -> list[str]:
    """``argv`` run in a view of the host without GPUs (see _GPU_LESS); needs root, as the suite does."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", _GPU_LESS, "gpu-less", *argv]


BOOTSTRAP_LABEL = "torchbake.bootstrap.suite"  # on the OS images torchbake makes with debootstrap


def table_rows(text: str) -> list[list[str]]:
    """The rows of a table torchbake printed (rich, box lines), each cell's folded lines joined
    with spaces: a row starts where its first column is not empty."""
    rows: list[list[str]] = []
    for line in text.splitlines():
        if not line.startswith("│"):
            continue
        cells = [cell.strip() for cell in line.strip("│").split("│")]
        if cells[0] or not rows:
            rows.append(cells)
        else:
            rows[-1] = [f"{old} {new}".strip() for old, new in zip(rows[-1], cells, strict=True)]
    return rows


def table_header(text: str) -> list[str]:
    """The column names of a table torchbake printed (rich's heavy head), each name's folded lines
    joined: ["cell", "image", "status", ...]."""
    lines = [[cell.strip() for cell in line.strip("┃").split("┃")] for line in text.splitlines() if line.startswith("┃")]
    return ["".join(parts) for parts in zip(*lines, strict=True)]


def image_exists(reference: str) -> bool:
    return docker("image", "inspect", reference, check=False).returncode == 0


@contextmanager
def set_aside(reference: str):
    """An engine without ``reference`` for the block, whoever made it: an image already there is
    kept under a tag of the test's own meanwhile and given its name back afterwards (the image the
    test made instead goes), so that the test shows a bootstrap and the user's image is untouched."""
    import uuid

    aside = f"torchbake-test/aside:{uuid.uuid4().hex[:12]}"
    existed = image_exists(reference)
    if existed:
        docker("tag", reference, aside)
        docker("image", "rm", reference)  # the tag only: the image keeps the aside tag
    try:
        yield
    finally:
        if image_exists(reference):
            docker("image", "rm", "--force", reference, check=False)
        if existed:
            docker("tag", aside, reference)
            docker("image", "rm", aside)


def sboms(image: str, env: dict, folder: Path, *, validate: bool = True) -> dict[str, dict]:
    """The SPDX 2.3, SPDX 3 and CycloneDX SBOMs `invoke sbom` writes for ``image``, each checked
    (``validate``) with its format's own maintained validator (spdx-tools; the SPDX 3 checker's;
    cyclonedx-python-lib's JSON schema)."""
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator
    from spdx_tools.spdx.parser.jsonlikedict.json_like_dict_parser import JsonLikeDictParser
    from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

    from tests.conftest import run_invoke

    found = {}
    for kind in ("spdx", "spdx3", "cyclonedx"):
        target = folder / f"{kind}.json"
        result = run_invoke("sbom", image, "--format", kind, "--output", str(target), env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        found[kind] = json.loads(target.read_text())
    if validate:
        assert validate_full_spdx_document(JsonLikeDictParser().parse(found["spdx"])) == []
        assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(found["cyclonedx"])) is None
    return found


def judged_by_the_standards(spdx3: dict, folder: Path) -> dict[str, dict[str, bool]]:
    """Standard (ntia, fsct3-min, bsi) → requirement → met, as ntia-conformance-checker (nobody here
    wrote it) judges an SPDX 3 document; the document must parse and validate first."""
    path = folder / "image.spdx3.json"
    path.write_text(json.dumps(spdx3))
    judged = {}
    for standard in ("ntia", "fsct3-min", "bsi"):
        result = subprocess.run([NTIA_CHECKER, "--comply", standard, "--sbom-spec", "spdx3", str(path)],
                                capture_output=True, text=True, timeout=300)
        assert "validation" not in result.stdout.lower() + result.stderr.lower(), result.stdout + result.stderr
        judged[standard] = {row.strip(): ok == "True" for row, ok in re.findall(r"^(.+?)\s+\|\s+(True|False)$",
                                                                                result.stdout, re.M)}
        assert judged[standard], result.stdout + result.stderr
        assert (result.returncode == 0) == all(ok for row, ok in judged[standard].items()
                                               if "(Warning)" not in row and "(Optional)" not in row), result.stdout
    return judged


def python_packages(cyclonedx: dict, environment: str) -> dict[str, str]:
    """Project (canonical name) → version of the SBOM's Python packages installed in ``environment``
    (not those a package vendors inside itself, which pip does not list)."""
    return {re.sub(r"[-_.]+", "-", c["name"]).lower(): c["version"] for c in cyclonedx["components"]
            if c.get("purl", "").startswith("pkg:pypi/")
            and {"name": "torchbake:environment", "value": environment} in c.get("properties", [])
            and not any(p["name"] == "torchbake:vendored-by" for p in c.get("properties", []))}


def assert_sbom_lists_what_pip_freeze_lists(image: str, cyclonedx: dict) -> None:
    """Every `pip freeze --all` line of the image's own environment is a package of the SBOM, and
    the SBOM lists no package of that environment that pip does not."""
    script = ("import subprocess, sys; print(sys.prefix, flush=True);"
              " subprocess.run([sys.executable, '-m', 'pip', 'freeze', '--all'], check=True)")
    for _ in range(3):  # an attached run of a short-lived container can lose its output (moby/moby#45689)
        lines = docker("run", "--rm", "--network", "none", image, "python", "-c", script).stdout.splitlines()
        if lines:
            break
    prefix, frozen = lines[0], lines[1:]
    listed = python_packages(cyclonedx, prefix)
    pins = {}
    for line in frozen:
        name, _, version = line.partition("==") if "==" in line else (line.split(" @ ")[0], "", "")
        pins[re.sub(r"[-_.]+", "-", name.strip()).lower()] = version.strip()
    assert set(listed) == set(pins), (sorted(set(pins) - set(listed)), sorted(set(listed) - set(pins)))
    assert {name: listed[name] for name, version in pins.items() if version} == {k: v for k, v in pins.items() if v}


def dpkg_status(image: str) -> dict[str, dict[str, str]]:
    """Package → its fields, of every Debian package installed in ``image``, read from its
    /var/lib/dpkg/status (copied out of a created container: nothing runs)."""
    container = docker("create", image).stdout.strip()
    try:
        archive = subprocess.run([DOCKER, "cp", f"{container}:/var/lib/dpkg/status", "-"], capture_output=True,
                                 check=True, timeout=120).stdout
    finally:
        docker("rm", "--force", container, check=False)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        text = tar.extractfile(tar.getmembers()[0]).read().decode()
    found = {}
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(" "))
        if fields.get("Status") == "install ok installed":
            found[fields["Package"]] = fields
    return found


def dpkg_installed(image: str) -> dict[str, str]:
    """Package → version of every Debian package installed in ``image``."""
    return {name: fields["Version"] for name, fields in dpkg_status(image).items()}


def cached_run_steps(log: str) -> list[str]:
    """The RUN steps a BuildKit log (--progress=plain) shows as CACHED."""
    steps = dict(re.findall(r"^(#\d+) \[[^\]]+\] (RUN .*)$", log, re.MULTILINE))
    return [steps[step] for step in re.findall(r"^(#\d+) CACHED$", log, re.MULTILINE) if step in steps]


def recorded_compiles(stdout: str, kind: str = "compiles") -> dict[str, dict]:
    """The compile steps' counts the build kept in its record (the manifest its first line names):
    ccache's (``compiles``), or what its progress counted (``compile_progress``)."""
    manifest = re.search(r"manifest: (\S+)\)", stdout)
    assert manifest, stdout[:2000]
    return json.loads(Path(manifest.group(1)).read_text()).get(kind, {})
