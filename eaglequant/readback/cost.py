"""What one speculative round costs a draft head in weight bytes, as an engine runs it: the conversion's output
priced, planned (``inspect``, ``convert``, ``search``) or read back (``explain``).

A bandwidth model of small-batch decoding, not a measured time: at the batch sizes where speculative decoding pays,
a draft step is bound by the weight bytes it reads. In one round with ``k`` drafted tokens, vLLM, SGLang and
TensorRT-LLM run ``fc`` once (the first step applies it to the target's hidden states; later steps feed the draft's
own hidden state), every decoder linear, every norm and the ``lm_head`` ``k`` times, and read ``k + 1`` rows of the
embedding. A module counts in the precision the engine runs it in: as stored (weights, scales, zero points) when the
engine quantizes it, else at :data:`SERVING_WEIGHT_BYTES` a weight, the BF16/FP16 the engines serve a draft in.
A draft without its own ``lm_head`` or embedding reads the target's, counted as BF16 and marked shared.
The counts are the same in every engine; an engine decides only which linears it runs quantized.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS, check_draft_tokens
from eaglequant.common.json_fields import JsonRecord, named, rounded
from eaglequant.layouts.head import HeadDescription, Role

SERVING_WEIGHT_BYTES = 2  # an unquantized module at run time: BF16 or FP16, whatever the source stored

# The parts of a draft a round reads, in the order a report lists them.
PARTS = ("fc", "decoder", "lm_head", "embedding", "norms")
MODEL_NOTE = (
    "a bandwidth model of small-batch decoding (weights read per speculative round: fc once, decoder linears, norms "
    "and lm_head k times, k + 1 embedding rows), not a measured time"
)


@dataclass(frozen=True)
class PartCost(JsonRecord):
    """One part of the draft: how many times a round reads it, and the bytes of one read (as run, and in the
    source at the serving dtype)."""

    json_computed = ("bytes_per_round", "source_bytes_per_round")
    json_renamed = named(reads="reads_per_round", shared="shared_with_target")
    json_first = (
        "part",
        "reads",
        "bytes_per_read",
        "source_bytes_per_read",
        "bytes_per_round",
        "source_bytes_per_round",
    )

    part: str  # one of PARTS
    reads: int
    bytes_per_read: int
    source_bytes_per_read: int
    quantized: bool  # some of it runs quantized
    shared: bool = False  # read from the target (the draft has none of its own)

    @property
    def bytes_per_round(self) -> int:
        return self.reads * self.bytes_per_read

    @property
    def source_bytes_per_round(self) -> int:
        return self.reads * self.source_bytes_per_read


@dataclass(frozen=True)
class RoundCost(JsonRecord):
    """The weight bytes one engine reads per speculative round of ``draft_tokens`` tokens, against the source's; written
    with what the figures model (``model``)."""

    json_computed = ("bytes_per_round", "source_bytes_per_round", "reduction", "model")
    json_values = named(reduction=rounded(4))
    json_first = (
        *("engine", "release", "draft_tokens", "bytes_per_round", "source_bytes_per_round", "reduction"),
        *("resident_bytes", "source_resident_bytes"),
    )

    engine: str
    release: str
    draft_tokens: int
    parts: tuple[PartCost, ...]
    resident_bytes: int  # the draft's own weights as the engine holds them (shared parts are the target's)
    source_resident_bytes: int

    @property
    def bytes_per_round(self) -> int:
        return sum(part.bytes_per_round for part in self.parts)

    @property
    def engine_release(self) -> str:
        """``vLLM 0.32.0``: the engine's title and the release this cost was priced for."""
        from eaglequant.engines import engine_title

        return engine_title(self.engine, self.release)

    @property
    def source_bytes_per_round(self) -> int:
        return sum(part.source_bytes_per_round for part in self.parts)

    @property
    def reduction(self) -> float:
        """How many times fewer bytes a round reads than the source's (1.22 for 1.22x fewer)."""
        return self.source_bytes_per_round / max(self.bytes_per_round, 1)

    @property
    def shared_parts(self) -> tuple[str, ...]:
        return tuple(part.part for part in self.parts if part.shared)

    @property
    def model(self) -> str:
        return MODEL_NOTE

    def part(self, name: str) -> PartCost | None:
        return next((part for part in self.parts if part.part == name), None)

    def at(self, draft_tokens: int) -> RoundCost:
        """The same draft in the same engine priced for a round of ``draft_tokens``: each part read as often as
        such a round reads it, each read the same bytes (the speed-up model prices every k from one pricing)."""
        reads = reads_per_round(draft_tokens)
        parts = tuple(dataclasses.replace(part, reads=reads[part.part]) for part in self.parts)
        return dataclasses.replace(self, draft_tokens=draft_tokens, parts=parts)

    def as_source(self) -> RoundCost:
        """The head it was converted from in the same engine: every part at the serving dtype."""
        parts = tuple(
            dataclasses.replace(part, bytes_per_read=part.source_bytes_per_read, quantized=False) for part in self.parts
        )
        return dataclasses.replace(self, parts=parts, resident_bytes=self.source_resident_bytes)


