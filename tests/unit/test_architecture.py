"""The package's layers, declared once in ``pyproject.toml`` (``[tool.importlinter]``) and checked by
import-linter itself: each package uses only the layers below it, every package is in a layer, and
no modules of one package import each other in a circle. The graph is grimp's (every import: at
module level, inside a function, under ``if TYPE_CHECKING:``) with the imports that
``torchbake.core.lazy.LazyModule`` defers added, which no parser can see."""

from __future__ import annotations

import ast
import copy
import re
import subprocess
import sys

import grimp
import pytest
from importlinter import configuration
from importlinter.application import use_cases
from importlinter.contracts.acyclic_siblings import AcyclicSiblingsContract
from importlinter.contracts.layers import LayersContract

from tests.conftest import ROOT

configuration.configure()
OPTIONS = use_cases.read_user_options(config_filename=str(ROOT / "pyproject.toml"))
CONTRACT_TYPES = {"layers": LayersContract, "acyclic_siblings": AcyclicSiblingsContract}


def contracts():
    return [CONTRACT_TYPES[options["type"]](name=options["name"], session_options=OPTIONS.session_options,
                                            contract_options=options)
            for options in OPTIONS.contracts_options]


def sources() -> dict[str, str]:
    """Each module of the package by name, with its text."""
    found = {}
    for path in sorted((ROOT / "torchbake").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path.read_text()
    return found


def lazy_imports(modules: dict[str, str]) -> list[tuple[str, str, int, str]]:
    """(importer, imported, line, text) of every ``LazyModule("torchbake.…")`` in ``modules``."""
    found = []
    for importer, text in modules.items():
        for node in ast.walk(ast.parse(text)):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "LazyModule"
                    and node.args and isinstance(node.args[0], ast.Constant)
                    and str(node.args[0].value).startswith("torchbake.")):
                found.append((importer, node.args[0].value, node.lineno, ast.unparse(node)))
    return found


def graph_of(modules: dict[str, str]):
    """grimp's graph of the package, with the imports ``LazyModule`` defers in ``modules`` added."""
    built = grimp.build_graph("torchbake", cache_dir=None)
    for importer, imported, line, text in lazy_imports(modules):
        built.add_import(importer=importer, imported=imported, line_number=line, line_contents=text)
    return built


@pytest.fixture(scope="module")
def graph():
    return graph_of(sources())


def broken(graph) -> list[str]:
    return [contract.name for contract in contracts() if not contract.check(copy.deepcopy(graph), verbose=False).kept]


def test_the_package_keeps_its_layers_with_its_deferred_imports(graph):
    assert [options["type"] for options in OPTIONS.contracts_options] == ["layers", "acyclic_siblings"]
    assert ("torchbake.checks.verify", "torchbake.variants") in {(a, b) for a, b, _, _ in lazy_imports(sources())}
    assert broken(graph) == []


def test_lint_imports_as_a_developer_runs_it_keeps_every_contract():
    result = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command;"
                             " lint_imports_command()", "--no-cache"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 2 kept, 0 broken." in result.stdout


LAYERS = "torchbake's layers: each uses only those below it"
CIRCLES = "no modules of one package import each other in a circle"


@pytest.mark.parametrize(("importer", "imported", "breaks"), [
    ("torchbake.core.errors", "torchbake.tasks.cli", [LAYERS, CIRCLES]),  # the ground reaching the top
    ("torchbake.configuration.config_lookalike", "torchbake.variants", [LAYERS, CIRCLES]),  # a new module
    ("torchbake.fleet.runner", "torchbake.housekeeping.cleanup", [LAYERS]),  # packages side by side
])
def test_an_import_against_the_layers_breaks_them(graph, importer, imported, breaks):
    changed = copy.deepcopy(graph)
    changed.add_import(importer=importer, imported=imported, line_number=1, line_contents=f"import {imported}")
    assert broken(changed) == breaks


def test_a_deferred_import_against_the_layers_breaks_them():
    modules = sources()
    modules["torchbake.core.files"] += '\nconfig = LazyModule("torchbake.planning.config")\n'
    assert broken(graph_of(modules)) == [LAYERS, CIRCLES]


def test_a_circle_between_modules_of_one_package_breaks_the_contract(graph):
    changed = copy.deepcopy(graph)
    changed.add_import(importer="torchbake.core.redaction", imported="torchbake.core.output", line_number=1,
                       line_contents="from torchbake.core import output")  # output imports redaction
    assert broken(changed) == [CIRCLES]


def test_a_package_in_no_layer_breaks_the_layers(graph):
    changed = copy.deepcopy(graph)
    changed.add_module("torchbake.telemetry")
    assert broken(changed) == [LAYERS]


def layers() -> list[set[str]]:
    declared = next(options for options in OPTIONS.contracts_options if options["type"] == "layers")["layers"]
    return [{f"torchbake.{name.strip()}" for name in line.split("|")} for line in declared]


@pytest.mark.parametrize("package", sorted(f"torchbake.{path.parent.name}"
                                           for path in (ROOT / "torchbake").glob("*/__init__.py")))
def test_each_package_says_its_job_and_what_it_may_use_as_the_layers_declare(package):
    init = ROOT / package.replace(".", "/") / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    assert "\n\nMay use: " in doc and len(doc.split("\n\nMay use: ")[0]) > 80, f"{init}: its job, then 'May use: …'"
    level = next(n for n, layer in enumerate(layers()) if package in layer)
    below = layers()[level + 1] if level + 1 < len(layers()) else set()
    assert set(re.findall(r"``(torchbake\.\w+)``", doc.split("May use: ")[1])) == below, f"{init} names {below}"


def test_static_analysis_follows_a_build_from_its_task_to_the_engine():
    """Every deferred import stands beside its ``if TYPE_CHECKING:`` import, so an import graph that
    sees only the code (grimp without the LazyModule additions), a type checker and an editor's
    go-to-definition follow `invoke build` from its task through the builder to the engine."""
    plain = grimp.build_graph("torchbake", cache_dir=None)
    assert plain.direct_import_exists(importer="torchbake.tasks.build", imported="torchbake.building.builder")
    assert plain.find_shortest_chain(importer="torchbake.building.builder", imported="torchbake.adapters.engine")
    for importer, imported, _, _ in lazy_imports(sources()):
        assert plain.direct_import_exists(importer=importer, imported=imported), (importer, imported)
