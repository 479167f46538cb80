"""Shared test fixtures: the committed fixture checkpoints, a CLI runner, and the vendor oracles.

The vendor libraries are slow to import (amd-quark ~20 s), so each runs once per test session, in a
subprocess, over every fixture; tests then compare against its outputs.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
FIXTURE_NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file())
SAFETENSORS_FIXTURES = [n for n in FIXTURE_NAMES if not (FIXTURES / n / "pytorch_model.bin").exists()]
NOTHING_TO_QUANTIZE = "nothing would be quantized"
# The layer count conversions name the draft's modules with where a format's rules need it (a native fp8 config is
# matched by exact name in vLLM); fixtures are small, so every conversion passes it where the test allows.
TARGET_LAYERS = 61


@functools.cache
def stores_something(fixture: str, scheme: str, format_name: str) -> bool:
    """Whether ``scheme`` in ``format_name`` quantizes any linear of ``fixture`` (block FP8 needs in-features that are
    multiples of 128, which the small awkward fixtures lack: such a conversion is refused, not written)."""
    from eaglequant import inspect
    from eaglequant.common.errors import InputError

    try:
        inspect(FIXTURES / fixture, scheme=scheme, format=format_name, target_layers=TARGET_LAYERS)
    except InputError as exc:
        if NOTHING_TO_QUANTIZE in str(exc):
            return False
        raise
    return True


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep eaglequant's digest cache out of the user's home (subprocesses inherit the variable)."""
    os.environ["EAGLEQUANT_CACHE_DIR"] = str(tmp_path_factory.mktemp("eaglequant-cache"))


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


def run_cli(*args: str) -> CliResult:
    """Run the CLI in-process (fast); stdout and stderr kept apart."""
    from eaglequant.cli import app

    result = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
    return CliResult(result.exit_code, result.stdout, result.stderr)


