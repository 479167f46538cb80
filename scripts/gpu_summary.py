"""The GPU check's summary: ``summary.md`` (the tables for docs/gpu.md) and ``summary.json`` from the raw
outputs ``scripts/gpu_check.sh`` leaves in its work directory. Standard library only, so it runs whatever failed
before it; a missing or broken input is a line in the summary, never a crash.

    python3 scripts/gpu_summary.py WORK_DIR OUT_DIR
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The goals at M <= 16: kernel -> (least % of copy bandwidth, least speed-up over torch bf16).
GOALS = {
    "nvfp4-w4a16": (70.0, 2.5),
    "mxfp4-w4a16": (70.0, 2.5),
    "fp8-w8a16": (None, 1.6),
    "fp8-w8a8": (None, 1.6),
}
GOAL_MAX_M = 16
NOT_RUN = [
    "vLLM's CUDA paths (its FP8/FP4 kernels serving a converted draft, accept on a GPU): not run; the machine has "
    "no vLLM and no network to install it."
]
RESULT = re.compile(r"^(\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b")
FINAL = re.compile(r"\d+ (passed|failed|skipped|errors?|deselected)\b.* in [\d.]+s")
SHORT = re.compile(r"^(FAILED|ERROR) (\S+::\S+)(?: - (.*))?$")


def read_json(path: Path) -> tuple[Any, str | None]:
    try:
        return json.loads(path.read_text(encoding="utf-8")), None
    except FileNotFoundError:
        return None, f"{path.name}: not written (the step did not run or did not finish)"
    except (OSError, ValueError) as exc:
        return None, f"{path.name}: unreadable ({exc})"


def pytest_results(path: Path) -> dict[str, Any]:
    """Counts and failures from ``pytest -v -rfE`` output, read line by line (a run killed by its timeout still
    counts the tests it finished)."""
    if not path.is_file():
        return {"ran": False, "counts": {}, "failures": []}
    text = path.read_text(encoding="utf-8", errors="replace")
    counts: dict[str, int] = {}
    failures = {}
    for line in text.splitlines():
        if match := RESULT.match(line):
            counts[match[2].lower()] = counts.get(match[2].lower(), 0) + 1
        elif match := SHORT.match(line):
            failures[match[2]] = (match[3] or match[1])[:300]
    lines = [line for line in text.splitlines() if line.strip()]
    finished = bool(lines) and FINAL.search(lines[-1]) is not None
    listed = [{"test": test, "why": why} for test, why in failures.items()]
    return {"ran": True, "counts": counts, "failures": listed, "finished": finished}


def steps(work: Path) -> list[dict[str, Any]]:
    """``steps.tsv``: one line a step (name, exit status, seconds, timeout), as gpu_check.sh writes it."""
    path = work / "steps.tsv"
    rows = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.count("\t") != 3:
                continue
            name, rc, seconds, limit = line.split("\t")
            rows.append({"step": name, "rc": int(rc), "seconds": float(seconds), "timeout_s": int(limit)})
    return rows


def kernel_errors(path: Path) -> list[dict[str, Any]]:
    """The kernel test's measured errors, one JSON line a case (a line cut short by a timeout is left out)."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def goal_checks(bench: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal kernel's rows at M <= 16: how many meet the goal, and the least figures."""
    checks = []
    for kernel, (least_bandwidth, least_speedup) in GOALS.items():
        rows = [r for r in bench.get("rows", []) if r["kernel"] == kernel and r["m"] <= GOAL_MAX_M]
        if not rows:
            continue
        met = [
            (least_bandwidth is None or r["percent_of_copy_bandwidth"] >= least_bandwidth)
            and r["speedup_vs_bf16"] >= least_speedup
            for r in rows
        ]
        goal = f">= {least_speedup}x bf16" + ("" if least_bandwidth is None else f", >= {least_bandwidth:.0f}% copy bw")
        checks.append(
            {
                "kernel": kernel,
                "goal": goal,
                "rows": len(rows),
                "met": sum(met),
                "least_speedup_vs_bf16": min(r["speedup_vs_bf16"] for r in rows),
                "least_percent_of_copy_bandwidth": min(r["percent_of_copy_bandwidth"] for r in rows),
            }
        )
    return checks


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def steps_section(rows: list[dict[str, Any]]) -> list[str]:
    def status(rc: int) -> str:
        return "ok" if rc == 0 else "timed out" if rc in (124, 137) else f"exit {rc}"

    body = [[r["step"], status(r["rc"]), f"{r['seconds']:.0f}", str(r["timeout_s"])] for r in rows]
    return ["## Steps", "", *table(["step", "result", "seconds", "timeout s"], body), ""]


def tests_section(title: str, results: dict[str, Any]) -> list[str]:
    if not results["ran"]:
        return [f"## {title}", "", "Not run.", ""]
    counts = ", ".join(f"{n} {what}" for what, n in sorted(results["counts"].items())) or "no test finished"
    lines = [f"## {title}", "", counts + ("" if results.get("finished") else " (the run did not finish)"), ""]
    lines += [f"- FAILED `{f['test']}`: {f['why']}" for f in results["failures"]]
    return [*lines, ""] if results["failures"] else lines


def errors_section(errors: list[dict[str, Any]]) -> list[str]:
    if not errors:
        return []
    ms = sorted({e["m"] for e in errors})
    by_kernel: dict[str, dict[int, dict[str, Any]]] = {}
    for e in errors:
        by_kernel.setdefault(e["kernel"], {})[e["m"]] = e
    body = []
    for kernel, cells in by_kernel.items():
        body.append([kernel, *(_error_cell(cells.get(m)) for m in ms)])
    first = errors[0]
    lines = [
        f"Per token, max |kernel - float64| over max |float32 torch reference - float64|, the worst token (N = "
        f"{first['n']}, K = {first['k']}; the test allows 64, or a floor of 2^-26 of the token's largest sum of "
        "|x| |w|); in brackets, max |kernel - torch| relative to max |torch| (allowed 2e-5):",
        "",
    ]
    return [*lines, *table(["kernel", *(f"M = {m}" for m in ms)], body), ""]


def _error_cell(error: dict[str, Any] | None) -> str:
    if error is None:
        return "—"
    return f"{error['worst_ratio']:.2f} ({error['vs_torch_relative']:.1e})"


def bench_section(bench: dict[str, Any] | None, problem: str | None) -> list[str]:
    lines = ["## bench kernels (M <= 16)", ""]
    if bench is None:
        return [*lines, problem or "Not run.", ""]
    rows = bench.get("rows", [])
    kernels = [k for k in dict.fromkeys(r["kernel"] for r in rows) if k not in ("torch-bf16", "torch-scaled-mm-fp8")]
    copies = ", ".join(f"{gbps:.0f}" for gbps in bench.get("copy_gbps_per_run", [bench["copy_gbps"]]))
    lines += [
        f"{bench['device']}; device-to-device copy {copies} GB/s (read + write of 1 GiB; one figure per run). "
        "Each cell: speed-up over torch bf16 matmul at the same shape and M, timed in the same run (triton "
        "do_bench medians), and the percent of the copy bandwidth the kernel's bytes reach. `_scaled_mm`: torch's "
        "row-wise FP8 GEMM with per-token activation quantization (the engines' FP8 baseline), over bf16; the next "
        "column, the fused W8A8 kernel over it.",
        "",
    ]
    body = []
    for shape, m in dict.fromkeys((r["shape"], r["m"]) for r in rows):
        at = {r["kernel"]: r for r in rows if r["shape"] == shape and r["m"] == m}
        base = at.get("torch-bf16")
        scaled = at.get("torch-scaled-mm-fp8")
        cells = [
            f"{at[k]['speedup_vs_bf16']:.2f}× ({at[k]['percent_of_copy_bandwidth']:.0f}%)" if k in at else "—"
            for k in kernels
        ]
        w8a8 = at.get("fp8-w8a8")
        versus = w8a8["speedup_vs_bf16"] / scaled["speedup_vs_bf16"] if w8a8 and scaled else None
        first = [shape, str(m), _figure(base["ms"] * 1e3 if base else None, ".1f")]
        first += [_figure(scaled["speedup_vs_bf16"] if scaled else None, ".2f", "×"), _figure(versus, ".2f", "×")]
        body.append([*first, *cells])
    lines += table(["shape", "M", "bf16 µs", "_scaled_mm", "fp8-w8a8 over _scaled_mm", *kernels], body)
    checks = goal_checks(bench)
    if checks:
        lines += ["", "Goals at M <= 16:", ""]
        lines += table(
            ["kernel", "goal", "rows meeting it", "least × bf16", "least % copy bw"],
            [
                [
                    c["kernel"],
                    c["goal"],
                    f"{c['met']} of {c['rows']}",
                    f"{c['least_speedup_vs_bf16']:.2f}",
                    f"{c['least_percent_of_copy_bandwidth']:.0f}",
                ]
                for c in checks
            ],
        )
    return [*lines, *([problem, ""] if problem else []), ""]


def _figure(value: float | None, spec: str, unit: str = "") -> str:
    return "—" if value is None else f"{value:{spec}}{unit}"


def _kv_note(variants: list[dict[str, Any]]) -> str:
    """The KV cache a round's attention reads, which the bytes model (weights) leaves out."""
    kv = {row["batch"]: row["kv_bytes"] for variant in variants for row in variant["rows"]}
    if not kv:
        return ""
    low, high = min(kv), max(kv)
    return (
        f"Attention reads {kv[low] / 1e6:.1f} MB of KV cache a round at batch {low}, {kv[high] / 1e6:.1f} MB at "
        f"batch {high}: in the measured times, not in the model's bytes."
    )


