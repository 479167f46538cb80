"""Which scheme each linear of a draft is stored in: the main scheme, and rules that give the linears they match a
scheme of their own (``--scheme-for PATTERN=SCHEME``), as compressed-tensors' ``config_groups`` targets and vLLM's
per-layer configs do.

A rule's pattern is a glob or ``re:<regex>`` (the matcher of ``--exclude`` and ``--quantize``) matched in full
against a linear's checkpoint name (``midlayer.mlp.down_proj``), its canonical name (``layers.0.mlp.down_proj``) or
its name inside its layer (``mlp.down_proj``; ``fc`` and ``lm_head`` are their own). Rules are tried in order, the
first that matches decides; a linear no rule matches takes the main scheme. Linears an engine fuses into one module
(q/k/v, gate/up) must be given one kind.

``lm_head`` is the largest linear of a draft (on Kimi-K2.5's head, 1,174 M of its 3,178 M parameters) and is read
in full k times per speculative round, so giving it its own scheme moves the bytes a round reads more than any
other choice; the decoder keeps the scheme its engines run fastest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields

from eaglequant.common.errors import InputError, given, words
from eaglequant.common.findings import Finding
from eaglequant.layouts.head import HeadDescription, HeadLinear
from eaglequant.layouts.rules import match_rule, scheme_rule_names
from eaglequant.schemes.model import Scheme, VerifyThresholds

# Thresholds that bound from below (the rest bound from above).
_LOWER_BOUNDS = frozenset({"min_sqnr_db", "min_cosine", "min_top1_agreement"})
PARAMETER = "scheme_for"  # the option that gives the rules
# A rule that matches no linear: a pattern, or a module the head does not have (it reads the target's).
NO_MATCH = ": the pattern matches no linear of this head"
NO_MATCH_HINT = "patterns match linear names as `eaglequant inspect` shows them, or inside their layer (mlp.*)"
NO_OWN_HINT = "a draft without it reads the target's, which the engine keeps as the target stores it"


@dataclass(frozen=True)
class SchemeRule:
    """Linears matching ``pattern`` are stored in ``scheme``."""

    pattern: str
    scheme: Scheme

    @property
    def text(self) -> str:
        """As the user writes it: ``lm_head=nvfp4``."""
        return f"{self.pattern}={self.scheme.name}"

    def matches(self, linear: HeadLinear) -> bool:
        return match_rule(self.pattern, scheme_rule_names(linear), PARAMETER)


@dataclass(frozen=True)
class SchemeAssignment:
    """``main``: the scheme of every linear no rule matches; ``rules``: the rules, in order; ``by_module``:
    canonical linear -> the rule that gives it its scheme (empty until :meth:`resolved` on a head)."""

    main: Scheme
    rules: tuple[SchemeRule, ...] = ()
    by_module: Mapping[str, SchemeRule] = field(default_factory=dict)

    @classmethod
    def per_module(cls, main: Scheme, schemes: Mapping[str, Scheme]) -> SchemeAssignment:
        """An assignment that names each canonical module given a scheme other than ``main`` (as a written config
        or a report says)."""
        rules = {module: SchemeRule(module, scheme) for module, scheme in schemes.items()}
        return cls(main, tuple(rules.values()), rules)

    def of(self, module: str) -> Scheme:
        """The scheme the canonical ``module`` is stored in."""
        rule = self.by_module.get(module)
        return self.main if rule is None else rule.scheme

    @property
    def module_schemes(self) -> dict[str, Scheme]:
        """Canonical linear given a scheme by a rule -> that scheme."""
        return {module: rule.scheme for module, rule in self.by_module.items()}

    @property
    def needs_calibration(self) -> bool:
        """Whether a scheme it may give a linear has a calibrated activation scale."""
        return any(scheme.needs_calibration for scheme in (self.main, *(rule.scheme for rule in self.rules)))

    @property
    def mixed(self) -> bool:
        """Whether linears are stored in different kinds."""
        return any(scheme.kinds != self.main.kinds for scheme in self.module_schemes.values())

    @property
    def schemes(self) -> list[Scheme]:
        """Every scheme used, the main one first, each kinds once."""
        found = [self.main]
        for scheme in self.module_schemes.values():
            if all(scheme.kinds != other.kinds for other in found):
                found.append(scheme)
        return found

    @property
    def label(self) -> str:
        """``W8A8``, or for linears of different kinds each kinds' label, the main scheme's first: ``W8A8 + W4A16``."""
        return " + ".join(scheme.label for scheme in self.schemes)

    def head_thresholds(self) -> VerifyThresholds:
        """What the whole head is held to: per threshold, the loosest of the schemes it mixes (each linear is
        held to its own scheme's)."""
        loosest = {}
        for limit in fields(VerifyThresholds):
            values = [getattr(scheme.verify, limit.name) for scheme in self.schemes]
            loosest[limit.name] = min(values) if limit.name in _LOWER_BOUNDS else max(values)
        return VerifyThresholds(**loosest)

    def describe(self) -> str:
        """``fp8-per-channel`` or ``fp8-per-channel, lm_head nvfp4``."""
        own = [f"{module} {scheme.name}" for module, scheme in sorted(self.module_schemes.items())]
        return ", ".join([self.main.name, *own])

    def mapped(self, change: Callable[[Scheme], Scheme]) -> SchemeAssignment:
        """Every scheme (the main one, each rule's) passed through ``change``, each once."""
        rules = tuple(SchemeRule(rule.pattern, change(rule.scheme)) for rule in self.rules)
        return SchemeAssignment(change(self.main), rules)

    def as_written(self, calibrated: bool, notes: list[Finding] | None = None) -> SchemeAssignment:
        """The assignment as a conversion writes it: without calibrated inputs (``calibrated`` false), a scheme with
        calibrated activations is written weight-only (the one calibration rule; ``notes`` gains a finding,
        ``no-calib-data`` about the scheme, for each)."""
        found: list[Finding] = [] if notes is None else notes
        return self.mapped(lambda scheme: _as_written(scheme, calibrated, found))

    def resolved(self, head: HeadDescription) -> SchemeAssignment:
        """Each of ``head``'s linears given the scheme of the first rule that matches it. A rule that matches no
        linear, or fused linears given different kinds, are refused."""
        return self.resolved_from(head, [[lin for lin in head.linears if rule.matches(lin)] for rule in self.rules])

    def written_on(
        self, head: HeadDescription, hits: Sequence[Sequence[HeadLinear]], calibrated: bool, notes: list[Finding]
    ) -> SchemeAssignment:
        """:meth:`as_written`, then resolved on ``head`` from the linears each rule matched (``hits``, in the rules'
        order, as :func:`eaglequant.layouts.rules.linears_matching` found them)."""
        return self.as_written(calibrated, notes).resolved_from(head, hits)

    def resolved_from(self, head: HeadDescription, hits: Sequence[Sequence[HeadLinear]]) -> SchemeAssignment:
        """:meth:`resolved`, from the linears each rule matched (``hits``, in the rules' order)."""
        by_module: dict[str, SchemeRule] = {}
        for rule, matched in zip(self.rules, hits, strict=True):
            if not matched:
                pattern = any(char in rule.pattern for char in "*?[") or rule.pattern.startswith("re:")
                raise InputError(
                    words(
                        given(PARAMETER, rule.text),
                        NO_MATCH if pattern else f": this head has no {rule.pattern} of its own",
                    ),
                    hint=NO_MATCH_HINT if pattern else NO_OWN_HINT,
                )
            for linear in matched:
                by_module.setdefault(linear.module, rule)
        assignment = SchemeAssignment(self.main, self.rules, by_module)
        check_fused_kinds(head, assignment)
        return assignment


def check_fused_kinds(head: HeadDescription, assignment: SchemeAssignment) -> None:
    """Engines run a fused group (q/k/v, gate/up, q_a + kv_a) as one module in one kind: refuse members of one group
    given different kinds, naming the group, its members and their schemes."""
    for group in head.fused_groups:
        schemes = {member: assignment.of(member) for member in group.members}
        if len({scheme.kinds for scheme in schemes.values()}) > 1:
            members = ", ".join(f"{head.linear(m).checkpoint_module} {s.name}" for m, s in schemes.items())
            raise InputError(
                words(
                    given(PARAMETER, ", ".join(rule.text for rule in assignment.rules)),
                    f" gives the members of {group.module_type} ({group.name}) different kinds ({members}): "
                    "engines run them as one module in one scheme",
                ),
                hint="give every member of a fused group the same scheme",
            )


def _as_written(scheme: Scheme, calibrated: bool, notes: list[Finding]) -> Scheme:
    if not scheme.needs_calibration or calibrated:
        return scheme
    written = scheme.without_calibration()
    text = (
        f"{scheme.name}: no --calib data, so activations are not quantized: written as {written.label} "
        f"(weight-only); pass --calib to get {scheme.label}"
    )
    notes.append(Finding("no-calib-data", scheme.name, text))
    return written
