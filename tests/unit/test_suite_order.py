"""The suite's own scheduling: the modules named longest-first exist (a renamed module would
silently lose its place and could start last)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONGEST_FIRST


def test_every_module_named_longest_first_exists():
    e2e = {path.name for path in (Path(__file__).parents[1] / "e2e").glob("test_*.py")}
    assert set(LONGEST_FIRST) <= e2e, set(LONGEST_FIRST) - e2e
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
