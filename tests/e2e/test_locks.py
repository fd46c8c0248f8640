"""Locked images against a real local package index (a PEP 503 tree served over HTTP) holding a
dependency the index later publishes a newer version of: the lock keeps the image the same, a
locked build needs no index once the files are cached (a matrix cell on a fresh engine gives the
same image, built step by step there, and both engines push the same digest), --locked refuses a
configuration that moved, and only `invoke lock --upgrade` moves the closure, saying what changed."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tomllib
from pathlib import Path

from tests.conftest import run_invoke
from tests.support import registry_digest, serve_registry

from .helpers import STAND_IN_PYTHON, cached_run_steps, copy_image, docker, http_server, make_wheel


def publish(root: Path, wheel: Path) -> None:
    """``wheel`` in the index: its file under files/, its project's page listing every file."""
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    (files / wheel.name).write_bytes(wheel.read_bytes())
    project = wheel.name.split("-")[0].replace("_", "-")
    page = root / "simple" / project
    page.mkdir(parents=True, exist_ok=True)
    links = "".join(f'<a href="../../files/{f.name}#sha256={hashlib.sha256(f.read_bytes()).hexdigest()}">{f.name}</a>\n'
                    for f in sorted(files.glob(f"{project.replace('-', '_')}-*.whl")))
    (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")


def lockdep(folder: Path, version: str) -> Path:
    return make_wheel(folder, "lockdep", version, [], {"lockdep/__init__.py": f"VERSION = {version!r}\n"})


def image_id(name: str) -> str:
    return docker("image", "inspect", "--format", "{{.Id}}", name).stdout.strip()


def installed_lockdep(name: str) -> str:
    return docker("run", "--rm", "--entrypoint", "python", name, "-c",
                  "import lockdep; print(lockdep.VERSION)").stdout.strip()


def test_a_locked_image_stays_the_same_until_the_lock_is_upgraded_and_builds_with_the_index_down(
        base_image, tiny_torch, tb_env, run_id, tmp_path, second_engine):
    index, made = tmp_path / "index", tmp_path / "made"
    made.mkdir()
    publish(index, lockdep(made, "1.0"))
    project = tmp_path / "team"
    project.mkdir()
    name = f"torchbake-test/locked-{run_id}"
    image = f"{name}:1"
    stack = contextlib.ExitStack()
    url = stack.enter_context(http_server(index))
    (project / "torchbake.toml").write_text(
        f'{STAND_IN_PYTHON}[wheels]\ntorch = "{tiny_torch}"\nextra = ["lockdep"]\n'
        f'extra_index_urls = ["{url}/simple"]\n[build]\nvariant = "release"\nnetwork = "host"\n[image]\nname = "{name}"\ntag = "1"\n'
        f'base = "{base_image}"\n')
    try:
        locked = run_invoke("lock", "--fetch", cwd=project, env=tb_env)
        assert locked.returncode == 0, locked.stdout + locked.stderr
        assert "Fetched 2 wheels into" in locked.stdout  # the stand-in torch and lockdep, in the download cache
        lock_file = next((project / "locks").glob("pylock.*.toml"))
        assert "+lockdep 1.0" in locked.stdout and f"Locked {lock_file.relative_to(project)}" in locked.stdout
        text = lock_file.read_text()
        assert "lockdep-1.0-py3-none-any.whl" in text and '[tool.torchbake]' in text and "sha256" in text
        assert f'reference = "{base_image}"' in text  # the FROM image it was locked on
        debs = tomllib.loads(text)["tool"]["torchbake"]["debs"]  # what apt installs above it, at its versions
        assert debs and all(version for version in debs.values()), debs

        first = run_invoke("build", cwd=project, env=tb_env)
        assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
        assert "no resolver ran" in first.stdout
        assert f"Closure: locked by {lock_file.relative_to(project)} (" in first.stdout  # the build says which lock
        assert installed_lockdep(image) == "1.0"
        built = image_id(image)
        # the provenance and the SBOM name the lock, by its digest
        digest = hashlib.sha256(lock_file.read_bytes()).hexdigest()
        statement = json.loads(run_invoke("provenance", image, cwd=project, env=tb_env).stdout)
        assert {"name": f"lock {lock_file.name}", "digest": {"sha256": digest}}.items() <= next(
            d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]
            if d["name"].startswith("lock ")).items()
        sbom = json.loads(run_invoke("sbom", image, "--format", "cyclonedx", cwd=project, env=tb_env).stdout)
        assert {"name": "torchbake:lock", "value": f"{lock_file.name} sha256:{digest}"} in sbom["metadata"]["component"][
            "properties"]

        # the index publishes 1.1: nothing changes, and the plan says the lock holds
        publish(index, lockdep(made, "1.1"))
        planned = run_invoke("build", "--dry-run", cwd=project, env=tb_env)
        assert f"closure         locked by {lock_file.relative_to(project)}" in planned.stdout, planned.stdout
        again = run_invoke("build", cwd=project, env=tb_env)
        assert again.returncode == 0 and "unchanged" in again.stdout, (again.stdout + again.stderr)[-3000:]
        assert image_id(image) == built

        # the index goes down; a fresh engine (nothing on it but the OS image; the download cache
        # restored, as the nightly workflow restores it): the nightly's matrix cell, built --locked
        # from the cached files, is the same image (a build on this engine would find its layers)
        stack.close()
        copy_image(base_image, second_engine)
        restored = tmp_path / "cache-b"
        shutil.copytree(Path(tb_env["TORCHBAKE_PATHS_CACHE_DIR"]) / "downloads", restored / "downloads",
                        copy_function=os.link)
        (project / "nightly.toml").write_text('[matrix]\nprofiles = ["torchbake.toml"]\npythons = ["3.11"]\n'
                                              f'variants = ["release"]\nname = "{name}"\ntag = "1"\n')
        night = run_invoke("build-all", "--locked", "--config", "nightly.toml", cwd=project,
                           env={**tb_env, **second_engine, "TORCHBAKE_PATHS_CACHE_DIR": str(restored)})
        assert night.returncode == 0, (night.stdout + night.stderr)[-3000:]
        assert f"Built {image}" in night.stdout
        assert docker("image", "inspect", "--format", "{{.Id}}", image, env=second_engine).stdout.strip() == built
        # ... every RUN step built there (nothing in common with this engine but the OS image), and both
        # engines push the same digest to a registry
        log_b = "".join(p.read_text() for p in restored.rglob("*.log"))
        assert re.search(r"^#\d+ \[[^\]]+\] RUN ", log_b, re.MULTILINE), log_b[-3000:]  # the build's log, steps and all
        assert cached_run_steps(log_b) == []
        with serve_registry(tmp_path) as host:
            for engine, tag in ((None, "a"), (second_engine, "b")):
                try:
                    for args in (("tag", image, f"{host}/team/locked:{tag}"), ("push", f"{host}/team/locked:{tag}")):
                        docker(*args, env=engine)
                finally:  # the registry's copy is what is compared; the tag on the engine goes (one a run stayed)
                    docker("image", "rm", f"{host}/team/locked:{tag}", env=engine, check=False)
                assert registry_digest(host, f"{host}/team/locked:{tag}") == built
        # ... while an unlocked one says which requirement it cannot resolve
        floating = run_invoke("build", "--tag", "floating", "--force", cwd=project, env=tb_env)
        assert floating.returncode != 0 and "lockdep" in floating.stderr, (floating.stdout + floating.stderr)[-3000:]
        # ... and said, before anything was fetched, which lock it looked for and the command that writes it
        said = next(line for line in floating.stdout.splitlines() if line.startswith("Closure: "))
        assert said.startswith("Closure: floats: no lock (locks/pylock.") and "-floating-linux-amd64.toml" in said, said
        assert said.endswith("`invoke lock --tag floating` writes one)"), said

        # --locked with a configuration changed after locking: refused before any download
        cache = Path(tb_env["TORCHBAKE_PATHS_CACHE_DIR"])
        before = sorted(p.name for p in (cache / "downloads").rglob("*") if p.is_file())
        moved = run_invoke("build", "--locked", "--config", str(extra_config(tmp_path)), cwd=project, env=tb_env)
        assert moved.returncode == 2, moved.stdout + moved.stderr
        assert "was made for other requirements: +otherdep" in moved.stderr and "invoke lock" in moved.stderr
        assert sorted(p.name for p in (cache / "downloads").rglob("*") if p.is_file()) == before
        # ... and so is another FROM image than the one the lock was made on (one more layer)
        other = f"{name}:other-base"
        container = f"torchbake-test-lockbase-{run_id}"
        docker("run", "--name", container, base_image, "touch", "/changed")
        docker("commit", container, other)
        docker("rm", container)
        moved_base = run_invoke("build", "--locked", "--base-img", other, cwd=project, env=tb_env)
        assert moved_base.returncode == 2, moved_base.stdout + moved_base.stderr
        assert f"its FROM image {other} is" in moved_base.stderr and f"made on {base_image}" in moved_base.stderr
        planned_base = run_invoke("build", "--locked", "--dry-run", "--base-img", other, cwd=project, env=tb_env)
        assert planned_base.returncode == 2 and planned_base.stderr == moved_base.stderr, planned_base.stdout  # as the build

        # the index is back (1.0 and 1.1): locking again keeps 1.0; --upgrade moves it, saying so
        url = stack.enter_context(http_server(index))
        config = project / "torchbake.toml"
        config.write_text(config.read_text().replace(config.read_text().split('extra_index_urls = ["')[1].split('"')[0],
                                                     f"{url}/simple"))
        kept = run_invoke("lock", cwd=project, env=tb_env)
        assert kept.returncode == 0 and "lockdep" not in kept.stdout.split("Locking", 1)[1], kept.stdout + kept.stderr
        upgraded = run_invoke("lock", "--upgrade-package", "lockdep", cwd=project, env=tb_env)
        assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
        assert "lockdep 1.0 → 1.1" in upgraded.stdout and "1 changed" in upgraded.stdout
        rebuilt = run_invoke("build", "--locked", cwd=project, env=tb_env)
        assert rebuilt.returncode == 0, (rebuilt.stdout + rebuilt.stderr)[-3000:]
        rebuilt_id = image_id(image)
        assert rebuilt_id != built and installed_lockdep(image) == "1.1"
        labels = json.loads(docker("image", "inspect", "--format", "{{json .Config.Labels}}", image).stdout)
        assert any(file.startswith("lockdep-1.1-") for file in json.loads(labels["torchbake.inputs"]))
        # the Debian packages above the base were installed at the lock's versions
        installed = dict(line.split() for line in docker("run", "--rm", "--entrypoint", "dpkg-query", image, "-W",
                                                         "-f", "${Package} ${Version}\n").stdout.splitlines())
        assert {name: installed.get(name) for name in debs} == debs
        # a lock naming a version the mirror does not have: refused before the build, naming it
        name_, version = next(iter(debs.items()))
        lock_file.write_text(lock_file.read_text().replace(f'{name_} = "{version}"', f'{name_} = "{version}~gone1"'))
        gone = run_invoke("build", "--force", cwd=project, env=tb_env)
        assert gone.returncode == 3, (gone.stdout + gone.stderr)[-3000:]
        assert f"the mirror does not have (now): {name_} {version}~gone1. Nothing was built." in gone.stderr
        assert image_id(image) == rebuilt_id
    finally:
        stack.close()
        for tag in ("1", "floating", "other-base"):
            docker("image", "rm", "--force", f"{name}:{tag}", check=False)


