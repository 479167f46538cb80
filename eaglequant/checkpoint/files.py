"""The files of an output checkpoint: its weights as shards (:class:`OutputShards`) with their index, JSON files
(config.json, records), and the source's other files carried over unchanged. ``convert``, ``prune`` and ``search``
write them alike."""

from __future__ import annotations

import shutil
from collections.abc import Collection
from pathlib import Path
from types import TracebackType

from eaglequant.checkpoint.destination import REPORT_NAME
from eaglequant.checkpoint.reader import SAFETENSORS_INDEX, Checkpoint, resolve_inside, source_files
from eaglequant.checkpoint.writer import SafetensorsShard, TensorSpec, shard_names, split_into_shards
from eaglequant.common.atomic import write_json


class OutputShards:
    """A checkpoint's weights: ``specs`` split in order into shards of at most ``max_shard_bytes`` (a larger tensor
    gets one of its own), named as transformers names them, each created at its final size with its header and
    then filled in any order (:class:`~eaglequant.checkpoint.writer.SafetensorsShard`); closed, the index is written
    beside them when there are several. Leaving a ``with`` block abandons the shards not closed (their files are
    left for the staged directory's removal)."""

    def __init__(self, directory: Path, specs: list[TensorSpec], max_shard_bytes: int) -> None:
        self.directory = directory
        self.groups = split_into_shards(specs, max_shard_bytes)
        self.names = shard_names(len(self.groups))
        self.files: list[SafetensorsShard] = []
        try:
            for name, group in zip(self.names, self.groups, strict=True):
                self.files.append(SafetensorsShard(directory / name, group, metadata={"format": "pt"}))
        except BaseException:
            self.discard()
            raise
        self.holding = {name: shard for shard in self.files for name in shard.specs}

    def close(self) -> dict[str, str]:
        """Every shard finished, then the index when there are several; each shard's SHA-256 by file name."""
        hashes = {name: shard.close() for name, shard in zip(self.names, self.files, strict=True)}
        if len(self.names) > 1:
            write_index(self.directory, self.groups, self.names)
        return hashes

    def discard(self) -> None:
        for shard in self.files:
            shard.discard()

    def __enter__(self) -> OutputShards:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.discard()


def write_index(directory: Path, shards: list[list[TensorSpec]], names: list[str]) -> None:
    """The sharded index (``model.safetensors.index.json``) of the shards ``names`` holding ``shards``' tensors."""
    weight_map = {spec.name: name for name, specs in zip(names, shards, strict=True) for spec in specs}
    total = sum(spec.nbytes for specs in shards for spec in specs)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    write_json(directory / SAFETENSORS_INDEX, index)


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
