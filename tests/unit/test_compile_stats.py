"""What a dev build compiled: the compile steps' lines (docker/common/build_source.sh, counted from
ccache's stats log) read back from a build's output, summed per step, summarised, and carried to
build-all's table, JSON and JUnit reports. (The lines a real build prints: tests/e2e/test_dev_cache.py.)"""

from __future__ import annotations

import io
import json
import subprocess
import xml.etree.ElementTree as ElementTree
from datetime import datetime
from pathlib import Path

import pytest
from rich.console import Console

from tests.conftest import ROOT
from torchbake.building import compile_stats
from torchbake.building.compile_stats import Compiles
from torchbake.core.status import Status
from torchbake.fleet import runner

OUTPUT = """#9 12.01 building 'torchbake_fixture_ext' extension
#9 41.50 torchbake: compile-cache role=torch compiled=3 local_hits=0 remote_hits=1201 store_errors=0 remote=yes seconds=41
#9 41.52 torchbake: ccache statistics for torch:
#11 3.20 torchbake: compile-cache role=extension compiled=2 local_hits=5 remote_hits=0 store_errors=0 remote= seconds=3
#13 1.00 torchbake: compile-cache role=extras compiled=1 local_hits=0 remote_hits=0 store_errors=4 remote=yes seconds=2
#14 1.00 torchbake: compile-cache role=extras compiled=1 local_hits=0 remote_hits=2 store_errors=0 remote=yes seconds=5
#15 1.00 echo torchbake: compile-cache role=fake compiled=x
"""


def test_each_steps_counts_are_read_from_the_builds_output_and_a_step_run_twice_adds_up():
    found = compile_stats.read(OUTPUT.splitlines(keepends=True))
    assert found == {"torch": Compiles(3, 0, 1201, 0, True, 41), "extension": Compiles(2, 5, 0, 0, False, 3),
                     "extras": Compiles(2, 0, 2, 4, True, 7)}
    assert compile_stats.summary(found) == ("torch: 3 compiled, 1,201 remote hits, 41 s; extension: 2 compiled,"
                                            " 5 local hits, 3 s; extras: 2 compiled, 2 remote hits,"
                                            " 4 without the store (unreachable), 7 s")
    assert compile_stats.unreachable(found) == ["extras"]
    assert compile_stats.from_record(json.loads(json.dumps(compile_stats.to_record(found)))) == found


def test_the_objects_a_compile_counted_follow_ccaches_counts_and_stand_alone_without_them():
    found = {"torch": Compiles(3, 0, 1201, 0, True, 41)}
    progress = {"torch": {"objects": 1204, "total": 1204, "seconds": 40, "per_minute": 1806.0},
                "extension": {"objects": 2, "total": 0, "seconds": 3, "per_minute": 40.0},
                "extras": {"objects": 1, "total": 0, "seconds": 100, "per_minute": 0.6}}
    assert compile_stats.summary(found, progress) == ("torch: 3 compiled, 1,201 remote hits, 41 s (1,204/1,204 objects,"
                                                      " 1,806 a minute); extension: 2 compiler calls, 40 a minute, 3 s;"
                                                      " extras: 1 compiler call, 1 a minute, 100 s")
    assert compile_stats.record_summary(compile_stats.to_record(found), {}) == "torch: 3 compiled, 1,201 remote hits, 41 s"


def test_a_build_that_compiled_nothing_has_no_counts():
    assert compile_stats.read(["#5 CACHED\n", "Built x\n"]) == {}
    assert compile_stats.summary({}) == ""


def test_the_script_counts_its_compiles_from_ccaches_stats_log(tmp_path):
    """build_source.sh's counting, run on a stats log as ccache 4.7 writes it (a counter ID per line
    after each compiled file's "# FILE"): a miss is a compile, the storage hits are hits."""
    script = (ROOT / "docker/common/build_source.sh").read_text()
    counting = script[script.index("    count() {"):script.index('    rm -f "$stats_log"')]
    (tmp_path / "stats.log").write_text("# a.c\ncache_miss\nlocal_storage_miss\nremote_storage_error\n"
                                        "# b.c\ndirect_cache_hit\nremote_storage_hit\n# c.c\ndirect_cache_hit\n"
                                        "local_storage_hit\n# d.c\ncache_miss\nremote_storage_timeout\n")
    printed = subprocess.run(["bash", "-c", f"set -euo pipefail; role=torch; stats_log={tmp_path / 'stats.log'};"
                              f" started=$SECONDS; TORCHBAKE_COMPILE_CACHE_SHARED=yes\n{counting}"],
                             capture_output=True, text=True, check=True).stdout
    (found,) = compile_stats.read([printed]).values()
    assert (found.compiled, found.local_hits, found.remote_hits, found.store_errors, found.remote) == (2, 1, 1, 2, True)
    assert found.seconds in (0, 1), printed  # bash's SECONDS since the step started


