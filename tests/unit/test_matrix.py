"""Expanding the nightly matrix into ordered cells (pure functions, no engine)."""

from __future__ import annotations

import json

import pytest

from torchbake import matrix
from torchbake.config import CONFIG_DIR
from torchbake.errors import ConfigurationError

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
        ({"profiles": ["tpu"]}, "profile 'tpu' has no"),
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
    for bad in ("0/2", "3/2", "1-2", ""):
        with pytest.raises(ConfigurationError, match="expected I/N"):
            matrix.parse_shard(bad)


def test_shipped_nightly_matrix_expands():
    cells = matrix.expand(matrix.load_matrix(CONFIG_DIR / "nightly.toml"))
    # build_all.sh's matrix: Python 3.8, 3.9 and 3.10 × base, dev, release
    assert [c.id for c in cells] == [f"musa-{v}-py{py}" for py in ("38", "39", "310") for v in ("base", "dev", "release")]
    assert cells[1].overrides["image.base"] == "torchbake/torch-musa:base-py38" and cells[1].depends_on == ("musa-base-py38",)
