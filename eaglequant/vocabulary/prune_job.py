"""``prune()``, the job: SRC's head with a pruned vocabulary written into DST (checked, staged, committed whole), as
a plain head every tool reads; what it keeps and how it is written: :mod:`eaglequant.vocabulary.pruned_head`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eaglequant.checkpoint.destination import check_destination, staged_directory
from eaglequant.checkpoint.files import copy_side_files, write_json
from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS
from eaglequant.common.errors import InputError, given, words
from eaglequant.common.progress import NoSteps, Steps, Tally
from eaglequant.layouts.detect import describe_head
from eaglequant.prediction.figures import PredictionRecord
from eaglequant.vocabulary.counts import read_counts
from eaglequant.vocabulary.pruned_head import (
    PRUNE_RECORD,
    HeadBytes,
    PruneResult,
    choose_vocabulary,
    pruned_config,
    source_vocabulary,
    special_tokens,
    write_pruned,
)


def prune(
    src: str | Path,
    dst: str | Path,
    *,
    size: int,
    counts: str | Path,
    keep: Sequence[int] = (),
    inputs: str | Path | None = None,
    overwrite: bool = False,
    steps: Steps | None = None,
) -> PruneResult:
    """Write into ``dst`` the head in ``src`` with its draft vocabulary cut to the ``size`` tokens the target emits
    most often. ``counts``: captured inputs (``eaglequant capture``: the target's own choices are counted) or a
    token-count file (JSON, or one tensor of counts in safetensors). ``keep``: token ids always kept (besides
    the special tokens config.json names). ``inputs``: captured inputs on which to predict the greedy acceptance of
    the source draft and the pruned one (held-out text: the counts' own file predicts too well); ``steps`` is told
    of each prompt replayed for it."""
    source, destination = Path(src), Path(dst)
    if any(type(token) is not int or token < 0 for token in keep):
        raise InputError(words(given("keep", list(keep)), ": token ids are whole numbers from 0"))
    check_destination(source, destination, overwrite, marker=PRUNE_RECORD)
    from eaglequant.prediction.predict import load_captured

    with Checkpoint.open(source) as checkpoint:
        head = describe_head(checkpoint)
        lm_head, targets, vocab = source_vocabulary(head, checkpoint)
        counted = read_counts(Path(counts), vocab, head=head)
        sequences = None if inputs is None else load_captured(Path(inputs), head=head)  # checked before writing
        choice = choose_vocabulary(targets, counted, size, [*special_tokens(head.config), *keep])
        row_bytes = checkpoint.tensors[lm_head.weight].nbytes // lm_head.out_features
        with staged_directory(destination) as stage:
            write_pruned(checkpoint, head, lm_head, choice, vocab, stage.path)
            write_json(stage.path / "config.json", pruned_config(checkpoint.config, choice.size))
            copy_side_files(checkpoint, stage.path, replaced=(PRUNE_RECORD,))
            result = PruneResult(
                destination,
                source,
                lm_head.out_features,
                choice.size,
                counted.origin,
                choice.special,
                choice.coverage,
                choice.source_coverage,
                HeadBytes(row_bytes * lm_head.out_features, row_bytes * choice.size),
                _predicted(checkpoint, stage.path, inputs, sequences, steps or NoSteps()),
            )
            write_json(stage.path / PRUNE_RECORD, result.to_json())
            stage.commit(destination, overwrite)
    return result


def _predicted(
    source: Checkpoint, pruned: Path, inputs: str | Path | None, sequences: list[Any] | None, steps: Steps
) -> PredictionRecord | None:
    """The greedy acceptance of both drafts replayed on the ``sequences`` of ``inputs`` (None without them), each
    prompt replayed told to ``steps``."""
    if inputs is None or sequences is None:
        return None
    from eaglequant.prediction.predict import predict_pair

    tally = Tally(steps, 2 * len(sequences))
    drafts = {"source": "the source draft", "quantized": "the pruned draft"}

    def replayed(draft: str, index: int) -> None:
        tally.finished(f"prompt {index + 1}/{len(sequences)} ({drafts[draft]})")

    try:
        with Checkpoint.open(pruned, "DST") as written:
            described = f"{Path(inputs).name} ({len(sequences)} sequences)"
            pair = predict_pair(source, written, sequences, DEFAULT_DRAFT_TOKENS, None, described, replayed)
            return pair.record()
    finally:
        steps.stop()
