"""scripts/gpu_kernel_sweep.py's choice on the CPU, from made-up rows: the launch least slow over every shape, never
one that was wrong or failed on a shape."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_kernel_sweep.py"


def _sweep() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_kernel_sweep", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_kernel_sweep"] = module
    spec.loader.exec_module(module)
    return module


def _row(shape: str, launch: list[int], status: str, ms: float = 0.0) -> dict:
    return {"kernel": "nvfp4-w4a16", "shape": shape, "m": 1, "n": 64, "k": 128, "bytes": 4096,
            "config": "-".join(map(str, launch)), "launch": launch, "status": status, "ms": ms}  # fmt: skip


def test_the_choice_is_least_slow_over_every_shape_and_correct_on_each() -> None:
    sweep = _sweep()
    fast_once, steady, wrong_once = [1, 64, 128, 1, 4, 3], [16, 64, 128, 2, 4, 3], [1, 32, 256, 4, 4, 3]
    rows = [
        _row("a", fast_once, "ok", 1.0), _row("b", fast_once, "ok", 4.0),  # 2.0 and 2.0 times each shape's best
        _row("a", steady, "ok", 1.2), _row("b", steady, "ok", 2.4),  # 2.4 and 1.2
        _row("a", wrong_once, "ok", 0.5), _row("b", wrong_once, "wrong"),  # fastest on a, wrong on b
        _row("b", [16, 64, 64, 1, 4, 3], "ok", 2.0),
    ]  # fmt: skip
    launch, mean = sweep.overall_choice(rows, "nvfp4-w4a16", 1)
    assert launch == steady and abs(mean - 1.8) < 1e-9
    assert sweep.best_rows(rows)[("nvfp4-w4a16", "b", 1)]["launch"] == [16, 64, 64, 1, 4, 3]
    assert sweep.overall_choice(rows, "nvfp4-w4a16", 4) is None
