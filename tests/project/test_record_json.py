"""Each record's JSON, byte for byte: the keys in order and the values as reports, ``--json`` output and batch
summaries write them. Every record here is built with figures of the kinds a real run gives (paths, enums, nested
records, non-finite bounds, rounding), and its ``json.dumps`` is held to the text the record has always written."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import eaglequant
from eaglequant.batch.jobs import BatchResult, Job, JobOutcome, UploadSpec
from eaglequant.batch.summary import JobStatus, MergedSummary, SummaryJob, UploadOutcome, UploadStatus
from eaglequant.batch.uploads import Upload
from eaglequant.bench.convert import ConvertBench, Machine, Run
from eaglequant.bench.kernels import KernelBench, Timing
from eaglequant.cli.schemes_cmd import EngineCell, FormatRow, SchemeRow
from eaglequant.common.config_change import ConfigChange
from eaglequant.common.draft_tokens import Schedule
from eaglequant.common.findings import Finding
from eaglequant.common.json_fields import JsonRecord, json_plan
from eaglequant.common.version import __version__
from eaglequant.conversion.options import ConversionOptions
from eaglequant.conversion.result import ConversionResult, LinearResult
from eaglequant.draft.capture_file import CaptureSummary
from eaglequant.engine_load import LoadCheck, LoadJob, ModuleLoad
from eaglequant.engines.cells import Answer
from eaglequant.engines.support_tables import QUESTIONS, ModuleRow
from eaglequant.engines.target import TargetModel
from eaglequant.hub.client import SourceRef
from eaglequant.kinds import KindPair
from eaglequant.layouts.head import Attention
from eaglequant.measurement.concurrency import ConcurrentPass
from eaglequant.measurement.measure import (
    GREEDY,
    AcceptanceReport,
    AtConcurrency,
    AtDraftTokens,
    DraftResult,
    EngineRun,
    Mode,
    Settings,
)
from eaglequant.measurement.one_server import ServerAcceptance, ServerMode, WindowCounts
from eaglequant.measurement.statistics import Acceptance, Interval, Lossless, PromptCounts
from eaglequant.prediction.figures import TableRow
from eaglequant.prediction.predict import AcceptanceTable, Prediction
from eaglequant.publish.upload import UploadResult
from eaglequant.readback.cost import PartCost, RoundCost
from eaglequant.readback.explanation import EngineReading, ExpectedTensor, Explanation, ModuleReading
from eaglequant.record.report import (
    CardContext,
    ConversionReport,
    DtypeTotal,
    ManifestRecord,
    RecordedLinear,
    RecordedSource,
    VerificationSummary,
)
from eaglequant.record.verification import Verdict
from eaglequant.schemes.assignment import SchemeAssignment
from eaglequant.schemes.model import load_scheme
from eaglequant.search.budget import Budget
from eaglequant.search.candidates import NEEDS_LAYER_COUNT, Candidate
from eaglequant.search.sequential import SequentialPlan
from eaglequant.search.smallest import SearchPoint, SearchResult
from eaglequant.verification.copies import CopyCheck, CopyComparison
from eaglequant.verification.fidelity import DistributionShift, HeadFidelity
from eaglequant.verification.layer_parity import LayerParity
from eaglequant.verification.verify import VerifyReport
from eaglequant.vocabulary.pruned_head import HeadBytes, PruneResult

PROMPTS = (
    PromptCounts(10, 17, (8, 6, 3), (1, 2, 3), (0.5, None), 26, 0.5),
    PromptCounts(12, 15, (7, 5, 3), (4, 5), (), 26, 0.6),
    PromptCounts(9, 20, (9, 7, 4), (6,), (), 26, 0.4),
)
ALONE = tuple(PromptCounts(0, 0, (), p.token_ids, (), 26, 1.3 + i / 10) for i, p in enumerate(PROMPTS))
SAMPLED = Mode("T=0.7", 0.7, 3)
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _acceptance() -> Acceptance:
    return Acceptance(PROMPTS)


def _one_prompt() -> Acceptance:
    return Acceptance(PROMPTS[:1])


def _lossless() -> Lossless:
    return Lossless(2, 1, 4, (3, 17), 0.125)


def _settings() -> Settings:
    return Settings(Path("targets/llama"), ("a", "b", "c"), "prompts.jsonl", modes=(GREEDY, SAMPLED), seed=3)


def _run() -> EngineRun:
    return EngineRun("0.32.0", {"method": "eagle3"}, 12.5, {GREEDY.name: PROMPTS, SAMPLED.name: PROMPTS[1:]}, "engine")


def _at(difference: Interval | None, lossless: Lossless) -> AtDraftTokens:
    return AtDraftTokens(3, _run(), lossless, difference, Interval(2.5, 2.1, 2.9))


def _draft(label: str, difference: dict[str, Interval]) -> DraftResult:
    at = [_at(difference[GREEDY.name], _lossless())]
    return DraftResult(
        label, Path(f"out/{label}"), "stored", _run(), _lossless(), ["fc"], "fp8", 0.05, difference, by_draft_tokens=at
    )


def _acceptance_report() -> AcceptanceReport:
    equal = Lossless(3, 0, 3, None)
    source = DraftResult("source", Path("src"), "source", _run(), equal, by_draft_tokens=[_at(None, equal)])
    quantized = _draft("fp8", {GREEDY.name: Interval(-0.1, -0.3, 0.1), SAMPLED.name: Interval(math.nan, 0, 0)})
    alone = EngineRun("0.32.0", None, 30.0, {GREEDY.name: ALONE}, "engine")
    return AcceptanceReport(
        "vllm", "0.32.0", {"k": 3}, _settings(), source, [quantized], [Finding("launched-servers", "", "a note")],
        alone, "cpu",
    )  # fmt: skip


def _passes(c: int, seconds: float, drafts: int | None = None) -> ConcurrentPass:
    return ConcurrentPass(c, (32, 30, 31), (seconds, seconds * 1.1, seconds * 0.9), seconds * 3 / c, drafts, drafts)


def _at_each_c(k: int, schedule: Schedule = ()) -> AtDraftTokens:
    """A draft at one k (or the schedule) at C = 1 and 4: at C = 4 past its acceptance, and the target alone drifted."""
    one = AtConcurrency(1, _passes(1, 0.6, 40), Interval(1.6666666, 1.5, 1.8))
    four = AtConcurrency(4, _passes(4, 0.5, 40), Interval(2.2, 2.0, 2.4), (_past,), drifted=True)
    return AtDraftTokens(k, _run(), Lossless(3, 0, 3, None), None, Interval(1.5, 1.2, 1.8), (_past,), True, (one, four),
                         schedule)  # fmt: skip


_past = Finding("speedup-past-acceptance", "source", "a speed-up past the acceptance length")


def _acceptance_report_at_each_c() -> AcceptanceReport:
    """accept --concurrency 1,4 --schedule 1:3,2-4:1 --draft-tokens 3,2, the target alone drifted at C = 4."""
    schedule = ((1, 1, 3), (2, 4, 1))
    settings = replace(_settings(), modes=(GREEDY,), more_draft_tokens=(2,), concurrency=(1, 4), schedule=schedule)
    source = DraftResult("source", Path("src"), "source", _run(), Lossless(3, 0, 3, None),
                         by_draft_tokens=[_at_each_c(3), _at_each_c(2)], scheduled=_at_each_c(3, schedule))  # fmt: skip
    alone = EngineRun("0.32.0", None, 30.0, {GREEDY.name: ALONE}, "engine", (_passes(1, 1.0), _passes(4, 1.0)))
    again = EngineRun("0.32.0", None, 30.0, {GREEDY.name: ALONE[::-1]}, "engine", (_passes(1, 1.0), _passes(4, 1.3)))
    drifted = Finding("target-alone-drifted", "targets/llama at concurrency 4", "moved")
    return AcceptanceReport("vllm", "0.32.0", None, settings, source, [], alone=alone, alone_again=[again],
                            drift=[drifted])  # fmt: skip


def _prediction() -> Prediction:
    return Prediction(_acceptance(), _one_prompt(), Interval(-0.0123456, -math.inf, math.inf), 0.05, "captured.st")


def _tabled_prediction() -> Prediction:
    """k = 1 and 2 from one chain of two steps, on two sequences of 6 positions each."""
    k1 = (PromptCounts(4, 2, (2,), ()), PromptCounts(5, 1, (1,), ()))
    k2 = (PromptCounts(3, 3, (2, 1), ()), PromptCounts(4, 1, (1, 0), ()))
    source = AcceptanceTable(tuple(zip(k1, k2, strict=True)), (6, 6))
    quantized = AcceptanceTable(((k1[0], k2[0]), (k1[1], PromptCounts(4, 0, (0, 0), ()))), (6, 6))
    return Prediction.of(source, quantized, 0.05, "c", 2)


def _job_outcome(upload: UploadOutcome | None) -> JobOutcome:
    job = Job("fp8", "org/src", Path("out/fp8"), ConversionOptions(), upload=UploadSpec("org/fp8"))
    return replace(
        JobOutcome.of(job),
        status=JobStatus.CONVERTED,
        seconds=3.142,
        verified=True,
        manifest_key="abc123",
        upload=upload,
    )


def _batch() -> BatchResult:
    failed = UploadOutcome(UploadStatus.FAILED, "org/fp8", error="refused", exit_code=3)
    outcomes = [_job_outcome(UploadOutcome(UploadStatus.UPLOADED, "org/fp8", "https://hub/c/1")), _job_outcome(failed)]
    return BatchResult(
        Path("jobs.toml"), "f00d", ["fp8", "nvfp4"], (1, 2), outcomes, [Finding("hub-offline", "", "offline")]
    )


def _merged() -> MergedSummary:
    recorded = _job_outcome(None).to_json()
    missing = SummaryJob("b", JobStatus.MISSING, "no summary reports this job", None, None, None)
    jobs = (SummaryJob.from_json(recorded), missing)
    return MergedSummary("jobs.toml", "f00d", ("fp8", "b"), jobs, ("a.json", "b.json"))


def _timing(kernel: str) -> Timing:
    return Timing("fc", 16, 7168, 21504, kernel, "triton", 0.25, 154140672, 0.5)


def _convert_bench() -> ConvertBench:
    machine = Machine("Xeon", 16, 2**37, "3.12.1", "2.13.0", None, {"amd-quark": "0.13", "llm-compressor": None})
    runs = (
        Run("tiny", "eaglequant", "fp8", 1.5, 120.25, 2**30, 2**20, 1.25, {"amd-quark ptpc_fp8": 0.5}),
        Run("tiny", "amd-quark", "ptpc_fp8", error="not installed"),
    )
    return ConvertBench(machine, 4, "cpu", runs)


def _load_check() -> LoadCheck:
    modules = [
        ModuleLoad("model.layers.32.qkv_proj", "Fp8LinearMethod", True, True, ("a.weight", "a.scale"), (), 0.001),
        ModuleLoad(
            "lm_head",
            None,
            False,
            None,
            ("lm_head.weight",),
            (Finding("value-differs", "lm_head.weight", "weight: 3 values differ"),),
            None,
        ),
    ]
    return LoadCheck(
        "vllm",
        "0.32.0",
        Path("out/fp8"),
        True,
        None,
        ("patch",),
        modules,
        ["x"],
        [Finding("cannot-load", "", "bad")],
        [Finding("postprocess-not-run", "", "cpu")],
    )


def _upload_result(verdict: Verdict | None) -> UploadResult:
    files = {"model.safetensors": 100, "config.json": 20}
    return UploadResult(
        Path("out/fp8"), "org/fp8", "main", False, files, True, verdict, notes=[Finding("dry-run", "", "dry run")]
    )


def _prune() -> PruneResult:
    return PruneResult(
        Path("out/p"),
        Path("src"),
        32000,
        8000,
        "captured.st",
        (0, 2),
        0.98765432,
        0.9912345678,
        HeadBytes(1000, 250),
        None,
    )


def _round_cost() -> RoundCost:
    parts = (
        PartCost("fc", 1, 4096, 8192, True),
        PartCost("decoder", 3, 1000, 2000, True),
        PartCost("lm_head", 3, 500, 500, False, shared=True),
    )
    return RoundCost("vllm", "0.32.0", 3, parts, 5596, 10692)


def _manifest() -> ManifestRecord:
    source = RecordedSource("/data/src", "org/src", "main", "f" * 40, {"model.safetensors": "ab" * 32})
    return ManifestRecord("k3y", source, {"scheme": "fp8", "engines": ["vllm"], "target_layers": None})


def _report(version: int = 5) -> ConversionReport:
    """A report as a conversion of ``version`` wrote it (each version has the entries it had then)."""
    return ConversionReport(
        *(
            __version__,
            version,
            "out/fp8",
            "/data/src",
            "llama",
            "fp8",
            "W8A8 FP8",
            KindPair("fp8-channel", "fp8-token"),
        ),
        *(
            'name = "fp8"\n',
            "mha",
            "quark",
            "fp8_w8a8",
            (Finding("no-calib-data", "fp8", "a note"),),
            {"fc": 3.5},
            ("vllm", "sglang"),
        ),
        TargetModel(32, "--target-layers", 131072),
        (RecordedLinear("midlayer.mlp.down_proj", (4096, 14336), 0.0123, 38.25),),
        *({"lm_head.weight": "an engine runs it unquantized"}, {"lm_head": "kept"}, ("re:.*lm_head",)),
        {"float8_e4m3fn": DtypeTotal(7, 1024), "bfloat16": DtypeTotal(2, 64)},
        *(4096, 2048, {"model.safetensors": "cd" * 32}, ("tokenizer.json",), _manifest()),
        CardContext("org/base", "org/src", "org/target", {"name": "llama3", "link": "https://l"}),
        VerificationSummary(True, "passed") if version >= 2 else None,
        (_round_cost(),) if version >= 3 else (),
        (ConfigChange("max_position_embeddings", 2048, 131072, "the target's length"),) if version >= 4 else (),
        {"lm_head": 'name = "fp8-block"\n'} if version >= 4 else {},
    )


def _explanation() -> Explanation:
    expects = (
        ExpectedTensor("fc.weight", "float8_e4m3fn", (4096, 12288), "ok"),
        ExpectedTensor("fc.weight_scale", "float32", (4096, 1), "missing"),
    )
    unexpected = Finding("not-expected", "lm_head.weight", "lm_head.weight: not expected")
    modules = (
        ModuleReading("model.fc", ("fc",), None, "W8A8 fp8-channel", None, None, expects, ()),
        ModuleReading("lm_head", ("lm_head",), "re:.*lm_head", None, "excluded", "runs it bf16", (), (unexpected,)),
    )
    loads = EngineReading(
        "vllm",
        "vLLM",
        True,
        "loads",
        modules,
        (),
        (Finding("rocm-aiter-mla", "kv_b_proj", "a note"),),
        round_cost=_round_cost(),
    )
    refused = (Finding("cannot-load", "", "cannot load"),)
    refuses = EngineReading("sglang", "SGLang", False, "no", (), refused, judged=False)
    return Explanation(
        *(Path("out/fp8"), "quark", "W8A8 FP8", KindPair("fp8-channel", "fp8-token"), ["re:.*lm_head"]),
        TargetModel(None, "the draft's config"),
        [loads, refuses],
        [Finding("config-contradiction", "config.json", "config contradicts itself")],
    )


def _scheme_row() -> SchemeRow:
    cells = {"vllm": EngineCell(True, True, "loads", True, "W4A4 on Blackwell"), "sglang": None}
    formats = (FormatRow("quark", "fp8_w8a8", cells), FormatRow("fp8", None, {"vllm": None}))
    return SchemeRow("fp8", "W8A8 FP8", "FP8 per channel", "schemes/fp8.toml", formats)


def _module_row() -> ModuleRow:
    said = {
        Attention.MHA: Answer(True, "vllm/model_executor/models/llama_eagle3.py"),
        Attention.MLA: Answer(False, "no MLA"),
    }
    return ModuleRow("vllm", "vLLM 0.32.0", "quark", True, **dict.fromkeys(QUESTIONS, said))


def _inspected() -> eaglequant.conversion.inspection.InspectReport:
    report = eaglequant.inspect(FIXTURES / "specforge-llama", engines=["vllm", "sglang"], draft_tokens=2)
    return replace(report, source=Path("fixtures/specforge-llama"))


def _converted() -> ConversionResult:
    plan = _inspected().plan
    linears = [LinearResult("down_proj", "midlayer.mlp.down_proj.weight", (128, 256), 0.0123, 38.25)]
    files = {"model.safetensors": "cd" * 32}
    return ConversionResult(Path("out/fp8"), plan, files, linears, 1.23456, 4096, 2048, ["t.json"], Path("src"))


def _search() -> SearchResult:
    winner = SearchPoint(Candidate("nvfp4", "modelopt", True, 8000, "fp8-per-channel"), 1000, _prediction(), True)
    points = [
        winner,
        SearchPoint(Candidate("fp8-block", "quark", True, None), 1500),
        SearchPoint(Candidate("fp8-per-channel", "quark", False, None), 2000),
    ]
    return SearchResult(
        *(Path("src"), Path("out/best"), Budget(0.05, True), 0.13, 2.67, 4000, points, winner, 12.345),
        Path("out/best-vocab8000-bf16"),
        ("vllm", "sglang"),
        {NEEDS_LAYER_COUNT: 2},
        ("vllm",),
    )


def _shift(scale: float) -> DistributionShift:
    return DistributionShift(0.01 * scale, 0.002, 0.003 * scale, 0.001, 1 - 0.01 * scale, 3, 2.5)


def _fidelity() -> HeadFidelity:
    return HeadFidelity(256, 0.9991, ("mean_kl",), "captured.st", _shift(2), _shift(1), 64)


def _copies() -> CopyCheck:
    note = Finding("copies-compared", "", "3 copied tensors compared")
    return CopyComparison([], note, frozenset({"fc.weight", "d2t"}), frozenset({"fc.weight", "d2t", "t2d"}), 7).record()


def _verify_report(layers: list[LayerParity], fidelity: HeadFidelity | None) -> VerifyReport:
    schemes = SchemeAssignment.per_module(load_scheme("fp8-per-channel"), {"lm_head": load_scheme("fp8-block")})
    report = VerifyReport.of(Path("out/fp8"), Path("src") if layers else None, "quark", schemes)
    return replace(
        report,
        structure=[Finding("missing", "fc.weight_scale", "fc.weight_scale: missing")] if not layers else [],
        layers=layers,
        fidelity=fidelity,
        notes=[Finding("no-source", "", "a note")],
        engine_loads=[
            replace(_load_check(), problems=[Finding("never-loaded", "lm_head.weight", "lm_head.weight: never loaded")])
        ],
        acceptance=_prediction().record() if layers else None,
        copies=_copies() if layers else None,
    )


RECORDS: dict[str, Callable[[], Any]] = {
    "Interval": lambda: Interval(2.4812345, 2.3951111, 2.5669999).reported(),
    "Interval, unbounded": lambda: Interval(2.5, -math.inf, math.inf),
    "Acceptance": lambda: _acceptance().figures(),
    "Acceptance, no prompts": lambda: Acceptance(()).figures(),
    "Lossless": _lossless,
    "Lossless, equal": lambda: Lossless(3, 0, 3, None),
    "Mode": lambda: SAMPLED,
    "Settings": lambda: _settings().record(),
    "AcceptanceReport": lambda: _acceptance_report().record(),
    "AcceptanceReport, at each C and a schedule": lambda: _acceptance_report_at_each_c().record(),
    "ConcurrentPass": lambda: ConcurrentPass(2, (32, 30, 32), (1.0, 1.2, 0.9), 1.7, 20, 31),
    "ServerAcceptance": lambda: ServerAcceptance(
        "http://s:8000",
        "m",
        "0.32.0",
        3,
        _settings().record(),
        {GREEDY.name: ServerMode.of(_acceptance())},
        notes=[Finding("one-server", "u", "n")],
        clock="engine",
    ),
    "ServerAcceptance, window": lambda: ServerAcceptance(
        "http://s:8000", "m", "0.32.0", 3, None, window=WindowCounts(60.2, 40, 120, 50, (30, 15, 5))
    ),
    "WindowCounts": lambda: WindowCounts(60.2, 40, 120, 50, (30, 15, 5)),
    "Prediction": lambda: _prediction().record(),
    "Prediction, no budget": lambda: Prediction(_one_prompt(), _one_prompt(), Interval(0, 0, 0), None, "c").record(),
    "Prediction, by k": lambda: _tabled_prediction().record(),
    "TableRow": lambda: TableRow(2, Interval(2.5, 2.25, 2.75), Interval(2.4, 2.1, 2.7), Interval(-0.1, -0.2, 0.0)),
    "UploadOutcome, uploaded": lambda: UploadOutcome(UploadStatus.UPLOADED, "org/fp8", "https://hub/c/1"),
    "UploadOutcome, failed": lambda: UploadOutcome(UploadStatus.FAILED, "org/fp8", error="refused"),
    "JobOutcome": lambda: _job_outcome(None),
    "BatchResult": _batch,
    "BatchResult, one shard": lambda: BatchResult(Path("jobs.toml"), "f00d", ["fp8"]),
    "MergedSummary": _merged,
    "Upload": lambda: Upload("abc123", None, "0" * 40),
    "KernelBench": lambda: KernelBench.of("H100", 3000.0, (_timing("fp8-w8a8"), _timing("nvfp4-w4a16"))),
    "ConvertBench": _convert_bench,
    "SourceRef": lambda: SourceRef(Path("/cache/snap"), "org/src", "main", "f" * 40),
    "UploadResult": lambda: _upload_result(Verdict.PASSED),
    "UploadResult, unverified": lambda: _upload_result(None),
    "CaptureSummary": lambda: CaptureSummary(Path("captured.safetensors"), 4, 512, 256, (2, 15, 28), "prompts.jsonl"),
    "LoadJob": lambda: LoadJob(Path("/data/out/fp8")),
    "LoadJob, with its source": lambda: LoadJob(Path("/data/out/fp8"), Path("/data/src"), 61),
    "LoadCheck": _load_check,
    "TargetModel": lambda: TargetModel(32, "--target-layers", 131072),
    "ConfigChange": lambda: ConfigChange("max_position_embeddings", 2048, 131072, "the target's length"),
    "PruneResult": _prune,
    "PruneResult, predicted": lambda: replace(_prune(), prediction=_prediction().record()),
    "RecordedLinear": lambda: RecordedLinear("fc", (4096, 12288), 0.0123, 38.25),
    "DtypeTotal": lambda: DtypeTotal(7, 1024),
    "RecordedSource": lambda: _manifest().source,
    "ManifestRecord": _manifest,
    "CardContext": lambda: CardContext(None, "org/src", None, {}),
    "VerificationSummary": lambda: VerificationSummary(False, "not verified numerically"),
    "ConversionReport": _report,
    "ConversionReport, version 3": lambda: _report(3),
    "ConversionReport, version 1": lambda: replace(_report(1), manifest=None, card=None),
    "PartCost": lambda: _round_cost().parts[2],
    "RoundCost": _round_cost,
    "ExpectedTensor": lambda: _explanation().engines[0].modules[0].expects[1],
    "ModuleReading": lambda: _explanation().engines[0].modules[1],
    "EngineReading": lambda: _explanation().engines[0],
    "Explanation": _explanation,
    "SchemeRow": _scheme_row,
    "ModuleRow": _module_row,
    "InspectReport": lambda: _inspected().record(),
    "ConversionReport, timed (convert --json)": lambda: _converted().report(timed=True),
    "SearchRow": lambda: _search().points[2].row(),
    "SearchRow, lm_head in the decoder's scheme": lambda: _search().points[1].row(),
    "SearchSequential": lambda: SequentialPlan.of(24).record(),
    "SearchRecord": lambda: _search().record(),
    "SearchRecord, none chosen": lambda: replace(_search(), chosen=None, destination=None, pruned_source=None).record(),
    "DistributionShift": lambda: _shift(1),
    "HeadFidelity": _fidelity,
    "HeadFidelity, without lm_head": lambda: HeadFidelity(256, 0.9991, (), "synthetic"),
    "LayerParity": lambda: LayerParity("fc", "triton", 38.5, 0.9993, 0.0118, (), 0.021, (3, 128)),
    "LayerParity, exact": lambda: LayerParity("lm_head", "reference", math.inf, 1.0, 0.0, ("min_sqnr_db",)),
    "CopyCheck": _copies,
    "VerifyReport": lambda: _verify_report([RECORDS["LayerParity"](), RECORDS["LayerParity, exact"]()], _fidelity()),
    "VerifyReport, structure only": lambda: _verify_report([], None),
    "VerifyReport, not verified numerically": lambda: replace(_verify_report([], None), structure=[], engine_loads=[]),
}


def written(record: Any) -> str:
    return json.dumps(record.to_json())


@pytest.mark.parametrize("name", RECORDS)
def test_each_record_writes_the_json_it_always_has(name: str) -> None:
    assert written(RECORDS[name]()) == WRITTEN[name].replace("{version}", __version__)


def test_every_record_built_here_has_its_json_held() -> None:
    assert list(RECORDS) == list(WRITTEN)


def _records(base: type) -> list[type]:
    return [found for sub in base.__subclasses__() for found in (sub, *_records(sub))]


def test_every_record_declares_only_what_it_writes() -> None:
    """The declarations of every record written by the one rule (those imported here) name fields it has, and
    computed entries it declares; each is checked the first time one is written."""
    records = [record for record in _records(JsonRecord) if record.__module__.startswith("eaglequant.")]
    assert len(records) >= 20
    for record in records:
        assert json_plan(record)


# The text each record wrote when its to_json was written out by hand (eaglequant_version as {version}).
# ruff: noqa: E501
WRITTEN = {
    "Interval": '{"value": 2.48123, "low": 2.39511, "high": 2.567}',
    "Interval, unbounded": '{"value": 2.5, "low": null, "high": null}',
    "Acceptance": '{"prompts": 3, "drafts": 31, "accepted": 52, "acceptance_length": {"value": 2.67742, "low": 1.47053, "high": 3.88431}, "per_position": [{"value": 0.77419, "low": 0.14729, "high": 0.98552}, {"value": 0.58065, "low": 0.1781, "high": 0.89845}, {"value": 0.32258, "low": 0.13639, "high": 0.58945}]}',
    "Acceptance, no prompts": '{"prompts": 0, "drafts": 0, "accepted": 0, "acceptance_length": {"value": null, "low": null, "high": null}, "per_position": []}',
    "Lossless": '{"equal": 2, "near_ties": 1, "prompts": 4, "ok": false, "first_difference": [3, 17], "near_tie_nats": 0.125}',
    "Lossless, equal": '{"equal": 3, "near_ties": 0, "prompts": 3, "ok": true, "first_difference": null, "near_tie_nats": 0.0}',
    "Mode": '{"name": "T=0.7", "temperature": 0.7, "seed": 3}',
    "Settings": '{"target": "targets/llama", "prompts": 3, "prompts_from": "prompts.jsonl", "draft_tokens": 3, "max_tokens": 96, "modes": [{"name": "greedy", "temperature": 0.0, "seed": 0}, {"name": "T=0.7", "temperature": 0.7, "seed": 3}], "dtype": "bfloat16", "seed": 3, "engine_args": {}, "more_draft_tokens": [], "target_alone_runs": 2, "concurrency": [], "schedule": []}',
    "AcceptanceReport": '{"engine": "vllm", "version": "0.32.0", "speculative_config": {"k": 3}, "settings": {"target": "targets/llama", "prompts": 3, "prompts_from": "prompts.jsonl", "draft_tokens": 3, "max_tokens": 96, "modes": [{"name": "greedy", "temperature": 0.0, "seed": 0}, {"name": "T=0.7", "temperature": 0.7, "seed": 3}], "dtype": "bfloat16", "seed": 3, "engine_args": {}, "more_draft_tokens": [], "target_alone_runs": 2, "concurrency": [], "schedule": []}, "source": {"label": "source", "path": "src", "served_as": "source", "dequantized": [], "scheme": null, "budget": null, "served_draft_tokens": 3, "judged_draft_tokens": null, "budget_verdict": null, "lossless": {"equal": 3, "near_ties": 0, "prompts": 3, "ok": true, "first_difference": null, "near_tie_nats": 0.0}, "modes": {"greedy": {"prompts": 3, "drafts": 31, "accepted": 52, "acceptance_length": {"value": 2.67742, "low": 1.47053, "high": 3.88431}, "per_position": [{"value": 0.77419, "low": 0.14729, "high": 0.98552}, {"value": 0.58065, "low": 0.1781, "high": 0.89845}, {"value": 0.32258, "low": 0.13639, "high": 0.58945}], "difference": null, "decode_tokens_per_second": 52.0}, "T=0.7": {"prompts": 2, "drafts": 21, "accepted": 35, "acceptance_length": {"value": 2.66667, "low": 1.0, "high": 4.0}, "per_position": [{"value": 0.7619, "low": 0.0, "high": 1.0}, {"value": 0.57143, "low": 0.00014, "high": 0.99992}, {"value": 0.33333, "low": 0.00215, "high": 0.99144}], "difference": null, "decode_tokens_per_second": 52.0}}, "by_draft_tokens": [{"draft_tokens": 3, "acceptance_length": {"value": 2.67742, "low": 1.47053, "high": 3.88431}, "decode_tokens_per_second": 52.0, "clock": "engine", "speedup": {"value": 2.5, "low": 2.1, "high": 2.9}, "measured_speedup": {"value": 2.5, "low": 2.1, "high": 2.9}, "speed_problems": [], "difference": null, "lossless": {"equal": 3, "near_ties": 0, "prompts": 3, "ok": true, "first_difference": null, "near_tie_nats": 0.0}, "by_concurrency": []}], "scheduled": null, "seconds": 12.5, "problems": []}, "quantized": [{"label": "fp8", "path": "out/fp8", "served_as": "stored", "dequantized": ["fc"], "scheme": "fp8", "budget": 0.05, "served_draft_tokens": 3, "judged_draft_tokens": 3, "budget_verdict": "inconclusive", "lossless": {"equal": 2, "near_ties": 1, "prompts": 4, "ok": false, "first_difference": [3, 17], "near_tie_nats": 0.125}, "modes": {"greedy": {"prompts": 3, "drafts": 31, "accepted": 52, "acceptance_length": {"value": 2.67742, "low": 1.47053, "high": 3.88431}, "per_position": [{"value": 0.77419, "low": 0.14729, "high": 0.98552}, {"value": 0.58065, "low": 0.1781, "high": 0.89845}, {"value": 0.32258, "low": 0.13639, "high": 0.58945}], "difference": {"value": -0.1, "low": -0.3, "high": 0.1}, "decode_tokens_per_second": 52.0}, "T=0.7": {"prompts": 2, "drafts": 21, "accepted": 35, "acceptance_length": {"value": 2.66667, "low": 1.0, "high": 4.0}, "per_position": [{"value": 0.7619, "low": 0.0, "high": 1.0}, {"value": 0.57143, "low": 0.00014, "high": 0.99992}, {"value": 0.33333, "low": 0.00215, "high": 0.99144}], "difference": null, "decode_tokens_per_second": 52.0}}, "by_draft_tokens": [{"draft_tokens": 3, "acceptance_length": {"value": 2.67742, "low": 1.47053, "high": 3.88431}, "decode_tokens_per_second": 52.0, "clock": "engine", "speedup": {"value": 2.5, "low": 2.1, "high": 2.9}, "measured_speedup": {"value": 2.5, "low": 2.1, "high": 2.9}, "speed_problems": [], "difference": {"value": -0.1, "low": -0.3, "high": 0.1}, "lossless": {"equal": 2, "near_ties": 1, "prompts": 4, "ok": false, "first_difference": [3, 17], "near_tie_nats": 0.125}, "by_concurrency": []}], "scheduled": null, "seconds": 12.5, "problems": [{"code": "not-lossless", "subject": "fp8", "message": "fp8: greedy output differs from the target\'s alone on 1 of 4 prompts where the target\'s choice was no near-tie (first: prompt 3, token 17); speculative decoding must be lossless"}, {"code": "acceptance-inconclusive", "subject": "fp8", "message": "fp8: greedy acceptance length change against the source draft -0.100 [-0.300, +0.100]: inconclusive, the interval straddles the 0.05 budget (bound -0.300, estimate past it); 7 more prompts would settle it at this variance (the fp8 budget); judged at k = 3, the k the card serves"}]}], "notes": [{"code": "launched-servers", "subject": "", "message": "a note"}], "target_alone": {"decode_tokens_per_second": 18.5714, "clock": "engine", "runs": [18.5714], "drift": null, "by_concurrency": []}, "device": "cpu", "engine_build": "vLLM 0.32.0 CPU build", "ok": false, "problems": [{"code": "not-lossless", "subject": "fp8", "message": "fp8: greedy output differs from the target\'s alone on 1 of 4 prompts where the target\'s choice was no near-tie (first: prompt 3, token 17); speculative decoding must be lossless"}, {"code": "acceptance-inconclusive", "subject": "fp8", "message": "fp8: greedy acceptance length change against the source draft -0.100 [-0.300, +0.100]: inconclusive, the interval straddles the 0.05 budget (bound -0.300, estimate past it); 7 more prompts would settle it at this variance (the fp8 budget); judged at k = 3, the k the card serves"}]}',
    "AcceptanceReport, at each C and a schedule": '{"engine": "vllm", "version": "0.32.0", "speculative_config": null, "settings": {"target": "targets/llama", "prompts": 3, "prompts_from": "prompts.jsonl", "draft_tokens": 3, "max_tokens": 96, "modes": [{"name": "greedy", "temperature": 0.0, "seed": 0}], "dtype": "bfloat16", "seed": 3, "engine_args": {}, "more_draft_tokens": [2], "target_alone_runs": 2, "concurrency": [1, 4], "schedule": [[1, 1, 3], [2, 4, 1]]}, "source": {"label": "source", "path": "src", "served_as": "source", "dequantized": [], "scheme": null, "budget": null, "served_draft_tokens": 3, "judged_draft_tokens": null, "budget_verdict": null, "lossless": {"equal": 3, "near_ties": 0, "prompts": 3, "ok": true, "first_difference": null, "near_tie_nats": 0.0}, "modes": {"greedy": {"prompts": 3, "drafts": 31, "accepted": 52, "acceptance_length": {"value": 2.67742, "low": 1.47053, "high": 3.88431}, "per_position": [{"value": 0.77419, "low": 0.14729, "high": 0.98552}, {"value": 0.58065, "low": 0.1781, "high": 0.89845}, {"value": 0.32258, "low": 0.13639, "high": 0.58945}], "difference": null, "decode_tokens_per_second": 52.0}}, "by_draft_tokens": [{"draft_tokens": 3, "acceptance_length": {"value": 2.67742, "low": 1.47053, "high": 3.88431}, "decode_tokens_per_second": 52.0, "clock": "engine", "speedup": null, "measured_speedup": {"value": 1.5, "low": 1.2, "high": 1.8}, "speed_problems": ["speedup-past-acceptance", "target-alone-drifted"], "difference": null, "lossless": {"equal": 3, "near_ties": 0, "prompts": 3, "ok": true, "first_difference": null, "near_tie_nats": 0.0}, "by_concurrency": [{"concurrency": 1, "output_tokens_per_second": {"value": 51.66667, "low": 38.40081, "high": 69.51532}, "acceptance_length": 2.0, "speedup": {"value": 1.66667, "low": 1.5, "high": 1.8}, "measured_speedup": {"value": 1.66667, "low": 1.5, "high": 1.8}, "speed_problems": []}, {"concurrency": 4, "output_tokens_per_second": {"value": 248.0, "low": 184.32388, "high": 333.67353}, "acceptance_length": 2.0, "speedup": null, "measured_speedup": {"value": 2.2, "low": 2.0, "high": 2.4}, "speed_problems": ["speedup-past-acceptance", "target-alone-drifted"]}]}, {"draft_tokens": 2, "acceptance_length": {"value": 2.67742, "low": 1.47053, "high": 3.88431}, "decode_tokens_per_second": 52.0, "clock": "engine", "speedup": null, "measured_speedup": {"value": 1.5, "low": 1.2, "high": 1.8}, "speed_problems": ["speedup-past-acceptance", "target-alone-drifted"], "difference": null, "lossless": {"equal": 3, "near_ties": 0, "prompts": 3, "ok": true, "first_difference": null, "near_tie_nats": 0.0}, "by_concurrency": [{"concurrency": 1, "output_tokens_per_second": {"value": 51.66667, "low": 38.40081, "high": 69.51532}, "acceptance_length": 2.0, "speedup": {"value": 1.66667, "low": 1.5, "high": 1.8}, "measured_speedup": {"value": 1.66667, "low": 1.5, "high": 1.8}, "speed_problems": []}, {"concurrency": 4, "output_tokens_per_second": {"value": 248.0, "low": 184.32388, "high": 333.67353}, "acceptance_length": 2.0, "speedup": null, "measured_speedup": {"value": 2.2, "low": 2.0, "high": 2.4}, "speed_problems": ["speedup-past-acceptance", "target-alone-drifted"]}]}], "scheduled": {"schedule": "1:3,2-4:1", "num_speculative_tokens_per_batch_size": [[1, 1, 3], [2, 4, 1]], "draft_tokens": 3, "acceptance_length": {"value": 2.67742, "low": 1.47053, "high": 3.88431}, "decode_tokens_per_second": 52.0, "clock": "engine", "speedup": null, "measured_speedup": {"value": 1.5, "low": 1.2, "high": 1.8}, "speed_problems": ["speedup-past-acceptance", "target-alone-drifted"], "difference": null, "lossless": {"equal": 3, "near_ties": 0, "prompts": 3, "ok": true, "first_difference": null, "near_tie_nats": 0.0}, "by_concurrency": [{"concurrency": 1, "output_tokens_per_second": {"value": 51.66667, "low": 38.40081, "high": 69.51532}, "acceptance_length": 2.0, "speedup": {"value": 1.66667, "low": 1.5, "high": 1.8}, "measured_speedup": {"value": 1.66667, "low": 1.5, "high": 1.8}, "speed_problems": []}, {"concurrency": 4, "output_tokens_per_second": {"value": 248.0, "low": 184.32388, "high": 333.67353}, "acceptance_length": 2.0, "speedup": null, "measured_speedup": {"value": 2.2, "low": 2.0, "high": 2.4}, "speed_problems": ["speedup-past-acceptance", "target-alone-drifted"]}]}, "seconds": 12.5, "problems": [{"code": "speedup-past-acceptance", "subject": "source", "message": "a speed-up past the acceptance length"}, {"code": "speedup-past-acceptance", "subject": "source", "message": "a speed-up past the acceptance length"}, {"code": "speedup-past-acceptance", "subject": "source", "message": "a speed-up past the acceptance length"}, {"code": "speedup-past-acceptance", "subject": "source", "message": "a speed-up past the acceptance length"}, {"code": "speedup-past-acceptance", "subject": "source", "message": "a speed-up past the acceptance length"}, {"code": "speedup-past-acceptance", "subject": "source", "message": "a speed-up past the acceptance length"}]}, "quantized": [], "notes": [], "target_alone": {"decode_tokens_per_second": 18.5714, "clock": "engine", "runs": [18.5714, 18.5714], "drift": 0.0, "by_concurrency": [{"concurrency": 1, "output_tokens_per_second": {"value": 31.0, "low": 23.04049, "high": 41.70919}, "runs": [31.0, 31.0], "drift": 0.0}, {"concurrency": 4, "output_tokens_per_second": {"value": 107.82609, "low": 80.14082, "high": 145.07545}, "runs": [124.0, 95.3846], "drift": 0.3}]}, "device": null, "engine_build": "vLLM 0.32.0", "ok": false, "problems": [{"code": "target-alone-drifted", "subject": "targets/llama at concurrency 4", "message": "moved"}, {"code": "speedup-past-acceptance", "subject": "source", "message": "a speed-up past the acceptance length"}, {"code": "speedup-past-acceptance", "subject": "source", "message": "a speed-up past the acceptance length"}, {"code": "speedup-past-acceptance", "subject": "source", "message": "a speed-up past the acceptance length"}, {"code": "speedup-past-acceptance", "subject": "source", "message": "a speed-up past the acceptance length"}, {"code": "speedup-past-acceptance", "subject": "source", "message": "a speed-up past the acceptance length"}, {"code": "speedup-past-acceptance", "subject": "source", "message": "a speed-up past the acceptance length"}]}',
    "ConcurrentPass": '{"concurrency": 2, "tokens": [32, 30, 32], "latencies": [1.0, 1.2, 0.9], "wall_seconds": 1.7, "drafts": 20, "accepted": 31, "output_tokens_per_second": {"value": 55.29412, "low": 35.09017, "high": 87.13094}, "acceptance_length": 2.55}',
    "ServerAcceptance": '{"server": "http://s:8000", "model": "m", "version": "0.32.0", "draft_tokens": 3, "settings": {"target": "targets/llama", "prompts": 3, "prompts_from": "prompts.jsonl", "draft_tokens": 3, "max_tokens": 96, "modes": [{"name": "greedy", "temperature": 0.0, "seed": 0}, {"name": "T=0.7", "temperature": 0.7, "seed": 3}], "dtype": "bfloat16", "seed": 3, "engine_args": {}, "more_draft_tokens": [], "target_alone_runs": 2, "concurrency": [], "schedule": []}, "modes": {"greedy": {"prompts": 3, "drafts": 31, "accepted": 52, "acceptance_length": {"value": 2.67742, "low": 1.47053, "high": 3.88431}, "per_position": [{"value": 0.77419, "low": 0.14729, "high": 0.98552}, {"value": 0.58065, "low": 0.1781, "high": 0.89845}, {"value": 0.32258, "low": 0.13639, "high": 0.58945}], "decode_tokens_per_second": 52.0}}, "window": null, "notes": [{"code": "one-server", "subject": "u", "message": "n"}], "clock": "engine", "ok": true}',
    "ServerAcceptance, window": '{"server": "http://s:8000", "model": "m", "version": "0.32.0", "draft_tokens": 3, "settings": null, "modes": {}, "window": {"seconds": 60.2, "drafts": 40, "draft_tokens": 120, "accepted": 50, "accepted_per_position": [30, 15, 5], "acceptance_length": 2.25, "per_position": [0.75, 0.375, 0.125]}, "notes": [], "clock": null, "ok": true}',
    "WindowCounts": '{"seconds": 60.2, "drafts": 40, "draft_tokens": 120, "accepted": 50, "accepted_per_position": [30, 15, 5], "acceptance_length": 2.25, "per_position": [0.75, 0.375, 0.125]}',
    "Prediction": '{"inputs": "captured.st", "rule": "greedy drafting, greedy target (temperature 0)", "source": {"prompts": 3, "drafts": 31, "accepted": 52, "acceptance_length": {"value": 2.67742, "low": 1.47053, "high": 3.88431}, "per_position": [{"value": 0.77419, "low": 0.14729, "high": 0.98552}, {"value": 0.58065, "low": 0.1781, "high": 0.89845}, {"value": 0.32258, "low": 0.13639, "high": 0.58945}]}, "quantized": {"prompts": 1, "drafts": 10, "accepted": 17, "acceptance_length": {"value": 2.7, "low": null, "high": null}, "per_position": [{"value": 0.8, "low": null, "high": null}, {"value": 0.6, "low": null, "high": null}, {"value": 0.3, "low": null, "high": null}]}, "difference": {"value": -0.01235, "low": null, "high": null}, "budget": 0.05, "outcome": "inconclusive", "failed": false, "more_sequences": null}',
    "Prediction, no budget": '{"inputs": "c", "rule": "greedy drafting, greedy target (temperature 0)", "source": {"prompts": 1, "drafts": 10, "accepted": 17, "acceptance_length": {"value": 2.7, "low": null, "high": null}, "per_position": [{"value": 0.8, "low": null, "high": null}, {"value": 0.6, "low": null, "high": null}, {"value": 0.3, "low": null, "high": null}]}, "quantized": {"prompts": 1, "drafts": 10, "accepted": 17, "acceptance_length": {"value": 2.7, "low": null, "high": null}, "per_position": [{"value": 0.8, "low": null, "high": null}, {"value": 0.6, "low": null, "high": null}, {"value": 0.3, "low": null, "high": null}]}, "difference": {"value": 0, "low": 0, "high": 0}, "budget": null, "outcome": null, "failed": false, "more_sequences": null}',
    "Prediction, by k": '{"inputs": "c", "rule": "greedy drafting, greedy target (temperature 0)", "source": {"prompts": 2, "drafts": 7, "accepted": 4, "acceptance_length": {"value": 1.57143, "low": 1.0, "high": 3.0}, "per_position": [{"value": 0.42857, "low": 2e-05, "high": 0.99997}, {"value": 0.14286, "low": 0.0, "high": 1.0}]}, "quantized": {"prompts": 2, "drafts": 7, "accepted": 3, "acceptance_length": {"value": 1.42857, "low": 1.0, "high": 3.0}, "per_position": [{"value": 0.28571, "low": 0.0, "high": 1.0}, {"value": 0.14286, "low": 0.0, "high": 1.0}]}, "difference": {"value": -0.14286, "low": -1.69869, "high": 1.41298}, "budget": 0.05, "outcome": "inconclusive", "failed": false, "more_sequences": 8, "sequences": 2, "positions": 12, "by_draft_tokens": [{"draft_tokens": 1, "source": {"value": 1.33333, "low": 1.0, "high": 2.0}, "quantized": {"value": 1.33333, "low": 1.0, "high": 2.0}, "difference": {"value": 0.0, "low": 0.0, "high": 0.0}}, {"draft_tokens": 2, "source": {"value": 1.57143, "low": 1.0, "high": 3.0}, "quantized": {"value": 1.42857, "low": 1.0, "high": 3.0}, "difference": {"value": -0.14286, "low": -1.69869, "high": 1.41298}}]}',
    "TableRow": '{"draft_tokens": 2, "source": {"value": 2.5, "low": 2.25, "high": 2.75}, "quantized": {"value": 2.4, "low": 2.1, "high": 2.7}, "difference": {"value": -0.1, "low": -0.2, "high": 0.0}}',
    "UploadOutcome, uploaded": '{"status": "uploaded", "repo_id": "org/fp8", "commit_url": "https://hub/c/1"}',
    "UploadOutcome, failed": '{"status": "failed", "repo_id": "org/fp8", "error": "refused"}',
    "JobOutcome": '{"name": "fp8", "source": "org/src", "destination": "out/fp8", "status": "converted", "reason": "", "exit_code": 0, "seconds": 3.142, "verified": true, "manifest_key": "abc123", "upload": null}',
    "BatchResult": '{"jobs_file": "jobs.toml", "jobs_sha256": "f00d", "eaglequant_version": "{version}", "shard": "1/2", "notes": [{"code": "hub-offline", "subject": "", "message": "offline"}], "job_names": ["fp8", "nvfp4"], "ok": false, "counts": {"converted": 2, "skipped": 0, "failed": 0, "uploaded": 1}, "jobs": [{"name": "fp8", "source": "org/src", "destination": "out/fp8", "status": "converted", "reason": "", "exit_code": 0, "seconds": 3.142, "verified": true, "manifest_key": "abc123", "upload": {"status": "uploaded", "repo_id": "org/fp8", "commit_url": "https://hub/c/1"}}, {"name": "fp8", "source": "org/src", "destination": "out/fp8", "status": "converted", "reason": "", "exit_code": 0, "seconds": 3.142, "verified": true, "manifest_key": "abc123", "upload": {"status": "failed", "repo_id": "org/fp8", "error": "refused", "exit_code": 3}}]}',
    "BatchResult, one shard": '{"jobs_file": "jobs.toml", "jobs_sha256": "f00d", "eaglequant_version": "{version}", "shard": null, "notes": [], "job_names": ["fp8"], "ok": true, "counts": {"converted": 0, "skipped": 0, "failed": 0, "uploaded": 0}, "jobs": []}',
    "MergedSummary": '{"jobs_file": "jobs.toml", "jobs_sha256": "f00d", "summaries": ["a.json", "b.json"], "job_names": ["fp8", "b"], "ok": false, "counts": {"converted": 1, "skipped": 0, "failed": 0, "uploaded": 0, "missing": 1}, "jobs": [{"name": "fp8", "source": "org/src", "destination": "out/fp8", "status": "converted", "reason": "", "exit_code": 0, "seconds": 3.142, "verified": true, "manifest_key": "abc123", "upload": null}, {"name": "b", "status": "missing", "reason": "no summary reports this job", "exit_code": null, "verified": null, "upload": null}]}',
    "Upload": '{"manifest_key": "abc123", "commit_url": null, "commit_oid": "0000000000000000000000000000000000000000"}',
    "KernelBench": '{"device": "H100", "copy_gbps": 3000.0, "rows": [{"shape": "fc", "m": 16, "n": 7168, "k": 21504, "kernel": "fp8-w8a8", "backend": "triton", "ms": 0.25, "tflops": 19.730006016, "gbps": 621.150208, "percent_of_copy_bandwidth": 20.705006933333333, "speedup_vs_bf16": 2.0}, {"shape": "fc", "m": 16, "n": 7168, "k": 21504, "kernel": "nvfp4-w4a16", "backend": "triton", "ms": 0.25, "tflops": 19.730006016, "gbps": 621.150208, "percent_of_copy_bandwidth": 20.705006933333333, "speedup_vs_bf16": 2.0}]}',
    "ConvertBench": '{"machine": {"cpu": "Xeon", "cores": 16, "memory_bytes": 137438953472, "python": "3.12.1", "torch": "2.13.0", "gpu": null, "vendors": {"amd-quark": "0.13", "llm-compressor": null}}, "workers": 4, "device": "cpu", "runs": [{"head": "tiny", "kind": "eaglequant", "scheme": "fp8", "wall_s": 1.5, "input_mb_per_s": 120.25, "peak_rss_bytes": 1073741824, "output_bytes": 1048576, "vs_copy": 1.25, "vs_anchors": {"amd-quark ptpc_fp8": 0.5}, "error": null}, {"head": "tiny", "kind": "amd-quark", "scheme": "ptpc_fp8", "wall_s": null, "input_mb_per_s": null, "peak_rss_bytes": null, "output_bytes": null, "vs_copy": null, "vs_anchors": {}, "error": "not installed"}]}',
    "SourceRef": '{"path": "/cache/snap", "repo_id": "org/src", "revision": "main", "commit": "ffffffffffffffffffffffffffffffffffffffff"}',
    "UploadResult": '{"destination": "out/fp8", "repo_id": "org/fp8", "revision": "main", "private": false, "dry_run": true, "files": {"model.safetensors": 100, "config.json": 20}, "total_bytes": 120, "verified": "passed", "forced": false, "commit_url": null, "commit_oid": null, "notes": [{"code": "dry-run", "subject": "", "message": "dry run"}]}',
    "UploadResult, unverified": '{"destination": "out/fp8", "repo_id": "org/fp8", "revision": "main", "private": false, "dry_run": true, "files": {"model.safetensors": 100, "config.json": 20}, "total_bytes": 120, "verified": null, "forced": false, "commit_url": null, "commit_oid": null, "notes": [{"code": "dry-run", "subject": "", "message": "dry run"}]}',
    "CaptureSummary": '{"path": "captured.safetensors", "sequences": 4, "positions": 512, "continuation_positions": 256, "aux_layer_ids": [2, 15, 28], "prompts_from": "prompts.jsonl"}',
    "LoadJob": '{"checkpoint": "/data/out/fp8", "source": null, "target_layers": null}',
    "LoadJob, with its source": '{"checkpoint": "/data/out/fp8", "source": "/data/src", "target_layers": 61}',
    "LoadCheck": '{"engine": "vllm", "version": "0.32.0", "checkpoint": "out/fp8", "ok": false, "loaded": true, "error": null, "problems": [{"code": "cannot-load", "subject": "", "message": "bad"}], "notes": [{"code": "postprocess-not-run", "subject": "", "message": "cpu"}], "patches": ["patch"], "unconsumed": ["x"], "modules": [{"runtime_module": "model.layers.32.qkv_proj", "quant_method": "Fp8LinearMethod", "quantized": true, "planned_quantized": true, "tensors": ["a.weight", "a.scale"], "values_equal": true, "unequal": [], "gemm_relative_error": 0.001}, {"runtime_module": "lm_head", "quant_method": null, "quantized": false, "planned_quantized": null, "tensors": ["lm_head.weight"], "values_equal": false, "unequal": [{"code": "value-differs", "subject": "lm_head.weight", "message": "weight: 3 values differ"}], "gemm_relative_error": null}]}',
    "TargetModel": '{"count": 32, "source": "--target-layers", "context": 131072}',
    "ConfigChange": '{"key": "max_position_embeddings", "source": 2048, "written": 131072, "reason": "the target\'s length"}',
    "PruneResult": '{"destination": "out/p", "source": "src", "source_draft_vocab_size": 32000, "draft_vocab_size": 8000, "counts_from": "captured.st", "special_tokens_kept": [0, 2], "coverage": 0.987654, "source_coverage": 0.991235, "lm_head_bytes": {"source": 1000, "pruned": 250}, "prediction": null}',
    "PruneResult, predicted": '{"destination": "out/p", "source": "src", "source_draft_vocab_size": 32000, "draft_vocab_size": 8000, "counts_from": "captured.st", "special_tokens_kept": [0, 2], "coverage": 0.987654, "source_coverage": 0.991235, "lm_head_bytes": {"source": 1000, "pruned": 250}, "prediction": {"inputs": "captured.st", "rule": "greedy drafting, greedy target (temperature 0)", "source": {"prompts": 3, "drafts": 31, "accepted": 52, "acceptance_length": {"value": 2.67742, "low": 1.47053, "high": 3.88431}, "per_position": [{"value": 0.77419, "low": 0.14729, "high": 0.98552}, {"value": 0.58065, "low": 0.1781, "high": 0.89845}, {"value": 0.32258, "low": 0.13639, "high": 0.58945}]}, "quantized": {"prompts": 1, "drafts": 10, "accepted": 17, "acceptance_length": {"value": 2.7, "low": null, "high": null}, "per_position": [{"value": 0.8, "low": null, "high": null}, {"value": 0.6, "low": null, "high": null}, {"value": 0.3, "low": null, "high": null}]}, "difference": {"value": -0.01235, "low": null, "high": null}, "budget": 0.05, "outcome": "inconclusive", "failed": false, "more_sequences": null}}',
    "RecordedLinear": '{"module": "fc", "shape": [4096, 12288], "relative_error": 0.0123, "sqnr_db": 38.25}',
    "DtypeTotal": '{"count": 7, "bytes": 1024}',
    "RecordedSource": '{"path": "/data/src", "repo_id": "org/src", "revision": "main", "commit": "ffffffffffffffffffffffffffffffffffffffff", "files": {"model.safetensors": "abababababababababababababababababababababababababababababababab"}}',
    "ManifestRecord": '{"key": "k3y", "source": {"path": "/data/src", "repo_id": "org/src", "revision": "main", "commit": "ffffffffffffffffffffffffffffffffffffffff", "files": {"model.safetensors": "abababababababababababababababababababababababababababababababab"}}, "options": {"scheme": "fp8", "engines": ["vllm"], "target_layers": null}}',
    "CardContext": '{"base_model": null, "draft": "org/src", "target": null, "license": {}}',
    "VerificationSummary": '{"ok": false, "verdict": "not verified numerically"}',
    "ConversionReport": '{"eaglequant_version": "{version}", "report_version": 5, "destination": "out/fp8", "source": "/data/src", "layout": "llama", "scheme": "fp8", "scheme_label": "W8A8 FP8", "scheme_kinds": ["fp8-channel", "fp8-token"], "scheme_toml": "name = \\"fp8\\"\\n", "attention": "mha", "format": "quark", "algorithm": "fp8_w8a8", "notes": [{"code": "no-calib-data", "subject": "fp8", "message": "a note"}], "calibrated_input_amax": {"fc": 3.5}, "engines": ["vllm", "sglang"], "target_layers": {"count": 32, "source": "--target-layers", "context": 131072}, "quantized": [{"module": "midlayer.mlp.down_proj", "shape": [4096, 14336], "relative_error": 0.0123, "sqnr_db": 38.25}], "kept": {"lm_head.weight": "an engine runs it unquantized"}, "excluded_linears": {"lm_head": "kept"}, "exclude": ["re:.*lm_head"], "tensor_dtypes": {"float8_e4m3fn": {"count": 7, "bytes": 1024}, "bfloat16": {"count": 2, "bytes": 64}}, "source_bytes": 4096, "output_bytes": 2048, "files": {"model.safetensors": "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"}, "copied_files": ["tokenizer.json"], "manifest": {"key": "k3y", "source": {"path": "/data/src", "repo_id": "org/src", "revision": "main", "commit": "ffffffffffffffffffffffffffffffffffffffff", "files": {"model.safetensors": "abababababababababababababababababababababababababababababababab"}}, "options": {"scheme": "fp8", "engines": ["vllm"], "target_layers": null}}, "card": {"base_model": "org/base", "draft": "org/src", "target": "org/target", "license": {"name": "llama3", "link": "https://l"}}, "verification": {"ok": true, "verdict": "passed"}, "round_costs": [{"engine": "vllm", "release": "0.32.0", "draft_tokens": 3, "bytes_per_round": 8596, "source_bytes_per_round": 15692, "reduction": 1.8255, "resident_bytes": 5596, "source_resident_bytes": 10692, "parts": [{"part": "fc", "reads_per_round": 1, "bytes_per_read": 4096, "source_bytes_per_read": 8192, "bytes_per_round": 4096, "source_bytes_per_round": 8192, "quantized": true, "shared_with_target": false}, {"part": "decoder", "reads_per_round": 3, "bytes_per_read": 1000, "source_bytes_per_read": 2000, "bytes_per_round": 3000, "source_bytes_per_round": 6000, "quantized": true, "shared_with_target": false}, {"part": "lm_head", "reads_per_round": 3, "bytes_per_read": 500, "source_bytes_per_read": 500, "bytes_per_round": 1500, "source_bytes_per_round": 1500, "quantized": false, "shared_with_target": true}], "model": "a bandwidth model of small-batch decoding (weights read per speculative round: fc once, decoder linears, norms and lm_head k times, k + 1 embedding rows), not a measured time"}], "config_changes": [{"key": "max_position_embeddings", "source": 2048, "written": 131072, "reason": "the target\'s length"}], "own_schemes": {"lm_head": "name = \\"fp8-block\\"\\n"}}',
    "ConversionReport, version 3": '{"eaglequant_version": "{version}", "report_version": 3, "destination": "out/fp8", "source": "/data/src", "layout": "llama", "scheme": "fp8", "scheme_label": "W8A8 FP8", "scheme_kinds": ["fp8-channel", "fp8-token"], "scheme_toml": "name = \\"fp8\\"\\n", "attention": "mha", "format": "quark", "algorithm": "fp8_w8a8", "notes": ["a note"], "calibrated_input_amax": {"fc": 3.5}, "engines": ["vllm", "sglang"], "target_layers": {"count": 32, "source": "--target-layers"}, "quantized": [{"module": "midlayer.mlp.down_proj", "shape": [4096, 14336], "relative_error": 0.0123, "sqnr_db": 38.25}], "kept": {"lm_head.weight": "an engine runs it unquantized"}, "excluded_linears": {"lm_head": "kept"}, "exclude": ["re:.*lm_head"], "tensor_dtypes": {"float8_e4m3fn": {"count": 7, "bytes": 1024}, "bfloat16": {"count": 2, "bytes": 64}}, "source_bytes": 4096, "output_bytes": 2048, "files": {"model.safetensors": "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"}, "copied_files": ["tokenizer.json"], "manifest": {"key": "k3y", "source": {"path": "/data/src", "repo_id": "org/src", "revision": "main", "commit": "ffffffffffffffffffffffffffffffffffffffff", "files": {"model.safetensors": "abababababababababababababababababababababababababababababababab"}}, "options": {"scheme": "fp8", "engines": ["vllm"], "target_layers": null}}, "card": {"base_model": "org/base", "draft": "org/src", "target": "org/target", "license": {"name": "llama3", "link": "https://l"}}, "verification": {"ok": true, "verdict": "passed"}, "round_costs": [{"engine": "vllm", "release": "0.32.0", "draft_tokens": 3, "bytes_per_round": 8596, "source_bytes_per_round": 15692, "reduction": 1.8255, "resident_bytes": 5596, "source_resident_bytes": 10692, "parts": [{"part": "fc", "reads_per_round": 1, "bytes_per_read": 4096, "source_bytes_per_read": 8192, "bytes_per_round": 4096, "source_bytes_per_round": 8192, "quantized": true, "shared_with_target": false}, {"part": "decoder", "reads_per_round": 3, "bytes_per_read": 1000, "source_bytes_per_read": 2000, "bytes_per_round": 3000, "source_bytes_per_round": 6000, "quantized": true, "shared_with_target": false}, {"part": "lm_head", "reads_per_round": 3, "bytes_per_read": 500, "source_bytes_per_read": 500, "bytes_per_round": 1500, "source_bytes_per_round": 1500, "quantized": false, "shared_with_target": true}], "model": "a bandwidth model of small-batch decoding (weights read per speculative round: fc once, decoder linears, norms and lm_head k times, k + 1 embedding rows), not a measured time"}]}',
    "ConversionReport, version 1": '{"eaglequant_version": "{version}", "destination": "out/fp8", "source": "/data/src", "layout": "llama", "scheme": "fp8", "scheme_label": "W8A8 FP8", "scheme_kinds": ["fp8-channel", "fp8-token"], "scheme_toml": "name = \\"fp8\\"\\n", "attention": "mha", "format": "quark", "algorithm": "fp8_w8a8", "notes": ["a note"], "calibrated_input_amax": {"fc": 3.5}, "engines": ["vllm", "sglang"], "target_layers": {"count": 32, "source": "--target-layers"}, "quantized": [{"module": "midlayer.mlp.down_proj", "shape": [4096, 14336], "relative_error": 0.0123, "sqnr_db": 38.25}], "kept": {"lm_head.weight": "an engine runs it unquantized"}, "excluded_linears": {"lm_head": "kept"}, "exclude": ["re:.*lm_head"], "tensor_dtypes": {"float8_e4m3fn": {"count": 7, "bytes": 1024}, "bfloat16": {"count": 2, "bytes": 64}}, "source_bytes": 4096, "output_bytes": 2048, "files": {"model.safetensors": "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"}, "copied_files": ["tokenizer.json"], "manifest": {}, "card": {}}',
    "PartCost": '{"part": "lm_head", "reads_per_round": 3, "bytes_per_read": 500, "source_bytes_per_read": 500, "bytes_per_round": 1500, "source_bytes_per_round": 1500, "quantized": false, "shared_with_target": true}',
    "RoundCost": '{"engine": "vllm", "release": "0.32.0", "draft_tokens": 3, "bytes_per_round": 8596, "source_bytes_per_round": 15692, "reduction": 1.8255, "resident_bytes": 5596, "source_resident_bytes": 10692, "parts": [{"part": "fc", "reads_per_round": 1, "bytes_per_read": 4096, "source_bytes_per_read": 8192, "bytes_per_round": 4096, "source_bytes_per_round": 8192, "quantized": true, "shared_with_target": false}, {"part": "decoder", "reads_per_round": 3, "bytes_per_read": 1000, "source_bytes_per_read": 2000, "bytes_per_round": 3000, "source_bytes_per_round": 6000, "quantized": true, "shared_with_target": false}, {"part": "lm_head", "reads_per_round": 3, "bytes_per_read": 500, "source_bytes_per_read": 500, "bytes_per_round": 1500, "source_bytes_per_round": 1500, "quantized": false, "shared_with_target": true}], "model": "a bandwidth model of small-batch decoding (weights read per speculative round: fc once, decoder linears, norms and lm_head k times, k + 1 embedding rows), not a measured time"}',
    "ExpectedTensor": '{"name": "fc.weight_scale", "dtype": "float32", "shape": [4096, 1], "found": "missing"}',
    "ModuleReading": '{"runtime_module": "lm_head", "members": ["lm_head"], "rule": "re:.*lm_head", "scheme": null, "unquantized_because": "excluded", "engine_reason": "runs it bf16", "expects": [], "problems": [{"code": "not-expected", "subject": "lm_head.weight", "message": "lm_head.weight: not expected"}]}',
    "EngineReading": '{"engine": "vllm", "title": "vLLM", "loads": true, "judged": true, "release": "0.32.0", "note": "loads", "notes": [{"code": "rocm-aiter-mla", "subject": "kv_b_proj", "message": "a note"}], "problems": [], "modules": [{"runtime_module": "model.fc", "members": ["fc"], "rule": null, "scheme": "W8A8 fp8-channel", "unquantized_because": null, "engine_reason": null, "expects": [{"name": "fc.weight", "dtype": "float8_e4m3fn", "shape": [4096, 12288], "found": "ok"}, {"name": "fc.weight_scale", "dtype": "float32", "shape": [4096, 1], "found": "missing"}], "problems": []}, {"runtime_module": "lm_head", "members": ["lm_head"], "rule": "re:.*lm_head", "scheme": null, "unquantized_because": "excluded", "engine_reason": "runs it bf16", "expects": [], "problems": [{"code": "not-expected", "subject": "lm_head.weight", "message": "lm_head.weight: not expected"}]}], "round_cost": {"engine": "vllm", "release": "0.32.0", "draft_tokens": 3, "bytes_per_round": 8596, "source_bytes_per_round": 15692, "reduction": 1.8255, "resident_bytes": 5596, "source_resident_bytes": 10692, "parts": [{"part": "fc", "reads_per_round": 1, "bytes_per_read": 4096, "source_bytes_per_read": 8192, "bytes_per_round": 4096, "source_bytes_per_round": 8192, "quantized": true, "shared_with_target": false}, {"part": "decoder", "reads_per_round": 3, "bytes_per_read": 1000, "source_bytes_per_read": 2000, "bytes_per_round": 3000, "source_bytes_per_round": 6000, "quantized": true, "shared_with_target": false}, {"part": "lm_head", "reads_per_round": 3, "bytes_per_read": 500, "source_bytes_per_read": 500, "bytes_per_round": 1500, "source_bytes_per_round": 1500, "quantized": false, "shared_with_target": true}], "model": "a bandwidth model of small-batch decoding (weights read per speculative round: fc once, decoder linears, norms and lm_head k times, k + 1 embedding rows), not a measured time"}}',
    "Explanation": '{"destination": "out/fp8", "format": "quark", "scheme": "W8A8 FP8", "kinds": ["fp8-channel", "fp8-token"], "exclude": ["re:.*lm_head"], "target_layers": {"count": null, "source": "the draft\'s config", "context": null}, "ok": false, "problems": [{"code": "config-contradiction", "subject": "config.json", "message": "config contradicts itself"}, {"code": "not-expected", "subject": "lm_head.weight", "message": "vLLM: lm_head.weight: not expected"}, {"code": "cannot-load", "subject": "", "message": "SGLang: cannot load"}], "engines": [{"engine": "vllm", "title": "vLLM", "loads": true, "judged": true, "release": "0.32.0", "note": "loads", "notes": [{"code": "rocm-aiter-mla", "subject": "kv_b_proj", "message": "a note"}], "problems": [], "modules": [{"runtime_module": "model.fc", "members": ["fc"], "rule": null, "scheme": "W8A8 fp8-channel", "unquantized_because": null, "engine_reason": null, "expects": [{"name": "fc.weight", "dtype": "float8_e4m3fn", "shape": [4096, 12288], "found": "ok"}, {"name": "fc.weight_scale", "dtype": "float32", "shape": [4096, 1], "found": "missing"}], "problems": []}, {"runtime_module": "lm_head", "members": ["lm_head"], "rule": "re:.*lm_head", "scheme": null, "unquantized_because": "excluded", "engine_reason": "runs it bf16", "expects": [], "problems": [{"code": "not-expected", "subject": "lm_head.weight", "message": "lm_head.weight: not expected"}]}], "round_cost": {"engine": "vllm", "release": "0.32.0", "draft_tokens": 3, "bytes_per_round": 8596, "source_bytes_per_round": 15692, "reduction": 1.8255, "resident_bytes": 5596, "source_resident_bytes": 10692, "parts": [{"part": "fc", "reads_per_round": 1, "bytes_per_read": 4096, "source_bytes_per_read": 8192, "bytes_per_round": 4096, "source_bytes_per_round": 8192, "quantized": true, "shared_with_target": false}, {"part": "decoder", "reads_per_round": 3, "bytes_per_read": 1000, "source_bytes_per_read": 2000, "bytes_per_round": 3000, "source_bytes_per_round": 6000, "quantized": true, "shared_with_target": false}, {"part": "lm_head", "reads_per_round": 3, "bytes_per_read": 500, "source_bytes_per_read": 500, "bytes_per_round": 1500, "source_bytes_per_round": 1500, "quantized": false, "shared_with_target": true}], "model": "a bandwidth model of small-batch decoding (weights read per speculative round: fc once, decoder linears, norms and lm_head k times, k + 1 embedding rows), not a measured time"}}, {"engine": "sglang", "title": "SGLang", "loads": false, "judged": false, "release": "0.5.23", "note": "no", "notes": [], "problems": [{"code": "cannot-load", "subject": "", "message": "cannot load"}], "modules": [], "round_cost": null}]}',
    "SchemeRow": '{"name": "fp8", "label": "W8A8 FP8", "summary": "FP8 per channel", "file": "schemes/fp8.toml", "formats": [{"format": "quark", "algorithm": "fp8_w8a8", "engines": {"vllm": {"loads": true, "conditional": true, "note": "loads", "needs_target_layers": true, "where": "W4A4 on Blackwell"}, "sglang": null}}, {"format": "fp8", "algorithm": null, "engines": {"vllm": null}}]}',
    "ModuleRow": '{"engine": "vllm", "release": "vLLM 0.32.0", "format": "quark", "loads": true, "lm_head": {"llama": {"yes": true, "why": "vllm/model_executor/models/llama_eagle3.py"}, "mla": {"yes": false, "why": "no MLA"}}, "fc": {"llama": {"yes": true, "why": "vllm/model_executor/models/llama_eagle3.py"}, "mla": {"yes": false, "why": "no MLA"}}, "module_kinds": {"llama": {"yes": true, "why": "vllm/model_executor/models/llama_eagle3.py"}, "mla": {"yes": false, "why": "no MLA"}}, "pruned_vocabulary": {"llama": {"yes": true, "why": "vllm/model_executor/models/llama_eagle3.py"}, "mla": {"yes": false, "why": "no MLA"}}}',
    "InspectReport": '{"source": "fixtures/specforge-llama", "source_format": "safetensors", "files": ["model.safetensors"], "layout": "specforge-llama", "layout_title": "SpecForge / TorchSpec Llama", "reason": "midlayer.* tensors with Llama attention (q_proj/k_proj/v_proj)", "attention": "mha", "num_layers": 1, "features": ["embed_tokens", "lm_head", "d2t", "t2d"], "dims": {"hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 512, "draft_vocab_size": 256, "target_hidden_size": 128, "num_aux_hidden_states": 3}, "fused_groups": {"layers.0.self_attn.qkv_proj": ["layers.0.self_attn.q_proj", "layers.0.self_attn.k_proj", "layers.0.self_attn.v_proj"], "layers.0.mlp.gate_up_proj": ["layers.0.mlp.gate_proj", "layers.0.mlp.up_proj"]}, "scheme": "fp8-per-channel", "scheme_for": {}, "format": "quark", "engines": ["vllm", "sglang"], "tensors": [{"name": "d2t", "dtype": "I64", "shape": [256], "bytes": 2048, "file": "model.safetensors", "role": "vocab_map", "action": "keep", "reason": "vocabulary map (copied as is)"}, {"name": "embed_tokens.weight", "dtype": "BF16", "shape": [512, 128], "bytes": 131072, "file": "model.safetensors", "role": "embedding", "action": "keep", "reason": "embedding (never quantized)"}, {"name": "fc.weight", "dtype": "BF16", "shape": [128, 384], "bytes": 98304, "file": "model.safetensors", "role": "linear", "action": "keep", "reason": "SGLang builds a Llama draft\'s fc as a plain torch.nn.Linear (models/llama_eagle3.py)"}, {"name": "lm_head.weight", "dtype": "BF16", "shape": [256, 128], "bytes": 65536, "file": "model.safetensors", "role": "linear", "action": "keep", "reason": "vLLM\'s AMD Quark config gives the ParallelLMHead no quantization method"}, {"name": "midlayer.hidden_norm.weight", "dtype": "BF16", "shape": [128], "bytes": 256, "file": "model.safetensors", "role": "norm", "action": "keep", "reason": "norm (never quantized)"}, {"name": "midlayer.input_layernorm.weight", "dtype": "BF16", "shape": [128], "bytes": 256, "file": "model.safetensors", "role": "norm", "action": "keep", "reason": "norm (never quantized)"}, {"name": "midlayer.mlp.down_proj.weight", "dtype": "BF16", "shape": [128, 256], "bytes": 65536, "file": "model.safetensors", "role": "linear", "action": "quantize", "reason": ""}, {"name": "midlayer.mlp.gate_proj.weight", "dtype": "BF16", "shape": [256, 128], "bytes": 65536, "file": "model.safetensors", "role": "linear", "action": "quantize", "reason": ""}, {"name": "midlayer.mlp.up_proj.weight", "dtype": "BF16", "shape": [256, 128], "bytes": 65536, "file": "model.safetensors", "role": "linear", "action": "quantize", "reason": ""}, {"name": "midlayer.post_attention_layernorm.weight", "dtype": "BF16", "shape": [128], "bytes": 256, "file": "model.safetensors", "role": "norm", "action": "keep", "reason": "norm (never quantized)"}, {"name": "midlayer.self_attn.k_proj.weight", "dtype": "BF16", "shape": [64, 256], "bytes": 32768, "file": "model.safetensors", "role": "linear", "action": "quantize", "reason": ""}, {"name": "midlayer.self_attn.o_proj.weight", "dtype": "BF16", "shape": [128, 128], "bytes": 32768, "file": "model.safetensors", "role": "linear", "action": "quantize", "reason": ""}, {"name": "midlayer.self_attn.q_proj.weight", "dtype": "BF16", "shape": [128, 256], "bytes": 65536, "file": "model.safetensors", "role": "linear", "action": "quantize", "reason": ""}, {"name": "midlayer.self_attn.v_proj.weight", "dtype": "BF16", "shape": [64, 256], "bytes": 32768, "file": "model.safetensors", "role": "linear", "action": "quantize", "reason": ""}, {"name": "norm.weight", "dtype": "BF16", "shape": [128], "bytes": 256, "file": "model.safetensors", "role": "norm", "action": "keep", "reason": "norm (never quantized)"}, {"name": "t2d", "dtype": "BOOL", "shape": [512], "bytes": 512, "file": "model.safetensors", "role": "vocab_map", "action": "keep", "reason": "vocabulary map (copied as is)"}], "exclude": ["re:^model\\\\.fc$", "re:^lm_head$"], "target_layers": {"count": null, "source": "unknown: rules are written for any target layer count", "context": null}, "runtime_modules": [{"engine": "vllm", "module": "model.fc", "quantized": false, "rule": "re:^model\\\\.fc$", "engine_reason": null}, {"engine": "vllm", "module": "lm_head", "quantized": false, "rule": "re:^lm_head$", "engine_reason": "vLLM\'s AMD Quark config gives the ParallelLMHead no quantization method"}, {"engine": "vllm", "module": "model.layers.{L}.self_attn.qkv_proj", "quantized": true, "rule": null, "engine_reason": null}, {"engine": "vllm", "module": "model.layers.{L}.mlp.gate_up_proj", "quantized": true, "rule": null, "engine_reason": null}, {"engine": "vllm", "module": "model.layers.{L}.mlp.down_proj", "quantized": true, "rule": null, "engine_reason": null}, {"engine": "vllm", "module": "model.layers.{L}.self_attn.o_proj", "quantized": true, "rule": null, "engine_reason": null}, {"engine": "sglang", "module": "model.fc", "quantized": false, "rule": "re:^model\\\\.fc$", "engine_reason": "SGLang builds a Llama draft\'s fc as a plain torch.nn.Linear (models/llama_eagle3.py)"}, {"engine": "sglang", "module": "lm_head", "quantized": false, "rule": "re:^lm_head$", "engine_reason": "SGLang\'s AMD Quark config gives the ParallelLMHead no quantization method"}, {"engine": "sglang", "module": "model.qkv_proj", "quantized": true, "rule": null, "engine_reason": null}, {"engine": "sglang", "module": "model.gate_up_proj", "quantized": true, "rule": null, "engine_reason": null}, {"engine": "sglang", "module": "model.down_proj", "quantized": true, "rule": null, "engine_reason": null}, {"engine": "sglang", "module": "model.self_attn.o_proj", "quantized": true, "rule": null, "engine_reason": null}], "source_bytes": 658944, "estimated_output_bytes": 482816, "round_costs": [{"engine": "vllm", "release": "0.32.0", "draft_tokens": 2, "bytes_per_round": 600832, "source_bytes_per_round": 953088, "reduction": 1.5863, "resident_bytes": 482304, "source_resident_bytes": 658432, "parts": [{"part": "fc", "reads_per_round": 1, "bytes_per_read": 98304, "source_bytes_per_read": 98304, "bytes_per_round": 98304, "source_bytes_per_round": 98304, "quantized": false, "shared_with_target": false}, {"part": "decoder", "reads_per_round": 2, "bytes_per_read": 184320, "source_bytes_per_read": 360448, "bytes_per_round": 368640, "source_bytes_per_round": 720896, "quantized": true, "shared_with_target": false}, {"part": "lm_head", "reads_per_round": 2, "bytes_per_read": 65536, "source_bytes_per_read": 65536, "bytes_per_round": 131072, "source_bytes_per_round": 131072, "quantized": false, "shared_with_target": false}, {"part": "embedding", "reads_per_round": 3, "bytes_per_read": 256, "source_bytes_per_read": 256, "bytes_per_round": 768, "source_bytes_per_round": 768, "quantized": false, "shared_with_target": false}, {"part": "norms", "reads_per_round": 2, "bytes_per_read": 1024, "source_bytes_per_read": 1024, "bytes_per_round": 2048, "source_bytes_per_round": 2048, "quantized": false, "shared_with_target": false}], "model": "a bandwidth model of small-batch decoding (weights read per speculative round: fc once, decoder linears, norms and lm_head k times, k + 1 embedding rows), not a measured time"}, {"engine": "sglang", "release": "0.5.23", "draft_tokens": 2, "bytes_per_round": 600832, "source_bytes_per_round": 953088, "reduction": 1.5863, "resident_bytes": 482304, "source_resident_bytes": 658432, "parts": [{"part": "fc", "reads_per_round": 1, "bytes_per_read": 98304, "source_bytes_per_read": 98304, "bytes_per_round": 98304, "source_bytes_per_round": 98304, "quantized": false, "shared_with_target": false}, {"part": "decoder", "reads_per_round": 2, "bytes_per_read": 184320, "source_bytes_per_read": 360448, "bytes_per_round": 368640, "source_bytes_per_round": 720896, "quantized": true, "shared_with_target": false}, {"part": "lm_head", "reads_per_round": 2, "bytes_per_read": 65536, "source_bytes_per_read": 65536, "bytes_per_round": 131072, "source_bytes_per_round": 131072, "quantized": false, "shared_with_target": false}, {"part": "embedding", "reads_per_round": 3, "bytes_per_read": 256, "source_bytes_per_read": 256, "bytes_per_round": 768, "source_bytes_per_round": 768, "quantized": false, "shared_with_target": false}, {"part": "norms", "reads_per_round": 2, "bytes_per_read": 1024, "source_bytes_per_read": 1024, "bytes_per_round": 2048, "source_bytes_per_round": 2048, "quantized": false, "shared_with_target": false}], "model": "a bandwidth model of small-batch decoding (weights read per speculative round: fc once, decoder linears, norms and lm_head k times, k + 1 embedding rows), not a measured time"}]}',
    "ConversionReport, timed (convert --json)": '{"eaglequant_version": "{version}", "report_version": 5, "destination": "out/fp8", "source": "src", "layout": "specforge-llama", "scheme": "fp8-per-channel", "scheme_label": "W8A8", "scheme_kinds": ["fp8-channel", "fp8-token"], "scheme_toml": "name = \\"fp8-per-channel\\"\\nsummary = \\"FP8 E4M3 weights, one scale per output channel; activations FP8 per token at run time (W8A8)\\"\\n\\n[weight]\\ndtype = \\"fp8_e4m3\\"\\ngranularity = \\"channel\\"\\nscale_dtype = \\"float32\\"\\nglobal_scale = false\\n\\n[activation]\\ndtype = \\"fp8_e4m3\\"\\ngranularity = \\"token\\"\\nscale_dtype = \\"float32\\"\\nglobal_scale = false\\ndynamic = true\\n\\n[verify]\\nmin_sqnr_db = 25.0\\nmin_cosine = 0.995\\nmax_relative_error = 0.06\\nmax_block_relative_error = 0.08\\nmax_mean_tv = 0.11\\nmin_top1_agreement = 0.9\\nmax_mean_kl = 0.05\\nmax_acceptance_drop = 0.05\\n", "attention": "mha", "format": "quark", "algorithm": "ptpc_fp8", "notes": [], "calibrated_input_amax": {}, "engines": ["vllm", "sglang"], "target_layers": {"count": null, "source": "unknown: rules are written for any target layer count", "context": null}, "quantized": [{"module": "midlayer.mlp.down_proj", "shape": [128, 256], "relative_error": 0.0123, "sqnr_db": 38.25}], "kept": {"d2t": "vocabulary map (copied as is)", "embed_tokens.weight": "embedding (never quantized)", "fc.weight": "SGLang builds a Llama draft\'s fc as a plain torch.nn.Linear (models/llama_eagle3.py)", "lm_head.weight": "vLLM\'s AMD Quark config gives the ParallelLMHead no quantization method", "midlayer.hidden_norm.weight": "norm (never quantized)", "midlayer.input_layernorm.weight": "norm (never quantized)", "midlayer.post_attention_layernorm.weight": "norm (never quantized)", "norm.weight": "norm (never quantized)", "t2d": "vocabulary map (copied as is)"}, "excluded_linears": {"fc.weight": "SGLang builds a Llama draft\'s fc as a plain torch.nn.Linear (models/llama_eagle3.py)", "lm_head.weight": "vLLM\'s AMD Quark config gives the ParallelLMHead no quantization method"}, "exclude": ["re:^model\\\\.fc$", "re:^lm_head$"], "tensor_dtypes": {"BF16": {"count": 7, "bytes": 295936}, "BOOL": {"count": 1, "bytes": 512}, "F32": {"count": 7, "bytes": 4096}, "F8_E4M3": {"count": 7, "bytes": 180224}, "I64": {"count": 1, "bytes": 2048}}, "source_bytes": 4096, "output_bytes": 2048, "files": {"model.safetensors": "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"}, "copied_files": ["t.json"], "manifest": {}, "card": {}, "verification": null, "round_costs": [{"engine": "vllm", "release": "0.32.0", "draft_tokens": 3, "bytes_per_round": 851968, "source_bytes_per_round": 1380352, "reduction": 1.6202, "resident_bytes": 482304, "source_resident_bytes": 658432, "parts": [{"part": "fc", "reads_per_round": 1, "bytes_per_read": 98304, "source_bytes_per_read": 98304, "bytes_per_round": 98304, "source_bytes_per_round": 98304, "quantized": false, "shared_with_target": false}, {"part": "decoder", "reads_per_round": 3, "bytes_per_read": 184320, "source_bytes_per_read": 360448, "bytes_per_round": 552960, "source_bytes_per_round": 1081344, "quantized": true, "shared_with_target": false}, {"part": "lm_head", "reads_per_round": 3, "bytes_per_read": 65536, "source_bytes_per_read": 65536, "bytes_per_round": 196608, "source_bytes_per_round": 196608, "quantized": false, "shared_with_target": false}, {"part": "embedding", "reads_per_round": 4, "bytes_per_read": 256, "source_bytes_per_read": 256, "bytes_per_round": 1024, "source_bytes_per_round": 1024, "quantized": false, "shared_with_target": false}, {"part": "norms", "reads_per_round": 3, "bytes_per_read": 1024, "source_bytes_per_read": 1024, "bytes_per_round": 3072, "source_bytes_per_round": 3072, "quantized": false, "shared_with_target": false}], "model": "a bandwidth model of small-batch decoding (weights read per speculative round: fc once, decoder linears, norms and lm_head k times, k + 1 embedding rows), not a measured time"}, {"engine": "sglang", "release": "0.5.23", "draft_tokens": 3, "bytes_per_round": 851968, "source_bytes_per_round": 1380352, "reduction": 1.6202, "resident_bytes": 482304, "source_resident_bytes": 658432, "parts": [{"part": "fc", "reads_per_round": 1, "bytes_per_read": 98304, "source_bytes_per_read": 98304, "bytes_per_round": 98304, "source_bytes_per_round": 98304, "quantized": false, "shared_with_target": false}, {"part": "decoder", "reads_per_round": 3, "bytes_per_read": 184320, "source_bytes_per_read": 360448, "bytes_per_round": 552960, "source_bytes_per_round": 1081344, "quantized": true, "shared_with_target": false}, {"part": "lm_head", "reads_per_round": 3, "bytes_per_read": 65536, "source_bytes_per_read": 65536, "bytes_per_round": 196608, "source_bytes_per_round": 196608, "quantized": false, "shared_with_target": false}, {"part": "embedding", "reads_per_round": 4, "bytes_per_read": 256, "source_bytes_per_read": 256, "bytes_per_round": 1024, "source_bytes_per_round": 1024, "quantized": false, "shared_with_target": false}, {"part": "norms", "reads_per_round": 3, "bytes_per_read": 1024, "source_bytes_per_read": 1024, "bytes_per_round": 3072, "source_bytes_per_round": 3072, "quantized": false, "shared_with_target": false}], "model": "a bandwidth model of small-batch decoding (weights read per speculative round: fc once, decoder linears, norms and lm_head k times, k + 1 embedding rows), not a measured time"}], "config_changes": [], "own_schemes": {}, "seconds": 1.235}',
    "SearchRow": '{"candidate": "fp8-per-channel / quark", "scheme": "fp8-per-channel", "format": "quark", "lm_head_quantized": false, "lm_head_scheme": null, "draft_vocab_size": null, "bytes_per_round": 2000, "predicted": null, "within_budget": null, "sequences_predicted": null, "positions_predicted": null}',
    "SearchRow, lm_head in the decoder's scheme": '{"candidate": "fp8-block / quark + lm_head", "scheme": "fp8-block", "format": "quark", "lm_head_quantized": true, "lm_head_scheme": "fp8-block", "draft_vocab_size": null, "bytes_per_round": 1500, "predicted": null, "within_budget": null, "sequences_predicted": null, "positions_predicted": null}',
    "SearchSequential": '{"looks": [2, 4, 8, 16, 24], "interim_confidence": 0.99, "error_rate": 0.05, "text": "sequential: each candidate is looked at after 2, 4, 8, 16, 24 sequences; an interim look stops it when the change\'s 99.0% interval (5% over 5 looks, Bonferroni) lies wholly within or wholly past the budget, so the chance that any early stop is wrong is at most 5%; the last look is the one gate on the 95% interval"}',
    "SearchRecord": '{"source": "src", "destination": "out/best", "pruned_source": "out/best-vocab8000-bf16", "engines": ["vllm", "sglang"], "loaded_by": ["vllm"], "skipped": {"needs-layer-count": 2}, "notes": [{"code": "needs-layer-count", "subject": "", "message": "2 candidates were skipped for want of the target\'s layer count (--target-layers N): their rules or per-module entries name modules after the target\'s layers"}, {"code": "pruned-source-kept", "subject": "out/best-vocab8000-bf16", "message": "the pruned BF16 source out/best-vocab8000-bf16 was left beside the chosen draft: it is the source the draft\'s report records (verify and upload compare against it), so keep it with the draft"}], "budget": {"value": 0.05, "relative": true, "rule": "bound", "tokens": 0.13, "text": "a drop of at most 5.0% of the source\'s accepted tokens (0.130 tokens) of greedy acceptance length, judged on the drop\'s 95% upper bound"}, "source_acceptance_length": 2.67, "source_bytes_per_round": 4000, "chosen": {"candidate": "nvfp4 / modelopt + lm_head fp8-per-channel, vocab 8000", "scheme": "nvfp4", "format": "modelopt", "lm_head_quantized": true, "lm_head_scheme": "fp8-per-channel", "draft_vocab_size": 8000, "bytes_per_round": 1000, "predicted": {"inputs": "captured.st", "rule": "greedy drafting, greedy target (temperature 0)", "source": {"prompts": 3, "drafts": 31, "accepted": 52, "acceptance_length": {"value": 2.67742, "low": 1.47053, "high": 3.88431}, "per_position": [{"value": 0.77419, "low": 0.14729, "high": 0.98552}, {"value": 0.58065, "low": 0.1781, "high": 0.89845}, {"value": 0.32258, "low": 0.13639, "high": 0.58945}]}, "quantized": {"prompts": 1, "drafts": 10, "accepted": 17, "acceptance_length": {"value": 2.7, "low": null, "high": null}, "per_position": [{"value": 0.8, "low": null, "high": null}, {"value": 0.6, "low": null, "high": null}, {"value": 0.3, "low": null, "high": null}]}, "difference": {"value": -0.01235, "low": null, "high": null}, "budget": 0.05, "outcome": "inconclusive", "failed": false, "more_sequences": null}, "within_budget": true, "sequences_predicted": null, "positions_predicted": null}, "stopped": "the smallest within the budget: 1 predicted from the smallest up; the 2 larger need no prediction", "seconds": 12.3, "frontier": [{"candidate": "nvfp4 / modelopt + lm_head fp8-per-channel, vocab 8000", "scheme": "nvfp4", "format": "modelopt", "lm_head_quantized": true, "lm_head_scheme": "fp8-per-channel", "draft_vocab_size": 8000, "bytes_per_round": 1000, "predicted": {"inputs": "captured.st", "rule": "greedy drafting, greedy target (temperature 0)", "source": {"prompts": 3, "drafts": 31, "accepted": 52, "acceptance_length": {"value": 2.67742, "low": 1.47053, "high": 3.88431}, "per_position": [{"value": 0.77419, "low": 0.14729, "high": 0.98552}, {"value": 0.58065, "low": 0.1781, "high": 0.89845}, {"value": 0.32258, "low": 0.13639, "high": 0.58945}]}, "quantized": {"prompts": 1, "drafts": 10, "accepted": 17, "acceptance_length": {"value": 2.7, "low": null, "high": null}, "per_position": [{"value": 0.8, "low": null, "high": null}, {"value": 0.6, "low": null, "high": null}, {"value": 0.3, "low": null, "high": null}]}, "difference": {"value": -0.01235, "low": null, "high": null}, "budget": 0.05, "outcome": "inconclusive", "failed": false, "more_sequences": null}, "within_budget": true, "sequences_predicted": null, "positions_predicted": null}, {"candidate": "fp8-block / quark + lm_head", "scheme": "fp8-block", "format": "quark", "lm_head_quantized": true, "lm_head_scheme": "fp8-block", "draft_vocab_size": null, "bytes_per_round": 1500, "predicted": null, "within_budget": null, "sequences_predicted": null, "positions_predicted": null}, {"candidate": "fp8-per-channel / quark", "scheme": "fp8-per-channel", "format": "quark", "lm_head_quantized": false, "lm_head_scheme": null, "draft_vocab_size": null, "bytes_per_round": 2000, "predicted": null, "within_budget": null, "sequences_predicted": null, "positions_predicted": null}], "sequential": null, "max_draft_tokens": 8, "objective": "bytes", "speedup": null}',
    "SearchRecord, none chosen": '{"source": "src", "destination": null, "pruned_source": null, "engines": ["vllm", "sglang"], "loaded_by": ["vllm"], "skipped": {"needs-layer-count": 2}, "notes": [{"code": "needs-layer-count", "subject": "", "message": "2 candidates were skipped for want of the target\'s layer count (--target-layers N): their rules or per-module entries name modules after the target\'s layers"}], "budget": {"value": 0.05, "relative": true, "rule": "bound", "tokens": 0.13, "text": "a drop of at most 5.0% of the source\'s accepted tokens (0.130 tokens) of greedy acceptance length, judged on the drop\'s 95% upper bound"}, "source_acceptance_length": 2.67, "source_bytes_per_round": 4000, "chosen": null, "stopped": "no candidate is within the budget: all 1 predicted", "seconds": 12.3, "frontier": [{"candidate": "nvfp4 / modelopt + lm_head fp8-per-channel, vocab 8000", "scheme": "nvfp4", "format": "modelopt", "lm_head_quantized": true, "lm_head_scheme": "fp8-per-channel", "draft_vocab_size": 8000, "bytes_per_round": 1000, "predicted": {"inputs": "captured.st", "rule": "greedy drafting, greedy target (temperature 0)", "source": {"prompts": 3, "drafts": 31, "accepted": 52, "acceptance_length": {"value": 2.67742, "low": 1.47053, "high": 3.88431}, "per_position": [{"value": 0.77419, "low": 0.14729, "high": 0.98552}, {"value": 0.58065, "low": 0.1781, "high": 0.89845}, {"value": 0.32258, "low": 0.13639, "high": 0.58945}]}, "quantized": {"prompts": 1, "drafts": 10, "accepted": 17, "acceptance_length": {"value": 2.7, "low": null, "high": null}, "per_position": [{"value": 0.8, "low": null, "high": null}, {"value": 0.6, "low": null, "high": null}, {"value": 0.3, "low": null, "high": null}]}, "difference": {"value": -0.01235, "low": null, "high": null}, "budget": 0.05, "outcome": "inconclusive", "failed": false, "more_sequences": null}, "within_budget": true, "sequences_predicted": null, "positions_predicted": null}, {"candidate": "fp8-block / quark + lm_head", "scheme": "fp8-block", "format": "quark", "lm_head_quantized": true, "lm_head_scheme": "fp8-block", "draft_vocab_size": null, "bytes_per_round": 1500, "predicted": null, "within_budget": null, "sequences_predicted": null, "positions_predicted": null}, {"candidate": "fp8-per-channel / quark", "scheme": "fp8-per-channel", "format": "quark", "lm_head_quantized": false, "lm_head_scheme": null, "draft_vocab_size": null, "bytes_per_round": 2000, "predicted": null, "within_budget": null, "sequences_predicted": null, "positions_predicted": null}], "sequential": null, "max_draft_tokens": 8, "objective": "bytes", "speedup": null}',
    "DistributionShift": '{"mean_tv": 0.01, "tv_spread": 0.002, "mean_kl": 0.003, "kl_spread": 0.001, "top1_agreement": 0.99, "flips": 3, "noise_flips": 2.5}',
    "HeadFidelity": '{"tokens": 256, "inputs": "captured.st", "top1_agreement": 0.98, "mean_kl": 0.006, "mean_tv": 0.02, "hidden_cosine": 0.9991, "shift": {"mean_tv": 0.02, "tv_spread": 0.002, "mean_kl": 0.006, "kl_spread": 0.001, "top1_agreement": 0.98, "flips": 3, "noise_flips": 2.5}, "bf16_floor": {"mean_tv": 0.01, "tv_spread": 0.002, "mean_kl": 0.003, "kl_spread": 0.001, "top1_agreement": 0.99, "flips": 3, "noise_flips": 2.5}, "bf16_floor_positions": 64, "failed": ["mean_kl"]}',
    "HeadFidelity, without lm_head": '{"tokens": 256, "inputs": "synthetic", "top1_agreement": null, "mean_kl": null, "mean_tv": null, "hidden_cosine": 0.9991, "shift": null, "bf16_floor": null, "bf16_floor_positions": 0, "failed": []}',
    "LayerParity": '{"module": "fc", "backend": "triton", "sqnr_db": 38.5, "cosine": 0.9993, "relative_error": 0.0118, "max_block_relative_error": 0.021, "worst_block": [3, 128], "failed": []}',
    "LayerParity, exact": '{"module": "lm_head", "backend": "reference", "sqnr_db": "inf", "cosine": 1.0, "relative_error": 0.0, "max_block_relative_error": 0.0, "worst_block": [0, 0], "failed": ["min_sqnr_db"]}',
    "CopyCheck": '{"compared": 3, "identical": 2, "parity_checked": 7}',
    "VerifyReport": '{"destination": "out/fp8", "source": "src", "format": "quark", "scheme": "fp8-per-channel", "module_schemes": {"lm_head": "fp8-block"}, "scheme_label": "W8A8 + W8A8", "thresholds": {"min_sqnr_db": 25.0, "min_cosine": 0.995, "max_relative_error": 0.06, "max_block_relative_error": 0.08, "max_mean_tv": 0.11, "min_top1_agreement": 0.9, "max_mean_kl": 0.05, "max_acceptance_drop": 0.05}, "parity_rows": 64, "ok": false, "verdict": "failed", "checks": ["structure", "scales", "hashes", "parity", "fidelity", "acceptance", "vllm load"], "problems": [{"code": "never-loaded", "subject": "lm_head.weight", "message": "vllm load: lm_head.weight: never loaded"}, {"code": "parity-failed", "subject": "lm_head", "message": "lm_head: min_sqnr_db"}, {"code": "fidelity-failed", "subject": "", "message": "draft head: mean_kl"}], "unsettled": [{"code": "acceptance-inconclusive", "subject": "", "message": "acceptance: predicted greedy acceptance length 2.677 \\u2192 2.700, change -0.012: inconclusive, one prompt has no spread to judge the 0.05 budget by: more prompts would tell; judged at k = 3"}], "structure": [], "layers": [{"module": "fc", "backend": "triton", "sqnr_db": 38.5, "cosine": 0.9993, "relative_error": 0.0118, "max_block_relative_error": 0.021, "worst_block": [3, 128], "failed": []}, {"module": "lm_head", "backend": "reference", "sqnr_db": "inf", "cosine": 1.0, "relative_error": 0.0, "max_block_relative_error": 0.0, "worst_block": [0, 0], "failed": ["min_sqnr_db"]}], "fidelity": {"tokens": 256, "inputs": "captured.st", "top1_agreement": 0.98, "mean_kl": 0.006, "mean_tv": 0.02, "hidden_cosine": 0.9991, "shift": {"mean_tv": 0.02, "tv_spread": 0.002, "mean_kl": 0.006, "kl_spread": 0.001, "top1_agreement": 0.98, "flips": 3, "noise_flips": 2.5}, "bf16_floor": {"mean_tv": 0.01, "tv_spread": 0.002, "mean_kl": 0.003, "kl_spread": 0.001, "top1_agreement": 0.99, "flips": 3, "noise_flips": 2.5}, "bf16_floor_positions": 64, "failed": ["mean_kl"]}, "acceptance": {"inputs": "captured.st", "rule": "greedy drafting, greedy target (temperature 0)", "source": {"prompts": 3, "drafts": 31, "accepted": 52, "acceptance_length": {"value": 2.67742, "low": 1.47053, "high": 3.88431}, "per_position": [{"value": 0.77419, "low": 0.14729, "high": 0.98552}, {"value": 0.58065, "low": 0.1781, "high": 0.89845}, {"value": 0.32258, "low": 0.13639, "high": 0.58945}]}, "quantized": {"prompts": 1, "drafts": 10, "accepted": 17, "acceptance_length": {"value": 2.7, "low": null, "high": null}, "per_position": [{"value": 0.8, "low": null, "high": null}, {"value": 0.6, "low": null, "high": null}, {"value": 0.3, "low": null, "high": null}]}, "difference": {"value": -0.01235, "low": null, "high": null}, "budget": 0.05, "outcome": "inconclusive", "failed": false, "more_sequences": null}, "notes": [{"code": "no-source", "subject": "", "message": "a note"}], "engine_loads": [{"engine": "vllm", "version": "0.32.0", "checkpoint": "out/fp8", "ok": false, "loaded": true, "error": null, "problems": [{"code": "never-loaded", "subject": "lm_head.weight", "message": "lm_head.weight: never loaded"}], "notes": [{"code": "postprocess-not-run", "subject": "", "message": "cpu"}], "patches": ["patch"], "unconsumed": ["x"], "modules": [{"runtime_module": "model.layers.32.qkv_proj", "quant_method": "Fp8LinearMethod", "quantized": true, "planned_quantized": true, "tensors": ["a.weight", "a.scale"], "values_equal": true, "unequal": [], "gemm_relative_error": 0.001}, {"runtime_module": "lm_head", "quant_method": null, "quantized": false, "planned_quantized": null, "tensors": ["lm_head.weight"], "values_equal": false, "unequal": [{"code": "value-differs", "subject": "lm_head.weight", "message": "weight: 3 values differ"}], "gemm_relative_error": null}]}], "copies": {"compared": 3, "identical": 2, "parity_checked": 7}}',
    "VerifyReport, structure only": '{"destination": "out/fp8", "source": null, "format": "quark", "scheme": "fp8-per-channel", "module_schemes": {"lm_head": "fp8-block"}, "scheme_label": "W8A8 + W8A8", "thresholds": {"min_sqnr_db": 25.0, "min_cosine": 0.995, "max_relative_error": 0.06, "max_block_relative_error": 0.08, "max_mean_tv": 0.11, "min_top1_agreement": 0.9, "max_mean_kl": 0.05, "max_acceptance_drop": 0.05}, "parity_rows": 64, "ok": false, "verdict": "failed", "checks": ["structure", "scales", "hashes", "vllm load"], "problems": [{"code": "missing", "subject": "fc.weight_scale", "message": "fc.weight_scale: missing"}, {"code": "never-loaded", "subject": "lm_head.weight", "message": "vllm load: lm_head.weight: never loaded"}], "unsettled": [], "structure": [{"code": "missing", "subject": "fc.weight_scale", "message": "fc.weight_scale: missing"}], "layers": [], "fidelity": null, "acceptance": null, "notes": [{"code": "no-source", "subject": "", "message": "a note"}], "engine_loads": [{"engine": "vllm", "version": "0.32.0", "checkpoint": "out/fp8", "ok": false, "loaded": true, "error": null, "problems": [{"code": "never-loaded", "subject": "lm_head.weight", "message": "lm_head.weight: never loaded"}], "notes": [{"code": "postprocess-not-run", "subject": "", "message": "cpu"}], "patches": ["patch"], "unconsumed": ["x"], "modules": [{"runtime_module": "model.layers.32.qkv_proj", "quant_method": "Fp8LinearMethod", "quantized": true, "planned_quantized": true, "tensors": ["a.weight", "a.scale"], "values_equal": true, "unequal": [], "gemm_relative_error": 0.001}, {"runtime_module": "lm_head", "quant_method": null, "quantized": false, "planned_quantized": null, "tensors": ["lm_head.weight"], "values_equal": false, "unequal": [{"code": "value-differs", "subject": "lm_head.weight", "message": "weight: 3 values differ"}], "gemm_relative_error": null}]}], "copies": null}',
    "VerifyReport, not verified numerically": '{"destination": "out/fp8", "source": null, "format": "quark", "scheme": "fp8-per-channel", "module_schemes": {"lm_head": "fp8-block"}, "scheme_label": "W8A8 + W8A8", "thresholds": {"min_sqnr_db": 25.0, "min_cosine": 0.995, "max_relative_error": 0.06, "max_block_relative_error": 0.08, "max_mean_tv": 0.11, "min_top1_agreement": 0.9, "max_mean_kl": 0.05, "max_acceptance_drop": 0.05}, "parity_rows": 64, "ok": false, "verdict": "not verified numerically", "checks": ["structure", "scales", "hashes"], "problems": [], "unsettled": [], "structure": [], "layers": [], "fidelity": null, "acceptance": null, "notes": [{"code": "no-source", "subject": "", "message": "a note"}], "engine_loads": [], "copies": null}',
}
