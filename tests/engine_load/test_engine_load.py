"""The engines' own loaders on eaglequant's outputs: vLLM 0.32.0 and SGLang 0.5.23, on CPU.

For every fixture layout and every (scheme, format) cell of the support matrix, the fixture is converted for
the engine (or, where the matrix says the engine cannot load the cell, for vLLM) and loaded by the engine's
own code in one probe process per engine (``eaglequant.engine_load``). A cell that loads must load with the
planned modules quantized, every tensor consumed and every value equal to the file; a cell that does not must
fail there too. Negative controls (configs that engines misread) must fail, and ``explain`` must agree with
the engine on every checkpoint: it never says ok where the engine's own loader fails.

The engines live in their own virtual environments (their pins conflict with llm-compressor's and with each
other's): ``scripts/setup.sh --test`` makes ``.venv-vllm`` and ``.venv-sglang``; ``EAGLEQUANT_VLLM_PYTHON`` /
``EAGLEQUANT_SGLANG_PYTHON`` point elsewhere. In CI a missing engine fails the suite rather than skipping it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

import eaglequant
from eaglequant import convert, engine_load, explain, inspect, load_checks
from eaglequant.common.errors import EXIT_CHECK_FAILED
from eaglequant.engine_load import PROBES, LoadCheck
from eaglequant.engines import ENGINES
from eaglequant.engines.support import MATRIX, support
from eaglequant.schemes.model import builtin_scheme_names, load_scheme
from tests.conftest import (
    CALIBRATED_FIXTURES,
    ENGINE_PATCHES,
    FIXTURE_NAMES,
    FIXTURES,
    ROOT,
    TARGET_LAYERS,
    engine_builds,
    run_cli,
    run_cli_subprocess,
    stores_something,
    vendor_required,
    write_calibration,
)

W4A4_NVFP4 = ("nvfp4", "nvfp4")


def _engine_loads_head(engine: str, fixture: str) -> bool:
    return engine_builds(engine, inspect(FIXTURES / fixture).head)


def _attention(fixture: str) -> str:
    config = json.loads((FIXTURES / fixture / "config.json").read_text())
    return "mla" if "kv_lora_rank" in json.dumps(config) else "mha"


def _scheme_name(kinds: tuple[str, str | None]) -> str:
    """The built-in scheme whose kinds (calibrated or not) are ``kinds``."""
    for name in builtin_scheme_names():
        scheme = load_scheme(name)
        if kinds in (scheme.kinds, scheme.without_calibration().kinds):
            return name
    raise AssertionError(f"no built-in scheme for {kinds}")


@dataclass(frozen=True)
class LoadCase:
    name: str
    fixture: str
    scheme: str
    format: str
    convert_for: tuple[str, ...]  # the engines the conversion targets
    loads: bool  # the engine must load it as planned
    calibrated: bool = False
    edit: str | None = None  # a negative control's edit of the written config


def matrix_cases(engine: str) -> list[LoadCase]:
    cases = []
    for kinds, fmt in MATRIX:
        scheme = _scheme_name(kinds)
        calibrated = kinds == W4A4_NVFP4
        for fixture in FIXTURE_NAMES:
            if calibrated and fixture not in CALIBRATED_FIXTURES:
                continue
            if not stores_something(fixture, scheme, fmt):
                continue
            cell = support(kinds, fmt, ENGINES[engine], _attention(fixture))
            assert cell is not None
            loads = cell.loads and _engine_loads_head(engine, fixture)
            convert_for = (engine,) if loads else ("vllm",)
            label = f"{fixture}-{scheme}{'-calibrated' if calibrated else ''}-{fmt}"
            cases.append(LoadCase(label, fixture, scheme, fmt, convert_for, loads, calibrated))
    return cases


# Configs the engine misreads or cannot load, each seen by running the engine's own loader.
CONTROLS: dict[str, list[LoadCase]] = {
    "vllm": [
        # amd-quark's own exclude list: vLLM quantizes the BF16 fc and leaves its scale uninitialised.
        LoadCase("quark-own-exclude", "specforge-llama", "fp8-per-channel", "quark", ("vllm",), False, edit="quark"),
    ],
    "sglang": [
        # SGLang's MLA post_load_weights takes a float kv_b_proj only.
        LoadCase("mla-fp8-for-vllm", "torchspec-mla", "fp8-per-channel", "quark", ("vllm",), False),
        # Its fused q_a + kv_a loader cannot take two NVFP4 global scales; excluding kv_b_proj is not enough.
        LoadCase("mla-nvfp4-ct-for-vllm", "torchspec-mla", "nvfp4", "compressed-tensors", ("vllm",), False),
        LoadCase(
            "mla-nvfp4-ct-kv-b-kept", "torchspec-mla", "nvfp4", "compressed-tensors", ("vllm",), False, edit="kv_b"
        ),
        # Its ModelOpt config claims the ParallelLMHead: without lm_head in the exclude list, the BF16 weight fails.
        LoadCase(
            "modelopt-lm-head-not-excluded", "specforge-llama", "nvfp4", "modelopt", ("sglang",), False, edit="lm_head"
        ),
    ],
}


def engine_python(engine: str) -> Path:
    probe = PROBES[engine]
    path = Path(os.environ.get(probe.env_var) or ROOT / f".venv-{engine}" / "bin" / "python")
    if not path.exists():
        message = f"{probe.title} is not installed at {path} (scripts/setup.sh --test makes it)"
        if vendor_required():
            pytest.fail(message)
        pytest.skip(message)
    return path


def _edit(dst: Path, edit: str) -> None:
    config = json.loads((dst / "config.json").read_text())
    quant = config["quantization_config"]
    if edit == "quark":
        quant["exclude"] = ["fc", "lm_head"]
    elif edit == "lm_head":
        quant["ignore"] = [p for p in quant["ignore"] if p != "lm_head"]
        hf = json.loads((dst / "hf_quant_config.json").read_text())
        hf["quantization"]["exclude_modules"] = quant["ignore"]
        (dst / "hf_quant_config.json").write_text(json.dumps(hf))
    (dst / "config.json").write_text(json.dumps(config))


def _write(case: LoadCase, out: Path) -> Path:
    dst = out / case.name
    calib = write_calibration(case.fixture, out / f"{case.name}.calib.safetensors") if case.calibrated else None
    exclude = ["midlayer.self_attn.kv_b_proj"] if case.edit == "kv_b" else []
    convert(
        FIXTURES / case.fixture,
        dst,
        scheme=case.scheme,
        format=case.format,
        engines=list(case.convert_for),
        exclude=exclude,
        calib=calib,
        target_layers=TARGET_LAYERS,
    )
    if case.edit in ("quark", "lm_head"):
        (dst / "eaglequant_report.json").unlink()  # no longer what eaglequant wrote
        _edit(dst, case.edit)
    return dst


def _load_all(engine: str, out: Path) -> dict[str, tuple[LoadCase, Path, LoadCheck]]:
    python = engine_python(engine)
    cases = matrix_cases(engine) + CONTROLS[engine]
    dsts = [_write(case, out) for case in cases]
    checks = load_checks(dsts, engine=engine, sources=[FIXTURES / c.fixture for c in cases], engine_python=python)
    ENGINE_PATCHES[f"{checks[0].engine} {checks[0].version}"] = list(checks[0].patches)
    return {case.name: (case, dst, check) for case, dst, check in zip(cases, dsts, checks, strict=True)}


@pytest.fixture(scope="module")
def vllm_loads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[LoadCase, Path, LoadCheck]]:
    return _load_all("vllm", tmp_path_factory.mktemp("vllm-load"))


@pytest.fixture(scope="module")
def sglang_loads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[LoadCase, Path, LoadCheck]]:
    return _load_all("sglang", tmp_path_factory.mktemp("sglang-load"))


LOADS = {"vllm": "vllm_loads", "sglang": "sglang_loads"}
ALL_CASES = [(engine, case.name) for engine in PROBES for case in matrix_cases(engine) + CONTROLS[engine]]


def _why(check: LoadCheck) -> str:
    return "; ".join(check.problems[:6]) + (f" (+{len(check.problems) - 6})" if len(check.problems) > 6 else "")


@pytest.mark.engine
@pytest.mark.parametrize(("engine", "name"), ALL_CASES, ids=[f"{e}-{n}" for e, n in ALL_CASES])
def test_the_engine_loads_what_the_matrix_says(engine: str, name: str, request: pytest.FixtureRequest) -> None:
    case, dst, check = request.getfixturevalue(LOADS[engine])[name]
    if case.loads:
        assert check.ok, _why(check)
        assert check.loaded and not check.unconsumed
        assert any(m.quantized for m in check.modules), "nothing quantized"
        assert all(not m.unequal for m in check.modules)
    else:
        assert not check.ok, f"{engine} loaded {name} as planned although eaglequant says it cannot"
    # explain never says ok where the engine's own loader fails (and finds the same problems where it loads)
    explained = explain(dst, engines=[engine], target_layers=TARGET_LAYERS)
    assert explained.ok == check.ok, (explained.all_problems, check.problems)


@pytest.mark.engine
@pytest.mark.parametrize("engine", list(PROBES))
def test_every_layout_and_kernel_ran(engine: str, request: pytest.FixtureRequest) -> None:
    """Each fixture layout loaded in at least one cell, and the engine's own GEMM ran on CPU somewhere."""
    loads = request.getfixturevalue(LOADS[engine])
    loaded = {case.fixture for case, _, check in loads.values() if case.loads and check.ok}
    assert loaded == {fixture for fixture in FIXTURE_NAMES if _engine_loads_head(engine, fixture)}
    gemms = [m.gemm_relative_error for _, _, check in loads.values() for m in check.modules]
    assert any(error is not None for error in gemms)


