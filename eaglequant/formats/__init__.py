"""Output formats, registered by name. Add a format by adding one module and one entry here."""

from __future__ import annotations

import functools
from pathlib import Path

from eaglequant.common.errors import SchemeError
from eaglequant.formats.base import Format, GroupScales, QuantizedRows, WrittenConfig
from eaglequant.formats.compressed_tensors import CompressedTensorsFormat
from eaglequant.formats.fp8 import Fp8Format
from eaglequant.formats.modelopt import ModelOptFormat
from eaglequant.formats.quark import QuarkFormat

FORMATS: dict[str, Format] = {
    fmt.name: fmt for fmt in (QuarkFormat(), ModelOptFormat(), CompressedTensorsFormat(), Fp8Format())
}


def get_format(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise SchemeError(f"unknown format {name!r}", hint=f"choose one of: {', '.join(FORMATS)}") from None


@functools.cache
def stored_cells() -> list[tuple[str, str]]:
    """Every (built-in scheme, format that stores it), as a conversion names them."""
    from eaglequant.schemes.model import builtin_scheme_names, load_scheme

    return [
        (name, fmt) for name in builtin_scheme_names() for fmt in FORMATS if FORMATS[fmt].supports(load_scheme(name))
    ]


def all_scale_params() -> frozenset[str]:
    """Every parameter name a format (or a vendor's variant of it) stores beside a quantized weight."""
    return frozenset(param for fmt in FORMATS.values() for param in fmt.scale_params)


def all_weight_params() -> frozenset[str]:
    """Every parameter name a format stores a quantized weight under."""
    return frozenset(param for fmt in FORMATS.values() for param in fmt.weight_params)


def format_for_side_files(root: Path) -> Format | None:
    """The format whose own config file (beside config.json) is in ``root``, if any."""
    return next((fmt for fmt in FORMATS.values() if any((root / n).is_file() for n in fmt.extra_file_names)), None)


def format_for_quant_method(method: object) -> Format | None:
    return next((fmt for fmt in FORMATS.values() if fmt.quant_method == method), None)


__all__ = [
    "FORMATS",
    "Format",
    "GroupScales",
    "QuantizedRows",
    "WrittenConfig",
    "all_scale_params",
    "all_weight_params",
    "format_for_quant_method",
    "format_for_side_files",
    "get_format",
    "stored_cells",
]
