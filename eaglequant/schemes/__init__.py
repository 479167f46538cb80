"""Quantization schemes: the declarative model (:mod:`.model`) and the math per family (:mod:`.fp8`)."""

from eaglequant.schemes.model import Scheme, TensorQuant, builtin_scheme_names, load_scheme

__all__ = ["Scheme", "TensorQuant", "builtin_scheme_names", "load_scheme"]
