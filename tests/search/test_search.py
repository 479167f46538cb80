"""The smallest draft within an acceptance budget: candidates priced from headers, predicted from the smallest up,
the first within the budget written, the frontier recorded; deterministic; budgets in tokens or as a share."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import eaglequant
from eaglequant.common.errors import EXIT_CHECK_FAILED, InputError
from eaglequant.record.search import SEARCH_RECORD, read_search
from eaglequant.search.smallest import Budget, search
from tests.conftest import FIXTURES, run_cli, run_cli_subprocess

PAIR = FIXTURES / "trained-pair"
SCHEMES = ("fp8-per-channel", "nvfp4")


def _loaded(names):  # type: ignore[no-untyped-def]
    from eaglequant.schemes.model import load_scheme

    return {name: load_scheme(name) for name in names}


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Counts from three prompts; inputs from three others."""
    tmp = tmp_path_factory.mktemp("captured")
    lines = (PAIR / "prompts.jsonl").read_text().splitlines()
    paths = []
    for name, chosen in (("counts", lines[:3]), ("inputs", lines[3:6])):
        prompts = tmp / f"{name}.jsonl"
        prompts.write_text("\n".join(chosen) + "\n")
        path = tmp / f"{name}.safetensors"
        eaglequant.capture(PAIR / "target", PAIR / "draft", path, prompts=prompts, max_tokens=32)
        paths.append(path)
    return paths[0], paths[1]


@pytest.mark.parametrize(
    ("text", "tokens"), [("0.05", 0.05), (0.1, 0.1), ("5%", 0.05 * 1.5), ("0%", 0.0), (" 2.5% ", 0.025 * 1.5)]
)
def test_a_budget_is_tokens_or_a_share_of_the_accepted_tokens(text: str | float, tokens: float) -> None:
    assert Budget.parse(text).tokens(2.5) == pytest.approx(tokens)


@pytest.mark.parametrize("text", ["-0.1", "nan", "inf", "150%", "lots", ""])
def test_a_budget_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(InputError, match="max_acceptance_drop"):
        Budget.parse(text)


def test_the_first_candidate_within_the_budget_from_the_smallest_up_is_written(
    captured: tuple[Path, Path], tmp_path: Path
) -> None:
    counts, inputs = captured
    dst = tmp_path / "chosen"
    found = search(
        PAIR / "draft", dst, inputs=inputs, max_draft_tokens=3, max_acceptance_drop="0.05", counts=counts,
        vocab_sizes=[1024], schemes=SCHEMES,
    )  # fmt: skip
    sizes = [point.bytes_per_round for point in found.points]
    assert sizes == sorted(sizes) and found.chosen is not None
    index = found.points.index(found.chosen)
    assert all(p.prediction is not None and not p.within for p in found.points[:index])
    assert all(p.prediction is None for p in found.points[index + 1 :])
    assert -found.chosen.prediction.difference.low <= found.budget_tokens  # judged on the bound by default
    labels = {p.candidate.label for p in found.points}
    assert "fp8-per-channel / modelopt + lm_head" in labels and "nvfp4 / modelopt + lm_head, vocab 1024" in labels
    assert not any("quark + lm_head" in label for label in labels)  # vLLM keeps lm_head BF16 under Quark
    report = eaglequant.verify(dst)
    assert report.ok
    record = read_search(dst)
    assert record is not None and record == replace(found.record(), seconds=record.seconds)  # as returned
    assert "How this draft was chosen" in (dst / "README.md").read_text()
    cost = eaglequant.explain(dst).engines[0].round_cost
    assert cost is not None and cost.bytes_per_round <= found.chosen.bytes_per_round
    again = search(
        PAIR / "draft", tmp_path / "again", inputs=inputs, max_draft_tokens=3, max_acceptance_drop="0.05",
        counts=counts, vocab_sizes=[1024], schemes=SCHEMES,
    )  # fmt: skip
    first, second = (json.loads((d / SEARCH_RECORD).read_text()) for d in (dst, tmp_path / "again"))
    for data in (first, second):
        data.pop("seconds"), data.pop("destination"), data.pop("pruned_source"), data.pop("notes")  # notes: its path
    assert first == second and again.chosen is not None


