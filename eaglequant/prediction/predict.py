"""Predicted acceptance: the engine's greedy drafting rule, replayed on captured inputs.

vLLM 0.32 drafts EAGLE-3 heads greedily by default (``SpeculativeConfig.draft_sample_method = "greedy"``): each
drafted token is the draft's arg-max, its probability treated as 1 by the rejection sampler. At temperature 0 a
drafted token is accepted exactly when it is the target's arg-max, so along the target's own greedy continuation (what
``eaglequant capture`` records) acceptance is decided by the draft's arg-max alone. The prediction runs every
chain the engine could start (:mod:`.chain`), then walks the continuation as the engine does: draft k tokens,
keep the accepted prefix a, emit a + 1 tokens, draft again from there. Each sequence gives the engine's
counters (drafts, accepted, accepted per position); the figures and their intervals are those of a measured
run (:mod:`eaglequant.measurement.statistics`), so predicted and measured acceptance compare directly.

A source draft and a quantized one are predicted on the same captured sequences, so their difference is
paired. Files from trainers (teacher-forced on dataset text, not the target's continuation) predict step 1
exactly, and later steps only where the text agrees with the target's arg-max.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS, DEFAULT_MAX_DRAFT_TOKENS, check_draft_tokens
from eaglequant.common.errors import InputError, Param, given, suggested, words
from eaglequant.common.findings import Finding
from eaglequant.measurement.statistics import (
    Acceptance,
    BudgetVerdict,
    Interval,
    PromptCounts,
    budget_verdict,
    paired_difference,
)
from eaglequant.prediction.figures import RULE, PredictionRecord, TableRow, verdict_text

if TYPE_CHECKING:
    from eaglequant.layouts.head import HeadDescription
    from eaglequant.prediction.shared import ChainInputs


@dataclass(frozen=True)
class CapturedSequence:
    aux: torch.Tensor  # [T, n_aux * H]
    ids: torch.Tensor  # [T]: the token each draft position reads
    reference: torch.Tensor  # [T]: the target's arg-max after that token
    start: int  # first draft position on the target's continuation
    max_new_tokens: int | None = None  # the engine stops drafting once it has emitted this many (None: at the end)


def load_captured(path: Path, parameter: str = "inputs", head: HeadDescription | None = None) -> list[CapturedSequence]:
    """The sequences of a capture file that holds the target's next-token choices (``eaglequant capture``), or of
    a directory of vLLM connector files; with ``head``, checked to be the inputs that draft reads."""
    from safetensors import safe_open

    from eaglequant.draft.connector_files import as_capture_file

    where = given(parameter, str(path))
    path = as_capture_file(path, parameter, None if head is None else head.dims.num_aux_hidden_states)
    if not path.is_file():
        raise InputError(words(where, ": no such file"), hint="write one with `eaglequant capture`")
    if head is not None:  # what the file records it was made for, before its tensors are read
        from eaglequant.draft.capture_file import check_capture_for, read_provenance

        check_capture_for(head, read_provenance(path, parameter), where)
    with safe_open(str(path), "pt") as handle:
        names = set(handle.keys())
        missing = [k for k in ("hidden_states", "input_ids", "target_top_ids") if k not in names]
        if missing:
            raise InputError(
                words(where, f": no {missing[0]!r}, so it cannot predict acceptance"),
                hint="capture inputs with the target's choices: `eaglequant capture --target T --draft SRC OUT`",
            )
        tensors = {name: handle.get_tensor(name) for name in names}
    hidden, ids, top = tensors["hidden_states"], tensors["input_ids"], tensors["target_top_ids"]
    if head is not None:
        _check_width(hidden, head, where)
    if hidden.dim() == 2:
        hidden, ids, top = hidden[None], ids[None], top[None]
    count, length = ids.shape[:2]
    lengths = tensors.get("lengths", torch.full((count,), length)).tolist()
    starts = tensors.get("continuation_start", torch.zeros(count, dtype=torch.int64)).tolist()
    limits = tensors.get("max_new_tokens", torch.full((count,), -1)).tolist()  # -1: not limited (trainer files)
    return [
        CapturedSequence(
            hidden[i, : lengths[i]].to(torch.float32),
            ids[i, : lengths[i]].long(),
            top[i, : lengths[i], 0].long(),
            starts[i],
            None if limits[i] < 0 else limits[i],
        )
        for i in range(count)
    ]


def _check_width(hidden: torch.Tensor, head: HeadDescription, where: Param) -> None:
    """Inputs captured for another draft or target are refused before any forward: their aux width differs."""
    dims = head.dims
    width = dims.num_aux_hidden_states * dims.target_hidden_size
    if hidden.shape[-1] != width:
        raise InputError(
            words(
                where,
                f": hidden states are {hidden.shape[-1]} wide; this draft reads {width} "
                f"({dims.num_aux_hidden_states} aux layers x {dims.target_hidden_size})",
            ),
            hint="capture the inputs for this draft and its target: `eaglequant capture --target T --draft SRC OUT`",
        )


def _as_target(choices: torch.Tensor, d2t: torch.Tensor | None) -> torch.Tensor:
    return choices if d2t is None else choices + d2t[choices]


def replay(matches: list[list[bool]], start: int, draft_tokens: int, max_new_tokens: int | None = None) -> PromptCounts:
    """The engine's walk along one sequence: ``matches[s][t]``: step s of the chain at t drafts the target's
    token. The engine drafts k tokens whenever it has emitted fewer than ``max_new_tokens`` (when drafting at
    t it has emitted t - start + 1), and a draft is only judged here where all k have a reference. Returns
    the counters the engine would report."""
    length = len(matches[0])
    t, drafts, accepted = start, 0, 0
    per_position = [0] * draft_tokens
    while t + draft_tokens <= length and (max_new_tokens is None or t - start + 1 < max_new_tokens):
        run = 0
        while run < draft_tokens and matches[run][t]:
            run += 1
        drafts += 1
        accepted += run
        for j in range(run):
            per_position[j] += 1
        t += run + 1
    return PromptCounts(drafts, accepted, tuple(per_position), ())


@dataclass(frozen=True)
class DraftModel:
    """A draft to predict: its head, weights and d2t, from a checkpoint directory of plain weights."""

    forward: Any  # ChainedDraft
    d2t: torch.Tensor | None


def open_draft(checkpoint: Any, device: str = "cpu") -> DraftModel:
    """The draft in ``checkpoint``, its chain run on ``device`` (``cuda``: its weights moved there, float32)."""
    from eaglequant.draft.weights import CanonicalWeights
    from eaglequant.layouts.detect import describe_head
    from eaglequant.prediction.chain import ChainedDraft

    head = describe_head(checkpoint)
    weights = CanonicalWeights(checkpoint, head)
    d2t_name = next((t.name for t in head.tensors if t.module == "d2t"), None)
    d2t = None if d2t_name is None else checkpoint.read(d2t_name).to(torch.int64)
    return DraftModel(ChainedDraft(head, weights, device=device), d2t)


@torch.no_grad()
def chain_matches(
    draft: DraftModel, seq: CapturedSequence, steps: int, inputs: ChainInputs | None = None
) -> list[list[bool]]:
    """``matches[s][t]``: step s of the chain that starts at t drafts the target's token (``steps`` steps; a step
    with no reference, past the sequence's end, is no match)."""
    choices = draft.forward.chain(seq.aux, seq.ids, steps, inputs)
    length = len(seq.ids)
    matches = []
    for s, chosen in enumerate(choices):
        proposed = _as_target(chosen[: length - s].cpu(), draft.d2t)
        matches.append((proposed == seq.reference[s:]).tolist() + [False] * s)
    return matches


