"""A conversion's source opened and planned: the head described, the options made one :class:`ConversionRequest`
(unless the caller made it already), and the plan built from it; what ``inspect``, ``manifest_key`` and the
conversion job each start from."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.errors import InputError
from eaglequant.conversion.options import ConversionOptions
from eaglequant.conversion.plan import ConversionPlan, build_plan
from eaglequant.conversion.request import ConversionRequest
from eaglequant.hub.client import SourceRef
from eaglequant.layouts.detect import describe_head
from eaglequant.layouts.head import HeadDescription


def open_source(src: str | Path) -> tuple[Checkpoint, HeadDescription]:
    checkpoint = Checkpoint.open(src)
    try:
        existing = checkpoint.config.get("quantization_config")
        if existing is not None:
            method = existing.get("quant_method", "?") if isinstance(existing, dict) else "?"
            raise InputError(
                f"{checkpoint.root / 'config.json'}: the checkpoint is already quantized (quant_method {method!r})",
                hint="start from the BF16 head the trainer released",
            )
        return checkpoint, describe_head(checkpoint)
    except BaseException:
        checkpoint.close()
        raise


@contextmanager
def planned(
    source: SourceRef,
    options: ConversionOptions,
    *,
    calibrate: bool = False,
    request: ConversionRequest | None = None,
) -> Iterator[tuple[Checkpoint, ConversionPlan]]:
    """The source opened, and the plan for it: ``options`` become one :class:`ConversionRequest` here (unless the
    caller made it from them already: ``request``), which the plan takes as it is (from headers only; with
    ``calibrate`` and a ``calib`` file, after the calibration forward)."""
    checkpoint, head = open_source(source.path)
    with checkpoint:
        request = request or ConversionRequest.of(options, head.config)
        input_amax = None
        if calibrate and options.calib is not None:
            from eaglequant.draft.calibrate import calibrate as calibrated_amax

            input_amax = calibrated_amax(checkpoint, head, options.calib)
        yield checkpoint, build_plan(head, request, input_amax=input_amax)
