"""Named accelerators: the HBM bandwidth a rank reads at and its dense matrix peak for each kind a GEMM runs in, every
figure as its vendor states it (the document and its address beside it), or the user's own (``--bandwidth``,
``--peak KIND=TFLOPS``).

Peaks are dense (no 2:4 sparsity: a vendor's sparse figure is halved). A kind the accelerator has no units for runs
in the next wider one it has (fp4 in fp8, fp8 or int8 in bf16): an H100 runs an MXFP4 weight's GEMM in fp8 at best.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from eaglequant.common.errors import InputError, given, words
from eaglequant.common.json_fields import JsonRecord

KINDS = ("bf16", "fp8", "int8", "fp4")
_WIDER = {"fp4": "fp8", "fp8": "bf16", "int8": "bf16"}  # where a kind runs when the accelerator has no units for it
TERA = 1e12


@dataclass(frozen=True)
class Accelerator(JsonRecord):
    """One rank: its HBM bandwidth (bytes a second) and dense peaks (operations a second; 0: no units for it)."""

    name: str
    bandwidth: float
    bf16: float
    fp8: float = 0.0
    int8: float = 0.0
    fp4: float = 0.0
    source: str = "given"  # the document the figures are from, and its address

    def peak(self, kind: str) -> float:
        """Operations a second a GEMM of ``kind`` runs at: its own units, else the next wider kind's."""
        if kind not in KINDS:
            raise InputError(
                words(given("kind", kind), ": not a kind of GEMM"), hint=f"one of {', '.join(KINDS)}, e.g. fp8=1979"
            )
        while not getattr(self, kind) and kind in _WIDER:
            kind = _WIDER[kind]
        return float(getattr(self, kind))

    def runs_in(self, kind: str) -> str:
        """The kind a GEMM of ``kind`` runs in here (itself, or the wider one it falls back to)."""
        while not getattr(self, kind) and kind in _WIDER:
            kind = _WIDER[kind]
        return kind

    def describe(self) -> str:
        peaks = ", ".join(f"{k} {_tflops(getattr(self, k) / TERA)}" for k in KINDS if getattr(self, k))
        said = "given" if self.source == "given" else f"as stated by {self.source}"
        return f"{self.name}: {self.bandwidth / TERA:.3g} TB/s HBM, dense peak TFLOPS {peaks} ({said})"


def _tflops(figure: float) -> str:
    """A peak as stated: whole TFLOPS with thousands separated, a fraction kept (989.5, and a CPU's 0.1)."""
    if figure == round(figure):
        return f"{figure:,.0f}"
    return f"{figure:,.1f}".rstrip("0").rstrip(".") if figure >= 1 else f"{figure:.3g}"


_NVIDIA_H100 = "NVIDIA H100 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h100/ (H100 SXM)"
_NVIDIA_H200 = "NVIDIA H200 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM)"
_NVIDIA_HGX = "NVIDIA HGX Platform specifications, https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200, per GPU)"
_AMD_MI300X = (
    "AMD Instinct MI300X Accelerators, https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html"
)
_AMD_MI355X = "AMD Instinct MI355X GPUs, https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html"

# Dense figures: NVIDIA's datasheets state Tensor Core peaks with sparsity (halved here); AMD's state both.
ACCELERATORS = {
    "h100": Accelerator("H100 SXM", 3.35 * TERA, 989.5 * TERA, 1979 * TERA, 1979 * TERA, 0.0, _NVIDIA_H100),
    "h200": Accelerator("H200 SXM", 4.8 * TERA, 989.5 * TERA, 1979 * TERA, 1979 * TERA, 0.0, _NVIDIA_H200),
    "b200": Accelerator("B200 (HGX)", 7.7 * TERA, 2250 * TERA, 4500 * TERA, 4500 * TERA, 9000 * TERA, _NVIDIA_HGX),
    "mi300x": Accelerator("MI300X", 5.3 * TERA, 1307.4 * TERA, 2614.9 * TERA, 2614.9 * TERA, 0.0, _AMD_MI300X),
    "mi355x": Accelerator("MI355X", 8.0 * TERA, 2500 * TERA, 5000 * TERA, 5000 * TERA, 10000 * TERA, _AMD_MI355X),
}
DEFAULT_ACCELERATOR = "h100"


def accelerator(name: str) -> Accelerator:
    """The named accelerator (``--gpu``), case and dashes ignored."""
    found = ACCELERATORS.get(name.lower().replace("-", "").replace(" ", "").removesuffix("sxm"))
    if found is None:
        raise InputError(
            words(given("gpu", name), ": not a named accelerator"),
            hint=f"one of {', '.join(ACCELERATORS)}, or give its figures: --bandwidth TB/S --peak bf16=TFLOPS",
        )
    return found


def with_figures(base: Accelerator | None, bandwidth_tbs: float | None, peaks: dict[str, float]) -> Accelerator:
    """``base`` (or a bare accelerator) with the user's own bandwidth (TB/s) and peaks (kind -> TFLOPS)."""
    for kind, value in peaks.items():
        if kind not in KINDS or not value > 0:
            raise InputError(words(given("peak", f"{kind}={value:g}"), ": must be KIND=TFLOPS, KIND one of "
                                   f"{', '.join(KINDS)}, TFLOPS above 0"), hint="e.g. --peak fp8=1979")  # fmt: skip
    if bandwidth_tbs is not None and not bandwidth_tbs > 0:
        raise InputError(words(given("bandwidth", bandwidth_tbs), ": must be above 0 TB/s"), hint="e.g. --bandwidth 8")
    if base is None and (bandwidth_tbs is None or "bf16" not in peaks):
        raise InputError(
            "an accelerator of your own needs its bandwidth and its bf16 peak",
            hint="--bandwidth 8 --peak bf16=2500 [--peak fp8=5000], or name one: --gpu mi355x",
        )
    figures: dict[str, Any] = {kind: value * TERA for kind, value in peaks.items()}
    if base is None:
        assert bandwidth_tbs is not None
        return replace(Accelerator("given", bandwidth_tbs * TERA, 0.0), **figures)
    if bandwidth_tbs is not None:
        figures["bandwidth"] = bandwidth_tbs * TERA
    source = f"{base.source}, but {' and '.join(sorted(figures))} given" if figures else base.source
    return replace(base, **figures, source=source)


def parse_peaks(texts: list[str]) -> dict[str, float]:
    """``["fp8=1979", "bf16=989"]`` as kind -> TFLOPS; a malformed one is one line."""
    peaks = {}
    for text in texts:
        kind, _, value = text.partition("=")
        try:
            peaks[kind.strip().lower()] = float(value)
        except ValueError:
            raise InputError(
                words(given("peak", text), ": not KIND=TFLOPS"), hint="e.g. --peak fp8=1979 --peak bf16=989"
            ) from None
    return peaks
