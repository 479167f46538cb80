"""Format.storage: how a format stores each linear of a head, decided once for a plan before the engines' part."""

from __future__ import annotations

import pytest

from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.errors import SchemeError
from eaglequant.formats import FORMATS, get_format
from eaglequant.layouts.detect import describe_head
from eaglequant.layouts.head import HeadDescription
from eaglequant.schemes.assignment import SchemeAssignment
from eaglequant.schemes.model import load_scheme
from tests.conftest import FIXTURES


@pytest.fixture(scope="module")
def llama() -> HeadDescription:
    with Checkpoint.open(FIXTURES / "specforge-llama") as checkpoint:
        return describe_head(checkpoint)


def test_each_linear_gets_its_schemes_tensors_or_why_it_cannot_be_stored(llama: HeadDescription) -> None:
    fmt, block, channel = get_format("compressed-tensors"), load_scheme("fp8-block"), load_scheme("fp8-per-channel")
    storage = fmt.storage(llama, SchemeAssignment.per_module(block, {"lm_head": channel}))
    assert set(storage.specs) | set(storage.problems) == {linear.module for linear in llama.linears}
    assert not set(storage.specs) & set(storage.problems)
    k_proj = next(linear for linear in llama.linears if linear.checkpoint_module.endswith("k_proj"))
    unaligned = storage.problems[k_proj.module]
    assert (unaligned.code, unaligned.subject) == ("fused-rows-unaligned", k_proj.module)
    for linear in llama.linears:
        if linear.module in storage.specs:
            scheme = channel if linear.module == "lm_head" else block
            assert storage.specs[linear.module] == fmt.tensor_specs(linear, scheme)
    assert storage.specs["lm_head"] != fmt.tensor_specs(
        llama.linear("lm_head"), block
    )  # its own scheme's, not the decoder's


def test_a_scheme_the_format_cannot_store_is_refused_naming_those_that_can(llama: HeadDescription) -> None:
    nvfp4 = load_scheme("nvfp4")
    with pytest.raises(SchemeError, match="format 'quark' cannot store scheme 'nvfp4'") as refused:
        get_format("quark").storage(
            llama, SchemeAssignment.per_module(load_scheme("fp8-per-channel"), {"lm_head": nvfp4}), FORMATS.values()
        )
    assert "formats that can: " in refused.value.one_line(str)
