"""How a serving engine names a draft head's modules at run time, what it does with each (one decision per
module: :meth:`Engine.decide`), and how it matches exclusion rules."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from eaglequant.common.config_change import ConfigChange
from eaglequant.common.errors import InputError, Param, placeholder, words
from eaglequant.common.findings import Finding
from eaglequant.engines.cells import Answer, Cells, Support
from eaglequant.engines.decision import ModuleDecision, built_unquantized, quantized, refused
from eaglequant.kinds import KindPair, kinds_title
from eaglequant.layouts.head import Attention, FusedGroup, HeadDescription, HeadLinear
from eaglequant.layouts.names import RUNTIME_NAMES

if TYPE_CHECKING:
    from eaglequant.engines.target import TargetModel
    from eaglequant.formats.base import Format


@dataclass(frozen=True)
class RuntimeModule:
    """One module the engine builds for the draft.

    ``names``: the runtime prefix the engine matches rules against; further entries are spellings
    other engine versions use, and written rules must treat all of them alike.
    ``members``: the canonical head linears it computes (several when the engine fuses them).
    ``attention``: the draft's; ``hidden_size``: the draft's, for modules the engine first builds at
    the target's width.
    """

    names: tuple[str, ...]
    members: tuple[str, ...]
    out_features: tuple[int, ...] = ()  # each member's, in the order the engine stacks them
    attention: Attention = Attention.MHA
    hidden_size: int = 0
    unbuilt: str | None = None  # why the engine cannot build the draft this module is of at all (None: it can)

    @property
    def leaves(self) -> set[str]:
        """The members' last name parts: ``kv_b_proj``, ``q_a_proj``, ..."""
        return {member.rsplit(".", 1)[-1] for member in self.members}

    @property
    def is_lm_head(self) -> bool:
        return self.members == ("lm_head",)

    @property
    def is_fc(self) -> bool:
        return self.members == ("fc",)


@dataclass(frozen=True)
class ServingSnippet:
    """A copy-paste line (or file) that serves a target model with a draft head in an engine."""

    caption: str
    language: str  # for the Markdown code fence
    text: str


@dataclass(frozen=True)
class Dialect:
    """How an engine reads one dialect of exclusion entries (a format's ``exclude_dialect``).

    ``match(runtime_name, patterns)``: the first pattern that excludes the module, or None. ``write(runtime_name,
    any_layer)``: the patterns that together make this rule exclude ``runtime_name`` (with ``any_layer``, whatever
    the layer index in ``model.layers.{i}.``); more than one where the engine asks under each fused member's name.
    ``layer_count_needed(runtime_name)``: why no pattern excludes ``runtime_name`` whatever the layer index (the
    engine matches exact names, which carry the target's layer count), or None when ``write`` can.
    """

    match: Callable[[str, list[str]], str | None]
    write: Callable[[str, bool], tuple[str, ...]]
    layer_count_needed: Callable[[str], LayerCountNeeded | None] = lambda runtime_name: None
    # False where some decoder module's rule needs the target's layer count (``layer_count_needed`` says which).
    any_layer: bool = True


# What N is and where to read it (docs/cli.md#the-targets-layer-count).
TARGET_LAYERS_HINT = words(
    "pass ",
    placeholder("target_layers", "N"),
    ", N being the target model's num_hidden_layers (in its config.json; text_config's for a multimodal target), or ",
    Param("target_config"),
    " with that config.json or its directory",
)


class LayerCountNeeded(InputError):
    """A dialect cannot write a rule excluding a decoder module without the target's layer count. ``why``: the
    engine's matching, in words; the plan rewrites it into one message naming what is kept, why, and what N is."""

    def __init__(self, why: str, runtime_name: str) -> None:
        self.why = why
        self.runtime_name = runtime_name
        super().__init__(f"{why}, so excluding {runtime_name} needs the target's layer count", hint=TARGET_LAYERS_HINT)


