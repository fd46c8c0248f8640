"""What `invoke gc` would remove, decided without an engine (a fake one answers)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from torchbake.adapters.engine import content_id
from torchbake.housekeeping import cleanup

DAY = 86400.0


class FakeEngine:
    def __init__(self, images, containers=()):
        self.listed, self.containers = images, list(containers)

    def call(self, what, method, *args, **kwargs):
        return {"containers": self.containers, "df": {"BuildCache": [], "LayersSize": 0}}[method]

    def images(self, **_kwargs):
        return self.listed

    def disk_usage(self):
        return self.call("system df", "df")

    def check_engine(self):
        return "26.1.5"

    def inspect_image(self, image_id):
        return {"Id": image_id, "RootFS": {"Layers": [image_id.replace("sha256:", "sha256:layer-")]}, "Config": {}}


def image(image_id, tags, created, size=100, built_as="", base=""):
    labels = {}
    if built_as:
        labels["org.opencontainers.image.title"], labels["org.opencontainers.image.version"] = built_as.rsplit(":", 1)
    if base:
        labels["org.opencontainers.image.base.digest"] = base
    return {"Id": image_id, "RepoTags": tags, "Created": created, "Size": size, "Labels": labels}


def record(cache_dir: Path, *ids: str) -> None:
    (cache_dir / "built-images.json").write_text(json.dumps({"hash": list(ids)}))


def test_only_replaced_images_go_never_the_current_image_of_a_tag(tmp_path):
    record(tmp_path, *(f"sha256:{c}" for c in "abcdefghij"))
    engine = FakeEngine([
        # nine cells in one repository, as configs/nightly.toml names them: every current image stays
        image("sha256:a", ["t/x:base-py310"], 1, built_as="t/x:base-py310"),
        image("sha256:b", ["t/x:dev-py310"], 2, built_as="t/x:dev-py310", base="sha256:h"),
        image("sha256:c", ["t/x:release-py310"], 3, built_as="t/x:release-py310"),
        # three images that newer builds of t/x:release-py310 replaced: the newest 2 stay for a rollback
        image("sha256:d", [], 0, built_as="t/x:release-py310"),
        image("sha256:e", [], -1, built_as="t/x:release-py310"),
        image("sha256:f", [], -2, built_as="t/x:release-py310"),
        image("sha256:g", [], -3, built_as="t/x:release-py310"),  # a container uses it
        image("sha256:h", [], -4, built_as="t/x:base-py310"),  # replaced, but t/x:dev-py310 starts FROM it
        # replaced, but t/x:dev2-py310 starts FROM it, labelled by content as torchbake labels bases now
        image("sha256:i", [], -4, built_as="t/x:base-py310"),
        image("sha256:j", ["t/x:dev2-py310"], 2, built_as="t/x:dev2-py310",
              base=content_id({"RootFS": {"Layers": ["sha256:layer-i"]}, "Config": {}})),
        image("sha256:u", [], -5, built_as="t/x:release-py310"),  # not in the record: the user's
    ], containers=[{"ImageID": "sha256:g"}])
    removals = cleanup.image_removals(engine, tmp_path, keep=2)
    assert [r.target for r in removals] == ["sha256:f"]
    assert "a newer build of t/x:release-py310 took its tag" in removals[0].why
    assert sorted(r.target for r in cleanup.image_removals(engine, tmp_path, keep=0)) == ["sha256:d", "sha256:e", "sha256:f"]


def test_replaced_images_all_made_at_source_date_epoch_are_kept_newest_first_by_their_first_build(tmp_path):
    record(tmp_path, "sha256:a", "sha256:b", "sha256:c", "sha256:d")
    (tmp_path / "first-built.json").write_text(json.dumps(
        {"hash-b": "2026-11-02T00:00:00Z", "hash-c": "2026-11-03T00:00:00Z", "hash-d": "2026-11-01T00:00:00Z"}))
    replaced = [image(f"sha256:{x}", [], 0, built_as="t/x:1") for x in "bcd"]  # every image: created at epoch 0
    for entry, digest in zip(replaced, ("hash-b", "hash-c", "hash-d"), strict=True):
        entry["Labels"]["torchbake.input-hash"] = digest
    engine = FakeEngine([image("sha256:a", ["t/x:1"], 0, built_as="t/x:1"), *reversed(replaced)])
    assert [r.target for r in cleanup.image_removals(engine, tmp_path, keep=1)] == ["sha256:b", "sha256:d"]


def test_an_image_with_any_tag_stays(tmp_path):
    record(tmp_path, "sha256:a", "sha256:b")
    engine = FakeEngine([image("sha256:a", ["t/x:2"], 5, built_as="t/x:1"), image("sha256:b", ["t/x:1", "t/y:1"], 4)])
    assert cleanup.image_removals(engine, tmp_path, keep=0) == []


def age(path: Path, days: float) -> None:
    stamp = time.time() - days * DAY
    os.utime(path, (stamp, stamp))


def test_cache_entries_by_age_and_by_budget_least_recently_used_first(tmp_path):
    old = tmp_path / "downloads" / "aaaa" / "kit.tar.gz"
    new = tmp_path / "downloads" / "bbbb" / "kit2.tar.gz"
    wheel = tmp_path / "wheelhouse" / "cp311" / "torch-1-py3-none-any.whl"
    for path, size, days in ((old, 1000, 40), (new, 1000, 1), (wheel, 5000, 3)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * size)
        age(path, days)
    now = time.time()
    by_age = cleanup.cache_removals(tmp_path, 30 * DAY, 0, now)
    assert [r.what for r in by_age] == [str(old.parent)]
    by_budget = cleanup.cache_removals(tmp_path, 30 * DAY, 1500, now)
    assert [r.what for r in by_budget] == [str(old.parent), str(wheel)]  # then the least recently used



def test_a_suite_s_debootstrap_packages_are_one_cache_entry_under_the_bootstrap_s_lock(tmp_path):
    old = tmp_path / "bootstrap" / "debs" / "bullseye" / "bash_5.1-2+deb11u1_amd64.deb"
    new = tmp_path / "bootstrap" / "debs" / "trixie" / "bash_5.2.37-2_amd64.deb"
    for path, days in ((old, 40), (new, 1)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 100)
        age(path, days)
    assert [r.what for r in cleanup.cache_removals(tmp_path, 30 * DAY, 0, time.time())] == [str(old.parent)]
    assert (str(old.parent), old.parent.with_suffix(".lock")) in {(str(p), lock) for _, p, lock in cleanup._entries(tmp_path)}

def test_gc_removes_every_kind_of_cache_entry_it_lists(tmp_path):
    """What the plan lists, carry_out removes: a program unpacked from its wheel and a suite's
    debootstrap packages as well as a download and a wheel (the first two were listed as removed
    and stayed, so the cache never came within --max-cache)."""
    entries = [tmp_path / "downloads" / "aaaa" / "kit.tar.gz", tmp_path / "wheelhouse" / "cp311" / "a-1-py3-none-any.whl",
               tmp_path / "tools" / "uv-38409000-ec3a0775", tmp_path / "bootstrap" / "debs" / "trixie" / "bash_5.2_amd64.deb"]
    for path in entries:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 100)
        age(path, 40)
    removals = cleanup.cache_removals(tmp_path, 30 * DAY, 0, time.time())
    assert sorted(r.kind for r in removals) == ["debootstrap packages", "download", "program", "wheel"]
    outcome = cleanup.carry_out(FakeEngine([]), removals, tmp_path, _limits(0))
    assert outcome.kept == [] and [path for path in entries if path.exists()] == []


def test_a_program_being_unpacked_is_left_to_its_run_until_it_is_a_day_old(tmp_path):
    young, old = tmp_path / "tools" / ".uv-1-0.7.aaaa.tmp", tmp_path / "tools" / ".uv-1-0.9.bbbb.tmp"
    for path, days in ((young, 0.01), (old, 2)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 100)
        age(path, days)
    assert [r.what for r in cleanup.cache_removals(tmp_path, 30 * DAY, 1, time.time())] == [str(old)]


def test_logs_go_by_age_but_a_failure_stays_until_that_image_built_again(tmp_path):
    def manifest(name, image, status, days):
        path = tmp_path / f"{name}.manifest.json"
        path.write_text(json.dumps({"image": image, "status": status}))
        (tmp_path / f"{name}.log").write_text("log")
        for item in (path, tmp_path / f"{name}.log"):
            age(item, days)

    manifest("a-old", "t/a:1", "built", 40)
    manifest("b-failed", "t/b:1", "failed", 40)  # nothing built t/b:1 since: kept
    manifest("c-failed", "t/c:1", "failed", 40)
    manifest("c-later", "t/c:1", "built", 35)  # a later success: the failure's log may go
    manifest("d-new", "t/d:1", "built", 1)
    # a build's SBOMs, provenance and inventory (its slim image's too) go with its manifest
    written = {"t/a:1": {"spdx": str(tmp_path / "a-old.spdx.json"), "provenance": str(tmp_path / "a-old.provenance.json")},
               "t/a:1-slim": {"cyclonedx": str(tmp_path / "a-old-slim.cdx.json"),
                              "elsewhere": str(tmp_path.parent / "not-ours.json")}}
    (tmp_path / "a-old.manifest.json").write_text(json.dumps({"image": "t/a:1", "status": "built",
                                                              "attestations": written}))
    age(tmp_path / "a-old.manifest.json", 40)
    for kind in ("spdx", "provenance", "inventory"):
        (tmp_path / f"a-old.{'spdx' if kind == 'spdx' else kind}.json").write_text("{}")
    (tmp_path / "a-old-slim.cdx.json").write_text("{}")
    (tmp_path.parent / "not-ours.json").write_text("{}")
    (tmp_path / "d-new.spdx.json").write_text("{}")
    gone = sorted(Path(r.what).name for r in cleanup.log_removals(tmp_path, 30 * DAY, time.time()))
    assert gone == ["a-old-slim.cdx.json", "a-old.inventory.json", "a-old.log", "a-old.manifest.json",
                    "a-old.provenance.json", "a-old.spdx.json", "c-failed.log", "c-failed.manifest.json",
                    "c-later.log", "c-later.manifest.json"]


def test_mark_used_keeps_the_modification_time(tmp_path):
    from torchbake.core.files import mark_used
    path = tmp_path / "w.whl"
    path.write_text("x")
    age(path, 40)
    mtime = path.stat().st_mtime_ns
    mark_used(path)
    assert path.stat().st_mtime_ns == mtime and time.time() - cleanup.last_used(path) < 60


def test_a_candidate_tag_an_interrupted_build_left_goes(tmp_path):
    engine = FakeEngine([
        {**image("sha256:c", ["t/x:torchbake-candidate-1234abcd"], 5), "Labels": {"torchbake.version": "0.1.0"}},
        {**image("sha256:u", ["t/y:torchbake-candidate-99999999"], 5), "Labels": {}},  # not torchbake's
    ])
    assert [r.target for r in cleanup.image_removals(engine, tmp_path, keep=3)] == ["t/x:torchbake-candidate-1234abcd"]


def test_a_cut_short_wheel_is_dropped_with_a_warning(tmp_path, capsys):
    import zipfile

    from torchbake.inputs.wheelhouse import drop_broken_wheels
    good = tmp_path / "good-1-py3-none-any.whl"
    with zipfile.ZipFile(good, "w") as zf:
        zf.writestr("good/__init__.py", "")
    bad = tmp_path / "bad-1-py3-none-any.whl"
    bad.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    drop_broken_wheels(tmp_path)
    assert good.exists() and not bad.exists()
    assert "is not a whole wheel" in capsys.readouterr().out


def test_a_truncated_record_of_built_images_is_ignored_with_a_warning_and_rewritten(tmp_path, capsys):
    from torchbake.building.input_hash import read_record, record_built
    state = tmp_path / "built-images.json"
    state.write_text('{"abc": ["sha256:1"')
    assert read_record(state) == {}
    assert "is unreadable" in capsys.readouterr().out
    record_built(state, "abc", "sha256:2")
    assert json.loads(state.read_text()) == {"abc": ["sha256:2"]}



def test_gc_forgets_recorded_ids_the_engine_no_longer_has(tmp_path):
    from torchbake.building.input_hash import forget_missing
    state = tmp_path / "built-images.json"
    state.write_text(json.dumps({"h1": ["sha256:gone", "sha256:here"], "h2": ["sha256:gone2"]}))
    forget_missing(state, {"sha256:here", "sha256:other"})
    assert json.loads(state.read_text()) == {"h1": ["sha256:here"]}


def test_a_verification_container_a_cut_off_run_left_goes_and_frees_its_candidate(tmp_path):
    """The engine died under a verification: its probe container (stopped) and the candidate tag it
    holds both go; a running probe is a verification going on, and its candidate stays."""
    candidate = image("sha256:c", ["x/a:torchbake-candidate-1"], 1)
    candidate["Labels"]["torchbake.version"] = "0.1.0"
    live = image("sha256:l", ["x/b:torchbake-candidate-2"], 1)
    live["Labels"]["torchbake.version"] = "0.1.0"
    probe = {"Id": "p1", "Names": ["/torchbake-probe-1"], "ImageID": "sha256:c", "State": "exited",
             "Labels": {"torchbake.probe": "true"}}
    running = {"Id": "p2", "Names": ["/torchbake-probe-2"], "ImageID": "sha256:l", "State": "running",
               "Labels": {"torchbake.probe": "true"}}
    client = FakeEngine([candidate, live], containers=[probe, running])
    found = [(r.kind, r.what) for r in cleanup.image_removals(client, tmp_path, keep=0)]
    assert found == [("container", "torchbake-probe-1"), ("image", "x/a:torchbake-candidate-1")]


class BuildCacheEngine:
    """An engine whose build cache holds torchbake's step records and another tool's; it records
    each prune it is asked for."""

    RECORDS = [
        {"ID": "ours-old", "Description": "mount / from exec /bin/sh -c bash /opt/torchbake/common/step.sh install_wheels.sh",
         "Size": 600, "LastUsedAt": "2026-11-01T00:00:00Z", "InUse": False, "Shared": False},
        {"ID": "ours-new", "Description": "mount / from exec /bin/sh -c bash /tmp/torchbake/common/install_os_packages.sh",
         "Size": 500, "LastUsedAt": "2026-11-20T00:00:00Z", "InUse": False, "Shared": False},
        {"ID": "theirs", "Description": "mount / from exec /bin/sh -c make -C /src all", "Size": 9000,
         "LastUsedAt": "2026-10-01T00:00:00Z", "InUse": False, "Shared": False},
        {"ID": "ours-busy", "Description": "mount / from exec /bin/sh -c bash /opt/torchbake/common/step.sh x",
         "Size": 700, "LastUsedAt": "2026-10-01T00:00:00Z", "InUse": True, "Shared": False},
    ]

    def __init__(self):
        self.pruned = []

    def call(self, what, method, *args, **kwargs):
        if method == "prune_builds":
            self.pruned.append(kwargs)
            return {}
        return {"df": {"BuildCache": self.RECORDS, "LayersSize": 0}, "containers": []}[method]

    def disk_usage(self):
        return self.call("system df", "df")


def _limits(budget, engine=False):
    return cleanup.Limits(keep=1, older_than=30 * DAY, max_cache=0, max_build_cache=budget, engine_build_cache=engine)


def test_the_build_cache_budget_prunes_only_torchbakes_records_least_recently_used_first():
    engine = BuildCacheEngine()
    found = cleanup.build_cache_removals(engine, _limits(600))
    assert [(r.target, r.size) for r in found] == [("ours-old", 600)]  # 1100 of ours → 500: the older one goes
    assert "other users' and tools' records stay" in found[0].what
    everything = cleanup.build_cache_removals(engine, _limits(1))
    assert everything[0].target == "ours-old,ours-new"  # never another tool's record, never one in use
    cleanup.carry_out_build_cache(engine, everything[0], _limits(1))
    assert engine.pruned == [{"filters": {"id": "ours-old"}, "all": True, "limit": 3600},
                             {"filters": {"id": "ours-new"}, "all": True, "limit": 3600}]


def test_the_engines_whole_build_cache_is_pruned_only_when_asked_for_by_name():
    engine = BuildCacheEngine()
    found = cleanup.build_cache_removals(engine, _limits(1000, engine=True))
    assert len(found) == 1 and "every user's and tool's records, --engine-build-cache" in found[0].what
    cleanup.carry_out_build_cache(engine, found[0], _limits(1000, engine=True))
    assert engine.pruned == [{"keep_storage": 1000, "limit": 3600}]


def test_a_candidate_tag_a_live_build_holds_stays_and_goes_once_let_go(tmp_path):
    """gc (another process, another cache folder, another TMPDIR) never takes the candidate of a
    build that is still verifying or promoting it: the build holds its candidate's lock while it
    lives."""
    from torchbake.building import candidates

    live = candidates.new_candidate("t/live:1")
    assert live.startswith("t/live:torchbake-candidate-") and candidates.is_live(live)
    engine = FakeEngine([{**image("sha256:l", [live], 5), "Labels": {"torchbake.version": "0.1.0"}}])
    probe = ("import sys; from torchbake.building import candidates; print(candidates.is_live(sys.argv[1]))")
    import subprocess
    import sys

    elsewhere = tmp_path / "gc-temp"
    elsewhere.mkdir()
    seen = subprocess.run([sys.executable, "-c", probe, live], capture_output=True, text=True, check=True,
                          env={**os.environ, "TMPDIR": str(elsewhere)}).stdout
    assert seen.strip() == "True"  # another process, started with another TMPDIR, sees it held
    assert cleanup.image_removals(engine, tmp_path, keep=3) == []
    candidates.let_go(live)
    assert not candidates.is_live(live)
    assert [r.target for r in cleanup.image_removals(engine, tmp_path, keep=3)] == [live]


def test_a_candidate_lock_of_another_user_counts_as_held(tmp_path, monkeypatch):
    """The candidates' folder is every user's (/tmp): a lock this process may not open is
    another user's, and its candidate stays."""
    import filelock

    from torchbake.building import candidates

    live = candidates.new_candidate("t/theirs:1")
    try:
        def refused(self, *args, **kwargs):
            raise PermissionError(13, "Permission denied", str(self.lock_file))

        monkeypatch.setattr(filelock.FileLock, "acquire", refused)
        assert candidates.is_live(live)
    finally:
        monkeypatch.undo()
        candidates.let_go(live)


