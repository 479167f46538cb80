"""The kinds pair: named access to the registered kinds, equal to and hashed as the plain tuple configs declare."""

from __future__ import annotations

import json

from eaglequant.kinds import ACTIVATION_KINDS, WEIGHT_KINDS, KindPair
from eaglequant.schemes.model import load_scheme


def test_kinds_pair_names_its_registered_kinds() -> None:
    kinds = KindPair("fp8-channel", "fp8-token")
    assert kinds.weight_kind is WEIGHT_KINDS["fp8-channel"]
    assert kinds.activation_kind is ACTIVATION_KINDS["fp8-token"]
    assert KindPair("nvfp4", None).activation_kind is None


def test_kinds_pair_is_the_plain_tuple_as_key_and_json() -> None:
    kinds = KindPair("nvfp4", None)
    assert kinds == ("nvfp4", None) and hash(kinds) == hash(("nvfp4", None))
    assert {("nvfp4", None): 1}[kinds] == 1
    assert json.dumps(kinds) == '["nvfp4", null]'
    assert str(kinds) == str(("nvfp4", None))


def test_scheme_kinds_is_the_pair() -> None:
    kinds = load_scheme("int8").kinds
    assert isinstance(kinds, KindPair) and kinds.weight == "int8-channel" and kinds.activation == "int8-token"
