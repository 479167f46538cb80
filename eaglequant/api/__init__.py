"""The library API: what the CLI calls, and what a Python user calls the same way.

>>> import eaglequant
>>> report = eaglequant.inspect("fixtures/specforge-llama")
>>> result = eaglequant.convert("fixtures/specforge-llama", "out/fp8", scheme="fp8-per-channel", format="quark")
>>> eaglequant.explain("out/fp8").ok
True
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS, DEFAULT_MAX_DRAFT_TOKENS
from eaglequant.common.progress import Progress
from eaglequant.conversion.inspection import InspectReport, inspect_source
from eaglequant.conversion.options import ConversionOptions
from eaglequant.conversion.result import ConversionResult
from eaglequant.publish.upload import UploadResult
from eaglequant.verification.fidelity import DEFAULT_TOKENS

if TYPE_CHECKING:
    from eaglequant.checkpoint.destination import StagedDirectory
    from eaglequant.engine_load import LoadCheck
    from eaglequant.readback.explanation import Explanation
    from eaglequant.verification.verify import VerifyReport


def inspect(
    src: str | Path,
    options: ConversionOptions | None = None,
    *,
    draft_tokens: int = DEFAULT_DRAFT_TOKENS,
    **settings: Any,
) -> InspectReport:
    """Describe a checkpoint (a directory or a Hub repo id) and what converting it with ``options`` (or
    ``settings``: any :class:`ConversionOptions` field by name) would do, and what a speculative round of
    ``draft_tokens`` tokens would read per engine. Reads headers only (a Hub source is downloaded first); the
    options that do not change the plan are checked, and have no other effect."""
    return inspect_source(src, ConversionOptions.build(options, **settings), draft_tokens)


def convert(
    src: str | Path,
    dst: str | Path,
    options: ConversionOptions | None = None,
    *,
    overwrite: bool = False,
    overwrite_any: bool = False,
    progress: Progress | None = None,
    stage: StagedDirectory | None = None,
    **settings: Any,
) -> ConversionResult:
    """Quantize the head in ``src`` (a directory, or a Hub repo id ``org/name[@revision]``) and write it to
    ``dst`` (atomically: ``dst`` appears only when complete, model card and report included). An existing
    ``dst`` is replaced with ``overwrite`` if eaglequant wrote it (it has a report), with ``overwrite_any`` whatever.

    ``options``, or ``settings`` (its fields by name: ``scheme="nvfp4"``, ``engines=["vllm", "sglang"]``, ...;
    see :class:`ConversionOptions`) say what to write. Among them:
    ``calib``: a safetensors file of captured draft inputs (see :mod:`eaglequant.draft.calibrate`) for
    schemes with static activation scales (nvfp4 W4A4); without it such schemes are written weight-only.
    ``verify_output``: run :func:`verify` on the result against ``src`` before it is moved into place, store
    its report in ``dst/eaglequant_verify.json`` (``result.verification``) and its figures in the card; an output
    that fails it is moved to ``DST.verify-failed`` instead (``result.destination``), and ``dst`` left as it was.
    ``repo_id``: the Hub repo the result will be uploaded to; the card's serving lines name the draft by it
    (default: the absolute path of ``dst``).
    ``workers``: threads that copy and quantize (default: up to 4, one per core); the output is the same
    byte for byte whatever their number. ``device``: ``cpu`` or ``cuda`` for the quantization math; the
    tensors written are the same byte for byte (see :mod:`eaglequant.conversion.devices`).
    ``stage``: a staged directory for ``dst`` to write into instead, left for the caller to commit.
    """
    from eaglequant.jobs.conversion import write_conversion

    chosen = ConversionOptions.build(options, **settings)
    return write_conversion(
        src, dst, chosen, overwrite=overwrite, overwrite_any=overwrite_any, progress=progress, stage=stage
    )


def manifest_key(src: str | Path, options: ConversionOptions | None = None, **settings: Any) -> str:
    """The manifest key :func:`convert` with these options would record, without converting: a destination
    carrying it, complete, needs no new conversion. A local source's headers are read (and the options checked
    against them); a Hub source is not downloaded: its weights' SHA-256 come from the Hub's file listing, and
    only its small side files (config.json, ...) are fetched."""
    from eaglequant.conversion.manifest_options import manifest_key as key_of

    return key_of(src, ConversionOptions.build(options, **settings))


def explain(
    dst: str | Path,
    *,
    engines: list[str] | tuple[str, ...] = (),
    target_layers: int | None = None,
    target_config: str | Path | None = None,
    draft_tokens: int = DEFAULT_DRAFT_TOKENS,
) -> Explanation:
    """How each engine will read the quantized checkpoint in ``dst``: every runtime module, the rule that
    excludes it, the scheme applied, the tensors expected, and the weight bytes a speculative round of
    ``draft_tokens`` tokens reads. Reads headers only; ``Explanation.ok`` is False
    when an engine would not load it as its config says. ``engines``: those that must load it (default: those its
    conversion targeted); ``["all"]`` (and no report): every engine, those that cannot load it not judged."""
    from eaglequant.record.as_recorded import explain_written

    return explain_written(dst, engines, target_layers, target_config, draft_tokens)


def verify(
    dst: str | Path,
    *,
    source: str | Path | None = None,
    engines: list[str] | tuple[str, ...] = (),
    target_layers: int | None = None,
    target_config: str | Path | None = None,
    seed: int = 0,
    tokens: int = DEFAULT_TOKENS,
    load_with: list[str] | tuple[str, ...] = (),
    engine_python: str | Path | None = None,
    inputs: str | Path | None = None,
    max_draft_tokens: int = DEFAULT_MAX_DRAFT_TOKENS,
    device: str = "cpu",
) -> VerifyReport:
    """Check the quantized checkpoint in ``dst``: structure for each engine (all, the ones recorded in its
    report, or ``engines``), and with ``source`` (default: the source recorded in its report, if it is still
    there; a Hub repo id works too) per-layer kernel parity and draft-head fidelity against the scheme's
    thresholds.

    ``inputs``: captured draft inputs (the ``--calib`` file format) for the draft-head fidelity run; default:
    seeded synthetic inputs (``seed``, ``tokens`` positions).
    ``load_with``: engines ("vllm", "sglang") whose own code then loads ``dst`` on CPU, module by module
    (see :mod:`eaglequant.engine_load`); ``engine_python`` is the interpreter that has the engine installed
    (default: this one). With ``inputs`` that hold the target's choices, acceptance is predicted for every k (tokens
    drafted a round) from 1 to ``max_draft_tokens`` from one chain, on ``device`` (``cuda`` where there is one),
    and judged at k = :data:`~eaglequant.common.draft_tokens.DEFAULT_DRAFT_TOKENS`."""
    from eaglequant.verification.written import verify_recorded

    return verify_recorded(
        dst, source=source, engines=engines, target_layers=target_layers, target_config=target_config, seed=seed,
        tokens=tokens, load_with=load_with, engine_python=engine_python, inputs=inputs,
        max_draft_tokens=max_draft_tokens, device=device,
    )  # fmt: skip


def load_checks(
    dsts: Sequence[str | Path],
    *,
    engine: str,
    sources: Sequence[str | Path | None] | None = None,
    engine_python: str | Path | None = None,
) -> list[LoadCheck]:
    """Load each quantized checkpoint in ``dsts`` with ``engine``'s own code ("vllm" or "sglang"), on CPU, in
    one process of ``engine_python`` (default: this interpreter), and hold what it did against eaglequant's
    reading of the checkpoint for that engine (see :mod:`eaglequant.engine_load`). ``sources``: the BF16
    checkpoints they were made from, for the engine's own GEMM against the source's (None: not run)."""
    from eaglequant.verification.written import load_checks as checks

    return checks(dsts, engine=engine, sources=sources, engine_python=engine_python)


def upload(
    dst: str | Path,
    repo_id: str,
    *,
    revision: str = "main",
    private: bool = False,
    commit_message: str | None = None,
    dry_run: bool = False,
    force: bool = False,
    source: str | Path | None = None,
) -> UploadResult:
    """Upload the quantized checkpoint in ``dst`` to the Hub repo ``repo_id`` (created if needed).

    ``dst`` must have passed numerical verification unless ``force``: :func:`verify` against ``source`` (default:
    the source recorded in its report, when still on disk), or, without a source, the passing verification
    recorded at conversion (``convert --verify``), provided every file still has the SHA-256 the report records.
    The card is re-rendered to name the draft ``repo_id`` in its serving lines. The upload is huggingface_hub's
    ``upload_folder``: resumable, and split into several commits when very large.
    ``dry_run``: check (by the same rule) and list what would be sent, send nothing.
    """
    from eaglequant.jobs.upload import upload_verified

    return upload_verified(
        dst, repo_id, revision=revision, private=private, commit_message=commit_message, dry_run=dry_run,
        force=force, source=source,
    )  # fmt: skip
