"""Executing a :class:`ConversionPlan`: every output shard created at its final size with its header inside a
temporary directory, then filled by tasks (copy part of a kept tensor, quantize a block of a linear's rows) that
write at planned offsets, in a thread pool, and their index (:class:`~eaglequant.checkpoint.files.OutputShards`);
then config.json and side files (:mod:`eaglequant.conversion.finisher`). Reporting, verifying and moving the
directory into place are the conversion job's steps (:func:`eaglequant.jobs.conversion.write_conversion`)."""

from __future__ import annotations

import itertools
import math
import os
import time
from collections import deque
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eaglequant.checkpoint.files import OutputShards
from eaglequant.checkpoint.reader import Checkpoint, tensor_bytes
from eaglequant.checkpoint.writer import SafetensorsShard, TensorSpec
from eaglequant.common.background import in_background
from eaglequant.common.errors import CheckpointError, suggested, words
from eaglequant.common.progress import NoProgress, Progress
from eaglequant.conversion.devices import quantization_device, shared_on
from eaglequant.conversion.finisher import write_metadata
from eaglequant.conversion.group_scales import GroupScaleTasks, nonfinite_error
from eaglequant.conversion.options import DEFAULT_MAX_SHARD_BYTES
from eaglequant.conversion.plan import ConversionPlan
from eaglequant.conversion.result import LinearResult, WrittenOutput
from eaglequant.formats import GroupScales
from eaglequant.formats.stored_tensors import Placement
from eaglequant.layouts.head import HeadLinear
from eaglequant.numerics.error_stats import ErrorSums, error_figures
from eaglequant.numerics.rows import row_blocks

if TYPE_CHECKING:
    import torch


def write_output(
    checkpoint: Checkpoint,
    plan: ConversionPlan,
    stage: Path,
    *,
    replaced: Collection[str] = (),
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    progress: Progress | None = None,
    workers: int | None = None,
    device: str = "cpu",
) -> WrittenOutput:
    """Write ``plan``'s output into the directory ``stage``: the shards, then the index, config.json, the
    format's side files and the source's other files (but ``replaced``, which the caller writes), re-read
    against the plan.

    ``workers``: threads that copy and quantize (default: up to 4, one per core); the output is the
    same byte for byte whatever their number. ``device``: where the quantization math runs (see
    :mod:`eaglequant.conversion.devices`); the tensors written are the same byte for byte.
    """
    progress = progress or NoProgress()
    math_device = quantization_device(device)
    started = time.perf_counter()
    progress.phase("writing", work=_work_bytes(checkpoint, plan), tensors=_tensor_count(plan))
    files, linears = _write_shards(
        checkpoint, plan, stage, max_shard_bytes, workers or default_workers(), progress, math_device
    )
    progress.phase("checking")
    copied = write_metadata(checkpoint, plan, stage, replaced)
    return WrittenOutput(files, linears, copied, time.perf_counter() - started)


def _tensor_count(plan: ConversionPlan) -> int:
    """Source tensors the writing phase finishes: each kept tensor, and each quantized linear's weight."""
    return len({o.quantized_from or o.source for o in plan.outputs})


def _work_bytes(checkpoint: Checkpoint, plan: ConversionPlan) -> int:
    """Bytes the writing phase reads and writes."""
    read = {o.source: checkpoint.tensors[o.source].nbytes for o in plan.outputs}
    return sum(read.values()) + plan.output_bytes


COPY_TASK_BYTES = 64 * 1024 * 1024  # kept tensors are copied in pieces of this size
QUANTIZE_TASK_ELEMENTS = 1 << 22  # weights are quantized in blocks of whole rows of about this many elements


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def _write_shards(
    checkpoint: Checkpoint,
    plan: ConversionPlan,
    tmp: Path,
    max_shard_bytes: int,
    workers: int,
    progress: Progress,
    device: torch.device | None = None,
) -> tuple[dict[str, str], list[LinearResult]]:
    """Every output tensor into its planned place, and the index; returns each shard's SHA-256 and the quantized
    linears."""
    with OutputShards(tmp, [o.spec for o in plan.outputs], max_shard_bytes) as shards:
        torch_ready = _TorchInBackground()
        try:
            linears = _ShardFiller(checkpoint, plan, shards.files, device, torch_ready.ready).run(workers, progress)
        finally:
            torch_ready.restore()
        return shards.close(), linears


