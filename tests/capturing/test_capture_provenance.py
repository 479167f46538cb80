"""Issue 55, item 3: a capture file records what it was made for (the aux layer ids and their hidden size, the
target's name, layer count and vocabulary, the prompts' hash), and ``verify``, ``prune``, ``search`` and
``convert --calib`` refuse one made for another draft or target in one line naming the field (exit 2). A file
written before these were recorded still reads, unchecked where it says nothing.

The capture with aux layers [2, 2, 1] is the one a user got with the target passed as ``--draft`` (the default ids
for its 4 layers); here it is made through the library with those ids given, past ``check_draft``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from eaglequant.draft.capture_file import CaptureProvenance, prompts_sha256, read_provenance
from tests.conftest import FIXTURES, run_cli

PAIR = FIXTURES / "trained-pair"
EXIT_BAD_INPUT = 2
SMALL = {"max_prompts": 2, "max_tokens": 4}


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The pair's capture as ``capture`` writes it, one with the aux layers [2, 2, 1], and a draft converted."""
    from eaglequant.capturing.transformers_capture import capture

    root = tmp_path_factory.mktemp("provenance")
    made = {"right": root / "right.safetensors", "wrong": root / "wrong.safetensors"}
    capture(PAIR / "target", PAIR / "draft", made["right"], **SMALL)  # type: ignore[arg-type]
    capture(PAIR / "target", PAIR / "draft", made["wrong"], layer_ids=(2, 2, 1), **SMALL)  # type: ignore[arg-type]
    converted = run_cli("convert", PAIR / "draft", root / "fp8", "--scheme", "fp8-per-channel")
    assert converted.exit_code == 0, converted.stderr
    return {**made, "converted": root / "fp8"}


def _edited(source: Path, out: Path, **changes: str | None) -> Path:
    """``source`` with its header's metadata changed (None: the key removed), the tensors as they were."""
    with safe_open(str(source), "pt") as handle:
        metadata = dict(handle.metadata() or {})
    for key, value in changes.items():
        if value is None:
            metadata.pop(key, None)
        else:
            metadata[key] = value
    save_file(load_file(str(source)), str(out), metadata)
    return out


def test_the_transformers_capture_records_what_it_was_made_for(captures: dict[str, Path]) -> None:
    from eaglequant.measurement.prompts import read_prompts

    prompts, _ = read_prompts(None, 2)
    assert read_provenance(captures["right"]) == CaptureProvenance(
        (1, 2, 3), 256, str(PAIR / "target"), 4, 4096, prompts_sha256(prompts)
    )
    assert read_provenance(captures["wrong"]).aux_layer_ids == (2, 2, 1)


def _search(draft: Path, dst: Path, *extra: str) -> tuple[str, ...]:
    return ("search", str(draft), str(dst), *extra, "--scheme", "fp8-per-channel", "--max-acceptance-drop", "0.05")


@pytest.mark.parametrize("command", ["verify", "prune", "search"])
def test_inputs_captured_at_other_aux_layers_are_refused_naming_them(
    command: str, captures: dict[str, Path], tmp_path: Path
) -> None:
    """The user's case: the aux states of layers [2, 2, 1] are as wide as the draft's [1, 2, 3], so only the
    recorded ids tell them apart; verify exited 0 with a wrong prediction."""
    inputs = ("--inputs", str(captures["wrong"]))
    if command == "verify":
        args: tuple[str, ...] = ("verify", str(captures["converted"]), "--source", str(PAIR / "draft"), *inputs)
    elif command == "prune":
        args = (
            "prune",
            str(PAIR / "draft"),
            str(tmp_path / "out"),
            "--size",
            "512",
            "--counts",
            str(captures["right"]),
        )
        args += inputs
    else:
        args = _search(PAIR / "draft", tmp_path / "out", *inputs)
    result = run_cli(*args)
    assert result.exit_code == EXIT_BAD_INPUT, result.stderr
    said = " ".join(result.stderr.split())
    assert "aux_layer_ids [2, 2, 1] were captured; this draft reads [1, 2, 3]" in said, said
    assert "eaglequant capture" in said and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_calibration_captured_at_other_aux_layers_is_refused(captures: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_cli("convert", PAIR / "draft", out, "--scheme", "nvfp4", "--format", "modelopt",
                     "--calib", captures["wrong"])  # fmt: skip
    assert result.exit_code == EXIT_BAD_INPUT, result.stderr
    assert "--calib" in result.stderr and "aux_layer_ids [2, 2, 1] were captured" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"draft_hidden_size": "512"}, "draft_hidden_size 512 was captured; this draft reads 256"),
        ({"target_vocab_size": "32000"}, "target_vocab_size 32000 was captured"),
        ({"aux_layer_ids": "[1, 2, 3, 4]"}, "aux_layer_ids [1, 2, 3, 4] were captured; this draft reads [1, 2, 3]"),
        ({"target_layers": "four"}, "target_layers is 'four', not JSON"),
    ],
)
def test_a_capture_recording_another_draft_or_target_is_refused_by_verify(
    changes: dict[str, str], said: str, captures: dict[str, Path], tmp_path: Path
) -> None:
    inputs = _edited(captures["right"], tmp_path / "edited.safetensors", **changes)
    result = run_cli(
        "verify", captures["converted"], "--source", PAIR / "draft", "--inputs", inputs, "--max-draft-tokens", "3"
    )
    assert result.exit_code == EXIT_BAD_INPUT, result.stderr
    assert said in " ".join(result.stderr.split())


