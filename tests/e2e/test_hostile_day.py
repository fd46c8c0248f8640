"""What a hostile day does to a build (issue 38), on the real engine: damaged files in the cache
and log folders (a byte that is not UTF-8, JSON that is not an object) are repaired or skipped,
never a traceback; two builds started together keep a log and a manifest each; an image nowhere,
or with nothing to list, is exit 2 named; an index that does not answer is said; a matrix refused
before any work still writes its reports."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

from tests.conftest import run_invoke
from torchbake.inputs import downloads

from .conftest import TINY_PROFILE
from .helpers import STAND_IN_PYTHON, docker

DAMAGE = b"\xff\xfe not utf-8 \x80"


def test_damaged_records_in_the_cache_and_log_folders_are_repaired_not_a_traceback(
        base_image, tiny_torch, tmp_path, run_id):
    env = {"TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path / "cache"), "TORCHBAKE_PATHS_LOG_DIR": str(tmp_path / "logs")}
    image = f"torchbake-test/damaged-{run_id}:1"
    # The wheel's own copy, hashed only once it is older than downloads.RACY_NS: the shared one's
    # ctime moves whenever another worker's build links it, and a racily new file's digest is
    # (rightly) not recorded, so the digests record this test damages would be missing.
    wheel = tmp_path / "wheel" / tiny_torch.name
    wheel.parent.mkdir()
    shutil.copyfile(tiny_torch, wheel)
    profile = tmp_path / "tiny.toml"
    profile.write_text(TINY_PROFILE.format(wheel=wheel))
    time.sleep(max(0.0, (wheel.stat().st_ctime_ns + downloads.RACY_NS) / 1e9 + 0.2 - time.time()))
    common = ["--config", str(profile), "--name", image.split(":")[0], "--tag", "1", "--base-img", base_image]
    try:
        first = run_invoke("build", *common, "--no-verify", env=env)
        assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
        damaged = [p for folder in ("digests", "os-release", "base-debs") for p in (tmp_path / "cache" / folder).rglob("*")
                   if p.is_file() and not p.name.endswith(".lock")]
        assert {p.parent.name for p in damaged} >= {"digests", "os-release", "base-debs"}, damaged  # each kind was written
        for path in damaged:
            path.write_bytes(DAMAGE)
        for path in (tmp_path / "cache").glob("*.json"):  # the built-images and first-built records
            path.write_bytes(DAMAGE)
        (tmp_path / "logs" / "someone-else-20260101-000000.manifest.json").write_text("[1, 2]\n")  # JSON, no object

        again = run_invoke("build", *common, "--force", "--no-verify", env=env)
        assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
        assert "Traceback" not in again.stderr
        assert "os-release" in again.stdout and "is damaged" in again.stdout, again.stdout[-3000:]
        assert "Debian packages again" in again.stdout, again.stdout[-3000:]
        for path in damaged:  # each record written anew, readable
            assert path.read_bytes() != DAMAGE, path
        for task in (["gc", "--dry-run"], ["show-build", image]):
            shown = run_invoke(*task, env=env)
            assert shown.returncode == 0, shown.stdout + shown.stderr
            assert "Traceback" not in shown.stderr
    finally:
        docker("image", "rm", "--force", image, check=False)


def test_two_builds_of_one_image_started_together_keep_a_log_and_a_manifest_each(
        base_image, tiny_profile, tb_env, tmp_path, run_id):
    logs = tmp_path / "logs"
    env = {**tb_env, "TORCHBAKE_PATHS_LOG_DIR": str(logs)}
    image = f"torchbake-test/together-{run_id}:1"
    common = ["build", "--config", str(tiny_profile), "--name", image.split(":")[0], "--tag", "1",
              "--base-img", base_image, "--force", "--no-verify"]
    results = [None, None]

    def build(index: int) -> None:
        results[index] = run_invoke(*common, env=env)

    try:
        threads = [threading.Thread(target=build, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for result in results:
            assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
        manifests = sorted(logs.glob("*.manifest.json"))
        build_logs = sorted(logs.glob("*.log"))
        assert len(manifests) == 2 and len(build_logs) == 2, [p.name for p in logs.iterdir()]
        for manifest in manifests:
            document = json.loads(manifest.read_text())
            assert document["status"] == "built", document
            log = Path(document["log_file"]) if "log_file" in document else manifest.with_name(
                manifest.name.removesuffix(".manifest.json") + ".log")
            assert log.is_file() and log.read_text().count("Building ") <= 1
    finally:
        docker("image", "rm", "--force", image, check=False)


def test_the_documents_of_an_image_nowhere_are_exit_2_naming_the_registry_asked(registry, tb_env):
    """An image neither on the engine nor in its registry (which answered): exit 2 as for any image
    that does not exist, never the registry's 10 with a bare "HTTP 404"."""
    for task in ("sbom", "provenance"):
        result = run_invoke(task, f"{registry}/nothing/here:1", env=tb_env)
        assert result.returncode == 2, (result.returncode, result.stdout + result.stderr)
        assert (f"Image '{registry}/nothing/here:1' does not exist on this engine, nor in registry {registry}"
                in result.stderr), result.stderr


