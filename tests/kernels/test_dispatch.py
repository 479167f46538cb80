"""Kernel dispatch without Triton: the torch reference on CPU, ``bench kernels`` on CPU, and a linear computed by
blocks of output rows. None of these needs Triton, so none skips without it."""

from __future__ import annotations

import pytest
import torch

from eaglequant import kernels
from eaglequant.kernels import fused_linear
from eaglequant.kernels.reference import reference_activations
from tests.kernels.stored_layouts import stored_layouts


def test_dispatch_uses_the_reference_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    stored = stored_layouts(torch.randn(32, 64).to(torch.bfloat16))["mxfp4"]
    calls = []
    reference = kernels.reference_linear
    monkeypatch.setattr(kernels, "reference_linear", lambda *args: calls.append(args) or reference(*args))
    fused_linear(torch.randn(2, 64).to(torch.bfloat16), stored)
    assert len(calls) == 1


def test_bench_kernels_cli(tmp_path) -> None:
    import json

    from tests.conftest import run_cli

    if not torch.cuda.is_available():
        refused = run_cli("bench", "kernels")
        assert refused.exit_code == 2 and "needs a CUDA GPU" in refused.stderr and "Traceback" not in refused.stderr
    result = run_cli("bench", "kernels", "--device", "cpu", "--tiny", "--m", "2", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    kernels = {row["kernel"] for row in data["rows"]}
    assert {"torch-bf16", "fp8-w8a16", "fp8-w8a8", "nvfp4-w4a16", "mxfp4-w4a16"} <= kernels
    assert all(row["ms"] > 0 and row["speedup_vs_bf16"] > 0 for row in data["rows"])


@pytest.mark.parametrize("layout", ["fp8-w8a16", "fp8-w8a8", "nvfp4-modelopt"])
def test_a_linear_by_row_blocks_quantizes_its_input_once_to_the_same_product(layout: str) -> None:
    """Activation quantization is per token: done once for a linear and reused by each block of output rows, every
    block's product is the one it gives quantizing its input itself, bit for bit."""
    generator = torch.Generator().manual_seed(3)
    weight = (torch.randn(96, 64, generator=generator) * 0.05).to(torch.bfloat16)
    x = torch.randn(5, 64, generator=generator).to(torch.bfloat16)
    x[-1] *= 40  # an outlier token, so that each token's scale differs
    stored = stored_layouts(weight)[layout]
    prepared = reference_activations(x, stored)
    for start in range(0, 96, 32):
        block = stored.rows(slice(start, start + 32))
        reused = fused_linear(x, block, "reference", activations=prepared)
        assert torch.equal(reused, fused_linear(x, block, "reference"))
