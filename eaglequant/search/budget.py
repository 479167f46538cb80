"""The acceptance a ``search`` candidate may lose: ``--max-acceptance-drop`` and ``--rule``, parsed and worded."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from eaglequant.common.errors import InputError, given, words

RULES = ("bound", "point")


@dataclass(frozen=True)
class Budget:
    """The acceptance a draft may lose: tokens of greedy acceptance length, or a share of the source draft's
    accepted tokens per round (``5%``), which transfers between drafts of different strength."""

    value: float
    relative: bool
    bound: bool = True  # judge the drop's 95% upper bound (the winner's curse of many candidates); else its estimate

    @classmethod
    def parse(cls, text: str | float, rule: str = "bound") -> Budget:
        raw = str(text).strip()
        relative = raw.endswith("%")
        try:
            value = float(raw.removesuffix("%")) / (100 if relative else 1)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0 or (relative and value > 1):
            raise InputError(
                words(given("max_acceptance_drop", text), ": not a budget"),
                hint="tokens of acceptance length (0.05) or a share of the source's accepted tokens (5%)",
            )
        if rule not in RULES:
            raise InputError(words(given("rule", rule), f": not one of {', '.join(RULES)}"), hint="use bound")
        return cls(value, relative, rule == "bound")

    def drop(self, prediction: Any) -> float:
        """The drop this budget judges: the predicted difference's upper bound of loss, or its estimate."""
        return -prediction.difference.low if self.bound else prediction.drop

    def within(self, prediction: Any, tokens: float) -> bool:
        """``prediction`` within this budget of ``tokens``: the one gate's pass (the drop's 95% upper bound,
        :func:`~eaglequant.measurement.statistics.budget_verdict`), or with ``--rule point`` its estimate. An
        inconclusive candidate (its interval straddles the budget) is not within: it is not proven to be."""
        return self.change_within(prediction.difference, tokens)

    def change_within(self, difference: Any, tokens: float) -> bool:
        """A change in acceptance length (an Interval, DST minus source) within this budget of ``tokens``."""
        from eaglequant.measurement.statistics import within_budget

        return within_budget(difference, tokens) if self.bound else -difference.value <= tokens

    def inconclusive(self, prediction: Any, tokens: float) -> bool:
        """The bound rule, and ``prediction``'s interval straddles the budget: more sequences would tell."""
        from eaglequant.measurement.statistics import budget_verdict

        return self.bound and budget_verdict(prediction.difference, tokens).inconclusive

    def judged_text(self, prediction: Any, tokens: float) -> str:
        """The change that was judged and what decided it: ``-0.028 [-0.061, +0.005]: bound -0.061, a drop of 0.061
        within the 0.05 budget``, ``... inconclusive, the interval straddles the 0.05 budget ...; 31 more prompts
        would settle it at this variance`` (with ``--rule point``: the estimate against it)."""
        from eaglequant.measurement.statistics import budget_verdict

        if self.bound:
            return budget_verdict(prediction.difference, tokens, len(prediction.quantized.prompts)).text()
        verdict = "within" if self.within(prediction, tokens) else "past"
        return f"{prediction.difference.text(signed=True)}: estimate {verdict} the {tokens:g} budget"

    def tokens(self, source_length: float) -> float:
        """The budget in tokens, for a source draft of greedy acceptance length ``source_length``."""
        return self.value * (source_length - 1) if self.relative else self.value

    def text(self, tokens: float | None = None) -> str:
        """The budget in words, once: ``a drop of at most 0.05 tokens, judged on the drop's 95% upper bound``;
        ``tokens``: a relative budget in tokens, for the source draft searched."""
        amount = f"{self.value:g} tokens"
        if self.relative:
            amount = f"{self.value:.1%} of the source's accepted tokens"
            amount += "" if tokens is None else f" ({tokens:.3f} tokens)"
        judged = "the drop's 95% upper bound" if self.bound else "the drop's estimate"
        return f"a drop of at most {amount} of greedy acceptance length, judged on {judged}"
