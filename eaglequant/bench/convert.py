"""``eaglequant bench convert``: time ``convert`` on full-size synthetic heads next to baselines measured in the
same run: the copy floor (``cp -r`` + ``sync``, timed before and after each head's other runs), a safetensors
read-all/write-all round trip, and, when they are installed, amd-quark's file-to-file quantizer and llm-compressor's
``model_free_ptq`` on the nearest scheme.

Every run is a separate process, timed by wall clock, with its peak RSS from ``wait4`` (started from a small
launcher, so the benchmark's own memory is not counted). Outputs are deleted and
the disk synced between runs, outside the timings, so one run's dirty pages do not slow the next. The source is
read again before every run, so every run finds it in the page cache (the figures are for a warm cache).
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eaglequant.bench.heads import FULL_SIZE_HEADS, cached_head
from eaglequant.common.json_fields import JsonRecord

# Our scheme -> (vendor, the vendor's nearest scheme). Quark's names are its LLMTemplate schemes;
# llm-compressor's are its preset schemes.
ANCHORS: dict[str, list[tuple[str, str]]] = {
    "fp8-per-channel": [("amd-quark", "ptpc_fp8"), ("llm-compressor", "FP8_DYNAMIC")],
    "fp8-block": [("llm-compressor", "FP8_BLOCK")],
    "mxfp4": [("amd-quark", "mxfp4")],
    "mxfp4-w4a16": [("amd-quark", "mxfp4_weight_only"), ("llm-compressor", "MXFP4A16")],
    "nvfp4": [("llm-compressor", "NVFP4A16")],
}
VENDOR_MODULES = {"amd-quark": "quark", "llm-compressor": "llmcompressor"}
VENDOR_DISTRIBUTIONS = {"amd-quark": "amd-quark", "llm-compressor": "llmcompressor"}  # as pip names them
DST = "{dst}"  # placeholder for the output directory in a command

# Runs one command and reports its wall time and peak RSS. A child forked from a large process inherits that
# process's peak RSS in its own figure (Linux records the old mm's high-water mark at exec), so every command
# is started from this small launcher, never from the benchmark's own process.
_LAUNCHER = """
import json, os, subprocess, sys, time
started = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(proc.pid, 0)
wall = time.perf_counter() - started
proc.returncode = os.waitstatus_to_exitcode(status)
print(json.dumps({"wall_s": wall, "maxrss_kib": usage.ru_maxrss, "exit": proc.returncode}))
"""
_ROUND_TRIP = """
import os, sys
from safetensors.torch import load_file, save_file
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst)
for name in sorted(os.listdir(src)):
    if name.endswith(".safetensors"):
        save_file(load_file(os.path.join(src, name)), os.path.join(dst, name), metadata={"format": "pt"})
os.sync()
"""
_QUARK = """
import os, sys
from quark.torch import LLMTemplate, ModelQuantizer
src, dst, scheme = sys.argv[1:4]
config = LLMTemplate.get("llama").get_config(scheme=scheme, exclude_layers=sys.argv[4:])
ModelQuantizer(config).direct_quantize_checkpoint(src, dst, device="cpu")
os.sync()
"""
_LLMCOMPRESSOR = """
import os, sys
from llmcompressor import model_free_ptq
src, dst, scheme = sys.argv[1:4]
model_free_ptq(model_stub=src, save_directory=dst, scheme=scheme, ignore=sys.argv[4:], max_workers=1, device="cpu")
os.sync()
"""


@dataclass
class Run(JsonRecord):
    head: str
    kind: str  # "copy" | "round-trip" | "eaglequant" | "amd-quark" | "llm-compressor"
    scheme: str  # ours, or the vendor's name
    wall_s: float | None = None
    input_mb_per_s: float | None = None
    peak_rss_bytes: int | None = None
    output_bytes: int | None = None
    vs_copy: float | None = None
    vs_anchors: dict[str, float] = field(default_factory=dict)  # "amd-quark ptpc_fp8" -> our time / theirs
    error: str | None = None


@dataclass(frozen=True)
class Machine(JsonRecord):
    """Where the timings were taken."""

    cpu: str
    cores: int | None
    memory_bytes: int
    python: str
    torch: str
    gpu: str | None
    vendors: dict[str, str | None]  # vendor -> its installed version


@dataclass(frozen=True)
class ConvertBench(JsonRecord):
    """``bench convert``: every run on every head, and the machine they ran on."""

    machine: Machine
    workers: int | None
    device: str
    runs: tuple[Run, ...]


def bench_convert(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """:func:`measure_convert`'s figures as ``bench convert --json`` prints them."""
    return measure_convert(*args, **kwargs).to_json()


