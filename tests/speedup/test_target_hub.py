"""A Hub target priced from its safetensors headers, read with ranged requests: the weights never come down."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from eaglequant.speedup.target_step import target_weights
from tests.conftest import FIXTURES, ROOT
from tests.hub_server import FakeHub

TARGET = FIXTURES / "trained-pair" / "target"
_PRICE = (
    "import json, sys; from pathlib import Path; from eaglequant.speedup.target_step import target_weights; "
    "print(json.dumps(target_weights(Path(sys.argv[1]), 2).to_json()))"
)


@pytest.fixture(scope="module")
def hub():
    server = FakeHub().start()
    yield server
    server.stop()


def test_a_hub_target_is_priced_from_its_headers_without_downloading_its_weights(tmp_path: Path, hub: FakeHub) -> None:
    files = {p.name: p.read_bytes() for p in TARGET.iterdir() if p.is_file()}
    hub.seed("org/tiny-target", files)
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": hub.endpoint, "HF_HUB_DISABLE_XET": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}  # fmt: skip
    before = len(hub.sent)
    proc = subprocess.run(
        [sys.executable, "-c", _PRICE, "org/tiny-target"], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    priced = json.loads(proc.stdout)
    local = target_weights(TARGET, 2)
    assert priced["read_from"] == "safetensors headers"
    assert replace(local, name="org/tiny-target").to_json() == priced
    weights = [(path, sent) for path, sent in hub.sent[before:] if path.endswith(".safetensors")]
    size = len(files["model.safetensors"])
    assert weights and all(sent <= 100_001 for _, sent in weights) and size > 100_001 + 8  # headers only
