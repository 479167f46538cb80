"""plan.py on its own: what build_plan decides from headers (no weight read, nothing written)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.cli.command import cli_wording
from eaglequant.common.errors import InputError
from eaglequant.common.findings import codes, find
from eaglequant.engines.exclusions import merged_exclusions
from eaglequant.engines.keep import DEFAULT_EXCLUSIONS, user_request
from eaglequant.formats import get_format
from eaglequant.layouts.detect import describe_head
from eaglequant.layouts.head import HeadDescription
from eaglequant.layouts.rules import match_rule
from eaglequant.schemes.assignment import SchemeAssignment
from eaglequant.schemes.model import load_scheme
from tests.conftest import FIXTURE_NAMES, FIXTURES
from tests.plans import plan_for


def head_of(fixture: str) -> HeadDescription:
    with Checkpoint.open(FIXTURES / fixture) as checkpoint:
        return describe_head(checkpoint)


@pytest.fixture(scope="module")
def llama() -> HeadDescription:
    return head_of("specforge-llama")


FP8 = load_scheme("fp8-per-channel")


def resolve_exclusions(
    head: HeadDescription, exclude: list[str] | tuple[str, ...], quantize=(), required: dict[str, str] | None = None
) -> dict[str, str]:
    """What the plan keeps, given the engines' requirements (``required``) instead of deciding them from views."""
    _, keep = user_request(head, exclude, quantize, SchemeAssignment(load_scheme("fp8-per-channel")))
    return merged_exclusions(head, keep, required or {})


def test_the_default_plan_quantizes_the_decoder_and_keeps_the_rest_with_a_reason(llama: HeadDescription) -> None:
    plan = plan_for(llama, FP8, "quark")
    assert {lin.module for lin in plan.quantized} == {lin.module for lin in llama.decoder_linears}
    assert plan.kept["fc.weight"] == DEFAULT_EXCLUSIONS["fc"]
    assert plan.kept["norm.weight"] == "norm (never quantized)" and plan.kept["d2t"] == "vocabulary map (copied as is)"
    quantized_weights = {lin.weight for lin in plan.quantized}
    assert set(plan.kept) | quantized_weights == {t.name for t in llama.tensors}
    assert not set(plan.kept) & quantized_weights
    assert plan.excluded_linears.keys() == {"fc.weight", "lm_head.weight"}


def test_outputs_are_the_formats_specs_sorted_unique_and_sized(llama: HeadDescription) -> None:
    plan = plan_for(llama, FP8, "quark")
    names = [o.spec.name for o in plan.outputs]
    assert names == sorted(names) and len(names) == len(set(names))
    fmt = get_format("quark")
    for linear in plan.quantized:
        specs = {o.spec for o in plan.outputs if o.quantized_from == linear.module}
        assert specs == set(fmt.tensor_specs(linear, plan.scheme))
        assert all(o.source == linear.weight for o in plan.outputs if o.quantized_from == linear.module)
    kept = {o.spec.name: o for o in plan.outputs if o.quantized_from is None}
    assert kept.keys() == plan.kept.keys()
    for tensor in llama.tensors:
        if tensor.name in kept:
            assert (kept[tensor.name].spec.dtype, kept[tensor.name].spec.shape) == (
                tensor.info.dtype,
                tensor.info.shape,
            )
    assert plan.output_bytes == sum(o.spec.nbytes for o in plan.outputs)
    assert plan.output_bytes < sum(t.info.nbytes for t in llama.tensors)


@pytest.mark.parametrize("fixture", FIXTURE_NAMES)
def test_every_fixture_plans_for_vllm_with_proven_rules(fixture: str) -> None:
    plan = plan_for(head_of(fixture), FP8, "quark", engines=["vllm"], target_layers=61)
    assert plan.quantized and plan.target.count == 61
    assert {v.engine for v in plan.verdicts} == {"vllm"} and any(v.quantized for v in plan.verdicts)


def test_match_rule_globs_and_full_match_regexes() -> None:
    names = ("midlayer.self_attn.q_proj", "midlayer.self_attn.q_proj.weight")
    assert match_rule("midlayer.self_attn.*", names, "--exclude")
    assert match_rule("re:.*q_proj", names, "--exclude")
    assert not match_rule("re:q_proj", names, "--exclude")  # a full match, not a search
    assert not match_rule("midlayer.mlp.*", names, "--exclude")