def counts_by_draft_tokens(matches: list[list[bool]], seq: CapturedSequence) -> tuple[PromptCounts, ...]:
    """The engine's counters for every k from 1 to ``len(matches)``: the walk with k tokens drafted reads only the
    first k steps' matches (step s of a chain depends on steps before it alone), so one chain gives them all."""
    return tuple(replay(matches[:k], seq.start, k, seq.max_new_tokens) for k in range(1, len(matches) + 1))


@dataclass(frozen=True)
class AcceptanceTable:
    """One draft's acceptance for every k (tokens drafted a round) from 1 to :attr:`max_draft_tokens`, from one
    chain of that many steps, over sequences in order; ``positions``: each sequence's captured draft positions,
    run through the chain."""

    counts: tuple[tuple[PromptCounts, ...], ...]  # per sequence, per k from 1
    positions: tuple[int, ...] = ()

    @property
    def max_draft_tokens(self) -> int:
        return min((len(row) for row in self.counts), default=0)

    @property
    def sequences(self) -> int:
        return len(self.counts)

    def __getitem__(self, draft_tokens: int) -> Acceptance:
        """The acceptance with ``draft_tokens`` tokens drafted a round."""
        if not 1 <= draft_tokens <= self.max_draft_tokens:
            raise KeyError(draft_tokens)
        return Acceptance(tuple(row[draft_tokens - 1] for row in self.counts))

    def lengths(self) -> dict[int, float]:
        """k -> greedy acceptance length with k tokens drafted a round."""
        return {k: self[k].length().value for k in range(1, self.max_draft_tokens + 1)}

    def first(self, sequences: int) -> AcceptanceTable:
        """The table over the first ``sequences`` sequences (what a candidate stopped early is paired with)."""
        return AcceptanceTable(self.counts[:sequences], self.positions[:sequences])


