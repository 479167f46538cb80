"""The Quark oracle: amd-quark's file-to-file quantization on a list of checkpoints, in one process.

Usage: python run_quark.py jobs.json   where jobs.json = [{"src", "dst", "scheme", "exclude"}, ...]
``scheme`` is a name from Quark's `llama` LLMTemplate (ptpc_fp8, mxfp4, mxfp4_weight_only); ``exclude``
lists checkpoint module names (Quark matches them with fnmatch), as AMD did for amd/Kimi-K2.5-Eagle3-FP8.
"""

import json
import sys

from quark.torch import LLMTemplate, ModelQuantizer


def main() -> None:
    with open(sys.argv[1]) as handle:
        jobs = json.load(handle)
    template = LLMTemplate.get("llama")
    for job in jobs:
        config = template.get_config(scheme=job["scheme"], exclude_layers=job["exclude"])
        ModelQuantizer(config).direct_quantize_checkpoint(job["src"], job["dst"], device="cpu")


if __name__ == "__main__":
    main()
