"""Strategies and properties for fuzzing ``model.safetensors.index.json`` and ``config.json`` parsing.

Shared by ``tests/project/test_fuzz_inputs.py`` (a small budget, in CI) and ``scripts/fuzz.py`` (a long run by
hand). The property is the same everywhere: opening and inspecting a checkpoint whose index or config
is damaged either succeeds or raises the tool's own :class:`~eaglequant.common.errors.EagleQuantError` with a
one-line message; any other exception is a bug.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from eaglequant import api
from eaglequant.common.errors import EagleQuantError
from tests.conftest import FIXTURES

INDEX = "model.safetensors.index.json"
INDEX_FIXTURE = "sharded-split"
CONFIG_FIXTURES = (
    "specforge-llama",
    "speculators-llama",
    "torchspec-mla",
    "modelopt-llama",
    "modelopt-mla",
    "multi-layer",
    "eagle31-fc-norm",
    "sharded-split",
)
SCHEMES = ("fp8-per-channel", "mxfp4", "mxfp4-w4a16", "nvfp4")
FORMATS = ("quark", "compressed-tensors", "modelopt")
ENGINES = ("vllm", "sglang", "trtllm")

REAL_INDEX: dict[str, Any] = json.loads((FIXTURES / INDEX_FIXTURE / INDEX).read_text())
SHARDS = sorted(set(REAL_INDEX["weight_map"].values()))
TENSORS = sorted(REAL_INDEX["weight_map"])


# -- JSON building blocks --------------------------------------------------------------------------

json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)

# Names a hostile index might give a shard: escapes, absolute paths, NUL bytes, over-long names, names of
# files that exist but are no shard, and Unicode tricks.
WEIRD_NAMES = (
    "",
    ".",
    "..",
    "/",
    f"../{SHARDS[0]}",
    f"sub/../{SHARDS[0]}",
    f"/{SHARDS[0]}",
    "/etc/passwd",
    "/dev/zero",
    "/proc/self/mem",
    f"{SHARDS[0]}\0",
    "a\0b",
    "x" * 255,
    "x" * 256,
    "x" * 5000,
    ("d" * 200 + "/") * 30 + SHARDS[0],
    f"./{SHARDS[0]}",
    f"{SHARDS[0]}/",
    f"{SHARDS[0]}/.",
    f"sub/{SHARDS[0]}",
    f"~/{SHARDS[0]}",
    f"C:\\{SHARDS[0]}",
    f"..\\{SHARDS[0]}",
    "\\\\server\\share\\x.safetensors",
    f"%2e%2e/{SHARDS[0]}",
    f"\u202e{SHARDS[0]}",
    f"{SHARDS[0].upper()}",
    "config.json",
    INDEX,
    "tokenizer_config.json",
    "generation_config.json",
)
weird_names = st.sampled_from(WEIRD_NAMES) | st.text(max_size=20)


def mostly(usual: st.SearchStrategy[Any], rare: st.SearchStrategy[Any], every: int = 8) -> st.SearchStrategy[Any]:
    """``usual``, and ``rare`` about once in ``every`` draws (``a | b`` would draw each half the time)."""
    return st.integers(1, every).flatmap(lambda n: rare if n == every // 2 + 1 else usual)


def one_in(draw: st.DrawFn, n: int) -> bool:
    """True about once in ``n`` draws (a middle value: hypothesis draws the bounds of a range more often)."""
    return bool(draw(st.integers(1, n)) == n // 2 + 1)


shard_values = mostly(st.sampled_from(SHARDS) | weird_names, json_values, every=16)


# -- index.json ------------------------------------------------------------------------------------


@st.composite
def mutated_indexes(draw: st.DrawFn) -> Any:
    """The real index with a few entries changed, removed or added, or parts of it replaced by junk."""
    index: dict[str, Any] = copy.deepcopy(REAL_INDEX)
    weight_map: dict[Any, Any] = index["weight_map"]
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["set", "delete", "add", "move"]))
        key = draw(st.sampled_from(TENSORS))
        if op == "set":
            weight_map[key] = draw(shard_values)
        elif op == "delete":
            weight_map.pop(key, None)
        elif op == "add":
            weight_map[draw(weird_names)] = draw(shard_values)
        else:
            weight_map[key] = draw(st.sampled_from(SHARDS))
    if one_in(draw, 20):
        index["weight_map"] = draw(json_values)
    if draw(st.booleans()):
        index["metadata"] = draw(json_values)
    if one_in(draw, 10):
        index[draw(st.text(max_size=6))] = draw(json_values)
    return index


indexes = mostly(mutated_indexes(), json_values | st.dictionaries(st.just("weight_map"), json_values), every=6)


def encode(value: Any, ascii_only: bool) -> bytes:
    """JSON text as a hostile writer might save it (non-ASCII raw or escaped; lone surrogates kept)."""
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


# -- config.json -----------------------------------------------------------------------------------

DIM_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "draft_vocab_size",
    "target_hidden_size",
    "num_hidden_layers",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
)
dim_values = mostly(
    st.sampled_from([1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 384, 512]),
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.integers(2**31 - 2, 2**64 + 2)
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([128.0, "128", [128], {"value": 128}])
    | json_values,
    every=2,
)
aux_ids = (
    st.lists(st.integers(-2, 100), max_size=6) | st.lists(st.integers(), min_size=5000, max_size=5000) | json_values
)
verifier_names = (
    st.sampled_from([str(FIXTURES / "specforge-llama"), str(FIXTURES), "meta-llama/Llama-3.1-8B-Instruct", ""])
    | weird_names
    | json_values
)


@st.composite
def mutated_dims(draw: st.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    dims = dict(base)
    for key in draw(st.lists(st.sampled_from(DIM_KEYS), max_size=2, unique=True)):
        if one_in(draw, 6):
            dims.pop(key, None)
        else:
            dims[key] = draw(dim_values)
    return dims


@st.composite
def mutated_configs(draw: st.DrawFn, base: dict[str, Any]) -> Any:
    """A fixture's own config.json with a few dims, nestings and flags made wrong."""
    config: dict[str, Any] = copy.deepcopy(base)
    config = draw(mutated_dims(config))
    nested = config.get("transformer_layer_config")
    if (isinstance(nested, dict) and draw(st.booleans())) or one_in(draw, 8):
        choice = draw(st.integers(0, 4))
        if choice == 0:
            config["transformer_layer_config"] = draw(json_values)
        elif choice == 1:
            config.pop("transformer_layer_config", None)
        else:
            config["transformer_layer_config"] = draw(mutated_dims(nested if isinstance(nested, dict) else config))
    if one_in(draw, 4):
        config["speculators_model_type"] = draw(st.sampled_from(["eagle3", "eagle", ""]) | json_values)
    if one_in(draw, 4):
        config["speculators_config"] = draw(
            st.fixed_dictionaries({"verifier": st.fixed_dictionaries({"name_or_path": verifier_names})}) | json_values
        )
    if one_in(draw, 4):
        eagle = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "eagle_aux_hidden_state_layer_ids": aux_ids,
                    "use_aux_hidden_state": json_values,
                    "next_layer_regular": json_values,
                    "parallel_draft_step": json_values,
                },
            )
            | json_values
        )
        config["eagle_config"] = eagle
    if one_in(draw, 6):
        config["eagle_aux_hidden_state_layer_ids"] = draw(aux_ids)
    if one_in(draw, 6):
        config["architectures"] = draw(
            st.lists(st.sampled_from(["Eagle3Speculator", "LlamaForCausalLMEagle3", "Eagle3DraftModel"]) | json_values)
            | json_values
        )
    if one_in(draw, 16):
        config["quantization_config"] = draw(json_values)
    if one_in(draw, 8):
        config["text_config"] = draw(mutated_dims(config) | json_values)
    return config


