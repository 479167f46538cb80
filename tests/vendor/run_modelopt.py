"""The ModelOpt oracle: NVIDIA ModelOpt's own per-layer HF export on the linears of a checkpoint.

Usage: python run_modelopt.py jobs.json
  jobs.json = [{"src": dir, "dst": file.safetensors, "algo": "FP8_PER_CHANNEL_PER_TOKEN" | "W4A16_NVFP4" |
                "NVFP4", "groups": [[weight names]], "input_amax": {weight name: float}}, ...]

Each linear is wrapped in a module, quantized with ModelOpt's preset (``mtq.quantize``, "max"
calibration), its amaxes set as ModelOpt's ``preprocess_linear_fusion`` sets them for a fused group
(the max over the group's weights; the given input amax), then exported by the function
``export_hf_checkpoint`` calls for every quantized linear (``_export_quantized_weight``). The export
dtype is the weight's own. Tensors are saved under ``<module>.weight``, ``.weight_scale``, ...
"""

import json
import sys
import warnings
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

warnings.filterwarnings("ignore")

import modelopt.torch.quantization as mtq  # noqa: E402
from modelopt.torch.export.unified_export_hf import _export_quantized_weight  # noqa: E402

PRESETS = {
    "FP8_PER_CHANNEL_PER_TOKEN": mtq.FP8_PER_CHANNEL_PER_TOKEN_CFG,
    "W4A16_NVFP4": mtq.W4A16_NVFP4_CFG,
    "NVFP4": mtq.NVFP4_DEFAULT_CFG,
}


class OneLinear(torch.nn.Module):
    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, dtype=weight.dtype)
        self.fc.weight.data.copy_(weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def read_weights(src: Path, names: list[str]) -> dict[str, torch.Tensor]:
    out = {}
    for file in sorted(src.glob("*.safetensors")):
        with safe_open(file, "pt") as handle:
            for name in handle.keys():  # noqa: SIM118
                if name in names:
                    out[name] = handle.get_tensor(name)
    return out


def set_amax(quantizer, value: torch.Tensor) -> None:
    quantizer._amax = value.to(quantizer._amax.dtype).reshape(quantizer._amax.shape)


def export(weight: torch.Tensor, algo: str, group_amax: torch.Tensor | None, input_amax: float | None):
    model = OneLinear(weight)
    torch.manual_seed(0)
    sample = torch.randn(2, weight.shape[1], dtype=weight.dtype)
    mtq.quantize(model, PRESETS[algo], lambda m: m(sample))
    linear = model.fc
    if group_amax is not None:
        set_amax(linear.weight_quantizer, group_amax)
    if input_amax is not None:
        set_amax(linear.input_quantizer, torch.tensor(input_amax))
    _export_quantized_weight(linear, weight.dtype)
    out = {"weight": linear.weight.detach().clone()}
    for name in ("weight_scale", "weight_scale_2", "input_scale"):
        value = getattr(linear, name, None)
        if value is not None:
            out[name] = value.detach().clone()
    if algo != "NVFP4":
        out.pop("input_scale", None)
    return out


def main() -> None:
    with open(sys.argv[1]) as handle:
        jobs = json.load(handle)
    with torch.no_grad():
        for job in jobs:
            names = [n for group in job["groups"] for n in group]
            weights = read_weights(Path(job["src"]), names)
            result = {}
            for group in job["groups"]:
                group_amax = None
                if job["algo"] != "FP8_PER_CHANNEL_PER_TOKEN":
                    group_amax = torch.stack([weights[n].abs().max() for n in group]).max()
                for name in group:
                    tensors = export(weights[name], job["algo"], group_amax, job.get("input_amax", {}).get(name))
                    module = name.removesuffix(".weight")
                    result.update({f"{module}.{key}": value.contiguous() for key, value in tensors.items()})
            save_file(result, job["dst"])


if __name__ == "__main__":
    main()