def test_a_bad_regex_is_named_by_the_option_it_came_from(llama: HeadDescription) -> None:
    """Named by its keyword to a library caller, by its flag on the command line."""
    with pytest.raises(InputError, match=re.escape("quantize='re:(fc' is not a valid regular expression")) as raised:
        resolve_exclusions(llama, (), ("re:(fc",))
    assert "--quantize 're:(fc' is not a valid regular expression" in raised.value.one_line(cli_wording)
    with pytest.raises(InputError, match=re.escape("exclude='re:(fc' is not a valid regular expression")) as raised:
        resolve_exclusions(llama, ("re:(fc",), ())
    assert "--exclude 're:(fc' is not a valid regular expression" in raised.value.one_line(cli_wording)


def test_exclusions_defaults_rules_and_requirements(llama: HeadDescription) -> None:
    excluded = resolve_exclusions(llama, ["midlayer.mlp.*"], ["fc"])
    assert "fc" not in excluded and excluded["lm_head"] == DEFAULT_EXCLUSIONS["lm_head"]
    assert excluded["layers.0.mlp.down_proj"] == "--exclude midlayer.mlp.*"
    required = {"fc": "the engine runs fc unquantized"}
    assert resolve_exclusions(llama, [], [], required)["fc"] == "the engine runs fc unquantized"
    with pytest.raises(InputError, match="but the engine runs fc unquantized"):
        resolve_exclusions(llama, [], ["fc"], required)
    with pytest.raises(InputError, match="only non-linear tensors"):
        resolve_exclusions(llama, ["norm.weight"], [])


def test_fused_members_share_scales_only_when_all_are_quantized(llama: HeadDescription) -> None:
    plan = plan_for(llama, load_scheme("nvfp4"), "modelopt")
    qkv = ("layers.0.self_attn.q_proj", "layers.0.self_attn.k_proj", "layers.0.self_attn.v_proj")
    assert plan.scale_group("layers.0.self_attn.k_proj") == qkv
    assert plan.scale_group("layers.0.self_attn.o_proj") == ("layers.0.self_attn.o_proj",)
    with pytest.raises(InputError, match="single scheme"):
        plan_for(llama, FP8, "quark", exclude=["midlayer.self_attn.q_proj"])


def test_a_format_that_cannot_store_the_scheme_is_refused_naming_those_that_can(llama: HeadDescription) -> None:
    with pytest.raises(InputError, match=r"format 'modelopt' cannot store scheme 'mxfp4'.*formats that can: quark"):
        plan_for(llama, load_scheme("mxfp4"), "modelopt")


def test_calibration_decides_nvfp4s_activations(llama: HeadDescription) -> None:
    nvfp4 = load_scheme("nvfp4")
    uncalibrated = plan_for(llama, nvfp4, "modelopt")
    no_calib = find(uncalibrated.notes, "no-calib-data")
    assert uncalibrated.scheme.label == "W4A16" and no_calib is not None and no_calib.subject == "nvfp4"
    amax = {lin.module: 2.0 for lin in llama.linears}
    calibrated = plan_for(llama, nvfp4, "modelopt", input_amax=amax)
    assert calibrated.scheme.label == "W4A4" and "no-calib-data" not in codes(calibrated.notes)
    assert calibrated.input_amax.keys() == {lin.module for lin in calibrated.quantized}  # fc, lm_head dropped


def test_nothing_left_to_quantize_is_refused(llama: HeadDescription) -> None:
    with pytest.raises(InputError, match="nothing would be quantized"):
        plan_for(llama, FP8, "quark", exclude=["re:.*"])


def test_the_plan_reads_headers_only(tmp_path: Path) -> None:
    """A head whose weight bytes are garbage plans the same: build_plan never reads a weight."""
    source = FIXTURES / "specforge-llama"
    for path in source.iterdir():
        data = path.read_bytes()
        if path.suffix == ".safetensors":
            header = 8 + int.from_bytes(data[:8], "little")
            data = data[:header] + bytes(len(data) - header)
        (tmp_path / path.name).write_bytes(data)
    plan = plan_for(head_of_path(tmp_path), FP8, "quark")
    assert [o.spec for o in plan.outputs] == [
        o.spec for o in plan_for(head_of("specforge-llama"), FP8, "quark").outputs
    ]


def head_of_path(path: Path) -> HeadDescription:
    with Checkpoint.open(path) as checkpoint:
        return describe_head(checkpoint)
