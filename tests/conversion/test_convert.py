"""The conversion pipeline: sharding, pass-through bytes, side files, atomic output, user exclusions."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from eaglequant import convert, inspect
from eaglequant.checkpoint.destination import TMP_MARKER
from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.cli.command import cli_wording
from eaglequant.common.errors import InputError, OutputError
from eaglequant.conversion.options import parse_size
from eaglequant.record.report import REPORT_NAME
from tests.conftest import FIXTURES


def _all_tensors(path: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for file in sorted(path.glob("*.safetensors")):
        out.update(load_file(file))
    return out


def _raw(t: torch.Tensor) -> bytes:
    return t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()


def test_sharded_output_equals_single_file_output(tmp_path: Path) -> None:
    single = convert(FIXTURES / "sharded-split", tmp_path / "single").destination
    sharded = convert(FIXTURES / "sharded-split", tmp_path / "sharded", max_shard_size="100KB").destination
    shards = sorted(p.name for p in sharded.glob("*.safetensors"))
    assert len(shards) > 1 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    for shard in shards:
        assert (sharded / shard).stat().st_size <= 100_000 + 4096 or len(load_file(sharded / shard)) == 1
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    for name, shard in index["weight_map"].items():
        with safe_open(sharded / shard, framework="pt") as handle:
            assert name in handle.keys()  # noqa: SIM118
    a, b = _all_tensors(single), _all_tensors(sharded)
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in b.values())
    assert a.keys() == b.keys() and all(_raw(a[k]) == _raw(b[k]) for k in a)


@pytest.mark.parametrize("name", ["specforge-llama", "sharded-split", "eagle-original-bin"])
def test_kept_tensors_are_copied_byte_for_byte(name: str, tmp_path: Path) -> None:
    out = convert(FIXTURES / name, tmp_path / "out").destination
    written = _all_tensors(out)
    with Checkpoint.open(FIXTURES / name) as source:
        report = inspect(FIXTURES / name)
        for row in report.rows():
            if row.action == "keep":
                assert _raw(written[row.name]) == _raw(source.read(row.name)), row.name
                assert written[row.name].dtype == source.read(row.name).dtype


def test_bin_source_is_written_as_safetensors(tmp_path: Path) -> None:
    out = convert(FIXTURES / "eagle-original-bin", tmp_path / "out").destination
    assert (out / "model.safetensors").exists() and not (out / "pytorch_model.bin").exists()


def test_side_files_config_and_report(tmp_path: Path) -> None:
    result = convert(FIXTURES / "specforge-llama", tmp_path / "out")
    out = result.destination
    for side in ("tokenizer_config.json", "generation_config.json"):
        assert (out / side).read_bytes() == (FIXTURES / "specforge-llama" / side).read_bytes()
    source_config = json.loads((FIXTURES / "specforge-llama" / "config.json").read_text())
    config = json.loads((out / "config.json").read_text())
    assert {k: v for k, v in config.items() if k != "quantization_config"} == source_config
    report = json.loads((out / REPORT_NAME).read_text())
    for file, digest in report["files"].items():
        assert hashlib.sha256((out / file).read_bytes()).hexdigest() == digest
    assert {q["module"] for q in report["quantized"]} == {
        f"midlayer.{m}"
        for m in (
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        )
    }
    assert all(q["sqnr_db"] > 25 for q in report["quantized"])
    assert set(report["excluded_linears"]) == {"fc.weight", "lm_head.weight"}


def test_estimated_size_is_the_tensor_bytes_written(tmp_path: Path) -> None:
    estimate = inspect(FIXTURES / "torchspec-mla").estimated_output_bytes
    out = convert(FIXTURES / "torchspec-mla", tmp_path / "out").destination
    assert estimate == sum(t.numel() * t.element_size() for t in _all_tensors(out).values())


def test_overwrite_replaces_and_leaves_no_temporaries(tmp_path: Path) -> None:
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "stale.txt").write_text("old")
    with pytest.raises(OutputError, match="not written by eaglequant"):  # overwrite replaces only our own output
        convert(FIXTURES / "specforge-llama", dst, overwrite=True)
    convert(FIXTURES / "specforge-llama", dst, overwrite_any=True)
    assert not (dst / "stale.txt").exists() and (dst / "model.safetensors").exists()
    assert not [p for p in tmp_path.iterdir() if TMP_MARKER in p.name]


def test_leftovers_of_a_killed_run_are_removed(tmp_path: Path) -> None:
    dead = tmp_path / f".out{TMP_MARKER}999999999-deadbeef"  # no such pid
    dead.mkdir()
    (dead / "model.safetensors").write_bytes(b"partial")
    convert(FIXTURES / "specforge-llama", tmp_path / "out")
    assert not dead.exists()


def test_failure_midway_leaves_no_destination(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from eaglequant.checkpoint import files

    def boom(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files, "write_index", boom)
    with pytest.raises(OSError):
        convert(FIXTURES / "sharded-split", tmp_path / "out", max_shard_size="100KB")
    assert os.listdir(tmp_path) == []


def test_user_exclusion_keeps_the_mlp_and_vllm_agrees(tmp_path: Path) -> None:
    result = convert(FIXTURES / "specforge-llama", tmp_path / "out", exclude=["midlayer.mlp.*"])
    written = _all_tensors(result.destination)
    for proj in ("gate_proj", "up_proj", "down_proj"):
        assert written[f"midlayer.mlp.{proj}.weight"].dtype == torch.bfloat16
        assert f"midlayer.mlp.{proj}.weight_scale" not in written
    assert written["midlayer.self_attn.q_proj.weight"].dtype == torch.float8_e4m3fn
    exclude = json.loads((result.destination / "config.json").read_text())["quantization_config"]["exclude"]
    assert r"re:^model\.layers\.\d+\.mlp\.gate_up_proj$" in exclude
    assert r"re:^model\.layers\.\d+\.mlp\.down_proj$" in exclude


def test_partial_layer_exclusion_needs_the_target_layer_count() -> None:
    with pytest.raises(InputError) as raised:
        inspect(FIXTURES / "multi-layer", exclude=["layers.1.mlp.*"])
    assert "--target-layers" in raised.value.one_line(cli_wording)  # target_layers=N to a library caller
    patterns = inspect(FIXTURES / "multi-layer", exclude=["layers.1.mlp.*"], target_layers=61).plan.exclude_patterns
    assert r"re:^model\.layers\.62\.mlp\.down_proj$" in patterns


@pytest.mark.parametrize(
    ("text", "expected"),
    [("5GB", 5 * 10**9), ("500MB", 5 * 10**8), ("2GiB", 2 * 2**30), ("1048576", 1048576), ("1.5 GB", 1_500_000_000)],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GB", "-1GB", "5XB", "abc"])
def test_parse_size_refuses_nonsense(text: str) -> None:
    with pytest.raises(InputError):
        parse_size(text)


def test_hub_cache_snapshot_symlinks_are_followed(tmp_path: Path) -> None:
    """Hub cache snapshots hold symlinks into ../../blobs: the one escape from SRC that is allowed."""
    repo = tmp_path / "models--org--head"
    snapshot, blobs = repo / "snapshots" / "abc123", repo / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for file in (FIXTURES / "specforge-llama").iterdir():
        shutil.copy(file, blobs / file.name)
        (snapshot / file.name).symlink_to(Path("../../blobs") / file.name)
    result = convert(snapshot, tmp_path / "out")
    assert (result.destination / "model.safetensors").exists()
