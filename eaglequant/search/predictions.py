"""A search's predictions: the source draft predicted once, its chain inputs shared, each served copy predicted once,
and the next candidate converted while the machine's spare cores predict the ones before it.

Every candidate is predicted as vLLM runs it (its quantized linears dequantized exactly, as ``verify --inputs``).
What they have in common is computed once: the source draft's acceptance and its chain inputs (``fc`` of the aux
states, the token embeddings: :mod:`eaglequant.prediction.shared`). Two candidates whose served copies are the same
bytes (one scheme written in two formats with the same math) are the same draft to the engine, so the second reuses
the first's prediction. Torch runs one thread per prediction, and as many predictions run at once as there are
cores beside the one converting, so the threads never outnumber the cores.
"""

from __future__ import annotations

import os
import tempfile
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS, DEFAULT_MAX_DRAFT_TOKENS
from eaglequant.search.sequential import SequentialPlan


def prediction_workers() -> int:
    """Predictions to run at once: the cores this process may use, less the one that converts (at least one)."""
    return max(1, len(os.sched_getaffinity(0)) - 1)


@contextmanager
def single_threaded_torch() -> Iterator[None]:
    """Torch's intra-op threads at one while the block runs (each prediction is one thread), then as they were."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class CandidatePredictor:
    """Predictions of converted candidates against the source draft (``checkpoint``, open) on ``sequences``, for
    every k up to ``max_draft_tokens``, on ``device``; with ``sequential`` (and the ``budget`` in tokens it judges),
    each candidate stops at the first planned look that settles its verdict (:mod:`.sequential`)."""

    def __init__(
        self,
        checkpoint: Checkpoint,
        sequences: list[Any],
        max_draft_tokens: int = DEFAULT_MAX_DRAFT_TOKENS,
        device: str = "cpu",
        sequential: tuple[SequentialPlan, float] | None = None,
    ) -> None:
        from eaglequant.prediction.predict import open_draft, predict_table
        from eaglequant.prediction.shared import chain_inputs

        self.sequences, self.max_draft_tokens, self.device = sequences, max_draft_tokens, device
        self.sequential = sequential
        self.stop_within = True  # a look that settles a pass stops the candidate (the speedup objective goes on)
        self.draft = open_draft(checkpoint, device)
        self.shared = chain_inputs(self.draft, sequences, max_draft_tokens)
        self.table = predict_table(self.draft, sequences, max_draft_tokens, self.shared)
        self.source = self.table[DEFAULT_DRAFT_TOKENS]
        self._by_served: dict[tuple[str, str], Any] = {}
        self.reused = 0  # predictions taken from an earlier candidate with the same served copy

    def predicted(self, converted: Path) -> Any:
        """``converted``'s :class:`~eaglequant.prediction.predict.Prediction` as vLLM runs it."""
        from eaglequant.checkpoint.hashing import file_sha256
        from eaglequant.measurement.served import quantized_modules, write_dequantized
        from eaglequant.prediction.predict import open_draft
        from eaglequant.prediction.shared import shares_inputs
        from eaglequant.record.as_recorded import open_written

        with (
            tempfile.TemporaryDirectory(prefix="eaglequant-served-") as tmp,
            open_written(converted, None, None) as (
                checkpoint,
                head,
                target,
            ),
        ):
            served = Path(tmp)
            write_dequantized(checkpoint, head, quantized_modules(checkpoint, head, target, "vllm"), served, "float32")
            key = (_tensors_digest(served / "model.safetensors"), file_sha256(served / "config.json"))
            if key in self._by_served:
                self.reused += 1
                return self._by_served[key]
            with Checkpoint.open(served, "DST") as copy:
                draft = open_draft(copy, self.device)
                shared = self.shared if shares_inputs(self.draft.forward.weight, draft.forward.weight) else None
                prediction = self._looked_at(draft, shared)
        self._by_served[key] = prediction
        return prediction

    def _looked_at(self, draft: Any, shared: list[Any] | None) -> Any:
        """``draft`` predicted sequence by sequence, up to the look that settles its verdict (all sequences when
        not sequential or none settles it)."""
        from eaglequant.prediction.predict import predicted_sequences

        counts: list[Any] = []
        for row in predicted_sequences(draft, self.sequences, self.max_draft_tokens, shared):
            counts.append(row)
            if self.sequential is not None:
                plan, budget = self.sequential
                prediction = self._prediction(counts)
                settled = plan.settled(prediction.difference, len(counts), budget)
                if settled is False or (settled and self.stop_within):
                    return prediction
        return self._prediction(counts)

    def _prediction(self, counts: list[Any]) -> Any:
        """The prediction on the first ``len(counts)`` sequences, paired with the source's on the same ones."""
        from eaglequant.prediction.predict import AcceptanceTable, Prediction

        taken = len(counts)
        table = AcceptanceTable(tuple(counts), tuple(len(seq.ids) for seq in self.sequences[:taken]))
        return Prediction.of(self.table, table, None, f"{taken} sequences")


def _tensors_digest(path: Path) -> str:
    """SHA-256 of a safetensors file's tensors (names, dtypes, shapes, values) in name order, one tensor at a time:
    the same draft whatever order its writer laid them out in. A zero's sign is left out (formats' dequantization
    differs there, and -0.0 and 0.0 are equal in every product, sum and arg-max the prediction takes)."""
    import hashlib

    import torch
    from safetensors import safe_open

    digest = hashlib.sha256()
    with safe_open(str(path), "pt") as handle:
        for name in sorted(handle.keys()):
            tensor = handle.get_tensor(name)
            tensor = (tensor + 0.0 if tensor.is_floating_point() else tensor).contiguous()
            digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}".encode())
            digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def predicted_from_smallest(
    count: int,
    converted: Callable[[int], Path],
    predicted: Callable[[Path], Any],
    within: Callable[[Any], bool],
    done: Callable[[int, Any], None],
    workers: int,
) -> list[Any]:
    """The predictions of candidates 0, 1, ... in that order, up to the first ``within`` (all when none is): each
    is converted here (``converted(index)``) while up to ``workers`` earlier ones are predicted in the background.
    ``done(index, prediction)`` as each is judged. Candidates converted ahead of the first within are dropped."""
    results: list[Any] = []
    pending: deque[Future[Any]] = deque()
    following = 0
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="eaglequant-predict") as pool:
        try:
            while len(results) < count:
                while following < count and len(pending) <= workers:  # one more than run: converted ahead
                    pending.append(pool.submit(predicted, converted(following)))
                    following += 1
                prediction = pending.popleft().result()
                done(len(results), prediction)
                results.append(prediction)
                if within(prediction):
                    break
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    return results
