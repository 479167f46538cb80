"""k, the tokens a speculative round drafts (num_speculative_tokens / max_draft_len): its default, its bound, and
the check of a given k. Here, below every layer, so that the command line's bounds cost no import at start-up."""

from __future__ import annotations

from collections.abc import Sequence

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
