"""Judging the facts a verify container reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from torchbake.checks import verify
from torchbake.checks.verify import FAIL, PASS, SKIP, Expectations, evaluate
from torchbake.families import FAMILIES
from torchbake.supply_chain import inventory

GOOD = {
    "python": "3.11", "python_full": "3.11.2", "torch": "2.13.0+cpu", "cuda": None, "hip": None,
    "arch_flags": None, "gpu": False, "pip_check": [0, "No broken requirements found.\n"],
    "constraint": [1, "ERROR: Cannot install torch==0.0.1 because ...\nThe user requested (constraint) torch==2.13.0+cpu\n", "/etc/torchbake/constraints.txt"],
}


def statuses(facts, expected):
    return {c.name: c.status for c in evaluate(facts, expected)}


def test_all_pass():
    assert statuses(GOOD, Expectations(python="3.11", torch="2.13.0+cpu")) == {
        "python version": PASS, "torch imports": PASS, "torch version": PASS, "pip check": PASS, "torch pinned": PASS,
    }


def test_failures_are_reported():
    facts = {**GOOD, "python": "3.10", "pip_check": [1, "x 1.0 requires y"], "constraint": [0, "Would install torch-0.0.1", ""]}
    result = statuses(facts, Expectations(python="3.11", torch="2.12.0"))
    assert result == {"python version": FAIL, "torch imports": PASS, "torch version": FAIL, "pip check": FAIL, "torch pinned": FAIL}


def test_extension_import_failure():
    facts = {**GOOD, "extension_error": "ModuleNotFoundError('torch_musa')"}
    assert statuses(facts, Expectations(python="3.11", torch="2.13.0+cpu", extension_module="torch_musa"))["torch_musa imports"] == FAIL


def test_cuda_arch_list():
    expected = Expectations(python="3.11", torch="2.6.0+cu124", arch_lists=(("torchbake.cuda-arch-list", "8.0;9.0+PTX"),),
                            profile="cuda")
    cuda = {**GOOD, "torch": "2.6.0+cu124", "cuda": "12.4", "arch_flags": "-gencode compute=compute_80,code=sm_80 sm_90 compute_90"}
    assert statuses(cuda, expected)["CUDA arch list"] == PASS
    missing = {**cuda, "arch_flags": "sm_80 sm_86"}
    check = [c for c in evaluate(missing, expected) if c.name == "CUDA arch list"][0]
    assert check.status == FAIL and "missing 9.0+PTX" in check.detail
    no_info = {**cuda, "arch_flags": ""}
    assert statuses(no_info, expected)["CUDA arch list"] == SKIP
    assert statuses(GOOD, expected)["CUDA arch list"] == FAIL  # a CPU torch in a CUDA image


def test_expectations_from_labels_with_overrides():
    labels = {"torchbake.python": "3.11", "torchbake.torch-version": "2.13.0+cpu", "torchbake.profile": "cpu"}
    assert Expectations.from_labels(labels, python="3.12", torch=None) == Expectations(python="3.12", torch="2.13.0+cpu")


@pytest.mark.parametrize(("found", "expected", "matches"), [
    ("2.13.0+cpu", "2.13.0+cpu", True),
    ("2.13.0+cu130", "2.13.0", True),  # PyPI's wheel: version 2.13.0, torch.__version__ with its build
    ("2.13.0+cu130", "2.13.0+cpu", False),  # a recorded build must be the one found
    ("2.13.0", "2.13.0+cpu", False),
    ("2.13.1+cu130", "2.13.0", False),
    ("not a version", "2.13.0", False),
])
def test_the_torch_version_found_matches_the_one_recorded(found, expected, matches):
    from torchbake.checks.verify import version_matches

    assert version_matches(found, expected) is matches


def test_the_probe_leaves_nothing_in_the_temporary_folder(tmp_path):
    """The probe offers pip a fake torch wheel from a folder of its own, and removes it: run on this
    host's Python (as where a container's /tmp is the host's), it left one at every verify."""
    arch_env = f"ARCH_ENV = {tuple(family.arch.env for family in FAMILIES.values())!r}\n"
    done = subprocess.run([sys.executable, "-c", inventory.script() + arch_env + verify.PROBE_SCRIPT],
                          capture_output=True, text=True, env={**os.environ, "TMPDIR": str(tmp_path)}, timeout=120)
    facts = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("TORCHBAKE-VERIFY ")).split(" ", 1)[1])
    assert facts["constraint"][0] == 0, facts["constraint"]  # pip took the fake wheel: the folder was there
    assert list(tmp_path.iterdir()) == []
