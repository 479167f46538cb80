"""What a conversion copied, held against the source: the tensors bit for bit and the config's draft.

A conversion quantizes some linears and copies everything else unchanged: norms, embeddings, ``d2t``, ``t2d``,
biases, the linears it keeps (``fc``, ``lm_head`` by default), tensors of no known role. It keeps every such
tensor's name, dtype and shape (``plan.py``: a kept tensor's output spec is its source's), and it writes the
source's config.json with only ``quantization_config`` added (``finisher.py``). So every tensor of DST that is not
part of a quantized linear must be the source's tensor of the same canonical role (``midlayer.`` and
``layers.0.`` are one), byte for byte, and the config fields an engine builds the draft from must be the source's.
A shifted ``d2t`` or a rescaled norm is invisible to the per-linear parity and costs every acceptance.

The weights of the quantized linears (and their scales) are what parity checks; they are not compared here.
Tensors are compared one block of rows (at most 16 MiB) at a time, so memory stays bounded whatever their size.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eaglequant.checkpoint.dtypes import QUANTIZED_DTYPES
from eaglequant.common.findings import Finding
from eaglequant.common.json_fields import JsonRecord
from eaglequant.formats import all_scale_params, all_weight_params
from eaglequant.layouts.names import parse_name

if TYPE_CHECKING:
    from collections.abc import Sequence

    import torch

    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.common.config_change import ConfigChange

COMPARE_BYTES = 16 << 20  # bytes of each tensor read per block (a differing block costs ~6x that)
# config.json fields an engine builds the draft from (at the top level, and in speculators'
# ``transformer_layer_config``); dicts among them (``eagle_config``, ``rope_scaling``) are compared key by key.
ENGINE_CONFIG_KEYS = (
    "architectures",
    "model_type",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "draft_vocab_size",
    "target_hidden_size",
    "num_hidden_layers",
    "hidden_act",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "max_position_embeddings",
    "attention_bias",
    "mlp_bias",
    "tie_word_embeddings",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "eagle_config",
    "eagle_aux_hidden_state_layer_ids",
    "use_aux_hidden_state",
    "fc_norm",
    "norm_output",
    "norm_before_residual",
    "speculators_model_type",
    "speculators_config",
)
NESTED_CONFIG = "transformer_layer_config"  # speculators: the decoder's own config, under the same keys
_ABSENT = object()
_SAME_SIZE_INT = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


@dataclass(frozen=True)
class CopyCheck(JsonRecord):
    """What verify records of the copied tensors against the source's (:class:`CopyComparison`): the counts."""

    compared: int  # tensors the source has that DST copies
    identical: int  # of those, the ones whose DST bytes are the source's
    parity_checked: int = 0  # quantized linears, whose weights parity checks instead


@dataclass(frozen=True)
class CopyComparison:
    """The copied tensors against the source's: the problems found, and which tensors were compared."""

    problems: list[Finding]
    note: Finding  # ``copies-compared``: what was compared, and what was not and why
    identical: frozenset[str]  # canonical names (``fc.weight``, ``d2t``) whose DST bytes are the source's
    compared: frozenset[str] = frozenset()  # canonical names of every tensor the source has that DST copies
    parity_checked: int = 0  # quantized linears, whose weights parity checks instead

    def record(self) -> CopyCheck:
        return CopyCheck(len(self.compared), len(self.identical), self.parity_checked)


def canonical_name(name: str) -> str:
    """A checkpoint tensor's canonical name: ``midlayer.hidden_norm.weight`` -> ``layers.0.hidden_norm.weight``."""
    parsed = parse_name(name)
    return f"{parsed.module}.{parsed.param}" if parsed.param else parsed.module


def stored_quantized_modules(checkpoint: Checkpoint, quantized: set[str]) -> set[str]:
    """Canonical modules whose linear DST stores quantized: those the engines run quantized (``quantized``,
    checkpoint module names) and any holding a scale or a quantized weight."""
    scales, weights = all_scale_params(), all_weight_params()
    found = set(quantized)
    for name, info in checkpoint.tensors.items():
        module, _, param = name.rpartition(".")
        if module and (param in scales or (param in weights and info.dtype in QUANTIZED_DTYPES)):
            found.add(module)
    return {parse_name(f"{module}.weight").module for module in found}


