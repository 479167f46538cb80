"""``explain``: what each engine will do with a written checkpoint, and the mismatches it must catch."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from eaglequant import convert, explain, inspect
from eaglequant.common.errors import EXIT_CHECK_FAILED, InputError
from eaglequant.common.findings import codes
from eaglequant.engines import ENGINES
from eaglequant.engines.support import support
from eaglequant.formats import FORMATS
from tests.conftest import FIXTURE_NAMES, FIXTURES, engine_builds, run_cli

# A format every engine loads for each head, and the engines that load it: each engine's default release (vLLM
# 0.33.0 reads what 0.32.0 does: test_a_conversion_for_vllm_0_32_explains_clean_for_0_33).
ALL_ENGINES = [name for name in ENGINES if "==" not in name]


def _engines_loading(kinds: tuple[str, str | None], fmt: str, fixture: str) -> list[str]:
    head = inspect(FIXTURES / fixture).head
    return [
        e
        for e in ALL_ENGINES
        if (cell := support(kinds, fmt, ENGINES[e], head.attention)) is not None
        and cell.loads
        and engine_builds(e, head)
    ]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, str], Path]:
    """Every fixture, converted for every engine that loads the (scheme, format)."""
    out = tmp_path_factory.mktemp("explain")
    done = {}
    for fixture in FIXTURE_NAMES:
        for scheme, fmt in (("fp8-per-channel", "quark"), ("nvfp4", "modelopt"), ("fp8-per-channel", "modelopt")):
            kinds = ("fp8-channel", "fp8-token") if scheme == "fp8-per-channel" else ("nvfp4", None)
            engines = _engines_loading(kinds, fmt, fixture)
            dst = out / f"{fixture}-{fmt}-{scheme}"
            result = convert(FIXTURES / fixture, dst, scheme=scheme, format=fmt, engines=engines)
            QUANTIZED[dst] = {lin.checkpoint_module for lin in result.plan.quantized}
            label = f"{fmt}:{scheme}" if (scheme, fmt) == ("fp8-per-channel", "modelopt") else fmt
            done[(fixture, label, ",".join(engines))] = dst
    return done


QUANTIZED: dict[Path, set[str]] = {}  # conversion -> the checkpoint modules it quantized


def test_a_conversion_for_vllm_0_32_explains_clean_for_0_33(written) -> None:
    """0.33.0 loads a draft with 0.32.0's files: what is written for one reads the same in the other."""
    made_for_vllm = [dst for (_, _, engines), dst in written.items() if "vllm" in engines.split(",")]
    assert len(made_for_vllm) >= len(FIXTURE_NAMES)
    for dst in made_for_vllm:
        old, new = (explain(dst, engines=[engine]) for engine in ("vllm", "vllm==0.33.0"))
        assert new.ok, (dst.name, new.all_problems)
        assert [m.to_json() for m in old.engines[0].modules] == [m.to_json() for m in new.engines[0].modules]


def test_every_conversion_explains_clean_for_the_engines_it_targets(written) -> None:
    """Every fixture layout x every engine: the engine applies the scheme to exactly what was quantized."""
    seen_engines = set()
    for (fixture, fmt, engines), dst in written.items():
        explanation = explain(dst, engines=engines.split(","))
        assert explanation.ok, (fixture, fmt, explanation.all_problems)
        for reading in explanation.engines:
            seen_engines.add(reading.engine)
            applied = {member for module in reading.modules if module.scheme for member in module.members}
            assert applied == QUANTIZED[dst], (fixture, fmt, reading.engine)
            for module in reading.modules:
                assert all(t.found == "ok" for t in module.expects)
    assert seen_engines == set(ALL_ENGINES)


