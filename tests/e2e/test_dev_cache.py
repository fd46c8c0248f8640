"""The dev images' compile cache on the fixture sources with the stand-in torch (conftest's
lite_dev_config): a build's ccache statistics are its own beside another build, and a fresh engine
gets remote hits from the storage another engine filled. (In a module of its own: beside test_dev
on another worker, not after it on the same one.)"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from tests.conftest import run_invoke
from tests.support import redis_store

from .helpers import copy_image, docker


@pytest.fixture(scope="module")
def lite_dev_base(run_id, base_image, tb_env, lite_dev_config):
    """The base of the fixture sources on the stand-in torch (conftest.lite_dev_config)."""
    config, _ = lite_dev_config
    name = f"torchbake-test/dev-lite-base:{run_id}"
    result = run_invoke("build-base", "--config", str(config), "--name", name.split(":")[0], "--tag", run_id,
                        "--sys", base_image, "--python", "3.11", env=tb_env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    yield name, result
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


def test_a_fresh_engine_compiles_nothing_another_compiled_into_the_shared_store_and_a_store_down_is_said_or_refused(
        lite_dev_base, tb_env, lite_dev_config, run_id, tmp_path, second_engine):
    """[dev] ccache_remote on a real store (Debian's redis-server on loopback, with a password): engine
    A's compiles fill it; engine B, whose cache mount is empty, compiles nothing, every object A
    compiled a remote hit, each step saying so in the build's record. With the store down, a build
    succeeds without it and says so; with --require-compile-cache it fails (exit 3) and the tag stays
    on the image it held. The password is in no output, log or manifest. (The C sources of the
    fixture-lite profile: the shared store is the story here; the real C++ extension's ccache hits
    are test_dev's, after one changed file.)"""
    config, credentials = lite_dev_config
    dev_base = lite_dev_base
    password = "store-" + uuid.uuid4().hex
    image = f"torchbake-test/dev:{run_id}-remote"
    with redis_store(tmp_path / "redis", password) as store:
        remote = tmp_path / "remote.toml"
        remote.write_text(f'[dev]\nccache_remote = "{store.url}"\n')
        args = ("build", "--config", str(config), "--config", str(remote), "--name", "torchbake-test/dev",
                "--tag", f"{run_id}-remote", "--base-img", dev_base[0], "-c", str(credentials), "--no-cache", "--no-verify")
        try:
            on_a = run_invoke(*args, env=tb_env)
            assert on_a.returncode == 0, (on_a.stdout + on_a.stderr)[-5000:]
            assert store.keys() > 0
            # the build says, and records, what each compile step compiled (the C sources: the fixture's
            # audio has none), each step with the store
            compiled_a = recorded_compiles(on_a.stdout)
            assert compiled_a["pytorch"]["compiled"] >= 1 and compiled_a["extension"]["compiled"] >= 1, compiled_a
            assert all(c["remote"] and not c["store_errors"] for c in compiled_a.values()), compiled_a
            assert re.search(r"^Compiled: pytorch: \d+ compiled, \d+ s", on_a.stdout, re.M), on_a.stdout[-3000:]

            copy_image(dev_base[0], second_engine)
            on_b = run_invoke(*args, env={**tb_env, **second_engine})
            output = on_b.stdout + on_b.stderr
            assert on_b.returncode == 0, output[-5000:]
            # BuildKit prefixes every line ("#8 0.813   Hits: ..."): the Hits line right after "Remote storage:"
            remote_hits = [int(n) for n in re.findall(r"Remote storage:\s*\n[^\n]*?Hits:\s*(\d+)", output)]
            assert remote_hits and max(remote_hits) >= 1, output[-4000:]
            # engine B compiled nothing: each object engine A compiled came from the store
            compiled_b = recorded_compiles(on_b.stdout)
            assert {role: (c["compiled"], c["remote_hits"]) for role, c in compiled_b.items()} == {
                role: (0, c["compiled"]) for role, c in compiled_a.items()}, (compiled_a, compiled_b)

            store.stop()  # the store is down: engine A builds from its own cache mount, without it
            held = docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
            required = run_invoke(*args, "--require-compile-cache", env=tb_env)
            assert required.returncode == 3, (required.stdout + required.stderr)[-4000:]
            assert "could not be reached from the pytorch" in required.stderr, required.stderr[-3000:]
            assert "--require-compile-cache ([dev] ccache_required) makes that an error" in required.stderr
            assert docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip() == held  # not tagged
            down = run_invoke(*args, env=tb_env)
            assert down.returncode == 0, (down.stdout + down.stderr)[-4000:]
            compiled_down = recorded_compiles(down.stdout)
            assert all(c["store_errors"] == c["compiled"] + c["local_hits"] for c in compiled_down.values()), compiled_down
            assert compiled_down["pytorch"]["store_errors"] >= 1, compiled_down
            flat = " ".join(down.stdout.split())
            assert "Warning: the compile cache's store ([dev] ccache_remote) could not be reached from the pytorch" in flat
            assert "without the store (unreachable)" in flat
            for result in (on_a, on_b, required, down):  # a secret: in no output, log or manifest
                manifest = re.search(r"manifest: (\S+)\)", result.stdout).group(1)
                for text in (result.stdout + result.stderr, Path(manifest).read_text(),
                             Path(manifest.replace(".manifest.json", ".log")).read_text()):
                    assert password not in text
        finally:
            docker("image", "rm", "--force", image, check=False)


def recorded_compiles(stdout: str) -> dict[str, dict]:
    """The compile steps' counts the build kept in its record (the manifest its first line names)."""
    manifest = re.search(r"manifest: (\S+)\)", stdout)
    assert manifest, stdout[:2000]
    return json.loads(Path(manifest.group(1)).read_text()).get("compiles", {})
