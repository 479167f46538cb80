"""The model card: Hub metadata, and tables that show this conversion's own figures."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
import yaml

import eaglequant
from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.publish.card import rename_draft, render_card
from eaglequant.record.report import read_report
from eaglequant.record.verification import VerificationRecord
from tests.conftest import FIXTURES


def _meta(card: str) -> dict:
    return yaml.safe_load(card.split("---", 2)[1])


def _code_blocks(card: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", card, flags=re.S)


@pytest.fixture(scope="module")
def mla_nvfp4(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("card") / "mla-nvfp4"
    eaglequant.convert(
        FIXTURES / "torchspec-mla",
        dst,
        scheme="nvfp4",
        format="modelopt",
        engines=["vllm", "trtllm-main"],
        target_layers=61,
        verify_output=True,
        repo_id="org/kimi-eagle3-nvfp4",
    )
    return dst


def test_card_tables_are_the_conversions_figures(mla_nvfp4: Path) -> None:
    card = (mla_nvfp4 / "README.md").read_text()
    report = json.loads((mla_nvfp4 / "eaglequant_report.json").read_text())
    verification = json.loads((mla_nvfp4 / "eaglequant_verify.json").read_text())
    for row in report["quantized"]:
        assert f"| `{row['module']}` | " in card and f"| {row['sqnr_db']:.1f} | {row['relative_error']:.4f} |" in card
    for name in report["excluded_linears"]:
        assert f"| `{name}` |" in card
    with Checkpoint.open(mla_nvfp4) as written:  # dtype overview counted from the files themselves
        counts = Counter(info.dtype for info in written.tensors.values())
    for dtype, count in counts.items():
        assert re.search(rf"\| `{dtype}` \| {count} \| [\d,]+ \|", card), dtype
    assert f"| source tensors | {report['source_bytes']:,} |" in card
    assert f"| quantized tensors | {report['output_bytes']:,} |" in card
    assert "`eaglequant verify` passed" in card
    for layer in verification["layers"]:
        assert f"| `{layer['module']}` | {layer['backend']} | {layer['sqnr_db']:.1f} |" in card
    assert f"| top-1 agreement | {verification['fidelity']['top1_agreement']:.3f} |" in card
    assert "| Target layer count | 61 |" in card


def test_serving_lines_match_the_output(mla_nvfp4: Path) -> None:
    card = (mla_nvfp4 / "README.md").read_text()
    vllm_line = next(b for b in _code_blocks(card, "bash") if b.startswith("vllm serve"))
    spec = json.loads(re.search(r"--speculative-config '(.*)'", vllm_line)[1])
    assert spec == {"model": "org/kimi-eagle3-nvfp4", "method": "eagle3", "num_speculative_tokens": 3}
    (trt_config,) = _code_blocks(card, "yaml")
    assert yaml.safe_load(trt_config) == {
        "speculative_config": {
            "decoding_type": "Eagle",
            "max_draft_len": 3,
            "speculative_model_dir": "org/kimi-eagle3-nvfp4",
        }
    }
    assert any(
        b.startswith("trtllm-serve") and "--extra_llm_api_options extra-llm-api-config.yml" in b
        for b in _code_blocks(card, "bash")
    )
    assert "SGLang 0.5.23: " in card and "sglang.launch_server" not in card  # not targeted: no line, and it says why


def test_card_metadata(mla_nvfp4: Path) -> None:
    meta = _meta((mla_nvfp4 / "README.md").read_text())
    assert "base_model" not in meta and "base_model_relation" not in meta  # a local source has no Hub id
    assert {"eagle3", "speculative-decoding", "quantized", "nvfp4", "modelopt"} <= set(meta["tags"])
    # transformers cannot load a quantized EAGLE-3 draft: the card names the engine the rules were proven for
    assert meta["library_name"] == "vllm" and "license" not in meta


def test_quark_card_says_tensorrt_llm_cannot_load_it(tmp_path: Path) -> None:
    dst = tmp_path / "quark"
    eaglequant.convert(FIXTURES / "speculators-llama", dst, scheme="fp8-per-channel", format="quark")
    card = (dst / "README.md").read_text()
    assert "TensorRT-LLM 1.2.x: does not load this checkpoint" in card
    assert "Not verified when written" in card
    # speculators heads name their target (the verifier) in config.json
    verifier = json.loads((FIXTURES / "speculators-llama" / "config.json").read_text())["speculators_config"][
        "verifier"
    ]
    assert f"vllm serve {verifier['name_or_path']} " in card
    assert f'"model": "{dst.resolve()}"' in card  # no --repo-id: the draft is named by its path


def test_rename_draft_keeps_the_report_true(mla_nvfp4: Path, tmp_path: Path) -> None:
    dst = Path(shutil.copytree(mla_nvfp4, tmp_path / "copy"))
    assert rename_draft(dst, "org/renamed")
    assert not rename_draft(dst, "org/renamed")  # nothing left to change
    card = (dst / "README.md").read_text()
    assert "speculative_model_dir: org/renamed" in card and "org/kimi-eagle3-nvfp4" not in card
    assert eaglequant.verify(dst).ok  # the report's SHA-256 of README.md was updated with it


def test_a_failed_verification_shows_in_the_card(mla_nvfp4: Path) -> None:
    report = read_report(mla_nvfp4)
    assert report is not None
    verification = json.loads((mla_nvfp4 / "eaglequant_verify.json").read_text())
    verification.update(ok=False, problems=["model.layers.0.self_attn.q_a_proj: SQNR 3.0 dB < 17.0"])
    record = VerificationRecord.from_json(verification)
    assert "**FAILED**: model.layers.0.self_attn.q_a_proj: SQNR 3.0 dB < 17.0" in render_card(report, record)


def test_mixed_card_names_no_refused_convert(tmp_path: Path) -> None:
    """A card of linears of different kinds says which engines do not load it, and suggests no convert that is
    refused."""
    dst = tmp_path / "mixed"
    eaglequant.convert(
        FIXTURES / "specforge-llama", dst, scheme="fp8-per-channel", scheme_for=["lm_head=nvfp4"],
        format="modelopt", target_layers=61,
    )  # fmt: skip
    serving = (dst / "README.md").read_text().split("## Serving", 1)[1]
    refused = {  # SGLang loads no per-channel FP8 from ModelOpt at all: its main scheme is refused first
        "TensorRT-LLM 1.2.x": "does not read per-module kinds",
        "SGLang 0.5.23": "does not load W8A8 fp8-channel in NVIDIA ModelOpt",
        "TensorRT-LLM main (2026)": "does not read per-module kinds",
    }
    for engine, why in refused.items():
        assert f"{engine}: does not load this checkpoint ({engine} {why}" in serving
    assert "`eaglequant schemes`" in serving
    suggested = re.findall(r"convert with `--engine ([^`]+)`", serving)
    assert suggested == ["vllm==0.33.0"]
    for engine in suggested:  # what the card suggests converts
        eaglequant.convert(
            FIXTURES / "specforge-llama", tmp_path / engine, scheme="fp8-per-channel", scheme_for=["lm_head=nvfp4"],
            format="modelopt", target_layers=61, engines=[engine],
        )  # fmt: skip


def test_a_source_card_whose_metadata_is_not_yaml_converts_and_says_the_licence_is_not_carried(tmp_path: Path) -> None:
    """The source's card metadata block does not parse: the conversion goes on, and says what it left out."""
    from eaglequant import convert
    from eaglequant.common.findings import find
    from tests.conftest import FIXTURES

    source = Path(shutil.copytree(FIXTURES / "specforge-llama", tmp_path / "src"))
    (source / "README.md").write_text("---\nlicense: [unclosed\n---\n# a head\n", encoding="utf-8")
    result = convert(source, tmp_path / "out", scheme="fp8-per-channel", format="quark")
    said = find(result.plan.notes, "source-card-unreadable")
    assert said is not None and said.subject == str(source / "README.md")
    assert "license:" not in (tmp_path / "out" / "README.md").read_text(encoding="utf-8").split("---")[1]


