"""The bytes a target's own quantization stores each weight in, and the kind its GEMMs run in, read from its
``quantization_config`` (or ModelOpt's ``hf_quant_config.json``) by ``quant_method``, one reader each.

Which modules a config quantizes is decided by eaglequant's own formats and vLLM's matching rules for them: a
group's or layer config's target by :meth:`Format.matches_target`, an exclusion by vLLM's dialect for the format
(:meth:`Engine.dialect`: compressed-tensors' ``ignore`` and Quark's ``exclude`` exact or ``re:`` + ``re.match``,
ModelOpt's wildcards, native fp8's exact names). Storage per weight:

- compressed-tensors: ``num_bits / 8`` plus a scale per group (BF16, or FP8 / E8M0 for the NVFP4 / MXFP4 packed
  formats), every group read with its ``targets``;
- Quark: MXFP4 (``fp4`` per group of 32, E8M0 scale) 4.25 bits; FP8 and INT8 one byte; ``layer_quant_config`` by
  name, then ``layer_type_quant_config``'s Linear entry, then ``global_quant_config``;
- ModelOpt: NVFP4 4 bits and one E4M3 per 16 (4.5 bits; the global scale is one float per tensor), FP8 one byte,
  ``MIXED_PRECISION`` per listed module;
- native fp8: one byte and one float32 scale per ``weight_block_size`` block;
- gpt-oss's ``mxfp4``: its routed experts only, 4.25 bits.

A per-row or per-tensor scale (under 0.1% of a weight's bytes) is left out. The kind a GEMM runs in is that of
its activations: none (weight-only) runs in bf16. A ``quant_method`` eaglequant does not read is one line, never
priced as BF16.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from eaglequant.common.errors import InputError
from eaglequant.readback.cost import SERVING_WEIGHT_BYTES

COMPUTE_KINDS = ("bf16", "fp8", "int8", "fp4")
_FP32 = 4


@dataclass(frozen=True)
class Stored:
    """How one weight is stored: bytes a weight (scales included) and the kind its GEMM runs in."""

    bytes_per_weight: float
    compute: str = "bf16"


UNQUANTIZED = Stored(float(SERVING_WEIGHT_BYTES))
# (module's checkpoint name, whether it is a routed expert) -> how its weights are stored.
Storage = Callable[[str, bool], Stored]


def _unquantized(_name: str, _expert: bool) -> Stored:
    return UNQUANTIZED


def _refused(what: str) -> InputError:
    return InputError(
        f"config.json: the target's quantization_config has {what}, which eaglequant cannot price",
        hint="give the target's checkpoint directory, whose weights' headers price it",
    )


def _excluded(fmt_name: str, rules: tuple[str, ...]) -> Callable[[str], bool]:
    """Whether vLLM leaves a module unquantized under the format's exclusion ``rules``."""
    from eaglequant.engines import get_engine
    from eaglequant.formats import get_format

    match = get_engine("vllm").dialect(get_format(fmt_name)).match
    return lambda name: match(name, list(rules)) is not None


def _compute_of(bits: object, kind: object) -> str:
    """The GEMM kind of activations quantized to ``bits`` of ``kind`` (float / int)."""
    found = {(8, "float"): "fp8", (8, "int"): "int8", (4, "float"): "fp4"}.get((bits, kind))  # type: ignore[arg-type]
    if found is None:
        raise _refused(f"activations of {bits} bits ({kind})")
    return found


def _ct_group(group: dict[str, Any], top_format: object) -> Stored:
    """One compressed-tensors group's storage: ``num_bits`` and a scale per ``group_size`` (or block)."""
    weights = group.get("weights") if isinstance(group.get("weights"), dict) else None
    if weights is None or not isinstance(weights.get("num_bits"), int):
        raise _refused(f"a config group without weights.num_bits ({group!r:.80})")
    fmt = group.get("format") or top_format
    scale = 1 if fmt in ("nvfp4-pack-quantized", "mxfp4-pack-quantized") else SERVING_WEIGHT_BYTES
    per_scale = weights.get("group_size") or 0
    block = weights.get("block_structure")
    if isinstance(block, list) and len(block) == 2:
        per_scale = block[0] * block[1]
    stored = weights["num_bits"] / 8 + (scale / per_scale if per_scale else 0.0)
    inputs = group.get("input_activations")
    compute = _compute_of(inputs.get("num_bits"), inputs.get("type")) if isinstance(inputs, dict) else "bf16"
    return Stored(stored, compute)


