"""Expanding the nightly matrix into ordered cells (pure functions, no engine)."""

from __future__ import annotations

import json

import pytest

from torchbake.core.errors import ConfigurationError, RegistryError
from torchbake.fleet import costs, matrix
from torchbake.planning.config import CONFIG_DIR

MATRIX = {
    "profiles": ["cpu", "musa"],
    "pythons": ["3.10", "3.11"],
    "variants": ["release", "dev", "base"],
    "registry": "localhost:5000/ml",
    "name": "{registry}torchbake/{profile}",
    "tag": "{variant}-py{py}",
    "exclude": ["cpu-dev-*", "cpu-base-*"],
    "options": {
        "release": {"wheels.torch": "https://h.invalid/torch-2.0.0-{cp}-{cp}-linux_x86_64.whl", "wheels.extension": ""},
        "all": {"toolkits.musa_toolkits_url": "https://h.invalid/musa-{profile}.tar.gz"},
    },
}


def test_cells_in_build_order_with_templates_and_dependencies():
    cells = matrix.expand(MATRIX)
    assert [c.id for c in cells] == [
        "cpu-release-py310", "cpu-release-py311",
        "musa-base-py310", "musa-dev-py310", "musa-release-py310",
        "musa-base-py311", "musa-dev-py311", "musa-release-py311",
    ]
    by_id = {c.id: c for c in cells}
    release = by_id["cpu-release-py310"]
    assert release.image == "localhost:5000/ml/torchbake/cpu:release-py310"
    assert release.overrides["wheels.torch"] == "https://h.invalid/torch-2.0.0-cp310-cp310-linux_x86_64.whl"
    assert "wheels.extension" not in release.overrides  # empty template = the profile's value
    assert release.overrides["build.variant"] == "release" and release.overrides["python.version"] == "3.10"
    dev = by_id["musa-dev-py311"]
    assert dev.depends_on == ("musa-base-py311",)
    assert dev.overrides["image.base"] == "localhost:5000/ml/torchbake/musa:base-py311"
    assert dev.overrides["toolkits.musa_toolkits_url"] == "https://h.invalid/musa-musa.tar.gz"
    assert dev.config_files == (str(CONFIG_DIR / "musa.toml"),)


def test_select_brings_dependencies_along():
    cells = matrix.expand(MATRIX)
    chosen = matrix.select(cells, only=["musa-dev-py310"])
    assert [c.id for c in chosen] == ["musa-base-py310", "musa-dev-py310"]
    assert [c.id for c in matrix.select(cells, skip=["musa-*"])] == ["cpu-release-py310", "cpu-release-py311"]
    with pytest.raises(ConfigurationError, match=r"--only 'rocm-\*' matches no cell"):
        matrix.select(cells, only=["rocm-*"])


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_shards_cover_the_plan_exactly_once_and_keep_groups_together(count):
    cells = matrix.expand(MATRIX)
    slices = [matrix.shard(cells, i, count) for i in range(1, count + 1)]
    ids = [c.id for part in slices for c in part]
    assert sorted(ids) == sorted(c.id for c in cells)
    for part in slices:
        present = {c.id for c in part}
        assert all(dep in present for c in part for dep in c.depends_on)
    assert slices == [matrix.shard(cells, i, count) for i in range(1, count + 1)]  # deterministic


def test_github_matrix_json():
    cells = matrix.expand(MATRIX)
    data = json.loads(matrix.github_matrix(cells, 2))
    assert data["include"][0]["shard"] == "1/2"
    assert sorted(" ".join(e["cells"] for e in data["include"]).split()) == sorted(c.id for c in cells)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"pyhtons": ["3.10"]}, "unknown [matrix] key 'pyhtons'. Did you mean 'pythons'?"),
        ({"pythons": []}, "[matrix] pythons is empty"),
        ({"variants": ["nightly"]}, "variant 'nightly' is not one of base, dev, release"),
        ({"profiles": ["ipu"]}, "profile 'ipu' has no"),
        ({"tag": "{variant}-{pyver}"}, "template '{variant}-{pyver}' uses an unknown field"),
        ({"tag": "latest"}, "two cells would build the same image"),
        ({"options": {"release": {"wheels.tor": "x"}}}, "[matrix.options.release] has unknown option 'wheels.tor'"),
    ],
)
def test_bad_matrices(change, message):
    with pytest.raises(ConfigurationError) as info:
        matrix.expand({**MATRIX, **change})
    assert message in str(info.value)


