"""No import cycles between eaglequant's modules.

Every ``import`` counts: at module level, inside functions, under ``TYPE_CHECKING``. A cycle means two modules
each need the other, so neither can be read (or changed) alone; the Hub client once held a verification
report, and hub → verification → manifest → hub followed. Relative imports are resolved; ``from a import b``
is an edge to ``a.b`` when that is a module, else to ``a``. Importing a submodule also runs its package's
``__init__``; that implicit edge is not counted (a package that re-exports its submodules would be a cycle).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "eaglequant"


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def import_graph() -> dict[str, set[str]]:
    """Module -> the eaglequant modules it imports anywhere in its text."""
    modules = _modules()

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets.update(known(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.add(full if full in modules else known(base))
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
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
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles() -> None:
    graph = import_graph()
    described = [
        " | ".join(f"{m} → {', '.join(sorted(graph[m] & set(c)))}" for m in c) for c in cycles(graph)
    ]  # fmt: skip
    assert described == []


def test_the_hub_knows_nothing_of_verification() -> None:
    """The circle this test was written for: hub → verification → manifest → hub."""
    graph = import_graph()
    assert "eaglequant.verification.verify" not in graph["eaglequant.hub.client"]
    assert "eaglequant.hub.client" not in graph["eaglequant.verification.verify"]


def test_the_graph_sees_every_kind_of_import() -> None:
    """Function-level, TYPE_CHECKING and relative imports all count (else a cycle could hide in one)."""
    graph = import_graph()
    assert "eaglequant.verification.verify" in graph["eaglequant.publish.upload"]  # TYPE_CHECKING and inside a function
    assert "eaglequant.publish.card" in graph["eaglequant.publish.upload"]  # inside a function only
    assert "eaglequant.hub.client" in graph["eaglequant.record.manifest"]
