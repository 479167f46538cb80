"""Finishing a conversion once its shards are written, in the temporary directory: the index, config.json, the
format's side files, the source's other files, a re-read of the output against the plan, then the report.

What else a conversion makes of its output (the verification, the model card) comes in as :class:`FinishStep`
values from :func:`eaglequant.api.convert`: this module runs them between the first report and the last, and
knows nothing of what they do.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglequant.checkpoint.reader import Checkpoint, resolve_inside
from eaglequant.checkpoint.writer import TensorSpec
from eaglequant.common.memory import return_freed_memory
from eaglequant.common.progress import Progress
from eaglequant.conversion.plan import ConversionPlan
from eaglequant.conversion.result import ConversionResult
from eaglequant.record.manifest import REPORT_NAME, file_sha256, source_files

INDEX_NAME = "model.safetensors.index.json"


@dataclass(frozen=True)
class FinishStep:
    """Something made of the finished output in its temporary directory, before it is moved into place: it runs
    once the report is written (and may read it), and every file it writes gets its SHA-256 in the final report."""

    run: Callable[[Path, ConversionResult], None]
    writes: tuple[str, ...] = ()  # files it writes: the source's files of these names are not carried over
    phase: str | None = None  # the progress phase shown while it runs


def write_metadata(
    checkpoint: Checkpoint,
    plan: ConversionPlan,
    tmp: Path,
    shards: list[list[TensorSpec]],
    names: list[str],
    replaced: Collection[str] = (),
) -> list[str]:
    """Index (when sharded), config.json, the format's side files and the source's other files (all but
    ``replaced``) beside the shards, then the output re-read and held against the plan. Returns the files
    carried over from the source."""
    if len(names) > 1:
        write_index(tmp, plan, shards, names)
    write_json(tmp / "config.json", {**checkpoint.config, "quantization_config": plan.quantization_config()})
    for file_name, content in plan.format.extra_files(plan.scheme, plan.exclude_patterns).items():
        write_json(tmp / file_name, content)
    copied = copy_side_files(checkpoint, tmp, replaced)
    check_written(tmp, plan)
    return copied


def finish(tmp: Path, result: ConversionResult, steps: Sequence[FinishStep], progress: Progress) -> None:
    """Report, the steps in order, then the report again with the SHA-256 of every file it sits beside."""
    (tmp / REPORT_NAME).write_text(result.report().to_text(), encoding="utf-8")  # what the steps read
    if steps:
        return_freed_memory()
    for step in steps:
        if step.phase is not None:
            progress.phase(step.phase)
        step.run(tmp, result)
    for path in source_files(tmp):
        name = path.relative_to(tmp).as_posix()
        if name != REPORT_NAME and name not in result.files:
            result.files[name] = file_sha256(path)
    result.files = dict(sorted(result.files.items()))
    (tmp / REPORT_NAME).write_text(result.report().to_text(), encoding="utf-8")


def write_index(tmp: Path, plan: ConversionPlan, shards: list[list[TensorSpec]], names: list[str]) -> None:
    weight_map = {spec.name: name for name, specs in zip(names, shards, strict=True) for spec in specs}
    write_json(
        tmp / INDEX_NAME,
        {"metadata": {"total_size": plan.output_bytes}, "weight_map": dict(sorted(weight_map.items()))},
    )


def write_json(path: Path, content: dict[str, Any]) -> None:
    path.write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def copy_side_files(checkpoint: Checkpoint, tmp: Path, replaced: Collection[str] = ()) -> list[str]:
    """Copy every non-weight file (tokenizer, generation config, custom code, licence) unchanged, except those
    the conversion writes itself (config.json, the report, and ``replaced``: the model card)."""
    skip = checkpoint.weight_file_names() | {"config.json", REPORT_NAME, *replaced}
    copied = []
    for path in source_files(checkpoint.root):
        relative = path.relative_to(checkpoint.root)
        if str(relative) in skip:
            continue
        if path.suffix in (".safetensors", ".bin") and path.parent == checkpoint.root:
            continue  # stray weight files that the index does not list are not carried over
        source = resolve_inside(checkpoint.root, str(relative), "SRC")
        target = tmp / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        copied.append(str(relative))
    return copied


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
