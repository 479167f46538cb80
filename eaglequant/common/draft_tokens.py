"""k, the tokens a speculative round drafts (num_speculative_tokens / max_draft_len): its default, its bound, and
the check of a given k. Here, below every layer, so that the command line's bounds cost no import at start-up."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from eaglequant.common.errors import InputError, given, suggested, words

DEFAULT_DRAFT_TOKENS = 3  # as the card's serving lines draft
# The longest k a prediction tabulates (acceptance for every k from 1 to it, from one chain of this many steps).
DEFAULT_MAX_DRAFT_TOKENS = 8
MAX_DRAFT_TOKENS = 64


def check_draft_tokens(draft_tokens: object) -> int:
    """``draft_tokens`` as one k: refused, in one line, where it is not a whole number of tokens from 1 to
    :data:`MAX_DRAFT_TOKENS` (text is not a k here: :func:`each_draft_tokens` reads the command line's)."""
    if isinstance(draft_tokens, bool) or not isinstance(draft_tokens, int) or not 1 <= draft_tokens <= MAX_DRAFT_TOKENS:
        raise InputError(
            words(given("draft_tokens", draft_tokens), f": tokens drafted a round must be 1 to {MAX_DRAFT_TOKENS}"),
            hint=words("engines draft a few (", suggested("draft_tokens", DEFAULT_DRAFT_TOKENS), " is common)"),
        )
    return draft_tokens


DraftTokens = int | str | Sequence[int]  # one k, or several: the first is the primary


def each_draft_tokens(draft_tokens: DraftTokens) -> tuple[int, ...]:
    """Every k to measure, the primary first, from one k, a sequence of them, or the command line's ``1,2,3``: one
    clear line, naming the value as given, for one that is not a whole number from 1 to the bound, or repeated."""
    given_value = draft_tokens
    if isinstance(draft_tokens, str):
        pieces: Sequence[object] = draft_tokens.split(",")
    else:
        pieces = list(draft_tokens) if isinstance(draft_tokens, Sequence) else [draft_tokens]
    ks: list[int] = []
    for piece in pieces:
        k = whole_number(piece)
        if k is None or not 1 <= k <= MAX_DRAFT_TOKENS:
            raise InputError(
                words(given("draft_tokens", given_value), f": {str(piece).strip() or 'an empty entry'} is not a "
                      f"whole number of tokens from 1 to {MAX_DRAFT_TOKENS}"),
                hint=words("give k, or several separated by commas, e.g. ", suggested("draft_tokens", "1,2,3")),
            )  # fmt: skip
        if k in ks:
            raise InputError(
                words(given("draft_tokens", given_value), f": {k} is given twice"),
                hint="give each k once; the budget is judged at the k the draft is served at where it is measured",
            )
        ks.append(k)
    if not ks:
        raise InputError(
            words(given("draft_tokens", given_value), ": no k"),
            hint=words("e.g. ", suggested("draft_tokens", DEFAULT_DRAFT_TOKENS)),
        )
    return tuple(ks)


def whole_number(piece: object) -> int | None:
    """``piece`` as a whole number (an int, or its decimal digits as text), else None."""
    if isinstance(piece, bool):
        return None
    if isinstance(piece, int):
        return piece
    text = piece.strip() if isinstance(piece, str) else None
    return int(text) if text is not None and text.isdigit() else None


def judged_draft_tokens(measured: Sequence[int], served: int = DEFAULT_DRAFT_TOKENS) -> int:
    """The k a budget is judged at: ``served`` (the k the draft is served at: the one its search chose, else
    :data:`DEFAULT_DRAFT_TOKENS`, as the card's serving lines) where it is among the k ``measured``, else the first
    measured (the primary)."""
    return served if served in measured or not measured else measured[0]


def judged_at_text(judged: int, served: int) -> str:
    """Which k a verdict was judged at, in words: ``judged at k = 3, the k the card serves``."""
    if judged == served:
        return f"judged at k = {judged}, the k the card serves"
    return f"judged at k = {judged}, the first k measured (the card serves k = {served}, not measured)"


ScheduleRange = tuple[int, int, int]  # (first batch size, last batch size, k), inclusive; k = 0: no speculation
Schedule = tuple[ScheduleRange, ...]  # vLLM's SpeculativeConfig.num_speculative_tokens_per_batch_size
ScheduleSpec = str | Sequence[Sequence[int]]  # the command line's "1-2:3,3-8:1", or (start, end, k) ranges


def each_schedule_range(schedule: ScheduleSpec) -> Schedule:
    """A k for each batch size, as vLLM's ``num_speculative_tokens_per_batch_size`` takes it, from the command
    line's ``1-2:3,3-8:1`` (``START-END:K``, or ``N:K`` for one batch size) or (start, end, k) ranges: one clear
    line where a range is not whole numbers, its k past :data:`MAX_DRAFT_TOKENS`, the first does not start at 1,
    the ranges overlap or come out of order (vLLM's own rules), or no range drafts."""
    pieces = schedule.split(",") if isinstance(schedule, str) else list(schedule)
    ranges = [_schedule_range(piece, schedule) for piece in pieces]
    why = None
    if not ranges:
        why = "no range"
    elif ranges[0][0] != 1:
        why = f"the first range starts at {ranges[0][0]}, not 1 (every batch size needs a k)"
    elif any(start <= before[1] for before, (start, _, _) in pairwise(ranges)):
        why = "ranges overlap or are out of order (give them by batch size, ascending)"
    elif not any(k for *_, k in ranges):
        why = "no range drafts (every k is 0: serve the target alone instead)"
    if why is not None:
        raise _schedule_refused(schedule, why)
    return tuple(ranges)


def schedule_text(schedule: Schedule) -> str:
    """``1-2:3,3-8:1``: the schedule as the command line takes it."""
    return ",".join(f"{start}-{end}:{k}" if start != end else f"{start}:{k}" for start, end, k in schedule)


def _schedule_range(piece: object, schedule: ScheduleSpec) -> ScheduleRange:
    if isinstance(piece, str):
        span, _, k_text = piece.partition(":")
        start_text, _, end_text = span.partition("-")
        numbers = [whole_number(start_text), whole_number(end_text or start_text), whole_number(k_text)]
    else:
        numbers = [whole_number(n) for n in piece] if isinstance(piece, Sequence) and len(piece) == 3 else [None]
    if any(n is None for n in numbers):
        raise _schedule_refused(schedule, f"{str(piece).strip() or 'an empty entry'} is not START-END:K")
    start, end, k = (int(n) for n in numbers if n is not None)
    if not 1 <= start <= end:
        raise _schedule_refused(schedule, f"{start}-{end}: not a range of batch sizes (from 1, its end not below it)")
    if k > MAX_DRAFT_TOKENS:
        raise _schedule_refused(schedule, f"{start}-{end}:{k}: k past {MAX_DRAFT_TOKENS}")
    return start, end, k


def _schedule_refused(schedule: ScheduleSpec, why: str) -> InputError:
    return InputError(
        words(given("schedule", schedule), f": {why}"),
        hint=words("give inclusive batch-size ranges and their k, from 1, e.g. ", suggested("schedule", "1-2:3,3-8:1")),
    )
