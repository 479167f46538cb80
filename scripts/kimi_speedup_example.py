"""The speed-up model's worked example: the full-size Kimi-K2.5 MLA head against a Kimi-K2.5-shaped MoE target at
TP 8, in vLLM, at k = 1..8 (docs/speedup.md shows its output).

    .venv/bin/python scripts/kimi_speedup_example.py [--scheme fp8-block --format compressed-tensors --vocab 40960]

The pick defaults to what ``eaglequant search --objective speedup --max-acceptance-drop 0.05`` chose on the bundled
MLA pair (fp8-block / compressed-tensors with a quarter of the draft vocabulary, 512 of 2,048), at the same share of
Kimi-K2.5's 163,840 tokens; the heads are priced from headers alone, the target from
fixtures/targets/kimi-k2.5/config.json. Prints Markdown.
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scheme", default="fp8-block")
    parser.add_argument("--format", default="compressed-tensors")
    parser.add_argument("--vocab", type=int, default=40960, help="the pick's pruned draft vocabulary (0: none)")
    args = parser.parse_args(argv)

    from eaglequant.bench.speedup import kimi_tables

    pick = {"scheme": args.scheme, "format": args.format, "vocab": args.vocab or None}
    tables = kimi_tables(ROOT / "fixtures" / "targets" / "kimi-k2.5", pick)
    ks = [p.draft_tokens for p in tables[0].points]
    print("| draft (vLLM, TP 8) | draft ms a round at k = 3 | " + " | ".join(f"k = {k}" for k in ks) + " | best k |")
    print("|---|---|" + "---|" * len(ks) + "---|")
    for table in tables:
        cells = [f"{p.speedup:.2f}×" for p in table.points]
        three = table.at(3)
        assert three is not None
        row = [table.draft, f"{three.draft_s * 1e3:.2f} ms", *cells, str(table.best_draft_tokens)]
        print("| " + " | ".join(row) + " |")
    first = tables[0]
    step, three = first.points[0].step_s, first.at(3)
    assert three is not None
    verify = three.verify_s
    print(f"\nt_step {step * 1e3:.2f} ms; t_verify(3) {verify * 1e3:.2f} ms ({verify / step:.2f} steps)")
    print("\nAssumptions:")
    for line in first.assumptions:
        print(f"- {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
