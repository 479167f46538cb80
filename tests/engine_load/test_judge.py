"""``judge`` on its own: a probe's report of an engine's load held against the plan, each finding named by its code
and about the module, parameter or tensor it concerns (no engine needed: the report is written here)."""

from __future__ import annotations

from typing import Any

from eaglequant.common.findings import codes
from eaglequant.engine_load import Expectation, judge
from eaglequant.engine_load.probe_report import read_probe_run

PLANNED = {"model.layers.1.self_attn.qkv_proj": True, "model.fc": False}


def _param(name: str, sources: list[str], equal: bool, detail: str | None = None) -> dict[str, Any]:
    return {"name": name, "sources": sources, "equal": equal, "detail": detail}


def _module(name: str, quantized: bool, params: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    method = "Fp8LinearMethod" if quantized else "UnquantizedLinearMethod"
    return {"name": name, "quant_method": method, "quantized": quantized, "params": params, **extra}


def _judged(modules: list[dict[str, Any]], loads: bool = True, **result: Any) -> Any:
    report = {"checkpoint": "out/fp8", "ok": True, "error": None, "modules": modules, **result}
    expected = Expectation("vllm", 2, PLANNED, 0.05, loads, "loads", weight_only=False)
    answer = {"version": "0.32.0", "patches": [], "results": [report]}  # as the probe writes it
    return judge(read_probe_run(answer, "answer.json", "vllm"), 0, expected)


def test_a_load_as_planned_has_no_findings() -> None:
    check = _judged(
        [
            _module(
                "model.layers.1.self_attn.qkv_proj",
                True,
                [_param("weight", ["a.weight"], True)],
                gemm={"rel_err": 0.01},
            ),
            _module("model.fc", False, [_param("weight", ["fc.weight"], True)]),
        ]
    )
    assert check.ok and check.problems == [] and check.notes == []


def test_each_departure_from_the_plan_is_a_finding_about_its_module_parameter_or_tensor() -> None:
    never_loaded = _param("weight_scale", [], False, "never loaded: no checkpoint tensor reached this parameter")
    check = _judged(
        [
            _module(
                "model.layers.1.self_attn.qkv_proj",
                True,
                [_param("weight", ["a.weight"], False, "3 values differ"), never_loaded],
                gemm={"rel_err": 0.2},
            ),
            _module("model.fc", True, []),
            _module("model.embed_tokens", True, []),
        ],
        unconsumed=["fc.weight", "t2d"],
    )
    assert [(p.code, p.subject) for p in check.problems] == [
        ("value-differs", "model.layers.1.self_attn.qkv_proj.weight"),
        ("never-loaded", "model.layers.1.self_attn.qkv_proj.weight_scale"),
        ("gemm-error-over-bound", "model.layers.1.self_attn.qkv_proj"),
        ("not-as-planned", "model.fc"),
        ("quantized-unplanned", "model.embed_tokens"),
        ("unconsumed", "fc.weight"),  # t2d is skipped by the engine on purpose
    ]
    qkv = check.modules[0]
    assert codes(qkv.unequal) == ["value-differs", "never-loaded"]


def test_a_failed_load_a_missing_module_and_a_load_the_matrix_refuses_are_findings() -> None:
    failed = _judged([], ok=False, error="KeyError: 'x'")
    assert codes(failed.problems) == ["cannot-load"] and not failed.ok
    surprising = _judged([_module("model.fc", False, [])], loads=False)
    assert [(p.code, p.subject) for p in surprising.problems] == [
        ("no-such-module", "model.layers.1.self_attn.qkv_proj"),
        ("loads-against-matrix", ""),
    ]


def test_what_the_cpu_could_not_run_is_a_note() -> None:
    check = _judged(
        [_module("model.embed_tokens", False, [], shared_from_target=True)], postprocess="a CUDA-only repack"
    )
    assert [(n.code, n.subject) for n in check.notes] == [
        ("postprocess-not-run", ""),
        ("shared-from-target", "model.embed_tokens"),
    ]


def test_a_probe_answer_of_the_wrong_shape_is_named_by_its_key() -> None:
    """Issue 54: the probes answer in one typed transport; a wrong value is one line naming its key."""
    import pytest

    from eaglequant.engine_load.probe_report import ProbeAnswerError

    module = _module("model.fc", False, [_param("weight", ["fc.weight"], "yes")])  # type: ignore[arg-type]
    answer = {"version": "0.32.0", "patches": [], "results": [{"checkpoint": "x", "ok": True, "modules": [module]}]}
    with pytest.raises(ProbeAnswerError, match=r"'results\[0\]\.modules\[0\]\.params\[0\]\.equal' must be true"):
        read_probe_run(answer, "answer.json", "vllm")
    run = read_probe_run({**answer, "platform": {"int8_gemm_rel_err": 0.2}, "results": []}, "answer.json", "vllm")
    assert run.int8_gemm_relative_error == 0.2 and run.results == ()