def compressed_tensors(quant: dict[str, Any], _extra: Mapping[str, Any]) -> Storage:
    """Every ``config_groups`` entry with its ``targets`` (``Linear``: every linear), a named target first; vLLM
    builds the lm_head (a ParallelLMHead, no linear) unquantized."""
    from eaglequant.formats import get_format

    fmt = get_format("compressed-tensors")
    groups = quant.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise _refused("no config_groups")
    read = [
        ([str(t) for t in group.get("targets") or ()], _ct_group(group, quant.get("format")))
        for group in groups.values()
    ]
    excluded = _excluded(fmt.name, fmt.read_exclude(quant))

    def stored(name: str, expert: bool) -> Stored:
        if name == "lm_head" or excluded(name):
            return UNQUANTIZED
        named = next((s for targets, s in read if any(fmt.matches_target(t, name) for t in targets)), None)
        return named or next((s for targets, s in read if "Linear" in targets), UNQUANTIZED)

    return stored


def _quark_spec(spec: object) -> Stored | None:
    """A Quark ``{weight, input_tensors}`` entry's storage (None: the entry quantizes nothing)."""
    if not isinstance(spec, dict) or not isinstance(spec.get("weight"), dict):
        return None
    weight, inputs = spec["weight"], spec.get("input_tensors")
    dtype = weight.get("dtype")
    if dtype == "fp4" and weight.get("scale_format") == "e8m0" and isinstance(weight.get("group_size"), int):
        stored = 0.5 + 1 / weight["group_size"]  # E2M1 and one E8M0 exponent a group: MXFP4
    elif dtype in ("fp8_e4m3", "int8") and weight.get("qscheme") in ("per_channel", "per_tensor"):
        stored = 1.0
    else:
        raise _refused(f"a Quark weight spec of dtype {dtype!r} ({weight.get('qscheme')})")
    if not isinstance(inputs, dict):
        return Stored(stored)
    kinds: dict[object, tuple[object, object]] = {"fp4": (4, "float"), "fp8_e4m3": (8, "float"), "int8": (8, "int")}
    bits, kind = kinds.get(inputs.get("dtype"), (None, inputs.get("dtype")))
    return Stored(stored, _compute_of(bits, kind))


def quark(quant: dict[str, Any], _extra: Mapping[str, Any]) -> Storage:
    """Quark: a layer's own config (``layer_quant_config``, matched as vLLM's QuarkConfig does), else the Linear
    entry of ``layer_type_quant_config``, else ``global_quant_config``; ``exclude`` as vLLM reads it. vLLM builds
    the lm_head unquantized."""
    from eaglequant.formats import get_format

    fmt = get_format("quark")
    layers = quant.get("layer_quant_config") or {}
    types = quant.get("layer_type_quant_config") or {}
    if not isinstance(layers, dict) or not isinstance(types, dict):
        raise _refused("a layer_quant_config or layer_type_quant_config that is not an object")
    unknown = [key for key in types if "Linear" not in str(key)]
    if unknown:
        raise _refused(f"layer_type_quant_config for {', '.join(map(str, unknown))}")
    by_layer = {str(target): _quark_spec(spec) for target, spec in layers.items()}
    by_type = next((_quark_spec(spec) for spec in types.values()), None)
    default = _quark_spec(quant.get("global_quant_config"))
    excluded = _excluded(fmt.name, fmt.read_exclude(quant))

    def stored(name: str, expert: bool) -> Stored:
        if name == "lm_head" or excluded(name):
            return UNQUANTIZED
        for target, spec in by_layer.items():
            if fmt.matches_target(target, name):
                return spec or UNQUANTIZED
        return by_type or default or UNQUANTIZED

    return stored


_NVFP4 = 0.5 + 1 / 16  # E2M1 and one E4M3 scale a group of 16
_MODELOPT = {
    "NVFP4": Stored(_NVFP4, "fp4"),
    "W4A16_NVFP4": Stored(_NVFP4),
    "FP8": Stored(1.0, "fp8"),
    "FP8_PER_CHANNEL_PER_TOKEN": Stored(1.0, "fp8"),
}