def run_cli_subprocess(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m eaglequant`` for real: exit codes, stderr and imports as a user sees them."""
    return subprocess.run(
        [sys.executable, "-m", "eaglequant", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


@pytest.fixture
def cli():
    return run_cli


def vendor_required() -> bool:
    # In CI the vendor libraries are installed on purpose: a missing one must fail, not skip.
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def engine_builds(engine: str, head: Any) -> bool:
    """Whether the engine builds ``head`` as a draft at all (its decision refuses no whole draft), whatever the
    scheme."""
    from eaglequant.engines import ENGINES
    from eaglequant.engines.support import SCHEME_KINDS, draft_refusal
    from eaglequant.formats import FORMATS

    kinds = next(iter(SCHEME_KINDS))
    return draft_refusal(ENGINES[engine], head, FORMATS["compressed-tensors"], kinds) is None


def require_vendor(module: str) -> None:
    try:
        __import__(module)
    except ImportError:
        if vendor_required():
            raise
        pytest.skip(f"{module} is not installed (pip install -e '.[vendors]')")


# Schemes each format is checked against its vendor on, over every fixture.
PARITY_SCHEMES = {
    "quark": ("fp8-per-channel", "mxfp4", "mxfp4-w4a16", "int8"),
    "compressed-tensors": (
        "fp8-per-channel",
        "fp8-block",
        "nvfp4",
        "mxfp4",
        "mxfp4-w4a16",
        "int8",
        "int4-w4a16",
        "int4-w4a16-asym",
    ),
    "modelopt": ("fp8-per-channel", "nvfp4"),
}


# Calibrated W4A4 (static input scales) is checked on one Llama and one MLA head.
CALIBRATED_FIXTURES = ("specforge-llama", "torchspec-mla")


@dataclass(frozen=True)
class ParityCase:
    fixture: str
    format: str
    scheme: str
    calibrated: bool = False

    def __str__(self) -> str:
        return f"{self.fixture}-{self.format}-{self.scheme}{'-calibrated' if self.calibrated else ''}"


def parity_cases(format_name: str) -> list[ParityCase]:
    cases = [
        ParityCase(f, format_name, s)
        for f in FIXTURE_NAMES
        for s in PARITY_SCHEMES[format_name]
        if stores_something(f, s, format_name)
    ]
    if format_name == "modelopt":
        cases += [ParityCase(f, format_name, "nvfp4", calibrated=True) for f in CALIBRATED_FIXTURES]
    return cases


def write_calibration(fixture: str, path: Path, sequences: int = 2, tokens: int = 12) -> Path:
    """Synthetic captured draft inputs for a fixture: seeded, at a realistic hidden-state scale."""
    import torch
    from safetensors.torch import save_file

    config = json.loads((FIXTURES / fixture / "config.json").read_text())
    hidden = config.get("target_hidden_size") or config["hidden_size"]
    generator = torch.Generator().manual_seed(7)
    save_file(
        {
            "hidden_states": torch.randn(sequences, tokens, 3 * hidden, generator=generator) * 4,
            "input_ids": torch.randint(0, config["vocab_size"], (sequences, tokens), generator=generator),
        },
        str(path),
    )
    return path


class CaseOutputs(dict):
    """Vendor output directory per parity case, looked up by the case's name (see ConvertedCases)."""

    def __getitem__(self, case: object) -> Path:
        return super().__getitem__(str(case))

    def __setitem__(self, case: object, path: Path) -> None:
        super().__setitem__(str(case), path)


class ConvertedCases:
    """eaglequant's output for every parity case, converted once per session on first use."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self._results: dict[str, object] = {}

    def __getitem__(self, case: ParityCase):  # -> eaglequant.conversion.pipeline.ConversionResult
        # Keyed by name: pytest may import this module twice (as conftest and tests.conftest).
        key = str(case)
        if key not in self._results:
            from eaglequant import convert

            self._results[key] = convert(
                FIXTURES / case.fixture, self.work / key, scheme=case.scheme, format=case.format
            )
        return self._results[key]


@pytest.fixture(scope="session")
def converted(tmp_path_factory: pytest.TempPathFactory) -> ConvertedCases:
    return ConvertedCases(tmp_path_factory.mktemp("eaglequant"))


@pytest.fixture(scope="session")
def pair_captured(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """A bundled trained pair's (``trained-pair``, ``trained-pair-mla``) 24 held-out prompts, 32 tokens each,
    captured with the target's choices, once a session: enough sequences for the acceptance table's intervals and
    a sequential search's looks (2, 4, 8, 16, 24)."""
    import eaglequant

    captured: dict[str, Path] = {}

    def capture(pair: str) -> Path:
        if pair not in captured:
            path = tmp_path_factory.mktemp(f"{pair}-captured") / "captured.safetensors"
            where = FIXTURES / pair
            eaglequant.capture(where / "target", where / "draft", path, prompts=where / "prompts.jsonl", max_tokens=32)
            captured[pair] = path
        return captured[pair]

    return capture


def safetensors_source(name: str, work: Path) -> Path:
    """The fixture as safetensors (the vendors' file-to-file paths read safetensors only)."""
    src = FIXTURES / name
    if name in SAFETENSORS_FIXTURES:
        return src
    target = work / f"{name}-src"
    if not target.exists():
        _bin_as_safetensors(src, target)
    return target


def excluded_modules(result) -> list[str]:
    """The checkpoint modules eaglequant kept unquantized, as the vendors' exclude lists name them."""
    return sorted(weight.removesuffix(".weight") for weight in result.plan.excluded_linears)


def _misread_norms(result) -> list[str]:
    tensors = result.plan.head.tensors
    names = [t.name.removesuffix(".weight") for t in tensors if t.role.value in ("norm", "embedding")]
    return [n for n in names if not n.endswith("norm")]


def fused_groups_file(vendor_output: Path) -> Path:
    return vendor_output.with_name(f"{vendor_output.name}.fused-groups.safetensors")


def run_vendor(script: str, jobs: object, work: Path, timeout: int = 1500) -> None:
    (work / "jobs.json").write_text(json.dumps(jobs))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "vendor" / script), str(work / "jobs.json")],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{script} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")