def _copied(checkpoint: Checkpoint, skipped: set[str]) -> dict[str, str]:
    """Canonical name -> tensor name, for every tensor that is not part of a quantized linear (its bias is)."""
    copied = {}
    for name in checkpoint.tensors:
        parsed = parse_name(name)
        if parsed.module in skipped and parsed.param != "bias":
            continue
        copied[canonical_name(name)] = name
    return copied


def compare_copies(dst: Checkpoint, src: Checkpoint, quantized: set[str]) -> CopyComparison:
    """Every tensor DST copied against the source's of the same canonical name; ``quantized``: the checkpoint
    modules verify runs parity on. Problems: a source tensor DST lacks (``copy-missing``), a DST tensor the source
    lacks (``not-in-source``), or one that differs (see :func:`compare_tensor`), each about the tensor."""
    skipped = stored_quantized_modules(dst, quantized)
    ours, theirs = _copied(dst, skipped), _copied(src, skipped)
    problems: list[Finding] = []
    identical: set[str] = set()
    for key, src_name in sorted(theirs.items()):
        dst_name = ours.get(key)
        if dst_name is None:
            text = (
                f"{src_name}: the source's tensor is missing from DST (a conversion copies every tensor it does not "
                "quantize)"
            )
            problems.append(Finding("copy-missing", src_name, text))
            continue
        problem = compare_tensor(dst, dst_name, src, src_name)
        if problem is None:
            identical.add(key)
        else:
            problems.append(problem)
    for key in sorted(set(ours) - set(theirs)):
        text = (
            f"{ours[key]}: the source has no such tensor (a conversion writes only the source's tensors and its "
            "quantized linears' own)"
        )
        problems.append(Finding("not-in-source", ours[key], text))
    note = (
        f"copied tensors: {len(identical)} of {len(theirs)} identical to the source's, byte for byte; the weights "
        f"of the {len(skipped)} quantized linears are checked by parity instead"
    )
    compared = Finding("copies-compared", "", note)
    return CopyComparison(problems, compared, frozenset(identical), frozenset(theirs), len(skipped))


def compare_tensor(dst: Checkpoint, dst_name: str, src: Checkpoint, src_name: str) -> Finding | None:
    """None when DST's ``dst_name`` holds the same dtype, shape and bytes as the source's ``src_name``; else how
    it differs, in one line (``dtype-differs``, ``shape-differs`` or ``values-differ``, about ``dst_name``)."""
    mine, theirs = dst.tensors[dst_name], src.tensors[src_name]
    if mine.dtype != theirs.dtype:
        text = (
            f"{dst_name}: {mine.dtype}, but the source's {src_name} is {theirs.dtype} (a copied tensor keeps the "
            "source's dtype)"
        )
        return Finding("dtype-differs", dst_name, text)
    if mine.shape != theirs.shape:
        text = f"{dst_name}: shape {list(mine.shape)}, but the source's {src_name} has {list(theirs.shape)}"
        return Finding("shape-differs", dst_name, text)
    differing, worst, floating = 0, 0.0, False
    for rows in _row_blocks(mine.shape, mine.nbytes):
        ours = dst.read(dst_name) if rows is None else dst.read_rows(dst_name, rows)
        source = src.read(src_name) if rows is None else src.read_rows(src_name, rows)
        count, delta, floating = _differences(ours, source)
        differing += count
        if count and not math.isnan(worst) and (math.isnan(delta) or delta > worst):
            worst = delta
    if not differing:
        return None
    shown = "" if not floating else f" (max |Δ| {worst:.4g})"
    text = f"{dst_name}: {differing} of {mine.numel} values differ from the source's {src_name}{shown}"
    return Finding("values-differ", dst_name, text)


