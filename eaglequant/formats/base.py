"""What every output format provides: tensor names and dtypes for a quantized linear, the vendor's
quantization math, and the ``quantization_config`` written into config.json."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from eaglequant.checkpoint.writer import TensorSpec
from eaglequant.common.errors import InputError, SchemeError
from eaglequant.common.findings import Finding
from eaglequant.formats.quant_config import QuantConfig
from eaglequant.formats.stored_tensors import Placement, StoredTensor
from eaglequant.kinds import KindPair, WeightKind, kinds_title
from eaglequant.layouts.head import HeadDescription, HeadLinear
from eaglequant.numerics.error_stats import ErrorSums, error_sums
from eaglequant.schemes.model import Scheme

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    import torch

    from eaglequant.kinds.base import StoredLinear
    from eaglequant.schemes.assignment import SchemeAssignment


@dataclass(frozen=True)
class GroupScales:
    """Values a fused group (q/k/v, gate/up, q_a + kv_a) shares, computed before any member is written.

    ``weight_amax``: max |W| over every member (the NVFP4 global scale), float32 scalar, or None when
    the scheme has no global scale. ``input_amax``: the calibrated activation amax of the group's
    input, float32 scalar, or None when activations are dynamic or weight-only.
    """

    weight_amax: torch.Tensor | None = None
    input_amax: torch.Tensor | None = None


@dataclass(frozen=True)
class WrittenConfig:
    """A checkpoint's quantization config read back: the typed config it declares, and the contradictions inside the
    config files themselves (about the file).

    A config with per-module kinds names each module of another kinds by the engine's runtime name
    (``model.layers.61.mlp.gate_up_proj``), in ``module_kinds``; which canonical linears a runtime name stands for is
    the engine's to say (:mod:`eaglequant.readback.module_kinds`)."""

    format_name: str
    config: QuantConfig
    problems: list[Finding] = field(default_factory=list)

    @property
    def kinds(self) -> KindPair:
        """The default group's kinds (or, where every quantized module is listed, the kinds most are in)."""
        return self.config.kinds

    @property
    def patterns(self) -> list[str]:
        """The exclusion rules, as the engines read them."""
        return list(self.config.exclude)

    @property
    def module_kinds(self) -> dict[str, KindPair]:
        """Runtime name -> kinds, for each module a group names; empty: one kinds for all."""
        return self.config.module_kinds

    @property
    def listed(self) -> frozenset[str] | None:
        """The runtime modules a config that lists every quantized module names; None: a config with a default."""
        return frozenset(self.module_kinds) if self.config.default is None else None

    @property
    def declared_kinds(self) -> list[KindPair]:
        """Every kinds the config declares, ``kinds`` first, each once."""
        return self.config.declared_kinds


@dataclass(frozen=True)
class ConfigFiles:
    """What :meth:`Format.write_config` writes: config.json's ``quantization_config`` and the format's JSON files
    beside config.json, by name."""

    quantization_config: dict[str, Any]
    side_files: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class HeadStorage:
    """How a format stores each linear of a head, decided once before the engines' part of a plan: the tensors a
    linear is written as when quantized, or why the format cannot store it quantized."""

    specs: dict[str, list[TensorSpec]]  # canonical linear -> the tensors it is written as, quantized
    problems: dict[str, Finding]  # canonical linear -> why this format cannot store it quantized, about the linear


@dataclass
class QuantizedRows:
    """A block of a linear's rows, quantized: row-indexed outputs hold only these rows, per-tensor values
    (global and input scales) are whole."""

    tensors: dict[str, torch.Tensor]  # output name -> tensor, exactly the names of ``tensor_specs``
    sums: ErrorSums


