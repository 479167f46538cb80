"""Does the speed-up model, calibrated at one concurrency, predict the others? On the bundled trained pair, with
vLLM's own speculative decoding (its CPU build here: the CPU is the accelerator, the figures that build's).

    .venv/bin/python scripts/speedup_concurrency.py [--out out/speedup-concurrency] [--concurrency 1,2,4,8]
        [--k 3] [--fit-at 1] [--repeats 3] [--max-prompts 24] [--max-tokens 96]
        [--bandwidth TB/s --peak TFLOPS | --measure-cpu] [--engine-python .venv-vllm/bin/python] [--reuse]

The source draft is converted to FP8 (``fp8-per-channel``, ``quark``); ``eaglequant accept --concurrency`` then
measures the target alone (before and after), the source draft and the FP8 draft at each k of ``--k``, one k a
call, ``--repeats`` times over: per C, a greedy pass of the prompts with at most C requests in flight. The figures
compared are medians over processes (an engine process's speed moves from one to the next on a shared machine).
The target forward's fixed cost and its cost a sequence are fitted to the target alone at every C, the round's
terms to the source draft at ``--fit-at`` alone; every other draft, k and C is predicted, from its acceptance
length at ``--fit-at`` (eaglequant/bench/concurrency.py). Prints a Markdown table and the fitted terms with their
residuals, and writes every call's record and ``result.json`` (everything) under --out.

The prompts are best a multiple of each C (24, the bundled set, is), so that every pass has C in flight until its
end; a C past the prompts is left out. The CPU's bandwidth and bf16 peak are stated (the defaults below, printed)
unless given or measured (``--measure-cpu``: a copy and a matmul in torch, once, printed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPT_TOKENS = 48  # the bundled prompts' length, about 150 characters each: a stated figure
PAIR = ROOT / "fixtures" / "trained-pair"


def main(argv: list[str] | None = None) -> int:
    from eaglequant.bench.concurrency import CPU_BANDWIDTH_TBS, CPU_PEAK_TFLOPS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "speedup-concurrency")
    parser.add_argument("--concurrency", default="1,2,4,8", help="the C accept measures, comma-separated")
    parser.add_argument("--k", default="3", help="the k accept measures, comma-separated (one call each)")
    parser.add_argument("--fit-at", type=int, default=None, help="the C the round's terms are fitted at (smallest)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-prompts", type=int, default=24)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--bandwidth", type=float, default=None, help=f"TB/s (stated: {CPU_BANDWIDTH_TBS})")
    parser.add_argument("--peak", type=float, default=None, help=f"bf16 TFLOPS (stated: {CPU_PEAK_TFLOPS})")
    parser.add_argument(
        "--context", type=int, default=None, help="tokens of cache a sequence reads (stated: 48 + --max-tokens / 2)"
    )
    parser.add_argument("--measure-cpu", action="store_true", help="measure the bandwidth and peak once, in torch")
    parser.add_argument("--engine-python", type=Path, default=None)
    parser.add_argument("--reuse", action="store_true", help="model the records an earlier run left under --out")
    args = parser.parse_args(argv)
    loads = [int(c) for c in args.concurrency.split(",")]
    ks = [int(k) for k in args.k.split(",")]
    fit_at = args.fit_at if args.fit_at is not None else min(loads)
    if fit_at not in loads:
        parser.error("--fit-at must be one of --concurrency")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    dst = out / "fp8"
    cpu = cpu_figures(args)
    context = args.context if args.context is not None else PROMPT_TOKENS + args.max_tokens // 2
    print(f"each sequence priced as reading {context} tokens of cache: "
          f"{'given' if args.context is not None else 'stated'}", file=sys.stderr)  # fmt: skip
    if args.reuse:
        reports = [json.loads(p.read_text()) for p in sorted(out.glob("accept-*.json"))]
    else:
        reports = measure(args, dst, loads, ks)
    from eaglequant.common.errors import InputError

    try:
        print(model(reports, dst, fit_at, cpu, out, context))
    except InputError as error:
        print(f"no result: {error}", file=sys.stderr)
        print("\n".join(withheld(reports)), file=sys.stderr)
        return 3
    return 0


def withheld(reports: list[dict]) -> list[str]:
    """Each call's target-alone drift at each C: what withholds its speed-ups when the machine did not hold still."""
    lines = []
    for index, report in enumerate(reports, 1):
        at = (report.get("target_alone") or {}).get("by_concurrency") or []
        drifts = ", ".join(f"C = {c['concurrency']}: {c['drift']:.0%}" for c in at if c.get("drift") is not None)
        codes = sorted({p["code"] for p in report.get("problems") or []})
        lines.append(f"call {index}: the target alone's drift between its runs {drifts}; problems {', '.join(codes)}")
    return lines


