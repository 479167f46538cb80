"""Options shared by several commands (Typer's public Annotated style), and the library's
:class:`~eaglequant.conversion.options.ConversionOptions` built from them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from eaglequant.common.draft_tokens import MAX_DRAFT_TOKENS
from eaglequant.conversion.options import MAX_TARGET_LAYERS, MAX_WORKERS

if TYPE_CHECKING:
    from eaglequant.conversion.options import ConversionOptions


def conversion_options(**flags: Any) -> ConversionOptions:
    """The options ``convert`` or ``inspect`` was given, by library parameter name; a flag left out (None) keeps
    the library's default. Its errors name parameters: ``run_guarded`` says them as flags."""
    from eaglequant.conversion.options import ConversionOptions

    return ConversionOptions(**{name: value for name, value in flags.items() if value is not None})


def given_options(parameters: Mapping[str, Any]) -> ConversionOptions:
    """The options a command was given, from its parameters (``locals()`` as it starts): each option's parameter is
    named as its flag (``--engine`` -> ``engine``), so every option a command declares is passed on without being
    listed again; those it does not declare keep the library's default."""
    from eaglequant.conversion.options import OPTION_SPECS

    by_flag = {name: spec.flag.removeprefix("--").replace("-", "_") for name, spec in OPTION_SPECS.items()}
    return conversion_options(**{name: parameters[flag] for name, flag in by_flag.items() if flag in parameters})


def conversion_flag(name: str, **settings: Any) -> Any:
    """The Typer option of a :class:`ConversionOptions` field, spelled as the field declares it (flags, help)."""
    from eaglequant.conversion.options import OPTION_SPECS

    spec = OPTION_SPECS[name]
    return typer.Option(*spec.flags, help=spec.help, **settings)


SchemeOpt = Annotated[str, conversion_flag("scheme")]
SchemeForOpt = Annotated[Optional[list[str]], conversion_flag("scheme_for")]  # noqa: UP045
FormatOpt = Annotated[str, conversion_flag("format")]
ExcludeOpt = Annotated[Optional[list[str]], conversion_flag("exclude")]  # noqa: UP045 - Typer needs Optional on 3.10
QuantizeOpt = Annotated[Optional[list[str]], conversion_flag("quantize")]  # noqa: UP045
EngineOpt = Annotated[Optional[list[str]], conversion_flag("engines")]  # noqa: UP045
# Bounds of the numeric options: past them a value is a typo, and one clear usage line (exit 2) beats a crash.
MAX_SEED = 2**32 - 1
MAX_GENERATED_TOKENS = 32_768
MAX_PROMPTS = 1_000_000
MAX_TEMPERATURE = 10.0
MAX_WINDOW_S = 7 * 24 * 3600.0  # accept --window: a week of a server's traffic
MIN_WINDOW_S = 0.001  # and at least a millisecond of it
MAX_TOP_K = 1024
MAX_VOCABULARY = 2**31 - 1  # token ids and vocabulary sizes
MAX_PARALLEL = 1024  # devices an engine splits a model over
TensorParallelOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option(
        "--tensor-parallel-size",
        min=1,
        max=MAX_PARALLEL,
        help="GPUs (or CPU ranks) the engine splits the target over (vLLM's --tensor-parallel-size).",
        show_default=False,
    ),
]
EnginePythonOpt = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option(
        "--engine-python",
        help="Python interpreter that has vLLM installed (default: EAGLEQUANT_VLLM_PYTHON, else this interpreter "
        "when it has vLLM, else .venv-vllm).",
        show_default=False,
    ),
]
EngineArgOpt = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option(
        "--engine-arg",
        help="KEY=VALUE passed to the engine as it is (repeatable; VALUE read as JSON where it parses), e.g. "
        "max_num_seqs=8.",
        show_default=False,
    ),
]
TargetLayersOpt = Annotated[
    Optional[int],  # noqa: UP045
    conversion_flag("target_layers", min=1, max=MAX_TARGET_LAYERS),
]
WorkersOpt = Annotated[Optional[int], conversion_flag("workers", min=1, max=MAX_WORKERS)]  # noqa: UP045
TargetConfigOpt = Annotated[Optional[Path], conversion_flag("target_config", show_default=False)]  # noqa: UP045
SrcArg = Annotated[
    str,
    typer.Argument(
        help="Checkpoint directory, or Hub repo id org/name[@revision] (hf://org/name: the Hub, whatever is local).",
        show_default=False,
    ),
]
DstArg = Annotated[
    Path,
    typer.Argument(help="Directory to create (must not exist, nor be inside SRC).", show_default=False),
]
QuantizedDstArg = Annotated[
    Path, typer.Argument(help="Quantized checkpoint directory (what convert wrote).", show_default=False)
]

SourceOpt = Annotated[
    Optional[str],  # noqa: UP045 - Typer needs Optional here on Python 3.10
    typer.Option(
        "--source",
        help="The BF16 checkpoint DST was made from, a directory or Hub repo id (default: the one recorded in "
        "DST's report, if still there). verify, and upload before it sends, check DST against it.",
        show_default=False,
    ),
]


PromptsOpt = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option(
        "--prompts",
        help='A .jsonl of {"prompt": ...} or a text file, one prompt a line (default: the trained pair\'s held-out '
        "prompts).",
        show_default=False,
    ),
]
MaxPromptsOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option("--max-prompts", min=1, max=MAX_PROMPTS, help="Use only the first N prompts.", show_default=False),
]

DraftTokensOpt = Annotated[
    int,
    typer.Option(
        "--draft-tokens",
        min=1,
        max=MAX_DRAFT_TOKENS,
        help="k, the tokens drafted per speculative round (vLLM's num_speculative_tokens, TensorRT-LLM's "
        "max_draft_len).",
    ),
]


MaxDraftTokensOpt = Annotated[
    int,
    typer.Option(
        "--max-draft-tokens",
        min=1,
        max=MAX_DRAFT_TOKENS,
        help="Predict acceptance for every k from 1 to K from one chain of K steps (the verdict stays at k = 3).",
    ),
]
PredictDeviceOpt = Annotated[
    str,
    typer.Option("--device", help="Where the chained prediction runs: cpu, or cuda where torch sees a GPU."),
]
MeasuredOpt = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option(
        "--measured",
        help="An `eaglequant accept` record (its --json output or eaglequant_accept.json): the speed-up model's "
        "overheads are fitted to the source draft's rounds it timed, instead of the stated ones.",
        show_default=False,
    ),
]


def positive_number(value: float | None) -> float | None:
    """:func:`positive` for an option given once."""
    positive(None if value is None else [value])
    return value


def positive(values: list[float] | None) -> list[float] | None:
    """A float option's callback: each value above zero (Click's range includes its minimum, and NaN passes its
    checks, every comparison with it being false)."""
    if values is not None and any(math.isnan(value) or value <= 0 for value in values):
        raise typer.BadParameter("must be a number above 0")
    return values