@dataclass(frozen=True)
class Baseline:
    """What "fewer bytes" counts against, named: the BF16 draft a user started from. For a draft ``search`` chose,
    the source it searched from (its unpruned head, where the pick has a pruned vocabulary), so ``search``,
    ``explain``, ``inspect`` and the card give one ratio for one checkpoint; else the head it was converted from."""

    name: str
    bytes_per_round: int
    draft_tokens: int


def converted_from_baseline(cost: RoundCost) -> Baseline:
    """The head the draft was converted from, at the serving dtype (:attr:`RoundCost.source_bytes_per_round`)."""
    return Baseline("the BF16 head it was converted from", cost.source_bytes_per_round, cost.draft_tokens)


def fewer(cost: RoundCost, baseline: Baseline | None) -> tuple[float, Baseline]:
    """How many times fewer bytes a round of ``cost`` reads than ``baseline``'s (None, or one priced at another
    k: the head it was converted from), and the baseline that ratio is against."""
    if baseline is None or baseline.draft_tokens != cost.draft_tokens:
        baseline = converted_from_baseline(cost)
    return baseline.bytes_per_round / max(cost.bytes_per_round, 1), baseline


# From this share of a round's bytes, an unquantized lm_head is where the bytes are (a Kimi-K2.5 MLA head's BF16
# lm_head is 7.05 of its 8.50 GB a round, as vLLM builds it without a quant config), and the user is told so.
LM_HEAD_LEVER_SHARE = 0.3


def lm_head_lever(cost: RoundCost) -> str | None:
    """Where the draft's own ``lm_head`` runs unquantized and is a large share of the bytes a round reads: what that
    share is, and that a smaller draft vocabulary (``eaglequant prune``) is what cuts it."""
    part = cost.part("lm_head")
    if part is None or part.quantized or part.shared or not cost.bytes_per_round:
        return None
    share = part.bytes_per_round / cost.bytes_per_round
    if share < LM_HEAD_LEVER_SHARE:
        return None
    return (
        f"lm_head runs unquantized in {cost.engine_release} and is {share:.0%} of the bytes a round reads: "
        "quantizing the other modules cannot cut that share; a smaller draft vocabulary can (eaglequant prune)"
    )


def round_cost(
    head: HeadDescription,
    engine: str,
    release: str,
    run_quantized: Mapping[str, int],
    draft_tokens: int = DEFAULT_DRAFT_TOKENS,
) -> RoundCost:
    """The round cost of ``head`` in engine ``engine`` (release ``release``, which only label it: every engine reads
    the same counts). ``run_quantized``: canonical linear -> the bytes of every tensor stored for it, for each linear
    the engine runs quantized; every other module runs at :data:`SERVING_WEIGHT_BYTES` a weight."""
    parts, tally = _part_costs(head, run_quantized, draft_tokens)
    return RoundCost(engine, release, draft_tokens, parts, tally.resident, tally.source_resident)


