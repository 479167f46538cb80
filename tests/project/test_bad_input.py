"""Bad input is refused with exit code 2 and one actionable line naming the culprit; nothing is written.

Every case copies a good fixture into ``tmp_path`` and damages it in code (no binary blobs are
committed), then runs ``eaglequant convert SRC DST`` in-process.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
import pickle
import re
import shutil
import struct
import sys
import tracemalloc
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from eaglequant.checkpoint import reader
from eaglequant.checkpoint.dtypes import ITEMSIZE
from eaglequant.checkpoint.reader import Checkpoint
from tests.conftest import FIXTURES, run_cli, run_cli_subprocess

EXIT_BAD_INPUT = 2
SHARD_1 = "model-00001-of-00003.safetensors"
SHARD_2 = "model-00002-of-00003.safetensors"
INDEX = "model.safetensors.index.json"
Q_PROJ = "midlayer.self_attn.q_proj.weight"
TMP_MARKER = ".eaglequant-tmp-"
PICKLE_MARKER = "pickle-ran-code"  # what a code-running pickle would create in tmp_path


# -- helpers that damage a copied checkpoint -------------------------------------------------------


def read_safetensors(path: Path) -> tuple[dict[str, Any], bytes]:
    """The header (as parsed JSON, in file order) and the data region of a safetensors file."""
    blob = path.read_bytes()
    (length,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8 : 8 + length]), blob[8 + length :]


def write_safetensors_raw(path: Path, header: bytes, data: bytes, *, length: int | None = None) -> None:
    """Write ``header`` (raw JSON bytes, padded with spaces to 8) and ``data``; ``length`` overrides the prefix."""
    header += b" " * (-len(header) % 8)
    path.write_bytes(struct.pack("<Q", len(header) if length is None else length) + header + data)


def edit_header(path: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    header, data = read_safetensors(path)
    edit(header)
    write_safetensors_raw(path, json.dumps(header).encode("utf-8"), data)


def edit_config(src: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    config = json.loads((src / "config.json").read_text())
    edit(config)
    (src / "config.json").write_text(json.dumps(config))


def edit_index(src: Path, edit: Callable[[dict[str, str]], object]) -> None:
    index = json.loads((src / INDEX).read_text())
    edit(index["weight_map"])
    (src / INDEX).write_text(json.dumps(index))


def rewrite_index(src: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    index = json.loads((src / INDEX).read_text())
    edit(index)
    (src / INDEX).write_text(json.dumps(index))


def edit_tensors(path: Path, edit: Callable[[dict[str, torch.Tensor]], None]) -> None:
    tensors = load_file(path)
    edit(tensors)
    save_file(tensors, path, metadata={"format": "pt"})


def edit_bin(src: Path, edit: Callable[[dict[str, Any]], object], **save_kwargs: Any) -> None:
    path = src / "pytorch_model.bin"
    state = torch.load(path, weights_only=True)
    with warnings.catch_warnings():  # quantized tensors warn when built and saved
        warnings.simplefilter("ignore")
        replacement = edit(state)
        torch.save(state if replacement is None else replacement, path, **save_kwargs)


def tensor_entries(header: dict[str, Any]) -> dict[str, Any]:
    return {name: entry for name, entry in header.items() if name != "__metadata__"}


def declare_shape(path: Path, name: str, shape: list[int]) -> None:
    """Give ``name`` a new shape in the header, with data_offsets that agree with it and every later tensor
    shifted to match: the header stays self-consistent, only the data region is not there."""
    header, data = read_safetensors(path)
    entry = header[name]
    begin, end = entry["data_offsets"]
    new_end = begin + math.prod(shape) * ITEMSIZE[entry["dtype"]]
    for other, later in tensor_entries(header).items():
        if other != name and later["data_offsets"][0] >= end:
            later["data_offsets"] = [o + new_end - end for o in later["data_offsets"]]
    entry.update(shape=shape, data_offsets=[begin, new_end])
    write_safetensors_raw(path, json.dumps(header).encode("utf-8"), data)


def move_outside(src: Path, tmp: Path, relative: str) -> Path:
    """Move ``src/relative`` out of SRC and leave a symlink to it in its place."""
    outside = tmp / "outside" / relative
    outside.parent.mkdir(parents=True, exist_ok=True)
    (src / relative).rename(outside)
    (src / relative).symlink_to(outside)
    return outside


def set_value(name: str, value: float) -> Callable[[Path, Path], None]:
    def damage(src: Path, _tmp: Path) -> None:
        def edit(tensors: dict[str, torch.Tensor]) -> None:
            tensors[name][1, 2] = value

        edit_tensors(src / "model.safetensors", edit)

    return damage


class NotATensor:
    """A pickled object that ``torch.load(weights_only=True)`` must refuse to build."""

    def __init__(self) -> None:
        self.payload = "anything"


class RunsCode:
    """A pickle that runs a shell command when unpickled without weights_only: it creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.system, (f"touch '{self.marker}'",)


# -- the damages -----------------------------------------------------------------------------------


def no_config(src: Path, _tmp: Path) -> None:
    (src / "config.json").unlink()


def config_not_json(src: Path, _tmp: Path) -> None:
    (src / "config.json").write_text('{"hidden_size": 128,')


def config_not_utf8(src: Path, _tmp: Path) -> None:
    (src / "config.json").write_bytes(b'{"hidden_size": "\xff\xfe"}')


def config_list(src: Path, _tmp: Path) -> None:
    (src / "config.json").write_text("[1, 2, 3]")


def config_without_hidden_size(src: Path, _tmp: Path) -> None:
    edit_config(src, lambda c: c.pop("hidden_size"))


