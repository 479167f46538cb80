"""The Quark oracle: amd-quark's file-to-file quantization on a list of checkpoints, in one process.

Usage: python run_quark.py jobs.json   where jobs.json = [{"src", "dst", "scheme", "exclude"}, ...]
``scheme`` is a name from Quark's `llama` LLMTemplate (ptpc_fp8, mxfp4, mxfp4_weight_only), or
int8_per_channel_dynamic_token (INT8 per channel, dynamic per-token inputs: a QConfig of Quark's own specs); ``exclude``
lists checkpoint module names (Quark matches them with fnmatch), as AMD did for amd/Kimi-K2.5-Eagle3-FP8.
"""

import json
import sys

from quark.torch import LLMTemplate, ModelQuantizer

# Quark has no template for INT8 per channel with dynamic per-token inputs; its file-to-file path writes it from a
# QConfig built of its own specs.
INT8_PER_CHANNEL = "int8_per_channel_dynamic_token"


def int8_per_channel_config(exclude: list[str]):  # -> quark QConfig
    from quark.torch.quantization.config import config as qc

    def spec(ch_axis: int, dynamic: bool):
        return qc.Int8PerChannelSpec(
            symmetric=True, scale_type="float", round_method="half_even", ch_axis=ch_axis, is_dynamic=dynamic
        ).to_quantization_spec()

    layer = qc.QLayerConfig(weight=spec(0, False), input_tensors=spec(1, True))
    return qc.QConfig(global_quant_config=layer, exclude=exclude)


def main() -> None:
    with open(sys.argv[1]) as handle:
        jobs = json.load(handle)
    template = LLMTemplate.get("llama")
    for job in jobs:
        if job["scheme"] == INT8_PER_CHANNEL:
            config = int8_per_channel_config(job["exclude"])
        else:
            config = template.get_config(scheme=job["scheme"], exclude_layers=job["exclude"])
        ModelQuantizer(config).direct_quantize_checkpoint(job["src"], job["dst"], device="cpu")


if __name__ == "__main__":
    main()
