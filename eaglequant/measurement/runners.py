"""``accept``: the acceptance length of quantized drafts against their source, served by the engine.

Where the engine runs is one typed choice, :data:`Where`, and each choice is its own runner:

- :class:`Offline`: one process of the engine's interpreter per run (``LLM(...)``);
- :class:`Launched`: the engine's OpenAI-compatible server, started per run, measured through ``/metrics``;
- :class:`Servers`: running servers, the source draft's first, then each DST's, with a reference serving the
  target alone; the target is read from them;
- :class:`OneServer`: one running server and no DST: its own acceptance, over the prompts or over a window of its
  live traffic (``one_server.py``).

:func:`where_of` builds it from the API's and the CLI's options (one clear line for a combination that cannot run);
:func:`accept` runs it.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eaglequant.common.draft_tokens import (
    DraftTokens,
    Schedule,
    ScheduleSpec,
    each_draft_tokens,
    each_schedule_range,
    schedule_text,
    whole_number,
)
from eaglequant.common.errors import InputError, Param, given, placeholder, suggested, words
from eaglequant.common.findings import Finding
from eaglequant.common.progress import NoSteps, Steps, Tally
from eaglequant.engines import MEASURING_ENGINES
from eaglequant.measurement.engine_limits import check_cpu_build_serves
from eaglequant.measurement.measure import (
    SERVER,
    AcceptanceReport,
    EngineRun,
    QuantizedDraft,
    Runner,
    Settings,
    measure,
    modes_for,
    offline_runner,
)
from eaglequant.measurement.one_server import ServerAcceptance, measure_one_server
from eaglequant.measurement.prompts import bundled_prompts_note, read_prompts
from eaglequant.measurement.served import DEQUANTIZED, SERVED_AS, STORED, quantized_modules, write_dequantized


@dataclass(frozen=True)
class Offline:
    """The engine started by eaglequant in its interpreter (``engine_python``; default: found as ``accept`` finds
    it), one process per run; each quantized draft served as ``served_as`` says; ``engine_args`` passed to it."""

    engine: str = "vllm"
    engine_python: str | Path | None = None
    served_as: str = DEQUANTIZED
    engine_args: Mapping[str, Any] = field(default_factory=dict)

    def interpreter(self) -> Path:
        """The engine's interpreter: ``engine_python``, else found as :func:`~eaglequant.engine_load.engine_python`
        finds it."""
        from eaglequant.engine_load import engine_python as find_engine_python

        return find_engine_python(self.engine, self.engine_python)

    def runner(self, settings: Settings, progress: Callable[[str], None], tally: Tally) -> Runner:
        """One run a step: the engine runs the prompts in its own process."""
        run = offline_runner(self.interpreter(), settings)

        def counted(place: int, draft: Path | None, label: str) -> EngineRun:
            done = run(place, draft, label)
            tally.finished(f"run {tally.done + 1}/{tally.total} ({label})")
            return done

        return counted

    def steps(self, settings: Settings, dsts: int) -> int:
        """The steps progress counts: one a run (the target alone, the source draft and each DST at each k and the
        schedule, then the target alone again)."""
        return settings.target_alone_runs + (1 + dsts) * settings.runs_a_draft


@dataclass(frozen=True)
class Launched(Offline):
    """The engine's OpenAI-compatible server, started by eaglequant once per run and measured through ``/metrics``."""

    port: int | None = None  # where each launched server listens (None: a free port)

    def runner(self, settings: Settings, progress: Callable[[str], None], tally: Tally) -> Runner:
        from eaglequant.measurement.launch import launch_runner

        return launch_runner(
            self.interpreter(),
            settings,
            log=progress,
            port=self.port,
            prompt_done=lambda what, label: tally.finished(f"{what} ({label})"),
        )

    def steps(self, settings: Settings, dsts: int) -> int:
        """The steps progress counts: one a prompt in every mode of every run (the target alone: greedy only)."""
        return _prompt_steps(settings, dsts)


