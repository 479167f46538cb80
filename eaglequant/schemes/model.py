"""Declarative quantization schemes, loaded from TOML and validated.

A scheme says *what* is stored (element dtype, scale granularity and encoding, static or dynamic
activations); a format says *how* it is named and which vendor's rounding it follows. Built-in schemes
live in the top-level ``schemes/`` directory (shipped inside the wheel as ``eaglequant/_builtin_schemes``).

Every scheme reduces to a *kind* pair: a registered weight kind (:mod:`eaglequant.kinds`: ``fp8-channel``,
``fp8-block``, ``nvfp4``, ``mxfp4``) and an activation kind (``None`` for weight-only, ``fp8-token``,
``fp8-group``, ``nvfp4``, ``mxfp4``). Formats and the engine support matrix are keyed on those kinds, so a
user's own scheme file works wherever a built-in would.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from eaglequant.common import toml
from eaglequant.common.errors import SchemeError, placeholder, words
from eaglequant.common.json_fields import JsonRecord
from eaglequant.kinds import ACTIVATION_KINDS, WEIGHT_KINDS, KindPair, TensorKind, kinds_label
from eaglequant.kinds.base import BlockSize

UNCALIBRATED_CHOICES = ("weight-only", "refuse")

_TOP_KEYS = {"name", "summary", "weight", "activation", "verify"}
_WEIGHT_KEYS = {"dtype", "granularity", "block_size", "scale_dtype", "global_scale"}
_ACTIVATION_KEYS = _WEIGHT_KEYS | {"dynamic", "if_uncalibrated"}


@dataclass(frozen=True)
class TensorQuant:
    """A scheme's weights or activations: the registered kind they are stored (or quantized at run time) in, which
    says their dtype, granularity, blocks and scales, and for activations whether their scales are computed at run
    time."""

    kind: TensorKind
    dynamic: bool = True  # activations only: scales computed at run time


@dataclass(frozen=True)
class VerifyThresholds(JsonRecord):
    """What ``eaglequant verify`` requires of a checkpoint in this scheme.

    Per quantized linear, the fused kernel's output against the source GEMM on seeded activations: SQNR (dB),
    cosine and relative error; and every scale block of the dequantized weight (a row for per-channel
    scales) against the source's (relative error, so one misplaced scale or code fails the block it sits
    in). For the whole head, the draft's distribution with the source weights (q) against the quantized
    ones (q'): the mean total-variation
    distance, which bounds how much the acceptance probability of speculative sampling can drop; the mean KL;
    and top-1 agreement, which fails only where the arg-max flips exceed what the logits' own perturbation
    explains (see docs/verification.md). Head statistics fail only when their confidence bound does.

    ``max_acceptance_drop``: the tokens of greedy acceptance length (k = 3) a quantized draft may lose against
    its source when the engine serves both (``eaglequant accept``).
    """

    min_sqnr_db: float = 12.0
    min_cosine: float = 0.97
    max_relative_error: float = 0.25
    max_block_relative_error: float = 0.5
    max_mean_tv: float = 0.25
    min_top1_agreement: float = 0.8
    max_mean_kl: float = 0.3
    max_acceptance_drop: float = 0.10


_VERIFY_KEYS = set(VerifyThresholds.__dataclass_fields__)


@dataclass(frozen=True)
class Scheme:
    name: str
    summary: str
    weight: TensorQuant
    activation: TensorQuant | None  # None: weight-only
    source: str  # file it was loaded from
    if_uncalibrated: str = "refuse"  # what a static activation scale without calibration data becomes
    verify: VerifyThresholds = VerifyThresholds()

    @property
    def kinds(self) -> KindPair:
        return KindPair(self.weight.kind.name, None if self.activation is None else self.activation.kind.name)

    @property
    def label(self) -> str:
        """W4A16, W8A8, ... as serving engineers say it."""
        return kinds_label(self.kinds)

    @property
    def needs_calibration(self) -> bool:
        return self.activation is not None and self.activation.kind.global_scale

    def without_calibration(self) -> Scheme:
        """The scheme actually written when no calibration data is given."""
        if not self.needs_calibration:
            return self
        if self.if_uncalibrated == "weight-only":
            return replace(self, activation=None)
        raise SchemeError(
            f"scheme {self.name!r} needs static activation scales",
            hint=words("pass ", placeholder("calib", "FILE.safetensors"), " with captured draft inputs"),
        )


def builtin_dir() -> Path:
    installed = Path(__file__).resolve().parent.parent / "_builtin_schemes"
    return installed if installed.is_dir() else Path(__file__).resolve().parents[2] / "schemes"


def builtin_scheme_names() -> list[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.toml"))


def scheme_path(name_or_path: str) -> Path:
    if name_or_path.endswith(".toml"):
        return Path(name_or_path)
    path = builtin_dir() / f"{name_or_path}.toml"
    if not path.is_file():
        known = ", ".join(builtin_scheme_names())
        raise SchemeError(f"unknown scheme {name_or_path!r}", hint=f"choose one of: {known}, or a .toml path")
    return path


def load_scheme(name_or_path: str) -> Scheme:
    """Load a built-in scheme by name, or a scheme file by path."""
    path = scheme_path(name_or_path)
    try:
        data = toml.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise SchemeError(f"{path}: scheme file not found") from exc
    except (toml.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SchemeError(f"{path}: not valid TOML ({exc})") from exc
    return parse_scheme(data, str(path))


def builtin_names_by_kinds() -> dict[KindPair, str]:
    """Scheme kinds -> the built-in scheme that writes them (nvfp4 also stands for its W4A16 downgrade)."""
    return dict(_builtin_names_by_kinds())


@cache  # the built-in scheme files ship with the package: read once (a search plans every candidate)
def _builtin_names_by_kinds() -> dict[KindPair, str]:
    names: dict[KindPair, str] = {}
    for name in builtin_scheme_names():
        scheme = load_scheme(name)
        names.setdefault(scheme.kinds, name)
        if scheme.needs_calibration and scheme.if_uncalibrated == "weight-only":
            names.setdefault(scheme.without_calibration().kinds, name)
    return names


def builtin_scheme_for(kinds: KindPair) -> Scheme:
    """The built-in scheme with these kinds, its thresholds included, as written (a checkpoint another tool wrote
    is verified by it); :func:`default_scheme_for` needs no built-in."""
    name = builtin_names_by_kinds().get(kinds)
    if name is None:
        raise SchemeError(
            f"no built-in scheme has weight {kinds.weight} with activations {kinds.activation or 'unquantized'}"
        )
    scheme = load_scheme(name)
    return scheme if scheme.kinds == kinds else scheme.without_calibration()


def default_scheme_for(kinds: KindPair) -> Scheme:
    """A scheme made of these registered kinds with default thresholds, for reading a config's layout (any kinds,
    built-in scheme or not)."""
    weight = _tensor_quant(WEIGHT_KINDS[kinds.weight], dynamic=False)
    activation = None if kinds.activation is None else _tensor_quant(ACTIVATION_KINDS[kinds.activation])
    return Scheme(f"{kinds.weight}/{kinds.activation or 'weight-only'}", "", weight, activation, "(kinds)")


def _check_keys(where: str, table: Any, allowed: set[str], required: set[str]) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise SchemeError(f"{where} must be a table")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise SchemeError(f"{where}: unknown key {unknown[0]!r}", hint=f"allowed: {', '.join(sorted(allowed))}")
    missing = sorted(required - set(table))
    if missing:
        raise SchemeError(
            f"{where}: missing key {missing[0]!r}",
            hint="add it; `eaglequant schemes --show fp8-per-channel` prints a complete scheme file to copy",
        )
    return table


def _describe(kinds: list[TensorKind]) -> str:
    return "; ".join(kind.describe() for kind in kinds)


def _block_size(where: str, value: Any) -> BlockSize:
    """A scheme file's ``block_size``: an integer, or [rows, columns] for a 2-D block."""
    if isinstance(value, list) and len(value) == 2 and all(type(v) is int for v in value):
        return (value[0], value[1])
    if type(value) is int:
        return int(value)
    raise SchemeError(f"{where}: block_size must be an integer or [rows, columns]")


