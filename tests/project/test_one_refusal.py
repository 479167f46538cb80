"""One place decides what an engine refuses (issue 64, item 1): :meth:`Engine.decide`. The engine package combines
its decisions into the plan's refusals; everything else reads them, and ``search`` catches the plan's.

Read from the source (every name a module uses, as the import tests read imports), so a second predicate, a new
reader of the support cells, or a search that predicts a refusal again fails here, named.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "eaglequant"

# The functions that combine the engine's decisions into a refusal (eaglequant/engines/support.py): the whole draft,
# a checkpoint's kinds, a conversion's module request.
PREDICATES = frozenset({"draft_refusal", "kinds_refusal", "checkpoint_refusal", "module_refusal", "request_refusal"})

# Outside the engine package, who reads a combined refusal, and which: explain (a written checkpoint's) and the card
# (an engine the conversion did not target). No one else asks; search catches the plan's refusal.
READERS = {
    "readback/explanation.py": {"checkpoint_refusal"},
    "publish/card.py": {"request_refusal"},
}

# What search may not name: a predicate, the engine's decision or its view, the cells. It builds each plan.
NOT_IN_SEARCH = PREDICATES | {"decide", "EngineView", "engine_requirements", "support", "draft_cells", "check_engines"}

# The functions that read the support cells (a release's for a draft, ``draft_cells``, directly or through
# ``support``; every release's, ``MATRIX``): the decision itself (base.decided), the accessor, and the words the matrix
# gives refusals and tables. A cell read to refuse anywhere else is a second predicate.
CELL_READERS = {
    ("engines/base.py", "decided"),  # the decision: whether the release loads the kinds from the format
    ("engines/support.py", "support"),
    ("engines/support.py", "loaded_kinds"),  # the note most of a format's cells give, where it loads none
    ("engines/support.py", "check_engines"),  # the matrix's note on the refused scheme, its condition on a loaded one
    ("readback/explanation.py", "_read_engine"),  # the matrix's note shown beside each engine
    ("engines/support_tables.py", "render_markdown"),  # the support matrix, shown (docs/engines.md)
    ("engines/support_tables.py", "_loads_format"),  # the module table's row: whether it loads any scheme there
    ("cli/schemes_cmd.py", "_row"),  # the support matrix, shown
}


def _modules(root: Path = PACKAGE) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(root.rglob("*.py")):
        yield path.relative_to(root).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def names_used(tree: ast.AST) -> set[str]:
    """Every name a module uses: names, attributes, what it imports."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            found.update(alias.name for alias in node.names)
    return found


def cell_readers(root: Path = PACKAGE) -> set[tuple[str, str]]:
    """(module, function) for each function that names ``draft_cells`` or ``MATRIX``, or calls ``support``."""
    found = set()
    for name, tree in _modules(root):
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef):
                continue
            used = names_used(node)
            calls = {c.func.id for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
            if used & {"draft_cells", "MATRIX"} or "support" in calls:
                found.add((name, node.name))
    return found


def predicate_users(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module outside the engine package -> the refusal predicates it names."""
    return {
        name: used
        for name, tree in _modules(root)
        if not name.startswith("engines/") and (used := names_used(tree) & PREDICATES)
    }


def test_only_the_engine_package_combines_decisions_into_a_refusal() -> None:
    assert predicate_users() == READERS


def test_search_names_no_engine_predicate_it_builds_the_plan() -> None:
    named = {name: used for name, tree in _modules(PACKAGE / "search") if (used := names_used(tree) & NOT_IN_SEARCH)}
    assert named == {}


def test_the_cells_are_read_to_refuse_only_by_the_decision() -> None:
    assert cell_readers() == CELL_READERS


def test_the_checks_see_a_second_predicate(tmp_path: Path) -> None:
    (tmp_path / "engines").mkdir()
    (tmp_path / "search").mkdir()
    (tmp_path / "engines" / "support.py").write_text("def kinds_refusal(): ...\n")
    (tmp_path / "search" / "candidates.py").write_text(
        "from eaglequant.engines.support import kinds_refusal\n"
        "def skip(engine, cell):\n    return engine.draft_cells.get(cell) or kinds_refusal()\n"
    )
    assert predicate_users(tmp_path) == {"search/candidates.py": {"kinds_refusal"}}
    assert cell_readers(tmp_path) == {("search/candidates.py", "skip")}
