"""What a load probe answers, read into values as it comes back from the engine's interpreter.

A probe writes one JSON file (the path it is given after its jobs file; its stdout is the engine's log, never the
answer, since native code may write there). :func:`read_probe_run` reads that file into a :class:`ProbeRun`: the
engine's release and patches, what the machine does to its kernels, and per checkpoint whether it loaded and, per
module, the quant method the engine chose and what each parameter took. A key of the wrong type is named in one
line (:class:`ProbeAnswerError`); keys a probe leaves out where they do not apply read as their empty value.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglequant.common.errors import EagleQuantError
from eaglequant.common.json_fields import JsonObject


class ProbeAnswerError(EagleQuantError):
    """A probe's answer file is not what the probe writes (a probe from another eaglequant, a truncated file)."""


@dataclass(frozen=True)
class ParamLoad:
    """One parameter of a module: the checkpoint tensors it took, and whether its loaded values equal the file's."""

    name: str
    sources: tuple[str, ...]
    equal: bool
    detail: str | None = None


@dataclass(frozen=True)
class ModuleAnswer:
    """One module as the engine built and loaded it."""

    name: str  # the engine's runtime name
    quant_method: str | None
    quantized: bool
    params: tuple[ParamLoad, ...] = ()
    gemm_relative_error: float | None = None  # the engine's own GEMM against the source's, where it ran
    shared_from_target: bool = False  # the speculative worker replaces it with the target's


@dataclass(frozen=True)
class CheckpointAnswer:
    """One checkpoint (one job): whether the engine loaded it, its modules, and the tensors no parameter took."""

    checkpoint: Path
    ok: bool
    error: str | None = None
    modules: tuple[ModuleAnswer, ...] = ()
    unconsumed: tuple[str, ...] = ()
    postprocess: str | None = None  # why the engine's post-load processing did not run here


@dataclass(frozen=True)
class ProbeRun:
    """One probe process: the engine's release, the patches it applied, and one answer per job, in order."""

    engine: str
    version: str
    patches: tuple[str, ...]
    results: tuple[CheckpointAnswer, ...]
    int8_gemm_relative_error: float | None = None  # this machine's INT8 GEMM against exact integer arithmetic


def read_probe_run(data: Any, where: str, engine: str) -> ProbeRun:
    """The probe's answer file ``where`` (already parsed as JSON) as values."""
    hint = "the probe and this eaglequant must come from the same install; rerun the command"
    answer = JsonObject(data, where, ProbeAnswerError, hint)
    platform = _optional(answer, "platform", JsonObject.child)
    return ProbeRun(
        engine,
        answer.text("version"),
        answer.texts("patches"),
        tuple(_checkpoint(result) for result in answer.children("results")),
        platform and _optional(platform, "int8_gemm_rel_err", _float),
    )


def _checkpoint(result: JsonObject) -> CheckpointAnswer:
    return CheckpointAnswer(
        Path(result.text("checkpoint")),
        result.boolean("ok"),
        _optional(result, "error", JsonObject.optional_text),
        tuple(_module(module) for module in _optional(result, "modules", JsonObject.children) or ()),
        _optional(result, "unconsumed", JsonObject.texts) or (),
        _optional(result, "postprocess", JsonObject.optional_text),
    )


def _module(module: JsonObject) -> ModuleAnswer:
    gemm = _optional(module, "gemm", JsonObject.child)
    return ModuleAnswer(
        module.text("name"),
        _optional(module, "quant_method", JsonObject.optional_text),
        module.boolean("quantized"),
        tuple(_param(param) for param in _optional(module, "params", JsonObject.children) or ()),
        gemm and _optional(gemm, "rel_err", _float),
        bool(_optional(module, "shared_from_target", JsonObject.boolean)),
    )


def _param(param: JsonObject) -> ParamLoad:
    return ParamLoad(
        param.text("name"),
        _optional(param, "sources", JsonObject.texts) or (),
        param.boolean("equal"),
        _optional(param, "detail", JsonObject.optional_text),
    )


def _optional(obj: JsonObject, name: str, read: Any) -> Any:
    """``read(obj, name)`` where the key is there and not null, else None."""
    return read(obj, name) if obj.data.get(name) is not None else None


def _float(obj: JsonObject, name: str) -> float:
    return float(obj.number(name))
