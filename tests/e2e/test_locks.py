"""Locked images against a real local package index (a PEP 503 tree served over HTTP) holding a
dependency the index later publishes a newer version of: the lock keeps the image the same, a
locked build needs no index once the files are cached (a matrix cell on a fresh engine gives the
same image), --locked refuses a configuration that moved, and only `invoke lock --upgrade` moves
the closure, saying what changed."""

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

from .helpers import copy_image, docker, http_server, make_wheel


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
        f'[python]\nversion = "3.11"\n[wheels]\ntorch = "{tiny_torch}"\nextra = ["lockdep"]\n'
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
    (project / "tiny.toml").write_text(f'[python]\nversion = "3.11"\n[wheels]\ntorch = "{tiny_torch}"\n'
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