@pytest.mark.parametrize("command", ["prune", "search"])
def test_counts_captured_from_a_target_of_another_vocabulary_are_refused(
    command: str, captures: dict[str, Path], tmp_path: Path
) -> None:
    """Counts read only the target's choices: their vocabulary is checked, not their aux layers."""
    counts = _edited(captures["wrong"], tmp_path / "counts.safetensors", target_vocab_size="32000")
    if command == "prune":
        args: tuple[str, ...] = ("prune", str(PAIR / "draft"), str(tmp_path / "out"), "--size", "512")
    else:
        args = _search(PAIR / "draft", tmp_path / "out", "--inputs", str(captures["right"]))
    result = run_cli(*args, "--counts", str(counts))
    assert result.exit_code == EXIT_BAD_INPUT, result.stderr
    said = " ".join(result.stderr.split())
    assert "--counts" in said and "target_vocab_size 32000 was captured" in said and "vocab_size is 4096" in said
    assert not (tmp_path / "out").exists()
    # the aux layers [2, 2, 1] do not matter to counts
    pruned = run_cli("prune", PAIR / "draft", tmp_path / "pruned", "--size", "512", "--counts", captures["wrong"])
    assert pruned.exit_code == 0, pruned.stderr


def test_a_capture_written_before_provenance_was_recorded_still_reads(
    captures: dict[str, Path], tmp_path: Path
) -> None:
    """No field recorded: nothing checked, the file reads as before (the width check still guards its tensors)."""
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.layouts.detect import describe_head
    from eaglequant.prediction.predict import load_captured

    keys = ("draft_hidden_size", "target", "target_layers", "target_vocab_size", "prompts_sha256", "aux_layer_ids")
    older = _edited(captures["wrong"], tmp_path / "older.safetensors", **dict.fromkeys(keys))
    assert read_provenance(older) == CaptureProvenance()
    with Checkpoint.open(PAIR / "draft") as checkpoint:
        head = describe_head(checkpoint)
    assert len(load_captured(older, head=head)) == 2
    result = run_cli("verify", captures["converted"], "--source", PAIR / "draft", "--inputs", older)
    assert result.exit_code in (0, 3, 7), result.stderr  # read and predicted: an older file cannot be told apart


def test_the_engine_capture_records_what_it_was_made_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's probe stood in for: it writes one sequence into the writer's parts, as vLLM's would."""
    from eaglequant.capturing import engine_capture
    from eaglequant.draft.capture_file import SEQUENCE_TENSORS
    from eaglequant.measurement.prompts import read_prompts

    def probe(interpreter: Path, job: dict) -> dict:
        length = 6
        record = {
            "hidden_states": torch.randn(length, 3 * 256),
            "input_ids": torch.randint(0, 4096, (length,)),
            "target_top_ids": torch.randint(0, 4096, (length, 2)),
            "target_top_probs": torch.rand(length, 2),
            "continuation_start": torch.tensor(2),
            "max_new_tokens": torch.tensor(job["max_new_tokens"]),
        }
        tensors = {name: record[name].to(dtype or torch.float32) for name, (dtype, _) in SEQUENCE_TENSORS.items()}
        save_file(tensors, str(Path(job["spill"]) / "sequence-000000.safetensors"))
        return {"version": "0.0-test", "connector": "test"}

    monkeypatch.setattr(engine_capture, "_run", probe)
    out = tmp_path / "engine.safetensors"
    capture = engine_capture.EngineCapture(Path(sys.executable), "bfloat16", 1, {})
    engine_capture.capture_with_engine(PAIR / "target", PAIR / "draft", out, capture, **SMALL)  # type: ignore[arg-type]
    prompts, _ = read_prompts(None, 2)
    assert read_provenance(out) == CaptureProvenance(
        (1, 2, 3), 256, str(PAIR / "target"), 4, 4096, prompts_sha256(prompts)
    )


def test_trainer_and_connector_files_record_what_they_know(tmp_path: Path) -> None:
    """SpecForge's and the connector's files say nothing of the prompts; the target, where given, is recorded."""
    from eaglequant.capturing.transformers_capture import capture_from_hidden_states, capture_from_specforge

    connector = tmp_path / "hidden_states"
    connector.mkdir()
    save_file(
        {"hidden_states": torch.randn(8, 4, 256).to(torch.bfloat16), "token_ids": torch.randint(0, 4096, (8,))},
        str(connector / "0-request.safetensors"),
    )
    out = tmp_path / "connector.safetensors"
    capture_from_hidden_states(connector, out, draft=PAIR / "draft", target=PAIR / "target")
    assert read_provenance(out) == CaptureProvenance((1, 2, 3), 256, str(PAIR / "target"), 4, 4096, None)
    bare = tmp_path / "bare.safetensors"
    capture_from_hidden_states(connector, bare)
    assert read_provenance(bare) == CaptureProvenance()

    specforge = tmp_path / "specforge"
    specforge.mkdir()
    sample = {
        "input_ids": torch.randint(0, 4096, (1, 8)),
        "loss_mask": torch.ones(1, 8, dtype=torch.int64),
        "aux_hidden_state": torch.randn(1, 8, 3 * 256),
        "hidden_state": torch.randn(1, 8, 256),
    }
    torch.save(sample, specforge / "data_0.ckpt")
    trained = tmp_path / "specforge.safetensors"
    capture_from_specforge(specforge, trained, target=PAIR / "target", layer_ids=(1, 2, 3))
    assert read_provenance(trained) == CaptureProvenance((1, 2, 3), 256, str(PAIR / "target"), 4, 4096, None)
    assert json.loads(load_metadata(trained)["aux_layer_ids"]) == [1, 2, 3]


def load_metadata(path: Path) -> dict[str, str]:
    with safe_open(str(path), "pt") as handle:
        return dict(handle.metadata() or {})