@dataclass(frozen=True)
class Servers:
    """Running servers (URLs): ``drafts`` the source draft's first, then each DST's in order; ``reference`` serves
    the target alone (the greedy reference)."""

    drafts: tuple[str, ...]
    reference: str

    def runner(self, settings: Settings, progress: Callable[[str], None], tally: Tally) -> Runner:
        """The reference (the target alone), the source draft's, then each DST's, in that order."""
        from eaglequant.measurement.server import Server, measure_on_server

        urls = [self.reference, *self.drafts]
        labels = ["the reference server (the target alone)", "the source draft's server"]
        labels += [f"the server of DST {i}" for i in range(1, len(self.drafts))]
        return lambda place, draft, _label: measure_on_server(
            Server(urls[place], labels[place]),
            settings,
            draft is not None,
            lambda what: tally.finished(f"{what} ({labels[place]})"),
        )

    def steps(self, settings: Settings, dsts: int) -> int:
        """One a prompt in every mode of every run, as :meth:`Launched.steps`."""
        return _prompt_steps(settings, dsts)


@dataclass(frozen=True)
class OneServer:
    """One running server (a URL) and no DST: its acceptance over the prompts, or, ``window_s`` given, over that
    many seconds of its live traffic (eaglequant sends nothing)."""

    url: str
    window_s: float | None = None


Where = Offline | Launched | Servers | OneServer


def _prompt_steps(settings: Settings, dsts: int) -> int:
    drafted = (1 + dsts) * len(settings.modes) * len(settings.each_draft_tokens)
    return len(settings.prompts) * (settings.target_alone_runs + drafted)


def check_settings(
    engine: str, served_as: str, temperatures: Sequence[float], draft_tokens: DraftTokens, max_tokens: int
) -> None:
    """One clear line for a setting accept cannot run with."""
    if engine not in MEASURING_ENGINES:
        runs = f": accept runs {', '.join(MEASURING_ENGINES)}"
        raise InputError(
            words(given("engine", engine), runs), hint=words("use ", suggested("engine", MEASURING_ENGINES[0]))
        )
    if served_as not in SERVED_AS:
        one_of = f": not one of {', '.join(SERVED_AS)}"
        raise InputError(words(given("served_as", served_as), one_of), hint="use dequantized")
    if any(not math.isfinite(t) or t <= 0 for t in temperatures):
        raise InputError(
            words(given("temperatures", list(temperatures)), ": each must be a finite number above 0"),
            hint="greedy always runs; give the sampled temperatures beside it, e.g. 1.0",
        )
    each_draft_tokens(draft_tokens)
    if max_tokens < 1:
        raise InputError(
            words(given("max_tokens", max_tokens), ": must be at least 1"),
            hint=words("e.g. ", suggested("max_tokens", 96)),
        )


def where_of(
    *,
    engine: str,
    engine_python: str | Path | None,
    served_as: str,
    arguments: Mapping[str, Any],
    server: str | Sequence[str],
    reference_server: str | None,
    launch: bool,
    dsts: int,
    window_s: float | None = None,
    port: int | None = None,
) -> Where:
    """Running servers (one with no DST: :class:`OneServer`), launched ones, or the offline engine: one, with what
    it needs (``arguments``: the engine arguments parsed, :func:`~eaglequant.measurement.engine_args.engine_arguments`;
    ``window_s``: one server's live traffic read for that long; ``port``: where a launched server listens)."""
    servers = [server] if isinstance(server, str) else list(server)
    if window_s is not None and not (servers and dsts == 0):
        raise InputError(
            words(Param("window"), " reads one running server's live traffic: give one ", Param("server"),
                  " and no DST"),
        )  # fmt: skip
    if port is not None and not launch:
        raise InputError(words(Param("port"), " is where a launched server listens: give ", Param("launch"), " too"))
    if not servers:
        if reference_server is not None:
            raise InputError(
                words(Param("reference_server"), " is for running servers: give ", Param("server"), " too")
            )
        if launch:
            return Launched(engine, engine_python, served_as, arguments, _free(port) if port is not None else None)
        return Offline(engine, engine_python, served_as, arguments)
    if launch:
        raise InputError(words(Param("launch"), " starts its own servers: leave out ", Param("server")))
    for url in (*servers, reference_server):
        if url is not None and not url.startswith(("http://", "https://")):
            raise InputError(words(given("server", url), ": not an http:// URL"), hint="e.g. http://127.0.0.1:8000")
    if arguments:
        raise InputError(
            words("engine arguments (", ", ".join(arguments), ") start an engine; running servers have their own"),
            hint=words("leave them out with ", Param("server"), ", or ", Param("launch"), " the servers"),
        )
    if dsts == 0:
        return _one_server(servers, reference_server, window_s)
    if len(servers) != dsts + 1:
        raise InputError(
            words(f"{len(servers)} ", Param("server"), f" for {dsts} DST: one for the source draft, then one per DST"),
            hint="give the source draft's server first, then each DST's in the order of the DSTs",
        )
    if reference_server is None:
        raise InputError(
            words(Param("reference_server"), " is needed with ", Param("server"),
                  ": the target served alone, whose greedy output each draft must reproduce"),
            hint="serve the same target without --speculative-config and give its URL",
        )  # fmt: skip
    return Servers(tuple(servers), reference_server)


