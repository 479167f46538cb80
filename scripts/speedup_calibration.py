"""Does the speed-up model, calibrated on one k, predict the others? On the bundled trained pair, with vLLM's own
speculative decoding (its CPU build here: the figures are that build's, not a GPU's).

    .venv/bin/python scripts/speedup_calibration.py [--out out/speedup] [--calibrate-on 3] [--k 1,2,3,4]
                                                    [--repeats 3] [--engine-python .venv-vllm/bin/python]

One run: the 12 held-out prompts' target choices are captured (``eaglequant capture``), the source draft and its FP8
conversion are predicted for every k from one chain (``verify --inputs``), and ``eaglequant accept`` measures both
at each k of ``--k``, one k a call (the target alone, the source draft, the FP8 draft: three engine processes),
``--repeats`` times over. On a shared machine an engine process's speed moves from one process to the next (by a
quarter here), more than a draft's effect, so the figures compared are medians over processes: the target alone's
decode seconds a token over every call, each draft's at each k over the repeats. The model's overheads are fitted
to the source draft's median round at ``--calibrate-on`` alone; then it predicts every draft at every k from the
*predicted* acceptance, set beside the speed-up those medians give. Prints a Markdown table
(docs/speedup-checks.md shows one) and writes the JSON of every call under --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAIR = ROOT / "fixtures" / "trained-pair"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "speedup")
    parser.add_argument("--k", default="1,2,3,4", help="the k accept measures, comma-separated")
    parser.add_argument("--calibrate-on", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engine-python", type=Path, default=None)
    parser.add_argument("--reuse", action="store_true", help="model the records an earlier run left under --out")
    args = parser.parse_args(argv)
    ks = [int(k) for k in args.k.split(",")]
    if args.calibrate_on not in ks:
        parser.error("--calibrate-on must be one of --k")

    from eaglequant import convert
    from eaglequant.api.acceptance import accept
    from eaglequant.capturing.transformers_capture import capture

    out: Path = args.out
    if args.reuse:
        reports = [json.loads(p.read_text()) for p in sorted(out.glob("accept-*.json"))]
        predicted = json.loads((out / "predicted.json").read_text())
        print(table(out / "fp8", reports, predicted, ks, args.calibrate_on, out))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    def said(what: str) -> None:
        print(f"[{time.monotonic() - started:.0f} s] {what}", file=sys.stderr)

    prompts = (PAIR / "prompts.jsonl").read_text(encoding="utf-8").splitlines()
    held_out = out / "heldout-prompts.jsonl"
    held_out.write_text("\n".join(prompts[len(prompts) // 2 :]) + "\n", encoding="utf-8")
    inputs = out / "captured.safetensors"
    inputs.unlink(missing_ok=True)  # captured anew: the tokens generated follow --max-tokens
    capture(PAIR / "target", PAIR / "draft", inputs, prompts=held_out, max_tokens=args.max_tokens)
    dst = out / "fp8"
    convert(PAIR / "draft", dst, scheme="fp8-per-channel", format="quark", target_config=PAIR / "target",
            overwrite=True)  # fmt: skip
    said("captured and converted")
    predicted = predicted_tables(dst, inputs, max(ks))
    (out / "predicted.json").write_text(json.dumps(predicted, indent=2))
    said("predicted")
    reports = []
    for repeat in range(1, args.repeats + 1):
        for k in ks:
            report = accept(
                [dst], target=PAIR / "target", source=PAIR / "draft", prompts=held_out, max_tokens=args.max_tokens,
                draft_tokens=k, engine_python=args.engine_python, record=False, temperatures=(),
                progress=lambda what, repeat=repeat: said(f"repeat {repeat}: serving {what}"),
            ).record().to_json()  # fmt: skip
            (out / f"accept-{repeat}-k{k}.json").write_text(json.dumps(report, indent=2))
            reports.append(report)
    said("measured")
    print(table(dst, reports, predicted, ks, args.calibrate_on, out))
    return 0


def predicted_tables(dst: Path, inputs: Path, up_to: int) -> dict[str, dict[int, float]]:
    """The predicted greedy acceptance length of the source draft and of ``dst`` as vLLM runs it, k = 1..``up_to``."""
    from eaglequant.api import verify

    prediction = verify(dst, source=PAIR / "draft", inputs=inputs, max_draft_tokens=up_to).acceptance
    if prediction is None:
        raise SystemExit(f"{dst}: acceptance was not predicted")
    return {"source": prediction.source_acceptance_by_draft_tokens(), "fp8": prediction.acceptance_by_draft_tokens()}


@dataclass(frozen=True)
class MedianRound:
    """A draft at one k as the medians over processes give it (what :func:`calibrate` reads)."""

    draft_tokens: int
    acceptance_length: float
    alone_seconds_per_token: float
    drafted_seconds_per_token: float


def table(dst: Path, reports: list[dict], predicted: dict, ks: list[int], calibrate_on: int, out: Path) -> str:
    from eaglequant import explain
    from eaglequant.measurement.speed import measured_speeds
    from eaglequant.speedup.model import calibrate, predict_speedup, stated_timing
    from eaglequant.speedup.target_step import target_weights

    target = target_weights(PAIR / "target")
    (cost,) = [r.round_cost for r in explain(dst, engines=["vllm"]).engines if r.round_cost is not None]
    drafts = {"source": cost.as_source(), "fp8": cost}
    labels = {"source": "source", str(dst): "fp8"}
    runs: dict[tuple[str, int], list] = {}
    alone: dict[int, float] = {}  # one per call: its target-alone run, keyed by the call
    for index, report in enumerate(reports):
        for m in measured_speeds(report):
            runs.setdefault((labels.get(m.label, m.label), m.draft_tokens), []).append(m)
            alone[index] = m.alone_seconds_per_token
    alone_median = statistics.median(alone.values())
    medians = {
        key: MedianRound(
            key[1],
            statistics.median(m.acceptance_length for m in found),
            alone_median,
            statistics.median(m.drafted_seconds_per_token for m in found),
        )
        for key, found in runs.items()
    }
    what = f"the source draft's median round at k = {calibrate_on}"
    timing = calibrate(target, drafts["source"], [medians[("source", calibrate_on)]], stated_timing(target), what)
    lines = [
        "| draft | k | acceptance predicted | measured | speed-up predicted | measured (medians) | each call's "
        "| error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    worst = 0.0
    for name, cost_of in drafts.items():
        lengths = {int(k): v for k, v in predicted[name].items() if int(k) in ks}
        model = predict_speedup(name, target, cost_of, lengths, timing)
        for point in model.points:
            median = medians[(name, point.draft_tokens)]
            measured = median.alone_seconds_per_token / median.drafted_seconds_per_token
            error = point.speedup / measured - 1
            calibrated = (name, point.draft_tokens) == ("source", calibrate_on)
            if not calibrated:
                worst = max(worst, abs(error))
            each = ", ".join(f"{m.speedup.value:.2f}" for m in runs[(name, point.draft_tokens)])
            lines.append(
                f"| {name} | {point.draft_tokens}{' (calibrated here)' if calibrated else ''} "
                f"| {point.acceptance_length:.3f} | {median.acceptance_length:.3f} | {point.speedup:.3f}× "
                f"| {measured:.3f}× | {each} | {error:+.1%} |"
            )
    rates = sorted(1 / seconds for seconds in alone.values())
    lines += [
        "",
        f"vLLM's CPU build; the target alone {rates[0]:.0f} to {rates[-1]:.0f} tokens/s over its {len(rates)} "
        f"processes (median {1 / alone_median:.0f}); fitted: {timing.target_overhead_s * 1e3:.3f} ms a target "
        f"forward, {timing.round_overhead_s * 1e3:.3f} ms a round and {timing.draft_overhead_s * 1e3:.3f} ms a draft "
        f"step (in the stated proportion); the largest error away from the calibration point: {worst:.1%} "
        f"(records: {out}/accept-*.json)",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
