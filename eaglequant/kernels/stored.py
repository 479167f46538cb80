"""A quantized linear as a kernel reads it: the stored tensors, with each format's scale convention
turned into one meaning (multiply), and nothing else converted."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from eaglequant.schemes import fp8, mxfp4, nvfp4


@dataclass(frozen=True)
class StoredLinear:
    """``kind``: fp8-channel | nvfp4 | mxfp4.

    - fp8-channel: ``weight`` float8_e4m3fn [N, K]; ``channel_scale`` float32 [N].
    - nvfp4: ``weight`` uint8 [N, K/2] (two E2M1 codes, even element low); ``block_scale`` float8_e4m3fn
      [N, K/16]; ``global_scale`` float32 0-dim, multiplied into the output.
    - mxfp4: ``weight`` uint8 [N, K/2]; ``block_scale`` uint8 E8M0 [N, K/32].

    ``activation``: "fp8-token" (dynamic per-token FP8, W8A8) or None (activations stay in their dtype).
    """

    kind: str
    weight: torch.Tensor
    channel_scale: torch.Tensor | None = None
    block_scale: torch.Tensor | None = None
    global_scale: torch.Tensor | None = None
    activation: str | None = None

    @property
    def out_features(self) -> int:
        return int(self.weight.shape[0])

    @property
    def in_features(self) -> int:
        return int(self.weight.shape[1]) * (1 if self.kind == "fp8-channel" else 2)

    def dequantize(self) -> torch.Tensor:
        """float32 [N, K], exactly what the kernels compute from the stored bytes."""
        return self.dequantize_rows(slice(None))

    def dequantize_rows(self, rows: slice) -> torch.Tensor:
        """float32 [rows, K] of :meth:`dequantize`, reading only those rows."""
        if self.kind == "fp8-channel":
            assert self.channel_scale is not None
            return fp8.dequantize_per_channel(self.weight[rows], self.channel_scale[rows])
        assert self.block_scale is not None
        if self.kind == "nvfp4":
            assert self.global_scale is not None
            return nvfp4.dequantize(self.weight[rows], self.block_scale[rows], self.global_scale)
        return mxfp4.dequantize(self.weight[rows], self.block_scale[rows])

    def rows(self, rows: slice) -> StoredLinear:
        """The linear restricted to output rows ``rows`` (a linear of its own: its scales are per row or global)."""

        def part(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[rows]

        return StoredLinear(
            self.kind,
            self.weight[rows],
            part(self.channel_scale),
            part(self.block_scale),
            self.global_scale,
            self.activation,
        )

    def to(self, device: torch.device | str) -> StoredLinear:
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device)

        return StoredLinear(
            self.kind,
            self.weight.to(device),
            move(self.channel_scale),
            move(self.block_scale),
            move(self.global_scale),
            self.activation,
        )
