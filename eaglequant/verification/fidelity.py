"""Draft-head fidelity: how far the quantized draft's next-token distributions are from the source draft's.

The statistics (total variation, KL, arg-max flips beyond what the perturbation explains) and the rule that
decides on them (confidence bounds, not point estimates) are explained in docs/verification.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eaglequant.common.json_fields import JsonRecord, named
from eaglequant.layouts.head import HeadDescription
from eaglequant.schemes.model import VerifyThresholds
from eaglequant.verification.draft_pair import DraftPair

if TYPE_CHECKING:
    import torch

    from eaglequant.draft.weights import CanonicalWeights
    from eaglequant.kinds.base import StoredLinear
    from eaglequant.verification.layer_parity import ParityRun

DEFAULT_TOKENS = 256  # draft positions in the fidelity run
CONFIDENCE_Z = 2.33  # one-sided 99%: a head statistic fails only when its confidence bound misses the threshold
FLIP_Z = 3.09  # one-sided 99.9% on the count of arg-max flips the perturbation explains
FLIP_RIVALS = 16  # the nearest rivals of each position's top-1 that the flip estimate considers
FLOOR_POSITIONS = 64  # positions the bf16 floor (reported, not judged) is measured on: a whole third forward costs


@dataclass(frozen=True)
class DistributionShift(JsonRecord):
    """How far one draft's next-token distributions are from the source draft's, over the positions."""

    mean_tv: float
    tv_spread: float  # standard deviation of TV over positions
    mean_kl: float
    kl_spread: float
    top1_agreement: float
    flips: int  # positions whose arg-max changed
    noise_flips: float  # flips the logits' perturbation explains, were it noise


@dataclass(frozen=True)
class HeadFidelity(JsonRecord):
    """The quantized draft head against the source's; written with the shift's headline figures first."""

    json_computed = ("top1_agreement", "mean_kl", "mean_tv")
    json_renamed = named(floor="bf16_floor", floor_positions="bf16_floor_positions")
    json_first = ("tokens", "inputs", *json_computed, "hidden_cosine", "shift", "floor", "floor_positions")

    tokens: int
    hidden_cosine: float
    failed: tuple[str, ...]
    inputs: str  # which draft inputs were used, in words
    shift: DistributionShift | None = None  # quantized against source; None without lm_head (the target's)
    floor: DistributionShift | None = None  # the source draft in bf16 arithmetic, as an engine runs it
    floor_positions: int = 0  # the first positions the floor was measured on

    @property
    def top1_agreement(self) -> float | None:
        return None if self.shift is None else self.shift.top1_agreement

    @property
    def mean_kl(self) -> float | None:
        return None if self.shift is None else self.shift.mean_kl

    @property
    def mean_tv(self) -> float | None:
        return None if self.shift is None else self.shift.mean_tv


def distribution_shift(
    reference: torch.Tensor,
    other: torch.Tensor,
    chunk: int = 8,
    vocab_maps: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None),
) -> DistributionShift:
    """TV, KL and arg-max flips of ``other``'s logits against ``reference``'s ([T, V] each), with the flips a
    noise-like perturbation of the same size would cause: logits perturbed independently with standard
    deviation s let a rival trailing the top-1 by m overtake it with probability Phi(-m / (s * sqrt 2)); a
    position flips unless none of its nearest rivals does. ``vocab_maps``: each draft's ``d2t`` (None: its ids
    are target ids); arg-maxes are compared as the target tokens they propose (draft id i is i + d2t[i])."""
    import torch

    tv, kl, flips, expected = [], [], [], []
    for start in range(0, reference.shape[0], chunk):
        ref = reference[start : start + chunk].double()
        got = other[start : start + chunk].double()
        ref_logp, got_logp = torch.log_softmax(ref, -1), torch.log_softmax(got, -1)
        ref_p = ref_logp.exp()
        tv.append(0.5 * (ref_p - got_logp.exp()).abs().sum(-1))
        kl.append((ref_p * (ref_logp - got_logp)).sum(-1))
        flips.append(target_ids(ref.argmax(-1), vocab_maps[0]) != target_ids(got.argmax(-1), vocab_maps[1]))
        top = ref.topk(min(FLIP_RIVALS + 1, ref.shape[-1]), -1).values
        margins = top[:, :1] - top[:, 1:]  # [T, rivals]
        spread = (got - ref).std(-1, keepdim=True).clamp_min(1e-30)
        overtake = 0.5 * torch.erfc(margins / (spread * 2.0))  # Phi(-m/(s*sqrt2)) = erfc(m/(2s))/2
        expected.append(1.0 - torch.prod(1.0 - overtake, dim=-1))
    tv_all, kl_all, flips_all = torch.cat(tv), torch.cat(kl), torch.cat(flips)
    count = tv_all.numel()
    return DistributionShift(
        float(tv_all.mean()),
        float(tv_all.std()) if count > 1 else 0.0,
        float(kl_all.mean()),
        float(kl_all.std()) if count > 1 else 0.0,
        1.0 - float(flips_all.double().mean()),
        int(flips_all.sum()),
        float(torch.cat(expected).sum()),
    )


def target_ids(ids: torch.Tensor, d2t: torch.Tensor | None) -> torch.Tensor:
    """The target vocabulary ids of draft ids ``ids``: i + d2t[i] (an id past the end of ``d2t`` maps to -1)."""
    if d2t is None:
        return ids
    import torch

    inside = ids < d2t.numel()
    offsets = d2t[ids.clamp(max=max(d2t.numel() - 1, 0))] if d2t.numel() else torch.zeros_like(ids)
    return torch.where(inside, ids + offsets, torch.full_like(ids, -1))


def vocab_map(head: HeadDescription, weights: CanonicalWeights) -> torch.Tensor | None:
    """The head's ``d2t`` (draft id -> offset to its target id) as int64, or None when its vocabulary is the
    target's."""
    import torch

    name = next((t.name for t in head.tensors if t.module == "d2t"), None)
    return None if name is None else weights.checkpoint.read(name).reshape(-1).to(torch.int64)