def test_no_candidate_within_the_budget_is_exit_3_and_writes_nothing(
    captured: tuple[Path, Path], tmp_path: Path
) -> None:
    _, inputs = captured
    result = run_cli(
        "search", PAIR / "draft", tmp_path / "none", "--inputs", inputs, "--max-acceptance-drop", "0",
        "--scheme", "nvfp4",
    )  # fmt: skip
    assert result.exit_code == EXIT_CHECK_FAILED and "none within the budget" in result.stdout
    assert not (tmp_path / "none").exists()


def test_bad_search_input_is_one_line(captured: tuple[Path, Path], tmp_path: Path) -> None:
    counts, inputs = captured
    for args, message in (
        (["--max-acceptance-drop", "lots"], "--max-acceptance-drop 'lots': not a budget"),
        (["--max-acceptance-drop", "0.05", "--rule", "maybe"], "--rule 'maybe'"),
        (["--max-acceptance-drop", "0.05", "--vocab-size", "64"], "--vocab-size 64 prunes the vocabulary by token "
         "counts: give --counts FILE"),
        (["--max-acceptance-drop", "0.05", "--counts", counts, "--vocab-size", "512", "--vocab-size", "4096"],
         "--vocab-size 4096: the draft's vocabulary has 2048 tokens; sizes from 1 to --vocab-size 2047"),
    ):  # fmt: skip
        result = run_cli("search", PAIR / "draft", tmp_path / "x", "--inputs", inputs, *args)
        assert result.exit_code == 2 and message in result.stderr, (args, result.stderr)
        assert "None" not in result.stderr and "[" not in result.stderr  # flags as typed, no Python reprs
        assert len(result.stderr.strip().splitlines()) == 1


def test_lm_head_in_a_scheme_of_its_own_is_priced_where_the_layer_count_is_known(tmp_path: Path) -> None:
    """With the target's layer count, lm_head is also tried in the other scheme (ModelOpt MIXED_PRECISION, which
    vLLM reads); each such draft reads bytes between its two single-scheme neighbours."""
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.layouts.detect import describe_head
    from eaglequant.search.candidates import NEEDS_LAYER_COUNT, priced_candidates

    with Checkpoint.open(PAIR / "draft") as checkpoint:
        head = describe_head(checkpoint)
    unpriced, skipped = priced_candidates(head, _loaded(SCHEMES), ["vllm"], [None], None)
    without = {c.label for c, _ in unpriced}
    candidates, none_skipped = priced_candidates(head, _loaded(SCHEMES), ["vllm"], [None], 4)
    priced = {c.label: nbytes for c, nbytes in candidates}
    mixed = {"fp8-per-channel / modelopt + lm_head nvfp4", "nvfp4 / modelopt + lm_head fp8-per-channel"}
    assert mixed <= set(priced) and not mixed & without
    assert skipped[NEEDS_LAYER_COUNT] == len(mixed) and NEEDS_LAYER_COUNT not in none_skipped
    fp8, nvfp4 = priced["fp8-per-channel / modelopt + lm_head"], priced["nvfp4 / modelopt + lm_head"]
    assert nvfp4 < priced["fp8-per-channel / modelopt + lm_head nvfp4"] < fp8
    assert nvfp4 < priced["nvfp4 / modelopt + lm_head fp8-per-channel"] < fp8
    assert not any("sglang" in label for label in priced)
    with pytest.raises(InputError, match=r"SGLang 0\.5\.23 does not read per-module kinds"):
        eaglequant.convert(
            PAIR / "draft", tmp_path / "out", scheme="nvfp4", scheme_for=["lm_head=fp8-per-channel"],
            format="modelopt", engines=["vllm", "sglang"], target_layers=4,
        )  # fmt: skip