def _one_server(servers: list[str], reference_server: str | None, window_s: float | None) -> OneServer:
    if len(servers) != 1:
        raise InputError(
            words(f"{len(servers)} ", Param("server"), " and no DST: one server is measured on its own"),
            hint="give one server, or the DSTs the servers serve (the source draft's server first)",
        )
    if reference_server is not None:
        raise InputError(
            words(Param("reference_server"), " is for comparing DSTs: leave it out to measure one server"),
        )
    if window_s is not None and not (math.isfinite(window_s) and window_s > 0):
        raise InputError(words(given("window", window_s), ": must be a number of seconds above 0"), hint="e.g. 60")
    return OneServer(servers[0], window_s)


def _free(port: int) -> int:
    """``port`` if nothing listens on it at 127.0.0.1 (checked now, so a taken port is one line, not a failed
    launch)."""
    import socket

    from eaglequant.common.local_server import HOST

    if not 1 <= port <= 65535:
        raise InputError(words(given("port", port), ": not a TCP port (1 to 65535)"))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((HOST, port))
        except OSError as error:
            raise InputError(
                words(given("port", port), f": taken on {HOST} ({error.strerror or error})"),
                hint=words("give a free port, or leave out ", Param("port"), " for one eaglequant picks"),
            ) from None
    return port


def accept_one_server(
    where: OneServer,
    *,
    prompts: str | Path | None,
    max_prompts: int | None,
    draft_tokens: DraftTokens,
    max_tokens: int,
    temperatures: Sequence[float],
    seed: int,
    steps: Steps | None = None,
    sleep: Callable[[float], None] | None = None,
) -> ServerAcceptance:
    """The one server ``where`` names measured on its own (see :mod:`eaglequant.measurement.one_server`)."""
    import time

    draft_tokens = _one_k(draft_tokens, "a running server")
    shown = steps or NoSteps()
    settings = None
    if where.window_s is None:
        prompt_list, prompts_from = _enough_prompts(prompts, max_prompts)
        target = Path(_server_model(where.url))
        settings = Settings(
            target, tuple(prompt_list), prompts_from, draft_tokens, max_tokens, modes_for(temperatures, seed), seed=seed
        )
    total = 1 if settings is None else len(settings.prompts) * len(settings.modes)
    try:
        report = measure_one_server(where.url, where.window_s, settings, Tally(shown, total), sleep or time.sleep)
    finally:
        shown.stop()
    if settings is not None and prompts is None and (bundled := bundled_prompts_note(settings.target)):
        report.notes.append(Finding("bundled-prompts", str(settings.target), bundled))
    return report


def _one_k(draft_tokens: DraftTokens, where: str) -> int:
    """The one k ``where`` drafts with: a running server was started with its own, so several are refused."""
    ks = each_draft_tokens(draft_tokens)
    if len(ks) > 1:
        raise InputError(
            words(given("draft_tokens", draft_tokens), f": {where} drafts the one k it was started with"),
            hint=words("give that k alone, e.g. ", suggested("draft_tokens", ks[0]), ", or measure several with ",
                       Param("launch"), " or offline"),
        )  # fmt: skip
    return ks[0]


def _server_model(url: str) -> str:
    from eaglequant.measurement.server import Server

    return Server(url, "the server").model()


def _enough_prompts(prompts: str | Path | None, max_prompts: int | None) -> tuple[list[str], str]:
    prompt_list, prompts_from = read_prompts(None if prompts is None else Path(prompts), max_prompts)
    if len(prompt_list) < 2:
        raise InputError(
            words(Param("prompts"), f": {len(prompt_list)} prompt; the intervals are over prompts"),
            hint="give at least 2 prompts",
        )
    return prompt_list, prompts_from