def _check(loads: dict[str, tuple[LoadCase, Path, LoadCheck]], name: str) -> LoadCheck:
    return loads[name][2]


@pytest.mark.engine
def test_vllm_quantizes_fc_under_quarks_own_exclude_list(vllm_loads) -> None:
    check = _check(vllm_loads, "quark-own-exclude")
    fc = next(m for m in check.modules if m.name == "model.fc")
    assert fc.quantized and fc.planned  # as explain reads the config too
    assert any((p.code, p.subject) == ("never-loaded", "model.fc.weight_scale") for p in check.problems), check.problems


@pytest.mark.engine
@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("mla-fp8-for-vllm", "NotImplementedError"),
        ("mla-nvfp4-ct-for-vllm", "AssertionError"),
        ("mla-nvfp4-ct-kv-b-kept", "AssertionError"),
    ],
)
def test_sglang_mla_drafts_need_float_kv_b_and_fused_q_a(sglang_loads, name: str, error: str) -> None:
    check = _check(sglang_loads, name)
    assert not check.loaded and error in str(check.error)


@pytest.mark.engine
def test_sglang_modelopt_claims_lm_head(sglang_loads) -> None:
    check = _check(sglang_loads, "modelopt-lm-head-not-excluded")
    assert not check.ok
    lm_head = next((m for m in check.modules if m.name == "lm_head"), None)
    assert not check.loaded or (lm_head is not None and lm_head.quantized)