def test_search_says_what_it_targeted_skipped_and_left_beside_dst(captured: tuple[Path, Path], tmp_path: Path) -> None:
    """Issue 48, items 4, 7, 8 and 13: the engines targeted and those that load the pick, the candidates skipped
    without --target-layers, the pruned head kept beside DST, and the budget said once, positive."""
    counts, inputs = captured
    dst = tmp_path / "dst"
    args = [
        "search", PAIR / "draft", dst, "--inputs", inputs, "--max-acceptance-drop", "5", "--counts", counts,
        "--vocab-size", "256", *(word for scheme in SCHEMES for word in ("--scheme", scheme)),
    ]  # fmt: skip
    shown = run_cli(*args)
    assert shown.exit_code == 0, shown.stderr
    pruned = tmp_path / "dst-vocab256-bf16"
    assert "budget: a drop of at most 5 tokens of greedy acceptance length, judged on the drop's 95% upper bound" in (
        shown.stdout
    )
    said = shown.stdout.replace(str(tmp_path), "DST_DIR")  # pytest's own folders (pytest-51) hold "-5"
    assert "-5" not in said and "the smallest within the budget:" in said
    assert "engines targeted: vLLM 0.32.0\n" in shown.stdout
    assert "judged on the drop's 95% upper bound; judged at k = 3, the k the card serves\n" in shown.stdout
    assert "loaded by: vLLM 0.32.0" in shown.stdout and "TensorRT" not in shown.stdout
    stderr = " ".join(shown.stderr.split())
    assert "4 candidates were skipped for want of the target's layer count (--target-layers N)" in stderr
    assert f"the pruned BF16 source {pruned} was left beside the chosen draft: it is the source the draft's" in stderr
    data = json.loads(run_cli(*args, "--overwrite", "--json").stdout)
    assert data["engines"] == ["vllm"] and data["loaded_by"][0] == "vLLM 0.32.0"
    assert data["skipped"]["needs-layer-count"] == 4 and len(data["notes"]) == 2
    assert data["budget"]["text"].startswith("a drop of at most 5 tokens")
    # Issue 55, item 4: verify judges the pick against the source and budget search recorded (the unpruned
    # source, 5 tokens), not the pruned head and the scheme's own 0.1, and says so
    verified = run_cli("verify", dst, "--inputs", inputs, "--max-draft-tokens", "3")
    assert verified.exit_code == 0, verified.stderr
    told = " ".join((verified.stdout + verified.stderr).split())
    assert "within the 5 budget" in told and "0.1 budget" not in told and "budget -" not in told
    assert f"acceptance judged against the source and budget `eaglequant search` recorded ({PAIR / 'draft'}" in told
    assert "parity and fidelity ran against the head DST was converted from" in told  # the pruned head
    # one bytes ratio for one checkpoint, against one named baseline: the source search started from
    fewer = f"{data['source_bytes_per_round'] / data['chosen']['bytes_per_round']:.2f}×"
    explained = run_cli("explain", dst, "--engine", "vllm")
    vllm_row = next(line for line in explained.stdout.splitlines() if "vLLM" in line and "×" in line)
    assert fewer in vllm_row, (fewer, vllm_row)
    assert "against the BF16 source `eaglequant search` started from" in " ".join(explained.stdout.split())
    card = (dst / "README.md").read_text()
    assert f"| {fewer} |" in card and "against the BF16 source `eaglequant search` started from" in card
    assert " → " in verified.stdout and "->" not in verified.stdout  # one arrow form
    help_text = " ".join(run_cli_subprocess("search", "--help", env={"COLUMNS": "300"}).stdout.split())
    assert "Without it, the candidates with lm_head in a scheme of its own" in help_text


def test_a_misspelt_engine_is_named(captured: tuple[Path, Path], tmp_path: Path) -> None:
    _, inputs = captured
    args = ("search", PAIR / "draft", tmp_path / "out", "--inputs", inputs, "--max-acceptance-drop", "0.05")
    result = run_cli(*map(str, args), "--engine", "vlm")
    assert result.exit_code == 2, result.stderr
    assert "unknown engine 'vlm'" in result.stderr


def test_search_says_what_it_searches_and_how_far_it_is_on_stderr_and_nothing_with_quiet(
    captured: tuple[Path, Path], tmp_path: Path
) -> None:
    _, inputs = captured
    args = ["search", PAIR / "draft", tmp_path / "dst", "--inputs", inputs, "--max-acceptance-drop", "5"]
    shown = run_cli(*args, "--scheme", "fp8-per-channel")
    assert shown.exit_code == 0, shown.stderr
    lines = shown.stderr.splitlines()
    assert "searching for vLLM 0.32.0: " in lines[0] and "candidates priced from headers" in lines[0]
    assert any("predicted 1 of at most" in line and "best so far: " in line for line in lines), shown.stderr
    quiet = run_cli(*args, "--scheme", "fp8-per-channel", "--overwrite", "-q")
    assert quiet.exit_code == 0 and quiet.stderr == ""
    assert quiet.stdout.splitlines()[-2:] == shown.stdout.splitlines()[-2:]  # the result, as without -q