def _modelopt_algo(algo: object) -> Stored:
    if algo not in _MODELOPT:
        raise _refused(f"ModelOpt quant_algo {algo!r} (eaglequant reads {', '.join(_MODELOPT)}, MIXED_PRECISION)")
    return _MODELOPT[str(algo)]


def modelopt(quant: dict[str, Any], extra: Mapping[str, Any]) -> Storage:
    """ModelOpt: config.json's flat form (what vLLM reads), else ``hf_quant_config.json``'s nested one; one
    ``quant_algo`` for every module not excluded, or ``MIXED_PRECISION``'s ``quantized_layers`` by exact name."""
    from eaglequant.formats import get_format
    from eaglequant.formats.modelopt import HF_QUANT_CONFIG, MIXED

    fmt = get_format("modelopt")
    nested = (extra.get(HF_QUANT_CONFIG) or {}).get("quantization") or {}
    flat = quant if "quant_algo" in quant else {**nested, "ignore": nested.get("exclude_modules") or []}
    rules = "ignore" if flat.get("ignore") or "exclude_modules" not in flat else "exclude_modules"
    excluded = _excluded(fmt.name, fmt.read_exclude(flat, rules))
    if flat.get("quant_algo") == MIXED:
        listed = flat.get("quantized_layers") or {}
        layers = {str(n): _modelopt_algo(e.get("quant_algo") if isinstance(e, dict) else e) for n, e in listed.items()}
        return lambda name, expert: UNQUANTIZED if excluded(name) else layers.get(name, UNQUANTIZED)
    kind = _modelopt_algo(flat.get("quant_algo"))
    return lambda name, expert: UNQUANTIZED if excluded(name) else kind


def fp8(quant: dict[str, Any], _extra: Mapping[str, Any]) -> Storage:
    """Native fp8 (DeepSeek-V3's own): every linear but the lm_head in E4M3 with a float32 scale per
    ``weight_block_size`` block, the exclusions matched by exact name as vLLM's Fp8Config does."""
    from eaglequant.formats import get_format

    fmt = get_format("fp8")
    block = quant.get("weight_block_size")
    per_scale = block[0] * block[1] if isinstance(block, list) and len(block) == 2 else 0
    kind = Stored(1.0 + (_FP32 / per_scale if per_scale else 0.0), "fp8")
    rules = fmt.read_exclude(quant, "ignored_layers") or fmt.read_exclude(quant)
    excluded = _excluded(fmt.name, rules)
    return lambda name, expert: UNQUANTIZED if name == "lm_head" or excluded(name) else kind


def mxfp4(quant: dict[str, Any], _extra: Mapping[str, Any]) -> Storage:
    """gpt-oss's ``mxfp4``: vLLM's Mxfp4Config quantizes the fused MoE experts only (E2M1 and an E8M0 scale per 32,
    run weight-only), every other weight stays BF16."""
    kind = Stored(0.5 + 1 / 32)
    return lambda name, expert: kind if expert else UNQUANTIZED


READERS: dict[str, Callable[[dict[str, Any], Mapping[str, Any]], Storage]] = {
    "compressed-tensors": compressed_tensors,
    "quark": quark,
    "modelopt": modelopt,
    "fp8": fp8,
    "mxfp4": mxfp4,
}


def target_storage(config: dict[str, Any], extra: Mapping[str, Any] | None = None) -> Storage:
    """How the target of ``config`` (a text config) stores each module's weights; ``extra``: its side config files
    by name (ModelOpt's ``hf_quant_config.json``)."""
    from eaglequant.formats.modelopt import HF_QUANT_CONFIG

    extra = extra or {}
    quant = config.get("quantization_config")
    if not isinstance(quant, dict):
        if HF_QUANT_CONFIG not in extra:
            return _unquantized
        quant = {"quant_method": "modelopt"}
    method = quant.get("quant_method")
    reader = READERS.get(method) if isinstance(method, str) else None
    if reader is None:
        raise _refused(f"quant_method {method!r} (it reads {', '.join(READERS)})")
    return reader(quant, extra)
