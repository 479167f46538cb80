"""Every checkpoint ``convert`` writes keeps its bytes: each fixture head in each built-in scheme and format that
stores it (no layer count, 61 layers, every engine) and the per-module cases, hashed file by file, against the list
committed beside this test (``scripts/output_hashes.py --held`` rewrites it when a change of bytes is intended).
The card and the report name the destination, so they are left out; refusals are held by their error line."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.conftest import ROOT

HELD = Path(__file__).with_name("output_hashes.tsv")


def _script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("output_hashes", ROOT / "scripts" / "output_hashes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_output_keeps_its_bytes(tmp_path: Path) -> None:
    held = HELD.read_text(encoding="utf-8").splitlines()
    now = _script().hash_lines(tmp_path / "work", held=True)
    changed = sorted(set(held) ^ set(now))
    assert not changed, f"{len(changed)} lines differ, first: {changed[:4]}"
    assert len(now) == len(held)


def test_the_per_module_cases_write_every_format_that_stores_them() -> None:
    held = HELD.read_text(encoding="utf-8")
    for case in ("mlp.*=mxfp4,quark,61", "mlp.*=nvfp4,compressed-tensors,vllm,sglang,61", "mlp.*=nvfp4,modelopt,61"):
        assert f"specforge-llama/{case}\tconfig.json\t" in held, case
