"""What a smaller draft costs in acceptance, on the bundled trained pair: bytes per round against acceptance.

    .venv/bin/python scripts/draft_cost_table.py [--out out/draft-cost] [--size 512 --size 256 ...]
                                                 [--engine-python .venv-vllm/bin/python]

The 24 held-out prompts are split in two: the target's choices on the first half (``eaglequant capture``) are the
token counts a pruned vocabulary keeps; the second half is where every draft is predicted (greedy acceptance
replayed against the source draft, as ``verify --inputs`` does) and measured with vLLM's own speculative decoding
(``eaglequant accept``, k = 3, quantized drafts served dequantized). Drafts: FP8 of the decoder alone (the default),
with ``lm_head`` quantized too (ModelOpt, which vLLM runs quantized), ``lm_head`` in a scheme of its own (ModelOpt
MIXED_PRECISION), and pruned vocabularies under each. Bytes per
round are vLLM's (the model of ``eaglequant inspect``), against the source draft's. Prints a Markdown table
(docs/acceptance.md shows one) and what ``eaglequant search --max-acceptance-drop 0.05`` chooses on the same
inputs, and writes the JSON of every run under --out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAIR = ROOT / "fixtures" / "trained-pair"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "draft-cost")
    parser.add_argument("--size", type=int, action="append", default=[], help="pruned vocabulary size (repeatable)")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--engine-python", type=Path, default=None)
    args = parser.parse_args(argv)

    from eaglequant import convert, prune
    from eaglequant.api.acceptance import accept
    from eaglequant.capturing.transformers_capture import capture
    from eaglequant.search.smallest import search

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    def said(what: str) -> None:
        print(f"[{time.monotonic() - started:.0f} s] {what}", file=sys.stderr)

    prompts = (PAIR / "prompts.jsonl").read_text(encoding="utf-8").splitlines()
    half = len(prompts) // 2
    counted, held_out = out / "count-prompts.jsonl", out / "heldout-prompts.jsonl"
    counted.write_text("\n".join(prompts[:half]) + "\n", encoding="utf-8")
    held_out.write_text("\n".join(prompts[half:]) + "\n", encoding="utf-8")
    counts, inputs = out / "counts.safetensors", out / "captured.safetensors"
    for prompts_file, path in ((counted, counts), (held_out, inputs)):
        if not path.is_file():
            capture(PAIR / "target", PAIR / "draft", path, prompts=prompts_file, max_tokens=args.max_tokens)
    said("captured")

    drafts: list[tuple[str, Path]] = []
    # (scheme, format, lm_head: None kept, "" quantized in the scheme, or its own scheme)
    variants = [("fp8-per-channel", "quark", None), ("fp8-per-channel", "modelopt", "")]
    variants += [("nvfp4", "modelopt", ""), ("fp8-per-channel", "modelopt", "nvfp4")]
    variants += [("nvfp4", "modelopt", "fp8-per-channel")]
    sources = [("", PAIR / "draft")]
    for size in args.size or [1024, 512, 256]:
        pruned = prune(PAIR / "draft", out / f"pruned-{size}", size=size, counts=counts, overwrite=True)
        sources.append((f"vocab {size}, ", pruned.destination))
    for prefix, source in sources:
        for scheme, fmt, lm_head in variants:
            name = f"{prefix}{scheme} / {fmt}" + ("" if lm_head is None else f" + lm_head {lm_head}".rstrip())
            dst = out / name.replace(" / ", "-").replace(", ", "-").replace(" + ", "-").replace(" ", "")
            settings = (
                {"scheme_for": [f"lm_head={lm_head}"]} if lm_head else {"quantize": ["lm_head"] * (lm_head == "")}
            )
            convert(source, dst, scheme=scheme, format=fmt, target_config=PAIR / "target", overwrite=True, **settings)
            drafts.append((name, dst))
    said(f"converted {len(drafts)} drafts")
    predicted = {label: predicted_against_source(dst, inputs) for label, dst in drafts}
    said("predicted")
    measured = accept(
        [dst for _, dst in drafts],
        target=PAIR / "target",
        source=PAIR / "draft",
        prompts=held_out,
        max_tokens=args.max_tokens,
        engine_python=args.engine_python,
        record=False,
        progress=lambda what: said(f"serving {what}"),
    ).to_json()
    (out / "accept.json").write_text(json.dumps(measured, indent=2))
    (out / "predicted.json").write_text(json.dumps(predicted, indent=2))
    print(table(drafts, predicted, measured))
    from eaglequant.engines.target import read_target_config

    target_layers, _ = read_target_config(PAIR / "target")
    found = search(
        PAIR / "draft", out / "searched", inputs=inputs, counts=counts, max_acceptance_drop="0.05", overwrite=True,
        target_layers=target_layers,
    )  # fmt: skip
    chosen = "none" if found.chosen is None else found.chosen.candidate.label
    print(f"\n`eaglequant search --max-acceptance-drop 0.05`: {chosen}; {found.stopped} ({found.seconds:.0f} s)")
    said("done")
    return 0


def predicted_against_source(dst: Path, inputs: Path) -> dict:
    """The greedy acceptance of the unpruned BF16 source draft and of ``dst`` as vLLM runs it, on ``inputs``."""
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.prediction.predict import predict_written
    from eaglequant.record.as_recorded import open_written

    with open_written(dst, None, None) as (checkpoint, head, target), Checkpoint.open(PAIR / "draft") as source:
        prediction, why = predict_written(checkpoint, head, target, source, inputs, None)
    if prediction is None:
        raise SystemExit(f"{dst}: {why}")
    return prediction.record().to_json()


def bytes_per_round(dst: Path) -> tuple[int, int]:
    """vLLM's bytes per round of ``dst`` and of the unpruned BF16 source draft."""
    from eaglequant import explain, inspect

    (source,) = inspect(PAIR / "draft").round_costs
    cost = next(r.round_cost for r in explain(dst, engines=["vllm"]).engines if r.round_cost is not None)
    return cost.bytes_per_round, source.source_bytes_per_round


def table(drafts: list[tuple[str, Path]], predicted: dict[str, dict], measured: dict) -> str:
    from eaglequant.common.sizes import decimal_bytes
    from eaglequant.measurement.statistics import format_interval

    def interval(figure: dict, signed: bool = False) -> str:
        return format_interval(figure.get("value"), figure.get("low"), figure.get("high"), signed)

    head = ["draft", "bytes / round (vLLM)", "fewer", "predicted", "predicted Δ", "measured", "measured Δ"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    source = measured["source"]["modes"]["greedy"]
    first = next(iter(predicted.values()))
    _, source_bytes = bytes_per_round(drafts[0][1])
    row = ["source (BF16)", decimal_bytes(source_bytes), "1.00×", interval(first["source"]["acceptance_length"])]
    lines.append("| " + " | ".join([*row, "", interval(source["acceptance_length"]), ""]) + " |")
    for (label, dst), result in zip(drafts, measured["quantized"], strict=True):
        per_round, _ = bytes_per_round(dst)
        p, m = predicted[label], result["modes"]["greedy"]
        row = [label, decimal_bytes(per_round), f"{source_bytes / per_round:.2f}×"]
        row += [interval(p["quantized"]["acceptance_length"]), interval(p["difference"], signed=True)]
        row += [interval(m["acceptance_length"]), interval(m["difference"], signed=True)]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
