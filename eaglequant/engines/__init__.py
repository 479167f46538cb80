"""Serving engines, registered by name. Add an engine by adding one module and one entry here."""

from __future__ import annotations

from eaglequant.common.errors import InputError
from eaglequant.engines.base import Engine, RuntimeModule
from eaglequant.engines.sglang import SglangEngine
from eaglequant.engines.trtllm import TrtllmEngine
from eaglequant.engines.trtllm_main import TrtllmMainEngine
from eaglequant.engines.vllm import VllmEngine

ENGINES: dict[str, Engine] = {
    engine.name: engine for engine in (VllmEngine(), TrtllmEngine(), SglangEngine(), TrtllmMainEngine())
}


# Every engine, wherever engines are chosen (convert, inspect, explain, verify, a batch job's engines).
ALL_ENGINES = "all"


def get_engine(name: str) -> Engine:
    try:
        return ENGINES[name]
    except KeyError:
        known = ", ".join(ENGINES)
        raise InputError(f"unknown engine {name!r}", hint=f"choose one of: {known}, or {ALL_ENGINES}") from None


__all__ = ["ALL_ENGINES", "ENGINES", "Engine", "RuntimeModule", "get_engine"]
