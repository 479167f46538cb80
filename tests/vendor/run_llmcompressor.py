"""The compressed-tensors oracle: llm-compressor's file-to-file ``model_free_ptq``, plus compressed-tensors'
own NVFP4 functions for fused groups that model_free_ptq does not know (MLA q_a + kv_a).

Usage: python run_llmcompressor.py jobs.json
  jobs.json = {"checkpoints": [{"src", "dst", "scheme", "ignore"}, ...],
               "groups": [{"src", "dst", "weights": [tensor names]}, ...]}
A "groups" job quantizes the named weights of SRC (one checkpoint file) as NVFP4 with one global scale
computed over all of them, as compressed-tensors' observer does for a fused group, and saves the
compressed tensors to DST (a .safetensors file). Imports once: llm-compressor takes seconds to import.
"""

import json
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file


def run_group(job: dict) -> None:
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.quantization import preset_name_to_scheme
    from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

    scheme = preset_name_to_scheme("NVFP4A16", ["Linear"])
    weights = {}
    with safe_open(job["src"], "pt") as handle:
        for name in job["weights"]:
            weights[name] = handle.get_tensor(name)
    absmax = torch.stack([w.abs().max() for w in weights.values()]).max().reshape(1)
    global_scale = generate_gparam(-absmax, absmax)
    out = {}
    for name, weight in weights.items():
        blocks = weight.unflatten(-1, (-1, 16))
        scale, _ = calculate_qparams(blocks.amin(-1), blocks.amax(-1), scheme.weights, global_scale=global_scale)
        state = {"weight": weight, "weight_scale": scale.to(weight.dtype), "weight_global_scale": global_scale}
        compressed = NVFP4PackedCompressor.compress(state, scheme)
        module = name.removesuffix(".weight")
        out.update({f"{module}.{key}": value.contiguous().clone() for key, value in compressed.items()})
    save_file(out, job["dst"])


def main() -> None:
    with open(sys.argv[1]) as handle:
        jobs = json.load(handle)
    if jobs.get("checkpoints"):
        from llmcompressor import model_free_ptq

        for job in jobs["checkpoints"]:
            model_free_ptq(
                model_stub=job["src"],
                save_directory=job["dst"],
                scheme=job["scheme"],
                ignore=job["ignore"],
                max_workers=1,
                device="cpu",
            )
    with torch.no_grad():
        for job in jobs.get("groups", []):
            run_group(job)


if __name__ == "__main__":
    main()
