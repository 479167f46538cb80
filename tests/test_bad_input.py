"""Bad input is refused with exit code 2 and one actionable line naming the culprit; nothing is written.

Every case copies a good fixture into ``tmp_path`` and damages it in code (no binary blobs are
committed), then runs ``eaglequant convert SRC DST`` in-process.
"""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.conftest import FIXTURES, run_cli, run_cli_subprocess

EXIT_BAD_INPUT = 2
SHARD_1 = "model-00001-of-00003.safetensors"
SHARD_2 = "model-00002-of-00003.safetensors"
INDEX = "model.safetensors.index.json"
Q_PROJ = "midlayer.self_attn.q_proj.weight"


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


def edit_tensors(path: Path, edit: Callable[[dict[str, torch.Tensor]], None]) -> None:
    tensors = load_file(path)
    edit(tensors)
    save_file(tensors, path, metadata={"format": "pt"})


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
    # tensor contents
    case("nan-weight", "specforge-llama", set_value(Q_PROJ, float("nan")), ("model.safetensors", Q_PROJ, "NaN")),
    case(
        "inf-weight",
        "specforge-llama",
        set_value("midlayer.mlp.down_proj.weight", float("inf")),
        ("model.safetensors", "midlayer.mlp.down_proj.weight", "Inf"),
    ),
    case("already-f8-weight", "specforge-llama", f8_weight, ("model.safetensors", Q_PROJ, "F8_E4M3")),
    # weight files
    case("symlink-leaves-src", "specforge-llama", symlink_outside, ("model.safetensors", "symlink")),
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
    case("bin-pickles-an-object", "eagle-original-bin", bin_with_object, ("pytorch_model.bin", "weights_only")),
    case("bin-truncated", "eagle-original-bin", bin_truncated, ("pytorch_model.bin",)),
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
    return sorted(dst.parent.glob(f".{dst.name}.eaglequant-tmp-*"))


def assert_refused(result: Any, expect: tuple[str, ...]) -> str:
    """Exit 2 and exactly one line ``error: ...`` holding every expected substring; no traceback."""
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
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
    result = run_cli("convert", str(src), str(dst), *bad.args)
    assert_refused(result, tuple(e.format(src=src) for e in bad.expect))
    assert not dst.exists()
    assert temporaries_beside(dst) == []


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
    result = run_cli("convert", str(src), str(dst), "--overwrite")
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
