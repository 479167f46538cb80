"""What each engine runs per module: one table from the engine models, in the docs, in `schemes`, and behind every
refusal of --quantize fc|lm_head and --scheme-for, whose hints lead only to combinations that convert."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import eaglequant
from eaglequant.common.errors import InputError
from eaglequant.engines import ENGINES
from eaglequant.engines.support import FORMAT_NAMES
from eaglequant.engines.support_tables import (
    MODULES_END,
    MODULES_START,
    QUESTIONS,
    answer,
    module_table,
    render_module_markdown,
)
from eaglequant.formats import FORMATS
from eaglequant.layouts.head import Attention
from tests.conftest import FIXTURES, ROOT, run_cli

SOURCE = FIXTURES / "specforge-llama"


def test_docs_show_the_table_in_the_code() -> None:
    text = (ROOT / "docs" / "engines.md").read_text()
    block = text.split(MODULES_START, 1)[1].split(MODULES_END, 1)[0]
    assert block.strip() == render_module_markdown().strip(), "run: python -m eaglequant.engines.support_tables"


def test_mixed_kinds_load_where_the_engines_read_per_module_configs() -> None:
    """vLLM reads them from all three formats that store them; SGLang from Quark's layer_quant_config and
    compressed-tensors' config_groups (its ModelOpt MIXED_PRECISION is not established); TensorRT-LLM from none."""
    mixed = {(row.engine, row.format) for row in module_table() if row.mark("module_kinds") not in ("no", "not loaded")}
    vllm = {(engine, fmt) for engine in ("vllm", "vllm==0.33.0") for fmt in ("quark", "modelopt", "compressed-tensors")}
    assert mixed == vllm | {("sglang", "quark"), ("sglang", "compressed-tensors")}
    for row in module_table():
        if row.mark("module_kinds") not in ("no", "not loaded"):
            assert "::" in row.said("module_kinds")[Attention.MHA].why, row  # each answer cites the engine's function


def test_an_engine_that_reads_no_scheme_in_a_format_answers_no_to_everything() -> None:
    trtllm = ENGINES["trtllm"]
    for question in QUESTIONS:
        said = answer(trtllm, FORMATS["quark"], question, Attention.MHA)
        assert not said.yes and "quark" in said.why


# (main scheme, what the request adds): lm_head in a scheme of its own of another kind, and lm_head quantized
REQUESTS = [
    ("fp8-per-channel", {"scheme_for": ["lm_head=nvfp4"]}),
    ("fp8-per-channel", {"quantize": ["lm_head"]}),
    ("nvfp4", {"quantize": ["fc"]}),
]


def _refusal(scheme: str, fmt: str, engines: list[str], extra: dict) -> InputError | None:
    try:
        eaglequant.inspect(SOURCE, scheme=scheme, format=fmt, engines=engines, target_layers=61, **extra)
    except InputError as error:
        return error
    return None


@pytest.mark.parametrize(("scheme", "extra"), REQUESTS)
def test_every_refusal_names_only_what_converts(scheme: str, extra: dict) -> None:
    mixed_formats = {row.format for row in module_table() if row.mark("module_kinds") != "no"}
    refused = 0
    for engine in ENGINES:
        for fmt in FORMAT_NAMES:
            error = _refusal(scheme, fmt, [engine], extra)
            if error is None:
                continue
            refused += 1
            hint = error.hint or ""
            formats = re.findall(r"format='([^']+)'", hint)
            engines = re.findall(r"engines='([^']+)'", hint) or [engine]
            if not formats:  # the format cannot store a scheme: it names, in words, formats that store them all
                named = re.findall(r"formats that can: (.*)$", hint)
                assert named, (engine, fmt, error.one_line())
                assert "scheme_for" not in extra or set(named[0].split(", ")) <= mixed_formats, error.one_line()
                continue
            assert "`eaglequant schemes`" in hint, error.one_line()
            for suggested in formats:
                followed = _refusal(scheme, suggested, engines, extra)
                assert followed is None, (engine, fmt, error.one_line(), followed and followed.one_line())
    assert refused


def test_sglang_is_told_that_mixed_kinds_load_in_vllm() -> None:
    error = _refusal("nvfp4", "modelopt", ["sglang"], {"scheme_for": ["lm_head=fp8-per-channel"]})
    assert error is not None
    line = error.one_line()
    assert "SGLang 0.5.23 does not read per-module kinds" in line, line
    assert "only in vLLM 0.32.0 and vLLM 0.33.0 with format='modelopt'" in line, line
    assert "which SGLang can load" not in line
    # SGLang loads no per-channel FP8 from ModelOpt either: the main scheme is refused first, the hint the same
    both = _refusal("fp8-per-channel", "modelopt", ["sglang"], {"scheme_for": ["lm_head=nvfp4"]})
    assert both is not None and both.one_line().startswith("SGLang 0.5.23 does not load W8A8 fp8-channel in NVIDIA")
    assert "only in vLLM 0.32.0 and vLLM 0.33.0 with format='modelopt'" in both.one_line()


def test_schemes_shows_the_table(tmp_path: Path) -> None:
    data = json.loads(run_cli("schemes", "--json").stdout)
    rows = {(row["engine"], row["format"]): row for row in data["modules"]}
    assert set(rows) == {(engine, fmt) for engine in ENGINES for fmt in FORMAT_NAMES}
    vllm = rows[("vllm", "modelopt")]
    assert vllm["lm_head"]["llama"]["yes"] and not vllm["lm_head"]["mla"]["yes"]
    assert "deepseek_eagle3.py" in vllm["lm_head"]["mla"]["why"]
    shown = run_cli("schemes").stdout
    assert "what each engine runs per module" in shown and "pruned vocabulary" in shown
