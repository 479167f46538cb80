"""Finishing a conversion's output in its staged directory: once the shards and their index are written,
config.json, the format's side files, the source's other files and a re-read of the output against the plan
(:func:`write_metadata`); last of all, the report with the SHA-256 of every file beside it (:func:`record_output`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

from eaglequant.checkpoint.destination import REPORT_NAME
from eaglequant.checkpoint.files import copy_side_files, write_json
from eaglequant.checkpoint.hashing import file_sha256
from eaglequant.checkpoint.reader import Checkpoint, source_files
from eaglequant.conversion.plan import ConversionPlan
from eaglequant.conversion.result import ConversionResult


def write_metadata(
    checkpoint: Checkpoint,
    plan: ConversionPlan,
    tmp: Path,
    replaced: Collection[str] = (),
) -> list[str]:
    """config.json, the format's side files and the source's other files (all but ``replaced``) beside the shards,
    then the output re-read and held against the plan. Returns the files carried over from the source."""
    write_json(tmp / "config.json", plan.written_config(checkpoint.config))
    for file_name, content in plan.config_files().side_files.items():
        write_json(tmp / file_name, content)
    copied = copy_side_files(checkpoint, tmp, replaced)
    check_written(tmp, plan)
    return copied


def record_output(stage: Path, result: ConversionResult) -> ConversionResult:
    """``result`` with the SHA-256 of every file in ``stage`` (those not hashed as they were written), its
    report written last, beside them."""
    files = dict(result.files)
    for path in source_files(stage):
        name = path.relative_to(stage).as_posix()
        if name != REPORT_NAME and name not in files:
            files[name] = file_sha256(path)
    recorded = replace(result, files=dict(sorted(files.items())))
    (stage / REPORT_NAME).write_text(recorded.report().to_text(), encoding="utf-8")
    return recorded


def check_written(tmp: Path, plan: ConversionPlan) -> None:
    """Re-open the output with the strict reader and compare it with the plan."""
    written = Checkpoint.open(tmp)
    try:
        expected = {o.spec.name: (o.spec.dtype, o.spec.shape) for o in plan.outputs}
        actual = {n: (i.dtype, i.shape) for n, i in written.tensors.items()}
        if expected != actual:
            diff = sorted(set(expected.items()) ^ set(actual.items()))
            raise RuntimeError(f"written checkpoint differs from the plan: {diff[:3]}")
    finally:
        written.close()
