"""Measured against predicted on the MLA pair (``fixtures/trained-pair-mla``): MLA on both sides, served by vLLM.

    .venv/bin/python scripts/mla_pair_table.py [--out out/mla-pair] [--max-tokens 96] [--no-search] [--pair DIR]
                                               [--engine-python .venv-vllm/bin/python]

The 24 held-out prompts are split in two, as ``draft_cost_table.py`` splits them: the target's choices on the
first half (``eaglequant capture``) are the token counts a pruned vocabulary keeps; the second half is where every
draft is predicted (greedy acceptance replayed against the BF16 source draft, as ``verify --inputs`` does) and
measured with vLLM's own speculative decoding (``eaglequant accept``, k = 3, quantized drafts served dequantized).
Drafts: FP8 per channel (Quark), NVFP4 (ModelOpt), and the draft pruned to 1/2 and 1/4 of its vocabulary. Prints a
Markdown table (docs/mla.md shows one), then what ``eaglequant search --max-acceptance-drop 0.05 --counts``
chooses on the same inputs, measured by ``accept``; writes the JSON of every run under --out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAIR = ROOT / "fixtures" / "trained-pair-mla"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "mla-pair")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--engine-python", type=Path, default=None)
    parser.add_argument("--no-search", action="store_true")
    parser.add_argument("--pair", type=Path, default=PAIR, help="the pair's directory (target/, draft/, prompts.jsonl)")
    args = parser.parse_args(argv)

    from eaglequant import convert, prune
    from eaglequant.api.acceptance import accept
    from eaglequant.capturing.transformers_capture import capture

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    def said(what: str) -> None:
        print(f"[{time.monotonic() - started:.0f} s] {what}", file=sys.stderr, flush=True)

    source, target = args.pair / "draft", args.pair / "target"
    prompts = (args.pair / "prompts.jsonl").read_text(encoding="utf-8").splitlines()
    half = len(prompts) // 2
    counted, held_out = out / "count-prompts.jsonl", out / "heldout-prompts.jsonl"
    counted.write_text("\n".join(prompts[:half]) + "\n", encoding="utf-8")
    held_out.write_text("\n".join(prompts[half:]) + "\n", encoding="utf-8")
    counts, inputs = out / "counts.safetensors", out / "captured.safetensors"
    for prompts_file, path in ((counted, counts), (held_out, inputs)):
        if not path.is_file():
            capture(target, source, path, prompts=prompts_file, max_tokens=args.max_tokens)
    said("captured")
    drafts = [
        ("fp8-per-channel / quark", convert(source, out / "fp8", scheme="fp8-per-channel", format="quark",
                                            target_config=target, overwrite=True).destination),
        ("nvfp4 / modelopt", convert(source, out / "nvfp4", scheme="nvfp4", format="modelopt",
                                     target_config=target, overwrite=True).destination),
    ]  # fmt: skip
    predicted = {label: predicted_against_source(dst, source, inputs) for label, dst in drafts}
    vocab = int(json.loads((source / "config.json").read_text())["draft_vocab_size"])
    for size in (vocab // 2, vocab // 4):  # predicted by prune --inputs: the same chain, against the source
        pruned = prune(source, out / f"pruned-{size}", size=size, counts=counts, inputs=inputs, overwrite=True)
        drafts.append((f"pruned to {size} tokens (BF16)", pruned.destination))
        predicted[drafts[-1][0]] = pruned.prediction.to_json()
    said(f"made and predicted {len(drafts)} drafts")
    (out / "predicted.json").write_text(json.dumps(predicted, indent=2))
    measured = accept(
        [dst for _, dst in drafts], target=target, source=source, prompts=held_out, max_tokens=args.max_tokens,
        engine_python=args.engine_python, record=False, progress=lambda what: said(f"serving {what}"),
    ).to_json()  # fmt: skip
    (out / "accept.json").write_text(json.dumps(measured, indent=2))
    print(table(drafts, predicted, measured))
    if not args.no_search:
        searched(source, target, inputs, counts, held_out, out, args, said)
    said("done")
    return 0


def searched(source: Path, target: Path, inputs: Path, counts: Path, held_out: Path, out: Path, args, said) -> None:
    """``search --max-acceptance-drop 0.05 --counts`` on the captured inputs, and its pick measured."""
    from eaglequant.api.acceptance import accept
    from eaglequant.engines.target import read_target_config
    from eaglequant.search.smallest import search

    target_layers, _ = read_target_config(target)
    found = search(
        source, out / "searched", inputs=inputs, counts=counts, max_acceptance_drop="0.05", overwrite=True,
        target_layers=target_layers,
    )  # fmt: skip
    said("searched")
    if found.chosen is None:
        print(f"\n`eaglequant search --max-acceptance-drop 0.05`: none; {found.stopped} ({found.seconds:.0f} s)")
        return
    predicted = predicted_against_source(out / "searched", source, inputs)
    measured = accept(
        [out / "searched"], target=target, source=source, prompts=held_out, max_tokens=args.max_tokens,
        engine_python=args.engine_python, record=False, progress=lambda what: said(f"serving {what}"),
    ).to_json()  # fmt: skip
    (out / "search-accept.json").write_text(json.dumps({"predicted": predicted, "measured": measured}, indent=2))
    m = measured["quantized"][0]["modes"]["greedy"]
    print(
        f"\n`eaglequant search --max-acceptance-drop 0.05 --counts`: {found.chosen.candidate.label}; {found.stopped} "
        f"({found.seconds:.0f} s); predicted {fmt(predicted['quantized']['acceptance_length'])}, "
        f"Δ {fmt(predicted['difference'], True)}; measured {fmt(m['acceptance_length'])}, "
        f"Δ {fmt(m['difference'], True)}"
    )


def predicted_against_source(dst: Path, source: Path, inputs: Path) -> dict:
    """The greedy acceptance of the unpruned BF16 source draft and of ``dst`` as vLLM runs it, on ``inputs``."""
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.prediction.predict import predict_written
    from eaglequant.record.as_recorded import open_written

    with open_written(dst, None, None) as (checkpoint, head, target), Checkpoint.open(source) as src:
        prediction, why = predict_written(checkpoint, head, target, src, inputs, None)
    if prediction is None:
        raise SystemExit(f"{dst}: {why}")
    return prediction.record().to_json()


def fmt(figure: dict, signed: bool = False) -> str:
    from eaglequant.measurement.statistics import format_interval

    return format_interval(figure.get("value"), figure.get("low"), figure.get("high"), signed)


def table(drafts: list[tuple[str, Path]], predicted: dict[str, dict], measured: dict) -> str:
    head = ["draft", "predicted", "predicted Δ", "measured", "measured Δ", "per position (measured)", "greedy = target"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def agreed(result: dict) -> str:
        same = result["lossless"]
        ties = f" + {same['near_ties']} near-ties" if same["near_ties"] else ""
        return f"{same['equal']}/{same['prompts']}{ties}"

    def positions(mode: dict) -> str:
        rates = mode.get("per_position") or []
        return " / ".join(f"{r['value']:.2f}" if isinstance(r, dict) else f"{r:.2f}" for r in rates)

    source = measured["source"]["modes"]["greedy"]
    first = next(iter(predicted.values()))
    row = ["source (BF16)", fmt(first["source"]["acceptance_length"]), "", fmt(source["acceptance_length"]), ""]
    lines.append("| " + " | ".join([*row, positions(source), agreed(measured["source"])]) + " |")
    for (label, _), result in zip(drafts, measured["quantized"], strict=True):
        p, m = predicted[label], result["modes"]["greedy"]
        row = [label, fmt(p["quantized"]["acceptance_length"]), fmt(p["difference"], True)]
        row += [fmt(m["acceptance_length"]), fmt(m["difference"], True), positions(m), agreed(result)]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
