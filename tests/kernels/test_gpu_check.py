"""scripts/gpu_check.sh's parts on the CPU: the draft round of a shrunken head through the torch reference, and the
summary of raw outputs, whole, cut short or missing (the one GPU run must leave a readable summary whatever fails)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _script(name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def draft_round(tmp_path_factory: pytest.TempPathFactory) -> dict:
    path = tmp_path_factory.mktemp("draft") / "draft-round.json"
    args = ["--device", "cpu", "--scale", "64", "--batch", "2", "--repeats", "1", "--json", str(path)]
    assert _script("gpu_draft_round").main(args) == 0
    return json.loads(path.read_text(encoding="utf-8"))


def test_the_draft_round_times_each_variant_priced_by_the_bytes_model(draft_round: dict) -> None:
    from eaglequant.readback.cost import reads_per_round

    variants = {v["name"]: v for v in draft_round["variants"]}
    assert list(variants) == [name for name, *_ in _script("gpu_draft_round").VARIANTS]
    bf16, fp8, fp4 = variants["bf16"], variants["fp8 decoder"], variants["fp8 decoder + nvfp4 lm_head"]
    assert bf16["kinds"] == {"fc": "bf16", "decoder": "bf16", "lm_head": "bf16"}
    assert fp8["kinds"]["decoder"] == "fp8-channel/fp8-token" and fp4["kinds"]["lm_head"] == "nvfp4/nvfp4"
    assert fp8["model_quantized"]["decoder"] and fp4["model_quantized"]["lm_head"]
    # the BF16 round: every linear at 2 bytes a weight, read as often as a round of k reads it
    dims, k = draft_round["dims"], draft_round["k"]
    h, a, i, v = dims["hidden"], dims["heads"] * dims["head_dim"], dims["intermediate"], dims["vocab"]
    decoder = 3 * a * 2 * h + h * a + 2 * i * h + h * i
    reads = reads_per_round(k)
    linears = 2 * (3 * h * h + reads["decoder"] * decoder + reads["lm_head"] * v * h)
    assert linears < bf16["bytes_per_round"] < linears * 1.01  # norms and embedding rows beside them
    assert bf16["model_speedup"] == 1 < fp8["model_speedup"] < fp4["model_speedup"]
    assert variants["bf16, vocab 32768"]["model_speedup"] > 1
    for variant in variants.values():
        (row,) = variant["rows"]
        assert row["batch"] == 2 and row["eager_ms"] > 0 and row["graph_ms"] is None
        assert row["measured_speedup"] == pytest.approx(bf16["rows"][0]["eager_ms"] / row["eager_ms"])


def _bench_rows(m: int, fp4_speedup: float) -> dict:
    def row(kernel: str, speedup: float, percent: float) -> dict:
        return {"shape": "qkv_proj", "m": m, "kernel": kernel, "ms": 0.1 / speedup, "speedup_vs_bf16": speedup,
                "percent_of_copy_bandwidth": percent}  # fmt: skip

    rows = [row("torch-bf16", 1.0, 30), row("torch-scaled-mm-fp8", 1.25, 40)]
    rows += [row("nvfp4-w4a16", fp4_speedup, 75), row("fp8-w8a8", 1.7, 60)]
    return {"device": "NVIDIA H200", "copy_gbps": 4000.0, "rows": rows}


def test_the_summary_of_a_whole_run(tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    (work / "steps.tsv").write_text("kernels\t0\t41\t110\nbench kernels --m 1\t124\t30\t30\n", encoding="utf-8")
    (work / "kernel-tests.log").write_text(
        "tests/kernels/test_gpu_kernels.py::test_a[fp8-w8a16-1] PASSED [ 50%]\n"
        "tests/kernels/test_gpu_kernels.py::test_a[mxfp4-w4a16-4] FAILED [100%]\n"
        "FAILED tests/kernels/test_gpu_kernels.py::test_a[mxfp4-w4a16-4] - AssertionError: (3e-05, 1e-06)\n"
        "==================== 1 failed, 1 passed in 41.20s ====================\n",
        encoding="utf-8",
    )
    error = {"kernel": "fp8-w8a16", "m": 1, "n": 384, "k": 1024, "worst_ratio": 2.0}
    (work / "kernel-errors.jsonl").write_text(json.dumps(error | {"vs_torch_relative": 3e-7}) + "\n", encoding="utf-8")
    (work / "bench-kernels-m1.json").write_text(json.dumps(_bench_rows(1, 2.6)), encoding="utf-8")
    (work / "bench-kernels-m16.json").write_text(json.dumps(_bench_rows(16, 2.4)), encoding="utf-8")
    assert _script("gpu_summary").main([str(work), str(out)]) == 0
    markdown = (out / "summary.md").read_text(encoding="utf-8")
    data = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert "| bench kernels --m 1 | timed out | 30 | 30 |" in markdown
    assert data["kernel_tests"]["counts"] == {"passed": 1, "failed": 1} and data["kernel_tests"]["finished"]
    assert "- FAILED `tests/kernels/test_gpu_kernels.py::test_a[mxfp4-w4a16-4]`: AssertionError" in markdown
    assert "| fp8-w8a16 | 2.00 (3.0e-07) |" in markdown
    assert "| qkv_proj | 16 | 100.0 | 1.25× | 1.36× | 2.40× (75%) | 1.70× (60%) |" in markdown
    goals = {goal["kernel"]: goal for goal in data["goals"]}
    assert (goals["nvfp4-w4a16"]["met"], goals["nvfp4-w4a16"]["rows"]) == (1, 2)  # 2.4x misses 2.5x at M = 16
    assert (goals["fp8-w8a8"]["met"], goals["fp8-w8a8"]["rows"]) == (2, 2)
    assert "no vLLM" in markdown and "Not run." in markdown  # the draft round left nothing


def test_the_summary_of_a_run_cut_short(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "convert-tests.log").write_text("tests/kernels/test_device.py::test_x[a] PASSED [  3%]\n", encoding="utf-8")
    (work / "bench-kernels-m4.json").write_text("", encoding="utf-8")  # the shell's redirect, then a timeout
    refused = {"ok": False, "error": {"type": "Terminated", "message": "interrupted; nothing was written"}}
    (work / "bench-kernels-m16.json").write_text(json.dumps(refused), encoding="utf-8")  # the command's --json error
    (work / "kernel-errors.jsonl").write_text('{"kernel": "fp8-w8a16", "m"', encoding="utf-8")  # a line cut short
    (work / "steps.tsv").write_text("kernels\t124\t110\t110\nconv", encoding="utf-8")
    (work / "draft-round.json").write_text("{", encoding="utf-8")
    assert _script("gpu_summary").main([str(work), str(tmp_path / "out")]) == 0
    data = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert data["convert_tests"] == {"ran": True, "counts": {"passed": 1}, "failures": [], "finished": False}
    assert data["bench_kernels"] is None and data["draft_round"] is None
    (problem,) = data["problems"][:1]
    assert "bench-kernels-m4.json: unreadable" in problem
    assert "bench-kernels-m16.json: interrupted; nothing was written" in problem
    assert data["kernel_errors"] == [] and [step["rc"] for step in data["steps"]] == [124]
    assert "(the run did not finish)" in (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")


def test_a_variant_that_fails_leaves_the_others_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import eaglequant.kernels

    real = eaglequant.kernels.fused_linear

    def no_fp4(x, stored, backend="auto", *args):  # type: ignore[no-untyped-def]
        if stored.weight_kind.name == "nvfp4":
            raise RuntimeError("no FP4 kernel here")
        return real(x, stored, backend, *args)

    monkeypatch.setattr(eaglequant.kernels, "fused_linear", no_fp4)
    work = tmp_path / "work"
    work.mkdir()
    args = [
        "--device",
        "cpu",
        "--scale",
        "64",
        "--batch",
        "1",
        "--repeats",
        "1",
        "--json",
        str(work / "draft-round.json"),
    ]
    assert _script("gpu_draft_round").main(args) == 0
    assert _script("gpu_summary").main([str(work), str(tmp_path / "out")]) == 0
    markdown = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert "- fp8 decoder + nvfp4 lm_head, batch 1: RuntimeError: no FP4 kernel here" in markdown
    assert "| fp8 decoder + nvfp4 lm_head | 1 | — | — | — | 2." in markdown  # the model's figures stand
    assert (
        "| fp8 decoder, vocab 32768 | 1 | — | " in markdown
        and "| fp8 decoder, vocab 32768 | 1 | — | — |" not in markdown
    )
