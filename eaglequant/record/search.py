"""What ``search`` records in the draft it chose (``eaglequant_search.json``): one type, :class:`SearchRecord`,
writes the file (and ``search --json``) and reads it back, for the model card and for tools.

A candidate's prediction is kept as :mod:`eaglequant.prediction.predict` wrote it (that layer sits above this one);
:attr:`SearchRow.difference` reads the figures the card shows from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglequant.common.errors import CheckpointError
from eaglequant.common.findings import Finding
from eaglequant.common.json_fields import JsonRecord, read_json_file

SEARCH_RECORD = "eaglequant_search.json"
_REPAIR = "it was changed after the search or is damaged: run eaglequant search again"

Interval = tuple[float | None, float | None, float | None]  # (value, low, high); None: not estimated


class SearchRecordError(CheckpointError):
    """A search record that cannot be read."""


@dataclass(frozen=True)
class SearchRow(JsonRecord):
    """A candidate priced: its settings, the bytes a round reads (the largest over the targeted engines), and its
    prediction where the search got to it (None: a smaller candidate met the budget first)."""

    candidate: str
    scheme: str
    format: str
    lm_head_quantized: bool
    lm_head_scheme: str | None  # the scheme lm_head is quantized in (None: it is not)
    draft_vocab_size: int | None  # None: the source's vocabulary
    bytes_per_round: int
    predicted: dict[str, Any] | None  # prediction.predict.Prediction's JSON
    within_budget: bool | None
    sequences_predicted: int | None = None  # the captured sequences its verdict took (None: not predicted)
    positions_predicted: int | None = None  # their draft positions, run through the chain

    @property
    def difference(self) -> Interval | None:
        """The predicted change in acceptance length (None: not predicted)."""
        if self.predicted is None:
            return None
        diff = self.predicted["difference"]
        return (diff["value"], diff["low"], diff["high"])


@dataclass(frozen=True)
class SpeedupAt(JsonRecord):
    """One k of a draft's predicted speed-up: the acceptance length it was predicted from, and the speed-up with its
    interval (None: a record written before intervals)."""

    draft_tokens: int
    acceptance_length: float
    speedup: float
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class LoadAt(JsonRecord):
    """The pick at one load (concurrency: sequences decoded together): its weight in the objective, the k served
    there (0: no k's predicted speed-up beats the target alone, so do not speculate), that k's predicted speed-up
    with its interval (1 without speculation), and the prediction at each k."""

    concurrency: int
    weight: float
    draft_tokens: int
    speedup: float
    low: float
    high: float
    by_draft_tokens: tuple[SpeedupAt, ...]


@dataclass(frozen=True)
class SearchSpeedup(JsonRecord):
    """What ``search --objective speedup`` chose by: the k and predicted speed-up of its pick, at each k the budget
    allows, the runner-up, the source draft at its best k, and what the model assumed (target, terms). Over several
    loads, ``speedup`` is the mean over them as weighted, ``draft_tokens`` the k an engine with one k serves (the
    heaviest load's that speculates), and ``loads`` and the schedule say the rest."""

    engine: str  # whose round the draft's bytes are priced in
    target: str
    tensor_parallel_size: int
    draft_tokens: int
    speedup: float
    by_draft_tokens: tuple[SpeedupAt, ...]
    runner_up: str | None
    runner_up_draft_tokens: int | None
    runner_up_speedup: float | None
    source_draft_tokens: int
    source_speedup: float
    assumptions: tuple[str, ...]
    low: float | None = None  # the speed-up's interval (None: a record written before intervals)
    high: float | None = None
    loads: tuple[LoadAt, ...] = ()  # the pick at each load asked (empty: a record written before loads)
    # vLLM's SpeculativeConfig field: inclusive batch-size ranges and their k; empty where one k serves every load
    num_speculative_tokens_per_batch_size: tuple[tuple[int, int, int], ...] = ()
    tied: tuple[str, ...] = ()  # candidates whose interval overlaps the highest's: a tie within the model's error
    highest: str | None = None  # the highest predicted, where the tie went to one with fewer bytes a round
    speculate: bool = True  # False: no k beats the target alone at any load asked (no draft written)

    @property
    def schedule_text(self) -> str:
        """The k at each load, in words."""
        return ", ".join(
            f"k = {load.draft_tokens} at concurrency {load.concurrency}"
            + (" (do not speculate at this load)" if load.draft_tokens == 0 else "")
            for load in self.loads
        )


@dataclass(frozen=True)
class SearchBudget(JsonRecord):
    """The budget as given (``value``: tokens, or a share of the source's accepted tokens where ``relative``), the
    rule that judges it (``bound``: the drop's 95% bound; ``point``: its estimate), in tokens and in words."""

    value: float
    relative: bool
    rule: str
    tokens: float
    text: str


@dataclass(frozen=True)
class SearchSequential(JsonRecord):
    """How a sequential search looked at each candidate: after ``looks`` sequences (the last: all), an interim look
    judging the change's interval at ``interim_confidence``, so that any early stop is wrong with probability at
    most ``error_rate``."""

    looks: tuple[int, ...]
    interim_confidence: float
    error_rate: float
    text: str


@dataclass(frozen=True)
class SearchRecord(JsonRecord):
    """A search's frontier and its choice, as written."""

    source: str
    destination: str | None
    pruned_source: str | None  # the pruned BF16 head the chosen draft was converted from
    engines: tuple[str, ...]  # targeted
    loaded_by: tuple[str, ...]  # the engines whose readers load the written draft (explain --engine all)
    skipped: dict[str, int]  # candidates not priced: the code of why -> how many
    notes: tuple[Finding, ...]
    budget: SearchBudget
    source_acceptance_length: float
    source_bytes_per_round: int
    chosen: SearchRow | None
    stopped: str  # why the search stopped where it did, in words
    seconds: float
    frontier: tuple[SearchRow, ...]
    sequential: SearchSequential | None = None  # None: every candidate predicted on every sequence
    max_draft_tokens: int | None = None  # each prediction's table runs k = 1 to this (None: written before tables)
    objective: str = "bytes"  # "bytes": the smallest within the budget; "speedup": the fastest, with its k
    speedup: SearchSpeedup | None = None  # with the speedup objective: the pick's k and speed-up


def recorded_acceptance(search: SearchRecord | None) -> dict[int, float] | None:
    """k -> the chosen draft's predicted greedy acceptance length at each k its search tabulated (None: no search,
    none chosen, or a record written before tables)."""
    chosen = None if search is None else search.chosen
    rows = None if chosen is None or chosen.predicted is None else chosen.predicted.get("by_draft_tokens")
    if not isinstance(rows, list):
        return None
    return {int(row["draft_tokens"]): float(row["quantized"]["value"]) for row in rows}


def read_search(dst: Path) -> SearchRecord | None:
    """The search recorded in ``dst``; None when ``dst`` was not chosen by a search."""
    path = dst / SEARCH_RECORD
    data = read_json_file(path, SearchRecordError, _REPAIR)
    return None if data is None else SearchRecord.from_json(data, str(path), SearchRecordError, _REPAIR)


@dataclass(frozen=True)
class SearchedJudge:
    """What ``search`` judged the draft it chose against: its source (the BF16 draft it searched from) and its
    budget in tokens. ``verify`` and ``accept`` judge the pick against them by default."""

    source: str
    budget: float

    @property
    def text(self) -> str:
        return (
            f"the source and budget `eaglequant search` recorded ({self.source}, a drop of at most "
            f"{self.budget:g} tokens)"
        )


def searched_judge(dst: Path) -> SearchedJudge | None:
    """The source and budget the search that chose ``dst`` recorded (None: ``dst`` was not chosen by a search)."""
    record = read_search(dst)
    if record is None or record.chosen is None:
        return None
    return SearchedJudge(record.source, record.budget.tokens)


def served_draft_tokens(search: SearchRecord | None) -> int:
    """The k a draft is served at: the one ``search --objective speedup`` chose, else
    :data:`~eaglequant.common.draft_tokens.DEFAULT_DRAFT_TOKENS` (as the card's serving lines draft)."""
    from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS

    return DEFAULT_DRAFT_TOKENS if search is None or search.speedup is None else search.speedup.draft_tokens


def same_place(a: str | Path, b: str | Path) -> bool:
    """Two paths name the same directory."""
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def searched_baseline(record: SearchRecord | None) -> Any:
    """The bytes a round of the source ``search`` started from reads (a
    :class:`~eaglequant.readback.cost.Baseline`), what its "fewer" counted against; None without a search."""
    if record is None:
        return None
    from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS
    from eaglequant.readback.cost import Baseline

    name = f"the BF16 source `eaglequant search` started from ({record.source})"
    return Baseline(name, record.source_bytes_per_round, DEFAULT_DRAFT_TOKENS)
