"""Capture through vLLM (CPU build) on the bundled trained pair, against the transformers capture of the same
prompts; and the files vLLM's hidden-states connector writes, read as ``--inputs``, ``--calib`` and ``--counts``.

In float32 the engine's capture must be the transformers capture: the same continuation token for token, the same
states and probabilities to float32 rounding. In bfloat16 (what is served) a continuation may depart from the
float32 one only where the float32 target's top two choices are a near-tie, the states before any departure agree
to bf16 rounding, and the acceptance predicted from either capture agrees within its interval. In CI a missing vLLM
fails rather than skips (``engine_python``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import require_vendor, run_cli
from tests.engine_load.test_engine_load import engine_python

PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "trained-pair"
PROMPTS, TOKENS = 4, 24
BF16_STATE_TOLERANCE = 0.02  # relative error of the prompt's aux states, measured 0.0054 on the pair
NEAR_TIE = 0.125  # nats between the float32 target's top two choices (statistics.NEAR_TIE_NATS for bfloat16)

pytestmark = [pytest.mark.engine, pytest.mark.slow]


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, torch.Tensor]]:
    require_vendor("transformers")
    from eaglequant.capturing.engine_capture import capture_through
    from eaglequant.capturing.transformers_capture import capture

    python = engine_python("vllm")
    work = tmp_path_factory.mktemp("captures")
    settings = {"max_prompts": PROMPTS, "max_tokens": TOKENS}
    capture(PAIR / "target", PAIR / "draft", work / "transformers.safetensors", **settings)
    for dtype in ("float32", "bfloat16"):
        out = work / f"vllm-{dtype}.safetensors"
        capture_through("vllm", PAIR / "target", PAIR / "draft", out, dtype=dtype, engine_python=python, **settings)
    return {path.stem: load_file(str(path)) | {"path": path} for path in work.glob("*.safetensors")}  # type: ignore[operator]


def test_float32_capture_through_vllm_is_the_transformers_capture(captures: dict) -> None:
    mine, theirs = captures["vllm-float32"], captures["transformers"]
    for name in ("input_ids", "lengths", "continuation_start", "max_new_tokens", "target_top_ids"):
        assert torch.equal(mine[name], theirs[name]), name
    assert torch.allclose(mine["hidden_states"], theirs["hidden_states"], rtol=1e-4, atol=1e-4)
    assert torch.allclose(mine["target_top_probs"], theirs["target_top_probs"], atol=1e-4)


def test_a_target_split_over_two_ranks_captures_the_same(captures: dict, tmp_path: Path) -> None:
    """Tensor parallelism on the CPU build (two ranks, a core each): only rank 0 writes the states, and the capture
    is the one-rank capture."""
    from eaglequant.capturing.engine_capture import capture_through

    out = tmp_path / "tp2.safetensors"
    settings = {"max_prompts": 2, "max_tokens": TOKENS, "dtype": "float32", "tensor_parallel_size": 2}
    capture_through("vllm", PAIR / "target", PAIR / "draft", out, engine_python=engine_python("vllm"), **settings)
    split, whole = load_file(str(out)), captures["vllm-float32"]
    positions = split["input_ids"].shape[1]
    assert torch.equal(split["lengths"], whole["lengths"][:2])
    assert torch.equal(split["input_ids"], whole["input_ids"][:2, :positions])
    assert torch.equal(split["target_top_ids"], whole["target_top_ids"][:2, :positions])
    assert torch.allclose(split["hidden_states"], whole["hidden_states"][:2, :positions], rtol=1e-4, atol=1e-4)


def test_bfloat16_continuations_depart_only_at_near_ties(captures: dict) -> None:
    served, reference = captures["vllm-bfloat16"], captures["transformers"]
    departures = []
    for i in range(PROMPTS):
        differ = (served["input_ids"][i] != reference["input_ids"][i]).nonzero().flatten()
        start = int(reference["continuation_start"][i])
        prefix = int(differ[0]) if len(differ) else int(reference["lengths"][i])
        assert prefix > start  # the prompts are the same tokens: vLLM's tokenizer is the target's
        if len(differ):
            probs = reference["target_top_probs"][i, prefix - 1, :2]
            departures.append((i, prefix, float(probs[0].log() - probs[1].log())))
        states = slice(0, start)
        error = served["hidden_states"][i, states] - reference["hidden_states"][i, states]
        assert float(error.norm() / reference["hidden_states"][i, states].norm()) < BF16_STATE_TOLERANCE
    print(f"bf16 continuations departing from float32: {len(departures)} of {PROMPTS}: {departures}")
    assert all(gap < NEAR_TIE for _, _, gap in departures), departures


def test_predicted_acceptance_agrees_across_the_captures(captures: dict) -> None:
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.prediction.predict import load_captured, open_draft, predict

    with Checkpoint.open(PAIR / "draft") as checkpoint:
        draft = open_draft(checkpoint)
        lengths = {
            name: predict(draft, load_captured(captures[name]["path"]), 3).length()
            for name in ("transformers", "vllm-float32", "vllm-bfloat16")
        }
    assert lengths["vllm-float32"] == lengths["transformers"]
    served, reference = lengths["vllm-bfloat16"], lengths["transformers"]
    assert served.low <= reference.high and reference.low <= served.high, lengths


@pytest.fixture(scope="module")
def connector_dir(tmp_path_factory: pytest.TempPathFactory, captures: dict) -> Path:
    """The connector's files for the transformers capture's sequences, with the aux layers and the target's last
    layer (ids 1, 2, 3 and 4 of its 4), as speculators' data generation asks for them."""
    from eaglequant.engine_load import probe_workdir

    reference = captures["transformers"]
    sequences = []
    for i in range(PROMPTS):
        n = int(reference["lengths"][i])
        first = _first_token(reference, i)
        sequences.append([first, *reference["input_ids"][i, :n].tolist()])
    out = tmp_path_factory.mktemp("connector")
    script = Path(__file__).with_name("vllm_hidden_states_writer.py")
    with probe_workdir() as tmp:
        args = [str(PAIR / "target"), str(out), "[1, 2, 3, 4]", json.dumps(sequences), "float32"]
        done = subprocess.run(
            [str(engine_python("vllm")), str(script), *args],
            capture_output=True,
            text=True,
            timeout=900,
            env=_probe_environment(tmp),
        )
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(list(out.glob("*.safetensors"))) == PROMPTS
    return out


