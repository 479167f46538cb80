"""``explain DST --target-config T``: the predicted speed-up at each k for each engine that loads DST, from one
acceptance figure or from what the search that chose DST predicted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import eaglequant
from tests.conftest import FIXTURES, run_cli

PAIR = FIXTURES / "trained-pair"


@pytest.fixture(scope="module")
def fp8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("speedup") / "fp8"
    eaglequant.convert(PAIR / "draft", dst, scheme="fp8-per-channel", format="quark")
    return dst


def test_explain_prints_k_against_the_predicted_speedup_with_its_assumptions(fp8: Path) -> None:
    result = run_cli("explain", fp8, "--target-config", PAIR / "target", "--acceptance", "2.5@3")
    assert result.exit_code == 0, result.stderr
    assert "predicted decode speed-up over the target alone" in result.stdout
    assert "2.5 at k = 3 (given), carried to other k" in result.stderr  # the assumptions, as notes
    data = json.loads(run_cli("explain", fp8, "--target-config", PAIR / "target", "--acceptance", "2.5@3",
                              "--json").stdout)  # fmt: skip
    table, baseline = data["speedup"]
    assert baseline["draft"] == "vLLM 0.32.0, the BF16 head it was converted from" and table["concurrency"] == 1
    assert baseline["points"][2]["speedup"] <= table["points"][2]["speedup"]  # the FP8 draft reads fewer bytes
    assert [p["draft_tokens"] for p in table["points"]] == list(range(1, 9))
    assert table["points"][2]["acceptance_length"] == pytest.approx(2.5, abs=1e-4)
    assert table["target"]["read_from"] == "safetensors headers" and table["best_draft_tokens"] in range(1, 9)


def test_the_library_gives_one_table_per_engine_that_loads_the_draft(fp8: Path) -> None:
    tables = eaglequant.predicted_speedup(fp8, PAIR / "target", acceptance={1: 1.7, 3: 2.5}, tensor_parallel_size=2)
    assert [t.draft for t in tables] == ["vLLM 0.32.0", "vLLM 0.32.0, the BF16 head it was converted from"]
    assert tables[0].target.tensor_parallel_size == 2 and [p.draft_tokens for p in tables[0].points] == [1, 3]


def test_without_acceptance_or_target_explain_says_what_to_give(fp8: Path) -> None:
    plain = run_cli("explain", fp8, "--target-config", PAIR / "target")
    assert plain.exit_code == 0 and "no speed-up table" in plain.stderr and "--acceptance 2.62@3" in plain.stderr
    orphan = run_cli("explain", fp8, "--acceptance", "2.5@3")
    assert orphan.exit_code == 2 and "--target-config PATH" in orphan.stderr
    bad = run_cli("explain", fp8, "--target-config", PAIR / "target", "--acceptance", "lots@3")
    assert bad.exit_code == 2 and "not LENGTH@K" in bad.stderr
    no_k = run_cli("explain", fp8, "--target-config", PAIR / "target", "--acceptance", "2.62")
    assert no_k.exit_code == 2 and "'2.62': no k: give the k it was measured at, LENGTH@K" in no_k.stderr
    zero = run_cli("explain", fp8, "--target-config", PAIR / "target", "--acceptance", "2.62@0")
    assert zero.exit_code == 2 and "k must be at least 1" in zero.stderr
    too_long = run_cli("explain", fp8, "--target-config", PAIR / "target", "--acceptance", "5@3")
    assert too_long.exit_code == 2 and "must be from 1 to 4" in too_long.stderr


KIMI = FIXTURES / "targets" / "kimi-k2.5-pair-width"  # Kimi-K2.5 at the pair's width: its drafts fit it
AT_LOAD = ("--gpu", "mi355x", "--tensor-parallel-size", "4", "--concurrency", "4,8,16,32,64", "--acceptance", "2.62@3")


def test_explain_prints_the_k_by_concurrency_table_with_its_terms_and_the_library_agrees(fp8: Path) -> None:
    result = run_cli("explain", fp8, "--target-config", KIMI, *AT_LOAD, "--draft-tp", "1")
    assert result.exit_code == 0, result.stderr
    assert "C = 64" in result.stdout and "the terms, ms" in result.stdout and "t_verify" in result.stdout
    assert "as stated by AMD Instinct MI355X GPUs, https://www.amd.com/" in result.stderr
    assert "acceptance is a per-token property: the same at every concurrency" in result.stderr
    assert "the target on 4 ranks, the draft on 1" in result.stderr
    data = json.loads(run_cli("explain", fp8, "--target-config", KIMI, *AT_LOAD, "--draft-tp", "1",
                              "--json").stdout)["speedup"]  # fmt: skip
    assert [(t["draft"], t["concurrency"]) for t in data][:5] == [("vLLM 0.32.0", c) for c in (4, 8, 16, 32, 64)]
    from eaglequant.api.speedup import Serving, acceptance_at

    serving = Serving(4, (4, 8, 16, 32, 64), "mi355x", draft_tensor_parallel_size=1)
    tables = eaglequant.predicted_speedup(fp8, KIMI, acceptance=acceptance_at("2.62@3")[0], serving=serving)
    assert [round(p.speedup, 4) for t in tables for p in t.points] == [p["speedup"] for t in data for p in t["points"]]
    for table in tables:
        for point in table.points:
            assert point.low <= point.speedup <= point.high <= point.acceptance_length


def test_each_named_accelerator_and_figures_of_your_own(fp8: Path) -> None:
    step = {}
    for gpu in ("h100", "h200", "b200", "mi300x", "mi355x"):
        result = run_cli("explain", fp8, "--target-config", KIMI, "--gpu", gpu, "--concurrency", "8", "--acceptance",
                         "2.62@3", "--json")  # fmt: skip
        assert result.exit_code == 0, result.stderr
        table = json.loads(result.stdout)["speedup"][0]
        step[gpu] = table["points"][0]["step_s"]
        assert table["timing"]["hardware"]["source"].startswith(("NVIDIA", "AMD"))
    assert step["h100"] > step["h200"] > step["mi355x"]  # more bandwidth, a faster step
    own = run_cli("explain", fp8, "--target-config", KIMI, "--bandwidth", "2", "--peak", "bf16=500", "--acceptance",
                  "2.62@3")  # fmt: skip
    assert own.exit_code == 0, own.stderr
    assert "given: 2 TB/s HBM, dense peak TFLOPS bf16 500 (given)" in own.stderr


def test_a_speedup_flag_that_cannot_apply_is_refused(fp8: Path) -> None:
    unknown = run_cli("explain", fp8, "--target-config", KIMI, "--gpu", "tpu9", "--acceptance", "2.62@3")
    assert unknown.exit_code == 2 and "not a named accelerator" in unknown.stderr and "mi355x" in unknown.stderr
    orphan = run_cli("explain", fp8, "--gpu", "h100")
    assert orphan.exit_code == 2 and "--gpu prices the target's forwards" in orphan.stderr
    peak = run_cli("explain", fp8, "--target-config", KIMI, "--peak", "fp9=3", "--acceptance", "2.62@3")
    assert peak.exit_code == 2 and "KIND=TFLOPS" in peak.stderr
    bad_c = run_cli("explain", fp8, "--target-config", KIMI, "--concurrency", "4,x", "--acceptance", "2.62@3")
    assert bad_c.exit_code == 2 and "e.g. --concurrency 4,8,16,32,64" in bad_c.stderr
    no_table = run_cli("explain", fp8, "--target-config", KIMI, "--measured", "/nonexistent.json")
    assert no_table.exit_code == 2 and "--measured fits the speed-up table's terms, and there is no table" in (
        no_table.stderr
    )


def test_a_bf16_draft_is_priced_as_it_is(tmp_path: Path) -> None:
    tables = eaglequant.predicted_speedup(PAIR / "draft", PAIR / "target", acceptance={3: 2.5})
    assert [t.draft for t in tables] == ["vLLM 0.32.0, BF16 (as it is)"]
    result = run_cli("explain", PAIR / "draft", "--target-config", PAIR / "target", "--acceptance", "2.5@3")
    assert result.exit_code == 0, result.stderr
    assert "(vLLM 0.32.0, BF16 (as it is))" in result.stdout
    refused = run_cli("explain", PAIR / "draft")  # without a target there is nothing to price: still refused
    assert refused.exit_code == 2 and "not a quantized checkpoint" in refused.stderr


def test_the_routing_locality_is_stated_or_fitted_to_a_measurement(fp8: Path) -> None:
    stated = run_cli("explain", fp8, "--target-config", KIMI, "--routing-locality", "0", "--acceptance", "2.62@3")
    assert stated.exit_code == 0 and "routing locality 0: a sequence's next token" in stated.stderr
    bad = run_cli("explain", fp8, "--target-config", KIMI, "--routing-locality", "1.5", "--acceptance", "2.62@3")
    assert bad.exit_code == 2 and "not from 0 to 1, nor 'fit'" in bad.stderr
    nothing = run_cli("explain", fp8, "--target-config", KIMI, "--routing-locality", "fit", "--acceptance", "2.62@3")
    assert nothing.exit_code == 2 and "fitted to a measurement, and none is given" in nothing.stderr
