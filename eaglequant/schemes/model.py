"""Declarative quantization schemes, loaded from TOML and validated.

A scheme says *what* is stored (dtypes, granularity, static or dynamic activations); a format says
*how* it is named and which vendor's rounding it follows. Built-in schemes live in the top-level
``schemes/`` directory (shipped inside the wheel as ``eaglequant/_builtin_schemes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib

from eaglequant.errors import SchemeError

WEIGHT_DTYPES = {"fp8_e4m3"}
WEIGHT_GRANULARITIES = {"fp8_e4m3": {"channel"}}
ACTIVATION_GRANULARITIES = {"token", "tensor"}

_TOP_KEYS = {"name", "summary", "weight", "activation"}
_WEIGHT_KEYS = {"dtype", "granularity"}
_ACTIVATION_KEYS = {"dtype", "granularity", "dynamic"}


@dataclass(frozen=True)
class TensorQuant:
    dtype: str
    granularity: str
    dynamic: bool = False


@dataclass(frozen=True)
class Scheme:
    name: str
    summary: str
    weight: TensorQuant
    activation: TensorQuant | None  # None: weight-only
    source: str  # file it was loaded from

    @property
    def weight_only(self) -> bool:
        return self.activation is None


def builtin_dir() -> Path:
    installed = Path(__file__).resolve().parent.parent / "_builtin_schemes"
    return installed if installed.is_dir() else Path(__file__).resolve().parents[2] / "schemes"


def builtin_scheme_names() -> list[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.toml"))


def load_scheme(name_or_path: str) -> Scheme:
    """Load a built-in scheme by name, or a scheme file by path."""
    path = Path(name_or_path)
    if not name_or_path.endswith(".toml"):
        path = builtin_dir() / f"{name_or_path}.toml"
        if not path.is_file():
            known = ", ".join(builtin_scheme_names())
            raise SchemeError(f"unknown scheme {name_or_path!r}", hint=f"choose one of: {known}, or a .toml path")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise SchemeError(f"{path}: scheme file not found") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SchemeError(f"{path}: not valid TOML ({exc})") from exc
    return parse_scheme(data, str(path))


def _check_keys(where: str, table: Any, allowed: set[str], required: set[str]) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise SchemeError(f"{where} must be a table")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise SchemeError(f"{where}: unknown key {unknown[0]!r}", hint=f"allowed: {', '.join(sorted(allowed))}")
    missing = sorted(required - set(table))
    if missing:
        raise SchemeError(f"{where}: missing key {missing[0]!r}")
    return table


def parse_scheme(data: dict[str, Any], source: str) -> Scheme:
    top = _check_keys(source, data, _TOP_KEYS, {"name", "weight"})
    w = _check_keys(f"{source} [weight]", top["weight"], _WEIGHT_KEYS, _WEIGHT_KEYS)
    if w["dtype"] not in WEIGHT_DTYPES:
        raise SchemeError(
            f"{source}: weight dtype {w['dtype']!r} is not supported",
            hint=f"supported: {', '.join(sorted(WEIGHT_DTYPES))}",
        )
    if w["granularity"] not in WEIGHT_GRANULARITIES[w["dtype"]]:
        raise SchemeError(
            f"{source}: {w['dtype']} weights cannot use granularity {w['granularity']!r}",
            hint=f"use {', '.join(sorted(WEIGHT_GRANULARITIES[w['dtype']]))}",
        )
    activation = None
    if "activation" in top:
        a = _check_keys(f"{source} [activation]", top["activation"], _ACTIVATION_KEYS, _ACTIVATION_KEYS)
        if a["granularity"] not in ACTIVATION_GRANULARITIES:
            raise SchemeError(f"{source}: activation granularity {a['granularity']!r} is not supported")
        if not isinstance(a["dynamic"], bool):
            raise SchemeError(f"{source}: activation.dynamic must be true or false")
        if a["granularity"] == "token" and not a["dynamic"]:
            raise SchemeError(f"{source}: per-token activation scales only exist at run time; set dynamic = true")
        if not a["dynamic"]:
            raise SchemeError(
                f"{source}: static activation scales need calibration, which this version lacks",
                hint="set dynamic = true",
            )
        activation = TensorQuant(a["dtype"], a["granularity"], a["dynamic"])
    if not isinstance(top["name"], str) or not top["name"]:
        raise SchemeError(f"{source}: name must be a non-empty string")
    return Scheme(
        top["name"], str(top.get("summary", "")), TensorQuant(w["dtype"], w["granularity"]), activation, source
    )