def draft_section(draft: dict[str, Any] | None, problem: str | None) -> list[str]:
    lines = ["## One draft round (k = 3) of the Kimi-K2.5 Llama head", ""]
    if draft is None:
        return [*lines, problem or "Not run.", ""]
    variants = draft["variants"]
    clock = variants[0]["clock"] if variants else "eager_ms"
    lines += [
        f"{draft['device']}. Timed: {draft['timed']}; KV context {draft['context']} tokens. Median of "
        f"{draft['repeats']} rounds, {'one CUDA graph per round' if clock == 'graph_ms' else 'eager'}. "
        f"Model: bytes per round as `inspect` prices a {draft['format_priced']} conversion for "
        f"{draft['engine_priced']}; roofline = those bytes / {draft['hbm_bytes_per_s'] / 1e12:.1f} TB/s. "
        "Speed-ups are over the BF16 round of the full vocabulary at the same batch. " + _kv_note(variants),
        "",
    ]
    body = []
    for variant in variants:
        model = [f"{variant['model_speedup']:.2f}×", f"{variant['bytes_per_round'] / 1e9:.3g}"]
        model.append(f"{variant['roofline_ms']:.3f}")
        for row in variant["rows"]:
            times = [_figure(row["graph_ms"], ".3f"), _figure(row["eager_ms"], ".3f")]
            speedup = [_figure(row["measured_speedup"], ".2f", "×")]
            body.append([variant["name"], str(row["batch"]), *times, *speedup, *model])
            body[-1].append(_figure(row["percent_of_roofline"], ".0f", "%"))
    header = ["draft", "batch", "graph ms", "eager ms", "measured ×", "model ×", "GB / round", "roofline ms"]
    header.append("% of roofline")
    lines += table(header, body)
    failed = {row["graph_error"] for v in variants for row in v["rows"] if row.get("graph_error")}
    lines += [f"- CUDA graph capture failed: {why}" for why in sorted(failed)]
    lines += [
        f"- {v['name']}, batch {row['batch']}: {row['error']}"
        for v in variants
        for row in v["rows"]
        if row.get("error")
    ]
    lines += [f"- {v['name']}: not timed, {v['error']}" for v in variants if v.get("error")]
    return [*lines, ""]