def cpu_figures(args: argparse.Namespace) -> dict:
    """The CPU's bandwidth and peak as priced, and where they came from (stated, given or measured)."""
    from eaglequant.bench.concurrency import CPU_BANDWIDTH_TBS, CPU_PEAK_TFLOPS, measured_cpu

    if args.measure_cpu:
        bandwidth, peak = measured_cpu()
        said = "measured once in torch (a 256 MiB copy, a 1024-square bf16 matmul; best of 5)"
    else:
        bandwidth = args.bandwidth if args.bandwidth is not None else CPU_BANDWIDTH_TBS
        peak = args.peak if args.peak is not None else CPU_PEAK_TFLOPS
        said = "given" if args.bandwidth is not None or args.peak is not None else "stated (not measured)"
    print(f"the CPU priced at {bandwidth:.4g} TB/s and {peak:.4g} bf16 TFLOPS: {said}", file=sys.stderr)
    return {"bandwidth_tbs": bandwidth, "peak_tflops": peak, "from": said}


def measure(args: argparse.Namespace, dst: Path, loads: list[int], ks: list[int]) -> list[dict]:
    """The FP8 conversion, then ``accept --concurrency`` at each k, ``--repeats`` times; each call's JSON kept."""
    from eaglequant import convert
    from eaglequant.api.acceptance import accept

    out: Path = args.out
    started = time.monotonic()

    def said(what: str) -> None:
        print(f"[{time.monotonic() - started:.0f} s] {what}", file=sys.stderr)

    convert(PAIR / "draft", dst, scheme="fp8-per-channel", format="quark", target_config=PAIR / "target",
            overwrite=True)  # fmt: skip
    said("converted")
    reports = []
    for repeat in range(1, args.repeats + 1):
        for k in ks:
            report = accept(
                [dst], target=PAIR / "target", source=PAIR / "draft", prompts=PAIR / "prompts.jsonl",
                max_prompts=args.max_prompts, max_tokens=args.max_tokens, draft_tokens=k, concurrency=loads,
                engine_python=args.engine_python, record=False, temperatures=(),
                progress=lambda what, repeat=repeat: said(f"repeat {repeat}: serving {what}"),
            ).record().to_json()  # fmt: skip
            (out / f"accept-{repeat}-k{k}.json").write_text(json.dumps(report, indent=2))
            reports.append(report)
    said("measured")
    return reports


def model(reports: list[dict], dst: Path, fit_at: int, cpu: dict, out: Path, context: int) -> str:
    from eaglequant import explain
    from eaglequant.bench.concurrency import cpu_accelerator, fit_and_predict, markdown, medians
    from eaglequant.speedup.target_step import target_weights

    target = target_weights(PAIR / "target")
    (cost,) = [r.round_cost for r in explain(dst, engines=["vllm"]).engines if r.round_cost is not None]
    found = medians(reports, {"source": "source", str(dst): "fp8"})
    timing, rows = fit_and_predict(found, target, {"source": cost.as_source(), "fp8": cost}, fit_at,
                                   cpu_accelerator(cpu["bandwidth_tbs"], cpu["peak_tflops"]), context)  # fmt: skip
    result = {
        "fit_at": fit_at,
        "cpu": cpu,
        "context": context,
        "calls": len(reports),
        "target_alone_seconds_a_step": {str(c): s for c, s in found.steps.items()},
        "target_alone_rates": {str(c): rs for c, rs in found.alone_rates.items()},
        "timing": timing.to_json(),
        "rows": [r.to_json() for r in rows],
    }
    (out / "result.json").write_text(json.dumps(result, indent=2))
    return markdown(timing, rows, found, fit_at) + f"\n\n(records: {out}/accept-*.json, everything: {out}/result.json)"


if __name__ == "__main__":
    raise SystemExit(main())
