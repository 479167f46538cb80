"""Every record reads back what it writes: ``from_json(to_json(x)) == x``, by the one declaration of its fields.
Every :class:`JsonRecord` in eaglequant (found by importing every module) has an instance in test_record_json's
RECORDS or in EXTRA here; a new record with none fails here. No record is written only: a live object (a report
that holds runs, a head, a plan) is no record, and what it writes is the record made from it."""

from __future__ import annotations

import importlib
import json
import math
import pkgutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import eaglequant
from eaglequant.batch.jobs import BatchResult
from eaglequant.bench.concurrency import ConcurrencyRow
from eaglequant.cli.schemes_cmd import EngineCell, FormatRow
from eaglequant.common.json_fields import JsonReadError, JsonRecord
from eaglequant.draft.capture_routing import RoutingLocality
from eaglequant.engine_load import LoadJob
from eaglequant.engines.cells import Answer
from eaglequant.engines.support_tables import ModuleRow
from eaglequant.jobs.conversion import ConvertOutput
from eaglequant.measurement.record import AcceptanceRecord
from eaglequant.measurement.statistics import Interval
from eaglequant.record.report import REPORT_VERSION
from eaglequant.record.search import LoadAt, SearchBudget, SearchSpeedup, SpeedupAt
from eaglequant.record.verification import VerificationRecord
from eaglequant.schemes.model import load_scheme
from eaglequant.speedup.hardware import ACCELERATORS
from eaglequant.speedup.model import Residual, SpeedupPoint, SpeedupTable, StepResidual, Timing
from eaglequant.speedup.target_step import TargetWeights
from eaglequant.verification.fidelity import DistributionShift
from eaglequant.verification.layer_parity import LayerParity
from eaglequant.verification.verify import VerifyOutput
from tests.project.test_record_json import RECORDS, _convert_bench, _converted, _load_check, _module_row, _prune


def _all_records() -> list[type[JsonRecord]]:
    for module in pkgutil.walk_packages(eaglequant.__path__, "eaglequant."):
        if module.name.endswith("__main__") or ".probes." in module.name:  # runs a program when imported
            continue
        try:
            importlib.import_module(module.name)
        except ImportError:  # an optional engine or vendor package
            continue

    def below(base: type) -> list[type]:
        return [found for sub in base.__subclasses__() for found in (sub, *below(sub))]

    return sorted({r for r in below(JsonRecord) if r.__module__.startswith("eaglequant.")}, key=lambda r: r.__name__)


# Records whose JSON test_record_json does not hold (each is written only inside another's).
def _format_row() -> FormatRow:
    return FormatRow("quark", "fp8_w8a8", {"vllm": EngineCell(True, True, "on CUDA", False), "trtllm": None})


EXTRA = {
    "Answer": lambda: Answer(True, "vllm/model_executor/models/llama_eagle3.py"),
    "EngineCell": lambda: EngineCell(True, False, "loads", True),
    "FormatRow": _format_row,
    "ModuleLoad": lambda: _load_check().modules[1],
    "SearchBudget": lambda: SearchBudget(0.05, True, "bound", 0.13, "a drop of at most 5.0%"),
    "SearchSpeedup": lambda: _search_speedup(),
    "SpeedupTable": lambda: SpeedupTable("fp8", _target_weights(), _timing(), (_speedup_point(),), "predicted"),
    "SpeedupAt": lambda: SpeedupAt(3, 2.53, 0.89),
    "LoadAt": lambda: _load_at(4, 0),
    "SpeedupPoint": lambda: _speedup_point(),
    "TargetWeights": lambda: _target_weights(),
    "Timing": lambda: _timing(),
    "Accelerator": lambda: ACCELERATORS["mi355x"],
    "Residual": lambda: Residual(6, 4, 1.8984, 1.8984),
    "StepResidual": lambda: StepResidual(4, 0.0120919, 0.0126911),
    "RoutingLocality": lambda: RoutingLocality(0.37, 0.3112, 0.43, 1234, 8, 128, 8, (0.35, 0.4), "capture (c)"),
    "Machine": lambda: _convert_bench().machine,
    "HeadBytes": lambda: _prune().lm_head_bytes,
    "SummaryJob": lambda: RECORDS["MergedSummary"]().jobs[1],
    "TensorRow": lambda: RECORDS["InspectReport"]().tensors[0],
    "RuntimeModuleRow": lambda: RECORDS["InspectReport"]().runtime_modules[0],
    "ServerMode": lambda: RECORDS["ServerAcceptance"]().modes["greedy"],
    "DraftRecord": lambda: RECORDS["AcceptanceReport"]().quantized[0],
    "ModeRecord": lambda: RECORDS["AcceptanceReport"]().quantized[0].modes["greedy"],
    "IntervalRecord": lambda: RECORDS["AcceptanceReport"]().quantized[0].modes["T=0.7"].per_position[0],
    "LosslessRecord": lambda: RECORDS["AcceptanceReport"]().quantized[0].lossless,
    "AtDraftTokensRecord": lambda: _at_each_c().source.by_draft_tokens[0],
    "AtDraftTokensRecord, scheduled": lambda: _at_each_c().source.scheduled,
    "AtConcurrencyRecord": lambda: _at_each_c().source.by_draft_tokens[0].by_concurrency[1],
    "AloneRecord": lambda: _at_each_c().target_alone,
    "AloneAtRecord": lambda: _at_each_c().target_alone.by_concurrency[1],
    "VerificationRecord": lambda: _verification_record(),
    "ParityRecord": lambda: _verification_record().layers[1],
    "FidelityRecord": lambda: _verification_record().fidelity,
    "KernelRow": lambda: RECORDS["KernelBench"]().rows[1],
    "VerifyOutput": lambda: VerifyOutput(RECORDS["VerifyReport"](), "/data/src"),
    "ConvertOutput": lambda: _convert_output(),
    "Interval": lambda: Interval(math.nan, math.nan, math.nan),  # no drafts: no value
    "VerifyThresholds": lambda: load_scheme("nvfp4").verify,
    "Run": lambda: _convert_bench().runs[0],
    "DistributionShift": lambda: DistributionShift(1 / 3, 2 / 7, 1 / 9, 1e-7 / 3, 1 - 1 / 7, 5, 3.0625 / 7),
    "LoadJob": lambda: LoadJob(Path("out/fp8"), Path("../src"), 61),  # relative: held resolved, as written
    "ConcurrencyRow": lambda: ConcurrencyRow("fp8", 3, 4, 2.3158, 2.2941, 0.7412, 0.6931, (0.71, 0.6931), False),
}