def bench_runs(work: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The ``bench kernels`` runs (``bench-kernels-m*.json``, one per M) as one: their rows and copy bandwidths."""
    paths = sorted(work.glob("bench-kernels-m*.json"), key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))
    runs, problems = [], []
    for path in paths:
        run, problem = read_json(path)
        if isinstance(run, dict) and "rows" in run:
            runs.append(run)
        elif run is None:
            problems.append(problem or path.name)
        else:  # the command's own --json error object
            problems.append(f"{path.name}: {run.get('error', {}).get('message', 'no rows')}")
    if not runs:
        return None, "; ".join(problems) or "bench kernels: no output (the step did not run)"
    merged = {"device": runs[0]["device"], "copy_gbps": min(r["copy_gbps"] for r in runs)}
    merged["copy_gbps_per_run"] = [r["copy_gbps"] for r in runs]
    merged["rows"] = [row for r in runs for row in r["rows"]]
    return merged, "; ".join(problems) or None


def guarded(title: str, section: Callable[..., list[str]], *args: Any) -> list[str]:
    """A section, or where its input is not what it expects, one line saying so (the rest of the summary stands)."""
    try:
        return section(*args)
    except Exception as exc:
        return [f"## {title}", "", f"The summary could not read this part: {type(exc).__name__}: {exc}", ""]


def summarize(work: Path) -> tuple[str, dict[str, Any]]:
    bench, bench_problem = bench_runs(work)
    draft, draft_problem = read_json(work / "draft-round.json")
    kernel_tests = pytest_results(work / "kernel-tests.log")
    convert_tests = pytest_results(work / "convert-tests.log")
    errors = kernel_errors(work / "kernel-errors.jsonl")
    environment = (work / "environment.txt").read_text(encoding="utf-8") if (work / "environment.txt").is_file() else ""
    fenced = ["```", environment.strip() or "environment not recorded", "```", ""]
    lines = ["# GPU check (scripts/gpu_check.sh)", "", *fenced, *steps_section(steps(work))]
    lines += tests_section("Kernels compiled on the GPU against float64 and torch", kernel_tests)
    lines += guarded("Kernel errors", errors_section, errors)
    lines += tests_section("convert --device cuda writes the CPU's bytes", convert_tests)
    lines += guarded("bench kernels", bench_section, bench, bench_problem)
    lines += guarded("One draft round", draft_section, draft, draft_problem)
    lines += ["## Not run", "", *(f"- {line}" for line in NOT_RUN), ""]
    try:
        goals = goal_checks(bench or {})
    except Exception as exc:
        goals = [{"error": f"{type(exc).__name__}: {exc}"}]
    data = {
        "environment": environment,
        "steps": steps(work),
        "kernel_tests": kernel_tests,
        "kernel_errors": errors,
        "convert_tests": convert_tests,
        "bench_kernels": bench,
        "goals": goals,
        "draft_round": draft,
        "problems": [p for p in (bench_problem, draft_problem) if p],
        "not_run": NOT_RUN,
    }
    return "\n".join(lines), data


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: gpu_summary.py WORK_DIR OUT_DIR", file=sys.stderr)
        return 2
    work, out = map(Path, argv)
    markdown, data = summarize(work)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(markdown, encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
