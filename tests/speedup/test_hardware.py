"""The accelerators' figures as printed beside every table: each peak as its vendor states it, a fraction kept."""

from __future__ import annotations

from eaglequant.speedup.hardware import ACCELERATORS, TERA, with_figures


def test_each_peak_prints_as_stated_and_a_cpus_fraction_is_not_rounded_away() -> None:
    h100 = ACCELERATORS["h100"].describe()
    assert "dense peak TFLOPS bf16 989.5, fp8 1,979, int8 1,979 (as stated by NVIDIA H100" in h100
    assert "bf16 1,307.4, fp8 2,614.9" in ACCELERATORS["mi300x"].describe()
    assert "bf16 2,500, fp8 5,000, int8 5,000, fp4 10,000" in ACCELERATORS["mi355x"].describe()
    cpu = with_figures(None, 0.02, {"bf16": 0.1}).describe()
    assert cpu == "given: 0.02 TB/s HBM, dense peak TFLOPS bf16 0.1 (given)"
    assert with_figures(None, 0.02, {"bf16": 0.0123}).describe().endswith("bf16 0.0123 (given)")
    for accelerator in ACCELERATORS.values():  # every figure printed is the one priced, to its last stated digit
        for kind in ("bf16", "fp8", "int8", "fp4"):
            figure = getattr(accelerator, kind) / TERA
            if figure:
                assert f"{kind} {figure:,.1f}".removesuffix(".0") in accelerator.describe()
