"""The architecture's promises, checked on the source: a new kind or format is one module plus a registration,
so nothing outside the registries branches on a kind's or a format's name; functions a reader holds in view; and the
Triton kernel names its layouts. A module's length is not held to a number: a module is as long as its one concern
needs, and splitting one to meet a count scatters a concern (docs/design.md gives the layers and the jobs)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from eaglequant.formats import FORMATS
from eaglequant.kinds import ACTIVATION_KINDS, WEIGHT_KINDS

PACKAGE = Path(__file__).resolve().parents[2] / "eaglequant"
NAMES = set(WEIGHT_KINDS) | set(ACTIVATION_KINDS) | set(FORMATS) | {f.quant_method for f in FORMATS.values()}


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _prefix_tests(node: ast.AST) -> list[str]:
    """``kind.startswith("fp8")``: a test on the start (or end) of a registered name."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return []
    if node.func.attr not in ("startswith", "endswith"):
        return []
    words = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return [w for w in words if len(w) >= 3 and any(n.startswith(w) or n.endswith(w) for n in NAMES)]


def _name_comparisons(path: Path) -> list[str]:
    """``x == "nvfp4"``, ``fmt in ("quark", ...)``, ``kind != "fp8-token"``, ``kind.startswith("fp8")``: a branch on
    a registered name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        found += [f"{path.name}:{node.lineno}: tests a name for {w!r}" for w in _prefix_tests(node)]
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        constants = [c for o in operands for c in ([o] if isinstance(o, ast.Constant) else getattr(o, "elts", []))]
        named = [c.value for c in constants if isinstance(c, ast.Constant) and c.value in NAMES]
        if named:
            found.append(f"{path.name}:{node.lineno}: compares with {named[0]!r}")
    return found


def test_the_name_list_covers_every_registry() -> None:
    assert {"fp8-channel", "fp8-block", "nvfp4", "mxfp4", "fp8-token", "fp8-group"} <= NAMES
    assert {"quark", "modelopt", "compressed-tensors", "fp8"} <= NAMES


def test_the_check_finds_a_branch_on_a_kind(tmp_path: Path) -> None:
    source = tmp_path / "branchy.py"
    source.write_text(
        'def f(kind):\n    if kind == "nvfp4":\n        return 1\n    if kind.startswith("fp8"):\n        return 2\n'
        '    return kind in ("quark", "x")\n'
    )
    assert _name_comparisons(source) == [
        "branchy.py:2: compares with 'nvfp4'",
        "branchy.py:4: tests a name for 'fp8'",
        "branchy.py:6: compares with 'quark'",
    ]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_branch_on_a_kind_or_format_name(path: Path) -> None:
    assert _name_comparisons(path) == []


MAX_FUNCTION_LINES = 80


def _function_lengths(path: Path) -> list[tuple[str, int]]:
    """Each function's lines; a Typer command's (``*_command``) from its body, its signature being its options."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = node.body[0].lineno if node.name.endswith("_command") else node.lineno
            found.append((node.name, (node.end_lineno or start) - start + 1))
    return found


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_function_over_80_lines(path: Path) -> None:
    """A function a reader holds in view: past 80 lines it is steps to be named."""
    assert [(name, lines) for name, lines in _function_lengths(path) if lines >= MAX_FUNCTION_LINES] == []


def _kernel_magic_numbers(path: Path) -> list[str]:
    """Comparisons of the Triton kernel's specialisation parameters with an integer literal."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id in ("KIND", "ACT_CODES"):
            literals = [c.value for c in node.comparators if isinstance(c, ast.Constant) and isinstance(c.value, int)]
            found += [f"line {node.lineno}: {node.left.id} == {value}" for value in literals]
    return found


def test_the_kernel_names_its_layouts() -> None:
    """The kernel's specialisations are the kinds' KernelLayout and ActivationCodes, never bare integers."""
    assert _kernel_magic_numbers(PACKAGE / "kernels" / "triton_gemm.py") == []


def test_the_magic_number_check_finds_one(tmp_path: Path) -> None:
    kernel = tmp_path / "kernel.py"
    kernel.write_text("def k(KIND):\n    if KIND == 3:\n        return 1\n")
    assert _kernel_magic_numbers(kernel) == ["line 2: KIND == 3"]