class Recipe(ABC):
    """How one format stores one weight kind: the vendor's name per activation kind, the tensors a quantized
    linear becomes (each declared once in ``tensors``: name suffix, dtype, shape, what a kernel reads it as), and
    the vendor's math. A format's own recipe subclass adds the pieces of its config that depend on the kind."""

    kind: ClassVar[WeightKind]
    algorithms: ClassVar[dict[str | None, str]]  # activation kind (None: weight-only) -> the vendor's name
    tensors: ClassVar[tuple[StoredTensor, ...]]
    pads_blocks: ClassVar[bool] = False  # the vendor zero-pads an in-dimension its scale blocks do not divide

    @abstractmethod
    def compute(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> tuple[torch.Tensor, ...]:
        """The vendor's tensors for ``weight`` (a block of ``linear``'s rows), in the order of
        :meth:`stored_tensors`."""

    @property
    def per_linear_metadata(self) -> tuple[str, ...]:
        """Tensors stored whole per linear that are not a scale (compressed-tensors' weight_shape): an engine that
        loads a fused module by concatenating its members' tensors cannot take them."""
        return tuple(t.suffix for t in self.tensors if t.metadata)

    @property
    def weight(self) -> StoredTensor:
        """The declared tensor that holds the quantized weight's codes."""
        return next(t for t in self.tensors if t.feeds == "weight")

    def stored_tensors(self, scheme: Scheme) -> tuple[StoredTensor, ...]:
        """The declared tensors ``scheme`` stores (an input scale only when it quantizes activations)."""
        return tuple(t for t in self.tensors if scheme.activation is not None or not t.with_activations)

    def tensor_specs(self, linear: HeadLinear, scheme: Scheme) -> list[TensorSpec]:
        """Names, dtypes and shapes of the tensors a quantized ``linear`` is stored as."""
        n, k, base = linear.out_features, linear.in_features, linear.checkpoint_module
        return [
            TensorSpec(f"{base}.{t.suffix}", t.dtype_for(linear, self.kind), t.shape(n, k, self.kind))
            for t in self.stored_tensors(scheme)
        ]

    def quantize(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> dict[str, torch.Tensor]:
        """Output name -> tensor, exactly the names of :meth:`tensor_specs`, as the vendor computes them."""
        values = self.compute(linear, weight, scheme, shared)
        base = linear.checkpoint_module
        return {f"{base}.{t.suffix}": v for t, v in zip(self.stored_tensors(scheme), values, strict=True)}

    def stored(self, linear: HeadLinear, scheme: Scheme, tensors: Mapping[str, torch.Tensor]) -> StoredLinear:
        """The stored tensors as a kernel reads them, this format's scale convention turned into a multiplier. The
        activation kind is the scheme's where the kernels simulate it (otherwise they run the weight-only kernel)."""
        from eaglequant.kinds.base import StoredLinear

        base = linear.checkpoint_module
        feeding = {t.feeds: t for t in self.stored_tensors(scheme) if t.feeds is not None}
        weight = tensors[f"{base}.{self.weight.suffix}"]

        def read(field: str) -> torch.Tensor | None:
            declared = feeding.get(field)
            return None if declared is None else declared.read(tensors[f"{base}.{declared.suffix}"], weight.shape[0])

        activation = scheme.kinds.activation_kind
        return StoredLinear(
            self.kind,
            weight,
            channel_scale=read("channel_scale"),
            block_scale=read("block_scale"),
            global_scale=read("global_scale"),
            activation_kind=activation if activation is not None and activation.simulated else None,
            zero_point=read("zero_point"),
        )


class Format(ABC):
    name: ClassVar[str]
    title: ClassVar[str]
    quant_method: ClassVar[str]  # config.json's quantization_config.quant_method
    extra_file_names: ClassVar[tuple[str, ...]] = ()  # JSON files written beside config.json
    exclude_key: ClassVar[str]  # the quantization_config key that lists excluded modules
    # How engines read this format's exclusion entries (each engine maps a dialect to its own matching rule).
    exclude_dialect: ClassVar[str]
    recipes: ClassVar[tuple[Recipe, ...]]  # one per weight kind this format can store
    # Parameter names of a quantized linear's stored weight, and of what is stored beside it, including the vendor's
    # variants eaglequant does not write: verify's copy check knows by them which tensors are not copies. (Reading a
    # written checkpoint back goes by the declaring recipe's own tensors.)
    weight_params: ClassVar[tuple[str, ...]] = ("weight",)
    scale_params: ClassVar[tuple[str, ...]]

    @property
    def algorithms(self) -> dict[KindPair, str]:
        """(weight kind, activation kind) -> the vendor's own name for that scheme."""
        return {KindPair(r.kind.name, act): name for r in self.recipes for act, name in r.algorithms.items()}

    def algorithm(self, scheme: Scheme) -> str | None:
        """The vendor's name for ``scheme`` (e.g. ``ptpc_fp8``, ``NVFP4``), or None if it cannot store it."""
        return self.algorithms.get(scheme.kinds)

    def supports(self, scheme: Scheme) -> bool:
        return self.algorithm(scheme) is not None

    def check_stores(self, scheme: Scheme, others: Iterable[Format] = ()) -> None:
        """Refuse a scheme this format cannot store, naming those of ``others`` that can (else what this one
        stores)."""
        if self.supports(scheme):
            return
        able = [f.name for f in others if f.supports(scheme)]
        stores = ", ".join(sorted(set(self.algorithms.values())))
        raise SchemeError(
            f"format {self.name!r} cannot store scheme {scheme.name!r} ({kinds_title(scheme.kinds)})",
            hint=f"formats that can: {', '.join(able)}" if able else f"{self.title} stores: {stores}",
        )

    def recipe(self, kinds: KindPair) -> Recipe:
        """This format's recipe for a scheme of ``kinds`` (a scheme's or a written config's); kinds it cannot store
        are refused, never stored as others."""
        self._algorithm_of(kinds)
        return next(r for r in self.recipes if r.kind is kinds.weight_kind)

    def shape_problem(self, linear: HeadLinear, scheme: Scheme, fused_before_last: bool = False) -> Finding | None:
        """Why ``linear`` cannot be stored quantized in this format, about the linear, or None
        (``fused_before_last``: see :meth:`WeightKind.shape_problem`): the kind's problem, or ``columns-unaligned``."""
        kind = scheme.kinds.weight_kind
        problem = kind.shape_problem(linear.out_features, linear.in_features, fused_before_last)
        if problem is not None:
            return Finding(problem.code, linear.module, problem.message)
        block = kind.columns_per_scale
        if block and linear.in_features % block and not self.recipe(scheme.kinds).pads_blocks:
            text = (
                f"in-features {linear.in_features} is not a multiple of {block}, which {self.title} "
                f"{scheme.weight.kind.name} requires"
            )
            return Finding("columns-unaligned", linear.module, text)
        return None

    def tensor_specs(self, linear: HeadLinear, scheme: Scheme) -> list[TensorSpec]:
        """Names, dtypes and shapes of the tensors a quantized ``linear`` is stored as."""
        return self.recipe(scheme.kinds).tensor_specs(linear, scheme)

    def storage(
        self, head: HeadDescription, assignment: SchemeAssignment, others: Iterable[Format] = ()
    ) -> HeadStorage:
        """Refuse a scheme of ``assignment`` this format cannot store (naming those of ``others`` that can); then
        each linear of ``head`` in its own scheme: its tensors, or why it cannot be stored quantized."""
        # linears of different kinds: only a format that stores them is a way out (which engines read them is the
        # engines' part of the plan: eaglequant/engines/support_tables.py)
        candidates = [f for f in others if f.stores_mixed or not assignment.mixed]
        for scheme in assignment.schemes:
            self.check_stores(scheme, candidates)
        specs: dict[str, list[TensorSpec]] = {}
        problems: dict[str, Finding] = {}
        for linear in head.linears:
            scheme = assignment.of(linear.module)
            group = head.group_of(linear.module)
            problem = self.shape_problem(linear, scheme, group is not None and group.members[-1] != linear.module)
            if problem is None:
                specs[linear.module] = self.tensor_specs(linear, scheme)
            else:
                problems[linear.module] = problem
        return HeadStorage(specs, problems)

    def placements(self, linear: HeadLinear, scheme: Scheme) -> dict[str, Placement]:
        """Each of :meth:`tensor_specs`' names -> what its first dimension runs over, as its recipe declares it."""
        base = linear.checkpoint_module
        return {f"{base}.{t.suffix}": t.placement for t in self.recipe(scheme.kinds).stored_tensors(scheme)}

    def quantize_rows(
        self, linear: HeadLinear, weight_rows: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> QuantizedRows:
        """The vendor's tensors for a block of ``linear``'s rows (whole scale blocks of rows: see
        :attr:`WeightKind.rows_per_scale`), with the error of what an engine dequantizes from them. Every
        scheme's math is local to a scale block once ``shared`` is known, so quantizing a weight block by
        block gives exactly the bytes of quantizing it whole."""
        tensors = self.quantized_tensors(linear, weight_rows, scheme, shared)
        stored = self.stored_linear(linear, scheme, tensors)
        return QuantizedRows(tensors, error_sums(weight_rows, stored.dequantize_rows))

    def quantized_tensors(
        self, linear: HeadLinear, weight: torch.Tensor, scheme: Scheme, shared: GroupScales
    ) -> dict[str, torch.Tensor]:
        """Output name -> tensor, exactly the names of :meth:`tensor_specs`, as the vendor computes them."""
        return self.recipe(scheme.kinds).quantize(linear, weight, scheme, shared)

    def stored_linear(self, linear: HeadLinear, scheme: Scheme, tensors: Mapping[str, torch.Tensor]) -> StoredLinear:
        """The stored tensors of a quantized ``linear`` (by the names of :meth:`tensor_specs`) as a kernel reads
        them, with this format's scale convention turned into a multiplier."""
        return self.recipe(scheme.kinds).stored(linear, scheme, tensors)

    # Whether the format's per-module form lists every quantized module, so that a module it does not list runs
    # unquantized (ModelOpt's MIXED_PRECISION); the others keep a default group beside the named ones.
    names_every_module: ClassVar[bool] = False
    # The vendor's name for a config with per-module kinds, where it has one (None: the groups' names joined).
    per_module_algorithm: ClassVar[str | None] = None

    @property
    def stores_mixed(self) -> bool:
        """Whether one checkpoint in this format can hold linears of different kinds (it stores more than one)."""
        return len(self.algorithms) > 1

    def declared_algorithm(self, config: QuantConfig) -> str:
        """The vendor's name for what ``config`` declares: its one scheme's, or the per-module form's."""
        if not config.per_module:
            return self._algorithm_of(config.kinds)
        return self.per_module_algorithm or " + ".join(self._algorithm_of(g.kinds) for g in config.groups)

    def _algorithm_of(self, kinds: KindPair) -> str:
        algorithm = self.algorithms.get(kinds)
        if algorithm is None:
            raise SchemeError(f"format {self.name!r} cannot store {kinds_title(kinds)}")
        return algorithm

    @abstractmethod
    def write_config(self, config: QuantConfig) -> ConfigFiles:
        """config.json's ``quantization_config`` and the side files that declare ``config``, as the vendor writes
        them (a flat config as its export does, per-module kinds where the engines' readers look for them)."""

    @abstractmethod
    def read_config(self, quantization_config: dict[str, Any], extra: dict[str, dict[str, Any]]) -> WrittenConfig:
        """The config that ``quantization_config`` and ``extra`` (the format's own files beside config.json, by name)
        declare: the inverse of :meth:`write_config`. A scheme eaglequant does not model is refused."""

    @abstractmethod
    def matches_target(self, target: str, runtime_name: str) -> bool:
        """Whether the engines' reader of this format gives a module named ``runtime_name`` the kinds of a group
        naming ``target`` (vLLM and SGLang match group targets alike)."""

    def unmodelled(self, found: object) -> InputError:
        """The error for a config declaring a scheme eaglequant does not model (``found``: what it declares)."""
        return InputError(
            f"config.json: the {self.title} quantization_config declares a scheme eaglequant does not model "
            f"({_short(found)})",
            hint=f"eaglequant reads {', '.join(sorted(set(self.algorithms.values())))}",
        )

    def read_exclude(self, quantization_config: dict[str, Any], key: str | None = None) -> tuple[str, ...]:
        """The exclusion rules under ``key`` (default: :attr:`exclude_key`), checked to be a list of strings."""
        key = key or self.exclude_key
        rules = quantization_config.get(key) or []
        if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
            raise InputError(f"config.json: quantization_config.{key} must be a list of strings")
        return tuple(rules)


def _short(value: object, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