def test_the_locks_of_builds_that_are_gone_go_and_a_live_or_young_one_stays():
    """A killed build, or one that kept its candidate for inspection, leaves its lock file in the
    host-wide folder: gc (and the suite's end) removes it once no one holds it; a lock a live build
    holds stays, and so does an unheld one younger than a minute (a build between making its lock
    and holding it)."""
    import subprocess
    import sys

    from torchbake.building import candidates

    live = candidates.new_candidate("t/live:1")
    held = candidates._lock_of(live)
    gone, young = held.parent / "0000dead.lock", held.parent / "0000new.lock"
    try:
        for lock in (gone, young):
            lock.touch()
        for old in (gone, held):
            os.utime(old, (time.time() - 3600, time.time() - 3600))
        # another process sweeps (a lock this process holds is not held against itself everywhere)
        swept = subprocess.run([sys.executable, "-c", "from torchbake.building import candidates;"
                                " print(candidates.forget_gone())"], capture_output=True, text=True, check=True)
        assert not gone.exists() and young.exists() and held.exists(), swept.stdout
        assert candidates.is_live(live)
    finally:
        candidates.let_go(live)
        for lock in (gone, young):
            lock.unlink(missing_ok=True)


def test_every_temporary_context_of_one_kind_of_image_has_one_base_name_and_goes_whole(tmp_path):
    """A temporary context is staged under the kind of image and its platform (the digest of its
    files joins the name once staged: the test below), alone in a folder of its own: two builds at
    once get two folders; gc sees each as one entry, held by its lock."""
    from torchbake.inputs.context import choose_context_dir, context_name, remove_context

    root = tmp_path / "contexts"
    first, temporary = choose_context_dir("", root, context_name("release"))
    second, _ = choose_context_dir("", root, context_name("release"))
    other, _ = choose_context_dir("", root, context_name("release", "linux/arm64/v8"))
    assert temporary and first.is_dir() and second.is_dir() and first != second
    assert first.name == second.name == "release" and other.name == "release-linux-arm64-v8"
    assert {p.name for p in root.iterdir() if p.is_dir()} == {first.parent.name, second.parent.name, other.parent.name}
    listed = {path: lock for kind, path, lock in cleanup._entries(tmp_path) if kind == "context"}
    assert listed[first.parent] == root / f"{first.parent.name}.lock" and listed[first.parent].is_file()
    remove_context(first)
    assert not first.parent.exists() and not (root / f"{first.parent.name}.lock").exists() and second.is_dir()