def accept(
    dsts: Sequence[str | Path],
    where: Where,
    *,
    target: str | Path | None,
    source: str | Path | None,
    prompts: str | Path | None,
    max_prompts: int | None,
    draft_tokens: DraftTokens,
    max_tokens: int,
    temperatures: Sequence[float],
    dtype: str,
    seed: int,
    progress: Callable[[str], None],
    steps: Steps | None = None,
    target_alone_runs: int = 2,
    concurrency: Concurrency = (),
    schedule: ScheduleSpec | None = None,
) -> AcceptanceReport:
    """Serve the target with the source draft and with each quantized draft in ``dsts`` where ``where`` says, and
    measure each one's acceptance (see :func:`eaglequant.api.acceptance.accept` for each setting); ``steps`` is
    told of each prompt answered (each run, offline), with the whole command's count for an ETA."""
    _check_alone_runs(target_alone_runs)
    each_c = each_concurrency(concurrency)
    planned = _checked_schedule(schedule, where, each_c, dsts)
    if isinstance(where, OneServer):
        raise InputError("one server and no DST is measured on its own (accept_one_server), not against a source draft")
    if not dsts:
        raise InputError(
            "no quantized draft to measure",
            hint=words("give at least one DST, or one ", placeholder("server", "URL"), " to measure that server"),
        )
    on_servers = isinstance(where, Servers)
    ks = (_one_k(draft_tokens, "each running server"),) if on_servers else each_draft_tokens(draft_tokens)
    prompt_list, prompts_from = _enough_prompts(prompts, max_prompts)
    destinations = [_model_dir(d, "dsts") for d in dsts]
    source_path = _model_dir(source, "source") if source is not None else _recorded_source(destinations)
    target_path = _served_target(where) if isinstance(where, Servers) else _model_dir(_given_target(target), "target")
    settings = Settings(
        target_path,
        tuple(prompt_list),
        prompts_from,
        ks[0],
        max_tokens,
        modes_for(temperatures, seed),
        dtype,
        seed,
        dict(where.engine_args) if isinstance(where, Offline) else {},
        ks[1:],
        target_alone_runs,
        each_c,
        planned,
    )
    if isinstance(where, Offline):  # and Launched: what the engine release is known to refuse, before it loads
        check_cpu_build_serves(where.interpreter(), target_path, [source_path, *destinations])
    with tempfile.TemporaryDirectory(prefix="eaglequant-served-") as tmp:
        drafts = _drafts_to_serve(where, destinations, dtype, Path(tmp), source_path)
        shown = steps or NoSteps()
        tally = Tally(shown, where.steps(settings, len(drafts)))
        one_k = settings.at(settings.draft_tokens)
        per_run = where.steps(one_k, 1) - where.steps(one_k, 0)
        try:
            report = measure(
                settings,
                source_path,
                drafts,
                lambda at: where.runner(at, progress, tally),
                progress,
                measure_same_bytes_once=not on_servers,
                run_skipped=lambda: tally.skipped(per_run),
            )
        finally:
            shown.stop()
    report.device = _device(where)
    _add_notes(report, dtype, where)
    _add_run_notes(report, drafts, given_prompts=prompts is not None)
    return report


def _add_run_notes(report: AcceptanceReport, drafts: Sequence[QuantizedDraft], given_prompts: bool) -> None:
    """What the run chose for the user: a budget a search recorded (``judged-as-searched``), the bundled prompts
    (``bundled-prompts``), one run of the target alone (``target-alone-once``)."""
    target = report.settings.target
    for draft in drafts:
        if draft.budget_from:
            text = f"{draft.path}: acceptance judged against {draft.budget_from}"
            report.notes.append(Finding("judged-as-searched", str(draft.path), text))
    if not given_prompts and (bundled := bundled_prompts_note(target)):
        report.notes.append(Finding("bundled-prompts", str(target), bundled))
    if report.settings.target_alone_runs == 1:
        once = "the target alone was served once: its drift between processes was not checked (give 2 runs or more)"
        report.notes.append(Finding("target-alone-once", str(target), once))


MAX_ALONE_RUNS = 10
Concurrency = str | Sequence[int]  # the command line's "1,2,4", or the numbers