def source_bytes_per_round(head: HeadDescription, draft_tokens: int = DEFAULT_DRAFT_TOKENS) -> int:
    """The weight bytes a round of ``draft_tokens`` reads from ``head`` unquantized, at the serving dtype."""
    parts, _ = _part_costs(head, {}, draft_tokens)
    return sum(part.source_bytes_per_round for part in parts)


def reads_per_round(draft_tokens: int) -> dict[str, int]:
    """How many times a round of ``draft_tokens`` reads each part: ``fc`` once, the embedding a row a token and
    one more, everything else once a drafted token."""
    check_draft_tokens(draft_tokens)
    k = draft_tokens
    return {"fc": 1, "decoder": k, "lm_head": k, "embedding": k + 1, "norms": k}


def _part_costs(
    head: HeadDescription, run_quantized: Mapping[str, int], draft_tokens: int
) -> tuple[tuple[PartCost, ...], _Tally]:
    reads = reads_per_round(draft_tokens)
    tally = _Tally()
    for linear in head.linears:
        source = linear.out_features * linear.in_features * SERVING_WEIGHT_BYTES
        as_run = run_quantized.get(linear.module, source)
        tally.add(_part_of(linear.module), as_run, source, quantized=linear.module in run_quantized)
    for tensor in head.tensors:
        served = math.prod(tensor.info.shape) * SERVING_WEIGHT_BYTES
        if tensor.role is Role.EMBEDDING:  # a round reads one row a token
            row = tensor.info.shape[-1] * SERVING_WEIGHT_BYTES
            tally.add("embedding", row, row, resident=served)
        elif tensor.role is Role.NORM:
            tally.add("norms", served, served)
        elif tensor.role is Role.BIAS:
            tally.add(_part_of(tensor.module), served, served)
        elif tensor.role is Role.VOCAB_MAP and tensor.name.endswith("d2t"):  # held, looked up once a token
            tally.resident += tensor.info.nbytes
            tally.source_resident += tensor.info.nbytes
    shared = _read_from_target(head, tally)
    parts = tuple(
        PartCost(
            part, reads[part], tally.per_read[part][0], tally.per_read[part][1], tally.quantized[part], part in shared
        )
        for part in PARTS
        if tally.per_read[part][1]
    )
    return parts, tally


class _Tally:
    """Bytes per read of each part (as run, in the source) and the resident bytes, added up module by module."""

    def __init__(self) -> None:
        self.per_read = {part: [0, 0] for part in PARTS}
        self.quantized = dict.fromkeys(PARTS, False)
        self.resident = 0
        self.source_resident = 0

    def add(self, part: str, as_run: int, source: int, *, quantized: bool = False, resident: int | None = None) -> None:
        self.per_read[part][0] += as_run
        self.per_read[part][1] += source
        self.quantized[part] |= quantized
        self.resident += as_run if resident is None else resident
        self.source_resident += source if resident is None else resident


def _part_of(module: str) -> str:
    return module if module in ("fc", "lm_head") else "decoder"


def _read_from_target(head: HeadDescription, tally: _Tally) -> set[str]:
    """The parts the draft has none of and reads from the target (as BF16, sized from the head's dims); not
    resident in the draft."""
    shared = set()
    row = head.dims.hidden_size * SERVING_WEIGHT_BYTES
    rows = head.dims.vocab_size or head.dims.draft_vocab_size
    if not tally.per_read["lm_head"][1] and rows:
        tally.per_read["lm_head"] = [rows * row, rows * row]
        shared.add("lm_head")
    if not tally.per_read["embedding"][1]:
        tally.per_read["embedding"] = [row, row]
        shared.add("embedding")
    return shared
