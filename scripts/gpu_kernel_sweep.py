"""Sweep the fused kernel's launch configurations at decode sizes; report the fastest correct one per kernel, shape, M.

    PYTHONPATH=$PWD python3 scripts/gpu_kernel_sweep.py [--device cuda] [--tiny] --json sweep.json --md sweep.md

For every kernel ``bench kernels`` times, on the Kimi-K2.5 head's shapes, at M = 1, 4, 16: each configuration (tile
sizes, split-K, warps, stages) first runs once and its output is compared with the torch reference (float32 matmul
of the dequantized weight; allowed: 1e-4 of the output's largest magnitude); a configuration that is wrong or fails
to compile is a row saying so and is not timed. Correct ones are timed as one CUDA graph of calls each reading a
different copy of the weights (at least 256 MB in all, so the 50 MB L2 cache holds none of a call's weights when it
runs: as in decoding, where the other layers' weights pass through it), beside torch's bf16 matmul timed the same way.
``--device cpu --tiny`` runs the plumbing under the Triton interpreter (tiny shapes; the times mean nothing).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from eaglequant.bench.kernels import KERNELS, KIMI_SHAPES, TINY_SHAPES, random_stored  # noqa: E402
from eaglequant.kernels import reference_linear  # noqa: E402

if TYPE_CHECKING:  # imported where used: Triton reads TRITON_INTERPRET when the kernel module is imported
    from eaglequant.kernels.triton_gemm import LaunchConfig

TOLERANCE = 1e-4
COLD_BYTES = 256 << 20
M_VALUES = (1, 4, 16)
SPLITS = (1, 2, 4, 8)
# (block_m, block_n, block_k, num_warps, num_stages), split-K swept for each; the first is run 1's launch. (Run 2 also
# timed tiles of 1 and 4 rows summed on the CUDA cores instead of tl.dot: 3 to 20 times slower, so gone.)
DOT_TILES = [(16, 64, 64, 4, 3), (16, 64, 128, 4, 3), (16, 128, 128, 8, 3), (16, 64, 128, 4, 5)]
TILES = {1: DOT_TILES, 4: DOT_TILES, 16: DOT_TILES}


GOALS_FIRST = ["nvfp4-w4a16", "fp8-w8a8", "fp8-w8a16", "mxfp4-w4a16"]
# Small shapes that Triton specialises as it does the head's (every stride a multiple of 16, or, for a 128-column
# block scale's row, not)
WARM_SHAPES = [(128, 2048), (128, 7168)]


def compile_all(kernels: list[str], device: str, generator: torch.Generator, shapes: list[tuple[int, int]]) -> None:
    from eaglequant.kernels.triton_gemm import LaunchConfig, triton_linear

    for kernel in kernels:
        started = time.perf_counter()
        for n, k in shapes:
            stored = random_stored(kernel, n, k, device, generator)
            for m, tiles in TILES.items():
                x = torch.randn(m, k, generator=generator, device=device).to(torch.bfloat16)
                for tile in tiles:
                    try:
                        triton_linear(x, stored, LaunchConfig(tile[0], tile[1], tile[2], 1, tile[3], tile[4]))
                    except Exception as exc:  # the timing process reports it
                        print(f"{kernel} {tile}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
        print(f"{kernel}: compiled in {time.perf_counter() - started:.1f} s", flush=True)


def graph_ms(calls: list[Callable[[], object]], device: str, repeats: int = 5) -> float:
    """Milliseconds per call: ``calls`` captured in one CUDA graph, the median of ``repeats`` replays."""
    if device != "cuda":
        started = time.perf_counter()
        for call in calls:
            call()
        return (time.perf_counter() - started) / len(calls) * 1e3
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for call in calls[:2]:
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / len(calls))
    return statistics.median(times)


def copies_for(stored_bytes: int, device: str) -> int:
    return max(4, -(-COLD_BYTES // stored_bytes)) if device == "cuda" else 2


def sweep_one(kernel: str, shape: tuple[str, int, int], device: str, generator: torch.Generator) -> list[dict]:
    from eaglequant.kernels.triton_gemm import LaunchConfig, triton_linear

    name, n, k = shape
    stored = random_stored(kernel, n, k, device, generator)
    stored_bytes = sum(
        t.numel() * t.element_size()
        for t in (stored.weight, stored.channel_scale, stored.block_scale, stored.zero_point)
        if t is not None
    )
    copies = [stored] + [
        random_stored(kernel, n, k, device, generator) for _ in range(copies_for(stored_bytes, device) - 1)
    ]
    dequantized = stored.dequantize()
    rows = []
    for m in M_VALUES:
        x = torch.randn(m, k, generator=generator, device=device).to(torch.bfloat16)
        expected = reference_linear(x, stored, dequantized)
        bound = TOLERANCE * float(expected.abs().max())
        for tile in TILES[m]:
            for split in SPLITS:
                config = LaunchConfig(tile[0], tile[1], tile[2], split, tile[3], tile[4])
                row: dict[str, Any] = {"kernel": kernel, "shape": name, "n": n, "k": k, "m": m,
                                       "config": config.label(), "bytes": stored_bytes,
                                       "launch": [tile[0], tile[1], tile[2], split, tile[3], tile[4]]}  # fmt: skip
                try:
                    got = triton_linear(x, stored, config)
                    error = float((got - expected).abs().max())
                    if not error <= bound:
                        row |= {"status": "wrong", "error": error, "bound": bound}
                    else:
                        calls = [lambda s=s, x=x, c=config: triton_linear(x, s, c) for s in copies]
                        row |= {"status": "ok", "ms": graph_ms(calls, device), "error": error}
                except Exception as exc:  # a config that fails is a row, and the sweep goes on
                    row |= {"status": "failed", "why": f"{type(exc).__name__}: {str(exc)[:300]}"}
                    traceback.print_exc(limit=2)
                rows.append(row)
    return rows


def bf16_rows(shape: tuple[str, int, int], device: str, generator: torch.Generator) -> list[dict]:
    name, n, k = shape
    dense_bytes = n * k * 2
    weights = [(torch.randn(n, k, generator=generator, device=device) * 0.05).to(torch.bfloat16)
               for _ in range(copies_for(dense_bytes, device))]  # fmt: skip
    rows = []
    for m in M_VALUES:
        x = torch.randn(m, k, generator=generator, device=device).to(torch.bfloat16)
        calls = [lambda w=w, x=x: torch.matmul(x, w.T) for w in weights]
        rows.append({"kernel": "torch-bf16", "shape": name, "n": n, "k": k, "m": m, "config": "-",
                     "bytes": dense_bytes, "status": "ok", "ms": graph_ms(calls, device)})  # fmt: skip
    del weights
    return rows


def best_rows(rows: list[dict]) -> dict[tuple[str, str, int], dict]:
    best: dict[tuple[str, str, int], dict] = {}
    for row in rows:
        key = (row["kernel"], row["shape"], row["m"])
        if row["status"] == "ok" and (key not in best or row["ms"] < best[key]["ms"]):
            best[key] = row
    return best


def markdown(rows: list[dict], device: str, copy_gbps: float) -> str:
    from eaglequant.kernels.triton_gemm import LaunchConfig

    best = best_rows(rows)
    bf16 = {(r["shape"], r["m"]): r["ms"] for r in rows if r["kernel"] == "torch-bf16"}
    lines = [
        f"# Launch sweep ({device}; copy bandwidth {copy_gbps:.0f} GB/s)",
        "",
        "Each call timed in a CUDA graph, weights cold in L2 (see scripts/gpu_kernel_sweep.py). Per kernel, shape and "
        "M: the fastest correct configuration, its µs, its speed-up over torch bf16 timed the same way, the percent "
        "of the copy bandwidth its weight bytes reach, and the default configuration's µs.",
        "",
        "| kernel | shape | M | best config | µs | × bf16 | % copy bw | run 1's launch µs | default µs |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (kernel, shape, m), row in sorted(best.items()):
        if kernel == "torch-bf16":
            continue
        run1 = _micros(rows, kernel, shape, m, LaunchConfig(16, 64, 64, 1, 4, 3).label())
        default = _micros(rows, kernel, shape, m, _default_launch(kernel, m).label())
        percent = 100 * row["bytes"] / (row["ms"] * 1e-3) / 1e9 / copy_gbps
        lines.append(
            f"| {kernel} | {shape} | {m} | {row['config']} | {row['ms'] * 1e3:.1f} | "
            f"{bf16[(shape, m)] / row['ms']:.2f}× | {percent:.0f}% | {run1} | {default} |"
        )
    failed = [r for r in rows if r["status"] != "ok"]
    lines += ["", f"Configurations wrong or failed: {len(failed)} of {len(rows)}"]
    lines += [f"- {r['kernel']} {r['shape']} M={r['m']} {r['config']}: {r['status']} "
              f"{r.get('why', r.get('error', ''))}" for r in failed[:40]]  # fmt: skip
    lines += ["", "Per kernel and M, the one configuration least slow over all shapes (sum of µs / each shape's best):",
              "", "| kernel | M | config | mean slowdown vs per-shape best |", "|---|---|---|---|"]  # fmt: skip
    for kernel in sorted({r["kernel"] for r in rows} - {"torch-bf16"}):
        for m in M_VALUES:
            lines.append(_overall(rows, kernel, m))
    return "\n".join(lines) + "\n"


def _default_launch(kernel: str, m: int) -> LaunchConfig:
    from eaglequant.kernels.triton_gemm import default_config
    from eaglequant.kinds import ACTIVATION_KINDS, WEIGHT_KINDS

    kinds = KERNELS[kernel]
    quantizes = kinds.activation is not None and ACTIVATION_KINDS[kinds.activation].simulated
    return default_config(m, WEIGHT_KINDS[kinds.weight].kernel_layout, quantizes)


def _micros(rows: list[dict], kernel: str, shape: str, m: int, label: str) -> str:
    for row in rows:
        if (row["kernel"], row["shape"], row["m"], row["config"]) == (kernel, shape, m, label):
            return f"{row['ms'] * 1e3:.1f}" if row["status"] == "ok" else row["status"]
    return "not run"


def overall_choice(rows: list[dict], kernel: str, m: int) -> tuple[list[int], float] | None:
    """The launch correct on every shape whose mean time over each shape's best is least, and that mean."""
    best = best_rows(rows)
    ratios: dict[str, list[float]] = {}
    launches: dict[str, list[int]] = {}
    for row in rows:
        if row["kernel"] == kernel and row["m"] == m and row["status"] == "ok":
            ratios.setdefault(row["config"], []).append(row["ms"] / best[(kernel, row["shape"], m)]["ms"])
            launches[row["config"]] = row["launch"]
    shapes = len({r["shape"] for r in rows if r["kernel"] == kernel})
    complete = {c: sum(v) / len(v) for c, v in ratios.items() if len(v) == shapes}
    if not complete:
        return None
    config = min(complete, key=complete.__getitem__)
    return launches[config], complete[config]


