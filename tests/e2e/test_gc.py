"""`invoke gc` on a real engine of its own (gc looks at every image of its engine: candidate tags
of other builds running on a shared engine are not this test's to remove): only what torchbake
built and nothing uses goes; a dry run lists exactly that and removes nothing; a held cache entry
and a silent engine stop it."""

from __future__ import annotations

import json
import os
import re
import time

import filelock
import pytest

from tests.conftest import run_invoke

from .helpers import copy_image, docker, image_ids

DAY = 86400


def tiny_image(tmp_path, base_image, tag, note, engine):
    folder = tmp_path / f"ctx-{note}"
    folder.mkdir()
    # a layer of its own, as every build has: the image's Created is the time of this build
    name, version = tag.rsplit(":", 1)  # labelled as torchbake labels what it builds
    (folder / "Dockerfile").write_text(
        f"FROM {base_image}\nRUN echo {note} > /note\nLABEL torchbake.input-hash={note}"
        f" org.opencontainers.image.title={name} org.opencontainers.image.version={version}\n")
    # Built under a tag of its own, then tagged as ``tag``: an image whose tag a later image takes
    # stays on the engine untagged (as one torchbake's build replaced does), where an image the
    # build itself wrote over would be gone (the containerd image store keeps no such image).
    own = f"{tag}-{note}"
    docker("build", "--quiet", "--tag", own, str(folder), env=engine)
    docker("tag", own, tag, env=engine)
    docker("image", "rm", own, env=engine)
    time.sleep(1.1)  # Created has one-second resolution: keep the order
    return json.loads(docker("image", "inspect", tag, env=engine).stdout)[0]["Id"]


def aged(path, days):
    stamp = time.time() - days * DAY
    os.utime(path, (stamp, stamp))


@pytest.fixture(scope="module")
def engine(second_engine, base_image):
    """The second engine, with the session's base image."""
    copy_image(base_image, second_engine)
    return dict(second_engine)


def cache_files(tmp_path):
    """A cache folder of an old download (40 days unused) and two old logs, a build's and a failed one's."""
    cache = tmp_path / "cache"
    cache.mkdir()
    old = cache / "downloads" / "0123456789abcdef" / "kit.tar.gz"
    old.parent.mkdir(parents=True)
    old.write_bytes(b"k" * 4096)
    aged(old, 40)
    logs = cache / "logs"
    logs.mkdir()
    for name, status in (("old", "built"), ("broken", "failed")):
        (logs / f"{name}.log").write_text("...")
        (logs / f"{name}.manifest.json").write_text(json.dumps({"image": f"x/{name}:1", "status": status}))
        for item in logs.glob(f"{name}.*"):
            aged(item, 40)
    return cache


@pytest.fixture
def scene(tmp_path, base_image, run_id, engine):
    """Images torchbake "built" (recorded in the cache), one the user built, one a container uses,
    an old download, an old log and a failed build's log."""
    repo = f"torchbake-test/gc-{run_id}"
    # one repository, as configs/nightly.toml names its nine cells: v1, v2, v3 are current images of their tags
    ids = {name: tiny_image(tmp_path, base_image, f"{repo}:{name}", name, engine) for name in ("v1", "v2", "v3", "gone")}
    ids["gone2"] = tiny_image(tmp_path, base_image, f"{repo}:gone", "gone2", engine)  # a rebuild took the tag of "gone"
    # the user's own image, untagged (as a replaced image is): only the record says it is not torchbake's
    ids["mine"] = tiny_image(tmp_path, base_image, f"{repo}:gone", "mine", engine)
    docker("tag", ids["gone2"], f"{repo}:gone", env=engine)
    cache = cache_files(tmp_path)
    (cache / "built-images.json").write_text(json.dumps({"h": [ids[n] for n in ("v1", "v2", "v3", "gone", "gone2")]}))
    container = f"torchbake-test-gc-{run_id}"
    docker("create", "--name", container, f"{repo}:v1", "true", env=engine)
    env = {"TORCHBAKE_PATHS_CACHE_DIR": str(cache), **engine}
    yield repo, ids, cache, env
    docker("rm", "--force", container, check=False, env=engine)
    for image_id in ids.values():
        docker("image", "rm", "--force", image_id, check=False, env=engine)


