"""The scripts in scripts/ import the package inside their functions, where no test run reaches them: every name
they import from eaglequant must still be there (a renamed or removed function breaks a script silently)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[2] / "scripts").rglob("*.py"))


def _package_imports(path: Path) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "eaglequant"
        for alias in node.names
    ]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_name_a_script_imports_from_the_package_exists(script: Path) -> None:
    missing = [
        f"{module}.{name}"
        for module, name in _package_imports(script)
        if not hasattr(importlib.import_module(module), name) and importlib.util.find_spec(f"{module}.{name}") is None
    ]
    assert not missing, f"{script.name} imports what the package no longer has: {', '.join(missing)}"


def test_the_check_sees_a_missing_name(tmp_path: Path) -> None:
    script = tmp_path / "stale.py"
    script.write_text("def f():\n    from eaglequant.measurement.statistics import interval_text\n", encoding="utf-8")
    module, name = _package_imports(script)[0]
    assert not hasattr(importlib.import_module(module), name)


def test_the_acceptance_table_lists_the_cells_vllm_loads() -> None:
    """scripts/acceptance_table.py asks the support table with the engine and attention themselves (a string for
    either once broke it where no test ran)."""
    spec = importlib.util.spec_from_file_location("acceptance_table", SCRIPTS[0].parent / "acceptance_table.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    found = script.cells()
    assert ("fp8-per-channel", "quark") in found and ("fp8-block", "compressed-tensors") in found
    assert len(found) == len(set(found))
