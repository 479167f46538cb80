"""Where a search writes: each candidate converted into a staged directory of DST (recorded as DST, so the winner's
report and card name DST and it needs no second conversion), each pruned vocabulary written once where DST's record
will say (``DST-vocabN-bf16``). The winner's stage becomes DST in one rename; every other stage, and every pruned
head but the winner's, is removed, whether the search ends well or not.
"""

from __future__ import annotations

import shutil
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Any

from eaglequant.checkpoint.destination import StagedDirectory, staged_directory


def pruned_path(destination: Path, size: int) -> Path:
    """Where a search writes the BF16 head pruned to ``size`` tokens: beside ``destination``."""
    return destination.with_name(f"{destination.name}-vocab{size}-bf16")


class SearchOutputs:
    """The staged candidates and pruned heads of one search into ``destination``, from ``source`` (``counts``:
    what a vocabulary is pruned by)."""

    def __init__(self, source: Path, destination: Path, counts: str | Path | None) -> None:
        self.source, self.destination, self.counts = source, destination, counts
        self.stages: dict[int, StagedDirectory] = {}
        self.pruned: dict[int, Path] = {}
        self.kept_pruned: Path | None = None
        self._stack = ExitStack()

    def __enter__(self) -> SearchOutputs:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stack.close()  # every stage not committed
        for path in self.pruned.values():
            if path != self.kept_pruned:
                shutil.rmtree(path, ignore_errors=True)

    def converted(self, index: int, candidate: Any) -> Path:
        """``candidate`` (a priced :class:`eaglequant.search.candidates.Candidate`) written into a new stage of
        DST: its own request, the one it was priced by, planned as it is."""
        from eaglequant.jobs.conversion import write_conversion

        stage = self._stack.enter_context(staged_directory(self.destination))
        self.stages[index] = stage
        write_conversion(
            self._source_of(candidate.vocab), self.destination, candidate.options, request=candidate.request,
            overwrite=True, stage=stage,
        )  # fmt: skip
        return stage.path

    def discard(self, index: int) -> None:
        """Remove candidate ``index``'s stage now (it missed the budget)."""
        shutil.rmtree(self.stages[index].path, ignore_errors=True)

    def pruned_for(self, vocab: int | None) -> Path | None:
        """The pruned head a candidate of vocabulary ``vocab`` is converted from (None: the source itself)."""
        return None if vocab is None else self.pruned[vocab]

    def commit(self, index: int, vocab: int | None, overwrite: bool) -> None:
        """Candidate ``index``'s stage made DST, and the pruned head it was converted from kept beside it."""
        self.stages[index].commit(self.destination, overwrite)
        self.kept_pruned = self.pruned_for(vocab)

    def _source_of(self, size: int | None) -> Path:
        """The source, or its vocabulary pruned to ``size`` tokens (written on first use)."""
        from eaglequant.vocabulary.prune_job import prune

        if size is None:
            return self.source
        if size not in self.pruned:
            assert self.counts is not None
            at = pruned_path(self.destination, size)
            self.pruned[size] = prune(self.source, at, size=size, counts=self.counts, overwrite=True).destination
        return self.pruned[size]
