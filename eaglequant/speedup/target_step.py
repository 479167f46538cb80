"""The target's weight bytes a decode forward reads, per tensor-parallel rank: from its safetensors headers where
its weights are at hand (a Hub repo's read with ranged requests), else from its ``config.json`` alone, laid out by
its family's reader (:mod:`.target_families`) and priced in its own quantization (:mod:`.target_kinds`). A config
that is not a decoder LLM, or whose weights its family's keys cannot price, is refused in one line.

A forward over ``n`` tokens at batch 1 reads every dense weight once, one embedding row a token, the KV cache of
the context once, and, in each MoE layer, every routed expert that one of the ``n`` tokens is routed to. With each
token routed to ``top_k`` of ``E`` experts independently and uniformly, the expected number of distinct experts is
``E (1 - (1 - top_k / E) ** n)``: 8 for one token of Kimi-K2.5 (8 of 384), 31.0 for the 4 tokens a k = 3
verification scores. Tensor parallelism splits every weight across ranks (vLLM shards each expert, it does not
place whole experts on ranks without expert parallelism), and the embedding by vocabulary; an MLA cache is the same
latent on every rank, a GQA cache is split by KV head.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from eaglequant.common.errors import InputError, given, words
from eaglequant.common.json_fields import JsonRecord, named, rounded
from eaglequant.engines.served_length import text_config
from eaglequant.readback.cost import SERVING_WEIGHT_BYTES
from eaglequant.speedup.target_families import Linear, family_reader, is_decoder
from eaglequant.speedup.target_kinds import UNQUANTIZED, Storage, target_storage

_FP32 = 4

_EXPERT = re.compile(r"\.(?:mlp|block_sparse_moe|feed_forward)\.experts\.(\d+)\.")
# gpt-oss's and Llama 4's fused experts: experts.gate_up_proj [E, ...], its bias, MXFP4 blocks and scales
_FUSED_EXPERTS = re.compile(r"\.(?:mlp|block_sparse_moe|feed_forward)\.experts\.[a-z_]+$")
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


@dataclass(frozen=True)
class TargetWeights(JsonRecord):
    """What a decode forward of the target reads, in bytes per tensor-parallel rank."""

    json_computed = ("step_bytes",)
    json_values = named(expert_bytes=rounded(0), kv_bytes_per_position=rounded(0))

    name: str
    read_from: str  # "safetensors headers" or "config.json"
    layers: int  # decoder layers a forward runs
    dense_bytes: int  # every weight a forward reads whatever the tokens (all ranks together)
    embedding_row_bytes: int
    moe_layers: int
    experts: int  # routed experts in each MoE layer
    experts_per_token: int
    expert_bytes: float  # one routed expert, all ranks together
    kv_bytes_per_position: float  # the cache a forward reads for each token of context, all layers
    kv_replicated: bool  # MLA: every rank holds the whole latent cache
    tensor_parallel_size: int = 1
    # What a forward computes: 2 x params x tokens multiply-adds, at the hardware's peak for the kind they run in.
    # weights each token is multiplied through (attention, dense MLPs, shared experts, router, lm_head)
    dense_params: int = 0
    expert_params: int = 0  # the weights of one routed expert
    dense_compute: str = "bf16"  # the kind dense GEMMs run in: bf16, fp8, int8 or fp4
    expert_compute: str = "bf16"  # the kind routed experts' GEMMs run in

    expert_parallel_size: int = 1  # ranks routed experts are placed whole on (1: sharded by tensor parallelism)

    def distinct_experts(self, tokens: int, sequences: int = 1, locality: float = 0.0) -> float:
        """The expected distinct routed experts one MoE layer reads for ``sequences`` sequences of ``tokens``
        consecutive tokens each. Routing locality ``locality`` (rho in [0, 1]): each token after a sequence's first
        routes as its predecessor did with chance rho, else afresh, so a sequence routes like ``1 + (1 - rho)
        (tokens - 1)`` independent tokens (rho = 0: every token independent, the bound; rho = 1: a sequence's tokens
        share their experts); independent tokens route uniformly, ``E (1 - (1 - top_k / E) ** n)`` for n of them."""
        if not self.experts:
            return 0.0
        independent = sequences * (1.0 + (1.0 - locality) * (tokens - 1))
        return self.experts * (1.0 - (1.0 - self.experts_per_token / self.experts) ** independent)

    def rank_experts(self, tokens: int, sequences: int = 1, locality: float = 0.0) -> float:
        """The routed experts of one MoE layer the busiest rank reads, in whole experts' worth: the distinct ones
        over the tensor-parallel ranks (each expert sharded across them), or, with expert parallelism, the busiest
        rank's share of its ``E / EP`` experts (binomial: its mean plus ``sqrt(2 ln EP)`` standard deviations,
        the expected maximum of EP ranks, at most all of them)."""
        distinct = self.distinct_experts(tokens, sequences, locality)
        ep = self.expert_parallel_size
        if ep <= 1 or not self.experts:
            return distinct / self.tensor_parallel_size
        placed, active = self.experts / ep, distinct / self.experts
        spread = math.sqrt(placed * active * (1.0 - active) * 2.0 * math.log(ep))
        return min(placed, placed * active + spread)

    def forward_bytes(self, tokens: int, context: int, sequences: int = 1, locality: float = 0.0) -> float:
        """The bytes the busiest rank reads in a forward over ``tokens`` tokens of each of ``sequences`` sequences,
        each after ``context`` tokens of context: the dense weights once, the routed experts the tokens activate
        (:meth:`rank_experts`), an embedding row a token and each sequence's cache."""
        tp = self.tensor_parallel_size
        experts = self.moe_layers * self.rank_experts(tokens, sequences, locality) * self.expert_bytes
        rows = tokens * sequences * self.embedding_row_bytes
        cache = sequences * context * self.kv_bytes_per_position
        return (self.dense_bytes + rows) / tp + experts + (cache if self.kv_replicated else cache / tp)

    @property
    def step_bytes(self) -> float:
        """One decode step's weights and embedding row on one rank (no cache)."""
        return self.forward_bytes(1, 0)

    def on(self, tensor_parallel_size: int, expert_parallel_size: int = 1) -> TargetWeights:
        """The same target served on ``tensor_parallel_size`` ranks, its routed experts placed whole on
        ``expert_parallel_size`` of them (1: sharded by tensor parallelism, vLLM's default)."""
        if tensor_parallel_size < 1:
            raise InputError(words(given("tensor_parallel_size", tensor_parallel_size), ": must be at least 1"))
        if expert_parallel_size < 1 or (self.experts and self.experts % expert_parallel_size):
            raise InputError(
                words(given("expert_parallel_size", expert_parallel_size), f": must divide the {self.experts} experts"),
                hint="expert parallelism places whole experts on each rank",
            )
        changed = {"tensor_parallel_size": tensor_parallel_size, "expert_parallel_size": expert_parallel_size}
        return TargetWeights(**{**self.__dict__, **changed})


