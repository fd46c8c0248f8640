"""Running matrix cells: order, --keep-going / --fail-fast, blocked dependents, reports.
The engine is replaced by a fake build function (the real one is exercised in tests/e2e)."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ElementTree
from datetime import datetime

import pytest
from rich.console import Console

from torchbake.building.builder import BuildResult
from torchbake.core import output
from torchbake.core.errors import BuildError, EngineError, RegistryError
from torchbake.core.status import Status
from torchbake.fleet import runner
from torchbake.fleet.matrix import Cell


def cell(cell_id: str, *deps: str) -> Cell:
    return Cell(id=cell_id, profile="p", variant="release", python="3.11", image=f"x/{cell_id}:t",
                config_files=(), depends_on=deps)


CELLS = [cell("a-base"), cell("a-dev", "a-base"), cell("b-release"), cell("c-release")]


def run_matrix(monkeypatch, tmp_path, failing: set[str], error=BuildError, **options):
    order = []

    def fake_build(plan, client, *, skip_unchanged, log_file, publish):
        order.append(plan)
        log_file.write_text("step 1\nERROR: no matching distribution for x\n" if plan in failing else "ok\n")
        if plan in failing:
            raise error(f"{plan} broke")
        return BuildResult(image=f"x/{plan}:t", image_id="sha256:" + "1" * 64, size_bytes=10**9, log_file=log_file,
                           input_hash="h", seconds=1.0, status=Status.BUILT, reason="new")

    monkeypatch.setattr(runner, "build_image", fake_build)
    plans = {c.id: c.id for c in CELLS}
    run = runner.MatrixRun(CELLS, plans, client=NoImages(), channel=output.Channel(Console(file=io.StringIO())),
                           log_dir=tmp_path, **options)
    return run.run(), order


class NoImages:
    """An engine that holds no image yet (the tags the cells build are new)."""

    def inspect_image(self, reference):
        return None


def test_all_built_in_dependency_order(monkeypatch, tmp_path):
    results, order = run_matrix(monkeypatch, tmp_path, set())
    assert order.index("a-base") < order.index("a-dev")
    assert {r.status for r in results.values()} == {"built"}
    assert runner.exit_status(results) == 0


def test_keep_going_blocks_only_dependents(monkeypatch, tmp_path):
    results, _ = run_matrix(monkeypatch, tmp_path, {"a-base"}, keep_going=True)
    assert {k: r.status for k, r in results.items()} == {
        "a-base": "failed", "a-dev": "blocked", "b-release": "built", "c-release": "built"}
    assert results["a-base"].error == "ERROR: no matching distribution for x"
    assert runner.exit_status(results) == 1


def test_fail_fast_stops(monkeypatch, tmp_path):
    results, order = run_matrix(monkeypatch, tmp_path, {"a-base"}, keep_going=False)
    assert order == ["a-base"]
    assert results["b-release"].status == "not run" and results["a-dev"].status in ("blocked", "not run")


@pytest.mark.parametrize("jobs", [2, 4])
def test_parallel_jobs_finish_everything(monkeypatch, tmp_path, jobs):
    results, order = run_matrix(monkeypatch, tmp_path, set(), jobs=jobs)
    assert sorted(order) == sorted(c.id for c in CELLS) and order.index("a-base") < order.index("a-dev")


def test_reports(monkeypatch, tmp_path):
    results, _ = run_matrix(monkeypatch, tmp_path, {"c-release"})
    from datetime import datetime

    runner.write_json(tmp_path / "r.json", results, datetime.now())
    data = json.loads((tmp_path / "r.json").read_text())
    assert [c["status"] for c in data["cells"]] == ["built", "built", "built", "failed"]
    runner.write_junit(tmp_path / "r.xml", results)
    suite = ElementTree.parse(tmp_path / "r.xml").getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("4", "1")
    failure = suite.find("testcase[@name='c-release']/failure")
    assert failure is not None and failure.get("message") == "ERROR: no matching distribution for x"


def test_a_dependent_of_a_rebuilt_cell_is_not_skipped(monkeypatch, tmp_path):
    """The skip pre-check of a dev cell was made against the old base: it must not count."""
    monkeypatch.setattr(runner.MatrixRun, "_quick_check",
                        lambda self, cell: None if cell.id == "a-base" else (Status.UNCHANGED, "sha256:" + "2" * 64, "h"))

    class Client:
        def inspect_image(self, ref):
            return {"Size": 1}

    built = []

    def fake_build(plan, client, *, skip_unchanged, log_file, publish):
        built.append(plan)
        return BuildResult(image=plan, image_id="sha256:" + "1" * 64, size_bytes=1, log_file=log_file,
                           input_hash="h", seconds=1.0)

    monkeypatch.setattr(runner, "build_image", fake_build)
    run = runner.MatrixRun(CELLS, {c.id: c.id for c in CELLS}, client=Client(), channel=output.Channel(Console(file=io.StringIO())),
                           log_dir=tmp_path)
    results = run.run()
    assert built == ["a-base", "a-dev"]
    assert results["b-release"].status == "unchanged" and results["a-dev"].status == "built"


@pytest.mark.parametrize(("errors", "code"), [
    ({"b-release": BuildError}, 1),
    ({"b-release": EngineError}, 4),  # the engine stopped answering: the night's machinery, not a cell
    ({"b-release": RegistryError}, 10),
    ({"b-release": BuildError, "c-release": RegistryError}, 10),
    ({"b-release": RegistryError, "c-release": EngineError}, 4),
])
def test_the_exit_status_names_the_engine_or_registry_when_they_failed(monkeypatch, tmp_path, errors, code):
    results = {}
    for cell_id, error in errors.items():
        found, _ = run_matrix(monkeypatch, tmp_path, {cell_id}, error=error)
        results[cell_id] = found[cell_id]
    results["a-base"] = found["a-base"]
    assert results["a-base"].status == "built"
    assert runner.exit_status(results) == code


def test_the_first_error_line_is_the_failure_not_a_missing_cache_image():
    log = ("+ docker buildx build --load --cache-to type=registry,ref=r/x-buildcache:1,mode=max,ignore-error=true .\n"
           "#4 importing cache manifest from 127.0.0.1:5000/team/x:release-py311\n"
           "#4 ERROR: 127.0.0.1:5000/team/x:release-py311: not found\n"
           "#9 [7/9] RUN bash /opt/torchbake/common/install_toolkits.sh\n"
           "#9 0.4 installer failed\n"
           "#9 ERROR: executor failed running [/bin/sh -c bash install_toolkits.sh]: exit code: 3\n")
    assert runner.first_error_line(log) == "#9 ERROR: executor failed running [/bin/sh -c bash install_toolkits.sh]: exit code: 3"


def test_a_rebuilt_cell_says_what_changed_against_the_image_its_tag_held(monkeypatch, tmp_path):
    """From what this host recorded of both images (their inventories beside their manifests): one
    line in the summary table, the whole diff in the JSON report."""
    from torchbake.supply_chain import attestations
    from torchbake.supply_chain.inventory import Inventory, Layer, PythonDist

    old_id, new_id = "sha256:" + "1" * 64, "sha256:" + "2" * 64

    def record(image_id: str, extension: str, layers: tuple) -> None:
        manifest = tmp_path / f"{image_id[7:15]}.manifest.json"
        inventory = Inventory(pythons=(PythonDist("torch", "2.13.0+cpu", "/opt/venv"),
                                       PythonDist("vendor-ext", extension, "/opt/venv")),
                              main_python="/opt/venv/bin/python", layers=layers, image_id=image_id)
        paths = attestations.write_beside(manifest, {attestations.INVENTORY: json.dumps(inventory.to_json())})
        manifest.write_text(json.dumps({"image_id": image_id, "attestations": {"x/b-release:t": paths}}))

    torch_layer = Layer("sha256:" + "a" * 64, 900_000_000)
    record(old_id, "1.0.0", (torch_layer, Layer("sha256:" + "b" * 64, 1000)))
    record(new_id, "1.0.1", (torch_layer, Layer("sha256:" + "c" * 64, 3600)))

    class Client:
        def inspect_image(self, reference):
            return {"Id": old_id} if reference == "x/b-release:t" else None

    gpus = {"x/b-release:t": [{"name": "GPU checks", "status": "skip", "detail": "not run: no GPU"}]}

    def fake_build(plan, client, *, skip_unchanged, log_file, publish):
        return BuildResult(image=f"x/{plan}:t", image_id=new_id, size_bytes=1, log_file=log_file, input_hash="h",
                           seconds=1.0, status=Status.BUILT, gpu_checks=gpus)

    monkeypatch.setattr(runner, "build_image", fake_build)
    cells = [cell("b-release")]
    run = runner.MatrixRun(cells, {"b-release": "b-release"}, client=Client(),
                           channel=output.Channel(Console(file=io.StringIO())), log_dir=tmp_path)
    result = run.run()["b-release"]
    assert result.changed == "vendor-ext 1.0.0 → 1.0.1; 3.6 kB new layers"
    assert result.diff["layers"]["new_bytes"] == 3600 and result.diff["layers"]["shared_bytes"] == 900_000_000
    console = Console(file=io.StringIO(), width=200)
    console.print(runner.summary_table(run.results))
    assert "changed" in console.file.getvalue() and "vendor-ext 1.0.0 → 1.0.1" in console.file.getvalue()
    runner.write_json(tmp_path / "r.json", run.results, datetime.now())
    reported = json.loads((tmp_path / "r.json").read_text())["cells"][0]
    assert reported["diff"]["changes"][0]["name"] == "vendor-ext"
    assert reported["gpu_checks"] == gpus  # the GPU rows of the cell's verify, when it ran them


def test_an_unchanged_cell_is_pushed_with_its_own_log(monkeypatch, tmp_path):
    """A cell this engine already holds with its inputs is still pushed (--push), into a log of its own."""
    monkeypatch.setattr(runner.MatrixRun, "_quick_check", lambda self, cell: (Status.UNCHANGED, "sha256:" + "2" * 64, "h"))
    pushed = []
    monkeypatch.setattr(runner, "publish_showing_progress", lambda plan, client, input_hash, log, channel:
                        pushed.append((plan, log)) or "sha256:" + "3" * 64)

    class Client:
        def inspect_image(self, ref):
            return {"Size": 1}

    run = runner.MatrixRun(CELLS[2:], {c.id: c.id for c in CELLS}, client=Client(),
                           channel=output.Channel(Console(file=io.StringIO())), log_dir=tmp_path, push=True)
    results = run.run()
    assert {r.status for r in results.values()} == {"unchanged"}
    assert [plan for plan, _ in pushed] == ["b-release", "c-release"]
    assert all(log.parent == tmp_path and log.name.startswith(plan) for plan, log in pushed)
    assert results["b-release"].digest == "sha256:" + "3" * 64


def _platform_cells() -> list[Cell]:
    return [Cell(id=f"p-release-py311-{arch}", profile="p", variant="release", python="3.11",
                 image=f"r.example/x:t-{arch}", config_files=(), platform=f"linux/{arch}", joined="r.example/x:t",
                 joins=("linux/amd64", "linux/arm64")) for arch in ("amd64", "arm64")]


def test_an_images_platforms_are_joined_after_they_are_built_and_a_failed_one_blocks_the_join(monkeypatch, tmp_path):
    joined = []
    monkeypatch.setattr(runner.platform_builds, "join", lambda client, target, images, compression, log:
                        joined.append((target, [(p.name, image) for p, image in images])))

    class Plan:
        class build_options:
            compression = "zstd"

    def fake_build(plan, client, *, skip_unchanged, log_file, publish):
        if plan == "broken":
            raise BuildError("broke")
        return BuildResult(image="i", image_id="sha256:" + "1" * 64, size_bytes=1, log_file=log_file, input_hash="h",
                           seconds=1.0, status=Status.BUILT, reason="new")

    monkeypatch.setattr(runner, "build_image", fake_build)

    class Client:
        def inspect_image(self, ref):
            return {"Id": "sha256:" + "9" * 64} if ref == "r.example/x:t" else None

    cells = _platform_cells()
    channel = output.Channel(Console(file=io.StringIO()))
    results = runner.MatrixRun(cells, {c.id: Plan() for c in cells}, client=Client(), channel=channel,
                               log_dir=tmp_path).run()
    assert list(results) == ["p-release-py311-amd64", "p-release-py311-arm64", "p-release-py311"]
    assert (results["p-release-py311"].status, results["p-release-py311"].image_id) == ("joined", "sha256:" + "9" * 64)
    assert joined == [("r.example/x:t", [("linux/amd64", "r.example/x:t-amd64"), ("linux/arm64", "r.example/x:t-arm64")])]
    plans = {cells[0].id: Plan(), cells[1].id: "broken"}
    results = runner.MatrixRun(cells, plans, client=Client(), channel=channel, log_dir=tmp_path).run()
    assert (results["p-release-py311"].status, results["p-release-py311"].reason) == (
        "blocked", "p-release-py311-arm64 did not build")
    assert len(joined) == 1 and runner.exit_status(results) == 1
