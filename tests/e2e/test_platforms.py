"""One tag for amd64 and arm64, built on this amd64 host with real QEMU: a debootstrapped arm64
Debian, the stand-in torch and the real numpy wheels of each machine, each platform's image
built, verified and recorded on its own, then joined. The arm64 wheels are unpacked natively."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tomllib
from pathlib import Path

import filelock
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from tests.conftest import run_invoke
from tests.leftovers import host_lock
from tests.support import serve_registry

from .helpers import STAND_IN_PYTHON, as_in_a_terminal, docker, listing, make_wheel

MULTI_BASE = "torchbake-test/debian:bookworm-multi"  # made once per engine, kept between runs (as SHARED_BASE)
# Made with every OS package a release image needs: the arm64 build runs no emulated apt step.
RUNTIME_PACKAGES = "ca-certificates,tar,gzip,xz-utils,bzip2,procps,python3,python3-venv"
NUMPY = "numpy==2.4.6"


@pytest.fixture(scope="module")
def multi_base(run_id, tb_env):
    """A bookworm base for linux/amd64 and linux/arm64 under one name, by `invoke bootstrap-os --platform`."""
    name = f"torchbake-test/debian:bookworm-multi-{run_id}"
    with filelock.FileLock(host_lock("multi-base")):
        labels = docker("image", "inspect", "--format", "{{json .Config.Labels}}", MULTI_BASE, check=False).stdout
        if "linux/amd64,linux/arm64" not in labels or RUNTIME_PACKAGES not in labels:
            result = run_invoke("bootstrap-os", "--suite", "bookworm", "--name", MULTI_BASE, "--force",
                                "--platform", "arm64,amd64", "--include", RUNTIME_PACKAGES, env=tb_env)
            assert result.returncode == 0, result.stdout + result.stderr
            assert f"Created {MULTI_BASE}" in result.stdout
        docker("tag", MULTI_BASE, name)
    yield name
    docker("image", "rm", name, check=False)


@pytest.fixture(scope="module")
def numpy_profile(tiny_torch, tmp_path_factory) -> Path:
    """The release profile "tiny": the stand-in torch and the real numpy wheels (one per machine)."""
    profile = tmp_path_factory.mktemp("platforms") / "tiny.toml"
    profile.write_text(f'{STAND_IN_PYTHON}[wheels]\ntorch = "{tiny_torch}"\nextra = ["{NUMPY}"]\n'
                       '[build]\nvariant = "release"\n')
    return profile


@pytest.fixture(scope="module")
def two_platform_image(multi_base, numpy_profile, run_id, tb_env, tmp_path_factory):
    """torchbake-test/platforms:RUN for both platforms, and the build's output. Its profile adds
    a companion wheel of this run's own after numpy: its stage runs in every run, on the engine's
    warm cache too (numpy's stage is then a cached step, and its log says nothing of where it ran)."""
    folder = tmp_path_factory.mktemp("two-platforms")
    marker = make_wheel(folder, "torchbake-platforms-marker", f"1.0+{run_id}", [], {"platforms_marker/__init__.py": ""})
    profile = folder / "tiny.toml"
    profile.write_text(numpy_profile.read_text().replace(f'"{NUMPY}"]', f'"{NUMPY}", "{marker}"]'))
    assert str(marker) in profile.read_text()
    args = ("build", "--config", str(profile), "--name", "torchbake-test/platforms", "--tag", run_id,
            "--base-img", multi_base, "--platform", "linux/amd64,aarch64")
    result = run_invoke(*args, env=tb_env)
    assert result.returncode == 0, result.stdout + result.stderr
    name = f"torchbake-test/platforms:{run_id}"
    yield name, result, args
    for tag in (name, f"{name}-amd64", f"{name}-arm64"):
        docker("image", "rm", "--force", tag, check=False)


def _in_container(image: str, platform: str, code: str) -> str:
    return docker("run", "--rm", "--network", "none", "--platform", platform, image, "python", "-c", code).stdout.strip()


def test_one_tag_runs_on_each_platform_with_that_platforms_numpy(two_platform_image):
    name, _, _ = two_platform_image
    code = ("import platform, numpy, torch; a = numpy.arange(4).reshape(2, 2);"
            " print(platform.machine(), torch.__version__, (a @ a).tolist())")
    assert _in_container(name, "linux/arm64", code) == "aarch64 2.13.0+tiny [[2, 3], [6, 11]]"
    assert _in_container(name, "linux/amd64", code) == "x86_64 2.13.0+tiny [[2, 3], [6, 11]]"


def test_each_platform_is_its_own_verified_image_with_its_own_wheels(two_platform_image):
    name, result, _ = two_platform_image
    for arch, machine in (("amd64", "x86_64"), ("arm64", "aarch64")):
        labels = json.loads(docker("image", "inspect", "--format", "{{json .Config.Labels}}", f"{name}-{arch}").stdout)
        wheels = json.loads(labels["torchbake.inputs"])
        assert [w for w in wheels if w.startswith("numpy-")] == [
            next(w for w in wheels if w.startswith("numpy-") and w.endswith(f"_{machine}.whl"))]
        assert f"Built {name}-{arch}" in result.stdout
    assert result.stdout.count("verify torchbake-test/platforms:torchbake-candidate-") == 2
    # the emulated one says it may be slow, and for how long it may run
    said = [line for line in result.stdout.splitlines() if line.startswith("Verifying ")]
    assert len(said) == 1 and "emulated by QEMU (linux/arm64)" in said[0] and "3600 s" in said[0], said
    # each verify table says where its checks ran: one natively, one under QEMU
    assert re.search(r"machine\s*│\s*pass\s*│\s*x86_64, checked natively", result.stdout), result.stdout[-3000:]
    assert re.search(r"machine\s*│\s*pass\s*│\s*aarch64, checked emulated", result.stdout), result.stdout[-3000:]
    assert f"Joined {name} (linux/amd64, linux/arm64)" in result.stdout


def test_the_arm64_wheels_are_unpacked_on_this_machine_not_emulated(two_platform_image):
    name, result, _ = two_platform_image
    log = Path(next(line.rsplit("(log: ", 1)[1].rstrip(")") for line in result.stdout.splitlines()
                    if line.startswith(f"Built {name}-arm64")))
    text = log.read_text()
    assert "staged 1 wheels for manylinux_2_28_aarch64 with uv on x86_64" in text  # the marker's stage (and numpy's, cold)
    assert "staged 1 wheels for manylinux_2_28_aarch64 with uv on aarch64" not in text


def test_nothing_changed_means_both_platforms_unchanged_and_the_same_tag_digest(two_platform_image, tb_env):
    name, _, args = two_platform_image
    before = docker("image", "inspect", "--format", "{{.Id}}", name).stdout.strip()
    again = run_invoke(*args, env=tb_env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("unchanged") >= 2, again.stdout
    assert "Built " not in again.stdout
    assert docker("image", "inspect", "--format", "{{.Id}}", name).stdout.strip() == before


@pytest.mark.parametrize("typed", ["linux/s390x", "windows/amd64", "linux/arm/v7"])
def test_a_platform_torchbake_does_not_build_is_refused_before_any_work(typed, tb_env):
    result = run_invoke("build", "--release", "--platform", typed, "--dry-run", env=tb_env)
    assert result.returncode == 2
    assert f"{typed!r} is not a platform torchbake builds; accepted: linux/amd64" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.fixture(scope="module")
def pushed_nightly(multi_base, numpy_profile, two_platform_image, run_id, tb_env, tmp_path_factory):
    """`invoke build-all --push` of a matrix for both platforms into a real local registry: (the
    registry host, the matrix file, the JSON report, the run's output). Its steps are those of
    two_platform_image's build: the engine's layer cache serves the emulated ones."""
    folder = tmp_path_factory.mktemp("pushed-nightly")
    with serve_registry(folder) as host:
        matrix = folder / "nightly.toml"
        matrix.write_text(f'[matrix]\nprofiles = ["{numpy_profile}"]\npythons = ["3.11"]\nvariants = ["release"]\n'
                          f'platforms = ["linux/arm64", "amd64"]\nregistry = "{host}/team"\n'
                          f'name = "{{registry}}torchbake-test/nightly-mp"\ntag = "{{variant}}-py{{py}}-{run_id}"\n'
                          f'[matrix.options.release]\n"image.base" = "{multi_base}"\n')
        key = ed25519.Ed25519PrivateKey.generate()  # the night's pushes signed with it
        (folder / "signing.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                                serialization.NoEncryption()))
        (folder / "signing.pub").write_bytes(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        result = run_invoke("build-all", "--config", str(matrix), "--push", "--report", str(folder / "first.json"),
                            "--sign-key", str(folder / "signing.pem"), env=tb_env)
        assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
        yield host, matrix, json.loads((folder / "first.json").read_text()), result
    for ref in listing("images", "--format", "{{.Repository}}:{{.Tag}}").split():
        if "torchbake-test/nightly-mp" in ref and run_id in ref:
            docker("image", "rm", "--force", ref, check=False)


def _skopeo(*reference: str) -> str:
    return subprocess.run(["skopeo", "--override-os", "linux", "inspect", "--raw", "--tls-verify=false", *reference],
                          check=True, capture_output=True, text=True).stdout


def test_build_all_pushes_one_index_for_both_platforms_each_with_its_own_attestations(pushed_nightly, run_id, tmp_path,
                                                                                     tb_env):
    host, matrix, report, result = pushed_nightly
    cells = {cell["id"]: cell for cell in report["cells"]}
    assert list(cells) == ["tiny-release-py311-amd64", "tiny-release-py311-arm64", "tiny-release-py311"]
    assert {cells[c]["status"] for c in list(cells)[:2]} <= {"built", "unchanged", "retagged"}
    assert cells["tiny-release-py311"]["status"] == "joined"
    repo = f"{host}/team/torchbake-test/nightly-mp"
    tag = f"{repo}:release-py311-{run_id}"
    raw = _skopeo(f"docker://{tag}")
    index = json.loads(raw)
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    assert [(m["platform"]["architecture"], m["digest"]) for m in index["manifests"]] == [
        ("amd64", cells["tiny-release-py311-amd64"]["digest"]), ("arm64", cells["tiny-release-py311-arm64"]["digest"])]
    digest = "sha256:" + hashlib.sha256(raw.encode()).hexdigest()
    # the registry's index is the very index this engine joined: one tag digest wherever it is joined
    assert cells["tiny-release-py311"]["digest"] == digest == cells["tiny-release-py311"]["image_id"]
    assert docker("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip() == digest
    for arch, machine, other in (("amd64", "x86_64", "aarch64"), ("arm64", "aarch64", "x86_64")):
        manifest = cells[f"tiny-release-py311-{arch}"]["digest"]
        referrers = json.loads(_skopeo(f"docker://{repo}:{manifest.replace(':', '-')}"))  # the referrers tag schema
        assert sorted(m["artifactType"] for m in referrers["manifests"]) == [
            *["application/spdx+json"] * 2, "application/vnd.cyclonedx+json",
            *["application/vnd.dev.sigstore.bundle.v0.3+json"] * 5,
            "application/vnd.in-toto+json"]
        provenance = next(m for m in referrers["manifests"] if m["artifactType"] == "application/vnd.in-toto+json")
        artifact = json.loads(_skopeo(f"docker://{repo}@{provenance['digest']}"))
        assert artifact["subject"]["digest"] == manifest
        copied = tmp_path / arch
        subprocess.run(["skopeo", "copy", "--quiet", "--src-tls-verify=false", f"docker://{repo}@{provenance['digest']}",
                        f"dir:{copied}"], check=True)
        statement = (copied / artifact["layers"][0]["digest"].split(":")[1]).read_text()
        numpy_wheels = set(re.findall(r"numpy-[^\"/]+\.whl", statement))  # its own numpy wheel, no other
        assert numpy_wheels and all(wheel.endswith(f"_{machine}.whl") for wheel in numpy_wheels), numpy_wheels
        assert other not in " ".join(numpy_wheels)
    assert "tiny-release-py311-arm64" in result.stdout.split("build-all")[-1]  # the summary table
    # the index and each platform's manifest and attestations, signed: proven with the public key alone
    checked = run_invoke("verify", tag, "--signatures", "--key", str(matrix.parent / "signing.pub"), env=tb_env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # one row for the index's own signature; for each platform's, five signatures (its manifest,
    # SPDX 2.3 and 3, CycloneDX, provenance) and the four documents they cover
    assert checked.stdout.count("ok: signed by") == 11 and "FAILED" not in checked.stdout, checked.stdout
    assert checked.stdout.count("ok: covered by a signature of the key") == 8, checked.stdout
    assert re.findall(r"^│ (index|linux/amd64|linux/arm64) ", checked.stdout, re.M) == [
        "index", *["linux/amd64"] * 9, *["linux/arm64"] * 9], checked.stdout


def test_a_second_night_finds_every_platform_unchanged_and_the_same_tag(pushed_nightly, tb_env, tmp_path):
    _, matrix, first, _ = pushed_nightly
    again = run_invoke("build-all", "--config", str(matrix), "--push", "--report", str(tmp_path / "again.json"),
                       env=tb_env)
    assert again.returncode == 0, (again.stdout + again.stderr)[-5000:]
    cells = {cell["id"]: cell for cell in json.loads((tmp_path / "again.json").read_text())["cells"]}
    assert cells["tiny-release-py311-amd64"]["status"] == cells["tiny-release-py311-arm64"]["status"] == "unchanged"
    joined = cells["tiny-release-py311"]
    assert (joined["status"], joined["digest"]) == ("joined", first["cells"][-1]["digest"])
    assert joined["reason"].endswith("in the registry (unchanged)")


def test_native_runners_push_their_platform_and_a_last_job_joins_without_building(pushed_nightly, tb_env, tmp_path):
    host, matrix, first, _ = pushed_nightly
    emitted = json.loads(run_invoke("build-all", "--config", str(matrix), "--emit-matrix", "github", env=tb_env).stdout)
    assert [(e["platform"], e["runs-on"], e["cells"]) for e in emitted["include"]] == [
        ("linux/amd64", "ubuntu-24.04", "tiny-release-py311-amd64"),
        ("linux/arm64", "ubuntu-24.04-arm", "tiny-release-py311-arm64")]
    arm_only = run_invoke("build-all", "--config", str(matrix), "--platform", "aarch64", "--report",
                          str(tmp_path / "arm.json"), env=tb_env)
    assert arm_only.returncode == 0, arm_only.stdout + arm_only.stderr
    assert [c["id"] for c in json.loads((tmp_path / "arm.json").read_text())["cells"]] == ["tiny-release-py311-arm64"]
    joined = run_invoke("build-all", "--config", str(matrix), "--join-only", "--report", str(tmp_path / "join.json"),
                        env=tb_env)
    assert joined.returncode == 0, joined.stdout + joined.stderr
    (only,) = json.loads((tmp_path / "join.json").read_text())["cells"]
    assert (only["id"], only["status"], only["digest"]) == ("tiny-release-py311", "joined", first["cells"][-1]["digest"])
    assert "Building" not in joined.stdout and "Joining" not in joined.stdout  # no build, no engine join
    # a join of platforms nobody pushed: the registry answered, so no "retry" (exit 10): the cell failed, saying why
    never = matrix.with_name("never.toml")
    never.write_text(re.sub(r'^tag = "', 'tag = "never-', matrix.read_text(), flags=re.M))
    nothing = run_invoke("build-all", "--config", str(never), "--join-only", "--report", str(tmp_path / "never.json"),
                         env=tb_env)
    assert nothing.returncode == 1, nothing.stdout + nothing.stderr
    (cell,) = json.loads((tmp_path / "never.json").read_text())["cells"]
    assert cell["status"] == "failed" and "is not in the registry" in cell["error"] and cell["exit_code"] == 2, cell


def test_run_container_runs_the_platform_asked_for_and_names_one_the_image_lacks(two_platform_image, tb_env):
    name, _, _ = two_platform_image
    code = "python -c 'import platform; print(platform.machine())'"
    ran = run_invoke("run-container", name, "--platform", "aarch64", "--rm", "--command", code, env=tb_env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.strip() == "aarch64"
    assert "--platform linux/arm64" in ran.stderr and "runs emulated (QEMU)" in ran.stderr
    host = run_invoke("run-container", name, "--rm", "--command", code, env=tb_env)
    assert host.stdout.strip() == "x86_64", host.stdout + host.stderr  # default: this host's platform
    lacking = run_invoke("run-container", f"{name}-amd64", "--platform", "arm64", "--rm", "--command", code, env=tb_env)
    assert lacking.returncode == 8, lacking.stdout + lacking.stderr
    assert f"{name}-amd64 holds no linux/arm64 image. Build one with `invoke build --platform linux/arm64`" in lacking.stderr


def test_an_arm64_lock_made_on_this_amd64_engine_holds_arm64s_debian_versions_asked_emulated(
        multi_base, numpy_profile, run_id, tb_env, tmp_path):
    """`invoke lock --platform linux/arm64` asks apt in the arm64 FROM image, under QEMU, what a
    build installs above it. (A locked version the mirror lacks stops a build before anything is
    prepared, naming it, exit 3: test_locks' natively; its apt asked in the FROM image of the
    image's platform: tests/unit/test_locks.py.)"""
    base = f"torchbake-test/lockbase:arm64-{run_id}"  # the multi base's arm64 image without procps
    container = f"torchbake-test-lockbase-{run_id}"
    docker("run", "--name", container, "--platform", "linux/arm64", "--network", "none", multi_base,
           "dpkg", "--purge", "--force-depends", "procps")
    docker("commit", container, base)
    docker("rm", container)
    args = ("--config", str(numpy_profile), "--name", "torchbake-test/locked-arm64", "--tag", run_id,
            "--platform", "linux/arm64", "--base-img", base)
    try:
        locked = run_invoke("lock", *args, cwd=tmp_path, env=tb_env)
        assert locked.returncode == 0, locked.stdout + locked.stderr
        assert f"asking apt in {base} for linux/arm64, emulated" in locked.stdout
        lock = next((tmp_path / "locks").glob("pylock.*-linux-arm64.toml"))
        procps = tomllib.loads(lock.read_text())["tool"]["torchbake"]["debs"]["procps"]
        arm64 = docker("run", "--rm", "--platform", "linux/arm64", "--network", "none", "--entrypoint", "dpkg-query",
                       multi_base, "-W", "-f", "${Version}", "procps").stdout  # what the mirror gave the base
        assert procps == arm64 and f"+procps {procps}" in locked.stdout
    finally:
        docker("image", "rm", "--force", base, check=False)


@pytest.fixture(scope="module")
def amd64_only_bases(base_image, run_id):
    """Two bases this engine holds for linux/amd64 only: the session's base itself (one
    architecture, labelled as torchbake's bootstrap labels its images) under a name of this run's,
    and its files imported without those labels."""
    ours, theirs = f"torchbake-test/amd64-ours:{run_id}", f"torchbake-test/amd64-theirs:{run_id}"
    docker("tag", base_image, ours)
    container = docker("create", "--platform", "linux/amd64", base_image, "true").stdout.strip()
    try:
        subprocess.run(f"docker export {container} | docker import - {theirs}", shell=True, check=True,
                       capture_output=True)
    finally:
        docker("rm", "--force", container, check=False)
    yield ours, theirs
    docker("image", "rm", ours, theirs, check=False)


def test_no_platform_is_built_from_another_platforms_base(amd64_only_bases, numpy_profile, tb_env):
    """An arm64 image FROM a base the engine holds for amd64 only would run its steps on the amd64
    root file system: a base torchbake made is made again for both (the plan says so), any other
    is refused before any work, naming the platform and the command that makes it."""
    ours, theirs = amd64_only_bases
    planned = run_invoke("build", "--config", str(numpy_profile), "--base-img", ours, "--dry-run",
                         "--platform", "linux/amd64,linux/arm64", env=tb_env)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert (f"Base image: {ours} is on this engine for linux/amd64 only; it will be made again with debootstrap for"
            " linux/amd64, linux/arm64") in planned.stdout
    for dry_run in (("--dry-run",), ()):
        refused = run_invoke("build", "--config", str(numpy_profile), "--base-img", theirs, *dry_run,
                             "--platform", "linux/arm64", env=tb_env)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert (f"Base image {theirs!r} (--base-img) is on this engine for linux/amd64 only, not for linux/arm64;"
                f" no image is built FROM another platform's. Pull that platform's image (`docker pull --platform"
                f" linux/arm64 {theirs}`)") in refused.stderr
        assert "Preparing the build context" not in refused.stdout and "Traceback" not in refused.stderr


def test_an_arm64_bootstrap_stopped_in_its_second_stage_leaves_no_mount_no_folder_no_image(cache_dir, tb_env, run_id):
    """Ctrl-C (SIGINT to the terminal's process group) once debootstrap's second stage, emulated,
    has mounted /proc in the arm64 root file system: exit 130, nothing mounted below the cache
    folder, no temporary root file system, no image. (The packages the multi-platform base
    downloaded are this session's cache: only the extraction runs again.)"""
    import os
    import signal
    import time

    from tests.conftest import INVOKE, ROOT

    name = f"torchbake-test/stopped:{run_id}"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TORCHBAKE_")}
    process = subprocess.Popen([*INVOKE, "--search-root", str(ROOT), "bootstrap-os", "--suite", "bookworm",
                                "--platform", "linux/arm64", "--name", name], cwd=ROOT, start_new_session=True,
                               env={**clean, **tb_env, "PYTHONUNBUFFERED": "1"}, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=as_in_a_terminal)
    seen, mounted = [], []
    try:
        started = time.monotonic()
        for line in process.stdout:
            seen.append(line)
            if "I: Installing core packages" in line:  # debootstrap mounts /proc just before it says so
                mounted = [m for m in Path("/proc/self/mounts").read_text().splitlines() if str(cache_dir) in m]
                break
            assert time.monotonic() - started < 600, "".join(seen[-20:])
        assert any(m.split()[1].endswith("/rootfs-arm64/proc") for m in mounted), ("".join(seen[-20:]), mounted)
        os.killpg(process.pid, signal.SIGINT)
        rest, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:  # failed: what torchbake started runs in a session of its own, and goes too
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            subprocess.run(["pkill", "-KILL", "-f", str(cache_dir / "bootstrap")], check=False)
    output = "".join(seen) + rest
    assert process.returncode == 130, output[-3000:]
    assert "Traceback" not in output, output[-3000:]  # the interruption is a message, not a trace
    assert str(cache_dir) not in Path("/proc/self/mounts").read_text()
    assert not list((cache_dir / "bootstrap").glob("bootstrap-*"))
    assert docker("image", "inspect", name, check=False).returncode != 0


def test_an_emulated_probe_sees_the_cpu_files_its_platform_has_and_dumps_no_core(two_platform_image):
    """What verify's probe container of the arm64 image (emulated here) reads of its CPU: the
    MIDR_EL1 file an x86 kernel lacks (PyTorch's oneDNN crashed without it on `import torch`, and
    QEMU's core dump of the crash hung for minutes), and a core-file limit of 0."""
    from torchbake.adapters.engine import DockerClient

    name, _, _ = two_platform_image
    client = DockerClient(binary="/usr/bin/docker", version="", build_mode="none", environ=dict(os.environ))
    code = ("import os, resource; print(open('/sys/devices/system/cpu/cpu0/regs/identification/midr_el1').read().strip(),"
            " open('/sys/devices/system/cpu/online').read().strip(), resource.getrlimit(resource.RLIMIT_CORE))")
    result = client.run_capture(f"{name}-arm64", ["-c", code], entrypoint="python")
    assert result.returncode == 0 and result.output.strip() == f"0x00000000413fd0c1 0-{os.cpu_count() - 1} (0, 0)", \
        result.output
    native = client.run_capture(f"{name}-amd64", ["-c", "import os; print(os.path.exists("
                                                         "'/sys/devices/system/cpu/cpu0/regs'))"], entrypoint="python")
    assert native.output.strip() == "False"  # the host's own platform: its real /sys
