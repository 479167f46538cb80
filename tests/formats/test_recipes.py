"""Each recipe declares each stored tensor once; its tensor specs, the names of its math's outputs and the stored
linear a kernel reads are derived from that declaration, and agree with each other for every cell a format stores."""

from __future__ import annotations

import pytest
import torch

from eaglequant.checkpoint.dtypes import from_torch
from eaglequant.formats import FORMATS, Format, GroupScales, stored_cells
from eaglequant.layouts.head import HeadLinear
from eaglequant.schemes.model import load_scheme

# in-features a multiple of every kind's group; out-features not a multiple of a 128-row block (a partial last block)
LINEAR = HeadLinear("layers.0.mlp.down_proj", "model.layers.0.mlp.down_proj.weight", "down_proj", 0, 200, 256)


@pytest.mark.parametrize("fmt", list(FORMATS.values()), ids=lambda fmt: fmt.name)
def test_recipes_declare_one_weight_and_only_parameters_the_format_names(fmt: Format) -> None:
    for recipe in fmt.recipes:
        weights = [t for t in recipe.tensors if t.feeds == "weight"]
        assert len(weights) == 1 and weights[0].suffix in fmt.weight_params
        assert {t.suffix for t in recipe.tensors if t.feeds != "weight"} <= set(fmt.scale_params)
        assert len({t.suffix for t in recipe.tensors}) == len(recipe.tensors)


# every cell a format stores, written without calibration, and calibrated where the scheme has a static input scale
CASES = [(scheme, fmt, False) for scheme, fmt in stored_cells()] + [
    (scheme, fmt, True) for scheme, fmt in stored_cells() if load_scheme(scheme).needs_calibration
]


@pytest.mark.parametrize(("scheme_name", "format_name", "calibrated"), CASES, ids=str)
def test_specs_outputs_and_stored_linear_agree(scheme_name: str, format_name: str, calibrated: bool) -> None:
    scheme, fmt = load_scheme(scheme_name), FORMATS[format_name]
    if not calibrated:
        scheme = scheme.without_calibration()
    weight = torch.randn(LINEAR.out_features, LINEAR.in_features, generator=torch.Generator().manual_seed(0)) * 0.05
    weight = weight.to(torch.bfloat16)
    shared = GroupScales(weight.abs().amax().float(), torch.tensor(3.0) if calibrated else None)
    tensors = fmt.quantized_tensors(LINEAR, weight, scheme, shared)
    specs = fmt.tensor_specs(LINEAR, scheme)
    assert list(tensors) == [spec.name for spec in specs]
    for spec in specs:
        assert (from_torch(tensors[spec.name].dtype), tuple(tensors[spec.name].shape)) == (spec.dtype, spec.shape)
    stored = fmt.stored_linear(LINEAR, scheme, tensors)
    assert stored.weight_kind is scheme.weight.kind
    activation = scheme.kinds.activation_kind
    assert stored.activation_kind is (activation if activation is not None and activation.simulated else None)
    assert stored.dequantize().shape == (LINEAR.out_features, LINEAR.in_features)
