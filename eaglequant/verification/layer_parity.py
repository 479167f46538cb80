"""One quantized linear against its source: the fused kernel's output on seeded activations (SQNR, cosine,
relative error) and the worst scale block of the dequantized weight, in one pass over blocks of output rows."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from eaglequant.draft.weights import CanonicalWeights
    from eaglequant.kinds.base import StoredLinear
    from eaglequant.schemes.model import Scheme

from eaglequant.common.json_fields import JsonRecord, finite_or_text, named, number_or_text

PARITY_ROWS = 64  # activations per linear


@dataclass(frozen=True)
class LayerParity(JsonRecord):
    """One quantized linear's figures; an SQNR that is not finite (an exact output) is written as text (``inf``)."""

    json_values = named(sqnr_db=finite_or_text)
    json_read = named(sqnr_db=number_or_text)
    json_renamed = named(max_block_error="max_block_relative_error")
    json_first = ("module", "backend", "sqnr_db", "cosine", "relative_error", "max_block_error", "worst_block")

    module: str
    backend: str
    sqnr_db: float
    cosine: float
    relative_error: float
    failed: tuple[str, ...]  # the thresholds it misses
    max_block_error: float = 0.0  # the worst scale block of the dequantized weight against the source's
    worst_block: tuple[int, int] = (0, 0)  # its row and first column


def _metrics(reference: torch.Tensor, got: torch.Tensor) -> tuple[float, float, float]:
    import torch

    ref, out = reference.to(torch.float64).reshape(-1), got.to(torch.float64).reshape(-1)
    noise = (out - ref).pow(2).sum().item()
    signal = ref.pow(2).sum().item()
    sqnr = math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal > 0 else -math.inf)
    cosine = float(torch.nn.functional.cosine_similarity(ref, out, dim=0)) if signal > 0 else 1.0
    relative = math.sqrt(noise / signal) if signal > 0 else (0.0 if noise == 0 else math.inf)
    return sqnr, cosine, relative


def parity_input(generator: torch.Generator, columns: int) -> torch.Tensor:
    """The seeded bf16 activations [PARITY_ROWS, columns] one linear's parity runs on."""
    import torch

    return torch.randn(PARITY_ROWS, columns, generator=generator).to(torch.bfloat16)


class ParityRun:
    """One quantized linear's parity, gathered a block of output rows at a time (:meth:`add`) by whoever dequantizes
    the block: :func:`layer_parity` on its own, or the quantized draft of the fidelity run, whose kernel then takes
    the parity rows beneath its own activations, so that each block is dequantized once for both."""

    def __init__(
        self, module: str, canonical: str, weights: CanonicalWeights, stored: StoredLinear, x: torch.Tensor
    ) -> None:
        import torch

        self.module, self.name, self.weights = module, f"{canonical}.weight", weights
        self.rows_per_scale = stored.weight_kind.rows_per_scale
        self.width = stored.weight_kind.columns_per_scale or stored.in_features  # a scale block's columns
        self.x = x.to(stored.weight.device)  # bf16, as the kernel takes it
        self.x32 = x.to(torch.float32)
        self.expected = torch.empty(PARITY_ROWS, stored.out_features)
        self.got = torch.empty(PARITY_ROWS, stored.out_features)
        self.source_norms: list[torch.Tensor] = []
        self.error_norms: list[torch.Tensor] = []
        self.backend = ""  # the kernel's, set by whoever runs it

    def add(self, rows: slice, dequantized: torch.Tensor, got: torch.Tensor) -> None:
        """The kernel's output ``got`` [PARITY_ROWS, rows] for the block ``rows``, whose dequantized weight is
        ``dequantized`` (overwritten: it is not needed afterwards); the source's GEMM and block norms beside it."""
        import torch

        from eaglequant.draft.weights import widened

        source = widened(self.weights.rows(self.name, rows), "parity")
        self.expected[:, rows] = self.x32 @ source.T
        self.got[:, rows] = got.to(torch.float32).cpu()
        self.source_norms.append(_block_norms(source, self.width))
        self.error_norms.append(_block_norms(dequantized.cpu().sub_(source), self.width))

    def result(self, scheme: Scheme) -> LayerParity:
        import torch

        limits, module, backend = scheme.verify, self.module, self.backend
        expected, got, width = self.expected, self.got, self.width
        source_norms, error_norms = self.source_norms, self.error_norms
        sqnr, cosine, relative = _metrics(expected, got)
        failed = []
        if not sqnr >= limits.min_sqnr_db:
            failed.append(f"output SQNR {sqnr:.1f} dB < {limits.min_sqnr_db}")
        if not cosine >= limits.min_cosine:
            failed.append(f"output cosine {cosine:.4f} < {limits.min_cosine}")
        if not relative <= limits.max_relative_error:
            failed.append(f"output relative error {relative:.4f} > {limits.max_relative_error}")
        block_error, row, block_index = _worst_block(torch.cat(source_norms), torch.cat(error_norms))
        column = block_index * width
        if not block_error <= limits.max_block_relative_error:
            failed.append(
                f"weight block at row {row}, column {column}: error {block_error:.3f} > "
                f"{limits.max_block_relative_error} (a scale or code out of place)"
            )
        return LayerParity(module, backend, sqnr, cosine, relative, tuple(failed), block_error, (row, column))


