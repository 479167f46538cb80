"""The source draft and the quantized draft run side by side, sharing every product they can.

:func:`eaglequant.verification.fidelity.head_fidelity` runs both drafts over the same positions. They share what
is proven the same (the unquantized linears' weights, the embeddings: ``identical``), so one product serves both;
the quantized linears run through the fused kernel, a block of output rows at a time, with each linear's parity
rows riding beneath the draft's (each block dequantized once); and the reference pass can carry the bf16 floor's
rows beneath its own (the source draft in bf16 arithmetic, as an engine runs it), one pass over each weight.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from eaglequant.layouts.head import HeadDescription

if TYPE_CHECKING:
    import torch

    from eaglequant.draft.forward import DraftForward, LinearFn
    from eaglequant.draft.weights import CanonicalWeights
    from eaglequant.kinds.base import StoredLinear
    from eaglequant.verification.layer_parity import ParityRun


def bf16(x: torch.Tensor) -> torch.Tensor:
    """``x`` rounded to bf16 and widened back to float32."""
    import torch

    return x.to(torch.bfloat16).to(torch.float32)


class DraftPair:
    """``stored(module)``: the quantized linear of a canonical module, read when needed (None: not quantized).
    ``own``: the quantized checkpoint's head and tensors, which the quantized draft reads for everything but its
    quantized linears (default: the source's). ``parity``: canonical module -> its parity run, taken out of the
    dict as the quantized draft first runs the linear."""

    def __init__(
        self,
        head: HeadDescription,
        weights: CanonicalWeights,
        stored: Callable[[str], StoredLinear | None],
        device: str,
        own: tuple[HeadDescription, CanonicalWeights] | None,
        identical: frozenset[str],
        parity: dict[str, ParityRun] | None,
    ) -> None:
        from eaglequant.draft.forward import DraftForward

        self.head, self.weights, self.stored, self.device = head, weights, stored, device
        self.own_head, self.own_weights = own or (head, weights)
        self.owns_nothing = own is None
        self.identical, self.parity = identical, parity
        self.plain = DraftForward(head, weights).plain_linear
        self.own_plain = DraftForward(self.own_head, self.own_weights).plain_linear
        self.last_plain: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # module -> its last input and output
        self.floor_from = 0  # rows of a reference pass from which on they are the floor's (0: none)

    def shared(self, name: str) -> bool:
        """Whether both drafts hold the same bytes for the canonical tensor ``name``."""
        return self.owns_nothing or name in self.identical

    def reference(self) -> DraftForward:
        from eaglequant.draft.forward import DraftForward

        return DraftForward(self.head, self.weights, self.reference_linear)

    def quantized(self) -> DraftForward:
        from eaglequant.draft.forward import DraftForward

        return DraftForward(self.own_head, self.own_weights, self.quantized_linear)

    @contextmanager
    def floor_beneath(self, cut: int) -> Iterator[None]:
        """Within it, the rows of a reference pass from ``cut`` on are the bf16 floor's (0: none)."""
        self.floor_from = cut
        try:
            yield
        finally:
            self.floor_from = 0

    def plain_linear(self, module: str, x: torch.Tensor) -> torch.Tensor:
        """An unquantized linear's output, computed once when both drafts give it the same input (as they give fc:
        its input is the target's hidden states) and hold the same weight."""
        import torch

        last = self.last_plain.get(module)  # its rows may go on beneath x's (the floor's): each row is its own product
        if last is not None and last[0].shape[1:] == x.shape[1:] and torch.equal(last[0][: len(x)], x):
            return last[1][: len(x)]
        out = self.plain(module, x)
        self.last_plain[module] = (x, out)
        return out

    def kernel_linear(self, module: str, linear: StoredLinear, x: torch.Tensor) -> torch.Tensor:
        import torch

        from eaglequant.draft.weights import by_output_rows
        from eaglequant.kernels import choose_backend, fused_linear, reference_activations

        x_device = x.to(torch.bfloat16).to(self.device)
        backend = choose_backend(x_device)
        blocks = self.weights.row_blocks(f"{module}.weight", linear.weight_kind.rows_per_scale)
        run = self.parity.pop(module, None) if self.parity is not None else None
        if run is not None:  # the linear's parity rows ride beneath the draft's: each block dequantized once
            run.backend = backend
            x_device = torch.cat((x_device, run.x))
        prepared = reference_activations(x_device, linear) if backend == "reference" else None  # per token

        def product(rows: slice) -> torch.Tensor:
            block = linear.rows(rows)
            if run is None:
                return fused_linear(x_device, block, backend, activations=prepared)
            dequantized = block.dequantize()
            out = fused_linear(x_device, block, backend, dequantized, prepared)
            run.add(rows, dequantized, out[len(x) :])
            return out[: len(x)]

        return by_output_rows(len(x), linear.out_features, blocks, product)

    def kept_linear(self, module: str, x: torch.Tensor) -> torch.Tensor:
        """A linear the quantized draft runs unquantized: its own weight."""
        return self.plain_linear(module, x) if self.shared(f"{module}.weight") else self.own_plain(module, x)

    def quantized_linear(self, module: str, x: torch.Tensor) -> torch.Tensor:
        linear = self.stored(module)
        return self.kept_linear(module, x) if linear is None else self.kernel_linear(module, linear, x)

    def with_floor(self, linear: LinearFn, module: str, x: torch.Tensor) -> torch.Tensor:
        """``linear`` of the reference's rows and, from ``floor_from``, of the floor's: the source draft in bf16
        arithmetic, as an engine runs it (bf16 inputs and weights, float32 sums, bf16 outputs). Products of two
        bf16 values are exact in float32, so the float32 GEMM of the bf16 values is the engine's GEMM up to the
        order of its float32 sums, and one pass over the weight serves both (torch's own bf16 matmul was 5-6x
        slower than float32 on a CPU without bf16 instructions)."""
        import torch

        cut = self.floor_from
        if not cut:
            return linear(module, x)
        if self.weights.dtype(f"{module}.weight") != "BF16":  # the floor's weight is rounded: a pass of its own
            return torch.cat((linear(module, x[:cut]), self.bf16_linear(module, x[cut:])))
        out = linear(module, torch.cat((x[:cut], bf16(x[cut:]))))
        out[cut:] = bf16(out[cut:])  # in place: a copy of the lm_head's logits would be 0.4 GB more
        return out

    def bf16_linear(self, module: str, x: torch.Tensor) -> torch.Tensor:
        """The floor's rows of a linear whose source weight is not bf16: rounded to bf16, as an engine loads it."""
        import torch

        from eaglequant.draft.weights import by_output_rows, widened

        name = f"{module}.weight"
        x16 = bf16(x)

        def product(rows: slice) -> torch.Tensor:
            return bf16(x16 @ widened(self.weights.rows(name, rows).to(torch.bfloat16)).T)

        return by_output_rows(len(x), self.weights.shape(name)[0], self.weights.row_blocks(name), product)

    def reference_linear(self, module: str, x: torch.Tensor) -> torch.Tensor:
        return self.with_floor(self.plain_linear, module, x)