def config_wrong_hidden_size(src: Path, _tmp: Path) -> None:
    edit_config(src, lambda c: c.update(hidden_size=256))


def config_already_quantized(src: Path, _tmp: Path) -> None:
    edit_config(src, lambda c: c.update(quantization_config={"quant_method": "fp8", "activation_scheme": "dynamic"}))


def truncated(src: Path, _tmp: Path) -> None:
    path = src / "model.safetensors"
    _, data = read_safetensors(path)
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) - len(data) // 2])


def header_length_past_end(src: Path, _tmp: Path) -> None:
    path = src / "model.safetensors"
    blob = bytearray(path.read_bytes())
    blob[:8] = struct.pack("<Q", len(blob))
    path.write_bytes(bytes(blob))


def header_not_json(src: Path, _tmp: Path) -> None:
    _, data = read_safetensors(src / "model.safetensors")
    write_safetensors_raw(src / "model.safetensors", b'{"norm.weight": {"dtype": BF16}', data)


def header_not_utf8(src: Path, _tmp: Path) -> None:
    path = src / "model.safetensors"
    blob = path.read_bytes()
    assert b"norm.weight" in blob
    path.write_bytes(blob.replace(b"norm.weight", b"norm\xffweight", 1))  # same length: offsets still hold


def overlapping_offsets(src: Path, _tmp: Path) -> None:
    def edit(header: dict[str, Any]) -> None:
        begin, end = header["norm.weight"]["data_offsets"]
        header["norm.weight"]["data_offsets"] = [begin - 100, end - 100]

    edit_header(src / "model.safetensors", edit)


def length_mismatch(src: Path, _tmp: Path) -> None:
    edit_header(src / "model.safetensors", lambda h: h["norm.weight"].update(shape=[127]))


def unknown_dtype(src: Path, _tmp: Path) -> None:
    edit_header(src / "model.safetensors", lambda h: h["norm.weight"].update(dtype="F7"))


def dtype_not_a_string(src: Path, _tmp: Path) -> None:
    edit_header(src / "model.safetensors", lambda h: h["norm.weight"].update(dtype=["BF16"]))


def huge_integer_literal(src: Path, _tmp: Path) -> None:
    path = src / "model.safetensors"
    header, data = read_safetensors(path)
    text = json.dumps(header).replace('"shape": [128]', '"shape": [' + "1" * 5000 + "]", 1)
    write_safetensors_raw(path, text.encode("utf-8"), data)


def deeply_nested_header(src: Path, _tmp: Path) -> None:
    _, data = read_safetensors(src / "model.safetensors")
    write_safetensors_raw(src / "model.safetensors", b"[" * 100_000, data)


def duplicate_tensor_name(src: Path, _tmp: Path) -> None:
    path = src / "model.safetensors"
    header, data = read_safetensors(path)
    members = [f"{json.dumps(name)}: {json.dumps(entry)}" for name, entry in header.items()]
    members.append(f'"norm.weight": {json.dumps(header["norm.weight"])}')  # json.dumps cannot write this
    write_safetensors_raw(path, ("{" + ", ".join(members) + "}").encode("utf-8"), data)


def f8_weight(src: Path, _tmp: Path) -> None:
    def edit(tensors: dict[str, torch.Tensor]) -> None:
        tensors[Q_PROJ] = tensors[Q_PROJ].to(torch.float8_e4m3fn)

    edit_tensors(src / "model.safetensors", edit)


def symlink_outside(src: Path, tmp: Path) -> None:
    outside = tmp / "elsewhere.safetensors"
    (src / "model.safetensors").rename(outside)
    (src / "model.safetensors").symlink_to(outside)


def two_unindexed_files(src: Path, _tmp: Path) -> None:
    shutil.copy(src / "model.safetensors", src / "extra.safetensors")
    (src / "model.safetensors").rename(src / "weights.safetensors")


def no_weights(src: Path, _tmp: Path) -> None:
    (src / "model.safetensors").unlink()


def missing_shard(src: Path, _tmp: Path) -> None:
    (src / SHARD_2).unlink()


def index_absolute_path(src: Path, _tmp: Path) -> None:
    edit_index(src, lambda wm: wm.update({"fc.weight": str(src / SHARD_1)}))


def index_parent_path(src: Path, tmp: Path) -> None:
    # The escaping file really exists, so only the path check can refuse it.
    shutil.copy(src / SHARD_1, tmp / SHARD_1)
    edit_index(src, lambda wm: wm.update({name: f"../{SHARD_1}" for name, s in wm.items() if s == SHARD_1}))


def index_lists_absent_tensor(src: Path, _tmp: Path) -> None:
    edit_index(src, lambda wm: wm.update({"midlayer.extra_proj.weight": SHARD_1}))


def index_omits_tensor(src: Path, _tmp: Path) -> None:
    edit_index(src, lambda wm: wm.pop("norm.weight"))


def index_not_json(src: Path, _tmp: Path) -> None:
    (src / INDEX).write_text("{'weight_map': {}}")


def bin_with_object(src: Path, _tmp: Path) -> None:
    path = src / "pytorch_model.bin"
    state = torch.load(path, weights_only=True)
    state["obj"] = NotATensor()
    torch.save(state, path)


def bin_truncated(src: Path, _tmp: Path) -> None:
    path = src / "pytorch_model.bin"
    path.write_bytes(path.read_bytes()[:1000])


