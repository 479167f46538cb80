"""The capture file written one sequence at a time, the hidden-state files vLLM's connector writes read into it, and
the refusals of ``capture`` and of inputs captured for another draft (one line, exit 2, nothing written).

The connector files here are written by the test in the connector's layout (``hidden_states`` [T, n_layers, H],
``token_ids`` [T]) to reach every refusal cheaply; ``test_capture_engine.py`` has vLLM itself write them.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from eaglequant.common.errors import InputError
from eaglequant.draft.capture_file import CaptureWriter
from eaglequant.draft.connector_files import OutputHead, read_hidden_states
from tests.conftest import FIXTURES, run_cli

PAIR = FIXTURES / "trained-pair"
HIDDEN = 256  # the pair's target
EXIT_BAD_INPUT = 2


def _record(length: int, start: int, seed: int, width: int = 3 * HIDDEN, k: int = 2) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "hidden_states": torch.randn(length, width, generator=generator),
        "input_ids": torch.randint(0, 4096, (length,), generator=generator),
        "target_top_ids": torch.randint(0, 4096, (length, k), generator=generator),
        "target_top_probs": torch.rand(length, k, generator=generator),
        "continuation_start": torch.tensor(start),
    }


def test_sequences_are_padded_into_one_file_with_their_lengths(tmp_path: Path) -> None:
    records = [_record(5, 2, 0), _record(3, 1, 1), _record(7, 4, 2)]
    with CaptureWriter(tmp_path / "captured.safetensors") as writer:
        writer.add_all(records)
        summary = writer.finish((1, 2, 3), "test", {"decoding": "greedy"})
    written = load_file(str(summary.path))
    assert written["lengths"].tolist() == [5, 3, 7]
    assert written["continuation_start"].tolist() == [2, 1, 4]
    assert written["max_new_tokens"].tolist() == [-1, -1, -1]
    for i, record in enumerate(records):
        n = len(record["input_ids"])
        for name in ("hidden_states", "input_ids", "target_top_ids", "target_top_probs"):
            assert torch.equal(written[name][i, :n], record[name].to(written[name].dtype)), name
            assert not written[name][i, n:].any(), name  # padding is zeros
    assert (summary.sequences, summary.positions, summary.continuation_positions) == (3, 15, 8)
    assert not writer.parts.exists()  # the sequences' files go once OUT is written
    with safe_open(str(summary.path), "pt") as handle:
        assert json.loads(handle.metadata()["aux_layer_ids"]) == [1, 2, 3]


def test_sequences_of_another_width_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    out = tmp_path / "captured.safetensors"
    with CaptureWriter(out) as writer, pytest.raises(InputError, match="every sequence of one capture"):
        writer.add_all([_record(4, 1, 0), _record(4, 1, 1, width=2 * HIDDEN)])
        writer.finish((), "test", {})
    assert list(tmp_path.iterdir()) == []


def test_hidden_states_keep_the_dtype_they_were_computed_in(tmp_path: Path) -> None:
    """An engine serving in bf16 gives 2 bytes a value: the file keeps them (half of float32's size), readers widen."""
    from eaglequant.prediction.predict import load_captured

    records = [
        {**_record(5, 2, i), "hidden_states": _record(5, 2, i)["hidden_states"].to(torch.bfloat16)} for i in (0, 1)
    ]
    with CaptureWriter(tmp_path / "captured.safetensors") as writer:
        writer.add_all(records)
        summary = writer.finish((1, 2, 3), "test", {})
    assert load_file(str(summary.path))["hidden_states"].dtype == torch.bfloat16
    sequences = load_captured(summary.path)
    assert sequences[1].aux.dtype == torch.float32
    assert torch.equal(sequences[1].aux, records[1]["hidden_states"].to(torch.float32))
    mixed = tmp_path / "mixed.safetensors"
    with CaptureWriter(mixed) as writer, pytest.raises(InputError, match="every sequence of one capture"):
        writer.add_all([records[0], _record(5, 2, 2)])
        writer.finish((), "test", {})


def _connector_dir(tmp_path: Path, layers: int, lengths: tuple[int, ...] = (6, 9)) -> Path:
    directory = tmp_path / "hidden_states"
    directory.mkdir()
    for i, length in enumerate(lengths):
        generator = torch.Generator().manual_seed(i)
        save_file(
            {
                "hidden_states": torch.randn(length, layers, HIDDEN, generator=generator).to(torch.bfloat16),
                "token_ids": torch.randint(0, 4096, (length,), generator=generator),
            },
            str(directory / f"{i}-request.safetensors"),
        )
    return directory


def test_connector_files_without_the_target_head_read_the_next_token_as_its_choice(tmp_path: Path) -> None:
    directory = _connector_dir(tmp_path, 3)
    records = list(read_hidden_states(directory, 3, None, 4))
    assert len(records) == 2
    written = load_file(str(directory / "1-request.safetensors"))
    hidden, tokens = written["hidden_states"], written["token_ids"]
    second = records[1]
    # position t reads the states at t and token t + 1, and is judged by token t + 2
    assert torch.equal(second["input_ids"], tokens[1:-1])
    assert torch.equal(second["target_top_ids"][:, 0], tokens[2:])
    assert torch.equal(second["hidden_states"], hidden[:-2].reshape(7, -1).to(torch.float32))
    assert second["continuation_start"] == 0


def test_a_last_layer_beside_the_aux_layers_gives_the_targets_own_choices(tmp_path: Path) -> None:
    directory = _connector_dir(tmp_path, 4)
    generator = torch.Generator().manual_seed(7)
    head = OutputHead(torch.rand(HIDDEN, generator=generator) + 0.5, 1e-5, torch.randn(64, HIDDEN, generator=generator))
    record = next(iter(read_hidden_states(directory, 3, head, 4)))
    hidden = load_file(str(directory / "0-request.safetensors"))["hidden_states"].to(torch.float64)
    last = hidden[1:, 3]  # after token t + 1: the target's last layer at position t + 1
    normed = last * torch.rsqrt(last.pow(2).mean(-1, keepdim=True) + 1e-5) * head.norm.to(torch.float64)
    expected = torch.softmax(normed @ head.lm_head.to(torch.float64).T, -1)
    assert torch.equal(record["target_top_ids"][:, 0], expected.argmax(-1))
    assert torch.allclose(record["target_top_probs"], expected.topk(4, -1).values.to(torch.float32), atol=1e-5)
    assert record["hidden_states"].shape == (5, 3 * HIDDEN)  # the last layer is not an aux input


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("lock", "is missing beside its .lock"),
        ("layers", "holds 5 layers; the draft reads 3"),
        ("keys", "no 'token_ids'"),
        ("empty", "no hidden-state files"),
    ],
)
def test_a_bad_connector_directory_is_refused(tmp_path: Path, damage: str, message: str) -> None:
    directory = _connector_dir(tmp_path, 5 if damage == "layers" else 3)
    if damage == "lock":
        (directory / "2-request.safetensors.lock").touch()
    elif damage == "keys":
        save_file({"hidden_states": torch.zeros(4, 3, HIDDEN)}, str(directory / "0-request.safetensors"))
    elif damage == "empty":
        shutil.rmtree(directory)
        directory.mkdir()
    out = tmp_path / "captured.safetensors"
    result = run_cli("capture", str(out), "--hidden-states", str(directory), "--draft", str(PAIR / "draft"))
    assert result.exit_code == EXIT_BAD_INPUT, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) <= 2
    assert not out.exists() and not any(p.name.startswith(".captured") for p in tmp_path.iterdir())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--tensor-parallel-size", "2"), "--tensor-parallel-size only applies with --engine"),
        (("--engine-arg", "max_num_seqs=4"), "--engine-arg only applies with --engine"),
        (("--engine", "sglang"), "capture runs vllm"),
        (("--engine", "vllm", "--engine-arg", "kv_transfer_config={}"), "capture sets kv_transfer_config itself"),
        (("--engine", "vllm", "--engine-arg", "model=other"), "eaglequant sets model itself"),
        (("--engine", "vllm", "--engine-arg", "speculative_config={}"), "capture sets speculative_config itself"),
        (("--engine", "vllm", "--engine-arg", "novalue"), "not KEY=VALUE"),
        (("--engine", "vllm", "--dtype", "int8"), "not one of bfloat16"),
    ],
)
def test_engine_options_are_checked_before_the_engine_starts(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    out = tmp_path / "captured.safetensors"
    common = ("--target", str(PAIR / "target"), "--draft", str(PAIR / "draft"), "--engine-python", sys.executable)
    result = run_cli("capture", str(out), *common, *args)
    assert result.exit_code == EXIT_BAD_INPUT, result.stderr
    assert message in result.stderr
    assert not out.exists()


def test_layer_ids_beyond_the_targets_depth_are_refused_before_the_engine_starts(tmp_path: Path) -> None:
    draft = tmp_path / "draft"
    shutil.copytree(PAIR / "draft", draft)
    config = json.loads((draft / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 2, 9]
    (draft / "config.json").write_text(json.dumps(config))
    out = tmp_path / "captured.safetensors"
    engine = ("--engine", "vllm", "--engine-python", sys.executable)
    result = run_cli("capture", str(out), "--target", str(PAIR / "target"), "--draft", str(draft), *engine)
    assert result.exit_code == EXIT_BAD_INPUT, result.stderr
    assert "aux layer id 9 is beyond the target's 4 layers" in result.stderr


@pytest.fixture(scope="module")
def captured_for_another_draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Inputs as a draft of a target twice as wide would read them."""
    path = tmp_path_factory.mktemp("other") / "captured.safetensors"
    with CaptureWriter(path) as writer:
        writer.add_all([_record(12, 4, 0, width=6 * HIDDEN), _record(10, 3, 1, width=6 * HIDDEN)])
        writer.finish((1, 2, 3), "test", {})
    return path


@pytest.mark.parametrize("command", ["search", "prune", "verify"])
def test_inputs_captured_for_another_draft_are_refused(
    command: str, captured_for_another_draft: Path, tmp_path: Path
) -> None:
    inputs = ("--inputs", str(captured_for_another_draft))
    dst = tmp_path / "out"
    if command == "search":
        args: tuple[str, ...] = (
            "search",
            str(PAIR / "draft"),
            str(dst),
            *inputs,
            "--scheme",
            "fp8-per-channel",
            "--max-acceptance-drop",
            "0.05",
        )
    elif command == "prune":
        args = ("prune", str(PAIR / "draft"), str(dst), "--size", "512", "--counts", str(captured_for_another_draft))
        args += inputs
    else:
        converted = run_cli("convert", str(PAIR / "draft"), str(dst), "--scheme", "fp8-per-channel")
        assert converted.exit_code == 0, converted.stderr
        args = ("verify", str(dst), "--source", str(PAIR / "draft"), *inputs)
    result = run_cli(*args)
    assert result.exit_code == EXIT_BAD_INPUT, result.stderr
    assert "draft_hidden_size 512 was captured; this draft reads 256" in " ".join(result.stderr.split())


@pytest.mark.parametrize("engine", [(), ("--engine", "vllm", "--engine-python", sys.executable)])
def test_a_draft_that_is_no_eagle3_head_is_refused_before_the_target_loads(
    engine: tuple[str, ...], tmp_path: Path
) -> None:
    """The target passed as --draft (issue 55): one line naming --draft, exit 2, nothing written; and a --draft that
    is not there is named as --draft."""
    out = tmp_path / "captured.safetensors"
    target = str(PAIR / "target")
    result = run_cli("capture", str(out), "--target", target, "--draft", target, *engine)
    assert result.exit_code == 2, result.stderr
    assert f"--draft '{target}': not an EAGLE-3 head" in result.stderr and not out.exists()
    missing = run_cli("capture", str(out), "--target", target, "--draft", str(tmp_path / "nope"), *engine)
    assert missing.exit_code == 2 and "--draft" in missing.stderr and "no such directory" in missing.stderr


@pytest.mark.parametrize("engine", [(), ("--engine", "vllm", "--engine-python", sys.executable)])
def test_an_out_that_cannot_be_written_is_refused_before_anything_loads(
    engine: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 55, item 6: OUT is checked first: an existing directory is refused in one line naming it, exit 2, before
    the draft or the target is read (neither exists here), by the CLI and by the library."""
    from eaglequant.capturing.engine_capture import EngineCapture, capture_with_engine
    from eaglequant.capturing.transformers_capture import capture
    from eaglequant.common.errors import InputError

    out = tmp_path / "captured.safetensors"
    out.mkdir()
    nowhere = str(tmp_path / "no-model")
    result = run_cli("capture", str(out), "--target", nowhere, "--draft", nowhere, *engine)
    assert result.exit_code == 2 and f"{out}: is a directory, not a capture file" in result.stderr, result.stderr
    with pytest.raises(InputError, match="is a directory, not a capture file"):
        capture(nowhere, nowhere, out)
    with pytest.raises(InputError, match="is a directory, not a capture file"):
        capture_with_engine(nowhere, nowhere, out, EngineCapture(Path(sys.executable), "bfloat16", 1, {}))


def test_without_prompts_a_target_other_than_the_bundled_pair_s_is_warned_in_one_line(tmp_path: Path) -> None:
    """Issue 55, item 6: the bundled held-out prompts were written for the bundled pair; on any other target the
    user is told, naming the bundled set and --prompts, and on the bundled pair's target nothing is said."""
    from eaglequant.measurement.prompts import bundled_prompts_note

    assert bundled_prompts_note(PAIR / "target") is None
    said = bundled_prompts_note("/models/Kimi-K2.5")
    assert said is not None and "bundled held-out prompts (prompts.jsonl" in said and "--prompts FILE" in said
    other = tmp_path / "target"
    shutil.copytree(PAIR / "target", other)
    result = run_cli("capture", str(tmp_path / "c.safetensors"), "--target", other, "--draft", PAIR / "draft",
                     "--max-prompts", "2", "--max-tokens", "4")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "note: no --prompts: using the bundled held-out prompts" in " ".join(result.stderr.split())
    quiet = run_cli("capture", str(tmp_path / "d.safetensors"), "--target", PAIR / "target", "--draft",
                    PAIR / "draft", "--max-prompts", "2", "--max-tokens", "4")  # fmt: skip
    assert quiet.exit_code == 0 and "no --prompts" not in quiet.stderr
