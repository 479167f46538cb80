"""The files an output checkpoint has beside its weight shards: the sharded index, JSON files (config.json, records),
and the source's other files carried over unchanged. ``convert``, ``prune`` and ``search`` write them alike."""

from __future__ import annotations

import json
import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Any

from eaglequant.checkpoint.destination import REPORT_NAME
from eaglequant.checkpoint.reader import SAFETENSORS_INDEX, Checkpoint, resolve_inside, source_files
from eaglequant.checkpoint.writer import TensorSpec


def write_index(directory: Path, shards: list[list[TensorSpec]], names: list[str]) -> None:
    """The sharded index (``model.safetensors.index.json``) of the shards ``names`` holding ``shards``' tensors."""
    weight_map = {spec.name: name for name, specs in zip(names, shards, strict=True) for spec in specs}
    total = sum(spec.nbytes for specs in shards for spec in specs)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    write_json(directory / SAFETENSORS_INDEX, index)


def write_json(path: Path, content: dict[str, Any]) -> None:
    path.write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def copy_side_files(checkpoint: Checkpoint, directory: Path, replaced: Collection[str] = ()) -> list[str]:
    """Copy every non-weight file (tokenizer, generation config, custom code, licence) unchanged, except those
    the output writes itself (config.json, the report, and ``replaced``: the model card, a record)."""
    skip = checkpoint.weight_file_names() | {"config.json", REPORT_NAME, *replaced}
    copied = []
    for path in source_files(checkpoint.root):
        relative = path.relative_to(checkpoint.root)
        if str(relative) in skip:
            continue
        if path.suffix in (".safetensors", ".bin") and path.parent == checkpoint.root:
            continue  # stray weight files that the index does not list are not carried over
        source = resolve_inside(checkpoint.root, str(relative), "SRC")
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        copied.append(str(relative))
    return copied