def extra_config(folder: Path) -> Path:
    path = folder / "more.toml"
    path.write_text('[wheels]\nextra = ["lockdep", "otherdep"]\n')
    return path


def test_each_platform_and_each_release_cell_gets_its_own_lock_with_its_own_wheels(tiny_torch, tb_env, tmp_path):
    """A two-platform build locks each platform's numpy (real wheels, x86_64 and aarch64); --matrix
    locks every release cell of a matrix, each for its Python and platform; no engine is asked."""
    project = tmp_path / "team"
    project.mkdir()
    (project / "tiny.toml").write_text(f'{STAND_IN_PYTHON}[wheels]\ntorch = "{tiny_torch}"\n'
                                       'extra = ["numpy"]\n[build]\nvariant = "release"\n')
    (project / "torchbake.toml").write_text(
        '[matrix]\nprofiles = ["tiny.toml"]\npythons = ["3.11"]\nvariants = ["dev", "release"]\n'
        'name = "team/{profile}"\ntag = "{variant}-py{py}"\nplatforms = ["linux/amd64", "linux/arm64"]\n')
    env = {**tb_env, "TORCHBAKE_BUILD_DOCKER": "/no/such/docker"}
    both = run_invoke("lock", "--config", "tiny.toml", "--name", "team/both", "--tag", "1",
                      "--platform", "linux/amd64,linux/arm64", cwd=project, env=env)
    assert both.returncode == 0, both.stdout + both.stderr
    cells = run_invoke("lock", "--matrix", cwd=project, env=env)
    assert cells.returncode == 0, cells.stdout + cells.stderr
    assert cells.stdout.count("Locking team/tiny:release-py311") == 2 and "dev-py311" not in cells.stdout
    for image in ("team-both-1", "team-tiny-release-py311"):
        for platform, machine in (("amd64", "x86_64"), ("arm64", "aarch64")):
            lock = next((project / "locks").glob(f"pylock.{image}*-linux-{platform}.toml")).read_text()
            numpy = re.findall(r"numpy-[^\"/]+\.whl", lock)
            assert len(numpy) == 1 and numpy[0].endswith(f"_{machine}.whl"), (image, numpy)
            assert f'platform = "linux/{platform}"' in lock