@pytest.fixture(scope="session")
def quark_outputs(tmp_path_factory: pytest.TempPathFactory, converted: ConvertedCases) -> CaseOutputs:
    """amd-quark's own file-to-file output for every quark parity case (one subprocess, one import)."""
    require_vendor("quark")
    work = tmp_path_factory.mktemp("quark")
    algorithms = {
        "fp8-per-channel": "ptpc_fp8",
        "mxfp4": "mxfp4",
        "mxfp4-w4a16": "mxfp4_weight_only",
        "int8": "int8_per_channel_dynamic_token",  # a QConfig of Quark's own specs (tests/vendor/run_quark.py)
    }
    jobs, outputs = [], CaseOutputs()
    for case in parity_cases("quark"):
        outputs[case] = work / str(case)
        jobs.append(
            {
                "src": str(safetensors_source(case.fixture, work)),
                "dst": str(outputs[case]),
                "scheme": algorithms[case.scheme],
                "exclude": excluded_modules(converted[case]),
            }
        )
    run_vendor("run_quark.py", jobs, work)
    return outputs


# The integer schemes are also run by llm-compressor on synthetic edge tensors (zero rows and groups, constant,
# all-negative and all-positive groups, grid values, ties after scaling, tiny and large rows) in each source dtype.
INT_EDGE_PRESETS = {"int8": "W8A8", "int4-w4a16": "W4A16", "int4-w4a16-asym": "W4A16_ASYM"}
INT_EDGE_DTYPES = ("bfloat16", "float16", "float32")


def int_edge_tensors(dtype_name: str) -> dict[str, Any]:
    """Edge weights (128-multiple in-features, 8-multiple out-features), seeded, in ``dtype_name``."""
    import torch

    dtype = getattr(torch, dtype_name)
    generator = torch.Generator().manual_seed(11)
    w = torch.randn(16, 256, generator=generator)
    w[0] = 0
    w[1, :128] = 0
    w[2, :128], w[2, 128:] = 5.0, 0.0  # a constant group, a zero group
    w[3] = torch.arange(256) - 128.0  # halves after scaling
    w[4, :128] = torch.linspace(-1, 1, 128)
    w[5] *= 1e-30 if dtype == torch.float32 else 1e-6
    w[6] *= 1e4
    w[7, :128], w[7, 128:] = -3.0, torch.rand(128, generator=generator)  # all negative, all positive
    w[8] = torch.randint(-8, 8, (256,), generator=generator).float() * 0.5
    w[9] = 1e-40 if dtype == torch.float32 else 0.0
    return {
        "model.layers.0.mlp.down_proj.weight": w.to(dtype),
        "model.layers.0.mlp.up_proj.weight": torch.randn(24, 128, generator=generator).to(dtype),
    }


def _write_int_edges(work: Path, dtype_name: str) -> Path:
    from safetensors.torch import save_file

    src = work / f"int-edges-{dtype_name}-src"
    src.mkdir()
    save_file(int_edge_tensors(dtype_name), str(src / "model.safetensors"))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": dtype_name}
    (src / "config.json").write_text(json.dumps(config))
    return src