def measure_convert(
    cache_dir: Path,
    work_dir: Path,
    heads: tuple[str, ...] = FULL_SIZE_HEADS,
    schemes: tuple[str, ...] | None = None,
    anchors: bool | None = None,
    workers: int | None = None,
    log: Any = None,
    device: str = "cpu",
    verify: bool = True,
) -> ConvertBench:
    """Time every run on every head; ``log(line)`` is told what runs next. ``anchors``: also time the vendor
    tools (default: yes, unless the only head is the tiny one, a quick check the vendors' start-up would swamp).
    ``verify``: also time ``verify`` of the first scheme's output and ``convert --verify`` of it (their peak RSS
    is the verification's)."""
    from eaglequant.schemes import builtin_scheme_names

    if anchors is None:
        anchors = any(head != "tiny" for head in heads)
    say = log or (lambda _line: None)
    chosen = schemes or tuple(builtin_scheme_names())
    work_dir.mkdir(parents=True, exist_ok=True)
    runs: list[Run] = []
    for head in heads:
        say(f"{head}: the head in {cache_dir} (generated on first use)")
        src = cached_head(head, cache_dir)
        source_bytes = sum(p.stat().st_size for p in src.iterdir())
        copy = ["sh", "-c", 'cp -r "$0" "$1" && sync', str(src), DST]
        round_trip = [sys.executable, "-c", _ROUND_TRIP, str(src), DST]
        head_runs = [
            _timed(head, "copy", "cp -r + sync", copy, work_dir, say, warm=src),
            _timed(head, "round-trip", "load_file + save_file", round_trip, work_dir, say, warm=src),
        ]
        options = ["--device", device] + (["--workers", str(workers)] if workers else [])
        for scheme in chosen:
            fmt = default_format(scheme)
            command = [
                sys.executable,
                "-m",
                "eaglequant",
                "convert",
                str(src),
                DST,
                "--scheme",
                scheme,
                "--format",
                fmt,
            ]
            timed_verify = verify and scheme == chosen[0]
            converted = _timed(
                head, "eaglequant", f"{scheme} ({fmt})", command + options, work_dir, say, keep=timed_verify, warm=src
            )
            head_runs.append(converted)
            if timed_verify:
                label = f"verify of {scheme} ({fmt})"
                verify_command = [sys.executable, "-m", "eaglequant", "verify", DST]
                kept = None if converted.error else _output_dir(work_dir, head, "eaglequant", f"{scheme} ({fmt})")
                head_runs.append(_timed(head, "eaglequant", label, verify_command, work_dir, say, dst=kept, warm=src))
                label = f"{scheme} ({fmt}) --verify"
                verified = [*command, *options, "--verify"]
                head_runs.append(_timed(head, "eaglequant", label, verified, work_dir, say, warm=src))
            if anchors:
                for vendor, name in ANCHORS.get(scheme, []):
                    head_runs.append(_anchor(head, src, scheme, vendor, name, work_dir, say))
        head_runs.append(_timed(head, "copy", "cp -r + sync, again", copy, work_dir, say, warm=src))
        _ratios(head_runs, source_bytes)
        runs += head_runs
    return ConvertBench(describe_machine(), workers, device, tuple(runs))


def default_format(scheme: str) -> str:
    """The first registered format that stores ``scheme`` (quark for FP8 and MXFP4, modelopt for NVFP4)."""
    from eaglequant.formats import FORMATS
    from eaglequant.schemes import load_scheme

    loaded = load_scheme(scheme)
    return next(name for name, fmt in FORMATS.items() if fmt.supports(loaded))


def _anchor(head: str, src: Path, scheme: str, vendor: str, name: str, work: Path, say: Any) -> Run:
    if importlib.util.find_spec(VENDOR_MODULES[vendor]) is None:
        return Run(head, vendor, name, error="not installed")
    from eaglequant.common.draft_tokens import DEFAULT_DRAFT_TOKENS
    from eaglequant.conversion.inspection import inspect_source
    from eaglequant.conversion.options import ConversionOptions

    options = ConversionOptions(scheme=scheme, format=default_format(scheme))
    plan = inspect_source(src, options, DEFAULT_DRAFT_TOKENS).plan
    excluded = sorted(w.removesuffix(".weight") for w in plan.excluded_linears)
    if vendor == "amd-quark":
        command = [sys.executable, "-c", _QUARK, str(src), DST, name, *excluded]
    else:  # model_free_ptq takes every 2-D "*.weight" for a linear: the embedding must be named too
        embeddings = [t.name.removesuffix(".weight") for t in plan.head.tensors if t.role.value == "embedding"]
        command = [sys.executable, "-c", _LLMCOMPRESSOR, str(src), DST, name, *excluded, *embeddings]
    return _timed(head, vendor, name, command, work, say, warm=src)


