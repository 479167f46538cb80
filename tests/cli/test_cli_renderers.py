"""Renderers that no quick fixture run reaches (``accept`` needs an engine, ``bench`` times, ``batch`` uploads),
each drawn from a typed result built by hand."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from eaglequant.measurement.measure import GREEDY, AcceptanceReport, DraftResult, EngineRun, Mode, Settings
from eaglequant.measurement.statistics import Interval, Lossless, PromptCounts, paired_difference

SAMPLED = Mode("T=1", 1.0)


def _counts(accepted: list[int]) -> tuple[PromptCounts, ...]:
    return tuple(PromptCounts(10, a, (min(a, 10), a // 2, a // 4), (1, 2, 3)) for a in accepted)


def _run(greedy: list[int], sampled: list[int]) -> EngineRun:
    return EngineRun("0.32.0", None, 1.0, {GREEDY.name: _counts(greedy), SAMPLED.name: _counts(sampled)})


def _quantized(label: str, run: EngineRun, source: EngineRun, lossless: Lossless, budget: float | None) -> DraftResult:
    draft = DraftResult(label, Path(label), "dequantized", run, lossless, scheme="nvfp4", budget=budget)
    draft.difference = {m: paired_difference(run.acceptance(m), source.acceptance(m)) for m in run.modes}
    return draft


def accept_report() -> AcceptanceReport:
    settings = Settings(Path("target"), ("a", "b", "c"), "bundled prompts", 3, 8, (GREEDY, SAMPLED))
    source_run = _run([12, 14, 10], [9, 11, 8])
    source = DraftResult("source", Path("src"), "source", source_run, Lossless(3, 0, 3, None))
    close = _quantized("close", _run([12, 13, 10], [9, 10, 8]), source_run, Lossless(2, 1, 3, None), 0.2)
    worse = _quantized("worse", _run([2, 3, 1], [1, 2, 1]), source_run, Lossless(1, 0, 3, (1, 4)), 0.1)
    unpaired = _quantized("unpaired", _run([5, 6], [5, 6]), source_run, Lossless(3, 0, 3, None), 0.1)  # 2 prompts of 3
    return AcceptanceReport("vllm", "0.32.0", None, settings, source, [close, worse, unpaired], notes=["a note"])


def test_accept_renders_each_draft_and_mode_from_the_report(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from eaglequant.cli.accept_cmd import render

    monkeypatch.setenv("COLUMNS", "200")  # one line a row
    render(accept_report())
    shown = capsys.readouterr()
    lines = shown.out.splitlines()
    assert lines[0] == "vLLM 0.32.0, k = 3: 3 prompts (bundled prompts) × 8 tokens"
    cells = [[cell.strip() for cell in line.strip("│").split("│")] for line in lines if line.startswith("│")]
    assert cells == [
        ["source", "greedy", "2.200 [1.703, 2.697]", "1.00 / 0.60 / 0.27", "", "3/3"],
        ["", "T=1", "1.933 [1.554, 2.313]", "0.90 / 0.43 / 0.20", "", ""],
        [
            "close (dequantized)",
            "greedy",
            "2.167 [1.787, 2.546]",
            "1.00 / 0.57 / 0.27",
            "-0.033 [-0.177, +0.110]",
            "2/3 (+1 tie)",
        ],
        ["", "T=1", "1.900 [1.652, 2.148]", "0.90 / 0.43 / 0.20", "-0.033 [-0.177, +0.110]", ""],
        [
            "worse (dequantized)",
            "greedy",
            "1.200 [1.000, 1.448]",
            "0.20 / 0.07 / 0.00",
            "-1.000 [-1.248, -0.752]",
            "1/3",
        ],
        ["", "T=1", "1.133 [1.000, 1.277]", "0.13 / 0.03 / 0.00", "-0.800 [-1.048, -0.552]", ""],
        ["unpaired (dequantized)", "greedy", "1.550 [1.000, 2.185]", "0.55 / 0.25 / 0.10", "", "3/3"],  # not paired
        ["", "T=1", "1.550 [1.000, 2.185]", "0.55 / 0.25 / 0.10", "", ""],
    ]
    close = "close: greedy change -0.033 tokens (a loss); -0.033 [-0.177, +0.110]: bound -0.177, a drop of 0.177 "
    judged = "; judged at k = 3, the k the card serves\n"
    assert close + "within the 0.2 budget (the nvfp4 budget)" + judged in shown.err
    worse = "worse: greedy change -1.000 tokens (a loss); -1.000 [-1.248, -0.752]: upper bound -0.752, a drop of at "
    past = "least 0.752, the whole interval past the 0.1 budget (the nvfp4 budget)"
    assert worse + past + judged in shown.err and "unpaired:" not in shown.err
    assert "note: a note" in shown.err
    problems = [line for line in lines if line.startswith("problem: ")]
    assert len(problems) == 2 and all(p.startswith("problem: worse: greedy ") for p in problems)
    assert "ok:" not in shown.out


def test_accept_judges_the_bound_not_the_estimate_and_says_a_gain_is_a_gain(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 55, item 4: one gate (the drop's 95% upper bound within the budget), one sign (DST minus source): a
    draft whose estimate (-0.033) is within a 0.1 budget but whose bound (-0.177) is past it is not within:
    inconclusive (issue 63, item 4), exit 7, with the prompts that would settle it; a gain is never called a drop."""
    from dataclasses import replace

    from eaglequant.cli.accept_cmd import render

    monkeypatch.setenv("COLUMNS", "200")
    report = accept_report()
    close = replace(report.quantized[0], budget=0.1)
    assert close.inconclusive and not close.over_budget
    assert [p.code for p in close.problems] == ["acceptance-inconclusive"]
    assert "straddles the 0.1 budget (bound -0.177, estimate within it); 2 more prompts would settle it" in (
        close.problems[0].message
    )
    alone = AcceptanceReport("vllm", "0.32.0", None, report.settings, report.source, [close])
    assert alone.exit_code == 7 and replace(alone, quantized=report.quantized).exit_code == 3
    gained = replace(report.source, label="gained", served_as="dequantized", scheme="nvfp4", budget=0.1)
    gained.difference = {GREEDY.name: Interval(0.011, -0.02, 0.042)}
    report.quantized = [close, gained]
    render(report)
    err = capsys.readouterr().err
    gained_line = "gained: greedy change +0.011 tokens (a gain); +0.011 [-0.020, +0.042]: bound -0.020, a drop of 0.020"
    assert gained_line in err
    assert "drop -" not in err and "greedy drop" not in err