@pytest.mark.parametrize(("version", "exported", "says"), [
    ("4.7.5", {"CCACHE_REMOTE_STORAGE": "redis://h", "CCACHE_RESHARE": "true", "CCACHE_SECONDARY_STORAGE": "",
               "SHARED": "yes", "DIR": "/cache"}, "a remote storage besides the cache mount"),
    ("4.5.1", {"CCACHE_REMOTE_STORAGE": "", "CCACHE_RESHARE": "", "CCACHE_SECONDARY_STORAGE": "redis://h",
               "SHARED": "yes", "DIR": "/tmp/torchbake-ccache."}, "has no reshare (4.6): the remote storage alone"),
    ("4.2", {"CCACHE_REMOTE_STORAGE": "", "CCACHE_SECONDARY_STORAGE": "", "SHARED": "", "DIR": "/cache"},
     "ccache 4.2 has no remote storage (4.4 and later): compiles are not shared"),
    ("3.7.7", {"CCACHE_REMOTE_STORAGE": "", "CCACHE_SECONDARY_STORAGE": "", "SHARED": "", "DIR": "/cache"},
     "has no remote storage (4.4 and later)"),
])
def test_the_shared_store_is_given_to_ccache_in_the_words_of_its_version(tmp_path, version, exported, says):
    """Ubuntu 22.04's ccache 4.5.1 reads the store as secondary storage and has no reshare (a hit in
    the cache mount would never reach the store); 20.04's 3.7 and Debian 11's 4.2 have no store."""
    (tmp_path / "ccache").write_text(f"#!/bin/sh\necho 'ccache version {version}'\n")
    (tmp_path / "ccache").chmod(0o755)
    (tmp_path / "remote").write_text("TORCHBAKE_COMPILE_CACHE_TOOL=ccache\nTORCHBAKE_CCACHE_STORAGE=redis://h\n")
    script = ROOT / "docker/common/compile_cache.sh"
    shown = subprocess.run(
        ["bash", "-c", f". {script}; echo \"R=$CCACHE_REMOTE_STORAGE S=${{CCACHE_SECONDARY_STORAGE:-}}"
                       f" X=${{CCACHE_RESHARE:-}} SHARED=$TORCHBAKE_COMPILE_CACHE_SHARED DIR=$CCACHE_DIR\""],
        capture_output=True, text=True, check=True,
        env={"PATH": f"{tmp_path}:/usr/bin:/bin", "CCACHE_DIR": "/cache", "CCACHE_REMOTE_STORAGE": "",
             "TORCHBAKE_COMPILE_CACHE_FILE": str(tmp_path / "remote")}).stdout
    assert says in shown, shown
    values = dict(part.split("=", 1) for part in shown.splitlines()[-1].split(" "))
    assert values["R"] == exported["CCACHE_REMOTE_STORAGE"] and values["S"] == exported["CCACHE_SECONDARY_STORAGE"]
    assert values["SHARED"] == exported["SHARED"] and values["DIR"].startswith(exported["DIR"])
    assert values["X"] == exported.get("CCACHE_RESHARE", "")
    if exported["DIR"].startswith("/tmp/"):  # the step's own cache folder is gone with the step (not in its layer)
        assert not Path(values["DIR"]).exists(), values["DIR"]


def test_build_alls_table_and_reports_carry_each_cells_compiles(tmp_path):
    counts = compile_stats.to_record({"torch": Compiles(3, 0, 1201, 0, True, 41)})
    progress = {"torch": {"objects": 1204, "total": 4810, "seconds": 41, "per_minute": 1762.0}}
    results = {"a-dev": runner.CellResult(id="a-dev", image="x/a:dev", status=Status.BUILT, reason="new",
                                          compiles=counts, compile_progress=progress),
               "b-release": runner.CellResult(id="b-release", image="x/b:r", status=Status.BUILT, reason="new")}
    console = Console(file=io.StringIO(), width=300)
    console.print(runner.summary_table(results))
    assert "torch: 3 compiled, 1,201 remote hits, 41 s (1,204/4,810 objects, 1,762 a minute)" in console.file.getvalue()
    runner.write_json(tmp_path / "r.json", results, datetime.now())
    assert json.loads((tmp_path / "r.json").read_text())["cells"][0]["compiles"] == {
        "torch": {"compiled": 3, "local_hits": 0, "remote_hits": 1201, "store_errors": 0, "remote": True, "seconds": 41}}
    assert json.loads((tmp_path / "r.json").read_text())["cells"][0]["compile_progress"] == progress
    runner.write_junit(tmp_path / "r.xml", results)
    out = ElementTree.parse(tmp_path / "r.xml").getroot().find("testcase[@name='a-dev']/system-out").text
    assert out.endswith("compiled: torch: 3 compiled, 1,201 remote hits, 41 s (1,204/4,810 objects, 1,762 a minute)")
    assert "compiled" not in ElementTree.parse(tmp_path / "r.xml").getroot().find(
        "testcase[@name='b-release']/system-out").text.split(":", 1)[1]


def test_requiring_the_store_without_one_names_the_value_missing_before_any_work(tmp_path):
    from tests.conftest import run_invoke

    config = tmp_path / "dev.toml"
    config.write_text('[build]\nvariant = "dev"\n[image]\nbase = "debian:bookworm"\n')
    result = run_invoke("build", "--config", str(config), "--require-compile-cache", "--dry-run")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "dev.compile_cache: --require-compile-cache ([dev] compile_cache_required) requires the compile cache's store" in result.stderr
    assert "Traceback" not in result.stderr and "docker" not in result.stdout