def test_an_index_pip_cannot_reach_is_said_plainly_and_with_require_index_fails(
        base_image, tiny_torch, tb_env, tmp_path, run_id):
    """The index is down (nothing listens): pip resolves the companion from the local folder it
    can reach. The build says so (the wheels may be older than the index's); --require-index makes
    it an error (exit 3) before anything is built."""
    import socket

    from .helpers import make_wheel

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_wheel(wheels, f"torchbake-index-{run_id}", "1.0", [], {"index_probe/__init__.py": ""})
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/simple"
    profile = tmp_path / "index.toml"
    profile.write_text(f'{STAND_IN_PYTHON}[wheels]\ntorch = "{tiny_torch}"\n'
                       f'extra = ["torchbake-index-{run_id}"]\nfind_links = ["{wheels}"]\nextra_index_urls = ["{dead}"]\n'
                       '[build]\nvariant = "release"\n')
    image = f"torchbake-test/index-{run_id}:1"
    env = {**tb_env, "PIP_RETRIES": "0"}
    common = ["build", "--config", str(profile), "--name", image.split(":")[0], "--tag", "1", "--base-img", base_image]
    try:
        strict = run_invoke(*common, "--require-index", "--no-verify", env=env)
        assert strict.returncode == 3, (strict.returncode, (strict.stdout + strict.stderr)[-6000:-3000])
        assert "pip could not reach a package index it was told to use" in strict.stderr, strict.stderr
        assert "--require-index ([wheels] require_index) makes that an error" in strict.stderr
        assert "docker build" not in strict.stdout and docker("image", "inspect", image, check=False).returncode
        lenient = run_invoke(*common, "--no-verify", env=env)
        assert lenient.returncode == 0, (lenient.stdout + lenient.stderr)[-3000:]
        assert "warning: pip could not reach a package index it was told to use" in lenient.stdout, lenient.stdout[-3000:]
    finally:
        docker("image", "rm", "--force", image, check=False)


def test_a_matrix_refused_before_any_work_still_writes_both_reports(tb_env, tmp_path):
    """The nightly's cells lack their vendor URLs: exit 2, and --report / --junit say which cells
    were refused and why, the others not run (a nightly's CI shows why, whatever the outcome)."""
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    result = run_invoke("build-all", "--config", "configs/nightly.toml", "--report", str(report), "--junit", str(junit),
                        env=tb_env)
    assert result.returncode == 2, result.stdout + result.stderr
    cells = {c["id"]: c for c in json.loads(report.read_text())["cells"]}
    assert cells["musa-release-py310"]["status"] == "refused" and cells["musa-release-py310"]["exit_code"] == 2
    assert "wheels.torch" in cells["musa-release-py310"]["reason"]
    assert cells["musa-base-py310"]["status"] == "not run"
    text = junit.read_text()
    assert 'name="musa-release-py310"' in text and "<failure" in text and "needs values that are not set" in text


