"""A prediction as records hold it (``verify``'s ``acceptance``, ``prune``'s ``prediction``): the figures it was
judged by and the verdict, as written, so that a record reads back as it was held. The prediction itself, with the
per-sequence tables it was computed from, is :class:`eaglequant.prediction.predict.Prediction`; this module does
not need torch."""

from __future__ import annotations

from dataclasses import dataclass

from eaglequant.common.json_fields import NOT_WRITTEN, JsonRecord, named
from eaglequant.measurement.statistics import AcceptanceFigures, BudgetVerdict, Interval, Outcome

RULE = "greedy drafting, greedy target (temperature 0)"  # how a prediction drafts and accepts, in words


@dataclass(frozen=True)
class TableRow(JsonRecord):
    """Greedy acceptance length with ``draft_tokens`` drafted a round: the source's, the quantized draft's and their
    paired difference, each with its 95% interval."""

    draft_tokens: int
    source: Interval
    quantized: Interval
    difference: Interval

    def reported(self) -> TableRow:
        """The row as records hold it: each interval :meth:`~Interval.reported`."""
        return TableRow(
            self.draft_tokens, self.source.reported(), self.quantized.reported(), self.difference.reported()
        )


def verdict_text(source: float, quantized: float, judged: BudgetVerdict | None, draft_tokens: int) -> str:
    """``predicted greedy acceptance length 2.677 → 2.700, change ...; judged at k = 3``."""
    change = "no budget" if judged is None else judged.text()
    return f"predicted greedy acceptance length {source:.3f} → {quantized:.3f}, change {change}" + (
        f"; judged at k = {draft_tokens}" if draft_tokens else ""
    )


def _unless_none(value: object) -> object:
    return NOT_WRITTEN if value is None else value


@dataclass(frozen=True)
class PredictionRecord(JsonRecord):
    """A prediction's figures and verdict, as written (:meth:`Prediction.record`): the source's and the quantized
    draft's acceptance at the judged k, their paired difference, the budget and the outcome it reached; with a
    table, the sequences and positions predicted and every k's row (none written without one)."""

    json_computed = ("rule", "failed")
    json_values = named(sequences=_unless_none, positions=_unless_none, by_draft_tokens=_unless_none)
    json_first = ("inputs", "rule", "source", "quantized", "difference", "budget", "outcome", "failed")

    inputs: str
    source: AcceptanceFigures
    quantized: AcceptanceFigures
    difference: Interval
    budget: float | None
    outcome: Outcome | None  # None: no budget
    more_sequences: int | None  # inconclusive: the captured sequences more that would settle it
    sequences: int | None = None  # the captured sequences the quantized draft was predicted on (None: no table)
    positions: int | None = None  # the captured draft positions its chain ran over
    by_draft_tokens: tuple[TableRow, ...] | None = None  # every k from 1 (the verdict's k holds the figures above)

    @property
    def rule(self) -> str:
        return RULE

    @property
    def judged(self) -> BudgetVerdict | None:
        """The verdict as it was reached (None without a budget)."""
        if self.budget is None or self.outcome is None:
            return None
        return BudgetVerdict(self.difference, self.budget, self.outcome, self.more_sequences, self.quantized.prompts)

    @property
    def failed(self) -> bool:
        """The whole interval of the change past the budget."""
        return self.outcome is Outcome.PAST

    @property
    def inconclusive(self) -> bool:
        return self.outcome is Outcome.INCONCLUSIVE

    @property
    def verdict(self) -> str:
        source, quantized = self.source.acceptance_length.value, self.quantized.acceptance_length.value
        return verdict_text(source, quantized, self.judged, self.quantized.k)

    def acceptance_by_draft_tokens(self) -> dict[int, float]:
        """k -> the quantized draft's predicted greedy acceptance length, as written (only the verdict's k where no
        table was predicted)."""
        if self.by_draft_tokens is None:
            return {self.quantized.k: self.quantized.acceptance_length.value}
        return {row.draft_tokens: row.quantized.value for row in self.by_draft_tokens}

    def source_acceptance_by_draft_tokens(self) -> dict[int, float]:
        """k -> the source draft's, on the same sequences."""
        if self.by_draft_tokens is None:
            return {self.source.k: self.source.acceptance_length.value}
        return {row.draft_tokens: row.source.value for row in self.by_draft_tokens}