def test_shard_syntax():
    assert matrix.parse_shard("2/3") == (2, 3)
    for bad in ("0/2", "3/2", "1-2", "", "\u0661/\u0664"):  # (another script's digits: Python's int() reads them)
        with pytest.raises(ConfigurationError, match="expected I/N"):
            matrix.parse_shard(bad)


def test_shipped_nightly_matrix_expands():
    cells = matrix.expand(matrix.load_matrix(CONFIG_DIR / "nightly.toml"))
    # build_all.sh's matrix: Python 3.8, 3.9 and 3.10 × base, dev, release
    assert [c.id for c in cells] == [f"musa-{v}-py{py}" for py in ("38", "39", "310") for v in ("base", "dev", "release")]
    assert cells[1].overrides["image.base"] == "torchbake/torch-musa:base-py38" and cells[1].depends_on == ("musa-base-py38",)


PLATFORMS = {**MATRIX, "platforms": ["arm64", "linux/amd64"], "exclude": ["cpu-dev-*", "cpu-base-*", "musa-release-*"],
             "pythons": ["3.11"]}


def test_several_platforms_give_one_cell_per_platform_joined_under_the_image_tag():
    cells = matrix.expand(PLATFORMS)
    assert [c.id for c in cells] == [
        "cpu-release-py311-amd64", "cpu-release-py311-arm64",
        "musa-base-py311-amd64", "musa-base-py311-arm64", "musa-dev-py311-amd64", "musa-dev-py311-arm64",
    ]  # the platforms in their one canonical order, whatever order they were given in
    by_id = {c.id: c for c in cells}
    arm = by_id["cpu-release-py311-arm64"]
    assert arm.image == "localhost:5000/ml/torchbake/cpu:release-py311-arm64"
    assert arm.overrides["image.platforms"] == ["linux/arm64"] and arm.overrides["image.tag"] == "release-py311-arm64"
    assert (arm.platform, arm.joined, arm.joins, arm.family, arm.runner) == (
        "linux/arm64", "localhost:5000/ml/torchbake/cpu:release-py311", ("linux/amd64", "linux/arm64"),
        "cpu-release-py311", "ubuntu-24.04-arm")
    dev = by_id["musa-dev-py311-arm64"]  # FROM its own platform's base image
    assert dev.depends_on == ("musa-base-py311-arm64",)
    assert dev.overrides["image.base"] == "localhost:5000/ml/torchbake/musa:base-py311-arm64"
    assert list(matrix.families(cells)) == ["cpu-release-py311", "musa-base-py311", "musa-dev-py311"]
    # an image's id selects all its platforms; a platform's cell alone is not joined by the run
    assert [c.id for c in matrix.select(cells, only=["cpu-release-py311"])] == ["cpu-release-py311-amd64",
                                                                              "cpu-release-py311-arm64"]
    alone = matrix.on_platforms(cells, ["aarch64"])
    assert [c.id for c in alone] == ["cpu-release-py311-arm64", "musa-base-py311-arm64", "musa-dev-py311-arm64"]
    assert matrix.families(alone) == {}


def test_one_platform_keeps_the_tag_and_excluding_a_platform_leaves_it_out_of_the_index():
    (cell,) = matrix.expand({**PLATFORMS, "platforms": ["aarch64"], "profiles": ["cpu"]})
    assert (cell.id, cell.image, cell.joined) == ("cpu-release-py311", "localhost:5000/ml/torchbake/cpu:release-py311", "")
    assert cell.overrides["image.platforms"] == ["linux/arm64"]
    cells = matrix.expand({**PLATFORMS, "profiles": ["cpu"], "exclude": ["cpu-dev-*", "cpu-base-*", "*-arm64"]})
    assert [(c.id, c.joins) for c in cells] == [("cpu-release-py311-amd64", ("linux/amd64",))]