def _overall(rows: list[dict], kernel: str, m: int) -> str:
    from eaglequant.kernels.triton_gemm import LaunchConfig

    choice = overall_choice(rows, kernel, m)
    if choice is None:
        return f"| {kernel} | {m} | none correct on every shape | |"
    return f"| {kernel} | {m} | {LaunchConfig(*choice[0]).label()} | {choice[1]:.2f} |"


def bench_choices(sweep: dict, device: str, generator: torch.Generator) -> dict:
    """Each kernel at each M launched as :func:`overall_choice` says on every shape, timed as ``bench kernels``
    times (triton's do_bench, L2 flushed before each call), beside torch's bf16 matmul."""
    from eaglequant.bench.kernels import _timer
    from eaglequant.kernels.triton_gemm import LaunchConfig, triton_linear

    timer = _timer(device)
    rows = sweep["rows"]
    chosen = {(kernel, m): overall_choice(rows, kernel, m) for kernel in KERNELS for m in M_VALUES}
    out = []
    for name, n, k in TINY_SHAPES if device != "cuda" else KIMI_SHAPES:
        dense = (torch.randn(n, k, generator=generator, device=device) * 0.05).to(torch.bfloat16)
        stored = {kernel: random_stored(kernel, n, k, device, generator) for kernel in KERNELS}
        for m in M_VALUES:
            x = torch.randn(m, k, generator=generator, device=device).to(torch.bfloat16)
            bf16_ms = timer(lambda x=x, w=dense: torch.matmul(x, w.T))
            for kernel in KERNELS:
                choice = chosen[(kernel, m)]
                if choice is None:
                    continue
                config = LaunchConfig(*choice[0])
                ms = timer(lambda x=x, s=stored[kernel], c=config: triton_linear(x, s, c))
                weight_bytes = sum(t.numel() * t.element_size() for t in
                                   (stored[kernel].weight, stored[kernel].channel_scale, stored[kernel].block_scale,
                                    stored[kernel].zero_point) if t is not None)  # fmt: skip
                out.append({"kernel": kernel, "shape": name, "m": m, "config": config.label(), "ms": ms,
                            "bf16_ms": bf16_ms, "bytes": weight_bytes})  # fmt: skip
        del dense, stored
    return {"copy_gbps": sweep["copy_gbps"], "rows": out}