def gap_between_tensors(src: Path, _tmp: Path) -> None:
    path = src / "model.safetensors"
    header, data = read_safetensors(path)
    begin = header["norm.weight"]["data_offsets"][0]
    for entry in tensor_entries(header).values():
        if entry["data_offsets"][0] >= begin:
            entry["data_offsets"] = [o + 16 for o in entry["data_offsets"]]
    write_safetensors_raw(path, json.dumps(header).encode("utf-8"), data[:begin] + bytes(16) + data[begin:])


def offsets_past_end(src: Path, _tmp: Path) -> None:
    def edit(header: dict[str, Any]) -> None:
        begin, end = header["norm.weight"]["data_offsets"]
        header["norm.weight"]["data_offsets"] = [begin + 2**40, end + 2**40]

    edit_header(src / "model.safetensors", edit)


def reversed_offsets(src: Path, _tmp: Path) -> None:
    edit_header(src / "model.safetensors", lambda h: h["norm.weight"]["data_offsets"].reverse())


def negative_dim(src: Path, _tmp: Path) -> None:
    edit_header(src / "model.safetensors", lambda h: h["norm.weight"].update(shape=[-1, -128]))


def empty_file(src: Path, _tmp: Path) -> None:
    (src / "model.safetensors").write_bytes(b"")


def shape_2_40_squared(src: Path, _tmp: Path) -> None:
    edit_header(src / "model.safetensors", lambda h: h[Q_PROJ].update(shape=[2**40, 2**40]))


def shape_2_40_squared_consistent(src: Path, _tmp: Path) -> None:
    declare_shape(src / "model.safetensors", Q_PROJ, [2**40, 2**40])  # 2**81 bytes: past any u64 offset


def shape_32_gib_consistent(src: Path, _tmp: Path) -> None:
    declare_shape(src / "model.safetensors", Q_PROJ, [2**17, 2**17])


def config_dims_huge(src: Path, _tmp: Path) -> None:
    edit_config(src, lambda c: c.update(hidden_size=2**40, intermediate_size=2**42, vocab_size=2**40))


def config_and_header_huge(src: Path, _tmp: Path) -> None:
    """config.json and the header agree on a 2**36-wide MLP; only the file lacks the bytes."""
    edit_config(src, lambda c: c.update(intermediate_size=2**36))
    path = src / "model.safetensors"
    declare_shape(path, "midlayer.mlp.gate_proj.weight", [2**36, 128])
    declare_shape(path, "midlayer.mlp.up_proj.weight", [2**36, 128])
    declare_shape(path, "midlayer.mlp.down_proj.weight", [128, 2**36])


def zero_length(name: str, shape: tuple[int, ...]) -> Callable[[Path, Path], None]:
    def damage(src: Path, _tmp: Path) -> None:
        def edit(tensors: dict[str, torch.Tensor]) -> None:
            tensors[name] = torch.empty(shape, dtype=torch.bfloat16)

        edit_tensors(src / "model.safetensors", edit)

    return damage


def all_zero_weight(src: Path, _tmp: Path) -> None:
    def edit(tensors: dict[str, torch.Tensor]) -> None:
        tensors[Q_PROJ].zero_()

    edit_tensors(src / "model.safetensors", edit)


def int_weight(src: Path, _tmp: Path) -> None:
    def edit(tensors: dict[str, torch.Tensor]) -> None:
        tensors[Q_PROJ] = tensors[Q_PROJ].to(torch.int32)

    edit_tensors(src / "model.safetensors", edit)


def output_name_taken(src: Path, _tmp: Path) -> None:
    def edit(tensors: dict[str, torch.Tensor]) -> None:
        tensors["midlayer.self_attn.q_proj.weight_scale"] = torch.ones(128, dtype=torch.float32)

    edit_tensors(src / "model.safetensors", edit)


def weights_symlink_loop(src: Path, _tmp: Path) -> None:
    (src / "model.safetensors").unlink()
    (src / "model.safetensors").symlink_to("model.safetensors")


def weights_dangling_symlink(src: Path, _tmp: Path) -> None:
    (src / "model.safetensors").unlink()
    (src / "model.safetensors").symlink_to("gone.safetensors")


def weights_directory(src: Path, _tmp: Path) -> None:
    (src / "model.safetensors").unlink()
    (src / "model.safetensors").mkdir()


def config_symlink_outside(src: Path, tmp: Path) -> None:
    move_outside(src, tmp, "config.json")  # a valid config: only the symlink check can refuse it


def config_directory(src: Path, _tmp: Path) -> None:
    (src / "config.json").unlink()
    (src / "config.json").mkdir()


def set_config(**values: Any) -> Callable[[Path, Path], None]:
    def damage(src: Path, _tmp: Path) -> None:
        edit_config(src, lambda c: c.update(values))

    return damage


def speculators_intermediate_wrong(src: Path, _tmp: Path) -> None:
    edit_config(src, lambda c: c["transformer_layer_config"].update(intermediate_size=512))


def index_shard_symlink_outside(src: Path, tmp: Path) -> None:
    move_outside(src, tmp, SHARD_1)


def index_shard_in_symlinked_dir(src: Path, tmp: Path) -> None:
    outside = tmp / "outside"
    outside.mkdir()
    (src / SHARD_1).rename(outside / SHARD_1)
    (src / "sub").symlink_to(outside)
    edit_index(src, lambda wm: wm.update({name: f"sub/{SHARD_1}" for name, s in wm.items() if s == SHARD_1}))


def index_shard_symlink_loop(src: Path, _tmp: Path) -> None:
    (src / SHARD_1).unlink()
    (src / SHARD_1).symlink_to(SHARD_1)


def index_symlink_outside(src: Path, tmp: Path) -> None:
    move_outside(src, tmp, INDEX)


