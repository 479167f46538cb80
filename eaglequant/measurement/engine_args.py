"""The engine arguments ``accept`` passes through: ``--tensor-parallel-size N`` and ``--engine-arg KEY=VALUE``.

One mapping of vLLM engine arguments (``LLM(...)``'s keywords, ``vllm serve``'s flags), keyed with underscores.
Some keys are eaglequant's own, set from its options, and refused here with the option to use instead; the rest
of eaglequant's settings (``max_model_len``, ``enforce_eager``, ``max_num_seqs``, ``gpu_memory_utilization``) are
defaults that an engine argument overrides, e.g. ``gpu_memory_utilization=0.9`` and ``enforce_eager=false`` on a
GPU.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from eaglequant.common.errors import InputError, given, placeholder, words

# Keys eaglequant sets itself, and the parameter that sets each (None: no parameter, eaglequant needs it as is).
OWNED_KEYS: dict[str, tuple[str, str] | None] = {
    "model": ("target", "TARGET"),
    "speculative_config": ("draft_tokens", "K"),  # and the drafts: the source, then each DST
    "dtype": ("dtype", "DTYPE"),
    "tensor_parallel_size": ("tensor_parallel_size", "N"),
    "seed": ("seed", "SEED"),
    "disable_log_stats": None,  # the spec-decode counters are the measurement
    "host": None,  # a launched server listens on 127.0.0.1, at a free port or the one --port gives
    "port": ("port", "N"),
}
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def parse_engine_arg(pair: str) -> tuple[str, Any]:
    """``KEY=VALUE`` as a key (dashes as underscores, leading ``--`` dropped) and a value: JSON where it parses
    (``4096``, ``true``, ``{"a": 1}``), else the string itself."""
    key, sep, text = pair.partition("=")
    key = key.strip().removeprefix("--")
    if not sep or not _KEY.fullmatch(key):
        raise InputError(f"engine argument {pair!r}: not KEY=VALUE", hint="e.g. max_model_len=4096")
    try:
        value: Any = json.loads(text)
    except ValueError:
        value = text
    return key.replace("-", "_"), value


def engine_arguments(
    pairs: Mapping[str, Any] | Sequence[str] | None,
    tensor_parallel_size: int | None = None,
    owned: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The engine arguments to pass through: ``pairs`` (a mapping, or ``KEY=VALUE`` strings) checked against
    the keys eaglequant sets (``owned``: keys a command sets for itself, each with why), with
    ``tensor_parallel_size`` when given."""
    if pairs is None:
        pairs = {}
    if isinstance(pairs, Mapping):
        chosen = {str(k).removeprefix("--").replace("-", "_"): v for k, v in pairs.items()}
    else:
        chosen = dict(parse_engine_arg(p) for p in pairs)
    for key in chosen:
        if owned and key in owned:
            raise InputError(f"engine argument {key!r}: {owned[key]}", hint="leave it out")
        if key in OWNED_KEYS:
            raise _conflict(key)
    if tensor_parallel_size is not None:
        if tensor_parallel_size < 1:
            raise InputError(words(given("tensor_parallel_size", tensor_parallel_size), ": must be at least 1"))
        chosen["tensor_parallel_size"] = tensor_parallel_size
    return chosen


def _conflict(key: str) -> InputError:
    option = OWNED_KEYS[key]
    message = f"engine argument {key!r}: eaglequant sets {key} itself"
    if option is None:
        return InputError(message, hint="leave it out: accept needs it as it sets it")
    if key == "speculative_config":
        hint = words("the drafts are ", placeholder("source", "SRC"), " and each DST, ", placeholder(*option))
        return InputError(message, hint=hint)
    return InputError(message, hint=words("use ", placeholder(*option), " instead"))


def server_flags(arguments: Mapping[str, Any]) -> list[str]:
    """``arguments`` as ``vllm serve`` flags: ``--key value``; a boolean as ``--key`` / ``--no-key``; a list or
    an object as JSON."""
    flags: list[str] = []
    for key, value in arguments.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, (dict, list)):
            flags += [flag, json.dumps(value)]
        elif value is None:
            flags += [flag, "None"]
        else:
            flags += [flag, str(value)]
    return flags


# What a CPU (and a small pair) needs; on a GPU give gpu_memory_utilization=0.9 and enforce_eager=false.
DEFAULTS: dict[str, Any] = {
    "enforce_eager": True,
    "max_num_seqs": 1,  # the prompts run one at a time
    # On CPU the share of the node's memory vLLM reserves (weights and KV cache), checked against what is
    # free at start; a draft head and its target need little.
    "gpu_memory_utilization": 0.1,
}


def serving_arguments(user: Mapping[str, Any], *, dtype: str, seed: int, max_model_len: int) -> dict[str, Any]:
    """The engine arguments a run is served with: eaglequant's defaults, the user's over them, then what
    eaglequant's own options set."""
    return {"max_model_len": max_model_len, **DEFAULTS, **user, "dtype": dtype, "seed": seed}


def model_length(target: Path, prompts: Sequence[str], generated: int) -> int:
    """The ``max_model_len`` a run needs: room for the longest prompt (in characters: a bound on tokens for any
    tokenizer), ``generated`` tokens and a margin, within the target's own context (its config's
    ``max_position_embeddings``, ``text_config`` first, as for multimodal targets such as Kimi-K2.5)."""
    from eaglequant.checkpoint.reader import load_json_object
    from eaglequant.engines.served_length import text_config

    limit = text_config(load_json_object(target / "config.json", "config.json")).get("max_position_embeddings")
    needed = max(len(p) for p in prompts) + generated + 16
    return min(needed, limit) if isinstance(limit, int) and limit > 0 else needed
