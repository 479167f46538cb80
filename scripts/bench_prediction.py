"""Positions per second of the chained prediction on a full-size Kimi-K2.5 head, and the positions a search's
verdicts took on the bundled pair with and without sequential looks.

    .venv/bin/python scripts/bench_prediction.py [--head kimi-mla] [--positions 32] [--steps 3 8] [--device cpu]
                                                 [--cache DIR] [--inputs CAPTURED] [--budget 0.05 ...]

The head is ``eaglequant bench``'s synthetic one (random bf16 weights, the real shapes, its vocabulary as the draft's:
``eaglequant/bench/heads.py``), written once under --cache. One sequence of --positions captured-shaped random
inputs runs through the chain of each --steps (k = 1..K from one chain), after one untimed warm-up run; the weights
are read a block of rows at a time as ``verify --inputs`` and ``search`` read them (on --device cuda: held on the
GPU). Then ``search`` runs on the bundled pair (--inputs, or its 24 prompts captured here first, not timed) within
each --budget, sequential and not, and the positions its verdicts took are printed.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

import eaglequant
from eaglequant.bench.heads import cached_head
from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.prediction.predict import open_draft
from eaglequant.search.smallest import search

PAIR = Path(__file__).resolve().parent.parent / "fixtures" / "trained-pair"


def chain_rate(head_dir: Path, positions: int, steps: int, device: str) -> float:
    """Positions per second of one chain of ``steps`` steps over ``positions`` positions (after a warm-up run)."""
    with Checkpoint.open(head_dir) as checkpoint:
        draft = open_draft(checkpoint, device)
        dims = draft.forward.head.dims
        generator = torch.Generator().manual_seed(0)
        aux = torch.randn(positions, dims.num_aux_hidden_states * dims.target_hidden_size, generator=generator)
        ids = torch.randint(0, 1000, (positions,), generator=generator)
        with torch.no_grad():
            draft.forward.chain(aux, ids, steps)  # warm-up: the page cache, the device's copy of the weights
            if device != "cpu":
                torch.cuda.synchronize()
            started = time.perf_counter()
            draft.forward.chain(aux, ids, steps)
            if device != "cpu":
                torch.cuda.synchronize()
            return positions / (time.perf_counter() - started)


def verdict_positions(inputs: Path, out: Path, budget: str) -> dict[bool, tuple[str, int]]:
    """The pick and the draft positions its candidates' verdicts took, sequential and not."""
    taken = {}
    for sequential in (True, False):
        found = search(
            PAIR / "draft", out / f"pick-{sequential}", inputs=inputs, max_acceptance_drop=budget, overwrite=True,
            sequential=sequential, max_draft_tokens=3,
        )  # fmt: skip
        label = found.chosen.candidate.label if found.chosen else "none within the budget"
        taken[sequential] = (label, found.positions_predicted)
    return taken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--head", default="kimi-mla", choices=["kimi-mla", "kimi-llama", "tiny"])
    parser.add_argument("--positions", type=int, default=32)
    parser.add_argument("--steps", type=int, nargs="+", default=[3, 8])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "eaglequant-bench-heads")
    parser.add_argument("--inputs", type=Path, help="captured inputs of the bundled pair (default: captured here)")
    parser.add_argument("--budget", nargs="+", default=["0.05", "0.5"])
    args = parser.parse_args()
    head_dir = cached_head(args.head, args.cache)
    print(f"{args.head} on {args.device}, torch threads {torch.get_num_threads()}, {args.positions} positions")
    for steps in args.steps:
        rate = chain_rate(head_dir, args.positions, steps, args.device)
        print(f"  chain of {steps} steps (k = 1..{steps}): {rate:.2f} positions/s")
    out = Path(tempfile.mkdtemp(prefix="bench-prediction-"))
    inputs = args.inputs
    if inputs is None:
        inputs = out / "captured.safetensors"
        eaglequant.capture(PAIR / "target", PAIR / "draft", inputs)
    for budget in args.budget:
        taken = verdict_positions(inputs, out, budget)
        (pick, sequential), (other, every) = taken[True], taken[False]
        same = "the same pick" if pick == other else f"picks differ: {other} without looks"
        print(
            f"  bundled pair, budget {budget}: {pick}; verdicts took {sequential} positions sequential, "
            f"{every} without looks ({every / max(sequential, 1):.2f}x fewer; {same})"
        )


if __name__ == "__main__":
    main()
