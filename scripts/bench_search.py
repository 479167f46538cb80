"""Time ``eaglequant search`` on the bundled trained pair: every built-in scheme, the vocabulary pruned (--counts)
and lm_head in schemes of its own (--target-layers 4), within 0.05 tokens.

    .venv/bin/python scripts/bench_search.py [--inputs CAPTURED] [--out DIR]

Without --inputs it first captures the 24 bundled prompts from the bundled target (eaglequant capture, minutes on
a CPU; not timed). Prints the seconds the search took, the predictions it ran and its pick.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import eaglequant
from eaglequant.search.smallest import search

PAIR = Path(__file__).resolve().parent.parent / "fixtures" / "trained-pair"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=Path, help="captured inputs (default: captured here first)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="bench-search-")))
    args = parser.parse_args()
    inputs = args.inputs
    if inputs is None:
        inputs = args.out / "captured.safetensors"
        eaglequant.capture(PAIR / "target", PAIR / "draft", inputs)
    started = time.perf_counter()
    found = search(
        PAIR / "draft", args.out / "smallest", inputs=inputs, max_acceptance_drop="0.05", counts=inputs,
        target_layers=4, overwrite=True,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    predicted = sum(point.prediction is not None for point in found.points)
    pick = found.chosen.candidate.label if found.chosen else "none within the budget"
    cores = len(os.sched_getaffinity(0))
    print(f"search: {seconds:.1f} s on {cores} cores, {predicted} of {len(found.points)} candidates predicted; {pick}")


if __name__ == "__main__":
    main()