def test_a_lock_builds_the_bytes_it_names_or_nothing(base_image, tb_env, run_id, tmp_path):
    """Two wheels of one file name (torch-2.13.0+tiny-py3-none-any.whl), the second with one file
    more: a lock made with the first refuses the second, named by path or at the first one's path,
    before any work (exit 2, the file and both digests), in a dry run as in the build; a URL that
    serves other bytes than the lock holds is a lock mismatch (exit 3) told to lock again, never to
    change a digest. A corrupt lock is a warning; a folder where the lock goes is exit 2."""
    from .helpers import TINY_TORCH_VERSION, make_tiny_torch

    wheel = make_tiny_torch(tmp_path / "a")
    (tmp_path / "b").mkdir()
    other = make_wheel(tmp_path / "b", "torch", TINY_TORCH_VERSION, [], {
        "torch/__init__.py": f"__version__ = {TINY_TORCH_VERSION!r}\nfrom . import cuda, version\n",
        "torch/version.py": f"__version__ = {TINY_TORCH_VERSION!r}\ncuda = None\nhip = None\ngit_version = 'tiny'\n",
        "torch/cuda.py": "def is_available():\n    return False\n\n\ndef get_arch_list():\n    return []\n",
        "torch/backdoor.py": "OPEN = True\n"})
    original, changed = wheel.read_bytes(), other.read_bytes()
    assert wheel.name == other.name and original != changed
    digests = [hashlib.sha256(data).hexdigest() for data in (original, changed)]
    project = tmp_path / "team"
    project.mkdir()
    name = f"torchbake-test/lockbytes-{run_id}"
    config = project / "torchbake.toml"

    def configure(torch: str) -> None:
        config.write_text(f'{STAND_IN_PYTHON}[wheels]\ntorch = "{torch}"\nextra = []\n[build]\n'
                          f'variant = "release"\nnetwork = "host"\n[image]\nname = "{name}"\ntag = "1"\nbase = "{base_image}"\n')

    configure(str(wheel))
    locked = run_invoke("lock", cwd=project, env=tb_env)
    assert locked.returncode == 0, locked.stdout + locked.stderr
    lock_file = next((project / "locks").glob("pylock.*.toml"))
    try:
        # another file of the same name, named by its path, or put in the locked one's place
        configure(str(other))
        for args in (("build", "--locked"), ("build",), ("build", "--locked", "--dry-run")):
            refused = run_invoke(*args, cwd=project, env=tb_env)
            assert refused.returncode == 2, (args, refused.stdout + refused.stderr)
            assert f"{other} has sha256 {digests[1]}" in refused.stderr and digests[0] in refused.stderr, refused.stderr
            assert "Building" not in refused.stdout and "invoke lock" in refused.stderr
        configure(str(wheel))
        wheel.write_bytes(changed)
        in_place = run_invoke("build", "--locked", cwd=project, env=tb_env)
        assert in_place.returncode == 2 and f"{wheel} has sha256 {digests[1]}" in in_place.stderr, in_place.stderr
        wheel.write_bytes(original)

        # a URL that serves other bytes than it did when it was locked, on a host with an empty cache
        served = tmp_path / "served"
        served.mkdir()
        (served / wheel.name).write_bytes(original)
        with http_server(served) as url:
            configure(f"{url}/{wheel.name}")
            assert run_invoke("lock", cwd=project, env=tb_env).returncode == 0
            (served / wheel.name).write_bytes(changed)
            fresh = {**tb_env, "TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path / "fresh-cache")}
            mismatch = run_invoke("build", "--locked", cwd=project, env=fresh)
        assert mismatch.returncode == 3, mismatch.stdout + mismatch.stderr
        assert "A lock mismatch" in mismatch.stderr and "never change a lock's digest" in mismatch.stderr
        assert "Fix the digest" not in mismatch.stderr and docker("image", "inspect", f"{name}:1", check=False).returncode

        # a corrupt lock: the build says so, and floats
        configure(str(wheel))
        lock_file.write_text("this is [not a lock\n")
        corrupt = run_invoke("build", "--no-verify", cwd=project, env=tb_env)
        assert corrupt.returncode == 0, (corrupt.stdout + corrupt.stderr)[-3000:]
        warned = [line for line in corrupt.stdout.splitlines() if line.startswith("Warning:")]
        assert len(warned) == 1 and "is not a lock torchbake can use" in warned[0], corrupt.stdout[-3000:]
        # a folder where the lock goes
        lock_file.unlink()
        lock_file.mkdir()
        for args in (("lock",), ("build", "--locked")):
            folder = run_invoke(*args, cwd=project, env=tb_env)
            assert folder.returncode == 2 and f"{lock_file.relative_to(project)} is a folder" in folder.stderr, \
                folder.stdout + folder.stderr
            assert "Traceback" not in folder.stderr
    finally:
        docker("image", "rm", "--force", f"{name}:1", check=False)