def predicted_sequences(
    draft: DraftModel, sequences: list[CapturedSequence], max_draft_tokens: int, shared: list[ChainInputs] | None = None
) -> Iterator[tuple[PromptCounts, ...]]:
    """Each sequence's counters for every k from 1 to ``max_draft_tokens``, in order, one chain each (a caller
    may stop early)."""
    for index, seq in enumerate(sequences):
        inputs = None if shared is None else shared[index]
        yield counts_by_draft_tokens(chain_matches(draft, seq, max_draft_tokens, inputs), seq)


@torch.no_grad()
def predict_table(
    draft: DraftModel,
    sequences: list[CapturedSequence],
    max_draft_tokens: int = DEFAULT_MAX_DRAFT_TOKENS,
    shared: list[ChainInputs] | None = None,
    sequence_done: Callable[[int], None] = lambda _: None,
) -> AcceptanceTable:
    """``draft``'s greedy acceptance on ``sequences`` for every k from 1 to ``max_draft_tokens``; ``shared``: each
    sequence's chain inputs, computed once by a draft with the same tensors there (:mod:`.shared`), the same numbers
    as computing them again; ``sequence_done`` is told each sequence's index as it is replayed."""
    counts = []
    for index, row in enumerate(predicted_sequences(draft, sequences, max_draft_tokens, shared)):
        counts.append(row)
        sequence_done(index)
    return AcceptanceTable(tuple(counts), tuple(len(seq.ids) for seq in sequences))


def predict(
    draft: DraftModel,
    sequences: list[CapturedSequence],
    draft_tokens: int,
    shared: list[ChainInputs] | None = None,
    sequence_done: Callable[[int], None] = lambda _: None,
) -> Acceptance:
    """``draft``'s greedy acceptance on ``sequences`` with ``draft_tokens`` drafted a round (the last row of
    :func:`predict_table` for a chain of that many steps)."""
    return predict_table(draft, sequences, draft_tokens, shared, sequence_done)[draft_tokens]


def check_max_draft_tokens(max_draft_tokens: object) -> int:
    """A table's longest k: a k the engines take, and at least the k the verdict is judged at (a row of it)."""
    max_draft_tokens = check_draft_tokens(max_draft_tokens)
    if max_draft_tokens < DEFAULT_DRAFT_TOKENS:
        raise InputError(
            words(
                given("max_draft_tokens", max_draft_tokens),
                f": the verdict is judged at k = {DEFAULT_DRAFT_TOKENS}, a row of the table",
            ),
            hint=words("tabulate at least as far: ", suggested("max_draft_tokens", DEFAULT_DRAFT_TOKENS)),
        )
    return max_draft_tokens