def test_explain_lists_rule_scheme_and_tensors(written) -> None:
    dst = written[("torchspec-mla", "modelopt", "vllm,trtllm-main")]
    data = explain(dst, engines=["all"]).to_json()
    assert data["ok"] and data["format"] == "modelopt" and data["kinds"] == ["nvfp4", None]
    trt = next(e for e in data["engines"] if e["engine"] == "trtllm-main")
    kv_b = next(m for m in trt["modules"] if m["runtime_module"] == "model.midlayer.self_attn.kv_b_proj")
    assert kv_b["scheme"] is None and kv_b["rule"] == "model.midlayer.self_attn.kv_b_proj"
    assert [t["dtype"] for t in kv_b["expects"]] == ["BF16"]
    o_proj = next(m for m in trt["modules"] if m["runtime_module"] == "model.midlayer.self_attn.o_proj")
    assert o_proj["scheme"] == "W4A16 nvfp4" and o_proj["rule"] is None
    assert [t["name"].rsplit(".", 1)[1] for t in o_proj["expects"]] == ["weight", "weight_scale", "weight_scale_2"]
    sglang = next(e for e in data["engines"] if e["engine"] == "sglang")
    assert not sglang["loads"] and "MLA" in sglang["note"]  # informational: not asked for


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _edit_config(dst: Path, **changes: object) -> None:
    config = json.loads((dst / "config.json").read_text())
    config["quantization_config"].update(changes)
    (dst / "config.json").write_text(json.dumps(config))


def test_quarks_own_exclude_list_is_caught(written, tmp_path: Path) -> None:
    """Quark writes exclude ['fc', 'lm_head']: vLLM then quantizes its BF16 fc."""
    dst = _copy(written[("specforge-llama", "quark", "vllm,sglang")], tmp_path / "q")
    _edit_config(dst, exclude=["fc", "lm_head"])
    explanation = explain(dst)
    wrong = {e.engine: [(p.code, p.subject) for p in e.all_problems] for e in explanation.engines if e.all_problems}
    # SGLang runs fc as a plain Linear whatever the rules say, so only vLLM goes wrong
    assert wrong == {"vllm": [("weight-not-quantized", "model.fc")]} and not explanation.problems
    result = run_cli("explain", dst, "--json")
    assert result.exit_code == EXIT_CHECK_FAILED
    assert json.loads(result.stdout)["ok"] is False


def test_a_checkpoint_converted_for_vllm_is_wrong_for_trtllm_main_mla(written, tmp_path: Path) -> None:
    dst = tmp_path / "vllm-only"
    convert(FIXTURES / "torchspec-mla", dst, scheme="nvfp4", format="modelopt", engines=["vllm"])
    assert explain(dst, engines=["vllm"]).ok
    problems = explain(dst, engines=["trtllm-main"]).all_problems
    stored_quantized = {p.subject.rsplit(".", 1)[-1] for p in problems if p.code == "stored-quantized"}
    assert {"kv_b_proj", "kv_a_proj_with_mqa"} <= stored_quantized


def test_trtllm_kv_b_leaf_rule_is_caught(written, tmp_path: Path) -> None:
    dst = _copy(written[("torchspec-mla", "modelopt", "vllm,trtllm-main")], tmp_path / "leaf")
    config = json.loads((dst / "config.json").read_text())
    _edit_config(dst, ignore=[*config["quantization_config"]["ignore"], "*kv_b_proj"])
    hf = json.loads((dst / "hf_quant_config.json").read_text())
    hf["quantization"]["exclude_modules"].append("*kv_b_proj")
    (dst / "hf_quant_config.json").write_text(json.dumps(hf))
    problems = explain(dst, engines=["trtllm-main"]).all_problems
    assert codes(problems) == ["rule-breaks-loader"]


def test_modelopt_config_files_that_disagree_are_caught(written, tmp_path: Path) -> None:
    dst = _copy(written[("specforge-llama", "modelopt", "vllm,sglang,trtllm-main")], tmp_path / "disagree")
    _edit_config(dst, ignore=["lm_head"])
    problems = explain(dst).all_problems
    assert any((p.code, p.subject) == ("configs-disagree", "hf_quant_config.json") for p in problems)
    assert any((p.code, p.subject) == ("weight-not-quantized", "model.fc") for p in problems)


