"""``accept``: the acceptance length of quantized drafts against their source, served by the engine."""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from eaglequant.acceptance.measure import (
    ENGINES,
    AcceptanceReport,
    QuantizedDraft,
    Settings,
    measure,
    modes_for,
)
from eaglequant.acceptance.prompts import read_prompts
from eaglequant.acceptance.record import ACCEPT_NAME
from eaglequant.acceptance.served import DEQUANTIZED, SERVED_AS, STORED, quantized_modules, write_dequantized
from eaglequant.common.errors import InputError, Param, given, placeholder, suggested, words

DEFAULT_TEMPERATURES: tuple[float, ...] = ()  # greedy only: vLLM 0.32's CPU build accepts nothing at T > 0


def accept(
    dsts: Sequence[str | Path],
    *,
    target: str | Path,
    source: str | Path | None = None,
    prompts: str | Path | None = None,
    max_prompts: int | None = None,
    num_speculative_tokens: int = 3,
    max_tokens: int = 96,
    temperatures: Sequence[float] = DEFAULT_TEMPERATURES,
    served_as: str = DEQUANTIZED,
    dtype: str = "bfloat16",
    engine: str = "vllm",
    engine_python: str | Path | None = None,
    seed: int = 0,
    record: bool = True,
    progress: Callable[[str], None] = lambda _: None,
) -> AcceptanceReport:
    """Serve ``target`` with the source draft and with each quantized draft in ``dsts`` using ``engine``'s own
    speculative decoding (greedy, and sampled at each of ``temperatures``), and measure each one's acceptance.

    ``source``: the BF16 draft (default: the one recorded in the first DST's report). ``prompts``: a .jsonl
    file of {"prompt": ...} or a text file with one prompt a line (default: the held-out prompts bundled with
    the trained pair). ``served_as``: "dequantized" serves each quantized draft as its weights dequantized to
    ``dtype`` (the weight-only effect; what runs where the engine has no kernel for the format, as vLLM on CPU),
    "stored" serves DST as written. ``record``: write ``eaglequant_accept.json`` into each DST and add the
    figures to its card."""
    from eaglequant.engine_load import engine_python as find_engine_python

    _check_settings(engine, served_as, temperatures, num_speculative_tokens, max_tokens)
    target_path = _model_dir(target, "target")
    prompt_list, prompts_from = read_prompts(None if prompts is None else Path(prompts), max_prompts)
    if len(prompt_list) < 2:
        raise InputError(
            words(Param("prompts"), f": {len(prompt_list)} prompt; the intervals are over prompts"),
            hint="give at least 2 prompts",
        )
    interpreter = find_engine_python(engine, engine_python)
    destinations = [Path(d) for d in dsts]
    source_path = _model_dir(source, "source") if source is not None else _recorded_source(destinations)
    settings = Settings(
        target_path,
        tuple(prompt_list),
        prompts_from,
        num_speculative_tokens,
        max_tokens,
        modes_for(temperatures, seed),
        dtype,
        seed,
    )
    with tempfile.TemporaryDirectory(prefix="eaglequant-served-") as tmp:
        drafts = [_served(dst, served_as, dtype, Path(tmp) / str(i), engine) for i, dst in enumerate(destinations)]
        report = measure(interpreter, settings, source_path, drafts, progress)
    _add_notes(report, dtype)
    if record:
        for draft in report.quantized:
            write_acceptance(draft.path, report, draft.label)
    return report


def _check_settings(
    engine: str, served_as: str, temperatures: Sequence[float], num_speculative_tokens: int, max_tokens: int
) -> None:
    """One clear line for a setting accept cannot run with."""
    if engine not in ENGINES:
        runs = f": accept runs {', '.join(ENGINES)}"
        raise InputError(words(given("engine", engine), runs), hint=words("use ", suggested("engine", ENGINES[0])))
    if served_as not in SERVED_AS:
        one_of = f": not one of {', '.join(SERVED_AS)}"
        raise InputError(words(given("served_as", served_as), one_of), hint="use dequantized")
    if any(not math.isfinite(t) or t <= 0 for t in temperatures):
        raise InputError(
            words(given("temperatures", list(temperatures)), ": each must be a finite number above 0"),
            hint="greedy always runs; give the sampled temperatures beside it, e.g. 1.0",
        )
    if num_speculative_tokens < 1 or max_tokens < 1:
        raise InputError(
            words(Param("num_speculative_tokens"), " and ", Param("max_tokens"), " must be at least 1"),
            hint=words("e.g. ", suggested("num_speculative_tokens", 3), " ", suggested("max_tokens", 96)),
        )