class Header(NamedTuple):
    """A tensor as its safetensors header describes it."""

    dtype: str
    shape: tuple[int, ...]
    nbytes: int


def target_weights(target: Path, tensor_parallel_size: int = 1) -> TargetWeights:
    """The target at ``target`` (a checkpoint directory, or a ``config.json``; where no such path exists, a Hub repo
    id ``org/name[@revision]``): its safetensors headers where its weights are there, else its config alone. A
    config that is not a decoder LLM is refused."""
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.hub.client import is_hub_reference

    if not target.exists() and is_hub_reference(str(target)):
        return hub_target_weights(str(target)).on(tensor_parallel_size)
    config, where = target_config(target)
    extra = side_configs(Path(where).parent)
    if target.is_dir() and any(target.glob("*.safetensors")):
        with Checkpoint.open(target, "TARGET") as checkpoint:
            headers = {n: Header(i.dtype, tuple(i.shape), i.nbytes) for n, i in checkpoint.tensors.items()}
        weights = from_headers(target.name, config, headers, extra)
    else:
        weights = from_config(Path(where).parent.name or str(target), config, extra)
    return weights.on(tensor_parallel_size)


def hub_target_weights(repo: str) -> TargetWeights:
    """A Hub target (``org/name[@revision]``) priced from its safetensors headers, read without downloading its
    weights (from its config.json where it holds no safetensors)."""
    from eaglequant.hub.client import remote_safetensors_headers

    full, extra, tensors = remote_safetensors_headers(repo)
    config = _decoder(_text_model(full), f"{repo}/config.json")
    if not tensors:
        return from_config(repo, config, extra)
    return from_headers(repo, config, {name: Header(*header) for name, header in tensors.items()}, extra)


def target_config(target: Path) -> tuple[dict[str, Any], str]:
    """The text config of the target at ``target`` (a checkpoint directory or its config.json; a Hub repo id where
    no such path exists), and where it was read; refused in one line where it is missing or no decoder LLM."""
    from eaglequant.checkpoint.reader import load_json_object
    from eaglequant.hub.client import is_hub_reference, remote_safetensors_headers

    if not target.exists() and is_hub_reference(str(target)):
        full = remote_safetensors_headers(str(target), with_headers=False)[0]
        return _decoder(_text_model(full), f"{target}/config.json"), str(target)
    config_path = target if target.is_file() else target / "config.json"
    if not config_path.is_file():
        raise InputError(
            words(given("target", str(target)), ": no config.json"),
            hint="give the target's checkpoint directory or its config.json",
        )
    config = _text_model(load_json_object(config_path, "config.json"))
    return _decoder(config, str(config_path)), str(config_path)


