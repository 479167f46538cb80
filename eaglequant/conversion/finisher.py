"""Finishing a conversion's output in its staged directory: once the shards are written, the index, config.json,
the format's side files, the source's other files and a re-read of the output against the plan
(:func:`write_metadata`); last of all, the report with the SHA-256 of every file beside it (:func:`record_output`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Any

from eaglequant.checkpoint.destination import REPORT_NAME
from eaglequant.checkpoint.hashing import file_sha256
from eaglequant.checkpoint.reader import Checkpoint, resolve_inside, source_files
from eaglequant.checkpoint.writer import TensorSpec
from eaglequant.conversion.plan import ConversionPlan
from eaglequant.conversion.result import ConversionResult

INDEX_NAME = "model.safetensors.index.json"


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
        write_index(tmp, shards, names)
    write_json(tmp / "config.json", plan.written_config(checkpoint.config))
    for file_name, content in plan.format_files().items():
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


def write_index(tmp: Path, shards: list[list[TensorSpec]], names: list[str]) -> None:
    """The sharded index (``model.safetensors.index.json``) of the shards ``names`` holding ``shards``' tensors."""
    weight_map = {spec.name: name for name, specs in zip(names, shards, strict=True) for spec in specs}
    total = sum(spec.nbytes for specs in shards for spec in specs)
    write_json(tmp / INDEX_NAME, {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})


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
