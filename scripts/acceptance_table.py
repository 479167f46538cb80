"""Predicted against measured acceptance for every built-in scheme on the bundled trained pair.

    .venv/bin/python scripts/acceptance_table.py [--out out/acceptance] [--max-prompts N] [--max-tokens N]
                                                 [--engine-python .venv-vllm/bin/python] [--fault NAME ...]

For each built-in scheme and each format vLLM loads it in: convert the bundled draft, predict its greedy
acceptance with ``verify --inputs`` on inputs captured from the bundled target (``eaglequant capture``), and
measure it with vLLM's own speculative decoding (``eaglequant accept``, every draft in one call so the target
alone and the source draft run once). Prints a Markdown table (docs/acceptance.md shows one) and writes the
JSON of every run under --out. ``--fault`` adds planted faults (see ``tests/prediction/faults.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAIR = ROOT / "fixtures" / "trained-pair"
sys.path.insert(0, str(ROOT))  # the planted faults are test equipment: tests/prediction/faults.py


def cells() -> list[tuple[str, str]]:
    from eaglequant.engines import ENGINES
    from eaglequant.engines.support import support
    from eaglequant.formats import FORMATS
    from eaglequant.layouts.head import Attention
    from eaglequant.schemes.model import builtin_scheme_names, load_scheme

    found = []
    for name in builtin_scheme_names():
        scheme = load_scheme(name)
        for fmt in FORMATS.values():
            if not fmt.supports(scheme):
                continue
            verdict = support(scheme.kinds, fmt.name, ENGINES["vllm"], Attention.MHA)
            if verdict is not None and verdict.loads:
                found.append((name, fmt.name))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "acceptance")
    parser.add_argument("--max-prompts", type=int, default=None)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--engine-python", type=Path, default=None)
    parser.add_argument("--fault", action="append", default=[], help="planted fault to add (repeatable)")
    parser.add_argument("--only", action="append", default=[], help="scheme/format to run (repeatable)")
    args = parser.parse_args(argv)

    from eaglequant import convert, verify
    from eaglequant.api.acceptance import accept
    from eaglequant.capturing.transformers_capture import capture
    from tests.prediction.faults import FAULTS, plant

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    captured = out / "captured.safetensors"
    if not captured.is_file():
        capture(PAIR / "target", PAIR / "draft", captured, max_prompts=args.max_prompts, max_tokens=args.max_tokens)
    print(f"[{time.monotonic() - started:.0f} s] captured {captured}", file=sys.stderr)
    drafts: list[tuple[str, Path]] = []
    chosen = [c for c in cells() if not args.only or f"{c[0]}/{c[1]}" in args.only]
    for scheme, fmt in chosen:
        dst = out / f"{scheme}-{fmt}"
        convert(PAIR / "draft", dst, scheme=scheme, format=fmt, overwrite=True)
        drafts.append((f"{scheme} / {fmt}", dst))
    for name in args.fault:
        fault = FAULTS[name]
        dst = out / f"fault-{name}"
        convert(PAIR / "draft", dst, scheme=fault.scheme, format=fault.format, overwrite=True, **fault.options)
        plant(dst, name)
        drafts.append((f"fault: {name}", dst))
    predicted = {}
    for label, dst in drafts:
        report = verify(dst, source=PAIR / "draft", inputs=captured)
        predicted[label] = report.to_json()
        (dst.parent / f"{dst.name}.verify.json").write_text(json.dumps(predicted[label], indent=2))
        print(f"[{time.monotonic() - started:.0f} s] verified {label}: {report.verdict}", file=sys.stderr)
    measured = (
        accept(
            [dst for _, dst in drafts],
            target=PAIR / "target",
            source=PAIR / "draft",
            max_prompts=args.max_prompts,
            max_tokens=args.max_tokens,
            engine_python=args.engine_python,
            record=False,
            progress=lambda what: print(f"[{time.monotonic() - started:.0f} s] serving {what}", file=sys.stderr),
        )
        .record()
        .to_json()
    )
    (out / "accept.json").write_text(json.dumps(measured, indent=2))
    print(table(drafts, predicted, measured))
    print(f"[{time.monotonic() - started:.0f} s] done", file=sys.stderr)
    return 0


def _lossless(record: dict) -> str:
    ties = f" + {record['near_ties']} near-tie" if record.get("near_ties") else ""
    return f"{record['equal']}/{record['prompts']}{ties}"


def _interval(figure: dict[str, float], signed: bool = False) -> str:
    from eaglequant.measurement.statistics import format_interval

    return format_interval(figure.get("value"), figure.get("low"), figure.get("high"), signed)


def table(drafts: list[tuple[str, Path]], predicted: dict[str, dict], measured: dict) -> str:
    source = measured["source"]["modes"]
    modes = list(source)
    head = ["draft", "predicted (greedy)", "predicted Δ", "verify"]
    head += [f"measured {m}" for m in modes] + [f"measured Δ {m}" for m in modes] + ["greedy = target"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    src_lossless = measured["source"]["lossless"]
    src_prediction = next(iter(predicted.values())).get("acceptance") or {}
    row = ["source (BF16)", _interval(src_prediction["source"]["acceptance_length"]) if src_prediction else "", "", ""]
    row += [_interval(source[m]["acceptance_length"]) for m in modes] + [""] * len(modes)
    row.append(_lossless(src_lossless))
    lines.append("| " + " | ".join(row) + " |")
    for (label, _), result in zip(drafts, measured["quantized"], strict=True):
        p = predicted[label].get("acceptance") or {}
        row = [
            label,
            _interval(p["quantized"]["acceptance_length"]) if p else "",
            _interval(p["difference"], signed=True) if p else "",
            predicted[label]["verdict"],
        ]
        row += [_interval(result["modes"][m]["acceptance_length"]) for m in modes]
        row += [_interval(result["modes"][m]["difference"], signed=True) for m in modes]
        row.append(_lossless(result["lossless"]))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