def test_the_packages_of_an_image_with_neither_python_nor_dpkg_are_a_clear_exit_2(tb_env, tmp_path, run_id):
    """sbom and diff of an image made from one file: no runc "executable file not found", exit 2."""
    import tarfile

    (tmp_path / "hello").write_text("hi\n")
    with tarfile.open(tmp_path / "one.tar", "w") as archive:
        archive.add(tmp_path / "hello", arcname="hello")
    image = f"torchbake-test/one-file-{run_id}:1"
    docker("import", str(tmp_path / "one.tar"), image)
    try:
        for task in (["sbom", image], ["diff", image, image]):
            result = run_invoke(*task, env=tb_env)
            assert result.returncode == 2, (result.returncode, result.stdout + result.stderr)
            assert f"{image} has neither `python` on its PATH nor Debian's package database" in result.stderr
            assert "executable file not found" not in result.stdout + result.stderr
    finally:
        docker("image", "rm", "--force", image, check=False)


def test_the_context_of_a_killed_build_is_found_by_gc_and_a_live_ones_is_not(base_image, tiny_profile, tmp_path,
                                                                          run_id):
    """SIGKILL during a build leaves its temporary context (no finally runs): gc --dry-run lists
    it at once (its lock has no holder), gc removes it; a build still running keeps its own."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import ROOT

    cache = tmp_path / "cache"
    env = {**os.environ, "TORCHBAKE_PATHS_CACHE_DIR": str(cache), "TORCHBAKE_PATHS_LOG_DIR": str(tmp_path / "logs")}
    env = {k: v for k, v in env.items() if not k.startswith("TORCHBAKE_") or k.startswith("TORCHBAKE_PATHS_")}
    image = f"torchbake-test/killed-{run_id}:1"
    # The build is held in its build step, its context prepared, until it is killed: a docker client
    # that passes every call to the engine's but waits at `build` (a cached build of the tiny
    # profile would otherwise finish, and clean up, before the kill).
    held = tmp_path / "held"
    client = tmp_path / "docker"
    client.write_text(f'#!/bin/sh\ncase " $* " in *" build "*) touch {held}; exec sleep 600;; esac\n'
                      f'exec {shutil.which("docker")} "$@"\n')
    client.chmod(0o755)
    out = (tmp_path / "build.out").open("w")
    build = subprocess.Popen([sys.executable, "-m", "invoke", "--search-root", str(ROOT), "build", "--config",
                              str(tiny_profile), "--name", image.split(":")[0], "--tag", "1", "--base-img", base_image,
                              "--force", "--no-verify", "--docker", str(client)], env=env, stdout=out,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        contexts = cache / "contexts"
        while time.monotonic() < deadline and not held.exists():
            assert build.poll() is None, (tmp_path / "build.out").read_text()
            time.sleep(0.05)
        assert held.exists(), "the build never reached its build step: " + (tmp_path / "build.out").read_text()
        assert list(contexts.glob("context-*/*/Dockerfile")), "the build's context is not where gc looks"
        live = run_invoke("gc", "--dry-run", env={k: v for k, v in env.items() if k.startswith("TORCHBAKE_")})
        assert live.returncode == 0 and "a build that was killed" not in live.stdout, live.stdout
        os.killpg(build.pid, signal.SIGKILL)
        build.wait(timeout=60)
        left = [p for p in contexts.iterdir() if p.is_dir()]
        assert len(left) == 1, left
        tb = {k: v for k, v in env.items() if k.startswith("TORCHBAKE_")}
        listed = run_invoke("gc", "--dry-run", env=tb)
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert f"would remove context {left[0]}" in listed.stdout, listed.stdout
        assert "the temporary context of a build that was killed" in listed.stdout
        removed = run_invoke("gc", env=tb)
        assert removed.returncode == 0, removed.stdout + removed.stderr
        assert not left[0].exists() and not (contexts / f"{left[0].name}.lock").exists()
    finally:
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGKILL)
            build.wait(timeout=60)
        out.close()
        docker("image", "rm", "--force", image, check=False)