def _first_token(capture: dict, index: int) -> int:
    """The token before the first draft position: the prompt's first, which the capture does not hold."""
    from transformers import AutoTokenizer

    from eaglequant.measurement.prompts import read_prompts

    prompt = read_prompts(None, PROMPTS)[0][index]
    return int(AutoTokenizer.from_pretrained(str(PAIR / "target"))(prompt).input_ids[0])


def _probe_environment(workdir: Path) -> dict[str, str]:
    from eaglequant.engine_load import _probe_environment as environment

    return environment(str(workdir))


def test_connector_files_with_the_target_head_read_as_the_capture(
    connector_dir: Path, captures: dict, tmp_path: Path
) -> None:
    out = tmp_path / "imported.safetensors"
    command = ("capture", str(out), "--hidden-states", str(connector_dir), "--draft", str(PAIR / "draft"))
    result = run_cli(*command, "--target", str(PAIR / "target"))
    assert result.exit_code == 0, result.stderr
    imported, reference = load_file(str(out)), captures["transformers"]
    for i in range(PROMPTS):
        n = int(reference["lengths"][i])
        assert int(imported["lengths"][i]) == n
        assert torch.equal(imported["input_ids"][i, :n], reference["input_ids"][i, :n])
        assert torch.equal(imported["target_top_ids"][i, :n, 0], reference["target_top_ids"][i, :n, 0])
        assert torch.allclose(imported["hidden_states"][i, :n], reference["hidden_states"][i, :n], atol=1e-4)


def test_connector_files_are_read_as_inputs_calib_and_counts(connector_dir: Path, tmp_path: Path) -> None:
    dst = tmp_path / "nvfp4"
    calibrated = run_cli(
        "convert",
        str(PAIR / "draft"),
        str(dst),
        "--scheme",
        "nvfp4",
        "--format",
        "modelopt",
        "--calib",
        str(connector_dir),
    )
    assert calibrated.exit_code == 0, calibrated.stderr
    verified = run_cli(
        "verify", str(dst), "--source", str(PAIR / "draft"), "--inputs", str(connector_dir), "--max-draft-tokens", "3",
        "--json",
    )  # fmt: skip
    assert verified.exit_code in (0, 3, 7), verified.stderr  # a verdict, whichever: not the subject here
    assert json.loads(verified.stdout)["acceptance"] is not None
    pruned = run_cli(
        "prune", str(PAIR / "draft"), str(tmp_path / "pruned"), "--size", "1024", "--counts", str(connector_dir)
    )
    assert pruned.exit_code == 0, pruned.stderr
