"""``accept``: the acceptance length of quantized drafts against their source, served by the engine."""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from eaglequant.acceptance.engine_args import engine_arguments
from eaglequant.acceptance.measure import (
    ENGINES,
    SERVER,
    AcceptanceReport,
    QuantizedDraft,
    Runner,
    Settings,
    measure,
    modes_for,
    offline_runner,
)
from eaglequant.acceptance.prompts import read_prompts
from eaglequant.acceptance.record import ACCEPT_NAME
from eaglequant.acceptance.served import DEQUANTIZED, SERVED_AS, STORED, quantized_modules, write_dequantized
from eaglequant.common.atomic import write_text_whole
from eaglequant.common.errors import InputError, Param, given, placeholder, suggested, words
from eaglequant.common.findings import Finding

DEFAULT_TEMPERATURES: tuple[float, ...] = ()  # greedy only: vLLM 0.32's CPU build accepts nothing at T > 0


def accept(
    dsts: Sequence[str | Path],
    *,
    target: str | Path | None = None,
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
    tensor_parallel_size: int | None = None,
    engine_args: Mapping[str, Any] | Sequence[str] | None = None,
    server: Sequence[str] = (),
    reference_server: str | None = None,
    launch: bool = False,
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
    "stored" serves DST as written. ``tensor_parallel_size`` and ``engine_args`` (``{"max_model_len": 4096}``,
    or ``["max_model_len=4096"]``) are passed to the engine as it is started. Where it runs:

    - by default, offline: one process of the engine's interpreter per run (``LLM(...)``);
    - ``launch``: the engine's OpenAI-compatible server, started per run, measured through ``/metrics``;
    - ``server``: running servers (URLs), the source draft's first, then each DST's in order, with
      ``reference_server`` serving the target alone (the greedy reference); ``target`` is then read from them.

    ``record``: write ``eaglequant_accept.json`` into each DST and add the figures to its card."""
    arguments = engine_arguments(engine_args, tensor_parallel_size)
    _check_settings(engine, served_as, temperatures, num_speculative_tokens, max_tokens)
    servers = [server] if isinstance(server, str) else list(server)
    _check_where(servers, reference_server, launch, arguments, len(dsts))
    prompt_list, prompts_from = read_prompts(None if prompts is None else Path(prompts), max_prompts)
    if len(prompt_list) < 2:
        raise InputError(
            words(Param("prompts"), f": {len(prompt_list)} prompt; the intervals are over prompts"),
            hint="give at least 2 prompts",
        )
    destinations = [_model_dir(d, "dsts") for d in dsts]
    source_path = _model_dir(source, "source") if source is not None else _recorded_source(destinations)
    target_path = _served_target(servers, reference_server) if servers else _model_dir(_given_target(target), "target")
    settings = Settings(
        target_path,
        tuple(prompt_list),
        prompts_from,
        num_speculative_tokens,
        max_tokens,
        modes_for(temperatures, seed),
        dtype,
        seed,
        arguments,
    )
    with tempfile.TemporaryDirectory(prefix="eaglequant-served-") as tmp:
        if servers:
            drafts = [_on_server(dst) for dst in destinations]
            runner = _server_runner(settings, servers, reference_server)
        else:
            drafts = [_served(dst, served_as, dtype, Path(tmp) / str(i), engine) for i, dst in enumerate(destinations)]
            runner = _engine_runner(engine, engine_python, settings, launch, progress)
        report = measure(settings, source_path, drafts, runner, progress, measure_same_bytes_once=not servers)
    _add_notes(report, dtype, servers, reference_server, launch)
    if record:
        for draft in report.quantized:
            write_acceptance(draft.path, report, draft.label)
    return report


def _given_target(target: str | Path | None) -> str | Path:
    if target is None:
        raise InputError(
            words(placeholder("target", "TARGET"), " is needed: the model eaglequant serves"),
            hint=words("give ", placeholder("target", "TARGET"), ", or measure running servers with ",
                       placeholder("server", "URL")),
        )  # fmt: skip
    return target


def _check_where(
    servers: Sequence[str], reference: str | None, launch: bool, arguments: Mapping[str, Any], dsts: int
) -> None:
    """Running servers, launched ones, or the offline engine: one, with what it needs."""
    if not servers:
        if reference is not None:
            raise InputError(
                words(Param("reference_server"), " is for running servers: give ", Param("server"), " too")
            )
        return
    if launch:
        raise InputError(words(Param("launch"), " starts its own servers: leave out ", Param("server")))
    for url in (*servers, reference):
        if url is not None and not url.startswith(("http://", "https://")):
            raise InputError(words(given("server", url), ": not an http:// URL"), hint="e.g. http://127.0.0.1:8000")
    if arguments:
        raise InputError(
            words("engine arguments (", ", ".join(arguments), ") start an engine; running servers have their own"),
            hint=words("leave them out with ", Param("server"), ", or ", Param("launch"), " the servers"),
        )
    if len(servers) != dsts + 1:
        raise InputError(
            words(f"{len(servers)} ", Param("server"), f" for {dsts} DST: one for the source draft, then one per DST"),
            hint="give the source draft's server first, then each DST's in the order of the DSTs",
        )
    if reference is None:
        raise InputError(
            words(Param("reference_server"), " is needed with ", Param("server"),
                  ": the target served alone, whose greedy output each draft must reproduce"),
            hint="serve the same target without --speculative-config and give its URL",
        )  # fmt: skip


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


def _add_notes(
    report: AcceptanceReport, dtype: str, servers: Sequence[str], reference: str | None, launch: bool
) -> None:
    """What a reader of the figures should know: where the drafts ran (``running-servers``, about the target's
    server; ``launched-servers``), how they were served (``served-dequantized``), how the engine drafts
    (``draft-sample-method``)."""
    from eaglequant.engines import engine_title

    if servers:
        where = (
            f"measured on running servers through their /metrics counters: the target alone at {reference}, the "
            f"source draft at {servers[0]}, "
            + ", ".join(f"{d.label} at {url}" for d, url in zip(report.quantized, servers[1:], strict=True))
        )
        report.notes.append(Finding("running-servers", reference or "", where))
    elif launch:
        launched = "measured on vLLM servers eaglequant started, one per run, through their /metrics counters"
        report.notes.append(Finding("launched-servers", "", launched))
    if any(d.served_as == DEQUANTIZED for d in report.quantized):
        dequantized = (
            f"quantized drafts were served as their weights dequantized to {dtype} (exactly what the fused kernels "
            "compute from the stored bytes, then rounded to the serving dtype): the weight-only effect; activation "
            "quantization was not run"
        )
        report.notes.append(Finding("served-dequantized", "", dequantized))
    sample_method = (report.speculative_config or {}).get("draft_sample_method")
    if sample_method:
        sampling = (
            f"{engine_title(report.engine, report.version)} drafts with draft_sample_method={sample_method}: a "
            "drafted token is accepted when the target's own sampling agrees with the draft's choice"
        )
        report.notes.append(Finding("draft-sample-method", "", sampling))


def _engine_runner(
    engine: str, engine_python: str | Path | None, settings: Settings, launch: bool, progress: Callable[[str], None]
) -> Runner:
    """The engine started by eaglequant: offline in its interpreter, or as a server per run (``launch``)."""
    from eaglequant.engine_load import engine_python as find_engine_python

    interpreter = find_engine_python(engine, engine_python)
    if launch:
        from eaglequant.acceptance.launch import launch_runner

        return launch_runner(interpreter, settings, log=progress)
    return offline_runner(interpreter, settings)


def _server_runner(settings: Settings, servers: Sequence[str], reference: str | None) -> Runner:
    """Running servers: the reference (the target alone), the source draft's, then each DST's, in that order."""
    from eaglequant.acceptance.server import Server, measure_on_server

    urls = [str(reference), *servers]
    labels = ["the reference server (the target alone)", "the source draft's server"]
    labels += [f"the server of DST {i}" for i in range(1, len(servers))]
    return lambda place, draft, _label: measure_on_server(
        Server(urls[place], labels[place]), settings, draft is not None
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
    from eaglequant.record.report import read_report
    from eaglequant.verification.verify import checkpoint_schemes

    if not _is_quantized(dst):
        return QuantizedDraft(dst, dst, STORED, [], None, None)
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


def _on_server(dst: Path) -> QuantizedDraft:
    """``dst`` as a running server serves it (eaglequant cannot know how): its scheme and budget, if quantized."""
    from eaglequant.api.written import open_written
    from eaglequant.record.report import read_report
    from eaglequant.verification.verify import checkpoint_schemes

    if not _is_quantized(dst):
        return QuantizedDraft(dst, dst, SERVER, [], None, None)
    with open_written(dst, None, None) as (checkpoint, _head, _target):
        schemes, _ = checkpoint_schemes(checkpoint, read_report(dst))
    return QuantizedDraft(dst, dst, SERVER, [], schemes.describe(), schemes.head_thresholds().max_acceptance_drop)


def _is_quantized(dst: Path) -> bool:
    from eaglequant.checkpoint.reader import load_json_object
    from eaglequant.formats import format_for_side_files

    config = load_json_object(_model_dir(dst, "dst") / "config.json", "config.json")
    return "quantization_config" in config or format_for_side_files(dst) is not None


def _served_target(servers: Sequence[str], reference: str | None) -> Path:
    """The model the servers serve (their /v1/models id), one for all: a paired comparison needs one target."""
    from eaglequant.acceptance.server import Server

    models = {url: Server(url, "the server").model() for url in (str(reference), *servers)}
    if len(set(models.values())) != 1:
        served = ", ".join(f"{url}: {model}" for url, model in models.items())
        raise InputError(
            f"the servers serve different models ({served}): the drafts are compared on one target",
            hint="serve the same target everywhere (the same --model, or --served-model-name)",
        )
    return Path(next(iter(models.values())))


def write_acceptance(dst: Path, report: AcceptanceReport, label: str) -> Path:
    """Record in ``dst`` what was measured of it (and of its source, the reference), and refresh its card."""
    from eaglequant.publish.card import refresh_card

    # the record: the report narrowed to this draft (its ok and problems are then the source's and this draft's)
    recorded = replace(report, quantized=[d for d in report.quantized if d.label == label])
    path = dst / ACCEPT_NAME
    write_text_whole(path, json.dumps(recorded.to_json(), indent=2) + "\n")
    refresh_card(dst)
    return path
