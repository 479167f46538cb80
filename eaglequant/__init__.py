"""eaglequant: quantize EAGLE-3 draft heads for vLLM, TensorRT-LLM and SGLang.

The public API (``convert``, ``inspect``, ``explain``, ``verify``, ``load_checks``, ``upload``, ``accept``,
``accept_server``, ``capture``, ``prune``, ``predicted_speedup``, the options type ``ConversionOptions``;
``eaglequant.batch.jobs.run_batch``) is imported lazily so that ``import eaglequant`` and the CLI's ``--help`` stay
fast; torch is only imported by the work that needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eaglequant.common.version import __version__

if TYPE_CHECKING:
    from eaglequant.api import convert, explain, inspect, load_checks, upload, verify
    from eaglequant.api.acceptance import accept, accept_server
    from eaglequant.api.pruning import prune
    from eaglequant.api.speedup import predicted_speedup
    from eaglequant.capturing.transformers_capture import capture
    from eaglequant.conversion.options import ConversionOptions

__all__ = [
    "ConversionOptions",
    "__version__",
    "accept",
    "accept_server",
    "capture",
    "convert",
    "explain",
    "inspect",
    "load_checks",
    "predicted_speedup",
    "prune",
    "upload",
    "verify",
]


def __getattr__(name: str) -> Any:
    if name == "ConversionOptions":
        from eaglequant.conversion.options import ConversionOptions

        return ConversionOptions
    if name in ("convert", "explain", "inspect", "load_checks", "upload", "verify"):
        from eaglequant import api

        return getattr(api, name)
    if name in ("accept", "accept_server"):
        from eaglequant.api import acceptance

        return getattr(acceptance, name)
    if name == "predicted_speedup":
        from eaglequant.api.speedup import predicted_speedup

        return predicted_speedup
    if name == "prune":
        from eaglequant.api.pruning import prune

        return prune
    if name == "capture":
        from eaglequant.capturing.transformers_capture import capture

        return capture
    raise AttributeError(f"module 'eaglequant' has no attribute {name!r}")
