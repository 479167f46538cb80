"""``verify --inputs`` with captured inputs predicts acceptance, and fails conversions that cost it.

Inputs are captured from the bundled trained target (``eaglequant capture``, transformers); every correct
conversion of the bundled draft must stay within its scheme's acceptance budget, and every planted fault
(``tests/prediction/faults.py``: damage that a gate fed random inputs lets through) must never be within it: past
it, or, where the 24 prompts' interval straddles it, inconclusive.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from eaglequant.common.findings import codes
from tests.conftest import require_vendor

PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "trained-pair"
CORRECT = [("fp8-per-channel", "quark"), ("fp8-block", "compressed-tensors"), ("nvfp4", "modelopt"), ("mxfp4", "quark")]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_vendor("transformers")
    from eaglequant.capturing.transformers_capture import capture

    path = tmp_path_factory.mktemp("captured") / "captured.safetensors"
    summary = capture(PAIR / "target", PAIR / "draft", path)  # the bundled 24 prompts x 96 tokens, as in the docs
    assert summary.sequences == 24 and summary.continuation_positions == 24 * (96 + 2)  # k - 1 past the budget
    return path


def test_captured_inputs_work_as_calibration_and_fidelity_inputs(captured: Path) -> None:
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.draft.calibrate import load_calibration
    from eaglequant.layouts.detect import describe_head

    with Checkpoint.open(PAIR / "draft") as checkpoint:
        sequences = load_calibration(captured, describe_head(checkpoint))
    assert len(sequences) == 24
    assert all(len(aux) == len(ids) and len(ids) > 96 for aux, ids in sequences)


@pytest.mark.parametrize(("scheme", "fmt"), CORRECT, ids=[f"{s}-{f}" for s, f in CORRECT])
def test_a_correct_conversion_is_within_its_acceptance_budget(captured: Path, tmp_path: Path, scheme, fmt) -> None:  # type: ignore[no-untyped-def]
    from eaglequant import convert, verify

    dst = tmp_path / "dst"
    convert(PAIR / "draft", dst, scheme=scheme, format=fmt)
    report = verify(dst, source=PAIR / "draft", inputs=captured, max_draft_tokens=3)
    assert report.acceptance is not None
    assert report.acceptance.source.acceptance_length.value > 1.8  # the trained draft drafts well on its target's text
    assert not report.acceptance.failed, report.acceptance.verdict
    assert report.ok, report.problems


def test_the_prediction_stops_where_the_engine_stops(captured: Path) -> None:
    from eaglequant.prediction.predict import load_captured

    sequences = load_captured(captured)
    assert {s.max_new_tokens for s in sequences} == {96}  # the capture holds k - 1 more, to judge the last draft
    assert all(len(s.ids) - s.start == 96 + 2 for s in sequences)


def test_the_source_against_itself_predicts_no_drop(captured: Path) -> None:
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.prediction.predict import load_captured, predict_pair

    with Checkpoint.open(PAIR / "draft") as a, Checkpoint.open(PAIR / "draft") as b:
        prediction = predict_pair(a, b, load_captured(captured), 3, 0.0, "captured")
    assert prediction.difference.value == 0.0 and not prediction.failed


@pytest.mark.parametrize("fault", ["lm_head-token-scales", "stale-fused-global-scale"])
def test_a_planted_fault_is_never_within_the_budget(captured: Path, tmp_path: Path, fault: str) -> None:
    from eaglequant import convert, verify
    from tests.prediction.faults import FAULTS, plant

    spec = FAULTS[fault]
    dst = tmp_path / "dst"
    convert(PAIR / "draft", dst, scheme=spec.scheme, format=spec.format, **spec.options)
    plant(dst, fault)
    report = verify(dst, source=PAIR / "draft", inputs=captured, max_draft_tokens=3)
    assert report.acceptance is not None, report
    # never passed: past the budget (a failure), or, where the 24 prompts' interval straddles it, inconclusive
    assert report.verdict in ("failed", "inconclusive") and not report.passed, report.acceptance.verdict
    found = codes(report.problems) + codes(report.unsettled)
    assert "acceptance-failed" in found or "acceptance-inconclusive" in found
    assert "sha256-differs" not in codes(report.problems)  # the digests were updated: the numbers caught it


def test_without_target_choices_acceptance_is_not_predicted_and_it_says_so(tmp_path: Path) -> None:
    from eaglequant import convert, verify

    dst = tmp_path / "dst"
    convert(PAIR / "draft", dst, scheme="fp8-per-channel", format="quark")
    report = verify(dst, source=PAIR / "draft")
    assert report.acceptance is None
    assert "no-inputs" in codes(report.notes)


def test_specforge_files_read_as_the_same_capture(tmp_path: Path) -> None:
    """SpecForge's offline files (torch.save dicts: input_ids, loss_mask, aux_hidden_state, post-norm hidden_state)
    of the target's own text read back into the inputs `capture` writes for that text."""
    require_vendor("transformers")
    import torch
    import transformers
    from safetensors.torch import load_file

    from eaglequant.capturing.transformers_capture import capture, capture_from_specforge

    captured = tmp_path / "captured.safetensors"
    capture(PAIR / "target", PAIR / "draft", captured, max_prompts=2, max_tokens=24)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(PAIR / "target"), dtype=torch.float32)
    mine = load_file(str(captured))
    rows = tmp_path / "specforge" / "rows_0-2000"
    rows.mkdir(parents=True)
    for i in range(2):
        length = int(mine["lengths"][i])
        start = int(mine["continuation_start"][i])
        # the text: the token before the first draft position, then the tokens the draft positions read
        tokens = torch.cat((torch.tensor([0]), mine["input_ids"][i, :length]))
        tokens[0] = _first_token(PAIR)
        with torch.no_grad():
            states = model(tokens[None], output_hidden_states=True).hidden_states
        record = {
            "input_ids": tokens,
            "loss_mask": (torch.arange(len(tokens)) > start).to(torch.int64),
            "aux_hidden_state": torch.cat([states[j] for j in (1, 2, 3)], -1).to(torch.bfloat16),
            "hidden_state": states[-1].to(torch.bfloat16),
        }
        torch.save(record, rows / f"data_{i}.ckpt")
    imported = tmp_path / "imported.safetensors"
    capture_from_specforge(tmp_path / "specforge", imported, target=PAIR / "target")
    theirs = load_file(str(imported))
    for i in range(2):
        n, m = int(mine["lengths"][i]), int(theirs["lengths"][i])
        assert m == n  # the last trained position is the last one with a successor
        assert torch.equal(theirs["input_ids"][i, :m], mine["input_ids"][i, :m])
        assert int(theirs["continuation_start"][i]) == int(mine["continuation_start"][i])
        # bf16 hidden states (as SpecForge stores them): the target's arg-max agrees almost everywhere
        agree = (theirs["target_top_ids"][i, :m, 0] == mine["target_top_ids"][i, :m, 0]).float().mean()
        assert agree > 0.95
        assert torch.allclose(theirs["hidden_states"][i, :m], mine["hidden_states"][i, :m], rtol=1e-2, atol=1e-2)


def _first_token(pair: Path) -> int:
    import json

    return int(json.loads((pair / "target" / "config.json").read_text())["bos_token_id"])


def test_the_same_head_in_the_speculators_layout_predicts_the_same(captured: Path, tmp_path: Path) -> None:
    """The trained head rewritten in the vLLM speculators layout (``layers.0.``, dims under
    ``transformer_layer_config``) is read as the same draft: the same chained arg-maxes, so the same prediction."""
    import importlib.util
    import sys

    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.layouts.detect import describe_head
    from eaglequant.prediction.predict import load_captured, predict_pair

    spec = importlib.util.spec_from_file_location("train_pair", PAIR.parent / "train_pair.py")
    assert spec is not None and spec.loader is not None
    train = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = train
    spec.loader.exec_module(train)
    speculators = tmp_path / "speculators"
    train.write_speculators_layout(PAIR / "draft", speculators)
    with Checkpoint.open(PAIR / "draft") as a, Checkpoint.open(speculators) as b:
        assert describe_head(b).layout.startswith("speculators")
        prediction = predict_pair(a, b, load_captured(captured), 3, 0.0, "captured")
    assert prediction.source.length() == prediction.quantized.length()
    assert prediction.difference.value == 0.0