def test_accept_renders_a_draft_that_never_drafted(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A draft the engine never ran (no drafts in any prompt) has no per-position rates: shown as n/a, not a crash."""
    from eaglequant.cli.accept_cmd import render

    monkeypatch.setenv("COLUMNS", "200")
    idle = tuple(PromptCounts(0, 0, (0, 0, 0), (1,)) for _ in range(3))
    report = accept_report()
    report.source.run.modes[GREEDY.name] = idle
    render(report)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("│ source")]
    assert len(rows) == 1 and "n/a / n/a / n/a" in rows[0]


def test_accept_says_ok_when_every_draft_is_lossless_and_within_budget(capsys: pytest.CaptureFixture[str]) -> None:
    from eaglequant.cli.accept_cmd import render

    report = accept_report()
    report.quantized = report.quantized[:1]
    render(report)
    assert "ok: every draft lossless, every quantized draft within its budget" in capsys.readouterr().out


def test_bench_kernels_renders_each_timing_against_bf16_and_the_copy_bandwidth(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from eaglequant.bench.kernels import KernelBench, Timing
    from eaglequant.cli.bench_cmd import render

    monkeypatch.setenv("COLUMNS", "200")
    bf16 = Timing("tiny", 2, 256, 512, "torch-bf16", "torch", 0.5, 262144, 0.5)
    nvfp4 = Timing("tiny", 2, 256, 512, "nvfp4-w4a16", "reference", 0.25, 73728, 0.5)
    render(KernelBench.of("cpu (torch reference, not the kernels)", 10.0, (bf16, nvfp4)))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].rstrip() == "cpu (torch reference, not the kernels): copy bandwidth 10 GB/s"
    cells = [[cell.strip() for cell in line.strip("│").split("│")] for line in lines if line.startswith("│")]
    assert cells == [
        ["tiny", "2", "torch-bf16", "0.5000", "0.00", "1", "5", "1.00"],
        ["tiny", "2", "nvfp4-w4a16", "0.2500", "0.00", "0", "3", "2.00"],
    ]


def test_bench_convert_renders_runs_as_a_table_and_as_markdown(capsys: pytest.CaptureFixture[str]) -> None:
    from eaglequant.bench.convert import ConvertBench, Machine, Run
    from eaglequant.cli.bench_cmd import convert_markdown, convert_table
    from eaglequant.cli.output import out

    bench = ConvertBench(
        Machine("Some CPU", 16, 134_500_000_000, "3.12", "2.9", None, {"amd-quark": None}),
        None,
        "cpu",
        (
            Run("tiny", "copy", "cp -r + sync", 1.234, 567.8, 123456789, 1000, 1.0),
            Run("tiny", "eaglequant", "nvfp4 (modelopt)", 2.5, 300.1, 2**31, 500, 2.03, {"llm-compressor X": 0.456}),
            Run("tiny", "amd-quark", "mxfp4", error="it failed"),
        ),
    )
    assert convert_markdown(bench).splitlines()[2:] == [
        "| tiny | copy | cp -r + sync | 1.2 | 568 | 0.12 | 1.00 |  |",
        "| tiny | eaglequant | nvfp4 (modelopt) | 2.5 | 300 | 2.15 | 2.03 | 0.46× llm-compressor X |",
        "| tiny | amd-quark | mxfp4 | it failed | — | — | — |  |",
    ]
    out.print(convert_table(bench))
    assert capsys.readouterr().out.startswith("Some CPU, 16 cores, 134.50 GB")


def test_batch_says_each_job_and_its_upload_as_it_ends(capsys: pytest.CaptureFixture[str]) -> None:
    from eaglequant.batch.jobs import BatchResult, Job, JobOutcome
    from eaglequant.batch.summary import JobStatus, UploadOutcome, UploadStatus
    from eaglequant.cli.batch_cmd import _report_job, render
    from eaglequant.conversion.options import ConversionOptions

    job = Job("a", "src", Path("dst"), ConversionOptions())
    uploaded = UploadOutcome(UploadStatus.UPLOADED, "org/a", "https://hub/org/a/commit/1")
    failed = UploadOutcome(UploadStatus.FAILED, "org/a", error="no token")
    outcomes = [
        replace(JobOutcome.of(job), status=JobStatus.CONVERTED, reason="absent", verified=True, upload=uploaded),
        replace(JobOutcome.of(job), status=JobStatus.SKIPPED, reason="complete", upload=failed),
    ]
    for number, outcome in enumerate(outcomes, 1):
        _report_job(number, 2, outcome)
    render(BatchResult(Path("jobs.toml"), outcomes=outcomes), Path("summary.json"))
    shown = capsys.readouterr()
    assert shown.err.splitlines() == [
        "[1/2] a: converted (nothing at its destination yet); verified",
        "      upload to org/a: uploaded https://hub/org/a/commit/1",
        "[2/2] a: skipped (complete)",
        "      upload to org/a: failed no token",
    ]
    assert shown.out.startswith("1 converted, 1 skipped, 0 failed, 1 uploaded; summary in ")