@dataclass(frozen=True)
class Prediction:
    """Predicted greedy acceptance of a quantized draft against its source at one k, with the per-sequence tables it
    was computed from; what records hold of it is its :meth:`record`."""

    source: Acceptance
    quantized: Acceptance
    difference: Interval
    budget: float | None
    inputs: str
    source_table: AcceptanceTable | None = None  # every k; source and quantized are the row at DEFAULT_DRAFT_TOKENS
    quantized_table: AcceptanceTable | None = None

    @classmethod
    def of(
        cls,
        source: AcceptanceTable,
        quantized: AcceptanceTable,
        budget: float | None,
        inputs: str,
        draft_tokens: int = DEFAULT_DRAFT_TOKENS,
    ) -> Prediction:
        """The verdict's figures at ``draft_tokens`` (a row of the tables), with the tables beside them; the source's
        table is cut to the sequences the quantized draft was predicted on, so the difference stays paired."""
        source = source.first(quantized.sequences)
        src, dst = source[draft_tokens], quantized[draft_tokens]
        return cls(src, dst, paired_difference(dst, src), budget, inputs, source, quantized)

    @property
    def drop(self) -> float:
        return -self.difference.value

    @property
    def judged(self) -> BudgetVerdict | None:
        """The one gate (:func:`~eaglequant.measurement.statistics.budget_verdict`) over the sequences predicted:
        within, past, or inconclusive (the interval straddles the budget); None without a budget."""
        if self.budget is None:
            return None
        return budget_verdict(self.difference, self.budget, len(self.quantized.prompts))

    @property
    def failed(self) -> bool:
        """The whole interval of the change past the budget."""
        judged = self.judged
        return judged is not None and judged.past

    @property
    def inconclusive(self) -> bool:
        """The change's interval straddles the budget: more sequences would tell."""
        judged = self.judged
        return judged is not None and judged.inconclusive

    @property
    def outcome(self) -> str | None:
        """``within``, ``past`` or ``inconclusive`` (None: no budget)."""
        judged = self.judged
        return None if judged is None else judged.outcome.value

    @property
    def more_sequences(self) -> int | None:
        """Inconclusive: how many captured sequences more would settle it at the variance observed."""
        judged = self.judged
        return None if judged is None else judged.more_prompts

    @property
    def verdict(self) -> str:
        return verdict_text(self.source.length().value, self.quantized.length().value, self.judged, self.quantized.k)

    @property
    def rule(self) -> str:
        """How the prediction drafts and accepts, in words."""
        return RULE

    @property
    def sequences(self) -> int | None:
        """The captured sequences the quantized draft was predicted on (fewer than the inputs hold where a search
        settled its verdict early); None without a table."""
        return None if self.quantized_table is None else self.quantized_table.sequences

    @property
    def positions(self) -> int | None:
        """The captured draft positions the quantized draft's chain ran over."""
        return None if self.quantized_table is None else sum(self.quantized_table.positions)

    @property
    def by_draft_tokens(self) -> tuple[TableRow, ...] | None:
        """The table: for every k from 1, the source's and the quantized draft's acceptance length and their paired
        difference (the row at the verdict's k holds the figures above); None without tables."""
        if self.source_table is None or self.quantized_table is None:
            return None
        return tuple(self.table_row(k) for k in range(1, self.quantized_table.max_draft_tokens + 1))

    def record(self) -> PredictionRecord:
        """What records hold of it: its figures and verdict as written."""
        judged, rows = self.judged, self.by_draft_tokens
        return PredictionRecord(
            *(self.inputs, self.source.figures(), self.quantized.figures(), self.difference.reported(), self.budget),
            None if judged is None else judged.outcome,
            None if judged is None else judged.more_prompts,
            self.sequences,
            self.positions,
            None if rows is None else tuple(row.reported() for row in rows),
        )

    def table_row(self, draft_tokens: int) -> TableRow:
        assert self.source_table is not None and self.quantized_table is not None
        src, dst = self.source_table[draft_tokens], self.quantized_table[draft_tokens]
        return TableRow(draft_tokens, src.length(), dst.length(), paired_difference(dst, src))

    def acceptance_by_draft_tokens(self) -> dict[int, float]:
        """k -> the quantized draft's predicted greedy acceptance length with k drafted a round (only the verdict's
        k where no table was predicted)."""
        if self.quantized_table is None:
            return {self.quantized.k: self.quantized.length().value}
        return self.quantized_table.lengths()

    def source_acceptance_by_draft_tokens(self) -> dict[int, float]:
        """k -> the source draft's, on the same sequences."""
        if self.source_table is None:
            return {self.source.k: self.source.length().value}
        return self.source_table.lengths()


def predict_pair(
    source: Any,
    quantized: Any,
    sequences: list[CapturedSequence],
    draft_tokens: int,
    budget: float | None,
    inputs: str,
    sequence_done: Callable[[str, int], None] = lambda _draft, _index: None,
) -> Prediction:
    """Predicted greedy acceptance of the ``source`` and ``quantized`` checkpoints (plain weights) on ``sequences``,
    for every k up to ``draft_tokens``, judged at ``draft_tokens``; ``sequence_done`` is told of each sequence
    replayed (``"source"`` or ``"quantized"``, its index)."""
    src = predict_table(open_draft(source), sequences, draft_tokens, sequence_done=lambda i: sequence_done("source", i))
    dst = predict_table(
        open_draft(quantized), sequences, draft_tokens, sequence_done=lambda i: sequence_done("quantized", i)
    )
    return Prediction.of(src, dst, budget, inputs, draft_tokens)


