"""The AMD Kimi-K2.5 EAGLE-3 card's throughput table, on paper: the target's terms fitted to the no-speculation
column (the target alone, every concurrency), the speculation's at one concurrency of the BF16 column, predicting
the other concurrencies and the FP8 column (docs/speedup-checks.md shows its output).

    .venv/bin/python scripts/amd_card_table.py [--fit-at 64] [--routing-locality 0.5] [--token-share fit|0..1]
        [--without-per-token]

The speculation's one fitted term is the share of a target step's cost a sequence that each token pays. A round
pays it C·k times over, so it is fitted where a round pays it most, the card's largest C: there 1% of the card's
figure moves it least (printed for every C, with the largest error when fitted there: no fit point is hidden).

The card: amd/Kimi-K2.5-MXFP4 on one MI355X node (TP 4, the draft on 1 rank), k = 6, ISL/OSL 1K/1K, decode
tokens/s per GPU against concurrency. The target: the bundled Kimi-K2.5 config (fixtures/targets/kimi-k2.5) with
its routed experts at MXFP4's 4.25 bits a weight, run in fp4; the drafts: the full-size Kimi-K2.5 Llama head (BF16)
and its FP8 per-channel conversion, priced from headers alone. Acceptance: the NVIDIA card's 2.62 at k = 3 carried
to k = 6 (the AMD card gives none). Prints Markdown.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    from eaglequant.bench.speedup import AMD_CARD

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fit-at", type=int, default=max(AMD_CARD), help="the concurrency of the BF16 column to "
                        "fit at (default: the largest, where a round pays the token share most)")  # fmt: skip
    parser.add_argument("--routing-locality", type=float, default=None, help="rho (default: the model's stated)")
    parser.add_argument("--token-share", default="fit", help="the share of a step's cost a sequence that each "
                        "token pays (a verification k + 1 times): 'fit' (at --fit-at, the round's overheads stated) "
                        "or 0..1 (the round's overheads fitted)")  # fmt: skip
    parser.add_argument("--without-per-token", action="store_true", help="the model before the cost a token: the "
                        "target's fixed overhead and the round's fitted at --fit-at alone")  # fmt: skip
    args = parser.parse_args(argv)

    from eaglequant.bench.speedup import amd_card
    from eaglequant.common.errors import InputError

    if args.fit_at not in AMD_CARD:
        parser.error(f"--fit-at {args.fit_at}: the card measured C = {', '.join(map(str, AMD_CARD))}")
    try:
        share = None if args.token_share == "fit" else float(args.token_share)
    except ValueError:
        parser.error(f"--token-share {args.token_share}: 'fit' or a number from 0 to 1")
    try:
        timing, rows = amd_card(ROOT / "fixtures" / "targets" / "kimi-k2.5", args.fit_at, args.routing_locality,
                                token_share=share, per_token=not args.without_per_token)  # fmt: skip
    except InputError as refused:  # a fit whose terms cannot be costs: the model cannot explain the card so
        print(f"error: {refused}", file=sys.stderr)
        return 2
    print("| C | no-spec tok/s/GPU measured | predicted | BF16 measured | predicted | error | FP8 measured | "
          "predicted [interval] | error | FP8 ahead measured / predicted |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        bf16, fp8 = row.bf16_predicted, row.fp8_predicted
        cells = [
            f"{row.concurrency}" + (" (fitted)" if row.concurrency == args.fit_at else ""),
            f"{row.alone_measured:.1f}",
            f"{row.alone_predicted:.1f}",
            f"{row.bf16_measured:.2f}×",
            f"{bf16.speedup:.2f}× [{bf16.low:.2f}, {bf16.high:.2f}]",
            f"{bf16.speedup / row.bf16_measured - 1:+.1%}",
            f"{row.fp8_measured:.2f}×",
            f"{fp8.speedup:.2f}× [{fp8.low:.2f}, {fp8.high:.2f}]",
            f"{fp8.speedup / row.fp8_measured - 1:+.1%}",
            f"{_yes(row.fp8_measured > row.bf16_measured)} / {_yes(fp8.speedup > bf16.speedup)}",
        ]
        print("| " + " | ".join(cells) + " |")
    worst = max(abs(r.bf16_predicted.speedup / r.bf16_measured - 1) for r in rows)
    worst_fp8 = max(abs(r.fp8_predicted.speedup / r.fp8_measured - 1) for r in rows)
    print(f"\nLargest error: BF16 {worst:.1%}, FP8 {worst_fp8:.1%} (goal: within 10%).")
    print("\nFitted terms and assumptions:")
    for line in timing.assumptions():
        print(f"- {line}")
    if share is None and not args.without_per_token:
        print_fit_points(args.routing_locality)
    return 0


def print_fit_points(locality: float | None) -> None:
    """The token share fitted at each C of the BF16 column in turn, how far 1% of the card moves it there, and the
    largest error over the table when fitted there."""
    from eaglequant.bench.speedup import fit_points

    print("\nFitted at each C in turn:\n")
    print("| fitted at C | token share | moved by 1% of the card | largest error BF16 | FP8 |")
    print("|---|---|---|---|---|")
    for point in fit_points(ROOT / "fixtures" / "targets" / "kimi-k2.5", locality):
        if point.share is None:
            print(f"| {point.concurrency} | refused: {point.refused} | | | |")
            continue
        print(f"| {point.concurrency} | {point.share:.2f} | ±{point.share_per_percent:.3f} | "
              f"{point.worst_bf16:.1%} | {point.worst_fp8:.1%} |")  # fmt: skip


def _yes(ahead: bool) -> str:
    return "yes" if ahead else "no"


if __name__ == "__main__":
    raise SystemExit(main())
