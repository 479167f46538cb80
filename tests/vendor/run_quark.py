"""Run amd-quark's file-to-file ptpc_fp8 quantization on a list of checkpoints (the test oracle).

Usage: python run_quark.py jobs.json   where jobs.json = [{"src": ..., "dst": ...}, ...]
Uses the `llama` template's ptpc_fp8 scheme with exclude ["fc", "lm_head"], as AMD did for
amd/Kimi-K2.5-Eagle3-FP8.
"""

import json
import sys

from quark.torch import LLMTemplate, ModelQuantizer


def main() -> None:
    with open(sys.argv[1]) as handle:
        jobs = json.load(handle)
    config = LLMTemplate.get("llama").get_config(scheme="ptpc_fp8", exclude_layers=["fc", "lm_head"])
    for job in jobs:
        ModelQuantizer(config).direct_quantize_checkpoint(job["src"], job["dst"], device="cpu")


if __name__ == "__main__":
    main()
