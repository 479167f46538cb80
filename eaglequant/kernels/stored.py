"""A quantized linear as a kernel reads it: the stored tensors, with each format's scale convention
turned into one meaning (multiply), and nothing else converted. What each tensor holds is the weight
kind's to say (:mod:`eaglequant.kinds`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from eaglequant.kinds import ActivationKind, WeightKind, activation_kind, weight_kind


@dataclass(frozen=True)
class StoredLinear:
    """``kind``: a registered weight kind (see its class for the tensors it uses): ``weight`` as stored;
    ``channel_scale`` float32 [N]; ``block_scale`` per block (as the kind stores it); ``global_scale``
    float32 0-dim, multiplied into the output.

    ``activation``: the activation kind the engine quantizes inputs with at run time (None: activations stay
    in their dtype, or the kind is not simulated).
    """

    kind: str
    weight: torch.Tensor
    channel_scale: torch.Tensor | None = None
    block_scale: torch.Tensor | None = None
    global_scale: torch.Tensor | None = None
    activation: str | None = None

    @property
    def weight_kind(self) -> WeightKind:
        return weight_kind(self.kind)

    @property
    def activation_kind(self) -> ActivationKind | None:
        return activation_kind(self.activation)

    @property
    def out_features(self) -> int:
        return int(self.weight.shape[0])

    @property
    def in_features(self) -> int:
        return self.weight_kind.in_features(int(self.weight.shape[1]))

    def dequantize(self) -> torch.Tensor:
        """float32 [N, K], exactly what the kernels compute from the stored bytes."""
        return self.dequantize_rows(slice(None))

    def dequantize_rows(self, rows: slice) -> torch.Tensor:
        """float32 [rows, K] of :meth:`dequantize`, reading only those rows."""
        return self.weight_kind.dequantize_rows(self, rows)

    def rows(self, rows: slice) -> StoredLinear:
        """The linear restricted to output rows ``rows`` (a linear of its own); ``rows`` must start on a scale
        block (:attr:`WeightKind.rows_per_scale`)."""
        return self.weight_kind.select_rows(self, rows)

    def to(self, device: torch.device | str) -> StoredLinear:
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device)

        return replace(
            self,
            weight=self.weight.to(device),
            channel_scale=move(self.channel_scale),
            block_scale=move(self.block_scale),
            global_scale=move(self.global_scale),
        )
