"""The acceptance length of one running vLLM server, its settings checked first (``accept_server``); and the
temperatures ``accept`` measures at by default."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS
from eaglequant.measurement.served import DEQUANTIZED

if TYPE_CHECKING:
    from eaglequant.common.progress import Steps
    from eaglequant.measurement.one_server import ServerAcceptance

DEFAULT_TEMPERATURES: tuple[float, ...] = ()  # greedy only: vLLM 0.32's CPU build accepts nothing at T > 0


def measure_server(
    server: str,
    *,
    window_s: float | None = None,
    prompts: str | Path | None = None,
    max_prompts: int | None = None,
    draft_tokens: int | str | Sequence[int] = DEFAULT_DRAFT_TOKENS,
    max_tokens: int = 96,
    temperatures: Sequence[float] = DEFAULT_TEMPERATURES,
    seed: int = 0,
    steps: Steps | None = None,
    reference_server: str | None = None,
) -> ServerAcceptance:
    """:func:`eaglequant.api.acceptance.accept_server`: the one server at ``server`` measured through its
    ``/metrics``, over the prompts or over ``window_s`` seconds of its live traffic; ``reference_server`` is
    refused in one line."""
    from eaglequant.measurement import runners as measurement
    from eaglequant.measurement.runners import OneServer

    measurement.check_settings("vllm", DEQUANTIZED, temperatures, draft_tokens, max_tokens)
    where = measurement.where_of(
        engine="vllm",
        engine_python=None,
        served_as=DEQUANTIZED,
        arguments={},
        server=[server],
        reference_server=reference_server,
        launch=False,
        dsts=0,
        window_s=window_s,
    )
    assert isinstance(where, OneServer)
    return measurement.accept_one_server(
        where,
        prompts=prompts,
        max_prompts=max_prompts,
        draft_tokens=draft_tokens,
        max_tokens=max_tokens,
        temperatures=temperatures,
        seed=seed,
        steps=steps,
    )
