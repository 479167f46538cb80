"""``verify DST --source SRC --inputs CAPTURED``: the capture was made for the source, so it is checked against the
source, and where DST's config departs from the source's that is DST's defect (exit 3, naming the field), not a
capture to make again (exit 2)."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

from eaglequant.common.errors import EXIT_CHECK_FAILED
from tests.conftest import FIXTURES, run_cli

PAIR = FIXTURES / "trained-pair"
FIELD = "eagle_config.eagle_aux_hidden_state_layer_ids"


def _with_aux_layers(dst: Path, layers: list[int]) -> None:
    """DST's config reading other aux layers, the report's digests updated to the changed file (so only the
    comparison with the source can tell)."""
    config = json.loads((dst / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = layers
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    report_path = dst / "eaglequant_report.json"
    report = json.loads(report_path.read_text())
    report["files"] = {name: hashlib.sha256((dst / name).read_bytes()).hexdigest() for name in report["files"]}
    report_path.write_text(json.dumps(report))


def test_changed_aux_layers_are_the_checkpoints_defect_with_the_sources_capture(
    tmp_path: Path, pair_captured: Callable[[str], Path]
) -> None:
    converted = tmp_path / "fp8"
    made = run_cli("convert", PAIR / "draft", converted, "--scheme", "fp8-per-channel", "--format", "quark")
    assert made.exit_code == 0, made.stderr
    dst = Path(shutil.copytree(converted, tmp_path / "changed"))
    _with_aux_layers(dst, [0, 1, 2])
    inputs = pair_captured("trained-pair")
    for extra in ((), ("--inputs", inputs)):
        result = run_cli("verify", dst, "--source", PAIR / "draft", *extra, "--max-draft-tokens", "3", "--json")
        assert result.exit_code == EXIT_CHECK_FAILED, (extra, result.stdout, result.stderr)
        problems = json.loads(result.stdout)["problems"]
        assert ("config-differs", FIELD) in {(p["code"], p["subject"]) for p in problems}, problems
        assert "but the source's is [1, 2, 3]" in str(problems)
    # the untouched conversion passes with the same capture: it is the source's, and DST is the source's draft
    assert run_cli("verify", converted, "--source", PAIR / "draft", "--inputs", inputs).exit_code == 0
