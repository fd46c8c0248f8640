"""The inner loop's map: which real-engine test modules exercise each part of the project, so
``bash scripts/test.sh --touched`` runs the unit tests and only the engine tests of what a change
touched. A changed test module runs itself; a change nobody owns (the tests' shared fixtures,
pyproject.toml) runs the whole suite. tests/unit/test_ownership.py keeps the map whole.

Usage: python -m tests.ownership [REV]  prints the pytest arguments for the changes since REV
(default HEAD: what is not committed yet), one per line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
E2E = "tests/e2e/"

# path prefix -> the e2e modules that exercise it (the first match, longest prefix first, wins)
OWNERS: dict[str, tuple[str, ...]] = {
    "torchbake/adapters/registry.py": ("test_publishing.py", "test_build_all.py"),
    "torchbake/adapters/": ("test_engine_and_disk.py", "test_builders.py", "test_faults.py"),
    "torchbake/building/base_policy.py": ("test_publishing.py",),
    "torchbake/building/publishing.py": ("test_publishing.py", "test_trust.py"),
    "torchbake/building/reproducible.py": ("test_reproducible.py",),
    "torchbake/building/platform_builds.py": ("test_platforms.py",),
    "torchbake/building/": ("test_release.py", "test_layers.py", "test_faults.py"),
    "torchbake/checks/signatures.py": ("test_publishing.py", "test_trust.py"),
    "torchbake/checks/": ("test_release.py", "test_run_container.py"),
    "torchbake/families/": ("test_run_container.py", "test_vendor_accelerators.py"),
    "torchbake/configuration/platforms.py": ("test_platforms.py", "test_bad_inputs.py"),
    "torchbake/configuration/": ("test_bad_inputs.py", "test_installed.py"),
    "torchbake/core/": ("test_hostile_day.py", "test_faults.py"),
    "torchbake/fleet/": ("test_build_all.py",),
    "torchbake/housekeeping/": ("test_gc.py",),
    "torchbake/inputs/base_os.py": ("test_bootstrap.py",),
    "torchbake/inputs/locks.py": ("test_locks.py",),
    "torchbake/inputs/pip_configuration.py": ("test_locks.py",),  # and scripts/setup.sh: the whole suite
    "torchbake/inputs/sources.py": ("test_dev.py",),
    "torchbake/inputs/": ("test_release.py", "test_promises.py", "test_faults.py"),
    "torchbake/planning/": ("test_bad_inputs.py", "test_release.py"),
    "torchbake/running/": ("test_run_container.py",),
    "torchbake/supply_chain/signing.py": ("test_trust.py", "test_publishing.py"),
    "torchbake/supply_chain/": ("test_release.py", "test_publishing.py"),
    "torchbake/tasks/matrix.py": ("test_build_all.py", "test_bad_inputs.py"),
    "torchbake/tasks/lock.py": ("test_locks.py", "test_bad_inputs.py"),
    "torchbake/tasks/gc.py": ("test_gc.py", "test_bad_inputs.py"),
    "torchbake/tasks/containers.py": ("test_run_container.py", "test_bad_inputs.py"),
    "torchbake/tasks/bootstrap.py": ("test_bootstrap.py", "test_bad_inputs.py"),
    "torchbake/tasks/contents.py": ("test_release.py", "test_publishing.py", "test_bad_inputs.py"),
    "torchbake/tasks/inspect.py": ("test_release.py", "test_publishing.py", "test_reproducible.py", "test_bad_inputs.py"),
    "torchbake/tasks/": ("test_bad_inputs.py", "test_installed.py", "test_release.py"),
    "torchbake/variants/dev.py": ("test_dev.py", "test_dev_cache.py"),
    "torchbake/variants/base.py": ("test_dev.py",),
    "torchbake/variants/locking.py": ("test_locks.py", "test_release.py"),
    "torchbake/variants/": ("test_release.py",),
    "torchbake/program.py": ("test_installed.py",),
    "torchbake/reference.py": (),  # the docs' reference pages: unit tests only
    "docker/ubuntu/dockerfile.release": ("test_release.py", "test_layers.py"),
    "docker/ubuntu/": ("test_dev.py", "test_dev_cache.py"),
    "docker/common/pyc_timestamps.py": ("test_reproducible.py", "test_release.py"),
    "docker/common/": ("test_release.py", "test_dev.py"),
    "configs/": ("test_as_typed.py", "test_release.py"),
    "scripts/ensure-emulation.sh": ("test_setup.py",),
    "scripts/": ("test_as_typed.py",),
    "benchmarks/": ("test_benchmarks.py",),
    "docs/": ("test_as_typed.py",),
    "README.md": ("test_as_typed.py",),
    "tests/js/": ("test_publishing.py", "test_release.py"),
    ".github/": ("test_build_all.py",),  # the nightly workflow's matrix
    "torchbake/__init__.py": (),  # the version
    "tests/unit/": (),
    "tests/module_budget.py": (),
    "tests/module-budget.toml": (),
    "tests/ownership.py": (),
    "mkdocs.yml": (),  # the site: tests/unit/test_docs.py builds it
}
EVERYTHING = ("tests/e2e/conftest.py", "tests/e2e/helpers.py", "tests/e2e/fixture_repos.py", "tests/conftest.py",
              "tests/support.py", "pyproject.toml", "tasks.py", "scripts/test.sh", "scripts/setup.sh", ".ci/run")


def changed(rev: str) -> list[str]:
    """Files changed since ``rev`` (committed or not) and files git does not know yet."""
    def git(*args: str) -> list[str]:
        found = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
        return [line for line in found.stdout.splitlines() if line]
    return sorted(set(git("diff", "--name-only", rev)) | set(git("ls-files", "--others", "--exclude-standard")))


def modules_for(paths: list[str]) -> list[str] | None:
    """The e2e modules to run for ``paths`` (None: all of them, for a change nobody owns)."""
    picked: set[str] = set()
    for path in paths:
        if path in EVERYTHING:
            return None
        if path.startswith(E2E) and Path(path).name.startswith("test_"):
            picked.add(Path(path).name)
            continue
        owner = next((prefix for prefix in sorted(OWNERS, key=len, reverse=True) if path.startswith(prefix)), None)
        if owner is None:  # nobody says who exercises it: everything runs
            return None
        picked.update(OWNERS[owner])
    return sorted(picked)


def main() -> None:
    rev = sys.argv[1] if len(sys.argv) > 1 else "HEAD"
    try:
        paths = changed(rev)
    except subprocess.CalledProcessError as exc:
        sys.exit(f"tests.ownership: git diff {rev}: {exc.stderr.strip() or 'failed'}")
    modules = modules_for(paths)
    if modules is None:
        print("tests")
        return
    print("tests/unit")
    for name in modules:
        if (ROOT / E2E / name).exists():
            print(E2E + name)


if __name__ == "__main__":
    main()