def _decoder(config: dict[str, Any], where: str) -> dict[str, Any]:
    if not is_decoder(config):
        family_reader(config, where)  # raises: not a decoder LLM, in one line
    return config


def _text_model(config: dict[str, Any]) -> dict[str, Any]:
    """A multimodal config's text model, with the quantization config it may keep at the top level."""
    text = text_config(config)
    if text is not config and "quantization_config" not in text and "quantization_config" in config:
        return {**text, "quantization_config": config["quantization_config"]}
    return text


def side_configs(root: Path) -> dict[str, Any]:
    """The quantization config files a target keeps beside its config.json (ModelOpt's hf_quant_config.json)."""
    from eaglequant.checkpoint.reader import load_json_object
    from eaglequant.formats.modelopt import HF_QUANT_CONFIG

    path = root / HF_QUANT_CONFIG
    return {HF_QUANT_CONFIG: load_json_object(path, HF_QUANT_CONFIG)} if path.is_file() else {}


def _int(config: dict[str, Any], key: str, default: int = 0) -> int:
    value = config.get(key, default)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def kv_bytes_per_position(config: dict[str, Any]) -> tuple[float, bool]:
    """The KV cache of one context position over all layers, and whether it is the same on every rank (MLA); the
    cache is held in the serving dtype, as an unquantized weight is (vLLM's ``kv_cache_dtype="auto"``)."""
    layers = _int(config, "num_hidden_layers")
    if _int(config, "kv_lora_rank"):
        latent = _int(config, "kv_lora_rank") + _int(config, "qk_rope_head_dim")
        return float(layers * latent * SERVING_WEIGHT_BYTES), True
    heads = _int(config, "num_attention_heads", 1)
    head_dim = _int(config, "head_dim") or _int(config, "hidden_size") // max(heads, 1)
    kv_heads = _int(config, "num_key_value_heads", heads)
    return float(layers * 2 * kv_heads * head_dim * SERVING_WEIGHT_BYTES), False


def _moe_shape(config: dict[str, Any]) -> tuple[int, int]:
    experts = _int(config, "n_routed_experts") or _int(config, "num_local_experts") or _int(config, "num_experts")
    return experts, _int(config, "num_experts_per_tok") or _int(config, "experts_per_token")


@dataclass
class _Tally:
    """Bytes and parameters summed over a target's weights, and the parameters each compute kind runs."""

    dense: float = 0.0
    experts: float = 0.0
    embedding: float = 0.0
    dense_params: int = 0
    expert_params: int = 0
    moe_layers: set[int] = field(default_factory=set)
    dense_kinds: Counter[str] = field(default_factory=Counter)
    expert_kinds: Counter[str] = field(default_factory=Counter)

    def add_dense(self, nbytes: float, params: int, compute: str) -> None:
        self.dense += nbytes
        self.dense_params += params
        self.dense_kinds[compute] += params

    def add_expert(self, layer: int, nbytes: float, params: int, compute: str) -> None:
        self.experts += nbytes
        self.expert_params += params
        self.expert_kinds[compute] += params
        self.moe_layers.add(layer)

    def weights(self, name: str, read_from: str, config: dict[str, Any], experts: int, top_k: int) -> TargetWeights:
        count = len(self.moe_layers)
        experts, top_k = (experts, top_k) if count else (0, 0)
        per_expert = self.experts / (count * experts) if count else 0.0
        vocab = max(_int(config, "vocab_size", 1), 1)
        kv, replicated = kv_bytes_per_position(config)
        return TargetWeights(
            name,
            read_from,
            _int(config, "num_hidden_layers"),
            round(self.dense),
            round(self.embedding) // vocab,
            count,
            experts,
            top_k,
            per_expert,
            kv,
            replicated,
            dense_params=self.dense_params,
            expert_params=self.expert_params // (count * experts) if count else 0,
            dense_compute=_most(self.dense_kinds),
            expert_compute=_most(self.expert_kinds) if count else "bf16",
        )


def _most(kinds: Counter[str]) -> str:
    """The compute kind that runs the most parameters (bf16 where none)."""
    return kinds.most_common(1)[0][0] if kinds else "bf16"


def _weight_params(tensor: str, header: Header) -> int:
    """The weights a stored matrix holds (a packed FP4 byte holds two, a packed INT4 int32 eight); 0 for a bias, a
    scale, a norm or any other vector."""
    leaf = tensor.rsplit(".", 1)[-1]
    if len(header.shape) < 2 or leaf.endswith("bias") or any(w in leaf for w in ("scale", "zero_point", "shape")):
        return 0
    numel = math.prod(header.shape)
    if header.dtype == "U8":
        return 2 * numel
    return 8 * numel if header.dtype == "I32" and leaf == "weight_packed" else numel