def index_names_wrong_shard(src: Path, _tmp: Path) -> None:
    edit_index(src, lambda wm: wm.update({"fc.weight": SHARD_2}))  # fc.weight is in shard 1


def tensor_in_two_shards(src: Path, _tmp: Path) -> None:
    fc = load_file(src / SHARD_1)["fc.weight"]
    edit_tensors(src / SHARD_2, lambda t: t.update({"fc.weight": fc}))


def index_shard(value: Any) -> Callable[[Path, Path], None]:
    def damage(src: Path, _tmp: Path) -> None:
        edit_index(src, lambda wm: wm.update({"fc.weight": value}))

    return damage


def index_weight_map_list(src: Path, _tmp: Path) -> None:
    rewrite_index(src, lambda index: index.update(weight_map=sorted(index["weight_map"].items())))


def bin_runs_code(**save_kwargs: Any) -> Callable[[Path, Path], None]:
    def damage(src: Path, tmp: Path) -> None:
        edit_bin(src, lambda state: state.update(payload=RunsCode(tmp / PICKLE_MARKER)), **save_kwargs)

    return damage


def bin_raw_pickle_runs_code(src: Path, tmp: Path) -> None:
    (src / "pytorch_model.bin").write_bytes(pickle.dumps({"payload": RunsCode(tmp / PICKLE_MARKER)}))


def bin_replace(name: str, make: Callable[[torch.Tensor], Any]) -> Callable[[Path, Path], None]:
    def damage(src: Path, _tmp: Path) -> None:
        edit_bin(src, lambda state: state.update({name: make(state.get(name, torch.zeros(2)))}))

    return damage


def nothing(_src: Path, _tmp: Path) -> None:
    pass


# -- the table -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    fixture: str
    damage: Callable[[Path, Path], None]
    expect: tuple[str, ...]  # substrings the error line must contain (file, tensor, option); {src} = SRC
    args: tuple[str, ...] = ()
    dst_inside_src: bool = False


def case(id: str, *args: Any, marks: Any = (), **kwargs: Any) -> Any:
    return pytest.param(Case(*args, **kwargs), id=id, marks=marks)


# Declarations whose data could not be held in memory: refused from the header / config before any read.
HUGE_CASES = [
    case(
        "shape-2^40-squared",
        "specforge-llama",
        shape_2_40_squared,
        ("model.safetensors", f"'{Q_PROJ}'", "[1099511627776, 1099511627776]", "needs"),
    ),
    case(
        "shape-2^40-squared-offsets-agree",
        "specforge-llama",
        shape_2_40_squared_consistent,
        ("model.safetensors", f"'{Q_PROJ}'", "past the end"),
    ),
    case(
        "shape-32GiB-offsets-agree",
        "specforge-llama",
        shape_32_gib_consistent,
        ("model.safetensors", f"'{Q_PROJ}'", "past the end"),
    ),
    case(
        "config-dims-huge",
        "specforge-llama",
        config_dims_huge,
        ("model.safetensors", "'embed_tokens.weight'", "[1099511627776, 1099511627776]", "config.json"),
    ),
    case(
        "config-and-header-agree-on-huge-mlp",
        "specforge-llama",
        config_and_header_huge,
        ("model.safetensors", "'midlayer.mlp.", "past the end"),
    ),
]