def layer_parity(
    module: str,
    canonical: str,
    weights: CanonicalWeights,
    stored: StoredLinear,
    scheme: Scheme,
    generator: torch.Generator,
) -> LayerParity:
    """One quantized linear through the fused kernel against the source GEMM, and its worst scale block, in one
    pass over blocks of output rows: each block of the source is read and widened to float32 once."""
    run = ParityRun(module, canonical, weights, stored, parity_input(generator, stored.in_features))
    return run_alone(run, stored).result(scheme)


def run_alone(run: ParityRun, stored: StoredLinear) -> ParityRun:
    """``run`` gathered on its own: ``stored`` (its linear) dequantized a block of rows at a time for it alone."""
    from eaglequant.draft.weights import unmapped_when_freed
    from eaglequant.kernels import choose_backend, fused_linear, reference_activations

    unmapped_when_freed()
    backend = run.backend = choose_backend(run.x)
    prepared = reference_activations(run.x, stored) if backend == "reference" else None
    for rows in run.weights.row_blocks(run.name, run.rows_per_scale):
        block = stored.rows(rows)
        dequantized = block.dequantize()
        run.add(rows, dequantized, fused_linear(run.x, block, backend, dequantized, prepared))
    return run


def _block_norms(weight: torch.Tensor, width: int) -> torch.Tensor:
    """[rows, K] -> [rows, ceil(K / width)]: the norm of every scale block's part of each row."""
    import torch

    short = -weight.shape[1] % width
    padded = torch.nn.functional.pad(weight, (0, short)) if short else weight  # pad copies, even by nothing
    return padded.reshape(weight.shape[0], -1, width).norm(dim=2)


def _worst_block(source_norms: torch.Tensor, error_norms: torch.Tensor) -> tuple[float, int, int]:
    """The largest error of one scale block of the dequantized weight, and where (row, block index), from the
    norms of every block of the source and of its reconstruction error ([rows, blocks] each): a misplaced scale
    or code spoils its block, however small a share of the linear it is.

    Each block's error is measured against its own norm, or the linear's median block norm when that is
    larger: a near-zero block (whose scale the vendors' math rounds coarsely) cannot fail on error that is
    negligible to the output, and an all-zero block must stay (nearly) zero.
    """
    import torch

    scale = source_norms.clamp_min(float(source_norms.median()))
    error = torch.where(scale > 0, error_norms / scale.clamp_min(1e-30), torch.where(error_norms > 0, math.inf, 0.0))
    error = torch.nan_to_num(error, nan=math.inf)
    flat = int(error.argmax())
    return float(error.reshape(-1)[flat]), flat // error.shape[1], flat % error.shape[1]