def _config(fixture: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((FIXTURES / fixture / "config.json").read_text())
    return config


@st.composite
def configs(draw: st.DrawFn) -> tuple[str, Any]:
    """(fixture, config.json value): mostly a mutated copy of the fixture's own config, sometimes junk."""
    fixture = draw(st.sampled_from(CONFIG_FIXTURES))
    junk = json_values | st.dictionaries(st.sampled_from(DIM_KEYS), dim_values)
    value = draw(mostly(mutated_configs(_config(fixture)), junk, every=6))
    return fixture, value


plan_options = st.fixed_dictionaries(
    {
        "scheme": st.sampled_from(SCHEMES),
        "format": st.sampled_from(FORMATS),
        "engines": st.lists(st.sampled_from(ENGINES), min_size=1, max_size=3, unique=True),
    }
)


# -- the property ----------------------------------------------------------------------------------


class Workspace:
    """Copies of the fixtures under ``root``, made once; each example rewrites one file in a copy."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def fixture(self, name: str) -> Path:
        path = self.root / name
        if not path.exists():
            shutil.copytree(FIXTURES / name, path)
        return path


def inspect_or_refuse(src: Path, **options: Any) -> None:
    """The property: :func:`eaglequant.api.inspect` (open, detect the layout, plan) succeeds or raises an
    :class:`EagleQuantError` with a one-line message. Anything else propagates and fails the caller."""
    try:
        api.inspect(src, **options)
    except EagleQuantError as exc:
        message = str(exc)
        assert message.strip(), repr(exc)
        assert "\n" not in message and "\r" not in message, message


def check_index(workspace: Workspace, index: Any, ascii_only: bool) -> None:
    src = workspace.fixture(INDEX_FIXTURE)
    (src / INDEX).write_bytes(encode(index, ascii_only))
    inspect_or_refuse(src)


def check_config(workspace: Workspace, fixture: str, config: Any, ascii_only: bool, options: dict[str, Any]) -> None:
    src = workspace.fixture(fixture)
    (src / "config.json").write_bytes(encode(config, ascii_only))
    inspect_or_refuse(src, **options)