def exact_or_regex_rule(runtime_name: str, patterns: list[str]) -> str | None:
    """The rule vLLM and SGLang apply to Quark ``exclude`` and compressed-tensors ``ignore``: an exact
    string, or ``re:`` + ``re.match`` (anchored at the start only)."""
    for pattern in patterns:
        if pattern.startswith("re:"):
            if re.match(pattern[3:], runtime_name):
                return pattern
        elif pattern == runtime_name:
            return pattern
    return None


def weight_only_integer_groups(kinds: KindPair, fmt: Format) -> bool:
    """Whether vLLM and SGLang run the scheme with CompressedTensorsWNA16 (compressed_tensors.py::
    _is_wNa16_group_channel: integer weights per group or channel, no input quantization), as they dispatch: on the
    config's QuantizationArgs."""
    from eaglequant.formats.compressed_tensors_args import CtRecipe
    from eaglequant.schemes.model import default_scheme_for

    scheme = default_scheme_for(kinds)
    if scheme.activation is not None or not fmt.supports(scheme):
        return False
    recipe = fmt.recipe(kinds)
    return isinstance(recipe, CtRecipe) and recipe.weight_args["type"] == "int"


def base_qkv_partial_group(module: RuntimeModule, kinds: KindPair, fmt: Format) -> int | None:
    """The integer group size a Llama draft's base ``qkv_proj`` cannot take: vLLM's and SGLang's first build one for
    the hidden size at the fused module's name, and their integer weight-only method (``weight_only_integer_groups``)
    refuses in-features that are not whole groups; None when ``module`` loads."""
    group = kinds.weight_kind.columns_per_scale
    if (
        module.attention != Attention.MHA
        or "qkv_proj" not in module.names[0]
        or not group
        or module.hidden_size % group == 0
    ):
        return None
    return group if weight_only_integer_groups(kinds, fmt) else None


def expected_tensors(fmt: Format, kinds: KindPair) -> tuple[str, ...]:
    """The parameters a module quantized in ``kinds`` loads from a ``fmt`` checkpoint (``weight``, ``weight_scale``,
    ...): what the format's recipe stores."""
    from eaglequant.schemes.model import default_scheme_for

    scheme = default_scheme_for(kinds)
    return tuple(t.suffix for t in fmt.recipe(kinds).stored_tensors(scheme)) if fmt.supports(scheme) else ()


def decided(
    engine: Engine,
    module: RuntimeModule,
    fmt: Format,
    kinds: KindPair,
    mixed: bool,
    *,
    kept: str | None = None,
    refusal: str | None = None,
    required: str | None = None,
) -> ModuleDecision:
    """An engine's decision once its own rules for the module are known, in the order they bind: whether it builds the
    draft at all (:attr:`RuntimeModule.unbuilt`), ``kept`` (it builds
    the module unquantized whatever the config says), then whether it loads ``kinds`` from ``fmt`` at all (its
    cells), then whether it reads per-module kinds from ``fmt`` (``mixed``: the checkpoint's linears mix kinds), then
    ``refusal`` (it fails to load this module in ``kinds``), else quantized, with the source that builds it."""
    if module.unbuilt is not None:
        return refused(module.unbuilt, whole_draft=True)
    if kept is not None:
        return built_unquantized(kept)
    cell = engine.draft_cells.get((kinds, fmt.name, module.attention))
    if cell is None:
        return refused(f"{fmt.title} cannot store {kinds_title(kinds)}")
    if not cell.loads:
        return refused(f"{engine.titled} does not load {kinds_title(kinds)} in {fmt.title}: {cell.note}")
    if mixed and not fmt.stores_mixed:
        return refused(f"{fmt.title} cannot store linears of different kinds in one checkpoint")
    if mixed and fmt.name not in engine.per_module_configs:
        return refused(
            f"{engine.titled} does not read per-module kinds from a {fmt.title} config: {engine.per_module_elsewhere}"
        )
    if refusal is not None:
        return refused(refusal)
    if mixed:
        source = engine.per_module_configs[fmt.name]
    elif module.is_lm_head:
        source = engine.lm_head_quant_methods[fmt.quant_method]
    elif module.is_fc:
        source = engine.fc_source
    else:
        source = cell.note
    return quantized(source, expected_tensors(fmt, kinds), required)


