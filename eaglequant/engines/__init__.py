"""Serving engines, registered by name. Add an engine, or an engine release, by adding one module and one entry here.

Each release has a plain ``name`` (``vllm``), a ``release`` (``0.33.0``) and a ``key``, what ``--engine`` takes and
records store: ``NAME==RELEASE`` (``vllm==0.33.0``), or the bare name for the release eaglequant runs in its
engine-load tests (``vllm``: 0.32.0, the newest CPU build), which ``vllm==0.32.0`` names too.
"""

from __future__ import annotations

from collections.abc import Iterable

from eaglequant.common.errors import InputError
from eaglequant.engines.base import Engine, RuntimeModule
from eaglequant.engines.sglang import SglangEngine
from eaglequant.engines.trtllm import TrtllmEngine
from eaglequant.engines.trtllm_main import TrtllmMainEngine
from eaglequant.engines.vllm import VllmEngine
from eaglequant.engines.vllm_0_33 import Vllm033Engine

ENGINES: dict[str, Engine] = {
    engine.key: engine for engine in (VllmEngine(), Vllm033Engine(), TrtllmEngine(), SglangEngine(), TrtllmMainEngine())
}


# The engines whose own speculative decoding ``accept`` drives, and whose own hidden-state extraction ``capture
# --engine`` drives: a property of each registered release.
MEASURING_ENGINES = tuple(key for key, engine in ENGINES.items() if engine.measures_acceptance)
CAPTURING_ENGINES = tuple(key for key, engine in ENGINES.items() if engine.captures_hidden_states)

# Every engine, wherever engines are chosen (convert, inspect, explain, verify, a batch job's engines).
ALL_ENGINES = "all"


def expanded_engines(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` as given, or every registered engine where they include ``all`` (each name checked by
    :func:`get_engine` where it is used)."""
    given = tuple(names)
    return tuple(ENGINES) if ALL_ENGINES in given else given


def get_engine(name: str) -> Engine:
    """The release whose key is ``name``, or which ``name`` spells as ``NAME==RELEASE`` (``vllm==0.32.0``)."""
    found = next((e for e in ENGINES.values() if name in e.spellings), None)
    if found is None:
        known = ", ".join(ENGINES)
        raise InputError(f"unknown engine {name!r}", hint=f"choose one of: {known}, or {ALL_ENGINES}")
    return found


def chosen_engines(names: Iterable[str]) -> list[str] | None:
    """The keys of the engines ``names`` choose, each checked (``all`` left to the caller); None: none chosen."""
    return [get_engine(name).key for name in dict.fromkeys(names) if name != ALL_ENGINES] or None


def engine_title(name: str, release: str | None = None) -> str:
    """How every output names an engine release: ``vLLM 0.33.0`` for ``vllm==0.33.0``, ``vLLM 0.19.1`` for the
    release of ``vllm`` a measurement ran in. A name eaglequant does not know (an older report's) is shown as it is."""
    try:
        engine = get_engine(name)
    except InputError:
        return f"{name} {release}" if release else name
    return f"{engine.title} {release or engine.release}"


__all__ = [
    "ALL_ENGINES",
    "CAPTURING_ENGINES",
    "ENGINES",
    "MEASURING_ENGINES",
    "Engine",
    "RuntimeModule",
    "chosen_engines",
    "engine_title",
    "expanded_engines",
    "get_engine",
]
