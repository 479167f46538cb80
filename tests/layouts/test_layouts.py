"""Layout detection and the canonical head description, table-driven over the fixtures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.errors import LayoutError
from eaglequant.layouts.detect import describe_head
from eaglequant.layouts.names import parse_name
from tests.conftest import FIXTURE_NAMES, FIXTURES

LLAMA_FUSED = {"layers.0.self_attn.qkv_proj", "layers.0.mlp.gate_up_proj"}
MLA_FUSED = {"layers.0.self_attn.fused_qkv_a_proj", "layers.0.mlp.gate_up_proj"}

EXPECTED = {
    # name: (layout, attention, layers, features, fused groups, source dtype)
    "specforge-llama": ("specforge-llama", "mha", 1, {"embed_tokens", "lm_head", "d2t", "t2d"}, LLAMA_FUSED, "BF16"),
    "torchspec-mla": ("torchspec-mla", "mla", 1, {"embed_tokens", "lm_head"}, MLA_FUSED, "BF16"),
    "modelopt-mla": ("modelopt", "mla", 1, {"lm_head"}, MLA_FUSED, "BF16"),
    "modelopt-llama": ("modelopt", "mha", 1, set(), LLAMA_FUSED, "BF16"),
    "speculators-llama": ("speculators", "mha", 1, {"embed_tokens", "lm_head", "d2t", "t2d"}, LLAMA_FUSED, "BF16"),
    "eagle-original-bin": ("eagle-original", "mha", 1, {"lm_head", "d2t", "t2d"}, LLAMA_FUSED, "F16"),
    "multi-layer": (
        "eagle3-layers",
        "mha",
        2,
        {"lm_head", "d2t", "t2d"},
        LLAMA_FUSED | {"layers.1.self_attn.qkv_proj", "layers.1.mlp.gate_up_proj"},
        "BF16",
    ),
    "eagle31-fc-norm": ("specforge-llama", "mha", 1, {"lm_head", "d2t", "t2d", "fc_norm"}, LLAMA_FUSED, "BF16"),
    "awkward-fp32": ("specforge-llama", "mha", 1, {"lm_head", "d2t", "t2d"}, LLAMA_FUSED, "F32"),
    "sharded-split": ("specforge-llama", "mha", 1, {"embed_tokens", "lm_head", "d2t", "t2d"}, LLAMA_FUSED, "BF16"),
}


def test_every_fixture_has_an_expectation() -> None:
    assert set(EXPECTED) == set(FIXTURE_NAMES)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_detects_layout(name: str) -> None:
    layout, attention, layers, features, fused, dtype = EXPECTED[name]
    with Checkpoint.open(FIXTURES / name) as checkpoint:
        head = describe_head(checkpoint)
    assert (head.layout, head.attention, head.num_layers, set(head.features)) == (layout, attention, layers, features)
    assert {g.name for g in head.fused_groups} == fused
    assert head.source_dtype == dtype
    assert head.reason  # the "why" shown by inspect
    for linear in head.linears:
        if linear.module in ("fc", "lm_head"):
            assert head.group_of(linear.module) is None
    roles = {t.name: t.role.value for t in head.tensors}
    assert roles["fc.weight"] == "linear" and roles["norm.weight"] == "norm"


def test_speculators_dims_come_from_transformer_layer_config() -> None:
    with Checkpoint.open(FIXTURES / "speculators-llama") as checkpoint:
        dims = describe_head(checkpoint).dims
    assert (dims.hidden_size, dims.num_key_value_heads, dims.head_dim, dims.draft_vocab_size) == (128, 2, 32, 256)


def test_mla_dims_and_fused_qkv_a() -> None:
    with Checkpoint.open(FIXTURES / "torchspec-mla") as checkpoint:
        head = describe_head(checkpoint)
    group = next(g for g in head.fused_groups if g.module_type == "fused_qkv_a_proj")
    assert group.members == ("layers.0.self_attn.q_a_proj", "layers.0.self_attn.kv_a_proj_with_mqa")
    assert head.dims.kv_lora_rank == 32 and head.dims.q_lora_rank == 64


@pytest.mark.parametrize(
    ("name", "module", "role"),
    [
        ("midlayer.self_attn.q_proj.weight", "layers.0.self_attn.q_proj", "linear"),
        ("layers.3.mlp.down_proj.weight", "layers.3.mlp.down_proj", "linear"),
        ("layers.0.self_attn.kv_a_layernorm.weight", "layers.0.self_attn.kv_a_layernorm", "norm"),
        ("fc_norm.2.weight", "fc_norm.2", "norm"),
        ("input_norm.weight", "input_norm", "norm"),
        ("d2t", "d2t", "vocab_map"),
        ("embed_tokens.weight", "embed_tokens", "embedding"),
        ("midlayer.self_attn.q_proj.bias", "layers.0.self_attn.q_proj", "bias"),
        ("something.else", "something", "other"),
    ],
)
def test_parse_name(name: str, module: str, role: str) -> None:
    parsed = parse_name(name)
    assert (parsed.module, parsed.role.value) == (module, role)


def _copy(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURES / name, tmp_path / name))


def test_unknown_layout_names_what_was_expected(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    src = tmp_path / "bert"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"hidden_size": 8}))
    save_file({"encoder.layer.0.attention.self.query.weight": torch.zeros(8, 8)}, src / "model.safetensors")
    with Checkpoint.open(src) as checkpoint, pytest.raises(LayoutError, match="expected an EAGLE-3 head"):
        describe_head(checkpoint)


def test_missing_fused_member_is_an_error(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    src = _copy("specforge-llama", tmp_path)
    tensors = load_file(src / "model.safetensors")
    del tensors["midlayer.self_attn.k_proj.weight"]
    save_file(tensors, src / "model.safetensors")
    with Checkpoint.open(src) as checkpoint, pytest.raises(LayoutError, match="k_proj"):
        describe_head(checkpoint)


def test_a_linear_is_found_by_its_canonical_name_or_is_absent() -> None:
    with Checkpoint.open(FIXTURES / "specforge-llama") as own, Checkpoint.open(FIXTURES / "modelopt-llama") as shared:
        head, without = describe_head(own), describe_head(shared)
    lm_head = head.find_linear("lm_head")
    assert lm_head is not None and lm_head is head.linear("lm_head") and lm_head.module == "lm_head"
    assert without.find_linear("lm_head") is None  # it reads the target's
    with pytest.raises(KeyError):
        without.linear("lm_head")
