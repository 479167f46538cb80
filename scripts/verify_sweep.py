"""The long sweep behind ``verify``'s promise: no correct conversion fails, every planted fault does.

    .venv/bin/python scripts/verify_sweep.py                      # fixtures + Kimi-K2.5 heads at 1/8, 20 seeds
    .venv/bin/python scripts/verify_sweep.py --heads kimi-llama-div8 --seeds 5 --json
    .venv/bin/python scripts/verify_sweep.py --heads kimi-llama,kimi-mla --divisor 1 --seeds 2   # full size
    .venv/bin/python scripts/verify_sweep.py --verdicts before.json        # every (head, cell, seed) verdict kept
    .venv/bin/python scripts/verify_sweep.py --compare before.json         # ... and any verdict that changed since

Every head (the bundled fixtures, and synthetic Kimi-K2.5 Llama and MLA heads with every dimension divided by
``--divisor``; 1: the full-size heads of ``bench convert``, from its cache) is converted once per (scheme, format)
a format stores, then verified against its source with
``--seeds`` seeds. A correct conversion that fails is a false failure; the script exits 1 if there is any. CI
runs a subset (tests/verification/test_fidelity.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def heads(names: list[str], divisor: int, work: Path) -> dict[str, Path]:
    from eaglequant.bench.heads import cached_head, kimi_llama_scaled, kimi_mla, write_head

    found: dict[str, Path] = {}
    for name in names:
        if name == "fixtures":
            found.update({p.name: p for p in sorted((ROOT / "fixtures").iterdir()) if (p / "config.json").is_file()})
            continue
        if divisor == 1:  # full size: the heads bench convert generates once and caches
            found[name] = cached_head(name, Path.home() / ".cache" / "eaglequant" / "bench")
            continue
        head = {"kimi-llama": kimi_llama_scaled, "kimi-mla": kimi_mla}[name.removesuffix(f"-div{divisor}")](divisor)
        directory = work / head.name
        directory.mkdir()
        write_head(head, directory)
        found[head.name] = directory
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heads", default="fixtures,kimi-llama,kimi-mla", help="comma-separated")
    parser.add_argument("--divisor", type=int, default=8, help="divides the Kimi heads' dimensions")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--schemes", default="", help="comma-separated built-in schemes (default: all)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--verdicts", type=Path, help="write every (head, scheme, format, seed) verdict here")
    parser.add_argument("--compare", type=Path, help="a --verdicts file: report (and exit 1 on) any verdict changed")
    args = parser.parse_args(argv)

    from eaglequant import convert, verify
    from eaglequant.common.errors import InputError
    from eaglequant.formats import stored_cells

    chosen = set(filter(None, args.schemes.split(",")))

    rows = []
    verdicts: dict[str, str] = {}  # "head scheme format seed" -> verdict
    with tempfile.TemporaryDirectory(prefix="verify-sweep-") as tmp:
        work = Path(tmp)
        for name, source in heads(args.heads.split(","), args.divisor, work).items():
            for scheme, fmt in stored_cells():
                if chosen and scheme not in chosen:
                    continue
                dst = work / f"{name}-{scheme}-{fmt}"
                try:  # the target's layer count: a native fp8 config names modules exactly (vLLM)
                    convert(source, dst, scheme=scheme, format=fmt, target_layers=61)
                except InputError as exc:
                    if "nothing would be quantized" not in str(exc):
                        raise
                    continue  # block FP8 on a head without a 128-aligned linear: refused, as it should be
                started = time.perf_counter()
                reports = [verify(dst, source=source, seed=seed) for seed in range(args.seeds)]
                failures = [(seed, r.problems) for seed, r in enumerate(reports) if r.verdict != "passed"]
                tvs = [r.fidelity.shift.mean_tv for r in reports if r.fidelity and r.fidelity.shift]
                agreement = [r.fidelity.top1_agreement for r in reports if r.fidelity and r.fidelity.top1_agreement]
                verdicts.update({f"{name} {scheme} {fmt} {seed}": str(r.verdict) for seed, r in enumerate(reports)})
                rows.append(
                    {
                        "head": name,
                        "scheme": scheme,
                        "format": fmt,
                        "seeds": args.seeds,
                        "false_failures": len(failures),
                        "first_failure": failures[0] if failures else None,
                        "max_mean_tv": max(tvs) if tvs else None,
                        "min_top1_agreement": min(agreement) if agreement else None,
                        "seconds_per_verify": (time.perf_counter() - started) / args.seeds,
                    }
                )
                shutil.rmtree(dst, ignore_errors=True)
                if not args.json:
                    row = rows[-1]
                    tv = "—" if row["max_mean_tv"] is None else f"{row['max_mean_tv']:.4f}"
                    print(
                        f"{name:24} {scheme:16} {fmt:19} false failures {row['false_failures']}/{args.seeds}  "
                        f"max mean TV {tv}  {row['seconds_per_verify']:.2f} s/verify",
                        flush=True,
                    )
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
    if args.verdicts:
        args.verdicts.write_text(json.dumps(verdicts, indent=1) + "\n", encoding="utf-8")
    changed = _changed(verdicts, args.compare) if args.compare else []
    for line in changed:
        print(f"verdict changed: {line}", file=sys.stderr)
    return 1 if changed or any(row["false_failures"] for row in rows) else 0


def _changed(verdicts: dict[str, str], earlier: Path) -> list[str]:
    """Each (head, scheme, format, seed) both runs verified whose verdict differs, as "key: before -> now"."""
    before = json.loads(earlier.read_text(encoding="utf-8"))
    return [f"{key}: {before[key]} -> {now}" for key, now in sorted(verdicts.items()) if before.get(key, now) != now]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
