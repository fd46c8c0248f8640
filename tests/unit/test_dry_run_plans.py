"""The real profiles (upstream repos and tags) planned with --dry-run, compared with the exact
expected plans in tests/unit/expected/: a change to what torchbake would build shows in review."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_invoke

EXPECTED = Path(__file__).parent / "expected"
TOOLKITS = ("-m", "https://vendor.invalid/musa_toolkits.tar.gz", "--mudnn-url", "https://vendor.invalid/mudnn.tar.gz",
            "--mccl-url", "https://vendor.invalid/mccl.tar.gz")

CASES = {
    "musa-build-base": ("build-base", "--config", "configs/musa.toml"),
    "musa-build-dev": ("build", "--config", "configs/musa.toml", *TOOLKITS),
    "cuda-build-base": ("build-base", "--config", "configs/cuda.toml"),
    "cuda-build-dev": ("build", "--config", "configs/cuda.toml"),
    "cpu-build-release": ("build", "--release"),
    "rocm-build-dev": ("build", "--config", "configs/rocm.toml"),
    "rocm-build-release": ("build", "--config", "configs/rocm.toml", "--release", "--torch-whl-url",
                           "https://vendor.invalid/torch-2.9.0+rocm6.4-cp310-cp310-linux_x86_64.whl"),
    "musa-build-release": ("build", "--config", "configs/musa.toml", "--release", *TOOLKITS, "--torch-whl-url",
                           "https://vendor.invalid/torch-2.0.0-cp310-cp310-linux_x86_64.whl", "--torch-musa-whl-url",
                           "https://vendor.invalid/torch_musa-1.5.1-cp310-cp310-linux_x86_64.whl"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_dry_run_plan_is_exactly_the_expected_one(case):
    result = run_invoke(*CASES[case], "--dry-run", "--docker", "/usr/bin/docker")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (EXPECTED / f"{case}.txt").read_text()
