"""One engine release as a conversion sees it, built once per engine: the dialect in which it reads the output
format's exclusions, the scheme's kinds, the head, and its runtime modules for every target layer count the rules
must hold for. The plan asks the view; nothing looks the format or the runtime modules up again."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from eaglequant.engines.base import Dialect, Engine, RuntimeModule
from eaglequant.engines.decision import ModuleDecision
from eaglequant.formats.base import Format
from eaglequant.kinds import KindPair
from eaglequant.layouts.head import HeadDescription

# Layer counts used for the proof when the target's is unknown (Llama-3-8B, Kimi-K2.5 / DeepSeek-V3, ...).
SAMPLE_TARGET_LAYERS = (1, 32, 61, 94)


def layer_counts(target_layers: int | None) -> tuple[int, ...]:
    """The target layer counts to name runtime modules for: the known one, or the samples."""
    return (target_layers,) if target_layers is not None else SAMPLE_TARGET_LAYERS


@dataclass(frozen=True)
class EngineView:
    engine: Engine
    head: HeadDescription
    format: Format
    kinds: KindPair
    target_layers: int | None  # None: unknown, the rules must hold for any count
    dialect: Dialect
    modules_by_count: dict[int, list[RuntimeModule]]
    decisions: dict[RuntimeModule, ModuleDecision]  # what the engine does with each module, in its own kinds
    module_kinds: Mapping[str, KindPair] = field(default_factory=dict)  # canonical linear -> its kinds, where not kinds

    @classmethod
    def of(
        cls,
        engine: Engine,
        head: HeadDescription,
        fmt: Format,
        kinds: KindPair,
        target_layers: int | None,
        module_kinds: Mapping[str, KindPair] | None = None,
    ) -> EngineView:
        """``kinds``: the main scheme's; ``module_kinds``: canonical linear -> its own kinds, where a rule gives it
        other ones (a fused module's members share theirs). Each runtime module is judged in its own kinds."""
        own_kinds = dict(module_kinds or {})
        counts = layer_counts(target_layers)
        modules = {count: engine.runtime_modules(head, count) for count in counts}
        decisions = {
            m: engine.decide(m, fmt, own_kinds.get(m.members[0], kinds)) for count in counts for m in modules[count]
        }
        dialect = engine.dialect(fmt)
        return cls(engine, head, fmt, kinds, target_layers, dialect, modules, decisions, own_kinds)

    @cached_property
    def kept_reasons(self) -> dict[RuntimeModule, str]:
        """Why the checkpoint must keep a module unquantized for this engine (the last layer count's modules)."""
        return {m: why for m in self.modules() if (why := self.decisions[m].kept) is not None}

    @cached_property
    def quantized_needs(self) -> dict[RuntimeModule, str]:
        """Why the engine cannot load a module unquantized (any layer count)."""
        return {m: why for m, decision in self.decisions.items() if (why := decision.required) is not None}

    def unquantized_by_engine(self, module: RuntimeModule) -> str | None:
        """Why the engine itself runs ``module`` unquantized whatever the config says (None: the config decides)."""
        return self.decisions[module].unquantized_by_engine

    def kinds_of(self, module: RuntimeModule) -> KindPair:
        """The kinds ``module`` is stored in (its members share them)."""
        return self.module_kinds.get(module.members[0], self.kinds)

    @property
    def counts(self) -> tuple[int, ...]:
        """The layer counts the rules are written and proven for."""
        return layer_counts(self.target_layers)

    def modules(self, count: int | None = None) -> list[RuntimeModule]:
        """The engine's runtime modules under a target of ``count`` layers (default: the last count proven)."""
        return self.modules_by_count[self.counts[-1] if count is None else count]