def _timed(
    head: str,
    kind: str,
    scheme: str,
    command: list[str],
    work: Path,
    say: Any,
    keep: bool = False,
    dst: Path | None = None,
    warm: Path | None = None,
) -> Run:
    """Run ``command`` with a fresh output directory (:func:`_output_dir`) in place of its :data:`DST` argument,
    deleted afterwards unless ``keep`` and the run succeeded. ``dst``: a directory the command reads (kept by an
    earlier run), deleted afterwards. ``warm``: a directory read first, outside the timing, so that the run finds it
    cached."""
    reads = dst is not None
    if dst is None:
        dst = _output_dir(work, head, kind, scheme)
        _remove(dst)
    else:
        os.sync()  # the earlier run's dirty pages are not this run's work
    command = [str(dst) if part == DST else part for part in command]
    if warm is not None:  # the runs before (a round trip holds 6 GB, a copy writes as much) may have evicted it
        _warm(warm)
    say(f"{head}: {kind} {scheme}")
    proc = subprocess.run([sys.executable, "-c", _LAUNCHER, *command], capture_output=True, text=True)
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    run = Run(head, kind, scheme, wall_s=round(figures["wall_s"], 3), peak_rss_bytes=figures["maxrss_kib"] * 1024)
    if figures["exit"] != 0:
        last = proc.stderr.strip().splitlines()
        run.error = f"exit {figures['exit']}: {last[-1] if last else ''}"[:300]
    elif dst.exists() and not reads:
        run.output_bytes = sum(p.stat().st_size for p in dst.rglob("*") if p.is_file())
    if not (keep and run.error is None):
        _remove(dst)
    return run


def _output_dir(work: Path, head: str, kind: str, scheme: str) -> Path:
    """Where a run of ``kind`` and ``scheme`` on ``head`` writes its output, under ``work``."""
    return work / "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{head}-{kind}-{scheme}")


def _ratios(runs: list[Run], source_bytes: int) -> None:
    """Ratios to the copy floor, the mean of the copies timed first and last (the disk's speed drifts over a run:
    one copy could be timed in a fast or a slow moment of it), and to the vendors' runs."""
    copies = [r.wall_s for r in runs if r.kind == "copy" and r.wall_s and not r.error]
    floor = sum(copies) / len(copies) if copies else None
    anchors = [r for r in runs if r.kind in VENDOR_MODULES and r.wall_s and not r.error]
    for run in runs:
        if not run.wall_s or run.error:
            continue
        run.input_mb_per_s = round(source_bytes / run.wall_s / 1e6, 1)
        if floor:
            run.vs_copy = round(run.wall_s / floor, 2)
        if run.kind == "eaglequant" and "verify" not in run.scheme:
            scheme = run.scheme.split(" ")[0]
            for vendor, name in ANCHORS.get(scheme, []):
                anchor = next((a for a in anchors if a.kind == vendor and a.scheme == name), None)
                if anchor is not None and anchor.wall_s:
                    run.vs_anchors[f"{vendor} {name}"] = round(run.wall_s / anchor.wall_s, 3)


def _warm(src: Path) -> None:
    """Read every file once so that each run starts from the same (warm) page cache."""
    for path in src.iterdir():
        with path.open("rb") as handle:
            while handle.read(64 * 1024 * 1024):
                pass


def _remove(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)
    for stale in path.parent.glob(f".{path.name}.eaglequant-tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    os.sync()


def machine() -> dict[str, Any]:
    """:func:`describe_machine` as the JSON records it."""
    return describe_machine().to_json()


def describe_machine() -> Machine:
    import torch

    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            cpu = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), cpu)
    except OSError:
        pass
    return Machine(
        cpu=cpu,
        cores=os.cpu_count(),
        memory_bytes=memory,
        python=platform.python_version(),
        torch=torch.__version__,
        gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        vendors={vendor: _version(dist) for vendor, dist in VENDOR_DISTRIBUTIONS.items()},
    )


def _version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None