def each_concurrency(concurrency: Concurrency) -> tuple[int, ...]:
    """Each C to measure at, in the order given, from ``1,2,4`` or a sequence: one clear line, naming the value as
    given, for one that is not a whole number from 1 to :data:`~.concurrency.MAX_CONCURRENCY`, or repeated."""
    from eaglequant.measurement.concurrency import MAX_CONCURRENCY

    pieces: Sequence[object] = concurrency.split(",") if isinstance(concurrency, str) else list(concurrency)
    found: list[int] = []
    for piece in pieces:
        c = whole_number(piece)
        if c is None or not 1 <= c <= MAX_CONCURRENCY or c in found:
            why = "is given twice" if c in found else f"is not a whole number from 1 to {MAX_CONCURRENCY}"
            raise InputError(
                words(given("concurrency", concurrency), f": {str(piece).strip() or 'an empty entry'} {why}"),
                hint=words("give the requests in flight, e.g. ", suggested("concurrency", "1,2,4")),
            )
        found.append(c)
    return tuple(found)


SEARCHED = "searched"  # --schedule searched: the one the DSTs' search recorded


def _checked_schedule(
    schedule: ScheduleSpec | None, where: Where, each_c: tuple[int, ...], dsts: Sequence[str | Path]
) -> Schedule:
    """The schedule to serve each draft with once more (none: no such run; :data:`SEARCHED`: the DSTs' search's):
    measured offline, where eaglequant reads the engine's counters over whole passes, and at a concurrency, the only
    place a k for each batch size differs from the k at batch 1."""
    if schedule is None:
        return ()
    planned = _searched_schedule(dsts) if schedule == SEARCHED else each_schedule_range(schedule)
    if not isinstance(where, Offline) or isinstance(where, Launched):
        how = Param("launch") if isinstance(where, Launched) else Param("server")
        raise InputError(
            words(Param("schedule"), " is measured offline, in the engine eaglequant starts: with ", how,
                  " each request's counters are checked against one k"),
            hint=words("leave out ", how, ": offline, eaglequant starts the engine with the schedule itself"),
        )  # fmt: skip
    if not each_c:
        raise InputError(
            words(Param("schedule"), " picks k by the requests in flight, and one prompt at a time is batch size 1"),
            hint=words("give the loads to measure it at, e.g. ", suggested("concurrency", "1,2,4")),
        )
    return planned


def _searched_schedule(dsts: Sequence[str | Path]) -> Schedule:
    """The schedule ``search --objective speedup --concurrency`` recorded in every DST, one for all (a run serves
    every draft with the same schedule)."""
    from eaglequant.record.search import read_search

    found: dict[str, Schedule] = {}
    for dst in dsts:
        record = read_search(_model_dir(dst, "dsts"))
        found[str(dst)] = (
            () if record is None or record.speedup is None else record.speedup.num_speculative_tokens_per_batch_size
        )
    missing = [dst for dst, recorded in found.items() if not recorded]
    if not found:
        return ()  # no DST: refused as such
    if missing or len(set(found.values())) > 1:
        each = "; ".join(f"{dst}: {schedule_text(recorded)}" for dst, recorded in found.items())
        why = (
            f"{', '.join(missing)} records no schedule (search --objective speedup writes one where k changes with "
            "the load)"
            if missing
            else f"the DSTs' searches recorded different schedules ({each})"
        )
        raise InputError(
            words(given("schedule", SEARCHED), f": {why}"),
            hint=words("give the schedule to serve, e.g. ", suggested("schedule", "1-2:3,3-8:1")),
        )
    return each_schedule_range(next(iter(found.values())))


def _check_alone_runs(runs: int) -> None:
    if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= MAX_ALONE_RUNS:
        raise InputError(
            words(given("target_alone_runs", runs), f": not a whole number of runs from 1 to {MAX_ALONE_RUNS}"),
            hint=words("e.g. ", suggested("target_alone_runs", 2), ": before the drafts and after them"),
        )


def _drafts_to_serve(
    where: Offline | Servers, destinations: list[Path], dtype: str, workdir: Path, source: Path
) -> list[QuantizedDraft]:
    """Each DST as the engine is given it (as a running server serves it, else stored or dequantized under
    ``workdir``), judged against what a search recorded where one chose it."""
    if isinstance(where, Servers):
        drafts = [_on_server(dst) for dst in destinations]
    else:
        drafts = [
            _served(dst, where.served_as, dtype, workdir / str(i), where.engine) for i, dst in enumerate(destinations)
        ]
    return [_as_searched(draft, source) for draft in drafts]


def _device(where: Where) -> str | None:
    """ "cpu" where eaglequant ran the engine's CPU build (offline, launched); None on running servers, whose
    hardware eaglequant does not see."""
    from eaglequant.measurement.engine_limits import is_cpu_build

    if isinstance(where, Offline) and is_cpu_build(where.interpreter()):
        return "cpu"
    return None


