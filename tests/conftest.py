"""Shared test fixtures: the committed fixture checkpoints, a CLI runner, and the vendor oracles.

The vendor libraries are slow to import (amd-quark ~20 s), so each runs once per test session, in a
subprocess, over every fixture; tests then compare against its outputs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
FIXTURE_NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file())
SAFETENSORS_FIXTURES = [n for n in FIXTURE_NAMES if not (FIXTURES / n / "pytorch_model.bin").exists()]


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


def _vendor_required() -> bool:
    # In CI the vendor libraries are installed on purpose: a missing one must fail, not skip.
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_vendor(module: str) -> None:
    try:
        __import__(module)
    except ImportError:
        if _vendor_required():
            raise
        pytest.skip(f"{module} is not installed (pip install -e '.[vendors]')")


@pytest.fixture(scope="session")
def quark_outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """amd-quark's own file-to-file ptpc_fp8 output for every fixture (one subprocess, one import)."""
    require_vendor("quark")
    work = tmp_path_factory.mktemp("quark")
    jobs = []
    for name in FIXTURE_NAMES:
        src = FIXTURES / name
        if name not in SAFETENSORS_FIXTURES:
            src = _bin_as_safetensors(src, work / f"{name}-src")
        jobs.append({"src": str(src), "dst": str(work / name)})
    (work / "jobs.json").write_text(json.dumps(jobs))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "vendor" / "run_quark.py"), str(work / "jobs.json")],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"amd-quark failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return {name: work / name for name in FIXTURE_NAMES}


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
