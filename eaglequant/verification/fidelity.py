"""Draft-head fidelity: how far the quantized draft's next-token distributions are from the source draft's.

The statistics (total variation, KL, arg-max flips beyond what the perturbation explains) and the rule that
decides on them (confidence bounds, not point estimates) are explained in docs/verification.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eaglequant.layouts.head import HeadDescription

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
class DistributionShift:
    """How far one draft's next-token distributions are from the source draft's, over the positions."""

    mean_tv: float
    tv_spread: float  # standard deviation of TV over positions
    mean_kl: float
    kl_spread: float
    top1_agreement: float
    flips: int  # positions whose arg-max changed
    noise_flips: float  # flips the logits' perturbation explains, were it noise

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class HeadFidelity:
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

    def to_json(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "inputs": self.inputs,
            "top1_agreement": self.top1_agreement,
            "mean_kl": self.mean_kl,
            "mean_tv": None if self.shift is None else self.shift.mean_tv,
            "hidden_cosine": self.hidden_cosine,
            "shift": None if self.shift is None else self.shift.to_json(),
            "bf16_floor": None if self.floor is None else self.floor.to_json(),
            "bf16_floor_positions": self.floor_positions,
            "failed": list(self.failed),
        }


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


def _bf16(x: torch.Tensor) -> torch.Tensor:
    """float32 ``x`` rounded to bf16 (to nearest, ties to even) and back."""
    import torch

    return x.to(torch.bfloat16).to(torch.float32)


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


def judge_shift(shift: DistributionShift, tokens: int, limits: Any) -> list[str]:
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
    limits: Any,
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
    block of one weight."""
    import torch

    from eaglequant.draft.forward import DraftForward, LinearFn
    from eaglequant.draft.weights import by_output_rows, unmapped_when_freed, widened
    from eaglequant.kernels import choose_backend, fused_linear, reference_activations

    unmapped_when_freed()
    own_head, own_weights = own or (head, weights)

    def shared(name: str) -> bool:
        return own is None or name in identical

    plain = DraftForward(head, weights).plain_linear
    own_plain = DraftForward(own_head, own_weights).plain_linear
    last_plain: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # module -> its last input and output

    def plain_linear(module: str, x: torch.Tensor) -> torch.Tensor:
        """An unquantized linear's output, computed once when both drafts give it the same input (as they give
        fc: its input is the target's hidden states) and hold the same weight."""
        last = last_plain.get(module)  # its rows may go on beneath x's (the floor's): each row is its own product
        if last is not None and last[0].shape[1:] == x.shape[1:] and torch.equal(last[0][: len(x)], x):
            return last[1][: len(x)]
        out = plain(module, x)
        last_plain[module] = (x, out)
        return out

    def kernel_linear(module: str, linear: StoredLinear, x: torch.Tensor) -> torch.Tensor:
        x_device = x.to(torch.bfloat16).to(device)
        backend = choose_backend(x_device)
        blocks = weights.row_blocks(f"{module}.weight", linear.weight_kind.rows_per_scale)
        run = parity.pop(module, None) if parity is not None else None
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

    def kept_linear(module: str, x: torch.Tensor) -> torch.Tensor:
        """A linear the quantized draft runs unquantized: its own weight."""
        return plain_linear(module, x) if shared(f"{module}.weight") else own_plain(module, x)

    def quantized_linear(module: str, x: torch.Tensor) -> torch.Tensor:
        linear = stored(module)
        return kept_linear(module, x) if linear is None else kernel_linear(module, linear, x)

    floor_from = [0]  # rows of a reference pass from which on they are the floor's (0: none)

    def with_floor(linear: LinearFn, module: str, x: torch.Tensor) -> torch.Tensor:
        """``linear`` of the reference's rows and, from ``floor_from``, of the floor's: the source draft in bf16
        arithmetic, as an engine runs it (bf16 inputs and weights, float32 sums, bf16 outputs). Products of two
        bf16 values are exact in float32, so the float32 GEMM of the bf16 values is the engine's GEMM up to the
        order of its float32 sums, and one pass over the weight serves both (torch's own bf16 matmul was 5-6x
        slower than float32 on a CPU without bf16 instructions)."""
        cut = floor_from[0]
        if not cut:
            return linear(module, x)
        if weights.dtype(f"{module}.weight") != "BF16":  # the floor's weight is rounded: a pass of its own
            return torch.cat((linear(module, x[:cut]), bf16_linear(module, x[cut:])))
        out = linear(module, torch.cat((x[:cut], _bf16(x[cut:]))))
        out[cut:] = _bf16(out[cut:])  # in place: a copy of the lm_head's logits would be 0.4 GB more
        return out

    def bf16_linear(module: str, x: torch.Tensor) -> torch.Tensor:
        """The floor's rows of a linear whose source weight is not bf16: rounded to bf16, as an engine loads it."""
        name = f"{module}.weight"
        x16 = _bf16(x)

        def product(rows: slice) -> torch.Tensor:
            return _bf16(x16 @ widened(weights.rows(name, rows).to(torch.bfloat16)).T)

        return by_output_rows(len(x), weights.shape(name)[0], weights.row_blocks(name), product)

    def reference_linear(module: str, x: torch.Tensor) -> torch.Tensor:
        return with_floor(plain_linear, module, x)

    reference = DraftForward(head, weights, reference_linear)
    quantized = DraftForward(own_head, own_weights, quantized_linear)
    has_logits = "lm_head" in {lin.module for lin in head.linears}
    hidden: dict[str, list[torch.Tensor]] = {"ref": [], "got": [], "bf16": []}
    floor_rows: list[int] = []  # the positions (prefixes of the sequences: attention is causal) of the floor
    with torch.no_grad():
        for aux, tokens in sequences:
            embeds = tokens if tokens.is_floating_point() else weights.gather("embed_tokens.weight", tokens)
            embeds = embeds.to(torch.float32)
            own_embeds = embeds
            if not tokens.is_floating_point() and not shared("embed_tokens.weight"):
                own_embeds = own_weights.gather("embed_tokens.weight", tokens).to(torch.float32)
            start, count = sum(len(h) for h in hidden["ref"]), len(aux)
            prefix = min(count, FLOOR_POSITIONS - len(floor_rows)) if has_logits else 0
            floor_from[0] = count if prefix > 0 else 0  # the floor's prefix runs beneath, as a sequence of its own
            both = (
                reference(
                    torch.cat((aux, aux[:prefix])),
                    torch.cat((embeds, embeds[:prefix])),
                    logits=False,
                    sequences=(count, prefix),
                )
                if prefix > 0
                else reference(aux, embeds, logits=False)
            )
            floor_from[0] = 0
            hidden["ref"].append(both[:count])
            hidden["bf16"].append(both[count:])
            floor_rows += range(start, start + prefix)
            hidden["got"].append(quantized(aux, own_embeds, logits=False))
        last_plain.clear()
        ref_hidden, got_hidden = torch.cat(hidden["ref"]), torch.cat(hidden["got"])
        positions = ref_hidden.shape[0]
        hidden_cosine = float(
            torch.nn.functional.cosine_similarity(ref_hidden.double(), got_hidden.double(), dim=-1).mean()
        )
        if not has_logits:
            return HeadFidelity(positions, hidden_cosine, (), inputs)
        lm_head = stored("lm_head")  # read once, if quantized
        floor_hidden = torch.cat(hidden["bf16"])
        if lm_head is None and shared("lm_head.weight"):  # one pass over the (large) lm_head for all three
            floor_from[0] = 2 * positions
            every = with_floor(plain, "lm_head", torch.cat((ref_hidden, got_hidden, floor_hidden)))
            ref_logits, got_logits = every[:positions], every[positions : 2 * positions]
            floor_logits = every[2 * positions :]
        else:
            floor_from[0] = positions
            both = with_floor(plain, "lm_head", torch.cat((ref_hidden, floor_hidden)))
            ref_logits, floor_logits = both[:positions], both[positions:]
            got_logits = (
                own_plain("lm_head", got_hidden) if lm_head is None else kernel_linear("lm_head", lm_head, got_hidden)
            )
        floor_from[0] = 0
        maps = (vocab_map(head, weights), vocab_map(own_head, own_weights))
        shift = distribution_shift(ref_logits, got_logits, vocab_maps=maps)
        del got_logits
        floor = distribution_shift(ref_logits[floor_rows], floor_logits)
    failed = judge_shift(shift, positions, limits)
    return HeadFidelity(positions, hidden_cosine, tuple(failed), inputs, shift, floor, len(floor_rows))