def _given_target(target: str | Path | None) -> str | Path:
    if target is None:
        raise InputError(
            words(placeholder("target", "TARGET"), " is needed: the model eaglequant serves"),
            hint=words("give ", placeholder("target", "TARGET"), ", or measure running servers with ",
                       placeholder("server", "URL")),
        )  # fmt: skip
    return target


def _add_notes(report: AcceptanceReport, dtype: str, where: Where) -> None:
    """What a reader of the figures should know: where the drafts ran (``running-servers``, about the target's
    server; ``launched-servers``), how they were served (``served-dequantized``), how the engine drafts
    (``draft-sample-method``)."""
    from eaglequant.engines import engine_title

    if isinstance(where, Servers):
        where_run = (
            f"measured on running servers through their /metrics counters: the target alone at {where.reference}, "
            f"the source draft at {where.drafts[0]}, "
            + ", ".join(f"{d.label} at {url}" for d, url in zip(report.quantized, where.drafts[1:], strict=True))
        )
        report.notes.append(Finding("running-servers", where.reference, where_run))
    elif isinstance(where, Launched):
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


def _model_dir(path: str | Path, parameter: str, recorded: bool = False) -> Path:
    chosen = Path(path)
    if not (chosen / "config.json").is_file():
        what = "does not exist" if not chosen.exists() else "has no config.json"
        named = words(placeholder(parameter, str(chosen)), " (recorded)" if recorded else "", f": {what}")
        raise InputError(named, hint="give the model's directory (config.json and weights)")
    return chosen


def _as_searched(draft: QuantizedDraft, source: Path) -> QuantizedDraft:
    """``draft`` judged at the k its search chose (the default k without one), and by the budget ``search``
    recorded in it when ``source`` is the one it searched from."""
    from dataclasses import replace

    from eaglequant.record.search import read_search, same_place, searched_judge, served_draft_tokens

    draft = replace(draft, served_draft_tokens=served_draft_tokens(read_search(draft.path)))
    judge = searched_judge(draft.path)
    if judge is None or not same_place(judge.source, source):
        return draft
    return replace(draft, budget=judge.budget, budget_from=judge.text)


def _recorded_source(dsts: list[Path]) -> Path:
    """The source the drafts were judged against: the one ``search`` recorded where every DST has one and it is
    there (the search's budget is then theirs too), else the one each DST's report records it was converted from."""
    from eaglequant.record.report import read_report, recorded_source
    from eaglequant.record.search import searched_judge

    searched = {judge.source for judge in map(searched_judge, dsts) if judge is not None}
    if len(searched) == 1 and all(map(searched_judge, dsts)) and (Path(next(iter(searched))) / "config.json").is_file():
        return Path(searched.pop())
    recorded = {source for source in (recorded_source(read_report(d)) for d in dsts) if source is not None}
    if len(recorded) != 1:
        what = "records no source" if not recorded else f"record different sources ({', '.join(sorted(recorded))})"
        hint = words("pass ", placeholder("source", "SRC"), ", the BF16 draft they were made from")
        raise InputError(f"the quantized drafts {what}", hint=hint)
    return _model_dir(recorded.pop(), "source", recorded=True)


def _served(dst: Path, served_as: str, dtype: str, workdir: Path, engine: str) -> QuantizedDraft:
    """What the engine is given for ``dst``: a quantized draft dequantized (or as stored), a plain head (a pruned
    vocabulary, say) as it is, with no scheme budget."""
    from eaglequant.record.as_recorded import open_written
    from eaglequant.record.report import read_report
    from eaglequant.record.schemes import checkpoint_schemes

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
    from eaglequant.record.as_recorded import open_written
    from eaglequant.record.report import read_report
    from eaglequant.record.schemes import checkpoint_schemes

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


def _served_target(where: Servers) -> Path:
    """The model the servers serve (their /v1/models id), one for all: a paired comparison needs one target."""
    from eaglequant.measurement.server import Server

    models = {url: Server(url, "the server").model() for url in (where.reference, *where.drafts)}
    if len(set(models.values())) != 1:
        served = ", ".join(f"{url}: {model}" for url, model in models.items())
        raise InputError(
            f"the servers serve different models ({served}): the drafts are compared on one target",
            hint="serve the same target everywhere (the same --model, or --served-model-name)",
        )
    return Path(next(iter(models.values())))
