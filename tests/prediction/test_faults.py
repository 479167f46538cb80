"""The planted faults (test equipment, tests/prediction/faults.py): each rewrites only its tensors and leaves a
report whose SHA-256s match the damaged files, so that only the numerical checks can see it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import eaglequant
from eaglequant.record.report import REPORT_NAME
from tests.conftest import FIXTURES
from tests.prediction.faults import FAULTS, plant


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_a_planted_fault_changes_only_its_tensors_and_the_report_hashes_the_damage(name: str, tmp_path: Path) -> None:
    fault = FAULTS[name]
    dst = eaglequant.convert(
        FIXTURES / "specforge-llama", tmp_path / "dst", scheme=fault.scheme, format=fault.format, **fault.options
    ).destination
    weights = dst / "model.safetensors"
    before = load_file(str(weights))
    assert plant(dst, name) == fault.what
    after = load_file(str(weights))
    changed = [tensor for tensor in before if not _raw(before[tensor]).equal(_raw(after[tensor]))]
    assert sorted(changed) == sorted(fault.tensors)
    recorded = json.loads((dst / REPORT_NAME).read_text())["files"]
    assert recorded["model.safetensors"] == hashlib.sha256(weights.read_bytes()).hexdigest()


def _raw(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.reshape(-1).view(torch.uint8)
