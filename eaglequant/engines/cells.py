"""The support matrix's vocabulary: a cell says whether an engine release loads a scheme stored in a format, and
the rows are keyed by scheme kinds. Each engine release declares its own cells in its module (``CELLS``); a newer
release of the same engine starts from the older one's and overrides what changed. ``support.py`` reads them."""

from __future__ import annotations

from dataclasses import dataclass

from eaglequant.common.json_fields import JsonRecord
from eaglequant.kinds import KindPair
from eaglequant.layouts.head import Attention


@dataclass(frozen=True)
class Support:
    loads: bool
    note: str  # why, and under which conditions (hardware, versions); source file in the engine
    conditional: bool = False  # loads, but only under the stated conditions: shown to the user as a warning
    mla: bool | str = True  # also holds for MLA (DeepSeek / Kimi) drafts; a string says why not
    where: str = ""  # a conditional cell's hardware or versions, in a few words (``yes* (Blackwell)``)

    def for_draft(self, attention: Attention) -> Support:
        """The cell as it holds for a draft of this ``attention``: an MLA draft is refused where the cell says so."""
        if attention != Attention.MLA or not self.loads or self.mla is True:
            return self
        return Support(
            False, f"not for MLA drafts: {self.mla}" if isinstance(self.mla, str) else f"{self.note}; not for MLA"
        )


Cells = dict[tuple[KindPair, str], Support]  # (scheme kinds, format) -> Support


@dataclass(frozen=True)
class Answer(JsonRecord):
    """Whether an engine release does one thing with a draft's modules (runs lm_head quantized, reads per-module
    kinds, ...): ``why`` names the engine source that decides it, or the reason it does not."""

    yes: bool
    why: str


def loads(note: str, *, mla: bool | str = True) -> Support:
    return Support(True, note, mla=mla)


def loads_if(note: str, *, where: str, mla: bool | str = True) -> Support:
    """Loads under the conditions ``note`` states, ``where`` in a few words (the hardware or versions that run it as
    stored): the user is warned of them."""
    return Support(True, note, conditional=True, mla=mla, where=where)


def refuses(note: str) -> Support:
    return Support(False, note)


FP8_W8A8 = KindPair("fp8-channel", "fp8-token")
FP8_BLOCK_W8A8 = KindPair("fp8-block", "fp8-group")
NVFP4_W4A16 = KindPair("nvfp4", None)
NVFP4_W4A4 = KindPair("nvfp4", "nvfp4")
MXFP4_W4A4 = KindPair("mxfp4", "mxfp4")
MXFP4_W4A16 = KindPair("mxfp4", None)
INT8_W8A8 = KindPair("int8-channel", "int8-token")
INT4_W4A16 = KindPair("int4-group", None)
INT4_W4A16_ASYM = KindPair("int4-group-asym", None)

__all__ = [
    "FP8_BLOCK_W8A8",
    "FP8_W8A8",
    "INT4_W4A16",
    "INT4_W4A16_ASYM",
    "INT8_W8A8",
    "MXFP4_W4A4",
    "MXFP4_W4A16",
    "NVFP4_W4A4",
    "NVFP4_W4A16",
    "Answer",
    "Cells",
    "KindPair",
    "Support",
    "loads",
    "loads_if",
    "refuses",
]