def choice_markdown(choice: dict) -> str:
    rows, copy_gbps = choice["rows"], choice["copy_gbps"]
    kernels = list(dict.fromkeys(r["kernel"] for r in rows))
    lines = [
        "# The sweep's choices, timed as `bench kernels` times",
        "",
        "Per kernel and M the launch least slow over every shape (sweep.md's last table), timed with triton's "
        "do_bench (L2 flushed before each call), beside torch bf16 timed the same way. Cell: × bf16 (percent of the "
        f"copy bandwidth, {copy_gbps:.0f} GB/s, the weight bytes reach).",
        "",
        "| shape | M | bf16 µs | " + " | ".join(kernels) + " |",
        "|---|---|---|" + "---|" * len(kernels),
    ]
    keys = list(dict.fromkeys((r["shape"], r["m"]) for r in rows))
    for shape, m in sorted(keys, key=lambda key: (key[1], keys.index(key))):
        cells = {r["kernel"]: r for r in rows if (r["shape"], r["m"]) == (shape, m)}
        bf16 = next(iter(cells.values()))["bf16_ms"]
        line = f"| {shape} | {m} | {bf16 * 1e3:.1f} |"
        for kernel in kernels:
            r = cells.get(kernel)
            percent = 100 * r["bytes"] / (r["ms"] * 1e-3) / 1e9 / copy_gbps if r else 0
            line += f" {bf16 / r['ms']:.2f}× ({percent:.0f}%) |" if r else " — |"
        lines.append(line)
    lines += ["", "| kernel | M | launch |", "|---|---|---|"]
    lines += sorted({f"| {r['kernel']} | {r['m']} | {r['config']} |" for r in rows})
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--tiny", action="store_true", help="one tiny shape (the plumbing)")
    parser.add_argument("--kernel", action="append", default=[], help="only these kernels (default: all)")
    parser.add_argument("--compile-only", metavar="PART/PARTS", default=None,
                        help="only compile every configuration of every PARTS-th kernel from PART (processes in "
                        "parallel fill Triton's cache before one process times)")  # fmt: skip
    parser.add_argument("--choose", type=Path, default=None,
                        help="a sweep's JSON: time each kernel's overall choice as bench kernels does")  # fmt: skip
    parser.add_argument("--json", type=Path)
    parser.add_argument("--md", type=Path)
    args = parser.parse_args(argv)
    from eaglequant.bench.kernels import _timer, copy_bandwidth

    generator = torch.Generator(device=args.device).manual_seed(0)
    kernels = args.kernel or GOALS_FIRST + [kernel for kernel in KERNELS if kernel not in GOALS_FIRST]
    if args.compile_only:
        part, parts = map(int, args.compile_only.split("/"))
        compile_all(kernels[part::parts], args.device, generator, [(256, 512)] if args.tiny else WARM_SHAPES)
        return 0
    if args.json is None or args.md is None:
        parser.error("--json and --md are needed (unless --compile-only)")
    if args.choose:
        chosen = bench_choices(json.loads(args.choose.read_text()), args.device, generator)
        args.json.write_text(json.dumps(chosen, indent=1))
        args.md.write_text(choice_markdown(chosen))
        return 0
    copy_gbps = copy_bandwidth(args.device, _timer(args.device))
    shapes = TINY_SHAPES if args.tiny else KIMI_SHAPES
    rows: list[dict] = []
    for shape in shapes:
        rows += bf16_rows(shape, args.device, generator)
    for kernel in kernels:
        started = time.perf_counter()
        for shape in shapes:
            rows += sweep_one(kernel, shape, args.device, generator)
            args.json.write_text(json.dumps({"copy_gbps": copy_gbps, "rows": rows}, indent=1))
            args.md.write_text(markdown(rows, args.device, copy_gbps))
            if args.device == "cuda":
                torch.cuda.empty_cache()
        print(f"{kernel}: {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
