"""A search's predictions from the source's shared chain inputs, and from an earlier candidate's identical served copy,
equal the direct prediction of each candidate bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import eaglequant
from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.prediction.predict import CapturedSequence, open_draft, predict_as_served, predict_table
from eaglequant.prediction.shared import chain_inputs, shares_inputs
from eaglequant.record.as_recorded import open_written
from eaglequant.search.predictions import CandidatePredictor, predicted_from_smallest, single_threaded_torch
from tests.conftest import FIXTURES

DRAFT = FIXTURES / "trained-pair" / "draft"


def _sequences(count: int = 3, length: int = 24) -> list[CapturedSequence]:
    """Seeded inputs of the bundled draft's width; the references are the ids shifted, so some drafts match."""
    generator = torch.Generator().manual_seed(7)
    sequences = []
    for _ in range(count):
        ids = torch.randint(0, 2048, (length,), generator=generator)
        aux = torch.randn(length, 3 * 256, generator=generator) * 2
        sequences.append(CapturedSequence(aux, ids, torch.roll(ids, -1), 2))
    return sequences


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("candidates")
    made = {}
    for scheme, fmt in (("mxfp4", "quark"), ("mxfp4", "compressed-tensors"), ("nvfp4", "modelopt")):
        made[f"{scheme}/{fmt}"] = tmp / f"{scheme}-{fmt}"
        settings = {"quantize": ["lm_head"]} if fmt == "modelopt" else {}
        eaglequant.convert(DRAFT, made[f"{scheme}/{fmt}"], scheme=scheme, format=fmt, workers=1, **settings)
    return made


def _direct(source: Checkpoint, dst: Path, sequences: list[CapturedSequence]) -> object:
    reference = predict_table(open_draft(source), sequences, 8)
    with open_written(dst, None, None) as (checkpoint, head, target):
        return predict_as_served(checkpoint, head, target, reference, sequences, 3, None, f"{len(sequences)} sequences")


def test_a_prediction_from_shared_chain_inputs_equals_the_direct_one_bit_for_bit(converted: dict[str, Path]) -> None:
    sequences = _sequences()
    with Checkpoint.open(DRAFT) as source, single_threaded_torch():
        predictor = CandidatePredictor(source, sequences)
        for dst in converted.values():
            direct = _direct(source, dst, sequences)
            shared = predictor.predicted(dst)
            assert shared == direct  # every count, table and figure, exactly
            assert shared.record().to_json() == direct.record().to_json()  # type: ignore[attr-defined]
        assert predictor.reused == 1  # MXFP4 in Quark and in compressed-tensors serve the same bytes


def test_the_chain_reads_the_same_logits_from_shared_inputs(converted: dict[str, Path], tmp_path: Path) -> None:
    from eaglequant.measurement.served import quantized_modules, write_dequantized

    sequences = _sequences(count=2)
    with Checkpoint.open(DRAFT) as source, open_written(converted["nvfp4/modelopt"], None, None) as written:
        checkpoint, head, target = written
        write_dequantized(checkpoint, head, quantized_modules(checkpoint, head, target, "vllm"), tmp_path, "float32")
        source_draft = open_draft(source)
        shared = chain_inputs(source_draft, sequences, 3)
        with Checkpoint.open(tmp_path, "DST") as served:
            draft = open_draft(served)
            assert shares_inputs(source_draft.forward.weight, draft.forward.weight)
            for seq, inputs in zip(sequences, shared, strict=True):
                direct = draft.forward.chain_logits(seq.aux, seq.ids, 3)
                from_shared = draft.forward.chain_logits(seq.aux, seq.ids, 3, inputs)
                assert all(torch.equal(a, b) for a, b in zip(direct, from_shared, strict=True))


def test_a_draft_with_another_fc_does_not_share_the_inputs(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    other = tmp_path / "other"
    other.mkdir()
    for path in DRAFT.iterdir():
        if path.is_file() and path.suffix != ".safetensors":
            (other / path.name).write_bytes(path.read_bytes())
    tensors = load_file(str(DRAFT / "model.safetensors"))
    name = next(name for name in tensors if name.endswith("fc.weight"))
    tensors[name] = tensors[name].clone()
    tensors[name][0, 0] += 1
    save_file(tensors, str(other / "model.safetensors"), metadata={"format": "pt"})
    with Checkpoint.open(DRAFT) as source, Checkpoint.open(other) as changed:
        assert not shares_inputs(open_draft(source).forward.weight, open_draft(changed).forward.weight)
        assert shares_inputs(open_draft(source).forward.weight, open_draft(source).forward.weight)


def test_candidates_are_judged_in_order_up_to_the_first_within() -> None:
    converted: list[int] = []
    judged: list[int] = []
    drops = [0.3, 0.2, 0.01, 0.0, 0.5]
    found = predicted_from_smallest(
        len(drops), lambda index: converted.append(index) or Path(str(index)), lambda path: drops[int(path.name)],
        lambda drop: drop <= 0.05, lambda index, drop: judged.append(index), workers=2,
    )  # fmt: skip
    assert found == [0.3, 0.2, 0.01] and judged == [0, 1, 2]
    assert converted[:3] == [0, 1, 2]  # later ones may have been converted ahead, never judged