def test_stray_and_missing_scales_are_caught(written, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    dst = _copy(written[("specforge-llama", "quark", "vllm,sglang")], tmp_path / "stray")
    tensors = load_file(dst / "model.safetensors")
    tensors["midlayer.mlp.down_proj.input_scale"] = tensors["midlayer.mlp.down_proj.weight_scale"][:1].clone()
    del tensors["midlayer.self_attn.o_proj.weight_scale"]
    save_file(tensors, dst / "model.safetensors")
    problems = explain(dst, engines=["vllm"]).all_problems
    assert sorted((p.code, p.subject) for p in problems) == [
        ("missing", "midlayer.self_attn.o_proj.weight_scale"),
        ("not-expected", "midlayer.mlp.down_proj.input_scale"),
    ]


def test_spelling_dependent_rules_are_caught(written, tmp_path: Path) -> None:
    """A rule written for only one vLLM spelling of the fused QKV (self_attn.qkv_proj vs qkv_proj)."""
    dst = tmp_path / "qkv"
    convert(FIXTURES / "specforge-llama", dst, exclude=["midlayer.self_attn.[qkv]_proj"])
    config = json.loads((dst / "config.json").read_text())["quantization_config"]
    _edit_config(dst, exclude=[p for p in config["exclude"] if "self_attn\\.qkv" not in p])
    problems = explain(dst, engines=["vllm"]).all_problems
    assert any(p.code == "excluded-in-some-spellings" and p.subject.endswith("qkv_proj") for p in problems)


def test_vendor_reference_configs_read_back() -> None:
    """The configs amd-quark and llm-compressor wrote for a Kimi-shaped head read back as the scheme they name."""
    reference = Path(__file__).resolve().parents[3] / "shared" / "reference-outputs"
    if not reference.is_dir():
        pytest.skip("../shared/reference-outputs is not beside the checkout")
    expected = {
        "quark-ptpc_fp8": ("quark", ("fp8-channel", "fp8-token")),
        "quark-mxfp4": ("quark", ("mxfp4", "mxfp4")),
        "quark-mxfp4_weight_only": ("quark", ("mxfp4", None)),
        "llmcompressor-FP8_DYNAMIC": ("compressed-tensors", ("fp8-channel", "fp8-token")),
        "llmcompressor-NVFP4A16": ("compressed-tensors", ("nvfp4", None)),
        "llmcompressor-MXFP4A16": ("compressed-tensors", ("mxfp4", None)),
    }
    for folder, (fmt, kinds) in expected.items():
        config = json.loads((reference / folder / "config.json").read_text())["quantization_config"]
        written = FORMATS[fmt].read_config(config, {})
        assert written.kinds == kinds, folder
        # Quark's own list leaves vLLM's model.fc quantized; llm-compressor's re:.*fc$ does not.
        fc_rule = ENGINES["vllm"].matching_rule(FORMATS[fmt], "model.fc", written.patterns)
        assert (fc_rule is None) is folder.startswith("quark"), folder


def test_explain_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no quantization_config"):
        explain(FIXTURES / "specforge-llama")
    dst = _copy(FIXTURES / "specforge-llama", tmp_path / "odd")
    config = json.loads((dst / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq"}
    (dst / "config.json").write_text(json.dumps(config))
    result = run_cli("explain", dst)
    assert result.exit_code == 2 and "quant_method 'gptq'" in result.stderr and "Traceback" not in result.stderr


def test_explain_does_not_import_torch(written) -> None:
    dst = written[("specforge-llama", "quark", "vllm,sglang")]
    code = f"import sys, eaglequant\nassert eaglequant.explain({str(dst)!r}).ok\nassert 'torch' not in sys.modules\n"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_explain_cli_renders_each_engine(written) -> None:
    dst = written[("torchspec-mla", "modelopt", "vllm,trtllm-main")]
    result = run_cli("explain", dst, "--engine", "trtllm-main", "--target-layers", "61")
    assert result.exit_code == 0, result.stderr
    assert "TensorRT-LLM" in result.stdout and "vLLM" not in result.stdout  # the result is on stdout
    assert "k_b_proj_trans" in result.stdout  # the engine's reason for keeping kv_b_proj BF16
    result = run_cli("explain", dst, "--engine", "sglang")
    assert result.exit_code == EXIT_CHECK_FAILED and "cannot load this checkpoint" in result.stdout