def test_a_k_for_each_load_is_served_as_vllm_schedule_and_a_one_k_engine_says_which_k(mla_nvfp4: Path) -> None:
    from dataclasses import replace

    from tests.project.test_record_json import RECORDS
    from tests.project.test_record_round_trip import _search_speedup

    speed = _search_speedup()  # k = 1 at concurrency 1, none at 4: ranges (1, 3, 1), (4, 4, 0)
    search = replace(RECORDS["SearchRecord"](), objective="speedup", speedup=speed)
    report = read_report(mla_nvfp4)
    assert report is not None
    card = render_card(report, None, None, search)
    vllm_line = next(b for b in _code_blocks(card, "bash") if b.startswith("vllm serve"))
    spec = json.loads(re.search(r"--speculative-config '(.*)'", vllm_line)[1])
    assert spec["num_speculative_tokens_per_batch_size"] == [[1, 3, 1], [4, 4, 0]]
    assert spec["num_speculative_tokens"] == 1  # vLLM caps each range's k at it
    (trt_config,) = _code_blocks(card, "yaml")
    assert yaml.safe_load(trt_config)["speculative_config"]["max_draft_len"] == 1
    assert "TensorRT-LLM main (2026) takes one k for every batch: k = 1 below, the k of the heaviest load" in card
    assert "| 4 | 0.5 | 0: do not speculate at this load | 1.000× [1.000, 1.000] |" in card
    assert "A tie within the model's error: the intervals of int8 / quark overlap the highest's." in card