def _match_kind(where: str, table: dict[str, Any], kinds: list[TensorKind]) -> TensorKind:
    """The one registered kind this table describes; optional keys default to that kind's values."""
    candidates = [k for k in kinds if k.dtype == table["dtype"] and k.granularity == table["granularity"]]
    if not candidates:
        raise SchemeError(
            f"{where}: dtype {table['dtype']!r} with granularity {table['granularity']!r} is not supported",
            hint=f"supported: {_describe(kinds)}",
        )
    for key in ("block_size", "scale_dtype", "global_scale"):
        if key in table:
            value = _block_size(where, table[key]) if key == "block_size" else table[key]
            candidates = [k for k in candidates if getattr(k, key) == value]
            if not candidates:
                raise SchemeError(
                    f"{where}: {key} = {table[key]!r} does not fit {table['dtype']} / {table['granularity']}",
                    hint=f"supported: {_describe(kinds)}",
                )
    if len(candidates) > 1:
        raise SchemeError(f"{where}: ambiguous; set block_size and scale_dtype", hint=_describe(candidates))
    return candidates[0]


def _tensor_quant(kind: TensorKind, dynamic: bool = True) -> TensorQuant:
    return TensorQuant(kind, dynamic)


def parse_scheme(data: dict[str, Any], source: str) -> Scheme:
    top = _check_keys(source, data, _TOP_KEYS, {"name", "weight"})
    if not isinstance(top["name"], str) or not top["name"]:
        raise SchemeError(f"{source}: name must be a non-empty string")
    if not isinstance(top.get("summary", ""), str):
        raise SchemeError(f"{source}: summary must be a string")
    w = _check_keys(f"{source} [weight]", top["weight"], _WEIGHT_KEYS, {"dtype", "granularity"})
    weight = _tensor_quant(_match_kind(f"{source} [weight]", w, list(WEIGHT_KINDS.values())), dynamic=False)
    activation = None
    if_uncalibrated = "refuse"
    if "activation" in top:
        where = f"{source} [activation]"
        a = _check_keys(where, top["activation"], _ACTIVATION_KEYS, {"dtype", "granularity", "dynamic"})
        kind = _match_kind(where, a, list(ACTIVATION_KINDS.values()))
        if not isinstance(a["dynamic"], bool):
            raise SchemeError(f"{where}: dynamic must be true or false")
        if not a["dynamic"]:
            raise SchemeError(
                f"{where}: static activation scales are only supported as the NVFP4 global scale",
                hint="set dynamic = true (NVFP4's calibrated global scale is `global_scale = true`)",
            )
        pairings = WEIGHT_KINDS[weight.kind.name].activations
        if kind.name not in pairings:
            raise SchemeError(
                f"{source}: {weight.kind.name} weights do not pair with {kind.name} activations in any engine kernel",
                hint=f"use {', '.join(sorted(pairings))} activations, or drop [activation]",
            )
        if "if_uncalibrated" in a:
            if not kind.global_scale:
                raise SchemeError(
                    f"{where}: if_uncalibrated applies only to activations with a calibrated global_scale"
                )
            if a["if_uncalibrated"] not in UNCALIBRATED_CHOICES:
                raise SchemeError(
                    f"{where}: if_uncalibrated must be one of {', '.join(UNCALIBRATED_CHOICES)}",
                )
            if_uncalibrated = a["if_uncalibrated"]
        activation = _tensor_quant(kind, dynamic=True)
    verify = _verify_thresholds(f"{source} [verify]", top.get("verify", {}))
    return Scheme(top["name"], str(top.get("summary", "")), weight, activation, source, if_uncalibrated, verify)


