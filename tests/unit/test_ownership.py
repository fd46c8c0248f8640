"""The inner loop's map (tests/ownership.py) is whole: every part of the project has an owner,
every module it names exists, and a change picks the modules that exercise it."""

from __future__ import annotations

from tests import ownership
from tests.conftest import ROOT


def test_every_module_named_exists_and_every_package_has_an_owner():
    named = {name for modules in ownership.OWNERS.values() for name in modules}
    assert sorted(name for name in named if not (ROOT / ownership.E2E / name).exists()) == []
    sources = [str(path.relative_to(ROOT)) for path in (ROOT / "torchbake").rglob("*.py")]
    unowned = [path for path in sources
               if not any(path.startswith(prefix) for prefix in ownership.OWNERS) and not path.endswith("__init__.py")]
    assert unowned == []


def test_a_change_picks_its_owners_a_test_picks_itself_and_a_shared_fixture_picks_all():
    assert ownership.modules_for(["torchbake/inputs/locks.py"]) == ["test_locks.py"]
    assert ownership.modules_for(["torchbake/inputs/downloads.py", "tests/e2e/test_gc.py"]) == [
        "test_faults.py", "test_gc.py", "test_promises.py", "test_release.py"]
    assert ownership.modules_for(["tests/unit/test_docs.py"]) == []
    assert ownership.modules_for(["torchbake/fleet/runner.py", "tests/e2e/conftest.py"]) is None
    assert ownership.modules_for(["a-file-nobody-owns.txt"]) is None
    assert {"test_locks.py"} <= set(ownership.modules_for(["torchbake/tasks/lock.py"]))
    assert {"test_build_all.py"} <= set(ownership.modules_for(["torchbake/tasks/matrix.py"]))