def test_every_engine_is_searched_and_why_none_loads_in_all_is_said(
    captured: tuple[Path, Path], tmp_path: Path
) -> None:
    """``--engine all`` is every engine release; on the bundled Llama pair no built-in scheme loads in all of them,
    and the one line says which release refuses how many candidates."""
    _, inputs = captured
    args = ("search", PAIR / "draft", tmp_path / "out", "--inputs", inputs, "--max-acceptance-drop", "0.05")
    result = run_cli(*map(str, args), "--engine", "all")
    assert result.exit_code == 2, result.stderr
    said = " ".join(result.stderr.split())
    assert "no candidate loads in every targeted engine (vLLM 0.32.0, vLLM 0.33.0, TensorRT-LLM 1.2.x" in said
    assert "where TensorRT-LLM 1.2.x does not load the scheme in that format" in said
    assert "unknown engine" not in said and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_plan_error_that_is_no_engine_refusal_surfaces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only refusals the engine model states up front (and the named layer-count and nothing-quantized ones) skip a
    candidate; anything else a plan raises is an error of the search."""
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.common.errors import ExclusionProofError
    from eaglequant.layouts.detect import describe_head
    from eaglequant.search import candidates as search_candidates

    def unproven(*args: object, **kwargs: object) -> None:
        raise ExclusionProofError("vLLM would not apply the intended scheme to lm_head")

    with Checkpoint.open(PAIR / "draft") as checkpoint:
        head = describe_head(checkpoint)
    monkeypatch.setattr(search_candidates, "build_plan", unproven)
    with pytest.raises(ExclusionProofError, match="intended scheme"):
        search_candidates.priced_candidates(head, _loaded(["fp8-per-channel"]), ["vllm"], [None], None)


def test_an_error_after_the_choice_leaves_no_dst_and_nothing_beside_it(
    captured: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chosen candidate's conversion is kept (staged as DST, its report naming DST) and committed with its
    search record in one rename: an error before that rename leaves neither DST, nor a stage, nor a pruned head."""
    from eaglequant.search import smallest as search_module

    counts, inputs = captured
    out = tmp_path / "out"
    dst = out / "dst"

    def broken(*args: object) -> tuple[str, ...]:
        raise RuntimeError("injected after the choice")

    monkeypatch.setattr(search_module, "_loaded_by", broken)
    with pytest.raises(RuntimeError, match="injected"):
        search(
            PAIR / "draft", dst, inputs=inputs, max_draft_tokens=3, max_acceptance_drop="5", counts=counts,
            vocab_sizes=[256], schemes=["nvfp4"],
        )  # fmt: skip
    assert not out.exists() or list(out.iterdir()) == []
    monkeypatch.undo()
    found = search(
        PAIR / "draft", dst, inputs=inputs, max_draft_tokens=3, max_acceptance_drop="5", counts=counts,
        vocab_sizes=[256], schemes=["nvfp4"],
    )  # fmt: skip
    assert found.chosen is not None and found.chosen.candidate.vocab == 256
    assert sorted(path.name for path in out.iterdir()) == ["dst", "dst-vocab256-bf16"]  # the others removed
    report = json.loads((dst / "eaglequant_report.json").read_text())
    assert report["destination"] == str(dst) and json.loads((dst / SEARCH_RECORD).read_text())["destination"] == str(
        dst
    )


def test_the_pick_written_is_the_request_that_was_priced(
    captured: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every candidate carries the one ConversionRequest its price was computed from; writing it plans that same
    object, and no search module goes through the API's convert."""
    import eaglequant.api as api
    import eaglequant.conversion.source as conversion

    planned: list[object] = []
    build_plan = conversion.build_plan

    def recording(head, request, **kwargs):  # type: ignore[no-untyped-def]
        planned.append(request)
        return build_plan(head, request, **kwargs)

    def refused(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("search converted through eaglequant.api.convert")

    monkeypatch.setattr(conversion, "build_plan", recording)
    monkeypatch.setattr(api, "convert", refused)
    _, inputs = captured
    found = search(
        PAIR / "draft",
        tmp_path / "chosen",
        inputs=inputs,
        max_draft_tokens=3,
        max_acceptance_drop="0.05",
        schemes=SCHEMES,
    )
    assert found.chosen is not None
    request = found.chosen.candidate.request
    assert request is not None and any(seen is request for seen in planned)
    written = read_search(tmp_path / "chosen")
    assert written is not None and written.chosen is not None
    assert (
        request.format.name
        == found.chosen.candidate.format
        == json.loads((tmp_path / "chosen" / "eaglequant_report.json").read_text())["format"]
    )