def test_a_temporary_context_is_named_after_the_files_it_holds_whatever_their_size_and_time(tmp_path):
    """buildx sends into a reused copy only the files whose size or modification time changed:
    new bytes under the same size and time must give another name, so the engine never builds
    from the last build's bytes. A recorded input counts by its sha256, whichever file holds it."""
    import os

    from torchbake.inputs.context import Staging, choose_context_dir, content_digest, context_name

    def staged(text: str, wheel: Path) -> str:
        folder, temporary = choose_context_dir("", tmp_path / "contexts", context_name("release"))
        stage = Staging(folder, temporary)
        (stage.path / "requirements.txt").write_text(text)
        os.utime(stage.path / "requirements.txt", ns=(0, 10**18))  # the same time for every build
        (stage.path / "wheelhouse").mkdir()
        os.link(wheel, stage.path / "wheelhouse" / wheel.name)
        stage.record(wheel.name, wheel)
        return content_digest(stage.path, stage.linked)

    one, two = tmp_path / "one" / "w-1.whl", tmp_path / "two" / "w-1.whl"
    for path in (one, two):
        path.parent.mkdir()
        path.write_bytes(b"wheel")
    same = staged("torch==1\n", one)
    assert staged("torch==1\n", two) == same  # the same bytes, other files: one name
    assert staged("torch==2\n", one) != same  # the same size and time, other bytes
    two.write_bytes(b"WHEEL")
    assert staged("torch==1\n", two) != same  # an input with other bytes
    folder, temporary = choose_context_dir("", tmp_path / "contexts", context_name("release"))
    (tmp_path / "template").write_text("FROM scratch\n")
    prepared = Staging(folder, temporary).finish(tmp_path / "template", {}, "cpu", [])
    assert prepared.path.parent == folder.parent and not folder.exists()
    assert prepared.path.name == f"release-{content_digest(prepared.path, {})[:16]}"
