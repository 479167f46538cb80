"""k, the tokens a speculative round drafts (num_speculative_tokens / max_draft_len): its default, its bound, and
the check of a given k. Here, below every layer, so that the command line's bounds cost no import at start-up."""

from __future__ import annotations

from eaglequant.common.errors import InputError, given, suggested, words

DEFAULT_DRAFT_TOKENS = 3  # as the card's serving lines draft
# The longest k a prediction tabulates (acceptance for every k from 1 to it, from one chain of this many steps).
DEFAULT_MAX_DRAFT_TOKENS = 8
MAX_DRAFT_TOKENS = 64


def check_draft_tokens(draft_tokens: object) -> None:
    """Refuse a ``draft_tokens`` that is not a whole number of tokens from 1 to :data:`MAX_DRAFT_TOKENS`."""
    if isinstance(draft_tokens, bool) or not isinstance(draft_tokens, int) or not 1 <= draft_tokens <= MAX_DRAFT_TOKENS:
        raise InputError(
            words(given("draft_tokens", draft_tokens), f": tokens drafted a round must be 1 to {MAX_DRAFT_TOKENS}"),
            hint=words("engines draft a few (", suggested("draft_tokens", DEFAULT_DRAFT_TOKENS), " is common)"),
        )
