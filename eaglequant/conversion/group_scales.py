"""The values a fused group shares (see :class:`eaglequant.formats.GroupScales`), computed by tasks the conversion's
thread pool runs: the NVFP4 global scale needs max |W| over every member's rows before any member is quantized,
one extra read of those rows, which runs in parallel with the copies instead of in front of the quantization."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.errors import CheckpointError
from eaglequant.conversion.plan import ConversionPlan
from eaglequant.formats import GroupScales
from eaglequant.numerics.rows import row_blocks

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class AmaxTask:
    """max |W| over one block of one member's rows."""

    run: Callable[[], None]
    weight: str  # the tensor it reads


class GroupScaleTasks:
    """One :class:`GroupScales` per fused group, each a future that its :meth:`tasks` complete."""

    def __init__(self, checkpoint: Checkpoint, plan: ConversionPlan, block_elements: int) -> None:
        self.checkpoint = checkpoint
        self.plan = plan
        self.block_elements = block_elements
        self._groups: dict[tuple[str, ...], _PendingGroup] = {}

    def tasks(self) -> Iterator[AmaxTask]:
        """Every group's amax tasks (none when the scheme has no global scale), in plan order."""
        for linear in self.plan.quantized:
            yield from self._group(self.plan.scale_group(linear.module)).tasks()

    def get(self, module: str) -> GroupScales:
        """``module``'s group values, once its tasks have run."""
        group = self._group(self.plan.scale_group(module))
        if not group.handed_out:  # nothing would ever complete the future: fail instead of waiting forever
            raise RuntimeError(f"{module}: its group's amax tasks were never handed out")
        return group.result.result()

    def _group(self, members: tuple[str, ...]) -> _PendingGroup:
        if members not in self._groups:
            self._groups[members] = _PendingGroup(self, members)
        return self._groups[members]


class _PendingGroup:
    def __init__(self, owner: GroupScaleTasks, members: tuple[str, ...]) -> None:
        self.owner = owner
        self.members = members
        self.result: Future[GroupScales] = Future()
        self._lock = threading.Lock()
        self._amax: dict[tuple[str, int], tuple[torch.Tensor, int]] = {}  # (member, block) -> (amax, NaN/Infs)
        self.handed_out = False
        self._blocks = 0
        plan = owner.plan
        self._input_amax = max(plan.input_amax[m] for m in members) if members[0] in plan.input_amax else None

    def tasks(self) -> Iterator[AmaxTask]:
        if self.handed_out:
            return
        self.handed_out = True
        if not self.owner.plan.scheme_of(self.members[0]).weight.kind.global_scale:  # a fused group shares its scheme
            self._finish()
            return
        work = []
        for member in self.members:
            linear = self.owner.plan.head.linear(member)
            blocks = row_blocks(linear.out_features, linear.in_features, self.owner.block_elements)
            for index, rows in enumerate(blocks):
                work.append((member, linear.weight, index, rows))
        self._blocks = len(work)
        for member, weight, index, rows in work:

            def run(member: str = member, weight: str = weight, index: int = index, rows: slice = rows) -> None:
                self._measure(member, weight, index, rows)

            yield AmaxTask(run, weight)

    def _measure(self, member: str, weight: str, index: int, rows: slice) -> None:
        import torch

        from eaglequant.numerics.exact import abs_max

        try:
            block = self.owner.checkpoint.read_rows(weight, rows)
            amax = abs_max(block, (0, 1)).to(torch.float32)
            nonfinite = 0 if bool(torch.isfinite(amax)) else int((~torch.isfinite(block)).sum())
        except BaseException as exc:
            if not self.result.done():
                self.result.set_exception(exc)
            raise
        with self._lock:
            self._amax[(member, index)] = (amax, nonfinite)
            if len(self._amax) < self._blocks:
                return
        self._finish()

    def _finish(self) -> None:
        import torch

        weight_amax = None
        if self._amax:
            for member in self.members:  # the first member with NaN/Inf, as it is named in the plan
                count = sum(n for (m, _), (_, n) in self._amax.items() if m == member)
                if count:
                    weight = self.owner.plan.head.linear(member).weight
                    self.result.set_exception(nonfinite_error(self.owner.checkpoint, weight, count))
                    return
            weight_amax = torch.stack([amax for amax, _ in self._amax.values()]).max()
        input_amax = None if self._input_amax is None else torch.tensor(self._input_amax, dtype=torch.float32)
        self.result.set_result(GroupScales(weight_amax, input_amax))


def nonfinite_error(checkpoint: Checkpoint, weight: str, count: int) -> CheckpointError:
    return CheckpointError(
        f"{checkpoint.tensors[weight].file}: tensor {weight!r} holds {count} NaN/Inf values",
        hint="the weights are corrupt; re-export them from the trainer",
    )
