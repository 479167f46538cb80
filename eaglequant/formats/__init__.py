"""Output formats, registered by name. Add a format by adding one module and one entry here."""

from __future__ import annotations

from eaglequant.errors import SchemeError
from eaglequant.formats.base import Format, GroupScales, QuantizedRows, WrittenConfig
from eaglequant.formats.compressed_tensors import CompressedTensorsFormat
from eaglequant.formats.modelopt import ModelOptFormat
from eaglequant.formats.quark import QuarkFormat

FORMATS: dict[str, Format] = {fmt.name: fmt for fmt in (QuarkFormat(), ModelOptFormat(), CompressedTensorsFormat())}


def get_format(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise SchemeError(f"unknown format {name!r}", hint=f"choose one of: {', '.join(FORMATS)}") from None


def format_for_quant_method(method: object) -> Format | None:
    return next((fmt for fmt in FORMATS.values() if fmt.quant_method == method), None)


__all__ = [
    "FORMATS",
    "Format",
    "GroupScales",
    "QuantizedRows",
    "WrittenConfig",
    "format_for_quant_method",
    "get_format",
]