def test_controls_are_real_cases() -> None:
    """Each negative control differs from what eaglequant writes for that engine (else it tests nothing)."""
    for engine, controls in CONTROLS.items():
        for case in controls:
            assert case.edit or engine not in case.convert_for, case.name


@pytest.mark.engine
def test_verify_load_with_vllm_on_the_bundled_fixture(tmp_path: Path) -> None:
    python = engine_python("vllm")
    dst = tmp_path / "fp8"
    convert(FIXTURES / "specforge-llama", dst, scheme="fp8-per-channel", format="quark", target_layers=TARGET_LAYERS)
    result = run_cli_subprocess("verify", dst, "--load-with", "vllm", "--engine-python", python, "--json")
    assert result.returncode == 0, result.stderr
    load = json.loads(result.stdout)["engine_loads"][0]
    assert load["ok"] and load["loaded"] and load["version"] == "0.32.0" and load["patches"]
    quantized = {m["runtime_module"] for m in load["modules"] if m["quantized"]}
    layer = f"model.layers.{TARGET_LAYERS}"
    assert quantized == {f"{layer}.self_attn.qkv_proj", f"{layer}.self_attn.o_proj", f"{layer}.mlp.gate_up_proj",
                         f"{layer}.mlp.down_proj"}  # fmt: skip
    assert all(m["values_equal"] for m in load["modules"])
    assert any(m["gemm_relative_error"] is not None for m in load["modules"] if m["quantized"])
    human = run_cli_subprocess("verify", dst, "--load-with", "vllm", "--engine-python", python)
    assert human.returncode == 0 and "vLLM 0.32.0 loading" in human.stdout and "patched for CPU" in human.stdout


