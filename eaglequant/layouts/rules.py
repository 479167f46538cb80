"""The rules a user writes to pick a head's linears (``exclude``, ``quantize``): a glob, or ``re:<regex>``
matched in full, against the names the checkpoint gives a linear (its module and its weight) as ``inspect``
shows them. Checked once when the options are built; matched once when the plan is built."""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Mapping, Sequence

from eaglequant.common.errors import InputError, given, words
from eaglequant.layouts.head import HeadDescription, HeadLinear

SCHEME_FOR = "scheme_for"  # the option whose rules give linears a scheme of their own
_LAYER_PREFIX = re.compile(r"^layers\.\d+\.")
RULES_HINT = (
    "rules match checkpoint linear names as `eaglequant inspect` shows them, "
    "e.g. 'midlayer.self_attn.*' or 're:.*down_proj'"
)


@functools.lru_cache(maxsize=256)
def compiled_rule(rule: str, parameter: str) -> re.Pattern[str] | None:
    """A ``re:<regex>`` rule compiled once (None: a glob); ``parameter``: the option that gave it."""
    if not rule.startswith("re:"):
        return None
    try:
        return re.compile(rule[3:])
    except re.error as exc:
        raise InputError(words(given(parameter, rule), f" is not a valid regular expression ({exc})")) from exc


def match_rule(rule: str, names: tuple[str, ...], parameter: str) -> bool:
    """Whether ``rule`` (given as ``parameter``) matches any of ``names``, a module's or a tensor's."""
    regex = compiled_rule(rule, parameter)
    if regex is not None:
        return any(regex.fullmatch(n) for n in names)
    return any(fnmatch.fnmatchcase(n, rule) for n in names)


def linears_matching(
    head: HeadDescription, rules: Mapping[str, Sequence[str]], scheme_patterns: Sequence[str] = ()
) -> dict[str, list[tuple[str, list[HeadLinear]]]]:
    """For each parameter's rules (``{"exclude": [...], "quantize": [...]}``), the linears each rule matches, in
    order. A rule that matches no linear is refused, saying what it matched instead. ``scheme_patterns``: the
    patterns of ``--scheme-for`` rules, matched in the same pass (under ``scheme_for``) against a linear's
    checkpoint, canonical and in-layer names (:func:`scheme_rule_names`); one that matches nothing is the scheme
    assignment's to word."""
    matched = {
        parameter: [(rule, _hits(head, rule, parameter)) for rule in given_rules]
        for parameter, given_rules in rules.items()
    }
    matched[SCHEME_FOR] = [
        (pattern, [lin for lin in head.linears if match_rule(pattern, scheme_rule_names(lin), SCHEME_FOR)])
        for pattern in scheme_patterns
    ]
    return matched


def scheme_rule_names(linear: HeadLinear) -> tuple[str, ...]:
    """The names a ``--scheme-for`` pattern is matched against: the linear's checkpoint name
    (``midlayer.mlp.down_proj``), its canonical name (``layers.0.mlp.down_proj``) and its name inside its layer
    (``mlp.down_proj``; ``fc`` and ``lm_head`` are their own)."""
    return (linear.checkpoint_module, linear.module, _LAYER_PREFIX.sub("", linear.module))


def _hits(head: HeadDescription, rule: str, parameter: str) -> list[HeadLinear]:
    hits = [lin for lin in head.linears if match_rule(rule, (lin.checkpoint_module, lin.weight), parameter)]
    if not hits:
        others = [t.name for t in head.tensors if match_rule(rule, (t.name, t.name.rsplit(".", 1)[0]), parameter)]
        why = f"only non-linear tensors ({', '.join(others[:3])})" if others else "nothing"
        raise InputError(words(given(parameter, rule), f" matches {why}"), hint=RULES_HINT)
    return hits
