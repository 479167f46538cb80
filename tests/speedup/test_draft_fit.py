"""A draft that does not fit its target, and a target that is no decoder LLM, are refused in one line where the
speed-up is priced: explain --target-config, the library, and the search's speed model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import eaglequant
from eaglequant.common.errors import InputError
from eaglequant.speedup.draft_fit import check_draft_fits, misfits
from tests.conftest import FIXTURES, run_cli

PAIR = FIXTURES / "trained-pair"
KIMI = FIXTURES / "targets" / "kimi-k2.5"
TARGET = json.loads((PAIR / "target" / "config.json").read_text())
DRAFT = json.loads((PAIR / "draft" / "config.json").read_text())


@pytest.fixture(scope="module")
def fp8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("fit") / "fp8"
    eaglequant.convert(PAIR / "draft", dst, scheme="fp8-per-channel", format="quark")
    return dst


def test_the_bundled_pair_fits_and_each_misfit_is_named() -> None:
    assert misfits(DRAFT, TARGET) == []
    assert misfits({**DRAFT, "target_hidden_size": 512}, TARGET) == [
        "it reads hidden states of width 512, the target's hidden_size is 256"
    ]
    assert misfits({**DRAFT, "vocab_size": 5000}, TARGET) == ["its vocab_size 5000 is not the target's 4096"]
    assert misfits({**DRAFT, "vocab_size": None, "draft_vocab_size": 8192}, TARGET) == [
        "its draft_vocab_size 8192 is larger than the target's vocab_size 4096"
    ]
    aux = {**DRAFT, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 4]}}
    assert misfits(aux, TARGET) == ["it reads layers [4], and the target has 4 (eagle_aux_hidden_state_layer_ids)"]


def test_explain_refuses_a_draft_that_does_not_fit_its_target_in_one_line(fp8: Path) -> None:
    result = run_cli("explain", fp8, "--target-config", KIMI, "--acceptance", "2.5@3")
    assert result.exit_code == 2, result.stdout
    assert "does not fit the target" in result.stderr and "width 256, the target's hidden_size is 7168" in result.stderr
    assert "Traceback" not in result.stderr and "vocab_size 4096 is not the target's 163840" in result.stderr


def test_explain_refuses_a_target_that_is_not_a_decoder_llm_in_one_line(fp8: Path, tmp_path: Path) -> None:
    bert = {"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 256, "num_hidden_layers": 4,
            "num_attention_heads": 4, "intermediate_size": 1024, "vocab_size": 4096}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(bert))
    result = run_cli("explain", fp8, "--target-config", tmp_path, "--acceptance", "2.5@3")
    assert result.exit_code == 2, result.stdout
    assert "is not a decoder LLM" in result.stderr and "Traceback" not in result.stderr


def test_the_library_and_the_search_speed_model_refuse_it_too(fp8: Path) -> None:
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.layouts.detect import describe_head
    from eaglequant.search.objectives import speed_model

    with pytest.raises(InputError, match="does not fit the target"):
        eaglequant.predicted_speedup(fp8, KIMI, acceptance={3: 2.5})
    with Checkpoint.open(PAIR / "draft", "SRC") as checkpoint:
        head = describe_head(checkpoint)
    with pytest.raises(InputError, match="width 256, the target's hidden_size is 7168"):
        speed_model(head, ("vllm",), KIMI, 1, None)
    check_draft_fits(PAIR / "draft", PAIR / "target")  # fits: no error
