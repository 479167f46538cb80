"""What the defaults and the user's rules ask a conversion to keep in the source dtype and to quantize, matched once
on the head: :func:`user_request` resolves the scheme assignment and gives the :class:`KeepRequest` the engines'
part of the plan weighs against what each engine requires (:mod:`eaglequant.engines.exclusions`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from eaglequant.common.errors import InputError, given, words
from eaglequant.common.findings import Finding
from eaglequant.layouts.head import HeadDescription
from eaglequant.layouts.rules import SCHEME_FOR, linears_matching
from eaglequant.schemes.assignment import SchemeAssignment


@dataclass(frozen=True)
class KeepRequest:
    """What the user's rules and the defaults ask: linears to keep in the source dtype (canonical module -> why)
    and linears a ``quantize`` rule asks to quantize (canonical module -> that rule)."""

    kept: Mapping[str, str]
    quantized: Mapping[str, str]
    by_scheme_rule: frozenset[str] = frozenset()  # modules quantized because a --scheme-for rule gives them a scheme

    def asked_by(self, module: str) -> str:
        """The parameter that asks to quantize ``module``."""
        return "scheme_for" if module in self.by_scheme_rule else "quantize"


# Linears kept in the source dtype unless the user asks otherwise, and why.
DEFAULT_EXCLUSIONS: dict[str, str] = {
    "fc": "default: fc reads the target's hidden states (--quantize fc to quantize it)",
    "lm_head": "default: the draft's logits decide acceptance (--quantize lm_head to quantize it)",
}


def user_request(
    head: HeadDescription,
    exclude: list[str] | tuple[str, ...],
    quantize: list[str] | tuple[str, ...],
    assignment: SchemeAssignment,
    *,
    calibrated: bool = False,
    notes: list[Finding] | None = None,
) -> tuple[SchemeAssignment, KeepRequest]:
    """Every rule the user wrote matched on ``head`` in one pass: the ``scheme_for`` rules of ``assignment`` resolve
    it (as written: :meth:`SchemeAssignment.as_written`, ``calibrated`` and ``notes`` as it takes them); then what
    the defaults (fc, lm_head) and the ``exclude`` and ``quantize`` rules ask to keep and to quantize. ``quantize``
    rules, and the ``scheme_for`` rules, lift the defaults; ``exclude`` rules add to them. Each rule must match at
    least one linear, and no linear may be both quantized and excluded by the user."""
    patterns = [rule.pattern for rule in assignment.rules]
    matched = linears_matching(head, {"quantize": quantize, "exclude": exclude}, patterns)
    scheme_hits = [linears for _, linears in matched[SCHEME_FOR]]
    assignment = assignment.written_on(head, scheme_hits, calibrated, [] if notes is None else notes)
    opted_in = {lin.module: rule for rule, hits in matched["quantize"] for lin in hits}
    ruled = {module: rule.pattern for module, rule in assignment.by_module.items()}
    opted_in.update(ruled)
    kept = {
        module: reason
        for module, reason in DEFAULT_EXCLUSIONS.items()
        if module not in opted_in and any(lin.module == module for lin in head.linears)
    }
    for rule, hits in matched["exclude"]:
        for lin in hits:
            if lin.module in opted_in:
                raise InputError(
                    words(
                        f"{lin.checkpoint_module} is matched by ",
                        given("quantize", opted_in[lin.module]),
                        " and ",
                        given("exclude", rule),
                    ),
                    hint="keep one of the two rules",
                )
            kept.setdefault(lin.module, f"--exclude {rule}")
    return assignment, KeepRequest(kept, opted_in, frozenset(ruled))