CASES = [
    # config.json
    case("config-missing", "specforge-llama", no_config, ("config.json", "missing")),
    case("config-not-json", "specforge-llama", config_not_json, ("config.json", "not valid JSON")),
    case("config-not-utf8", "specforge-llama", config_not_utf8, ("config.json",)),
    case("config-is-a-list", "specforge-llama", config_list, ("config.json", "JSON object")),
    case("config-no-hidden-size", "specforge-llama", config_without_hidden_size, ("config.json", "hidden_size")),
    case(
        "config-contradicts-shapes",
        "specforge-llama",
        config_wrong_hidden_size,
        ("model.safetensors", "tensor 'embed_tokens.weight'", "[512, 128]", "config.json"),
    ),
    case("config-already-quantized", "specforge-llama", config_already_quantized, ("config.json", "already quantized")),
    case("config-symlink-leaves-src", "specforge-llama", config_symlink_outside, ("config.json", "symlink", "outside")),
    case("config-is-a-directory", "specforge-llama", config_directory, ("config.json", "cannot read")),
    case(
        "config-intermediate-size-wrong",
        "specforge-llama",
        set_config(intermediate_size=512),
        ("model.safetensors", "'midlayer.mlp.down_proj.weight'", "[128, 512]", "config.json"),
    ),
    case(
        "config-num-attention-heads-wrong",
        "specforge-llama",
        set_config(num_attention_heads=8),
        ("model.safetensors", "'midlayer.self_attn.o_proj.weight'", "[128, 256]", "config.json"),
    ),
    case(
        "config-num-kv-heads-wrong",
        "specforge-llama",
        set_config(num_key_value_heads=4),
        ("model.safetensors", "'midlayer.self_attn.k_proj.weight'", "[128, 256]", "config.json"),
    ),
    case(
        "config-head-dim-wrong",
        "specforge-llama",
        set_config(head_dim=16),
        ("model.safetensors", "'midlayer.self_attn.k_proj.weight'", "[32, 256]", "config.json"),
    ),
    case(
        "config-draft-vocab-wrong",
        "specforge-llama",
        set_config(draft_vocab_size=300),
        ("model.safetensors", "'d2t'", "[300]", "config.json"),
    ),
    case(
        "config-too-many-aux-layers",
        "specforge-llama",
        set_config(eagle_config={"eagle_aux_hidden_state_layer_ids": list(range(1000))}),
        ("model.safetensors", "'fc.weight'", "config.json"),
    ),
    case(
        "config-speculators-nested-dims-wrong",
        "speculators-llama",
        speculators_intermediate_wrong,
        ("model.safetensors", "'layers.0.mlp.down_proj.weight'", "[128, 512]", "config.json"),
    ),
    case("config-hidden-size-bool", "specforge-llama", set_config(hidden_size=True), ("config.json", "hidden_size")),
    case("config-hidden-size-float", "specforge-llama", set_config(hidden_size=128.0), ("config.json", "128.0")),
    case(
        "config-heads-negative",
        "specforge-llama",
        set_config(num_attention_heads=-4),
        ("config.json", "num_attention_heads", "-4"),
    ),
    # safetensors header and data
    case("truncated", "specforge-llama", truncated, ("model.safetensors", "after the header")),
    case("header-length-past-end", "specforge-llama", header_length_past_end, ("model.safetensors", "header length")),
    case("header-not-json", "specforge-llama", header_not_json, ("model.safetensors", "not valid JSON")),
    case("header-not-utf8", "specforge-llama", header_not_utf8, ("model.safetensors", "UTF-8")),
    case("offsets-overlap", "specforge-llama", overlapping_offsets, ("model.safetensors", "'norm.weight'", "overlap")),
    case("dtype-shape-bytes-mismatch", "specforge-llama", length_mismatch, ("model.safetensors", "'norm.weight'")),
    case("unknown-dtype", "specforge-llama", unknown_dtype, ("model.safetensors", "'norm.weight'", "F7")),
    case("duplicate-tensor-name", "specforge-llama", duplicate_tensor_name, ("model.safetensors", "'norm.weight'")),
    case("dtype-not-a-string", "specforge-llama", dtype_not_a_string, ("model.safetensors", "'norm.weight'")),
    case("integer-over-4300-digits", "specforge-llama", huge_integer_literal, ("model.safetensors",)),
    case("header-nested-100k-deep", "specforge-llama", deeply_nested_header, ("model.safetensors",)),
    case("offsets-leave-a-gap", "specforge-llama", gap_between_tensors, ("model.safetensors", "'norm.weight'", "gap")),
    case(
        "offsets-past-end",
        "specforge-llama",
        offsets_past_end,
        ("model.safetensors", "'norm.weight'", "past the end"),
    ),
    case(
        "offsets-reversed",
        "specforge-llama",
        reversed_offsets,
        ("model.safetensors", "'norm.weight'", "data_offsets"),
    ),
    case("shape-negative", "specforge-llama", negative_dim, ("model.safetensors", "'norm.weight'", "shape")),
    case("empty-file", "specforge-llama", empty_file, ("model.safetensors", "too short")),
    *HUGE_CASES,
    # tensor contents
    case("nan-weight", "specforge-llama", set_value(Q_PROJ, float("nan")), ("model.safetensors", Q_PROJ, "NaN")),
    case(
        "nan-weight-in-nvfp4-group",  # found by the group's global-amax pass, before any member is quantized
        "specforge-llama",
        set_value("midlayer.self_attn.v_proj.weight", float("nan")),
        ("model.safetensors", "'midlayer.self_attn.v_proj.weight'", "NaN"),
        args=("--scheme", "nvfp4", "--format", "modelopt"),
    ),
    case(
        "inf-weight",
        "specforge-llama",
        set_value("midlayer.mlp.down_proj.weight", float("inf")),
        ("model.safetensors", "midlayer.mlp.down_proj.weight", "Inf"),
    ),
    case("already-f8-weight", "specforge-llama", f8_weight, ("model.safetensors", Q_PROJ, "F8_E4M3")),
    case("int32-weight", "specforge-llama", int_weight, ("model.safetensors", f"'{Q_PROJ}'", "I32")),
    case(
        "zero-length-linear",
        "specforge-llama",
        zero_length(Q_PROJ, (0, 128)),
        ("model.safetensors", f"'{Q_PROJ}'", "[0, 128]", "config.json"),
    ),
    case(
        "zero-length-norm",
        "specforge-llama",
        zero_length("norm.weight", (0,)),
        ("model.safetensors", "'norm.weight'", "[0]", "config.json"),
    ),
    case(
        "all-zero-linear",
        "specforge-llama",
        all_zero_weight,
        ("model.safetensors", f"'{Q_PROJ}'", "zero"),
    ),
    case(
        "output-name-already-taken",
        "specforge-llama",
        output_name_taken,
        ("model.safetensors", "'midlayer.self_attn.q_proj.weight_scale'"),
    ),
    # weight files
    case("symlink-leaves-src", "specforge-llama", symlink_outside, ("model.safetensors", "symlink")),
    case("symlink-loop", "specforge-llama", weights_symlink_loop, ("model.safetensors", "symlink loop")),
    case("dangling-symlink", "specforge-llama", weights_dangling_symlink, ("model.safetensors", "No such file")),
    case("weights-is-a-directory", "specforge-llama", weights_directory, ("model.safetensors", "Is a directory")),
    case("two-safetensors-no-index", "specforge-llama", two_unindexed_files, ("2 .safetensors files", INDEX)),
    case("no-weights", "specforge-llama", no_weights, ("{src}: no weights found",)),
    case("index-missing-shard", "sharded-split", missing_shard, (INDEX, SHARD_2)),
    case("index-absolute-path", "sharded-split", index_absolute_path, (INDEX, f"'{{src}}/{SHARD_1}'", "outside")),
    case("index-parent-path", "sharded-split", index_parent_path, (INDEX, f"'../{SHARD_1}'", "outside")),
    case(
        "index-lists-absent-tensor",
        "sharded-split",
        index_lists_absent_tensor,
        ("'midlayer.extra_proj.weight'", SHARD_1),
    ),
    case("index-omits-tensor", "sharded-split", index_omits_tensor, (SHARD_1, "'norm.weight'", "index")),
    case("index-not-json", "sharded-split", index_not_json, (INDEX, "not valid JSON")),
    case("index-symlink-leaves-src", "sharded-split", index_symlink_outside, (INDEX, "symlink", "outside")),
    case(
        "index-shard-symlink-leaves-src", "sharded-split", index_shard_symlink_outside, (SHARD_1, "symlink", "outside")
    ),
    case(
        "index-shard-in-symlinked-dir",
        "sharded-split",
        index_shard_in_symlinked_dir,
        (f"sub/{SHARD_1}", "symlink", "outside"),
    ),
    case("index-shard-symlink-loop", "sharded-split", index_shard_symlink_loop, (SHARD_1, "symlink loop")),
    case(
        "index-names-wrong-shard",
        "sharded-split",
        index_names_wrong_shard,
        (INDEX, "'fc.weight'", f"'{SHARD_2}'", f"in '{SHARD_1}'"),
    ),
    case(
        "tensor-in-two-shards",
        "sharded-split",
        tensor_in_two_shards,
        (SHARD_2, "'fc.weight'", f"also appears in {SHARD_1}"),
    ),
    case("index-shard-name-nul", "sharded-split", index_shard("model\0.safetensors"), (INDEX, "not a valid file name")),
    case("index-shard-name-too-long", "sharded-split", index_shard("x" * 300), (INDEX, "x" * 300, "cannot be opened")),
    case("index-shard-name-a-number", "sharded-split", index_shard(1), (INDEX, "weight_map")),
    case("index-weight-map-a-list", "sharded-split", index_weight_map_list, (INDEX, "weight_map")),
    case("bin-pickles-an-object", "eagle-original-bin", bin_with_object, ("pytorch_model.bin", "weights_only")),
    case("bin-truncated", "eagle-original-bin", bin_truncated, ("pytorch_model.bin",)),
    case("bin-pickle-runs-code", "eagle-original-bin", bin_runs_code(), ("pytorch_model.bin", "weights_only")),
    case(
        "bin-legacy-pickle-runs-code",
        "eagle-original-bin",
        bin_runs_code(_use_new_zipfile_serialization=False),
        ("pytorch_model.bin", "weights_only"),
    ),
    case("bin-raw-pickle-runs-code", "eagle-original-bin", bin_raw_pickle_runs_code, ("pytorch_model.bin",)),
    case(
        "bin-not-a-dict",
        "eagle-original-bin",
        lambda src, _tmp: edit_bin(src, lambda state: list(state.values())),
        ("pytorch_model.bin", "dict of tensors"),
    ),
    case(
        "bin-nested-dict",
        "eagle-original-bin",
        bin_replace("nested", lambda t: {"inner": t}),
        ("pytorch_model.bin", "'nested'", "not a tensor"),
    ),
    case(
        "bin-sparse-tensor",
        "eagle-original-bin",
        bin_replace(Q_PROJ, lambda t: t.to_sparse()),
        ("pytorch_model.bin", f"'{Q_PROJ}'", "sparse"),
    ),
    case(
        "bin-meta-tensor",
        "eagle-original-bin",
        bin_replace(Q_PROJ, lambda t: torch.empty(t.shape, dtype=t.dtype, device="meta")),
        ("pytorch_model.bin", f"'{Q_PROJ}'", "meta"),
    ),
    case(
        "bin-quantized-tensor",
        "eagle-original-bin",
        bin_replace(Q_PROJ, lambda t: torch.quantize_per_tensor(t.float(), 0.01, 0, torch.qint8)),
        ("pytorch_model.bin", f"'{Q_PROJ}'", "qint8"),
    ),
    case(
        "bin-complex-tensor",
        "eagle-original-bin",
        bin_replace("d2t", lambda t: t.to(torch.complex64)),
        ("pytorch_model.bin", "'d2t'", "complex64"),
    ),
    # destination and options
    case("dst-inside-src", "specforge-llama", nothing, ("out", "inside the source"), dst_inside_src=True),
    case(
        "exclude-matches-nothing",
        "specforge-llama",
        nothing,
        ("'midlayer.nothing.*'", "matches nothing"),
        args=("--exclude", "midlayer.nothing.*"),
    ),
    case(
        "exclude-matches-a-norm",
        "specforge-llama",
        nothing,
        ("'norm.weight'", "non-linear"),
        args=("--exclude", "norm.weight"),
    ),
    case(
        "exclude-bad-regex",
        "specforge-llama",
        nothing,
        ("'re:(q_proj'", "regular expression"),
        args=("-x", "re:(q_proj"),
    ),
    case(
        "exclude-splits-fused-qkv",
        "specforge-llama",
        nothing,
        ("q_proj", "k_proj", "v_proj", "qkv_proj"),
        args=("--exclude", "midlayer.self_attn.q_proj"),
    ),
    case(
        "exclude-glob-class-echoed",
        "specforge-llama",
        nothing,
        ("'midlayer.[xyz]*'",),
        args=("--exclude", "midlayer.[xyz]*"),
    ),
    case(
        "exclude-closing-tag-echoed", "specforge-llama", nothing, ("'nomatch[/x]'",), args=("--exclude", "nomatch[/x]")
    ),
    case(
        "unknown-scheme",
        "specforge-llama",
        nothing,
        ("'no-such-scheme'", "scheme"),
        args=("--scheme", "no-such-scheme"),
    ),
    case(
        "unknown-format",
        "specforge-llama",
        nothing,
        ("'no-such-format'", "format"),
        args=("--format", "no-such-format"),
    ),
    case(
        "bad-shard-size", "specforge-llama", nothing, ("'lots'", "--max-shard-size"), args=("--max-shard-size", "lots")
    ),
]


