"""The files an output has beside its shards: the index, JSON, and the source's other files carried over."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from eaglequant.checkpoint.destination import REPORT_NAME
from eaglequant.checkpoint.files import OutputShards, copy_side_files, write_index, write_json
from eaglequant.checkpoint.reader import SAFETENSORS_INDEX, Checkpoint
from eaglequant.checkpoint.writer import TensorSpec
from tests.conftest import FIXTURES


def test_the_index_maps_each_tensor_to_its_shard_and_totals_the_bytes(tmp_path: Path) -> None:
    shards = [[TensorSpec("b", "BF16", (4, 8))], [TensorSpec("a", "F32", (3,)), TensorSpec("c", "U8", (5,))]]
    write_index(tmp_path, shards, ["one.safetensors", "two.safetensors"])
    index = json.loads((tmp_path / SAFETENSORS_INDEX).read_text())
    assert index == {
        "metadata": {"total_size": 4 * 8 * 2 + 3 * 4 + 5},
        "weight_map": {"a": "two.safetensors", "b": "one.safetensors", "c": "two.safetensors"},
    }
    assert list(index["weight_map"]) == ["a", "b", "c"]


def test_json_is_written_indented_with_unicode_kept_and_a_final_newline(tmp_path: Path) -> None:
    write_json(tmp_path / "x.json", {"name": "draft ✓", "n": [1]})
    assert (tmp_path / "x.json").read_text(encoding="utf-8") == '{\n  "name": "draft ✓",\n  "n": [\n    1\n  ]\n}\n'


def test_side_files_are_carried_over_but_weights_config_report_and_replaced_files(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(FIXTURES / "sharded-split", source)
    (source / "stray.safetensors").write_bytes(b"not listed")
    (source / REPORT_NAME).write_text("{}")
    (source / "README.md").write_text("card")
    (source / "code").mkdir()
    (source / "code" / "modeling.py").write_text("pass")
    out = tmp_path / "out"
    out.mkdir()
    with Checkpoint.open(source) as checkpoint:
        copied = copy_side_files(checkpoint, out, replaced=("README.md",))
    assert sorted(copied) == ["code/modeling.py", "generation_config.json", "tokenizer_config.json"]
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == sorted(copied)
    assert (out / "code" / "modeling.py").read_text() == "pass"


def test_output_shards_split_in_order_fill_in_any_order_and_index_themselves(tmp_path: Path) -> None:
    specs = [TensorSpec(f"t{i}", "U8", (40,)) for i in range(5)]
    with OutputShards(tmp_path, specs, max_shard_bytes=100) as shards:
        assert shards.names == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
        for i, spec in reversed(list(enumerate(specs))):
            shards.holding[spec.name].write(spec.name, 0, bytes([i]) * 40)
        hashes = shards.close()
    assert hashes == {name: hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() for name in shards.names}
    index = json.loads((tmp_path / SAFETENSORS_INDEX).read_text())
    assert index["weight_map"] == {f"t{i}": shards.names[i // 2] for i in range(5)}
    write_json(tmp_path / "config.json", {})  # what makes the directory a checkpoint to the reader
    with Checkpoint.open(tmp_path) as written:
        assert [written.read(f"t{i}").numpy().tobytes() for i in range(5)] == [bytes([i]) * 40 for i in range(5)]


def test_output_shards_under_the_limit_are_one_file_without_an_index(tmp_path: Path) -> None:
    with OutputShards(tmp_path, [TensorSpec("w", "BF16", (2, 2))], max_shard_bytes=10**9) as shards:
        shards.holding["w"].write("w", 0, bytes(8))
        assert list(shards.close()) == ["model.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]