def _verify_thresholds(where: str, table: Any) -> VerifyThresholds:
    values = _check_keys(where, table, _VERIFY_KEYS, set())
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SchemeError(f"{where}: {key} must be a number")
    return VerifyThresholds(**{k: float(v) for k, v in values.items()})


def scheme_to_toml(scheme: Scheme) -> str:
    """The canonical TOML text of a scheme (every key explicit); parses back to an equal scheme."""
    lines = [f"name = {_toml_value(scheme.name)}", f"summary = {_toml_value(scheme.summary)}"]
    tables: list[tuple[str, TensorQuant]] = [("weight", scheme.weight)]
    if scheme.activation is not None:
        tables.append(("activation", scheme.activation))
    for title, quant in tables:
        lines += ["", f"[{title}]"]
        lines.append(f"dtype = {_toml_value(quant.kind.dtype)}")
        lines.append(f"granularity = {_toml_value(quant.kind.granularity)}")
        if quant.kind.block_size is not None:
            lines.append(f"block_size = {_toml_value(quant.kind.block_size)}")
        lines.append(f"scale_dtype = {_toml_value(quant.kind.scale_dtype)}")
        lines.append(f"global_scale = {_toml_value(quant.kind.global_scale)}")
        if title == "activation":
            lines.append(f"dynamic = {_toml_value(quant.dynamic)}")
            if quant.kind.global_scale:
                lines.append(f"if_uncalibrated = {_toml_value(scheme.if_uncalibrated)}")
    lines += ["", "[verify]"]
    lines += [f"{key} = {value!r}" for key, value in scheme.verify.__dict__.items()]
    return "\n".join(lines) + "\n"


def _toml_value(value: object) -> str:
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid TOML basic string