def damaged_copy(tmp_path: Path, fixture: str, damage: Callable[[Path, Path], None]) -> Path:
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / fixture, src)
    damage(src, tmp_path)
    return src


def temporaries_beside(dst: Path) -> list[Path]:
    return sorted(dst.parent.glob(f".{dst.name}{TMP_MARKER}*"))


def tree(root: Path) -> dict[str, tuple[str, str]]:
    """Every path under ``root`` (symlinks not followed) -> its kind and content: file digest, link target."""
    found: dict[str, tuple[str, str]] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            key = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[key] = ("symlink", os.readlink(path))
            elif path.is_dir():
                found[key] = ("dir", "")
            else:
                found[key] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
    return found


PHASE_LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d [a-z ,]+: \d+\.\d\d s")  # off a terminal, each finished phase


def assert_refused(result: Any, expect: tuple[str, ...]) -> str:
    """Exit 2 and exactly one line ``error: ...`` holding every expected substring (after the log lines of the
    phases that completed before it); no traceback."""
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if not PHASE_LOG_LINE.match(line)]
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("error:"), line
    assert line.removeprefix("error:").strip(), line
    for substring in expect:
        assert substring in line, f"{substring!r} not in {line!r}"
    assert result.exit_code == EXIT_BAD_INPUT, result.stderr
    return line


