"""A pruned draft vocabulary: the draft keeps the N tokens the target emits most often (FR-Spec's frequency-ranked
subset), so its ``lm_head``, read every draft step, shrinks to N rows.

The output is a plain BF16 EAGLE-3 head, as trainers write one with a reduced vocabulary: ``lm_head`` holds the kept
rows in ascending target-token order, ``d2t`` maps draft id i to target token i + d2t[i] (what vLLM and SGLang
read), ``t2d`` marks the kept target tokens, and config.json's ``draft_vocab_size`` is N. Every other tensor and file
is copied unchanged, so the pruned head converts, verifies and serves like any other. A head that already has a
reduced vocabulary is pruned within it (its ``d2t`` composed). Deterministic: ties in the counts go to the lower
token id; the special tokens config.json names (``bos_token_id``, ``eos_token_id``, ``pad_token_id``) and any the
caller names are always kept where the source draft can propose them.

A target choice outside the kept tokens can never be drafted: ``coverage`` is the share of the counted choices the
pruned draft can still propose (the source draft's beside it), and with captured inputs the predicted greedy
acceptance of both drafts is replayed (:mod:`eaglequant.prediction.predict`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from eaglequant.checkpoint.dtypes import FLOAT_SOURCE_DTYPES
from eaglequant.checkpoint.files import OutputShards
from eaglequant.checkpoint.reader import Checkpoint, tensor_bytes
from eaglequant.checkpoint.writer import SafetensorsShard, TensorSpec
from eaglequant.common.errors import InputError, given, suggested, words
from eaglequant.common.json_fields import JsonRecord, named
from eaglequant.conversion.options import DEFAULT_MAX_SHARD_BYTES
from eaglequant.layouts.detect import dims_source
from eaglequant.layouts.head import HeadDescription, HeadLinear, Role
from eaglequant.prediction.figures import PredictionRecord
from eaglequant.vocabulary.counts import TokenCounts

PRUNE_RECORD = "eaglequant_prune.json"
SPECIAL_TOKEN_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")
ROWS_PER_COPY = 4096  # lm_head rows gathered per write, so memory stays bounded whatever the vocabulary


@dataclass(frozen=True)
class VocabularyChoice:
    target_ids: torch.Tensor  # int64 [N], ascending: the target token each new draft id proposes
    source_rows: torch.Tensor  # int64 [N]: the source lm_head row each keeps
    special: tuple[int, ...]  # the always-kept tokens the source draft can propose
    coverage: float  # share of the counted target choices the pruned draft can propose
    source_coverage: float  # the source draft's

    @property
    def size(self) -> int:
        return int(self.target_ids.numel())


def source_vocabulary(head: HeadDescription, checkpoint: Checkpoint) -> tuple[HeadLinear, torch.Tensor, int]:
    """The draft's own lm_head, the target token each of its rows proposes, and the target's vocabulary size."""
    lm_head = head.find_linear("lm_head")
    where = checkpoint.root / "config.json"
    if lm_head is None:
        raise InputError(
            f"{checkpoint.root}: the draft has no lm_head of its own (the engine uses the target's), so there is no "
            "draft vocabulary to prune",
            hint="prune a head that ships its lm_head",
        )
    if lm_head.dtype not in FLOAT_SOURCE_DTYPES:
        raise InputError(
            f"{checkpoint.root}: lm_head is stored as {lm_head.dtype}, not a float",
            hint="prune the BF16 head the trainer released, then convert the pruned head",
        )
    rows = lm_head.out_features
    d2t = next((t for t in head.tensors if t.role is Role.VOCAB_MAP and t.name.endswith("d2t")), None)
    vocab = head.dims.vocab_size or next((t.info.shape[0] for t in head.tensors if t.role is Role.EMBEDDING), None)
    if vocab is None:
        raise InputError(f"{where}: no vocab_size and no embedding to read it from", hint="add vocab_size")
    if d2t is None:
        if rows != vocab:
            raise InputError(
                f"{where}: lm_head has {rows} rows, the vocabulary {vocab}, and there is no d2t to map them",
                hint="the head is incomplete: re-export it with its d2t",
            )
        return lm_head, torch.arange(rows, dtype=torch.int64), vocab
    offsets = checkpoint.read(d2t.name).to(torch.int64)
    if offsets.shape != (rows,):
        raise InputError(f"{checkpoint.root}: d2t has shape {list(offsets.shape)}, lm_head {rows} rows")
    return lm_head, torch.arange(rows, dtype=torch.int64) + offsets, vocab


def special_tokens(config: dict[str, Any]) -> list[int]:
    """The special token ids config.json names (an id, or a list of them), as the draft's own config gives them."""
    found: list[int] = []
    for holder in (config, dims_source(config)):
        for key in SPECIAL_TOKEN_KEYS:
            value = holder.get(key)
            for token in value if isinstance(value, list) else [value]:
                if type(token) is int and token >= 0 and token not in found:
                    found.append(token)
    return found