def judge_shift(shift: DistributionShift, tokens: int, limits: VerifyThresholds) -> list[str]:
    """What the head's distribution shift fails, deciding on confidence bounds rather than point estimates."""
    failed = []
    root = math.sqrt(max(tokens, 1))
    tv_lower = shift.mean_tv - CONFIDENCE_Z * shift.tv_spread / root
    if tv_lower > limits.max_mean_tv:
        failed.append(f"mean TV {shift.mean_tv:.4f} (at least {tv_lower:.4f} at 99%) > {limits.max_mean_tv}")
    kl_lower = shift.mean_kl - CONFIDENCE_Z * shift.kl_spread / root
    if kl_lower > limits.max_mean_kl:
        failed.append(f"mean KL {shift.mean_kl:.4f} (at least {kl_lower:.4f} at 99%) > {limits.max_mean_kl}")
    explained = shift.noise_flips + FLIP_Z * math.sqrt(shift.noise_flips) + 1.0
    if shift.top1_agreement < limits.min_top1_agreement and shift.flips > explained:
        failed.append(
            f"top-1 agreement {shift.top1_agreement:.3f} < {limits.min_top1_agreement}: {shift.flips} arg-max flips "
            f"where the logits' perturbation explains {shift.noise_flips:.1f}"
        )
    return failed


def synthetic_inputs(head: HeadDescription, weights: CanonicalWeights, seed: int, tokens: int) -> list[tuple[Any, Any]]:
    """One seeded sequence: target hidden states from a standard normal, random token ids (each draft embeds them
    with its own embed_tokens), or a 0.02-scale normal as the embeddings of a head without embed_tokens."""
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    dims = head.dims
    aux = torch.randn(tokens, dims.num_aux_hidden_states * dims.target_hidden_size, generator=generator)
    if "embed_tokens" in head.features:
        vocab = weights.shape("embed_tokens.weight")[0]
        return [(aux, torch.randint(0, vocab, (tokens,), generator=generator))]
    return [(aux, torch.randn(tokens, dims.hidden_size, generator=generator) * 0.02)]


