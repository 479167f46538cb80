"""pipeline.py and finisher.py on their own: write_output executes a plan built here (no api) into a staged
directory, with worker counts, task sizes and shard sizes, and record_output reports it; bad weights are refused
before DST appears."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from eaglequant.checkpoint import destination, direct_io, writer
from eaglequant.checkpoint.reader import SAFETENSORS_INDEX, Checkpoint
from eaglequant.common.errors import CheckpointError
from eaglequant.conversion import finisher, pipeline
from eaglequant.conversion.plan import ConversionPlan
from eaglequant.conversion.result import ConversionResult
from eaglequant.layouts.detect import describe_head
from eaglequant.record.report import REPORT_NAME
from eaglequant.schemes.model import load_scheme
from tests.conftest import FIXTURES
from tests.plans import plan_for

SRC = FIXTURES / "specforge-llama"


@contextmanager
def planned(
    src: Path, scheme: str = "fp8-per-channel", fmt: str = "quark"
) -> Iterator[tuple[Checkpoint, ConversionPlan]]:
    with Checkpoint.open(src) as checkpoint:
        yield checkpoint, plan_for(describe_head(checkpoint), load_scheme(scheme), fmt)


def convert(
    src: Path, dst: Path, scheme: str = "fp8-per-channel", fmt: str = "quark", **kwargs: object
) -> ConversionResult:
    with planned(src, scheme, fmt) as (checkpoint, plan), destination.staged_directory(dst) as stage:
        written = pipeline.write_output(checkpoint, plan, stage.path, **kwargs)  # type: ignore[arg-type]
        result = finisher.record_output(stage.path, ConversionResult.of(dst, plan, written, checkpoint))
        stage.commit(dst, overwrite=False)
    return result


def digests(root: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.iterdir()) if p.is_file()}


class Recorder:
    """A Progress that keeps what it is told."""

    def __init__(self) -> None:
        self.phases: list[tuple[str, int | None, int | None]] = []
        self.work = 0
        self.finished: list[str] = []

    def phase(self, name: str, *, work: int | None = None, tensors: int | None = None) -> None:
        self.phases.append((name, work, tensors))

    def advance(self, work: int, finished: str | None = None) -> None:
        self.work += work
        if finished is not None:
            self.finished.append(finished)

    def stop(self) -> None:
        self.phases.append(("stopped", None, None))


def test_files_written_beside_the_output_are_hashed_into_its_report(tmp_path: Path) -> None:
    """What the caller writes into the stage after the shards (the card, a verification report) is not copied
    from the source when it replaces a source file, and its SHA-256 is in the report written last."""
    dst, progress = tmp_path / "out", Recorder()
    with planned(SRC) as (checkpoint, plan), destination.staged_directory(dst) as stage:
        written = pipeline.write_output(
            checkpoint, plan, stage.path, replaced=("tokenizer_config.json",), progress=progress
        )
        (stage.path / "tokenizer_config.json").write_text("{}\n")
        (stage.path / "NOTES.md").write_text("a caller's own file\n")
        result = finisher.record_output(stage.path, ConversionResult.of(dst, plan, written, checkpoint))
        stage.commit(dst, overwrite=False)
    assert "tokenizer_config.json" not in result.copied_files and "generation_config.json" in result.copied_files
    assert (dst / "tokenizer_config.json").read_text() == "{}\n"
    recorded = json.loads((dst / REPORT_NAME).read_text())["files"]
    on_disk = digests(dst)
    assert recorded == {name: digest for name, digest in on_disk.items() if name != REPORT_NAME}
    assert "NOTES.md" in recorded and list(recorded) == sorted(recorded)
    assert [p[0] for p in progress.phases] == ["writing", "checking"]


def test_progress_counts_every_byte_and_tensor_of_the_writing_phase(tmp_path: Path) -> None:
    progress = Recorder()
    with planned(SRC) as (checkpoint, plan):
        pipeline.write_output(checkpoint, plan, tmp_path, progress=progress)
        sources = {o.quantized_from or o.source for o in plan.outputs}
        reads = sum(checkpoint.tensors[s].nbytes for s in {o.source for o in plan.outputs})
        assert progress.phases[0] == ("writing", reads + plan.output_bytes, len(sources))
    assert progress.work == reads + plan.output_bytes
    assert len(progress.finished) == len(sources)


def test_a_stage_committed_elsewhere_leaves_dst_as_it_was(tmp_path: Path) -> None:
    elsewhere, dst = tmp_path / "elsewhere", tmp_path / "out"
    with planned(SRC) as (checkpoint, plan), destination.staged_directory(dst) as stage:
        written = pipeline.write_output(checkpoint, plan, stage.path)
        finisher.record_output(stage.path, ConversionResult.of(dst, plan, written, checkpoint))
        stage.commit(elsewhere, overwrite=False)
    assert (elsewhere / REPORT_NAME).is_file()
    assert not dst.exists()


def test_a_stage_left_uncommitted_leaves_nothing_behind(tmp_path: Path) -> None:
    dst = tmp_path / "out"
    with planned(SRC) as (checkpoint, plan), destination.staged_directory(dst) as stage:
        pipeline.write_output(checkpoint, plan, stage.path)
    assert sorted(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("scheme", "fmt"), [("fp8-per-channel", "quark"), ("nvfp4", "modelopt"), ("mxfp4", "quark")])
def test_workers_and_task_sizes_do_not_change_a_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scheme: str, fmt: str
) -> None:
    whole = convert(SRC, tmp_path / "whole", scheme, fmt, workers=1)
    monkeypatch.setattr(pipeline, "QUANTIZE_TASK_ELEMENTS", 1024)  # many row blocks per linear
    monkeypatch.setattr(pipeline, "COPY_TASK_BYTES", 4096)  # many pieces per kept tensor
    one = convert(SRC, tmp_path / "one", scheme, fmt, workers=1)
    many = convert(SRC, tmp_path / "many", scheme, fmt, workers=3)
    written = [digests(tmp_path / name) for name in ("whole", "one", "many")]
    for files in written:
        del files[REPORT_NAME]  # names its destination
    assert written[0] == written[1] == written[2]
    assert one.linears == many.linears  # in plan order, the error sums kept by block index
    assert len(whole.linears) == len(whole.plan.quantized)
    assert [r.module for r in whole.linears] == [r.module for r in one.linears]


def test_copies_past_the_page_cache_do_not_change_a_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EAGLEQUANT_NO_DIRECT_IO", "1")
    kernel = convert(SRC, tmp_path / "kernel", "nvfp4", "modelopt", workers=3)
    monkeypatch.delenv("EAGLEQUANT_NO_DIRECT_IO")
    monkeypatch.setattr(writer, "MIN_DIRECT_BYTES", direct_io.ALIGN)  # the fixture's tensors are small
    monkeypatch.setattr(direct_io, "CHUNK_BYTES", 2 * direct_io.ALIGN)
    monkeypatch.setattr(pipeline, "COPY_TASK_BYTES", 5 * direct_io.ALIGN + 3)  # pieces that start off a block
    copied: list[int] = []
    real_copy = direct_io.DirectWriter.copy

    def counting_copy(self: direct_io.DirectWriter, src_fd: int, src_offset: int, out: int, nbytes: int) -> bool:
        copied.append(nbytes)
        return real_copy(self, src_fd, src_offset, out, nbytes)

    monkeypatch.setattr(direct_io.DirectWriter, "copy", counting_copy)
    direct = convert(SRC, tmp_path / "direct", "nvfp4", "modelopt", workers=3)
    written = [digests(tmp_path / name) for name in ("kernel", "direct")]
    for files in written:
        del files[REPORT_NAME]
    assert written[0] == written[1]
    assert kernel.files == direct.files
    assert len(copied) > 10, "the kept tensors did not go past the page cache"


def test_small_shards_are_indexed(tmp_path: Path) -> None:
    result = convert(FIXTURES / "sharded-split", tmp_path / "out", max_shard_bytes=100_000)
    index = json.loads((tmp_path / "out" / SAFETENSORS_INDEX).read_text())
    shards = sorted(p.name for p in (tmp_path / "out").glob("*.safetensors"))
    assert len(shards) > 1 and set(index["weight_map"].values()) == set(shards)
    assert set(index["weight_map"]) == {o.spec.name for o in result.plan.outputs}
    assert index["metadata"]["total_size"] == result.plan.output_bytes
    convert(FIXTURES / "sharded-split", tmp_path / "single")
    assert not (tmp_path / "single" / SAFETENSORS_INDEX).exists()
    assert [p.name for p in (tmp_path / "single").glob("*.safetensors")] == ["model.safetensors"]


def test_fused_members_share_the_global_scale_their_group_pass_computed(tmp_path: Path) -> None:
    convert(SRC, tmp_path / "out", "nvfp4", "modelopt")
    tensors = load_file(tmp_path / "out" / "model.safetensors")
    source = load_file(SRC / "model.safetensors")
    qkv = [f"midlayer.self_attn.{m}_proj" for m in "qkv"]
    scales = {tensors[f"{name}.weight_scale_2"].item() for name in qkv}
    assert len(scales) == 1
    group_amax = max(source[f"{name}.weight"].float().abs().max().item() for name in qkv)
    assert scales.pop() == pytest.approx(group_amax / (6 * 448), rel=1e-6)
    own = tensors["midlayer.self_attn.o_proj.weight_scale_2"].item()
    assert own == pytest.approx(source["midlayer.self_attn.o_proj.weight"].float().abs().max().item() / (6 * 448))


def damaged(tmp_path: Path, name: str, change: object) -> Path:
    copy = tmp_path / "src"
    shutil.copytree(SRC, copy)
    tensors = load_file(copy / "model.safetensors")
    tensors[name] = change(tensors[name].clone())  # type: ignore[operator]
    save_file(tensors, copy / "model.safetensors", metadata={"format": "pt"})
    return copy


def with_nan(weight: torch.Tensor) -> torch.Tensor:
    weight[3, 5] = float("nan")
    weight[7, 1] = float("inf")
    return weight


@pytest.mark.parametrize(("scheme", "fmt"), [("fp8-per-channel", "quark"), ("nvfp4", "modelopt")])
def test_nan_weights_are_refused_and_nothing_is_written(tmp_path: Path, scheme: str, fmt: str) -> None:
    """Counted in the row blocks (fp8) or in the group's amax pass (nvfp4, before any block is quantized)."""
    src = damaged(tmp_path, "midlayer.self_attn.k_proj.weight", with_nan)
    with pytest.raises(CheckpointError, match=r"'midlayer.self_attn.k_proj.weight' holds 2 NaN/Inf values"):
        convert(src, tmp_path / "out", scheme, fmt)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_an_all_zero_weight_is_refused(tmp_path: Path) -> None:
    src = damaged(tmp_path, "midlayer.mlp.down_proj.weight", torch.zeros_like)
    with pytest.raises(CheckpointError, match="is all zeros"):
        convert(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_post_write_check_holds_the_output_against_the_plan(tmp_path: Path) -> None:
    convert(SRC, tmp_path / "out")
    with planned(SRC) as (_, plan):
        finisher.check_written(tmp_path / "out", plan)  # the output as planned
    with planned(SRC, "mxfp4") as (_, other), pytest.raises(RuntimeError, match="differs from the plan"):
        finisher.check_written(tmp_path / "out", other)


def test_group_amax_tasks_give_the_max_over_every_member_and_refuse_to_be_awaited_unstarted() -> None:
    from eaglequant import api
    from eaglequant.conversion.group_scales import GroupScaleTasks

    src = FIXTURES / "specforge-llama"
    plan = api.inspect(src, scheme="nvfp4", format="modelopt").plan
    with Checkpoint.open(src) as checkpoint:
        scales = GroupScaleTasks(checkpoint, plan, 1 << 10)  # several blocks per member
        module = next(lin.module for lin in plan.quantized if len(plan.scale_group(lin.module)) > 1)
        with pytest.raises(RuntimeError, match="never handed out"):
            scales.get(module)  # would wait forever: nothing completes it
        for task in scales.tasks():
            task.run()
        members = plan.scale_group(module)
        expected = max(float(checkpoint.read(plan.head.linear(m).weight).float().abs().max()) for m in members)
        assert float(scales.get(module).weight_amax) == expected
