"""Safety rules, each checked so that breaking it fails a test.

* ``torch.load`` is only ever called with ``weights_only=True`` (and nothing else unpickles);
* nothing is read or copied through a symlink that leaves SRC, side files included;
* DST may not be SRC, lie inside it, or contain it, and an existing DST is replaced only with --overwrite.
"""

from __future__ import annotations

import ast
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT, run_cli
from tests.project.test_bad_input import assert_refused, temporaries_beside, tree

PACKAGE = ROOT / "eaglequant"
TORCH_LOADS = {"torch.load", "torch.serialization.load"}
UNPICKLERS = {"pickle.load", "pickle.loads", "pickle.Unpickler", "dill.load", "dill.loads", "joblib.load"}


# -- torch.load only with weights_only=True --------------------------------------------------------


def _qualified(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """``torch.serialization.load`` for ``ts.load`` after ``import torch.serialization as ts``, etc."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _qualified(node.value, aliases)
        return None if base is None else f"{base}.{node.attr}"
    return None


def unsafe_loads(source: str, filename: str = "<source>") -> list[str]:
    """Every call that may unpickle arbitrary objects: torch.load without a literal ``weights_only=True``
    (or with ``**kwargs`` that could override it), torch.load used other than by a direct call, and any
    pickle/dill/joblib loader. Each as ``file:line: what``."""
    tree_ = ast.parse(source, filename)
    aliases: dict[str, str] = {}
    for node in ast.walk(tree_):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    problems: list[str] = []
    called: set[int] = set()
    for node in ast.walk(tree_):
        if not isinstance(node, ast.Call):
            continue
        name = _qualified(node.func, aliases)
        called.add(id(node.func))
        if name in TORCH_LOADS:
            weights_only = [k for k in node.keywords if k.arg == "weights_only"]
            splat = any(k.arg is None for k in node.keywords)
            safe = (
                len(weights_only) == 1
                and isinstance(weights_only[0].value, ast.Constant)
                and weights_only[0].value.value is True
            )
            if not safe or splat:
                problems.append(f"{filename}:{node.lineno}: {name}(...) without a literal weights_only=True")
        elif name in UNPICKLERS:
            problems.append(f"{filename}:{node.lineno}: {name}(...) unpickles arbitrary objects")
    for node in ast.walk(tree_):
        if isinstance(node, ast.Name | ast.Attribute) and id(node) not in called:
            name = _qualified(node, aliases)
            if name in TORCH_LOADS:  # e.g. passed as a callback: its arguments cannot be checked here
                problems.append(f"{filename}:{node.lineno}: {name} used other than by a direct call")
    return problems


def package_sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_package_calls_torch_load_only_with_weights_only() -> None:
    problems = [p for path in package_sources() for p in unsafe_loads(path.read_text(), str(path))]
    assert problems == []


def test_the_package_does_call_torch_load() -> None:
    """The rule above is not vacuous: the reader's .bin support is where torch.load lives."""
    calls = [
        path
        for path in package_sources()
        if "torch.load(" in path.read_text() and not unsafe_loads(path.read_text(), str(path))
    ]
    assert PACKAGE / "checkpoint" / "reader.py" in calls


@pytest.mark.parametrize(
    "snippet",
    [
        "import torch\ntorch.load(p)",
        "import torch\ntorch.load(p, weights_only=False)",
        "import torch\ntorch.load(p, weights_only=flag)",
        "import torch\ntorch.load(p, weights_only=True, **options)",
        "import torch as T\nT.load(p)",
        "from torch import load\nload(p)",
        "from torch import load as tl\ntl(p, map_location='cpu')",
        "import torch.serialization\ntorch.serialization.load(p)",
        "from torch import serialization\nserialization.load(p)",
        "import torch\nloader = torch.load",
        "import functools, torch\nf = functools.partial(torch.load, weights_only=True)",
        "import pickle\npickle.loads(blob)",
        "from pickle import Unpickler\nUnpickler(f).load()",
    ],
)
def test_the_checker_finds_unsafe_loads(snippet: str) -> None:
    assert unsafe_loads(snippet)


@pytest.mark.parametrize(
    "snippet",
    [
        "import torch\ntorch.load(p, map_location='cpu', weights_only=True, mmap=True)",
        "import torch\ntorch.save(x, p)",
        "import json\njson.load(f)",
        "import pickle\nraise pickle.UnpicklingError('x')",
    ],
)
def test_the_checker_accepts_safe_code(snippet: str) -> None:
    assert unsafe_loads(snippet) == []


# -- symlinked side files --------------------------------------------------------------------------


def _src(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "specforge-llama", src)
    return src


SECRET = "not-part-of-any-checkpoint-4f1c"


@pytest.mark.parametrize("link", ["relative", "absolute", "etc-hostname"])
def test_side_file_symlink_leaving_src_is_refused(tmp_path: Path, link: str) -> None:
    src = _src(tmp_path)
    secret = tmp_path / "secret.json"
    secret.write_text(f'{{"token": "{SECRET}"}}')
    if link == "etc-hostname":
        if not Path("/etc/hostname").is_file():
            pytest.skip("no /etc/hostname")
        target: str | Path = Path("/etc/hostname")
    else:
        target = os.path.relpath(secret, src) if link == "relative" else secret
    (src / "tokenizer.json").symlink_to(target)
    dst = tmp_path / "out"
    before = tree(tmp_path)
    result = run_cli("convert", str(src), str(dst))
    assert_refused(result, ("tokenizer.json", "symlink", "outside"))
    assert not dst.exists()
    assert temporaries_beside(dst) == []
    assert tree(tmp_path) == before


def test_side_directory_symlink_leaving_src_is_not_followed(tmp_path: Path) -> None:
    """A symlinked folder is not walked: its files are neither read nor copied (the head converts)."""
    src = _src(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "tokenizer.json").write_text(SECRET)
    (src / "extra").symlink_to(outside)
    dst = tmp_path / "out"
    result = run_cli("convert", str(src), str(dst))
    assert result.exit_code == 0, result.stderr
    assert not (dst / "extra").exists()
    for path in dst.rglob("*"):
        assert path.is_dir() or SECRET.encode() not in path.read_bytes(), path


def test_side_file_symlink_inside_src_is_copied_as_a_file(tmp_path: Path) -> None:
    """The check refuses only links that leave SRC: one inside it is copied, as a plain file."""
    src = _src(tmp_path)
    (src / "tokenizer").mkdir()
    (src / "tokenizer" / "tokenizer.json").write_text('{"inside": true}')
    (src / "tokenizer.json").symlink_to(Path("tokenizer") / "tokenizer.json")
    dst = tmp_path / "out"
    result = run_cli("convert", str(src), str(dst))
    assert result.exit_code == 0, result.stderr
    assert not (dst / "tokenizer.json").is_symlink()
    assert (dst / "tokenizer.json").read_text() == '{"inside": true}'


# -- destination rules -----------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["equal", "inside", "parent", "symlink-to-src", "inside-via-symlink"])
def test_dst_overlapping_src_is_refused(tmp_path: Path, where: str) -> None:
    src = _src(tmp_path)
    alias = tmp_path / "alias"
    alias.symlink_to(src)
    dst = {
        "equal": src,
        "inside": src / "out",
        "parent": tmp_path,
        "symlink-to-src": alias,
        "inside-via-symlink": alias / "out",
    }[where]
    before = tree(tmp_path)
    result = run_cli("convert", str(src), str(dst), "--overwrite")
    assert_refused(result, (str(dst), "source"))
    assert tree(tmp_path) == before


@pytest.mark.parametrize("kind", ["directory", "empty-directory"])
def test_existing_dst_without_overwrite_is_refused(tmp_path: Path, kind: str) -> None:
    src = _src(tmp_path)
    dst = tmp_path / "out"
    if kind == "file":
        dst.write_text("precious")
    else:
        dst.mkdir()
        if kind == "directory":
            (dst / "keep.txt").write_text("precious")
    before = tree(tmp_path)
    result = run_cli("convert", str(src), str(dst))
    assert_refused(result, (str(dst), "already exists", "--overwrite"))
    assert tree(tmp_path) == before


def test_existing_file_dst_is_refused_even_with_overwrite(tmp_path: Path) -> None:
    src = _src(tmp_path)
    dst = tmp_path / "out"
    dst.write_text("precious")
    before = tree(tmp_path)
    result = run_cli("convert", str(src), str(dst), "--overwrite")
    assert_refused(result, (str(dst), "not a directory"))
    assert tree(tmp_path) == before