def head_fidelity(
    head: HeadDescription,
    weights: CanonicalWeights,
    stored: Callable[[str], StoredLinear | None],
    limits: VerifyThresholds,
    sequences: list[tuple[Any, Any]],
    device: str,
    inputs: str,
    own: tuple[HeadDescription, CanonicalWeights] | None = None,
    identical: frozenset[str] = frozenset(),
    parity: dict[str, ParityRun] | None = None,
) -> HeadFidelity:
    """``sequences``: (aux hidden [T, n_aux * H_target], embeds [T, H] or token ids [T]) each, run one at a time.
    ``stored(module)``: the quantized linear of a canonical module, read when needed (None: not quantized).
    ``own``: the quantized checkpoint's head (its config.json) and tensors, which the quantized draft reads for
    everything but its quantized linears: norms, embeddings, unquantized linears, d2t (default: the source's).
    ``identical``: canonical tensor names whose bytes are proven the same in both, so that one product serves
    both drafts. ``parity``: canonical module -> its parity, gathered as the quantized draft first runs the linear
    (and taken out of the dict then). Every linear is computed a block of output rows at a time, so memory holds one
    block of one weight.

    Steps: both drafts' last hidden states over every position (the floor's beneath the reference's), then their
    logits through the lm_head, then the distribution shift and its judgement."""
    import torch

    from eaglequant.draft.weights import unmapped_when_freed

    unmapped_when_freed()
    pair = DraftPair(head, weights, stored, device, own, identical, parity)
    has_logits = "lm_head" in {lin.module for lin in head.linears}
    with torch.no_grad():
        hidden = _hidden_states(pair, sequences, FLOOR_POSITIONS if has_logits else 0)
        pair.last_plain.clear()
        cosine = torch.nn.functional.cosine_similarity(hidden.reference.double(), hidden.quantized.double(), dim=-1)
        hidden_cosine = float(cosine.mean())
        positions = len(hidden.reference)
        if not has_logits:
            return HeadFidelity(positions, hidden_cosine, (), inputs)
        logits = _logits(pair, hidden)
        maps = (vocab_map(head, weights), vocab_map(pair.own_head, pair.own_weights))
        shift = distribution_shift(logits.reference, logits.quantized, vocab_maps=maps)
        logits.quantized = logits.quantized[:0]  # its logits freed before the floor's shift
        floor = distribution_shift(logits.reference[hidden.floor_rows], logits.floor)
    failed = judge_shift(shift, positions, limits)
    return HeadFidelity(positions, hidden_cosine, tuple(failed), inputs, shift, floor, len(hidden.floor_rows))


@dataclass
class _DraftOutputs:
    """The source draft's (``reference``), the quantized draft's and the bf16 floor's outputs, row per position."""

    reference: torch.Tensor
    quantized: torch.Tensor
    floor: torch.Tensor
    floor_rows: list[int]  # the reference's positions the floor's rows are (prefixes of the sequences)


def _hidden_states(pair: DraftPair, sequences: list[tuple[Any, Any]], floor_positions: int) -> _DraftOutputs:
    """Both drafts' last hidden states, sequence by sequence; the reference pass carries the floor's first
    ``floor_positions`` positions beneath it, as a sequence of its own (attention is causal, so a prefix of a
    sequence is a sequence)."""
    import torch

    reference, quantized = pair.reference(), pair.quantized()
    ref: list[torch.Tensor] = []
    got: list[torch.Tensor] = []
    floor: list[torch.Tensor] = []
    floor_rows: list[int] = []
    for aux, tokens in sequences:
        embeds, own_embeds = _embeddings(pair, tokens)
        start, count = sum(len(h) for h in ref), len(aux)
        prefix = min(count, floor_positions - len(floor_rows))
        if prefix > 0:
            with pair.floor_beneath(count):
                both = reference(
                    torch.cat((aux, aux[:prefix])),
                    torch.cat((embeds, embeds[:prefix])),
                    logits=False,
                    sequences=(count, prefix),
                )
        else:
            both = reference(aux, embeds, logits=False)
        ref.append(both[:count])
        floor.append(both[count:])
        floor_rows += range(start, start + prefix)
        got.append(quantized(aux, own_embeds, logits=False))
    return _DraftOutputs(torch.cat(ref), torch.cat(got), torch.cat(floor), floor_rows)


def _embeddings(pair: DraftPair, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The sequence's embeddings as the source draft and as the quantized draft read them."""
    import torch

    if tokens.is_floating_point():
        embeds = tokens.to(torch.float32)
        return embeds, embeds
    embeds = pair.weights.gather("embed_tokens.weight", tokens).to(torch.float32)
    if pair.shared("embed_tokens.weight"):
        return embeds, embeds
    return embeds, pair.own_weights.gather("embed_tokens.weight", tokens).to(torch.float32)


def _logits(pair: DraftPair, hidden: _DraftOutputs) -> _DraftOutputs:
    """The three drafts' logits; one pass over the (large) lm_head serves all three when both drafts hold the
    source's, else one for the reference and the floor and one for the quantized draft."""
    import torch

    positions = len(hidden.reference)
    lm_head = pair.stored("lm_head")  # read once, if quantized
    if lm_head is None and pair.shared("lm_head.weight"):
        with pair.floor_beneath(2 * positions):
            every = pair.with_floor(
                pair.plain, "lm_head", torch.cat((hidden.reference, hidden.quantized, hidden.floor))
            )
        return _DraftOutputs(
            every[:positions], every[positions : 2 * positions], every[2 * positions :], hidden.floor_rows
        )
    with pair.floor_beneath(positions):
        both = pair.with_floor(pair.plain, "lm_head", torch.cat((hidden.reference, hidden.floor)))
    if lm_head is None:
        got = pair.own_plain("lm_head", hidden.quantized)
    else:
        got = pair.kernel_linear("lm_head", lm_head, hidden.quantized)
    return _DraftOutputs(both[:positions], got, both[positions:], hidden.floor_rows)