def _at_each_c() -> AcceptanceRecord:
    """accept --concurrency with a schedule: each k's passes, the scheduled entry, the target alone at each C."""
    return RECORDS["AcceptanceReport, at each C and a schedule"]()


def _verification_record() -> VerificationRecord:
    """What the card reads of a verification (verify's own report, read as the file is)."""
    return VerificationRecord.from_json(RECORDS["VerifyReport"]().to_json())


def _convert_output() -> ConvertOutput:
    """convert --verify --json: the report records the summary of the verification printed beside it."""
    verification = RECORDS["VerifyReport, structure only"]()
    converted = replace(_converted(), verification=verification)
    return ConvertOutput(converted.report(timed=True), verification)


def _target_weights() -> TargetWeights:
    return TargetWeights("kimi", "config.json", 61, 21_093_548_032, 14336, 60, 384, 8, 24772608.0, 70272.0, True, 8)


def _timing() -> Timing:
    fitted = Timing(3.35e12, 1.625e-3, 1.25e-4, 1e-4, 2048, "accept.json", measured_draft_tokens=(1, 3))
    steps = (StepResidual(4, 0.0120919, 0.0126911), StepResidual(64, 0.03, 0.0304394))
    return replace(fitted, residuals=(Residual(1, 1, 1.2, 1.25), Residual(3, 1, 1.5, 1.45)), token_overhead_s=2.5e-5,
                   sequence_overhead_s=7.2e-5, step_residuals=steps,
                   routing_measured=RoutingLocality(0.5, 0.44, 0.56, 1234, 8, 384, 8, (0.5,)))  # fmt: skip


def _speedup_point() -> SpeedupPoint:
    return SpeedupPoint(3, 2.62, 0.0029, 0.0042, 0.0007, 1.5469, 1.3149, 1.7789)


def _load_at(concurrency: int, k: int) -> LoadAt:
    table = (SpeedupAt(1, 1.7, 1.06, 0.93, 1.19), SpeedupAt(3, 2.53, 0.89, 0.78, 1.0))
    return LoadAt(concurrency, 0.5, k, 1.06 if k else 1.0, 0.93 if k else 1.0, 1.19 if k else 1.0, table)


def _search_speedup() -> SearchSpeedup:
    table = (SpeedupAt(1, 1.7, 1.06), SpeedupAt(3, 2.53, 0.89))
    return SearchSpeedup(
        "vLLM 0.32.0", "target", 1, 1, 1.06, table, "int8 / quark", 1, 1.05, 1, 1.05, ("batch 1 at 2048 tokens",),
        1.03, 1.09, (_load_at(1, 1), _load_at(4, 0)), ((1, 3, 1), (4, 4, 0)), ("int8 / quark",), None, True,
    )  # fmt: skip


def _examples() -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for build in (*RECORDS.values(), *EXTRA.values()):
        record = build()
        found.setdefault(type(record).__name__, []).append(record)
    return found


@pytest.mark.parametrize("record_type", _all_records(), ids=lambda r: r.__name__)
def test_each_record_reads_back_what_it_writes(record_type: type[JsonRecord]) -> None:
    name = record_type.__name__
    examples = _examples().get(name, [])
    assert examples, f"{name} has no instance in test_record_json's RECORDS: add one (and its JSON)"
    for record in examples:
        written = json.loads(json.dumps(record.to_json()))
        read = record_type.from_json(written)
        if getattr(record, "report_version", REPORT_VERSION) < REPORT_VERSION:
            assert read.to_json() == written  # an older report keeps only what its version writes (notes as text)
        else:
            assert read == record


@pytest.mark.parametrize(
    ("record_type", "written", "said"),
    [
        (BatchResult, {"jobs_file": "jobs.toml", "shard": "first"}, "'shard' must be a shard I/N, not a string"),
        (ModuleRow, {**_module_row().to_json(), "fc": {"gpt": {}}}, "unknown key 'gpt'"),
        (Interval, {"value": "2.5", "low": None, "high": None}, "'value' must be a number, not a string"),
        (LayerParity, {**RECORDS["LayerParity"]().to_json(), "sqnr_db": "lots"}, "'sqnr_db' must be a number"),
    ],
)
def test_a_value_read_by_its_own_rule_is_refused_in_one_line_naming_its_key(
    record_type: type[JsonRecord], written: dict[str, Any], said: str
) -> None:
    with pytest.raises(JsonReadError, match=said):
        record_type.from_json(written)


def test_older_files_read_with_what_their_version_meant() -> None:
    """An interval's null is no value, or beside one an unbounded side; a summary without a shard ran every job."""
    assert Interval.from_json({"value": 2.5, "low": None, "high": None}) == Interval(2.5, -math.inf, math.inf)
    assert math.isnan(Interval.from_json({"value": None, "low": None, "high": None}).high)
    assert BatchResult.from_json({"jobs_file": "jobs.toml"}).shard is None
