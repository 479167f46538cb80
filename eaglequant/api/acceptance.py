"""``accept``: the acceptance length of quantized drafts against their source, served by the engine
(:mod:`eaglequant.measurement`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS
from eaglequant.measurement.served import DEQUANTIZED
from eaglequant.measurement.server_acceptance import DEFAULT_TEMPERATURES

if TYPE_CHECKING:
    from eaglequant.common.progress import Steps
    from eaglequant.measurement.measure import AcceptanceReport
    from eaglequant.measurement.one_server import ServerAcceptance

__all__ = ["DEFAULT_TEMPERATURES", "accept", "accept_server"]


def accept(
    dsts: Sequence[str | Path],
    *,
    target: str | Path | None = None,
    source: str | Path | None = None,
    prompts: str | Path | None = None,
    max_prompts: int | None = None,
    draft_tokens: int | str | Sequence[int] = DEFAULT_DRAFT_TOKENS,
    max_tokens: int = 96,
    temperatures: Sequence[float] = DEFAULT_TEMPERATURES,
    served_as: str = DEQUANTIZED,
    dtype: str = "bfloat16",
    engine: str = "vllm",
    engine_python: str | Path | None = None,
    tensor_parallel_size: int | None = None,
    engine_args: Mapping[str, Any] | Sequence[str] | None = None,
    server: Sequence[str] = (),
    reference_server: str | None = None,
    launch: bool = False,
    port: int | None = None,
    window_s: float | None = None,
    seed: int = 0,
    record: bool = True,
    target_alone_runs: int = 2,
    concurrency: str | Sequence[int] = (),
    schedule: str | Sequence[Sequence[int]] | None = None,
    progress: Callable[[str], None] = lambda _: None,
    steps: Steps | None = None,
) -> AcceptanceReport:
    """Serve ``target`` with the source draft and with each quantized draft in ``dsts`` using ``engine``'s own
    speculative decoding (greedy, and sampled at each of ``temperatures``), and measure each one's acceptance.

    ``source``: the BF16 draft (default: the one recorded in the first DST's report). ``prompts``: a .jsonl
    file of {"prompt": ...} or a text file with one prompt a line (default: the held-out prompts bundled with
    the trained pair). ``draft_tokens``: k, or several (``[1, 2, 3, 4]``, or ``"1,2,3,4"`` as the command line
    takes them): the target alone runs once, each draft once per k, and the budget is judged at the first (each
    draft's decode speed-up over the target alone is reported at every k). ``served_as``: "dequantized" serves
    each quantized draft as its weights dequantized to ``dtype`` (the weight-only effect; what runs where the
    engine has no kernel for the format, as vLLM on CPU), "stored" serves DST as written.
    ``tensor_parallel_size`` and ``engine_args`` (``{"max_model_len": 4096}``, or ``["max_model_len=4096"]``) are
    passed to the engine as it is started. Where it runs:

    - by default, offline: one process of the engine's interpreter per run (``LLM(...)``);
    - ``launch``: the engine's OpenAI-compatible server, started per run (at ``port``, checked free first; default
      a free one), measured through ``/metrics``;
    - ``server``: running servers (URLs), the source draft's first, then each DST's in order, with
      ``reference_server`` serving the target alone (the greedy reference); ``target`` is then read from them
      (one server with no DST: :func:`accept_server`).

    ``target_alone_runs``: how often the target alone is served, before the drafts and after them (2 by default);
    where its decode rate moves by more than 15% between them, no speed-up is reported (``target-alone-drifted``).
    ``concurrency``: each C (``[1, 2, 4]``, or ``"1,2,4"``), a greedy pass of the prompts with at most C requests
    in flight in every run, after its prompts one at a time: output tokens per second and the speed-up at each C
    (offline and launched, ``max_num_seqs`` is then the largest C unless ``engine_args`` sets it).
    ``schedule``: a k for each batch size, as vLLM's ``num_speculative_tokens_per_batch_size`` (``"1-2:3,3-8:1"``,
    or ``[(1, 2, 3), (3, 8, 1)]``; ``"searched"``: the one ``search --objective speedup`` recorded in the DSTs):
    offline, with ``concurrency``, each draft is served once more with it (its largest k as
    ``num_speculative_tokens``) and measured as a k is, at each C beside the fixed k.
    ``window_s`` is one running server's option (:func:`accept_server`): given here it is refused in one line,
    before anything runs or is written. ``record``: write ``eaglequant_accept.json`` into each DST and add the
    figures to its card. ``steps``: told of each prompt answered (offline, each run), with the whole command's
    count for an ETA."""
    from eaglequant.jobs.acceptance import measure_and_record

    return measure_and_record(
        dsts, target=target, source=source, prompts=prompts, max_prompts=max_prompts, draft_tokens=draft_tokens,
        max_tokens=max_tokens, temperatures=temperatures, served_as=served_as, dtype=dtype, engine=engine,
        engine_python=engine_python, tensor_parallel_size=tensor_parallel_size, engine_args=engine_args,
        server=server, reference_server=reference_server, launch=launch, port=port, window_s=window_s, seed=seed,
        record=record, target_alone_runs=target_alone_runs, concurrency=concurrency, schedule=schedule,
        progress=progress, steps=steps,
    )  # fmt: skip


def accept_server(
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
    """The acceptance length of the one running vLLM server at ``server`` (a URL), read from its spec-decode
    counters on ``/metrics``: by default over the prompts, sent one at a time (the server must be eaglequant's
    alone meanwhile), with 95% intervals over prompts per mode; with ``window_s``, over that many seconds of the
    server's live traffic, eaglequant sending nothing (no interval: there are no prompts to cluster by). No
    reference (nothing checked lossless) and no DST (nothing recorded). ``draft_tokens``: the one k the server
    drafts (checked against its counters). ``reference_server`` is refused in one line: one server is measured
    without a reference (give DSTs to compare against one)."""
    from eaglequant.measurement.server_acceptance import measure_server

    return measure_server(
        server, window_s=window_s, prompts=prompts, max_prompts=max_prompts, draft_tokens=draft_tokens,
        max_tokens=max_tokens, temperatures=temperatures, seed=seed, steps=steps, reference_server=reference_server,
    )  # fmt: skip