@pytest.mark.engine
def test_verify_load_with_fails_a_checkpoint_the_engine_misreads(vllm_loads) -> None:
    _, dst, _ = vllm_loads["quark-own-exclude"]
    result = run_cli_subprocess("verify", dst, "--load-with", "vllm", "--engine-python", engine_python("vllm"))
    assert result.returncode == EXIT_CHECK_FAILED
    assert "vllm load: model.fc.weight_scale: never loaded" in result.stdout


def test_load_with_an_engine_that_is_not_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROBES["sglang"].env_var, raising=False)
    monkeypatch.setattr(engine_load, "project_venvs", lambda engine: [tmp_path / f".venv-{engine}"])  # none there
    dst = tmp_path / "fp8"
    convert(FIXTURES / "specforge-llama", dst)
    result = run_cli("verify", dst, "--load-with", "sglang")
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1
    assert "SGLang is not installed" in lines[0] and "pip install sglang==0.5.23" in lines[0]
    assert "--engine-python" in lines[0]
    missing = run_cli("verify", dst, "--load-with", "sglang", "--engine-python", tmp_path / "nope")
    assert missing.exit_code == 2 and "not an executable Python interpreter" in missing.stderr
    assert run_cli("verify", dst, "--load-with", "trtllm").exit_code == 2  # no probe: it does not install on CPU


@pytest.mark.engine
@pytest.mark.parametrize(
    ("engine", "scheme"),
    [("vllm", "fp8-per-channel"), ("vllm", "nvfp4"), pytest.param("sglang", "nvfp4", marks=pytest.mark.slow)],
)
def test_a_quantized_lm_head_runs_quantized_in_the_engine(engine: str, scheme: str, tmp_path: Path) -> None:
    """ModelOpt configs give the ParallelLMHead a quantization method in vLLM and SGLang: ``--quantize lm_head``
    there is the engine's own quantized lm_head, every value as stored, and fewer bytes a round."""
    dst = tmp_path / "lm-head"
    result = convert(
        FIXTURES / "specforge-llama", dst, scheme=scheme, format="modelopt", quantize=["lm_head"], engines=[engine]
    )
    (check,) = load_checks([dst], engine=engine, engine_python=engine_python(engine))
    assert check.ok and check.loaded, check.problems
    lm_head = next(m for m in check.modules if m.name == "lm_head")
    assert lm_head.quantized and lm_head.planned and lm_head.values_equal and "lm_head.weight_scale" in lm_head.tensors
    (cost,) = result.report().round_costs
    part = cost.part("lm_head")
    assert part is not None and part.quantized and part.bytes_per_read < part.source_bytes_per_read


