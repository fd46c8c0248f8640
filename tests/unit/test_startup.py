"""The command starts at once: listing the tasks and `--help` import only what invoke itself
needs (its floor: a tasks.py of one empty task) and torchbake's own modules; rich, the engine's
client, cryptography and the SBOM libraries are imported by the task bodies that use them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

# torchbake's own modules a listing never needs: the engine's checks, signing, SBOM writers, builders
NOT_WHEN_LISTING = ("torchbake.checks.verify", "torchbake.checks.signatures", "torchbake.supply_chain.signing",
                    "torchbake.supply_chain.sbom", "torchbake.building", "torchbake.adapters.docker_cli",
                    "torchbake.variants")


def imported(argv: list[str], cwd: Path) -> set[str]:
    """The modules a command imports, from Python's own record (-X importtime)."""
    ran = subprocess.run([sys.executable, "-X", "importtime", *argv], cwd=cwd, capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=60)
    assert ran.returncode == 0, ran.stderr[-2000:]
    names = {line.rsplit("|", 1)[1].strip() for line in ran.stderr.splitlines() if line.startswith("import time:")}
    names.discard("imported package")
    assert names, ran.stderr[-2000:]
    return names


@pytest.fixture(scope="module")
def floor(tmp_path_factory) -> set[str]:
    folder = tmp_path_factory.mktemp("floor")
    (folder / "tasks.py").write_text("from invoke import task\n\n\n@task\ndef hello(c):\n    pass\n")
    return imported(["-m", "invoke", "--list"], folder)


def outside_the_floor(names: set[str], floor: set[str]) -> set[str]:
    """Top-level packages beyond the floor, the standard library and torchbake itself."""
    tops = {name.split(".")[0] for name in names - floor}
    return {top for top in tops if top not in sys.stdlib_module_names and top not in ("torchbake", "tasks")
            and not top.startswith("__editable__")}


@pytest.mark.parametrize("argv", [["-m", "invoke", "--list"], ["-m", "invoke", "build", "--help"],
                                  ["-c", "import sys; from torchbake.program import main; sys.argv = ['torchbake', '--help']; main()"]], ids=["list", "build-help", "torchbake-help"])
def test_listing_and_help_import_no_library_the_floor_does_not(argv, floor):
    names = imported(argv, ROOT)
    assert outside_the_floor(names, floor) == set()
    assert sorted(name for name in names if any(name == m or name.startswith(m + ".") for m in NOT_WHEN_LISTING)) == []


def test_the_check_sees_a_library_imported_at_the_top():
    """The guard can fail: a module that imports rich at its top is seen."""
    names = imported(["-c", "import rich.console"], ROOT)
    assert "rich" in outside_the_floor(names, set())
