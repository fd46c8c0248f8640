"""The dev images' compile cache on the fixture sources with the stand-in torch (conftest's
lite_dev_config, PyTorch's source the one of TEST_UNITS translation units): a build's ccache statistics
are its own beside another build, and after one changed file only that file is compiled, every
other object from the shared store over TLS (sccache; S3 and WebDAV servers from the package
registries, on loopback, with a CA of the test's own). (In a module of its own: beside test_dev on
another worker, not after it on the same one.)"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import run_invoke
from tests.support import tls_store

from .fixture_repos import TEST_UNITS, write_large_pytorch
from .helpers import docker, recorded_compiles


@pytest.fixture(scope="module")
def large_config(lite_dev_config, tmp_path_factory):
    """lite_dev_config with PyTorch's source of TEST_UNITS translation units (fixture_repos:
    pytorch-large), and its git credentials."""
    config, credentials = lite_dev_config
    large = tmp_path_factory.mktemp("large") / "fixture-large.toml"
    large.write_text(config.read_text().replace("/pytorch.git", "/pytorch-large.git"))
    assert large.read_text() != config.read_text()
    return large, credentials


def build_base(config: Path, tag: str, base_image: str, tb_env: dict) -> str:
    name = f"torchbake-test/dev-lite-base:{tag}"
    result = run_invoke("build-base", "--config", str(config), "--name", name.split(":")[0], "--tag", tag,
                        "--sys", base_image, "--python", "3.11", env=tb_env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    return name


@pytest.fixture(scope="module")
def lite_dev_base(run_id, base_image, tb_env, large_config):
    """The base of the fixture sources (PyTorch's the large one) on the stand-in torch."""
    name = build_base(large_config[0], run_id, base_image, tb_env)
    yield name, None
    docker("image", "rm", "--force", name, check=False)


RACE_SOURCE = {
    "setup.py": 'from setuptools import setup, Extension\n'
                'setup(name="zerorace", version="1", ext_modules=[Extension("zerorace", ["zerorace.c"])])\n',
    "zerorace.c": '#include <Python.h>\nstatic struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "zerorace"};\n'
                  'PyMODINIT_FUNC PyInit_zerorace(void) { return PyModule_Create(&m); }\n',
}


def test_a_builds_ccache_statistics_are_its_own_while_another_build_zeroes_the_shared_counters(lite_dev_base, tmp_path):
    """Builds side by side share the cache mount and so ccache's counters: the statistics a compile
    step prints are its own compiles' (a stats log), whatever another build does to the counters.
    (Seen in CI: a rebuild whose hits were wiped by another build's --zero-stats.)"""
    source = tmp_path / "src"
    source.mkdir()
    for name, text in RACE_SOURCE.items():
        (source / name).write_text(text)
    common = Path(__file__).resolve().parents[2] / "docker" / "common"
    script = ("set -e; cp -r /src /tmp/src; export CCACHE_DIR=/tmp/ccache;"
              " bash /opt/torchbake/common/build_source.sh first /tmp/src; rm -rf /tmp/src/build;"
              " (while :; do ccache --zero-stats >/dev/null; sleep 0.02; done) &"
              " bash /opt/torchbake/common/build_source.sh second /tmp/src")
    result = docker("run", "--rm", "--network", "none", "-v", f"{common}:/opt/torchbake/common:ro",
                    "-v", f"{source}:/src:ro", lite_dev_base[0], "bash", "-c", script, check=False)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    section = result.stdout[result.stdout.index("ccache statistics for second"):]
    hits = re.search(r"Hits:\s+(\d+)", section)
    assert hits and int(hits.group(1)) == 1, section


def dev_build(config: Path, credentials: Path, store_config: Path, tmp_path: Path, tag: str, base: str, *more: str,
              env: dict, jobs: int = 0):
    """A dev build of ``base`` with the store of ``store_config``; ``jobs`` ([dev] max_jobs) makes its
    steps run again where the same base was built before (never --no-cache: it empties the engine's
    cache mount, test_dev's too). (The result, its seconds.)"""
    started = time.monotonic()
    extra = tmp_path / f"jobs{jobs}.toml"
    extra.write_text(f"[dev]\nmax_jobs = {jobs}\n" if jobs else "")
    result = run_invoke("build", "--config", str(config), "--config", str(store_config), "--config", str(extra),
                        "--name", "torchbake-test/dev", "--tag", tag, "--base-img", base,
                        "-c", str(credentials), "--no-verify", *more, env=env)
    return result, time.monotonic() - started


def store_config(path: Path, store) -> Path:
    """[dev] compile_cache = the store, [downloads] ca_bundle = its CA (None: the CA not given)."""
    ca = f'[downloads]\nca_bundle = "{store.ca}"\n' if store.ca else ""
    path.write_text(f'[dev]\ncompile_cache = "{store.url}"\n{ca}')
    return path


def assert_secret_nowhere(secret: str, image: str, results) -> None:
    """The store's password (or the CA's key) in no output, log, manifest, label or step."""
    shown = docker("image", "inspect", image).stdout + docker("history", "--no-trunc", image).stdout
    assert secret not in shown
    for result in results:
        manifest = re.search(r"manifest: (\S+)\)", result.stdout).group(1)
        for text in (result.stdout + result.stderr, Path(manifest).read_text(),
                     Path(manifest.replace(".manifest.json", ".log")).read_text()):
            assert secret not in text


def test_a_changed_file_alone_is_compiled_through_an_s3_store_over_tls_and_a_store_down_is_said_or_refused(
        lite_dev_base, tb_env, large_config, run_id, tmp_path, repos, base_image):
    """[dev] compile_cache on a real S3-compatible store over TLS (moto's server on loopback, its
    certificate signed by a CA of the test's own, given as [downloads] ca_bundle), through sccache:
    the dev image built cold compiles PyTorch's TEST_UNITS translation units (and the extension) into
    the bucket. One source file changes (its tag moved, a new base: every step runs again). sccache
    keeps no object beside its store, so the build compiles that one file and every other object is
    a hit in the store, counted by the build's own record. (A fresh engine, its own data root and
    empty cache mounts, filled from a store: benchmarks/compile_cache.py's smoke run, the Redis
    store through ccache, whose objects a cache mount would keep; test_benchmarks.) A store that
    dies in the middle of a build: the build succeeds without it and says so. The secret key and the
    CA's key are in no output, log, manifest, label or step."""
    config, credentials = large_config
    password = "store-" + uuid.uuid4().hex
    image = f"torchbake-test/dev:{run_id}-remote"
    with tls_store("s3", tmp_path / "s3", password) as store:
        remote = store_config(tmp_path / "remote.toml", store)
        ca_key = (tmp_path / "s3" / "ca" / "ca.key").read_text().splitlines()[1]

        def build(base: str, *more: str, env: dict = tb_env, jobs: int = 0):
            return dev_build(config, credentials, remote, tmp_path, f"{run_id}-remote", base, *more, env=env, jobs=jobs)

        try:
            on_a, cold = build(lite_dev_base[0])
            assert on_a.returncode == 0, (on_a.stdout + on_a.stderr)[-5000:]
            assert store.files() > TEST_UNITS
            assert "torchbake: sccache 0.16.0 compiles through the store (an S3-compatible bucket, torchbake-cc)" in on_a.stdout
            # the build says, and records, what each compile step compiled: every unit of PyTorch's
            # source and the extension's (the fixture's audio has no C), each step with the store
            compiled_a = recorded_compiles(on_a.stdout)
            assert compiled_a["pytorch"]["compiled"] == TEST_UNITS + 1, compiled_a  # and the module's own file
            assert compiled_a["extension"]["compiled"] >= 1, compiled_a
            assert all(c["remote"] and not c["store_errors"] for c in compiled_a.values()), compiled_a
            assert re.search(rf"^Compiled: pytorch: {TEST_UNITS + 1} compiled, \d+ s", on_a.stdout, re.M), on_a.stdout[-3000:]
            # and its progress counted the same objects as they were compiled (the compiler's calls)
            assert recorded_compiles(on_a.stdout, "compile_progress")["pytorch"]["objects"] == TEST_UNITS + 1
            # no further extension (lite_dev_config): no step for them (on Docker 26 it would read the whole
            # tree below it first, its clones' credentials being a secret: tests/unit/test_render.py)
            log = Path(re.search(r"manifest: (\S+)\)", on_a.stdout).group(1).replace(".manifest.json", ".log")).read_text()
            assert "build_source.sh pytorch" in log and "build_extras.sh" not in log

            write_large_pytorch(repos["root"] / "work", repos["root"] / "srv", changed=7, units=TEST_UNITS)  # one file, the tag moved
            changed_base = build_base(config, f"{run_id}-changed", base_image, tb_env)
            try:
                on_b, changed = build(changed_base)
            finally:
                docker("image", "rm", "--force", changed_base, check=False)
            output = on_b.stdout + on_b.stderr
            assert on_b.returncode == 0, output[-5000:]
            # the changed file alone compiled: every other object the cold build compiled came from the store
            compiled_b = recorded_compiles(on_b.stdout)
            expected = {role: (0, c["compiled"]) for role, c in compiled_a.items()}
            expected["pytorch"] = (1, TEST_UNITS)
            assert {role: (c["compiled"], c["remote_hits"]) for role, c in compiled_b.items()} == expected, (
                compiled_a, compiled_b)
            print(f"dev build of {TEST_UNITS + 1} units: cold {cold:.0f} s; after one changed file, with the store:"
                  f" {changed:.0f} s")

            # the store dies in the middle of a build: its first object reached it, then nothing listens;
            # the cold build's steps run again (another MAX_JOBS)
            stopped = store.stop_once_reached()
            down, _ = build(lite_dev_base[0], jobs=4)
            assert stopped.is_set(), "the build never reached the store"
            assert down.returncode == 0, (down.stdout + down.stderr)[-4000:]
            compiled_down = recorded_compiles(down.stdout)
            assert sum(c["store_errors"] for c in compiled_down.values()) >= 1, compiled_down
            flat = " ".join(down.stdout.split())
            assert "Warning: the compile cache's store ([dev] compile_cache) could not be reached from the" in flat
            assert "without the store (unreachable)" in flat
            # (a store that cannot be used with --require-compile-cache: exit 3, the tag where it was:
            # the WebDAV store's untrusted certificate, the next test; the same error for every kind of store)
            for secret in (password, ca_key):
                assert_secret_nowhere(secret, image, (on_a, on_b, down))
        finally:
            docker("image", "rm", "--force", image, check=False)


def test_a_webdav_store_over_tls_fills_and_an_untrusted_certificate_is_refused(
        lite_dev_base, tb_env, large_config, run_id, tmp_path):
    """The second kind of store: WebDAV over TLS (WsgiDAV on loopback, a user and a password, its
    CA the test's own). With the right password and the CA the build's objects are in the store;
    the CA not given (an untrusted certificate) with --require-compile-cache: exit 3, the tag
    where it was. The password is in no output, log or image. (A store that refuses sccache, as
    a wrong password's 401: the build compiles without it and says why, the server's answer
    quoted: tests/unit/test_compile_cache.py; a store that cannot be used, without
    --require-compile-cache: the previous test's store that dies in the middle of a build.)"""
    config, credentials = large_config
    password = "dav-" + uuid.uuid4().hex
    tag = f"{run_id}-webdav"
    image = f"torchbake-test/dev:{tag}"
    with tls_store("webdav", tmp_path / "dav", password) as store:
        try:
            good = store_config(tmp_path / "good.toml", store)
            filled, _ = dev_build(config, credentials, good, tmp_path, tag, lite_dev_base[0], env=tb_env, jobs=5)
            assert filled.returncode == 0, (filled.stdout + filled.stderr)[-4000:]
            assert "compiles through the store (WebDAV over HTTPS, 127.0.0.1:" in filled.stdout
            compiled = recorded_compiles(filled.stdout)
            assert compiled["pytorch"]["remote"] and not compiled["pytorch"]["store_errors"], compiled
            assert store.files() > TEST_UNITS  # every object, and sccache's own check file

            store.ca = None
            held = docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
            untrusted, _ = dev_build(config, credentials, store_config(tmp_path / "untrusted.toml", store), tmp_path,
                                     tag, lite_dev_base[0], "--require-compile-cache", env=tb_env, jobs=7)
            assert untrusted.returncode == 3, (untrusted.stdout + untrusted.stderr)[-4000:]
            assert "certificate verify failed" in untrusted.stdout, untrusted.stdout[-3000:]
            assert "could not be reached from the pytorch" in untrusted.stderr, untrusted.stderr[-3000:]
            assert "--require-compile-cache ([dev] compile_cache_required) makes that an error" in untrusted.stderr
            assert docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip() == held
            assert_secret_nowhere(password, image, (filled, untrusted))
        finally:
            docker("image", "rm", "--force", image, check=False)
