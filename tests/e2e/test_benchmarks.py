"""The benchmarks run on the project's engine (issue 38): each starts (its --help), none reads the
engine's files (the containerd image store has no graph-driver layer database: ask the engine),
and torch_once's layer sizes come from the engine itself."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

BENCHMARKS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_"))  # _steps: a helper


@pytest.mark.parametrize("script", BENCHMARKS, ids=[p.name for p in BENCHMARKS])
def test_every_benchmark_starts_and_asks_the_engine_not_its_files(script):
    shown = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=ROOT,
                           stdin=subprocess.DEVNULL, timeout=120)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    text = script.read_text()
    for engine_file in ("layerdb", "DockerRootDir", "/var/lib/docker", "/var/lib/containerd"):
        assert engine_file not in text, f"{script.name} reads the engine's files ({engine_file})"


def test_torch_once_measures_layers_by_asking_the_engine(base_image):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import torch_once
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    found = torch_once.layers(base_image)
    assert len(found) == 1 and found[0][0].startswith("sha256:") and found[0][1] > 10_000_000, found
