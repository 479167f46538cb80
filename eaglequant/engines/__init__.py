"""Serving engines, registered by name. Add an engine by adding one module and one entry here."""

from __future__ import annotations

from eaglequant.engines.base import Engine, RuntimeModule
from eaglequant.engines.sglang import SglangEngine
from eaglequant.engines.trtllm import TrtllmEngine, TrtllmMainEngine
from eaglequant.engines.vllm import VllmEngine
from eaglequant.errors import InputError

ENGINES: dict[str, Engine] = {
    engine.name: engine for engine in (VllmEngine(), TrtllmEngine(), SglangEngine(), TrtllmMainEngine())
}


def get_engine(name: str) -> Engine:
    try:
        return ENGINES[name]
    except KeyError:
        raise InputError(f"unknown engine {name!r}", hint=f"choose one of: {', '.join(ENGINES)}") from None


__all__ = ["ENGINES", "Engine", "RuntimeModule", "get_engine"]