def test_dry_run_lists_exactly_what_would_go_and_gc_removes_only_that(scene):
    repo, ids, cache, env = scene
    before = image_ids(env)
    dry = run_invoke("gc", "--dry-run", "--keep", "0", env=env)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    listed = dry.stdout
    assert "nothing was removed (--dry-run)" in dry.stdout
    # (candidate tags that earlier tests' interrupted builds left on this engine are listed too: not this scene's)
    image_lines = [line for line in listed.splitlines()
                   if line.startswith("would remove image") and ":torchbake-candidate-" not in line]
    assert len(image_lines) == 1, listed
    assert image_lines[0].startswith(f"would remove image {ids['gone'][:19]} (")
    assert image_lines[0].endswith(f"): a newer build of {repo}:gone took its tag; no tag, container or kept image uses it")
    assert "0123456789abcdef" in listed and "old.log" in listed and "broken.log" not in listed
    assert before <= image_ids(env) and (cache / "downloads" / "0123456789abcdef").exists()  # removed nothing

    run = run_invoke("gc", "--keep", "0", env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    after = image_ids(env)
    assert ids["gone"] not in after, run.stdout
    # the current image of every tag (v1 is also used by a container), and the user's own untagged image
    assert {ids["v1"], ids["v2"], ids["v3"], ids["gone2"], ids["mine"]} <= after
    for name in ("v1", "v2", "v3"):
        assert docker("image", "inspect", "--format", "{{.Id}}", f"{repo}:{name}", env=env).stdout.strip() == ids[name]
    assert re.search(r"Freed \S+ \S+ \(\d+ items\)", run.stdout), run.stdout
    assert not (cache / "downloads" / "0123456789abcdef").exists()
    assert not (cache / "logs" / "old.log").exists() and (cache / "logs" / "broken.log").exists()


def test_a_held_cache_entry_stays_and_a_silent_engine_stops_everything(engine, tmp_path):
    """On the cache folder alone (images are the other tests'): a download another torchbake holds
    stays; with no engine answering, nothing goes, not even the old download a gc removes."""
    cache = cache_files(tmp_path)
    download = cache / "downloads" / "0123456789abcdef"
    env = {"TORCHBAKE_PATHS_CACHE_DIR": str(cache), **engine}
    with filelock.FileLock(cache / "downloads" / "0123456789abcdef.lock"):
        held = run_invoke("gc", "--keep", "1", env=env)
    assert held.returncode == 0, held.stdout + held.stderr
    assert "another torchbake holds it" in held.stdout
    assert download.exists()

    dead = run_invoke("gc", "--keep", "0", env={**env, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert dead.returncode == 4, dead.stdout + dead.stderr
    assert "No Docker engine answers" in dead.stderr
    assert download.exists()  # no longer held, 40 days unused: what a gc with an engine removes


def test_older_than_and_max_cache_from_the_command_line(scene):
    """--older-than and --max-cache as typed: a 40-day-old download and log stay under --older-than 50d
    and go under 30d; a budget of 1 KiB makes the download go as least recently used. (The engine's
    build cache budget, --max-build-cache, is pruned for real on an engine of its own: test_soak.)"""
    _repo, ids, cache, env = scene
    download, log = cache / "downloads" / "0123456789abcdef", cache / "logs" / "old.log"
    young = run_invoke("gc", "--dry-run", "--keep", "9", "--older-than", "50d", env=env)
    assert young.returncode == 0, young.stdout + young.stderr
    assert str(download) not in young.stdout and str(log) not in young.stdout, young.stdout
    old = run_invoke("gc", "--dry-run", "--keep", "9", "--older-than", "30d", env=env)
    assert f"would remove download {download} (4.1 kB): no build used it for 40 days" in old.stdout, old.stdout
    assert f"would remove log {log}" in old.stdout

    budget = run_invoke("gc", "--keep", "9", "--older-than", "50d", "--max-cache", "1K", env=env)
    assert budget.returncode == 0, budget.stdout + budget.stderr
    assert f"removed download {download} (4.1 kB): the cache is over its budget; least recently used" in budget.stdout
    assert not download.exists() and log.exists()
    assert set(ids.values()) <= image_ids(env)  # --keep 9: no image goes