def _row_blocks(shape: tuple[int, ...], nbytes: int) -> list[slice | None]:
    """Blocks of rows of at most :data:`COMPARE_BYTES` (a single row when one row is larger); None: read whole
    (a scalar or an empty tensor)."""
    if not shape or shape[0] == 0 or nbytes == 0:
        return [None]
    per_block = max(1, COMPARE_BYTES // max(1, nbytes // shape[0]))
    return [slice(start, min(start + per_block, shape[0])) for start in range(0, shape[0], per_block)]


def _differences(ours: torch.Tensor, theirs: torch.Tensor) -> tuple[int, float, bool]:
    """Elements whose bytes differ, the largest |difference| among them (floats; NaN when one is not finite),
    and whether the dtype is a floating one."""
    import torch

    a, b = ours.reshape(-1), theirs.reshape(-1)
    if torch.equal(a.view(torch.uint8), b.view(torch.uint8)):
        return 0, 0.0, a.is_floating_point()
    as_int = getattr(torch, _SAME_SIZE_INT[a.element_size()])
    changed = a.view(as_int) != b.view(as_int)
    count = int(changed.sum())
    if not a.is_floating_point():
        return count, 0.0, False
    wide = torch.float64 if a.dtype == torch.float64 else torch.float32  # exact for every narrower float
    delta = a.to(wide)
    delta.sub_(b.to(wide)).abs_().masked_fill_(~changed, 0.0)  # equal bytes (NaN included) differ by nothing
    return count, math.nan if bool(delta.isnan().any()) else float(delta.max()), True


def compare_config(dst: dict[str, Any], src: dict[str, Any], changes: Sequence[ConfigChange] = ()) -> list[Finding]:
    """config.json fields an engine builds the draft from that DST holds differently from the source (a
    conversion adds ``quantization_config``, and makes only the ``changes`` its report records): one line each,
    naming the key and both values (``config-differs``, about the key's dotted path), or a recorded change whose
    starting value is not the source's (``change-not-from-source``, about the key)."""
    problems = []
    for change in changes:
        found = _at(src, change.key)
        if found != change.source:
            text = (
                f"config.json: {change.key}: the report says the conversion changed the source's "
                f"{_shown(change.source)}, but the source has {_shown(found)}"
            )
            problems.append(Finding("change-not-from-source", change.key, text))
        src = change.apply(src)
    problems += _config_differences("", dst, src)
    nested_dst, nested_src = dst.get(NESTED_CONFIG), src.get(NESTED_CONFIG)
    if isinstance(nested_dst, dict) and isinstance(nested_src, dict):
        problems += _config_differences(f"{NESTED_CONFIG}.", nested_dst, nested_src)
    elif nested_dst != nested_src:
        problems.append(_config_line(NESTED_CONFIG, dst.get(NESTED_CONFIG, _ABSENT), src.get(NESTED_CONFIG, _ABSENT)))
    return problems


def _at(config: dict[str, Any], key: str) -> Any:
    value: Any = config
    for name in key.split("."):
        value = value.get(name, _ABSENT) if isinstance(value, dict) else _ABSENT
    return None if value is _ABSENT else value


def _config_differences(prefix: str, dst: dict[str, Any], src: dict[str, Any]) -> list[Finding]:
    problems = []
    for key in ENGINE_CONFIG_KEYS:
        problems += _value_differences(prefix + key, dst.get(key, _ABSENT), src.get(key, _ABSENT))
    return problems


def _value_differences(path: str, ours: Any, theirs: Any) -> list[Finding]:
    if isinstance(ours, dict) and isinstance(theirs, dict):
        found = []
        for key in sorted(set(ours) | set(theirs), key=str):
            found += _value_differences(f"{path}.{key}", ours.get(key, _ABSENT), theirs.get(key, _ABSENT))
        return found
    if ours is theirs or (ours is not _ABSENT and theirs is not _ABSENT and _same(ours, theirs)):
        return []
    return [_config_line(path, ours, theirs)]


def _same(ours: Any, theirs: Any) -> bool:
    """JSON values equal as an engine reads them (50000 and 50000.0 are one value; true and 1 are not)."""
    if isinstance(ours, bool) or isinstance(theirs, bool):
        return type(ours) is type(theirs) and ours == theirs
    if isinstance(ours, list) and isinstance(theirs, list):
        return len(ours) == len(theirs) and all(_same(a, b) for a, b in zip(ours, theirs, strict=True))
    return bool(ours == theirs)


def _config_line(path: str, ours: Any, theirs: Any) -> Finding:
    return Finding("config-differs", path, f"config.json {path}: {_shown(ours)}, but the source's is {_shown(theirs)}")


def _shown(value: Any) -> str:
    return "absent" if value is _ABSENT else json.dumps(value, ensure_ascii=False)
