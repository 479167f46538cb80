"""What a conversion is asked to do, every name resolved: one :class:`ConversionRequest`, made once at the API from
:class:`~eaglequant.conversion.options.ConversionOptions` and the head's config, and handed to
:func:`~eaglequant.conversion.plan.build_plan` as it is. Below the API nothing looks a format, an engine release or a
scheme up by its name again: the request holds the objects."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eaglequant.common.config_change import ConfigChange
from eaglequant.conversion.options import ConversionOptions
from eaglequant.engines import ENGINES, Engine
from eaglequant.engines.target import TargetModel, resolve_target
from eaglequant.formats import Format
from eaglequant.schemes.assignment import SchemeAssignment


@dataclass(frozen=True)
class ConversionRequest:
    """``assignment``: each linear's scheme (the main one, and the ``scheme_for`` rules); ``format``: the output
    format; ``engines``: the releases that must load the result as intended; ``target``: the target's layer count and
    context length; ``exclude`` / ``quantize``: the user's rules over checkpoint names; ``config_changes``: the
    config.json values to write other than the source's (``match_target_context``)."""

    assignment: SchemeAssignment
    format: Format
    engines: tuple[Engine, ...]
    target: TargetModel
    exclude: tuple[str, ...] = ()
    quantize: tuple[str, ...] = ()
    config_changes: tuple[ConfigChange, ...] = ()

    @classmethod
    def of(cls, options: ConversionOptions, head_config: dict[str, Any]) -> ConversionRequest:
        """``options`` for the head whose config.json is ``head_config`` (which may name its target, and whose
        context length a config change raises)."""
        target = resolve_target(options.target_layers, options.target_config, head_config)
        changes = context_changes(head_config, target) if options.match_target_context else ()
        return cls(
            options.assignment,
            options.resolved_format,
            options.resolved_engines,
            target,
            options.exclude,
            options.quantize,
            changes,
        )


def context_changes(head_config: dict[str, Any], target: TargetModel) -> tuple[ConfigChange, ...]:
    """What ``match_target_context`` writes: the config change each registered release needs to serve the target's
    whole context with this draft (vLLM 0.33's raises ``max_position_embeddings``), whichever release is targeted."""
    found = (engine.context_change(head_config, target) for engine in ENGINES.values())
    return tuple(change for change in found if change is not None)


def changed_config(config: dict[str, Any], changes: Sequence[ConfigChange]) -> dict[str, Any]:
    """A copy of ``config`` with every change made, in order."""
    for change in changes:
        config = change.apply(config)
    return config