def test_github_matrix_has_each_platforms_shards_on_its_own_runner():
    cells = matrix.expand({**PLATFORMS, "runners": {"aarch64": "gh200-runner"}})
    data = json.loads(matrix.github_matrix(cells, 2))["include"]
    assert [(e["shard"], e["platform"], e["runs-on"]) for e in data] == [
        ("1/2", "linux/amd64", "ubuntu-24.04"), ("2/2", "linux/amd64", "ubuntu-24.04"),
        ("1/2", "linux/arm64", "gh200-runner"), ("2/2", "linux/arm64", "gh200-runner")]
    assert data[3]["cells"] == "cpu-release-py311-arm64"  # the shard a runner builds with --only (the workflow)
    assert data[2]["cells"] == "musa-base-py311-arm64 musa-dev-py311-arm64"  # the heaviest group first
    assert [c.id for c in matrix.shard(matrix.on_platforms(cells, ["linux/arm64"]), 2, 2)] == ["cpu-release-py311-arm64"]


@pytest.mark.parametrize(("change", "message"), [
    ({"platforms": ["linux/s390x"]}, "[matrix] platforms: 'linux/s390x' is not a platform torchbake builds; accepted:"
                                     " linux/amd64"),
    ({"platforms": "linux/arm64"}, "[matrix] platforms = 'linux/arm64': expected a list"),
    ({"runners": {"windows/amd64": "x"}}, "[matrix] runners: 'windows/amd64' is not a platform"),
    ({"runners": {"arm64": 3}}, "[matrix] runners = {'arm64': 3}: expected a table"),
])
def test_bad_platforms(change, message):
    with pytest.raises(ConfigurationError) as info:
        matrix.expand({**PLATFORMS, **change})
    assert message in str(info.value)


def test_platform_filter_names_what_the_matrix_builds():
    with pytest.raises(ConfigurationError, match=r"--platform linux/arm64: the matrix builds no image for it"):
        matrix.on_platforms(matrix.expand(MATRIX), ["arm64"])


def test_shards_are_balanced_by_expected_minutes_not_by_count():
    """Four PyTorch compiles (a base and a dev cell each) and four release cells in four shards:
    each shard gets one compile. Dealt by count, in plan order, two compiles shared a shard."""
    cells = matrix.expand({"pythons": ["3.10", "3.11", "3.12", "3.13"], "profiles": ["cpu", "musa"],
                           "variants": ["release", "base", "dev"], "exclude": ["cpu-base-*", "cpu-dev-*"]})
    slices = [matrix.shard(cells, i, 4) for i in range(1, 5)]
    assert [sum(c.variant == "dev" for c in part) for part in slices] == [1, 1, 1, 1]
    assert sorted(c.id for part in slices for c in part) == sorted(c.id for c in cells)
    minutes = [sum(c.minutes for c in part) for part in slices]
    assert max(minutes) - min(minutes) <= costs.DEFAULT_MINUTES["release"] * 2


def test_declared_minutes_by_variant_and_glob_weigh_the_cells():
    cells = matrix.expand({**MATRIX, "minutes": {"dev": 30, "musa-base-py310": 400}})
    weight = {c.id: c.minutes for c in cells}
    assert weight["musa-dev-py311"] == 30 and weight["musa-base-py310"] == 400
    assert weight["musa-base-py311"] == costs.DEFAULT_MINUTES["base"]
    assert weight["cpu-release-py310"] == costs.DEFAULT_MINUTES["release"]
    with pytest.raises(ConfigurationError, match=r"\[matrix\] minutes = \{'dev': 0\}: expected a table"):
        matrix.expand({**MATRIX, "minutes": {"dev": 0}})