@pytest.mark.engine
@pytest.mark.parametrize(
    ("engine", "scheme", "fmt"),
    [("vllm", "fp8-per-channel", "quark"), pytest.param("sglang", "nvfp4", "modelopt", marks=pytest.mark.slow)],
)
def test_a_pruned_vocabulary_loads_in_the_engine(engine: str, scheme: str, fmt: str, tmp_path: Path) -> None:
    """The pruned head's d2t and its cut lm_head are what the engine loads (draft_vocab_size from config.json)."""
    counts = tmp_path / "counts.json"
    counts.write_text(json.dumps([(t * 37) % 512 for t in range(512)]))
    pruned = eaglequant.prune(FIXTURES / "specforge-llama", tmp_path / "pruned", size=64, counts=counts)
    dst = tmp_path / "quantized"
    quantize = ["lm_head"] if fmt == "modelopt" else []
    convert(pruned.destination, dst, scheme=scheme, format=fmt, quantize=quantize, engines=[engine])
    (check,) = load_checks([dst], engine=engine, engine_python=engine_python(engine))
    assert check.ok and check.loaded, check.problems
    lm_head = next(m for m in check.modules if m.name == "lm_head")
    assert lm_head.values_equal and lm_head.quantized == bool(quantize)
    assert not check.unconsumed or "t2d" in check.unconsumed


@pytest.mark.engine
def test_the_searched_draft_loads_in_vllm(tmp_path: Path) -> None:
    """What ``search`` writes on the bundled pair (the smallest within 0.05 of FP8 and NVFP4, lm_head included)
    loads with vLLM's own code, every module as planned."""
    from eaglequant.search.smallest import search

    pair = FIXTURES / "trained-pair"
    lines = (pair / "prompts.jsonl").read_text().splitlines()[:3]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(lines) + "\n")
    inputs = tmp_path / "inputs.safetensors"
    eaglequant.capture(pair / "target", pair / "draft", inputs, prompts=prompts, max_tokens=32)
    found = search(
        pair / "draft",
        tmp_path / "chosen",
        inputs=inputs,
        max_acceptance_drop="0.05",
        schemes=("fp8-per-channel", "nvfp4"),
    )
    assert found.chosen is not None and found.destination is not None
    (check,) = load_checks([found.destination], engine="vllm", engine_python=engine_python("vllm"))
    assert check.ok and check.loaded, check.problems
    assert all(m.planned is None or m.quantized == m.planned for m in check.modules)


@pytest.mark.engine
@pytest.mark.parametrize(
    ("decoder", "lm_head", "fc"),
    [("fp8-per-channel", "nvfp4", None), ("nvfp4", "fp8-per-channel", None), ("fp8-per-channel", "nvfp4", "nvfp4")],
)
def test_vllm_loads_lm_head_in_a_scheme_of_its_own(decoder: str, lm_head: str, fc: str | None, tmp_path: Path) -> None:
    """ModelOpt's MIXED_PRECISION: vLLM's ModelOptMixedPrecisionConfig gives each module the algorithm listed under
    its runtime name, lm_head's (and fc's) its own; every module as planned, every value as stored."""
    dst = tmp_path / "mixed"
    own = [f"lm_head={lm_head}"] + ([f"fc={fc}"] if fc else [])
    convert(
        FIXTURES / "specforge-llama",
        dst,
        scheme=decoder,
        scheme_for=own,
        format="modelopt",
        target_layers=TARGET_LAYERS,
    )
    (check,) = load_checks([dst], engine="vllm", engine_python=engine_python("vllm"))
    assert check.ok and check.loaded, check.problems
    by_name = {m.name: m for m in check.modules}
    assert by_name["lm_head"].quantized and by_name["lm_head"].values_equal
    assert all(m.quantized == m.planned for m in check.modules if m.planned is not None)
    assert "lm_head.weight_scale_2" in by_name["lm_head"].tensors if lm_head == "nvfp4" else True
    assert by_name["model.fc"].quantized == bool(fc)


