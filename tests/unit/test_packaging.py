"""What the wheel carries (pyproject.toml): every subpackage, and every file of the profiles,
Dockerfile templates and in-image scripts that torchbake reads at run time (torchbake/core/data.py).
The installed wheel itself is tested against a real engine in tests/e2e/test_installed.py."""

from __future__ import annotations

import fnmatch
import tomllib

from tests.conftest import ROOT
from torchbake.core import data


def setuptools_table() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_subpackage_is_in_the_wheel():
    packages = set(setuptools_table()["packages"])
    found = {".".join(path.parent.relative_to(ROOT).parts) for path in (ROOT / "torchbake").rglob("__init__.py")}
    assert found <= packages, f"missing from pyproject.toml [tool.setuptools] packages: {sorted(found - packages)}"


def test_every_file_torchbake_reads_at_run_time_is_in_the_wheel_where_data_py_looks():
    table = setuptools_table()
    carried = set()
    for package, folder in table["package-dir"].items():
        assert package.startswith("torchbake._data."), package
        assert package.removeprefix("torchbake._data.").replace(".", "/") == folder  # _data/<folder>, as data.py reads
        for path in (ROOT / folder).iterdir():
            if any(fnmatch.fnmatch(path.name, pattern) for pattern in table["package-data"][package]):
                carried.add(path)
    needed = {p for folder in (data.CONFIG_DIR, data.COMMON_DIR, data.DOCKER_DIR / "ubuntu") for p in folder.iterdir()
              if p.is_file() and "__pycache__" not in p.parts}
    assert needed, "data.py finds no files"
    assert needed <= carried, f"not in the wheel: {sorted(str(p.relative_to(ROOT)) for p in needed - carried)}"