def lm_head_config_kept(engine: Engine, fmt: Format) -> str | None:
    """Why ``engine``'s ``fmt`` config gives the ParallelLMHead no quantization method (None: it does)."""
    if fmt.quant_method in engine.lm_head_quant_methods:
        return None
    return f"{engine.title}'s {fmt.title} config gives the ParallelLMHead no quantization method"


class Engine(ABC):
    name: ClassVar[str]  # the engine, whichever release: "vllm", "sglang", "trtllm"
    title: ClassVar[str]
    release: ClassVar[str]  # the engine release this model describes; its rules cite that release's files
    # What --engine takes and records store for this release: the engine's name for the release eaglequant tests
    # (``vllm``), NAME==RELEASE for another (``vllm==0.33.0``); ENGINES is keyed by it.
    key: ClassVar[str]
    hub_library: ClassVar[str]  # the Hub's library_name for a checkpoint this engine loads (the card's tag)
    cells: ClassVar[Cells]  # what this release loads: its column of the support matrix (engines/support.py)

    @cached_property
    def draft_cells(self) -> dict[tuple[KindPair, str, str], Support]:
        """(scheme kinds, format, attention) -> what this release loads for a draft of that attention (its
        :attr:`cells`, each as it holds for that draft: :meth:`Support.for_draft`)."""
        return {
            (kinds, fmt, attention): cell.for_draft(attention)
            for (kinds, fmt), cell in self.cells.items()
            for attention in Attention
        }

    @property
    def spellings(self) -> tuple[str, str]:
        """What --engine takes for this release: its key, and NAME==RELEASE (``vllm==0.32.0`` for ``vllm``)."""
        return (self.key, f"{self.name}=={self.release}")

    @property
    def titled(self) -> str:
        """The engine with its release, as messages, tables and the card name it: ``vLLM 0.32.0``."""
        return f"{self.title} {self.release}"

    def runtime_modules(self, head: HeadDescription, target_layers: int) -> list[RuntimeModule]:
        """Every module the engine builds for the draft: ``model.fc``, ``lm_head``, one per fused group,
        one per other decoder linear (named by :meth:`fused_names` and :meth:`linear_names`)."""
        present = {linear.module for linear in head.linears}
        unbuilt = self._unbuilt(head)

        def module(names: tuple[str, ...], *members: str) -> RuntimeModule:
            rows = tuple(head.linear(m).out_features for m in members)
            return RuntimeModule(names, members, rows, head.attention, head.dims.hidden_size, unbuilt)

        modules = []
        for special in ("fc", "lm_head"):
            if special in present:
                modules.append(module((RUNTIME_NAMES[special],), special))
        grouped = {m for group in head.fused_groups for m in group.members}
        for group in head.fused_groups:
            modules.append(module(self.fused_names(head, group, target_layers), *group.members))
        for linear in head.decoder_linears:
            if linear.module not in grouped:
                modules.append(module(self.linear_names(head, linear, target_layers), linear.module))
        return modules

    @abstractmethod
    def decide(self, module: RuntimeModule, fmt: Format, kinds: KindPair, mixed: bool = False) -> ModuleDecision:
        """What this release does with ``module`` of a ``fmt`` checkpoint that stores it in ``kinds`` (``mixed``: the
        checkpoint's linears are in different kinds): quantized, kept unquantized, or refused, and the engine source
        that decides it (most engines answer through :func:`decided`)."""

    def pattern_problems(
        self, head: HeadDescription, fmt: Format, patterns: list[str], kinds: KindPair | None = None
    ) -> list[str]:
        """Ways ``patterns`` break this engine's loading beyond which modules they exclude."""
        return []

    @abstractmethod
    def fused_names(self, head: HeadDescription, group: FusedGroup, target_layers: int) -> tuple[str, ...]:
        """Runtime spellings of a fused group's module (the first is the one the engine uses)."""

    @abstractmethod
    def linear_names(self, head: HeadDescription, linear: HeadLinear, target_layers: int) -> tuple[str, ...]:
        """Runtime spellings of an unfused decoder linear."""

    # config.json quant_methods whose engine config gives the ParallelLMHead a quantization method, so that an
    # unmatched lm_head is quantized (for the others it is never quantized, whatever the rules say) -> the source.
    lm_head_quant_methods: ClassVar[Mapping[str, str]] = {}
    # Formats whose per-module config (Format.quantization_config) this release reads -> the function that reads it;
    # and why it reads per-module kinds from no other format that stores them.
    per_module_configs: ClassVar[Mapping[str, str]] = {}
    per_module_elsewhere: ClassVar[str] = "eaglequant has no model of it reading them"
    # Where the draft's fc is built with the draft's quant config (for the drafts whose fc it quantizes).
    fc_source: ClassVar[str] = ""
    # Where the draft reads a vocabulary smaller than the target's (d2t: draft id -> target id; t2d).
    vocabulary_map_source: ClassVar[str] = ""
    # Whether eaglequant drives this release's own speculative decoding (``accept``) and its own hidden-state
    # extraction (``capture --engine``): the release its engine tests run in.
    measures_acceptance: ClassVar[bool] = False
    captures_hidden_states: ClassVar[bool] = False

    @abstractmethod
    def dialects(self) -> dict[str, Dialect]:
        """Exclusion dialect (``Format.exclude_dialect``) -> how this engine reads it."""

    def dialect(self, fmt: Format) -> Dialect:
        """How this release reads ``fmt``'s exclusion list."""
        try:
            return self.dialects()[fmt.exclude_dialect]
        except KeyError:
            raise InputError(
                f"eaglequant has no model of how {self.title} reads {fmt.title} exclusions ({fmt.exclude_dialect})",
                hint=f"add the {fmt.exclude_dialect!r} dialect to the dialects() of {self.dialects.__module__}",
            ) from None

    def matching_rule(self, fmt: Format, runtime_name: str, patterns: list[str]) -> str | None:
        """The first pattern that makes the engine exclude ``runtime_name``, or None."""
        return self.dialect(fmt).match(runtime_name, patterns)

    def loads_pruned_vocabulary(self, attention: Attention) -> Answer:
        """Whether the engine loads a draft whose vocabulary is smaller than the target's (``d2t``, ``t2d``)."""
        if not self.vocabulary_map_source:
            return Answer(False, f"eaglequant has no model of how {self.titled} reads d2t")
        return Answer(True, self.vocabulary_map_source)

    def _unbuilt(self, head: HeadDescription) -> str | None:
        """Why the engine cannot build this head as an EAGLE-3 draft at all, whatever the scheme (None: it can): each
        of its runtime modules carries it, and :meth:`decide` refuses them for it (``whole_draft``)."""
        return None

    def environment_notes(self, attention: Attention, kinds: KindPair, fmt: Format) -> list[Finding]:
        """Settings of the serving environment (environment variables, platform defaults) under which this release
        runs a checkpoint of this scheme other than as stored, each with its fix; [] when none. Whatever the draft's
        config and target: the card's serving section and ``explain`` show them."""
        return []

    def draft_notes(self, head: HeadDescription, target: TargetModel) -> list[Finding]:
        """What this release does with this draft and target that the draft's config.json does not say: what it
        would serve otherwise without an error (a shorter context, a refused verifier), each with its fix, and
        settings that change what a round reads; [] when nothing. ``convert``, ``explain`` and ``verify`` show them."""
        return []

    def context_change(self, head_config: dict[str, Any], target: TargetModel) -> ConfigChange | None:
        """The config.json change with which this release serves the target's whole context with this draft
        (``match_target_context``); None where it needs none. Refused (InputError) where no change can."""
        return None

    @abstractmethod
    def serving_snippets(self, target: str, draft: str, draft_tokens: int) -> list[ServingSnippet]:
        """How to serve ``target`` with the draft head at ``draft`` (a path or Hub id) proposing
        ``draft_tokens`` tokens per step."""

    def scheduled_snippets(
        self, target: str, draft: str, schedule: tuple[tuple[int, int, int], ...]
    ) -> list[ServingSnippet] | None:
        """How to serve it with a k for each batch size: ``schedule``'s inclusive ranges ``(first, last, k)``, k = 0
        without speculation; None where this release takes one k for every batch."""
        return None