def choose_vocabulary(
    source_targets: torch.Tensor, counts: TokenCounts, size: int, always: Sequence[int]
) -> VocabularyChoice:
    """The ``size`` tokens of the source draft's vocabulary the target chose most often (ties: the lower id), the
    ``always`` tokens among them first."""
    available = source_targets.numel()
    if type(size) is not int or not 1 <= size < available:
        raise InputError(
            words(given("size", size), f": the draft's vocabulary has {available} tokens; keep 1 to {available - 1}"),
            hint=words("e.g. ", suggested("size", min(32768, max(1, available // 4)))),
        )
    row_of = {int(token): row for row, token in enumerate(source_targets.tolist())}
    special = tuple(dict.fromkeys(token for token in always if token in row_of))
    if len(special) > size:
        raise InputError(
            words(given("size", size), f": fewer than the {len(special)} special tokens always kept"),
            hint=words("keep at least ", suggested("size", len(special))),
        )
    frequency = counts.counts[source_targets]
    order = sorted(range(available), key=lambda row: (-int(frequency[row]), int(source_targets[row])))
    chosen = [row_of[token] for token in special]
    taken = set(chosen)
    for row in order:
        if len(chosen) == size:
            break
        if row not in taken:
            chosen.append(row)
            taken.add(row)
    rows = torch.tensor(chosen, dtype=torch.int64)
    targets, order_by_id = torch.sort(source_targets[rows])
    total = max(counts.total, 1)
    return VocabularyChoice(
        targets,
        rows[order_by_id],
        special,
        float(counts.counts[targets].sum()) / total,
        float(counts.counts[source_targets].sum()) / total,
    )


def pruned_specs(checkpoint: Checkpoint, head: HeadDescription, lm_head: HeadLinear, choice: VocabularyChoice,
                 vocab: int) -> list[TensorSpec]:  # fmt: skip
    """Every output tensor: the source's, with lm_head cut to the kept rows and the vocabulary maps for them."""
    d2t, t2d = vocab_map_names(head)
    specs = []
    for name, info in checkpoint.tensors.items():
        if name == lm_head.weight:
            specs.append(TensorSpec(name, info.dtype, (choice.size, *info.shape[1:])))
        elif name not in (d2t, t2d):  # written anew below
            specs.append(TensorSpec(name, info.dtype, info.shape))
    specs += [TensorSpec(d2t, "I64", (choice.size,)), TensorSpec(t2d, "BOOL", (vocab,))]
    return sorted(specs, key=lambda spec: spec.name)


def vocab_map_names(head: HeadDescription) -> tuple[str, str]:
    """The names of ``d2t`` and ``t2d`` in the output: the source's own, else those two."""
    own = {t.name.rsplit(".", 1)[-1]: t.name for t in head.tensors if t.role is Role.VOCAB_MAP}
    return own.get("d2t", "d2t"), own.get("t2d", "t2d")


def write_pruned(checkpoint: Checkpoint, head: HeadDescription, lm_head: HeadLinear, choice: VocabularyChoice,
                 vocab: int, stage: Path) -> None:  # fmt: skip
    """The pruned head's weights into ``stage``: its shards, and their index when there are several."""
    specs = pruned_specs(checkpoint, head, lm_head, choice, vocab)
    d2t, t2d = vocab_map_names(head)
    maps = {
        d2t: choice.target_ids - torch.arange(choice.size, dtype=torch.int64),
        t2d: torch.zeros(vocab, dtype=torch.bool).index_fill_(0, choice.target_ids, True),
    }
    with OutputShards(stage, specs, DEFAULT_MAX_SHARD_BYTES) as shards:
        for spec in specs:
            shard = shards.holding[spec.name]
            if spec.name in maps:
                shard.write(spec.name, 0, tensor_bytes(maps[spec.name]))
            elif spec.name == lm_head.weight:
                _gather_rows(checkpoint, spec, choice.source_rows, shard)
            else:
                checkpoint.copy_into(spec.name, shard, spec.name, 0, spec.nbytes)
        shards.close()


def _gather_rows(checkpoint: Checkpoint, spec: TensorSpec, rows: torch.Tensor, shard: SafetensorsShard) -> None:
    """The kept rows of lm_head, in order, read as runs of consecutive source rows."""
    row_bytes = spec.nbytes // spec.shape[0]
    runs: list[tuple[int, int, int]] = []  # (output row, source row, count)
    for out, source in enumerate(rows.tolist()):
        last = runs[-1] if runs else None
        if last is not None and last[1] + last[2] == source and last[2] < ROWS_PER_COPY:
            runs[-1] = (last[0], last[1], last[2] + 1)
        else:
            runs.append((out, source, 1))
    for out, source, count in runs:
        block = checkpoint.read_rows(spec.name, slice(source, source + count))
        shard.write(spec.name, out * row_bytes, tensor_bytes(block.contiguous()))


def pruned_config(config: dict[str, Any], size: int) -> dict[str, Any]:
    """config.json with the draft's vocabulary size; the rest unchanged."""
    return {**config, "draft_vocab_size": size}


@dataclass(frozen=True)
class HeadBytes(JsonRecord):
    """The lm_head's bytes, the source's and the pruned one's."""

    source: int
    pruned: int


@dataclass(frozen=True)
class PruneResult(JsonRecord):
    """What ``prune`` wrote and what it keeps of the target's choices (and, with captured inputs, of acceptance)."""

    json_renamed = named(source_size="source_draft_vocab_size", size="draft_vocab_size", special="special_tokens_kept")

    destination: Path
    source: Path
    source_size: int
    size: int
    counts_from: str
    special: tuple[int, ...]
    coverage: float
    source_coverage: float
    lm_head_bytes: HeadBytes
    prediction: PredictionRecord | None = None  # with captured inputs: both drafts' predicted acceptance

    def __post_init__(self) -> None:  # the shares held to 6 decimals, as they are written
        object.__setattr__(self, "coverage", round(self.coverage, 6))
        object.__setattr__(self, "source_coverage", round(self.source_coverage, 6))


def pruned_description(head: HeadDescription, size: int) -> HeadDescription:
    """``head`` as it reads once pruned to ``size`` tokens (headers only: what a plan and a round's cost need)."""
    from dataclasses import replace

    lm_head = head.linear("lm_head")
    d2t, _ = vocab_map_names(head)

    def resized(tensor: Any) -> Any:
        if tensor.name not in (lm_head.weight, d2t):
            return tensor
        shape = (size, *tensor.info.shape[1:])
        per_row = tensor.info.nbytes // max(tensor.info.shape[0], 1)
        return replace(tensor, info=replace(tensor.info, shape=shape, nbytes=per_row * size))

    linears = tuple(replace(lin, out_features=size) if lin is lm_head else lin for lin in head.linears)
    dims = replace(head.dims, draft_vocab_size=size)
    return replace(head, tensors=tuple(resized(t) for t in head.tensors), linears=linears, dims=dims)