@pytest.mark.parametrize("bad", CASES)
def test_convert_refuses_bad_input(tmp_path: Path, bad: Case) -> None:
    src = damaged_copy(tmp_path, bad.fixture, bad.damage)
    dst = src / "out" if bad.dst_inside_src else tmp_path / "out"
    before = tree(tmp_path)
    result = run_cli("convert", str(src), str(dst), *bad.args)
    assert_refused(result, tuple(e.format(src=src) for e in bad.expect))
    assert not dst.exists()
    assert temporaries_beside(dst) == []
    after = tree(tmp_path)
    assert [p for p in after if TMP_MARKER in p] == []
    assert not (tmp_path / PICKLE_MARKER).exists()
    assert after == before  # nothing written (nor changed, nor removed) anywhere, SRC included


def _damages() -> tuple[set[str], set[str]]:
    """This module's ways of damaging a copied checkpoint: functions ``(src, tmp) -> None``, and factories
    returning one (``set_config(...)``), by name."""
    damages, factories = set(), set()
    for name, value in globals().items():
        if not (inspect.isfunction(value) and value.__module__ == __name__):
            continue
        signature = inspect.signature(value)
        if [p.removeprefix("_") for p in signature.parameters] == ["src", "tmp"]:
            damages.add(name)
        elif signature.return_annotation == "Callable[[Path, Path], None]":
            factories.add(name)
    return damages, factories


def _what(case: Case) -> tuple[Any, ...]:
    """What a case feeds ``convert``: a factory's damage is told apart by the values it was made with."""
    made_with = tuple(repr(cell.cell_contents) for cell in case.damage.__closure__ or ())
    code = case.damage.__code__
    return case.fixture, code.co_filename, code.co_firstlineno, made_with, case.args, case.dst_inside_src


def test_every_damage_has_a_case() -> None:
    """Each hostile input this module can make is refused by some case of the table (a damage written without
    a case, or a case removed while its damage stays, fails here), and no two cases are the same input."""
    table = [param.values[0] for param in CASES]  # HUGE_CASES among them
    used = {case.damage.__qualname__ for case in table}
    damages, factories = _damages()
    assert damages - used == set()
    assert {f for f in factories if not any(q.startswith(f"{f}.<locals>.") for q in used)} == set()
    inputs = [_what(case) for case in table if case.damage is not nothing]
    assert [i for i in inputs if inputs.count(i) > 1] == []
    # the destination and option cases run on an undamaged copy: each asks something different
    options = [_what(case) for case in table if case.damage is nothing]
    assert [o for o in options if options.count(o) > 1] == []


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as handle:  # "5": reset the peak RSS (VmHWM) to the current RSS
            handle.write("5")
        return True
    except OSError:
        return False


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


MAX_REFUSAL_CALLS = 500_000  # about ten times what the refusals make (47,000)


@pytest.mark.parametrize("bad", HUGE_CASES)
def test_huge_declarations_are_refused_before_any_read(tmp_path: Path, bad: Case, monkeypatch: Any) -> None:
    """Refused from the header and config alone: no tensor byte read, no memory allocated, at once."""
    src = damaged_copy(tmp_path, bad.fixture, bad.damage)
    expect = tuple(e.format(src=src) for e in bad.expect)
    assert_refused(run_cli("convert", str(src), str(tmp_path / "warm")), expect)  # imports done, untraced

    reads: list[str] = []

    def no_read(*args: Any, **kwargs: Any) -> Any:
        reads.append(repr(args)[:200])
        raise AssertionError("tensor data was read")

    monkeypatch.setattr(reader, "read_bytes", no_read)
    for method in ("read", "read_rows", "copy_into"):  # every way to tensor data
        monkeypatch.setattr(Checkpoint, method, no_read)
    rss_tracked = _reset_peak_rss()
    rss_before = _status_bytes("VmRSS:")
    calls = [0]

    def count(frame: Any, event: str, arg: Any) -> None:
        calls[0] += event == "call"

    tracemalloc.start()
    sys.setprofile(count)
    try:
        result = run_cli("convert", str(src), str(tmp_path / "out"))
        _, python_peak = tracemalloc.get_traced_memory()
    finally:
        sys.setprofile(None)
        tracemalloc.stop()
    assert_refused(result, expect)
    assert reads == []
    assert python_peak < 64 * 2**20, python_peak
    if rss_tracked:
        assert _status_bytes("VmHWM:") - rss_before < 256 * 2**20
    # "at once" as work done, not time: no loop over the declared elements, rows or blocks (a count of Python
    # calls, the same on any machine; a refusal from headers makes a few tens of thousands)
    assert calls[0] < MAX_REFUSAL_CALLS, calls[0]
    assert not (tmp_path / "out").exists()