def from_headers(
    name: str, config: dict[str, Any], headers: Mapping[str, Header], extra: Mapping[str, Any] | None = None
) -> TargetWeights:
    """Bytes from the tensors' headers: routed experts (``experts.N.``, or fused ``experts.*`` holding every
    expert), the embedding, and everything else dense. Layers past ``num_hidden_layers`` (DeepSeek's
    multi-token-prediction layer) are not read by a decode step and are left out. The compute kinds are the
    quantization config's (:func:`~eaglequant.speedup.target_kinds.target_storage`)."""
    layers = _int(config, "num_hidden_layers")
    experts, top_k = _moe_shape(config)
    storage = target_storage(config, extra)
    tally = _Tally()
    embedding_params = 0
    for tensor, header in headers.items():
        layer = _LAYER.search(tensor)
        if layer is not None and layers and int(layer.group(1)) >= layers:
            continue
        params, module = _weight_params(tensor, header), tensor.rsplit(".", 1)[0]
        if experts and layer is not None and (_EXPERT.search(tensor) or _FUSED_EXPERTS.search(tensor)):
            tally.add_expert(int(layer.group(1)), header.nbytes, params, storage(module, True).compute)
        elif tensor.endswith("embed_tokens.weight"):
            tally.embedding += header.nbytes
            embedding_params += params
        else:
            tally.add_dense(header.nbytes, params, storage(module, False).compute)
    if config.get("tie_word_embeddings") and not any(t.endswith("lm_head.weight") for t in headers):
        tally.add_dense(tally.embedding, embedding_params, "bf16")  # a tied lm_head reads the whole embedding
    return tally.weights(name, "safetensors headers", config, experts, top_k)


def from_config(name: str, config: dict[str, Any], extra: Mapping[str, Any] | None = None) -> TargetWeights:
    """Bytes from ``config.json`` alone: each decoder layer's weights as its family's reader lays them out
    (:mod:`~eaglequant.speedup.target_families`), each linear at the bytes its quantization config stores it in
    (:mod:`~eaglequant.speedup.target_kinds`), norms and biases at the serving dtype."""
    hidden, vocab = _int(config, "hidden_size"), _int(config, "vocab_size")
    if not hidden or not vocab or not _int(config, "num_hidden_layers"):
        raise InputError(
            f"{name}: config.json has no hidden_size, vocab_size or num_hidden_layers to price a forward from",
            hint="give the target's checkpoint directory, whose weights' headers price it",
        )
    shape = family_reader(config, f"{name}/config.json")(config)
    storage = target_storage(config, extra)
    tally = _Tally()
    for index, layer in enumerate(shape.layers):
        for linear in layer.dense:
            tally.add_dense(*_priced(linear, storage, expert=False))
        tally.dense += layer.other * SERVING_WEIGHT_BYTES + layer.other_fp32 * _FP32
        for linear in layer.expert:
            tally.add_expert(index, *_priced(linear, storage, expert=True))
    tally.dense += hidden * SERVING_WEIGHT_BYTES  # the final norm
    tally.embedding = vocab * hidden * SERVING_WEIGHT_BYTES
    lm_head = shape.lm_head
    if shape.tied:
        tally.add_dense(tally.embedding, lm_head.params, "bf16")
    else:
        tally.add_dense(*_priced(lm_head, storage, expert=False))
    tally.experts *= shape.experts  # one expert priced a layer: the layer holds ``experts`` of them
    tally.expert_params *= shape.experts
    return tally.weights(name, "config.json", config, shape.experts, shape.experts_per_token)


def _priced(linear: Linear, storage: Storage, expert: bool) -> tuple[float, int, str]:
    """A linear's bytes (its bias at the serving dtype), weights, and the kind its GEMM runs in."""
    stored = storage(linear.name, expert) if linear.quantizable else UNQUANTIZED
    return linear.params * stored.bytes_per_weight + linear.bias * SERVING_WEIGHT_BYTES, linear.params, stored.compute


def weight_bytes(config: dict[str, Any]) -> Callable[[str], float]:
    """A module's checkpoint name -> the bytes its quantization config stores a weight of it in (a routed expert
    where the name holds ``experts.``)."""
    storage = target_storage(config)
    return lambda module: storage(module, ".experts." in module).bytes_per_weight


def expected_experts_text(weights: TargetWeights, tokens: int, sequences: int = 1, locality: float = 0.0) -> str:
    found = weights.distinct_experts(tokens, sequences, locality)
    return f"{found:.1f} of {weights.experts}" if weights.experts else "-"
