"""What an engine release does with one runtime module of a draft: the one answer :meth:`Engine.decide` gives, as
vLLM's ``QuantizationConfig.get_quant_method(layer, prefix)`` does for one layer.

- ``quantized``: the config decides; a module no exclusion rule matches gets a quantization method for its kinds and
  loads the ``tensors`` named (``required``: why it fails to load unless stored quantized).
- ``unquantized``: the engine builds it without a quantization method whatever the config says, so the checkpoint
  keeps it in the source dtype and the rules need not name it.
- ``refused``: the engine fails to load it stored in these kinds, so the checkpoint keeps it unquantized and the
  config must exclude it; or (``whole_draft``) it cannot build the draft the module is of at all, whatever the
  scheme, so no checkpoint of that head loads.

``why`` names the engine source that decides it.
"""

from __future__ import annotations

from dataclasses import dataclass

from eaglequant.common.text_enum import TextEnum


class Outcome(TextEnum):
    QUANTIZED = "quantized"
    UNQUANTIZED = "unquantized"
    REFUSED = "refused"


@dataclass(frozen=True)
class ModuleDecision:
    outcome: Outcome
    why: str
    tensors: tuple[str, ...] = ()  # quantized: the parameters the engine's method loads (weight, weight_scale, ...)
    required: str | None = None  # quantized: why a copy stored unquantized fails to load
    whole_draft: bool = False  # refused: the engine cannot build the draft at all, whatever the module and scheme

    @property
    def quantized(self) -> bool:
        return self.outcome is Outcome.QUANTIZED

    @property
    def unquantized_by_engine(self) -> str | None:
        """Why the engine itself runs the module unquantized whatever the config says (outcome ``unquantized``);
        None when it does not."""
        return self.why if self.outcome is Outcome.UNQUANTIZED else None

    @property
    def kept(self) -> str | None:
        """Why the checkpoint must keep the module in the source dtype (unquantized or refused); None: it may be
        quantized."""
        return None if self.quantized else self.why


def quantized(why: str, tensors: tuple[str, ...] = (), required: str | None = None) -> ModuleDecision:
    return ModuleDecision(Outcome.QUANTIZED, why, tensors, required)


def built_unquantized(why: str) -> ModuleDecision:
    """The decision ``unquantized``: the engine builds the module without a quantization method."""
    return ModuleDecision(Outcome.UNQUANTIZED, why)


def refused(why: str, whole_draft: bool = False) -> ModuleDecision:
    return ModuleDecision(Outcome.REFUSED, why, whole_draft=whole_draft)