def test_zero_length_extra_tensor_converts(tmp_path: Path) -> None:
    """An empty tensor outside the known layout (a placeholder buffer) is not hostile: copied as is."""
    extras = {"midlayer.extra_buffer": (0, 3), "marker": (0,)}

    def add(tensors: dict[str, torch.Tensor]) -> None:
        tensors.update({name: torch.empty(shape, dtype=torch.bfloat16) for name, shape in extras.items()})

    src = damaged_copy(tmp_path, "specforge-llama", nothing)
    edit_tensors(src / "model.safetensors", add)
    dst = tmp_path / "out"
    result = run_cli("convert", str(src), str(dst))
    assert result.exit_code == 0, result.stderr
    written = load_file(dst / "model.safetensors")
    for name, shape in extras.items():
        assert tuple(written[name].shape) == shape and written[name].dtype == torch.bfloat16


def test_code_running_pickle_payload_is_live(tmp_path: Path) -> None:
    """The pickle cases would create the marker if anything unpickled them unsafely (so their check can fail)."""
    damage = bin_runs_code()
    src = damaged_copy(tmp_path, "eagle-original-bin", damage)
    assert not (tmp_path / PICKLE_MARKER).exists()
    torch.load(src / "pytorch_model.bin", weights_only=False)  # the unsafe load the tool must never do
    assert (tmp_path / PICKLE_MARKER).exists()


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_existing_dst_is_refused_and_left_untouched(tmp_path: Path) -> None:
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "keep.txt").write_text("precious")
    before = snapshot(dst)
    result = run_cli("convert", str(FIXTURES / "specforge-llama"), str(dst))
    assert_refused(result, ("out", "already exists", "--overwrite"))
    assert snapshot(dst) == before
    assert temporaries_beside(dst) == []


def test_failure_midway_with_overwrite_leaves_existing_dst_untouched(tmp_path: Path) -> None:
    """The NaN is found while the shards are being written: the old DST must survive, and no temporary."""
    src = damaged_copy(tmp_path, "specforge-llama", set_value(Q_PROJ, float("nan")))
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "keep.txt").write_text("precious")
    before = snapshot(dst)
    result = run_cli("convert", str(src), str(dst), "--overwrite-any")  # allowed to replace it, if it succeeded
    assert_refused(result, (Q_PROJ, "NaN"))
    assert snapshot(dst) == before
    assert temporaries_beside(dst) == []


@pytest.mark.parametrize("where", ["equal", "parent"])
def test_dst_overlapping_src_is_refused(tmp_path: Path, where: str) -> None:
    src = damaged_copy(tmp_path, "specforge-llama", nothing)
    before = snapshot(src)
    dst = src if where == "equal" else tmp_path
    result = run_cli("convert", str(src), str(dst), "--overwrite")
    assert_refused(result, (str(dst), "source"))
    assert snapshot(src) == before


def test_src_that_is_not_a_directory(tmp_path: Path) -> None:
    src = tmp_path / "model.safetensors"
    shutil.copy(FIXTURES / "specforge-llama" / "model.safetensors", src)
    dst = tmp_path / "out"
    assert_refused(run_cli("convert", str(src), str(dst)), ("model.safetensors", "not a directory"))
    assert not dst.exists()


# -- the real process ------------------------------------------------------------------------------


def test_real_process_exits_2_without_traceback(tmp_path: Path) -> None:
    src = damaged_copy(tmp_path, "specforge-llama", overlapping_offsets)
    dst = tmp_path / "out"
    proc = run_cli_subprocess("convert", str(src), str(dst), env={"COLUMNS": "40"})  # narrow: soft_wrap must hold
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error:") and "'norm.weight'" in lines[0]
    assert not dst.exists()
    assert temporaries_beside(dst) == []


def test_real_process_with_debug_prints_the_traceback(tmp_path: Path) -> None:
    src = damaged_copy(tmp_path, "specforge-llama", overlapping_offsets)
    dst = tmp_path / "out"
    proc = run_cli_subprocess("--debug", "convert", str(src), str(dst))
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    assert "Traceback (most recent call last)" in proc.stderr
    assert "CheckpointError" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error:")
    assert not dst.exists()


def test_real_process_bin_with_quantized_tensor_prints_one_line(tmp_path: Path) -> None:
    """torch warns on stderr while it rebuilds a quantized tensor's storage; the user sees only the error."""
    damage = bin_replace(Q_PROJ, lambda t: torch.quantize_per_tensor(t.float(), 0.01, 0, torch.qint8))
    src = damaged_copy(tmp_path, "eagle-original-bin", damage)
    dst = tmp_path / "out"
    proc = run_cli_subprocess("convert", str(src), str(dst))
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error:") and f"'{Q_PROJ}'" in lines[0] and "qint8" in lines[0]
    assert not dst.exists()
