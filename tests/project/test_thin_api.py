"""The API only delegates (issue 64): each entry point checks or adapts its arguments and calls one function of
the package that owns the work; the work lives below it, so search, batch and bench call those packages directly
and nothing but the command line and the package's facade imports ``eaglequant.api``."""

from __future__ import annotations

import ast

from test_import_cycles import PACKAGE, import_graph
from test_package_order import layer_of

API = PACKAGE / "api"
API_IMPORTERS = {"api", "cli", "__main__", "eaglequant"}  # the API itself, the command line, the facade
MAX_API_LINES = 600  # issue 64's done-when
MAX_STATEMENTS = 2  # besides its docstring and imports: adapt the arguments, return one call


def api_importers(graph: dict[str, set[str]]) -> list[str]:
    """Each import of ``eaglequant.api`` (or a module in it) by a module outside ``API_IMPORTERS``."""
    return [
        f"{module} -> {target}"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if layer_of(target) == "api" and layer_of(module) not in API_IMPORTERS
    ]


def busy_functions(source: str) -> list[str]:
    """The module-level functions in ``source`` with more than ``MAX_STATEMENTS`` statements besides a docstring
    and imports, with their counts."""
    busy = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            work = [s for s in body if not isinstance(s, ast.Import | ast.ImportFrom)]
            if len(work) > MAX_STATEMENTS:
                busy.append(f"{node.name}: {len(work)} statements")
    return busy


def test_only_the_cli_and_the_facade_import_the_api() -> None:
    assert api_importers(import_graph()) == []


def test_the_rule_sees_an_import_of_the_api_from_below() -> None:
    graph = {
        "eaglequant.search.outputs": {"eaglequant.api", "eaglequant.jobs.conversion"},
        "eaglequant.batch.jobs": {"eaglequant.api.conversion"},
        "eaglequant.cli.convert_cmd": {"eaglequant.api"},
        "eaglequant": {"eaglequant.api.speedup"},
    }
    assert api_importers(graph) == [
        "eaglequant.batch.jobs -> eaglequant.api.conversion",
        "eaglequant.search.outputs -> eaglequant.api",
    ]


def test_each_entry_point_calls_one_function() -> None:
    busy = {path.name: busy_functions(path.read_text(encoding="utf-8")) for path in sorted(API.glob("*.py"))}
    assert {name: found for name, found in busy.items() if found} == {}


def test_the_count_sees_a_function_doing_the_work() -> None:
    source = 'def thin(a):\n    """Doc."""\n    from x import y\n\n    b = a + 1\n    return y(b)\n'
    source += "def busy(a):\n    b = a + 1\n    if b:\n        b += 1\n    return b\n"
    assert busy_functions(source) == ["busy: 3 statements"]


def test_the_api_is_under_its_line_budget() -> None:
    lines = sum(len(path.read_text(encoding="utf-8").splitlines()) for path in API.glob("*.py"))
    assert lines < MAX_API_LINES, f"eaglequant/api/ has {lines} lines; move the work into the package that owns it"