def test_a_dev_cells_last_build_in_the_registry_weighs_it():
    """What the registry's provenance records a dev cell took outweighs its declared minutes; a
    registry that does not answer is said once, and the rest stays declared."""
    cells = matrix.expand({**MATRIX, "registry": "registry.example:5000"})
    statement = {"predicate": {"runDetails": {"metadata": {"startedOn": "2026-11-27T01:00:00+00:00",
                                                           "finishedOn": "2026-11-27T04:30:00+00:00"}}}}
    asked = []

    def ask(image):
        asked.append(image)
        return json.dumps(statement) if "py310" in image else None

    found = costs.costs(cells, ask, print)
    assert found["musa-dev-py310"] == costs.Cost(210.0, "registry")
    assert found["musa-dev-py311"] == costs.Cost(costs.DEFAULT_MINUTES["dev"], "declared")
    assert all("dev" in image for image in asked)  # only dev cells are asked about
    said = []

    def down(image):
        raise RegistryError("registry.example:5000 did not answer: connection refused")

    found = costs.costs(cells, down, said.append)
    assert len(said) == 1 and "did not answer" in said[0] and "declared minutes" in said[0]
    assert {cost.source for cost in found.values()} == {"declared"}


@pytest.mark.parametrize(("minutes", "says"), [
    ({"dev": float("inf")}, "a number above 0, at most 10,000"),
    ({"dev": 1e308}, "a number above 0, at most 10,000"),
    ({"devv": 3}, "[matrix] minutes key 'devv' is neither a variant (release, base, dev) nor a glob of a cell's id;"
                  " did you mean 'dev'?"),
    ({"nothing-*": 500}, "[matrix] minutes key 'nothing-*' is neither a variant"),
])
def test_minutes_that_weigh_nothing_or_everything_are_refused(minutes, says):
    """inf (or a sum past a float) ended --emit-matrix in an OverflowError traceback; a key that
    is no variant and matches no cell (a typo) weighed nothing, silently."""
    with pytest.raises(ConfigurationError) as info:
        matrix.expand({**MATRIX, "minutes": minutes})
    assert says in str(info.value)


def test_the_plan_counts_a_cell_that_starts_from_a_failing_one_as_blocked_and_says_cells_in_the_singular(
        monkeypatch, capsys):
    """A dev cell whose base cell fails already would not be built (the run marks it blocked): the
    plan says so and counts it apart, not "to build"; one cell is "1 cell", none is said plainly."""
    from torchbake.fleet import runner
    from torchbake.tasks import matrix as matrix_task

    cells = [c for c in matrix.expand(MATRIX) if c.profile == "musa" and c.python == "3.10"]
    assert [c.variant for c in cells] == ["base", "dev", "release"], [c.id for c in cells]
    said = {"base": ("fail", "sources unreachable"), "dev": ("build", "after musa-base-py310 (no base image)"),
            "release": ("build", "no image has these inputs")}
    monkeypatch.setattr(runner, "predict", lambda cell, plan, client: said[cell.variant])
    plans = {c.id: object() for c in cells}
    matrix_task._print_plan(cells, plans, {}, None, force=False)
    out = " ".join(capsys.readouterr().out.split())
    assert "Plan: 3 cells: 1 to build, 1 failing already, 1 blocked by a failing cell." in out, out
    assert "starts from musa-base-py310, which fails already: a run would not build" in out, out  # (the table folds)
    # --force builds the cells a run would skip; one that fails already still fails (sources unreachable)
    said["release"] = ("skip", "unchanged")
    matrix_task._print_plan(cells, plans, {}, None, force=True)
    assert "Plan: 3 cells: 1 to build, 1 failing already, 1 blocked by a failing cell." in " ".join(
        capsys.readouterr().out.split())
    matrix_task._print_plan(cells[2:], plans, {}, None, force=False)
    assert "Plan: 1 cell: 1 unchanged." in " ".join(capsys.readouterr().out.split())
    said["release"] = ("build", "no image has these inputs")
    matrix_task._print_plan(cells[2:], plans, {}, None, force=False)
    assert "Plan: 1 cell: 1 to build." in " ".join(capsys.readouterr().out.split())
    matrix_task._print_plan(cells[2:], plans, {cells[2].id: ["toolkits.musa_toolkits_url"]}, None, force=False)
    assert "1 of 1 cell needs values that are not set" in " ".join(capsys.readouterr().out.split())
    matrix_task._print_plan([], plans, {}, None, force=False)
    assert "Plan: no cells (none selected)." in " ".join(capsys.readouterr().out.split())
