"""A checkpoint's quantization config as one typed value, whatever the format that writes it: groups of runtime
modules, each in one pair of kinds, and the exclusion rules. compressed-tensors' ``config_groups`` is the model.

A flat config is one default group (no targets): every module no other group names and no rule excludes is in its
kinds. Linears of different kinds add groups that name their modules by the engines' runtime names, each format in
its own place: Quark's ``layer_quant_config``, compressed-tensors' further ``config_groups``, ModelOpt's
``quantized_layers`` (MIXED_PRECISION, which lists every quantized module, so it has no default group). Each format
writes it with :meth:`Format.write_config` and reads it back with :meth:`Format.read_config`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from eaglequant.common.errors import ExclusionProofError
from eaglequant.kinds import KindPair


@dataclass(frozen=True)
class ConfigGroup:
    """``kinds``: the group's scheme; ``targets``: the runtime module names it applies to, sorted; () for the default
    group."""

    kinds: KindPair
    targets: tuple[str, ...] = ()


@dataclass(frozen=True)
class QuantConfig:
    """``groups``: the default group first (when there is one); ``exclude``: the exclusion rules, as written."""

    groups: tuple[ConfigGroup, ...]
    exclude: tuple[str, ...] = ()

    @classmethod
    def flat(cls, kinds: KindPair, exclude: tuple[str, ...] | list[str] = ()) -> QuantConfig:
        """One default group in ``kinds``."""
        return cls((ConfigGroup(kinds),), tuple(exclude))

    @classmethod
    def of(
        cls,
        modules: Mapping[str, KindPair | None],
        exclude: tuple[str, ...] | list[str],
        main: KindPair,
        *,
        default_group: bool = True,
        read_as: Callable[[str, str], bool] | None = None,
    ) -> QuantConfig:
        """The config of a checkpoint whose runtime modules are in ``modules``' kinds (None: unquantized): flat when
        the quantized ones share one kinds (``main`` when none is quantized), else a group per kinds naming its
        modules, beside a default group (``main``'s, where some module is in it) when the format has one.
        ``read_as(target, name)``: how the engines match a group's target; given, every quantized module must read
        back in its own kinds (else ExclusionProofError, a bug)."""
        quantized = {name: kinds for name, kinds in modules.items() if kinds is not None}
        used = list(dict.fromkeys(quantized.values()))
        if len(used) <= 1:
            return cls.flat(used[0] if used else main, exclude)
        default = None
        if default_group:
            default = main if main in used else Counter(quantized.values()).most_common(1)[0][0]
        named = [
            ConfigGroup(kinds, tuple(sorted(n for n, k in quantized.items() if k == kinds)))
            for kinds in used
            if kinds != default
        ]
        named.sort(key=lambda group: group.targets[0])  # as a reader meets them in a listing sorted by name
        config = cls(tuple([ConfigGroup(default)] if default is not None else []) + tuple(named), tuple(exclude))
        for name, kinds in quantized.items():
            given = kinds if read_as is None else config.kinds_for((name,), read_as)
            if given != kinds:
                raise ExclusionProofError(
                    f"an engine would read {name} as {given} from this config, but it is stored as {kinds}",
                    hint="report this as a bug in eaglequant",
                )
        return config

    @classmethod
    def listed(
        cls, default: KindPair | None, module_kinds: Mapping[str, KindPair], exclude: tuple[str, ...] | list[str]
    ) -> QuantConfig:
        """The config a reader finds: the ``default`` group's kinds (None: none), and the kinds of each module a
        config names, grouped by kinds in the order a listing sorted by name meets them."""
        by_kinds: dict[KindPair, list[str]] = {}
        for target in sorted(module_kinds):
            by_kinds.setdefault(module_kinds[target], []).append(target)
        named = tuple(ConfigGroup(kinds, tuple(targets)) for kinds, targets in by_kinds.items())
        return cls((() if default is None else (ConfigGroup(default),)) + named, tuple(exclude))

    @property
    def default(self) -> ConfigGroup | None:
        """The group of every module no other group names; None where the config lists every quantized module."""
        return next((group for group in self.groups if not group.targets), None)

    @property
    def per_module(self) -> bool:
        """Whether some group names its modules (linears of different kinds)."""
        return any(group.targets for group in self.groups)

    @property
    def kinds(self) -> KindPair:
        """The default group's kinds, else those of the group naming the most modules (ties: the first)."""
        default = self.default
        if default is not None:
            return default.kinds
        return max(self.groups, key=lambda group: len(group.targets)).kinds

    @property
    def module_kinds(self) -> dict[str, KindPair]:
        """Runtime name (or pattern, as written) -> kinds, for every module a group names."""
        return {target: group.kinds for group in self.groups for target in group.targets}

    def kinds_for(self, names: tuple[str, ...], matches: Callable[[str, str], bool]) -> KindPair | None:
        """The kinds an engine gives a module it does not exclude, spelled ``names``: those of the first group
        with a target that ``matches(target, name)`` for one of them, else the default group's (None: unquantized,
        where the config lists every quantized module)."""
        for group in self.groups:
            if any(matches(target, name) for target in group.targets for name in names):
                return group.kinds
        default = self.default
        return default.kinds if default is not None else None

    @property
    def declared_kinds(self) -> list[KindPair]:
        """Every kinds the config declares, :attr:`kinds` first, each once."""
        return list(dict.fromkeys([self.kinds, *(group.kinds for group in self.groups)]))