@pytest.fixture(scope="session")
def llmcompressor_outputs(tmp_path_factory: pytest.TempPathFactory, converted: ConvertedCases) -> CaseOutputs:
    """llm-compressor's ``model_free_ptq`` output for every compressed-tensors parity case, plus
    compressed-tensors' own NVFP4 math for MLA q_a + kv_a (:func:`fused_groups_file`), a fused group
    vLLM builds but model_free_ptq does not know."""
    require_vendor("llmcompressor")
    work = tmp_path_factory.mktemp("llmcompressor")
    jobs: dict[str, list[dict[str, object]]] = {"checkpoints": [], "groups": []}
    outputs = CaseOutputs()
    for case in parity_cases("compressed-tensors"):
        result = converted[case]
        outputs[case] = work / str(case)
        src = safetensors_source(case.fixture, work)
        jobs["checkpoints"].append(
            {
                "src": str(src),
                "dst": str(outputs[case]),
                "scheme": result.plan.format.algorithm(result.plan.scheme),
                # model_free_ptq takes any "*.weight" not ending in "norm" for a linear: it would
                # quantize embed_tokens and fail on the 1-D EAGLE-3.1 fc_norm.{i}; ignore those too.
                "ignore": excluded_modules(result) + _misread_norms(result),
            }
        )
        for group in result.plan.head.fused_groups:
            if case.scheme == "nvfp4" and group.module_type == "fused_qkv_a_proj":
                weights = [result.plan.head.linear(m).weight for m in group.members]
                jobs["groups"].append(
                    {
                        "src": str(src / "model.safetensors"),
                        "dst": str(fused_groups_file(outputs[case])),
                        "weights": weights,
                    }
                )
    for dtype_name in INT_EDGE_DTYPES:
        src = _write_int_edges(work, dtype_name)
        for scheme, preset in INT_EDGE_PRESETS.items():
            outputs[f"int-edges-{dtype_name}-{scheme}"] = work / f"int-edges-{dtype_name}-{scheme}"
            jobs["checkpoints"].append(
                {
                    "src": str(src),
                    "dst": str(outputs[f"int-edges-{dtype_name}-{scheme}"]),
                    "scheme": preset,
                    "ignore": [],
                }
            )
    run_vendor("run_llmcompressor.py", jobs, work)
    return outputs


@pytest.fixture(scope="session")
def modelopt_outputs(tmp_path_factory: pytest.TempPathFactory, converted: ConvertedCases) -> CaseOutputs:
    """ModelOpt's own export of every linear eaglequant quantized, per modelopt parity case, with the
    fused groups eaglequant used (ModelOpt shares the amax of linears that read one input)."""
    require_vendor("modelopt")
    work = tmp_path_factory.mktemp("modelopt")
    jobs, outputs = [], CaseOutputs()
    for case in parity_cases("modelopt"):
        plan = converted[case].plan
        outputs[case] = work / f"{case}.safetensors"
        groups = list(dict.fromkeys(plan.scale_group(lin.module) for lin in plan.quantized))
        jobs.append(
            {
                "src": str(safetensors_source(case.fixture, work)),
                "dst": str(outputs[case]),
                "algo": plan.format.algorithm(plan.scheme),
                "groups": [[plan.head.linear(m).weight for m in group] for group in groups],
                "input_amax": {plan.head.linear(m).weight: amax for m, amax in plan.input_amax.items()},
            }
        )
    run_vendor("run_modelopt.py", jobs, work)
    return outputs


def _bin_as_safetensors(src: Path, dst: Path) -> Path:
    """Quark's file-to-file path reads safetensors only; give it the same tensors in that container."""
    import shutil

    import torch
    from safetensors.torch import save_file

    dst.mkdir(parents=True)
    state = torch.load(src / "pytorch_model.bin", weights_only=True)
    save_file({k: v.contiguous() for k, v in state.items()}, dst / "model.safetensors")
    shutil.copy(src / "config.json", dst / "config.json")
    return dst


# Patches each engine-load probe applied (tests/engine_load/test_engine_load.py), listed at the end of the run.
ENGINE_PATCHES: dict[str, list[str]] = {}


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for engine, patches in ENGINE_PATCHES.items():
        terminalreporter.write_line(f"{engine} engine-load probe patched, for CPU only:")
        for patch in patches:
            terminalreporter.write_line(f"  - {patch}")