def predict_against(
    source: AcceptanceTable,
    quantized: Any,
    sequences: list[CapturedSequence],
    draft_tokens: int,
    budget: float | None,
    inputs: str,
    device: str = "cpu",
) -> Prediction:
    """The ``quantized`` checkpoint (plain weights) predicted on ``sequences`` for every k of the source's table,
    judged at ``draft_tokens``, against the source draft's table already predicted there (a search compares many
    drafts with one source)."""
    dst = predict_table(open_draft(quantized, device), sequences, source.max_draft_tokens)
    return Prediction.of(source, dst, budget, inputs, draft_tokens)


def predict_as_served(
    checkpoint: Any,
    head: Any,
    target: Any,
    source: AcceptanceTable,
    sequences: list[CapturedSequence],
    draft_tokens: int,
    budget: float | None,
    inputs: str,
    device: str = "cpu",
) -> Prediction:
    """A quantized checkpoint as vLLM runs it (its quantized linears dequantized exactly, everything else its own),
    predicted against the source draft's table on ``sequences``."""
    import tempfile

    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.measurement.served import quantized_modules, write_dequantized

    with tempfile.TemporaryDirectory(prefix="eaglequant-predict-") as tmp:
        modules = quantized_modules(checkpoint, head, target, "vllm")
        write_dequantized(checkpoint, head, modules, Path(tmp), "float32")
        with Checkpoint.open(Path(tmp), "DST") as dst:
            return predict_against(source, dst, sequences, draft_tokens, budget, inputs, device)


@dataclass(frozen=True)
class PredictionSettings:
    """How ``verify --inputs`` predicts: the longest k it tabulates, the device the chain runs on, and the k the
    verdict is judged at (the one the draft is served at: its search's, else :data:`DEFAULT_DRAFT_TOKENS`; the
    table reaches it where it lies past ``max_draft_tokens``)."""

    max_draft_tokens: int = DEFAULT_MAX_DRAFT_TOKENS
    device: str = "cpu"
    draft_tokens: int = DEFAULT_DRAFT_TOKENS

    def __post_init__(self) -> None:
        from eaglequant.prediction.chain import check_device

        check_max_draft_tokens(self.max_draft_tokens)
        check_draft_tokens(self.draft_tokens)
        check_device(self.device)

    @property
    def tabulated(self) -> int:
        """The longest k tabulated: ``max_draft_tokens``, or the judged k where that is longer."""
        return max(self.max_draft_tokens, self.draft_tokens)


def predict_written(
    checkpoint: Any,
    head: Any,
    target: Any,
    src: Any,
    inputs: Path | None,
    budget: float | None,
    settings: PredictionSettings = PredictionSettings(),
) -> tuple[Prediction | None, Finding | None]:
    """``verify --inputs``: the source draft (``src``, open) against the quantized checkpoint as vLLM runs it (its
    quantized linears dequantized exactly, everything else DST's own), on the captured sequences (checked to be the
    source's inputs), for every k up to
    ``settings.max_draft_tokens`` from one chain, judged at ``settings.draft_tokens``. (None, why) when
    there are no inputs (``no-inputs``), when they hold no target choices (``no-target-choices``, about the inputs'
    file), or when the head is not one the chained forward runs (``chain-unsupported``)."""
    if inputs is None:
        text = (
            "acceptance not predicted: pass --inputs with captured inputs that hold the target's choices "
            "(`eaglequant capture`); `eaglequant accept` measures it with the engine"
        )
        return None, Finding("no-inputs", "", text)
    if not inputs.is_dir() and "target_top_ids" not in tensor_names(inputs):
        text = (
            f"acceptance not predicted: {inputs.name} holds no target choices (capture inputs with "
            "`eaglequant capture`, which records them)"
        )
        return None, Finding("no-target-choices", inputs.name, text)
    from eaglequant.prediction.chain import unsupported

    why = unsupported(head.config, head.attention)
    if why:
        return None, Finding("chain-unsupported", "", f"acceptance not predicted: {why}")
    from eaglequant.layouts.detect import describe_head

    # the capture was made for the source: checked against it, so where DST's config departs from the source's
    # (its aux layer ids, say) that is DST's defect, which verify's comparison with the source names
    sequences = load_captured(inputs, head=describe_head(src))
    draft_tokens = settings.draft_tokens  # the k the draft is served at
    described = f"{inputs.name} ({len(sequences)} sequences)"
    k, device = settings.tabulated, settings.device
    source = predict_table(open_draft(src, device), sequences, k)
    prediction = predict_as_served(checkpoint, head, target, source, sequences, draft_tokens, budget, described, device)
    return prediction, None


def tensor_names(path: Path) -> set[str]:
    """The tensor names of a safetensors file (no tensor is read)."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as handle:
        return set(handle.keys())