class _TorchInBackground:
    """torch takes seconds to import, and the kept tensors (most of a head's bytes) are copied without it: it is
    imported in a thread while the first copies run, and set to one intra-op thread (parallelism comes from the
    workers; nested OpenMP teams only contend); :meth:`restore` puts the caller's thread count back."""

    def __init__(self) -> None:
        self._before = in_background(self._load, name="eaglequant-torch-import")

    @staticmethod
    def _load() -> int:
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(1)
        return before

    def ready(self, wait: bool) -> bool:
        """Whether torch is imported; ``wait``: until it is."""
        if wait:
            self._before.exception()
        return self._before.done()

    def restore(self) -> None:
        if self._before.exception() is None:
            import torch

            torch.set_num_threads(self._before.result())


@dataclass
class _Task:
    """One piece of work: copy part of a kept tensor, or quantize a block of a linear's rows."""

    run: Callable[[], Any]
    nbytes: int  # output bytes it writes
    label: str
    module: str | None = None  # for row blocks: the linear they belong to
    read: int = 0  # source bytes it reads, for progress
    last: bool = False  # the task that completes its tensor, for progress


class _ShardFiller:
    """Cuts the plan into tasks and runs them, in a thread pool when ``workers`` > 1.

    Every task writes its bytes at their planned offsets and every block's error sums are kept by block
    index, so the files and the report are byte-identical whatever the number of workers. At most two
    tasks per worker are in flight, so memory is bounded by a few row blocks, not by tensor size.
    """

    def __init__(
        self,
        checkpoint: Checkpoint,
        plan: ConversionPlan,
        files: list[SafetensorsShard],
        device: torch.device | None = None,
        torch_ready: Callable[[bool], bool] = lambda wait: True,
    ) -> None:
        self.checkpoint = checkpoint
        self.plan = plan
        self.device = device  # None: quantize on the CPU
        self.torch_ready = torch_ready  # whether torch is imported; with True, once it is
        self.where = {name: shard for shard in files for name in shard.specs}
        self.scales = GroupScaleTasks(checkpoint, plan, QUANTIZE_TASK_ELEMENTS)
        self.blocks: dict[str, list[ErrorSums]] = {}  # per linear, its blocks' sums as they complete
        self.block_counts: dict[str, int] = {}
        self.linears: list[LinearResult] = []

    def run(self, workers: int, progress: Progress) -> list[LinearResult]:
        if workers <= 1:
            for task in self._tasks():
                self._collect(task, task.run(), progress)
            return self.linears
        in_flight: deque[tuple[_Task, Future[Any]]] = deque()
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="eaglequant")
        try:
            for task in self._tasks():
                in_flight.append((task, pool.submit(task.run)))
                while len(in_flight) >= 2 * workers:
                    done, future = in_flight.popleft()
                    self._collect(done, future.result(), progress)
            while in_flight:
                done, future = in_flight.popleft()
                self._collect(done, future.result(), progress)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return self.linears

    def _tasks(self) -> Iterator[_Task]:
        """The copies alone until torch is imported (they need none; it loads meanwhile), then copies and torch work
        in turn, so that the CPU-bound quantization overlaps the kernel's copying and the hashing that follows it.
        The torch work is every fused group's amax pass, then the quantized linears in plan order."""
        copies = (
            task
            for output in self.plan.outputs
            if output.quantized_from is None
            for task in self._copy_tasks(output.source, output.spec)
        )
        for task in copies:
            yield task
            if self.torch_ready(False):
                break
        self.torch_ready(True)
        for pair in itertools.zip_longest(copies, self._torch_tasks()):
            yield from (task for task in pair if task is not None)

    def _torch_tasks(self) -> Iterator[_Task]:
        for amax in self.scales.tasks():
            yield _Task(amax.run, 0, amax.weight)
        started: set[str] = set()
        for output in self.plan.outputs:
            module = output.quantized_from
            if module is not None and module not in started:
                started.add(module)
                yield from self._quantize_tasks(module)

    def _copy_tasks(self, source: str, spec: TensorSpec) -> Iterator[_Task]:
        shard = self.where[spec.name]
        for start in range(0, spec.nbytes, COPY_TASK_BYTES):
            nbytes = min(COPY_TASK_BYTES, spec.nbytes - start)

            def copy(start: int = start, nbytes: int = nbytes) -> None:
                self.checkpoint.copy_into(source, shard, spec.name, start, nbytes)

            yield _Task(copy, nbytes, spec.name, read=nbytes, last=start + nbytes == spec.nbytes)

    def _quantize_tasks(self, module: str) -> Iterator[_Task]:
        linear, scheme = self.plan.head.linear(module), self.plan.scheme_of(module)
        specs = self.plan.quantized_specs(module)
        placed = self.plan.format.placements(linear, scheme)
        shared = self.scales.get(module)  # group-wide values are known before the first block is quantized
        align = scheme.kinds.weight_kind.rows_per_scale
        blocks = row_blocks(linear.out_features, linear.in_features, QUANTIZE_TASK_ELEMENTS, align)
        self.blocks[module], self.block_counts[module] = [], len(blocks)
        row_read = self.checkpoint.tensors[linear.weight].nbytes // linear.out_features
        for rows in blocks:
            nbytes = sum(_block_placement(spec, placed[name], align, rows)[1] for name, spec in specs.items())

            def quantize(rows: slice = rows) -> ErrorSums:
                return self._quantize_block(linear, specs, placed, shared, rows)

            read, last = row_read * (rows.stop - rows.start), rows.stop == linear.out_features
            yield _Task(quantize, nbytes, linear.weight, module, read, last)

    def _quantize_block(
        self,
        linear: HeadLinear,
        specs: dict[str, TensorSpec],
        placed: dict[str, Placement],
        shared: GroupScales,
        rows: slice,
    ) -> ErrorSums:
        weight = self.checkpoint.read_rows(linear.weight, rows)
        if self.device is not None:
            weight, shared = weight.to(self.device), shared_on(shared, self.device)
        scheme = self.plan.scheme_of(linear.module)
        block = self.plan.format.quantize_rows(linear, weight, scheme, shared)
        align = scheme.kinds.weight_kind.rows_per_scale
        for name, tensor in block.tensors.items():
            data = tensor_bytes(tensor.cpu())
            offset, nbytes = _block_placement(specs[name], placed[name], align, rows)
            if nbytes and len(data) != nbytes:
                raise RuntimeError(f"{name!r}: rows {rows.start}:{rows.stop} gave {len(data)} bytes, not {nbytes}")
            if nbytes:  # a per-tensor value is the same for every block: the first writes it
                self.where[name].write(name, offset, data)
        return block.sums

    def _collect(self, task: _Task, result: Any, progress: Progress) -> None:
        progress.advance(task.nbytes + task.read, task.label if task.last else None)
        if task.module is None:
            return
        blocks = self.blocks[task.module]
        blocks.append(result)
        if len(blocks) == self.block_counts[task.module]:
            self.linears.append(self._linear_result(self.plan.head.linear(task.module), blocks))

    def _linear_result(self, linear: HeadLinear, blocks: list[ErrorSums]) -> LinearResult:
        info = self.checkpoint.tensors[linear.weight]
        nonfinite = sum(b.nonfinite for b in blocks)
        if nonfinite:
            raise nonfinite_error(self.checkpoint, linear.weight, nonfinite)
        noise, signal = math.fsum(b.noise for b in blocks), math.fsum(b.signal for b in blocks)
        if signal == 0:
            raise CheckpointError(
                f"{info.file}: tensor {linear.weight!r} is all zeros",
                hint=words(
                    "a trained weight is never all zero: re-export the head, or keep it with ",
                    suggested("exclude", linear.checkpoint_module),
                ),
            )
        rel, sqnr = error_figures(noise, signal)
        return LinearResult(linear.module, linear.weight, (linear.out_features, linear.in_features), rel, sqnr)


def _block_placement(spec: TensorSpec, placement: Placement, rows_per_scale: int, rows: slice) -> tuple[int, int]:
    """Where a block of weight ``rows`` (starting on a scale block) goes in an output: (byte offset, bytes), by what
    its first dimension runs over (a per-tensor value is written by the first block only: 0 bytes for the others)."""
    count = rows.stop - rows.start
    if placement is Placement.WHOLE or not spec.nbytes:
        return 0, spec.nbytes if rows.start == 0 else 0
    entry = spec.nbytes // spec.shape[0]
    if placement is Placement.ROWS:
        return rows.start * entry, count * entry
    return rows.start // rows_per_scale * entry, -(-count // rows_per_scale) * entry