def _add_notes(report: AcceptanceReport, dtype: str) -> None:
    """What a reader of the figures should know: how the drafts were served, how the engine drafts."""
    if any(d.served_as == DEQUANTIZED for d in report.quantized):
        report.notes.append(
            f"quantized drafts were served as their weights dequantized to {dtype} (exactly what the fused kernels "
            "compute from the stored bytes, then rounded to the serving dtype): the weight-only effect; activation "
            "quantization was not run"
        )
    sample_method = (report.speculative_config or {}).get("draft_sample_method")
    if sample_method:
        report.notes.append(
            f"{report.engine} {report.version} drafts with draft_sample_method={sample_method}: a drafted token "
            "is accepted when the target's own sampling agrees with the draft's choice"
        )


def _model_dir(path: str | Path, parameter: str, recorded: bool = False) -> Path:
    chosen = Path(path)
    if not (chosen / "config.json").is_file():
        what = "does not exist" if not chosen.exists() else "has no config.json"
        named = words(placeholder(parameter, str(chosen)), " (recorded)" if recorded else "", f": {what}")
        raise InputError(named, hint="give the model's directory (config.json and weights)")
    return chosen


def _recorded_source(dsts: list[Path]) -> Path:
    from eaglequant.record.report import read_report

    recorded = {str(r.source) for r in (read_report(d) for d in dsts) if r is not None and r.source}
    if len(recorded) != 1:
        what = "records no source" if not recorded else f"record different sources ({', '.join(sorted(recorded))})"
        hint = words("pass ", placeholder("source", "SRC"), ", the BF16 draft they were made from")
        raise InputError(f"the quantized drafts {what}", hint=hint)
    return _model_dir(recorded.pop(), "source", recorded=True)


def _served(dst: Path, served_as: str, dtype: str, workdir: Path, engine: str) -> QuantizedDraft:
    """What the engine is given for ``dst``: a quantized draft dequantized (or as stored), a plain head (a pruned
    vocabulary, say) as it is, with no scheme budget."""
    from eaglequant.api.written import open_written
    from eaglequant.checkpoint.reader import load_json_object
    from eaglequant.formats import format_for_side_files

    config = load_json_object(_model_dir(dst, "dst") / "config.json", "config.json")
    if "quantization_config" not in config and format_for_side_files(dst) is None:
        return QuantizedDraft(dst, dst, STORED, [], None, None)
    from eaglequant.record.report import read_report
    from eaglequant.verification.verify import checkpoint_schemes

    with open_written(dst, None, None) as (checkpoint, head, target):
        schemes, _ = checkpoint_schemes(checkpoint, read_report(dst))
        dequantized: list[str] = []
        served = dst
        if served_as != STORED:
            modules = quantized_modules(checkpoint, head, target, engine)
            dequantized = write_dequantized(checkpoint, head, modules, workdir, dtype)
            served = workdir
    budget = schemes.head_thresholds().max_acceptance_drop
    return QuantizedDraft(dst, served, served_as, dequantized, schemes.describe(), budget)


def write_acceptance(dst: Path, report: AcceptanceReport, label: str) -> Path:
    """Record in ``dst`` what was measured of it (and of its source, the reference), and refresh its card."""
    from eaglequant.publish.card import refresh_card

    mine = [d for d in report.quantized if d.label == label]
    data = report.to_json()
    data["quantized"] = [d.to_json(report.settings.modes) for d in mine]
    data["ok"] = not [p for d in (report.source, *mine) for p in d.problems]
    data["problems"] = [p for d in (report.source, *mine) for p in d.problems]
    path = dst / ACCEPT_NAME
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    partial.replace(path)
    refresh_card(dst)
    return path
