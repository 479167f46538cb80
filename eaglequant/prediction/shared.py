"""What every candidate of a search computes alike, computed once from the source draft.

A quantized draft keeps ``fc``, the embedding and the norms before ``fc`` as the source has them (the engines run
``fc`` unquantized), so the step-1 hidden state ``fc(aux)`` of every captured position and each step's token
embeddings are the same numbers for every candidate: the source's chained forward computes them once
(:func:`chain_inputs`) and every candidate whose tensors there equal the source's (:func:`shares_inputs`) reads
them instead of recomputing them. The products are the same float32 operations on the same values, so a
prediction from shared inputs equals the direct one bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from eaglequant.draft.weights import CanonicalWeights

# The tensors the shared inputs are computed from; a candidate shares them only where all of these equal the source's.
_INPUT_TENSORS = ("embed_tokens.weight", "fc.weight", "fc.bias", "input_norm.weight")


@dataclass(frozen=True)
class ChainInputs:
    """One captured sequence's inputs to the draft's chain: ``fc`` of its aux states (step 1's hidden state) and
    each step's token embeddings, float32."""

    fc: torch.Tensor  # [T, H]
    embeds: tuple[torch.Tensor, ...]  # draft_tokens x [T, H]


@torch.no_grad()
def chain_inputs(draft: Any, sequences: list[Any], draft_tokens: int) -> list[ChainInputs]:
    """Each sequence's :class:`ChainInputs`, as ``draft``'s chained forward computes them (``draft``: a
    :class:`~eaglequant.prediction.predict.DraftModel`; ``sequences``: its ``CapturedSequence`` list)."""
    return [
        ChainInputs(
            draft.forward.fc_of(seq.aux),
            tuple(draft.forward.step_embeds(seq.ids, step) for step in range(draft_tokens)),
        )
        for seq in sequences
    ]


def _input_names(weights: CanonicalWeights) -> list[str]:
    fc_norms = sorted(name for name in weights.names if name.startswith("fc_norm."))
    return [name for name in (*_INPUT_TENSORS, *fc_norms) if name in weights.names]


def shares_inputs(source: CanonicalWeights, other: CanonicalWeights) -> bool:
    """Whether ``other`` computes the same chain inputs as ``source``: the same input tensors, equal as float32
    (a dequantized copy widens BF16 exactly), compared a block of rows at a time."""
    names = _input_names(source)
    if names != _input_names(other) or any(source.shape(name) != other.shape(name) for name in names):
        return False
    for name in names:
        blocks = source.row_blocks(name) if len(source.shape(name)) == 2 else [slice(None)]
        for rows in blocks:
            mine = source.rows(name, rows) if rows.start is not None else source(name)
            theirs = other.rows(name, rows) if rows.start is not None else other(name)
            if not torch.equal(mine.to(torch.float32), theirs.to(torch.float32)):
                return False
    return True