@pytest.mark.engine
def test_vllm_loads_decoder_linears_in_different_kinds(tmp_path: Path) -> None:
    """The MLP in NVFP4 and attention in FP8 per-channel (``--scheme-for 'mlp.*=nvfp4'``, ModelOpt's
    MIXED_PRECISION): vLLM's ModelOptMixedPrecisionConfig resolves each module's algorithm from its runtime name and
    builds it with that algorithm's tensors (NVFP4's second-level weight_scale_2 for the MLP only); every module
    quantized as planned, every value as stored, and ``verify --load-with vllm`` passes."""
    dst = tmp_path / "mlp-nvfp4"
    convert(
        FIXTURES / "specforge-llama",
        dst,
        scheme="fp8-per-channel",
        scheme_for=["mlp.*=nvfp4"],
        format="modelopt",
        target_layers=TARGET_LAYERS,
    )
    (check,) = load_checks([dst], engine="vllm", engine_python=engine_python("vllm"))
    assert check.ok and check.loaded, check.problems
    by_name = {m.name: m for m in check.modules}
    layer = f"model.layers.{TARGET_LAYERS}"
    nvfp4 = {f"{layer}.mlp.gate_up_proj", f"{layer}.mlp.down_proj"}
    fp8 = {f"{layer}.self_attn.qkv_proj", f"{layer}.self_attn.o_proj"}
    for name in nvfp4 | fp8:
        module = by_name[name]
        assert module.quantized and module.planned and module.values_equal, (name, module)
        second_scale = any(".weight_scale_2" in t for t in module.tensors)  # "....weight_scale_2 [shard 1]"
        assert second_scale == (name in nvfp4), (name, module.quant_method, module.tensors)
    assert not by_name["model.fc"].quantized and not by_name["lm_head"].quantized
    result = run_cli_subprocess("verify", dst, "--load-with", "vllm", "--engine-python", engine_python("vllm"))
    assert result.returncode == 0, result.stdout + result.stderr


# (format, the MLP's scheme, engine, the quant method the engine builds for the MLP, for attention): FP8 per channel
# for attention and another kind for the MLP, written where each format's readers look for per-module kinds.
PER_MODULE_CASES = [
    ("quark", "mxfp4", "vllm", "QuarkOCP_MX", "QuarkW8A8Fp8"),
    ("compressed-tensors", "nvfp4", "vllm", "weight_global_scale", "weight_scale"),
    ("compressed-tensors", "nvfp4", "sglang", "CompressedTensorsW4A16Fp4", "CompressedTensorsW8A8Fp8"),
    ("compressed-tensors", "int4-w4a16", "vllm", "weight_packed", "weight_scale"),
]


@pytest.mark.engine
@pytest.mark.parametrize(("fmt", "mlp", "engine", "mlp_method", "attention_method"), PER_MODULE_CASES)
def test_engines_load_decoder_linears_in_different_kinds_from_quark_and_compressed_tensors(
    fmt: str, mlp: str, engine: str, mlp_method: str, attention_method: str, tmp_path: Path
) -> None:
    """``--scheme-for 'mlp.*=KIND'`` under Quark (``layer_quant_config``) and compressed-tensors (a further
    ``config_groups`` entry): the engine's own loader builds the MLP in its kind and attention in FP8, every value as
    stored, and ``verify --load-with`` exits 0. vLLM names compressed-tensors' schemes only as ``scheme``, so there
    the MLP is told apart by a tensor only its kind stores."""
    dst = tmp_path / f"{fmt}-{mlp}"
    convert(FIXTURES / "specforge-llama", dst, scheme="fp8-per-channel", scheme_for=[f"mlp.*={mlp}"], format=fmt,
            engines=[engine], target_layers=TARGET_LAYERS)  # fmt: skip
    result = run_cli_subprocess(
        "verify", dst, "--load-with", engine, "--engine-python", engine_python(engine), "--json"
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (load,) = json.loads(result.stdout)["engine_loads"]
    modules = {m["runtime_module"]: m for m in load["modules"]}
    mlp_names = [name for name in modules if "gate_up_proj" in name or "down_proj" in name]
    attention = [name for name in modules if "qkv_proj" in name or "o_proj" in name]
    assert len(mlp_names) == 2 and len(attention) == 2, list(modules)
    for name in mlp_names + attention:
        module = modules[name]
        assert module["quantized"] and module["planned_quantized"] and module["values_equal"], module
        said = f"{module['quant_method']} {' '.join(module['tensors'])}"
        in_mlp = name in mlp_names
        assert (mlp_method if in_mlp else attention_method) in said, (name, said)
        assert in_mlp or mlp_method not in said, (name, said)
