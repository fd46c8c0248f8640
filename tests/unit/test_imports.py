"""The package's import graph has no circle: every import counts (at module level, inside a function
or under ``if TYPE_CHECKING:``), and importing ``a.b.c`` imports the packages ``a`` and ``a.b`` too."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "torchbake"


def module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imported(module: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules ``module`` imports, with the packages each import runs on the way
    (those ``module`` is inside of aside: they are running already)."""
    here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                prefix = ".".join(here[:len(here) - node.level + 1])
                base = f"{prefix}.{base}" if base else prefix
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    if path.name == "__init__.py" and "pkgutil.iter_modules" in path.read_text():  # a registry found, not written
        targets.update(name for name in known if name.startswith(module + ".") and name.count(".") == module.count(".") + 1)
    ancestors = {".".join(module.split(".")[:n]) for n in range(1, module.count(".") + 1)}
    found = set()
    for target in targets:
        parts = target.split(".")
        for n in range(1, len(parts) + 1):
            name = ".".join(parts[:n])
            if name in known and name != module and name not in ancestors:
                found.add(name)
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_of_the_package_imports_itself_through_others():
    names = module_names()
    graph = {module: imported(module, path, set(names)) for module, path in names.items()}
    assert "torchbake.variants" in graph["torchbake.builder"] or "torchbake.variants" in graph["torchbake.tasks.build"]
    assert circles(graph) == []


def test_a_circle_through_a_type_checking_import_is_found():
    names = module_names()
    graph = {module: imported(module, path, set(names)) for module, path in names.items()}
    graph["torchbake.context"] = graph["torchbake.context"] | {"torchbake.variants"}  # context naming the plans
    assert circles(graph)[0][:3] == ["torchbake.context", "torchbake.variants", "torchbake.variants.base"]
