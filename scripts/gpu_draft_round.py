"""One EAGLE-3 draft round of the Kimi-K2.5 Llama head, timed with the fused kernels, beside the bytes model.

    PYTHONPATH=$PWD python3 scripts/gpu_draft_round.py [--device cuda] [--scale 1] [--batch 1 --batch 2 ...]
                                                      [--k 3] [--context 128] [--json out.json]

A round, as vLLM and SGLang run a chain draft for ``batch`` sequences: ``fc`` once on the target's three hidden
states, then ``k`` times the decoder layer (RMS norms, the fused q/k/v projection, attention over a KV cache of
``--context`` tokens plus the drafted ones, ``o_proj``, the fused gate/up projection, SiLU, ``down_proj``) and
``lm_head`` with its argmax, each step feeding its token's embedding and hidden state to the next. No rotary
embedding (a few element-wise operations). Weights are random, stored as ``bench/kernels.py::random_stored``
makes them (only the time matters). Quantized linears run ``eaglequant.kernels.fused_linear`` (Triton on CUDA,
the torch reference on CPU); BF16 ones torch's matmul.

Drafts: BF16; FP8 per-channel (W8A8) where the bytes model (``readback/cost.py``, as ``eaglequant inspect`` prices a
ModelOpt conversion for vLLM) runs the head quantized; that with an NVFP4 ``lm_head`` (the W4A16 kernel: the fused
kernels keep activations in bf16 for NVFP4); and the same with a 32,768-token vocabulary. Each is timed eagerly and
as one CUDA graph (what engines replay), the median of ``--repeats`` after warm-ups; beside it the model's bytes per
round, its ratio to BF16, and the roofline (bytes / the H200's 4.8 TB/s of HBM3e). ``--device cpu --scale 64``
runs a shrunken head through the torch reference in seconds: a check of the plumbing, not a figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HBM_BYTES_PER_S = 4.8e12  # H200 HBM3e, NVIDIA's figure
ENGINE, FORMAT, TARGET_LAYERS = "vllm", "modelopt", 61  # Kimi-K2.5 has 61 layers
SMALL_VOCAB = 32768
# name, vocabulary (None: the head's), the head's scheme, lm_head's own scheme
VARIANTS: list[tuple[str, int | None, str | None, str | None]] = [
    ("bf16", None, None, None),
    ("fp8 decoder", None, "fp8-per-channel", None),
    ("fp8 decoder + nvfp4 lm_head", None, "fp8-per-channel", "nvfp4"),
    ("bf16, vocab 32768", SMALL_VOCAB, None, None),
    ("fp8 decoder, vocab 32768", SMALL_VOCAB, "fp8-per-channel", None),
    ("fp8 decoder + nvfp4 lm_head, vocab 32768", SMALL_VOCAB, "fp8-per-channel", "nvfp4"),
]
LINEARS = ("fc", "qkv", "o", "gate_up", "down", "lm_head")
PART_OF = {"fc": "fc", "lm_head": "lm_head", "qkv": "decoder", "o": "decoder", "gate_up": "decoder", "down": "decoder"}
Linear = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Dims:
    hidden: int
    intermediate: int
    heads: int
    head_dim: int
    vocab: int

    @property
    def attention(self) -> int:
        return self.heads * self.head_dim

    def shapes(self, vocab: int) -> dict[str, tuple[int, int]]:
        """Each linear's (out, in) as the engines fuse them."""
        h, a, i = self.hidden, self.attention, self.intermediate
        return {
            "fc": (h, 3 * h),
            "qkv": (3 * a, 2 * h),
            "o": (h, a),
            "gate_up": (2 * i, h),
            "down": (h, i),
            "lm_head": (vocab, h),
        }


def head_dims(scale: int) -> Dims:
    from eaglequant.bench import heads

    return Dims(
        heads.H // scale,
        heads.INTERMEDIATE // scale,
        max(1, heads.HEADS // scale),
        heads.HEAD_DIM,
        heads.VOCAB // scale,
    )


def priced(dims: Dims, vocab: int, scheme: str | None, lm_head: str | None, k: int) -> Any:
    """The bytes model's round cost (``RoundCost``) of the head at ``vocab``: as ``inspect`` prices the conversion for
    vLLM, or the BF16 source (``scheme`` None)."""
    from eaglequant import inspect
    from eaglequant.bench.heads import llama_head, write_head_headers

    head = llama_head(dims.hidden, dims.intermediate, dims.heads, dims.head_dim, vocab, name="priced")
    with tempfile.TemporaryDirectory() as directory:
        write_head_headers(head, Path(directory))
        settings: dict[str, Any] = {"scheme_for": [f"lm_head={lm_head}"]} if lm_head else {}
        report = inspect(
            directory,
            scheme=scheme or "fp8-per-channel",
            format=FORMAT,
            engines=[ENGINE],
            target_layers=TARGET_LAYERS,
            draft_tokens=k,
            **settings,
        )
        (cost,) = report.round_costs
    return cost if scheme else cost.as_source()


def part_kinds(cost: Any, scheme: str | None, lm_head: str | None) -> dict[str, Any]:
    """Part -> the KindPair it runs in (None: BF16): what the model runs quantized, in the scheme that holds it."""
    from eaglequant.schemes.model import load_scheme

    kinds: dict[str, Any] = {}
    for part in ("fc", "decoder", "lm_head"):
        priced_part = cost.part(part)
        held = lm_head if part == "lm_head" and lm_head else scheme
        quantized = priced_part is not None and priced_part.quantized and held is not None
        kinds[part] = load_scheme(held).kinds if quantized and held else None
    return kinds


class Weights:
    """Random weights on ``device`` for every linear in BF16, and quantized in each kind pair asked for (made once,
    a smaller vocabulary's ``lm_head`` being the first rows of the full one)."""

    def __init__(self, dims: Dims, device: str, seed: int = 0) -> None:
        self.dims, self.device = dims, device
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.dense = {name: self._dense(*shape) for name, shape in dims.shapes(dims.vocab).items()}
        self.embed = self._dense(dims.vocab, dims.hidden)
        self.quantized: dict[tuple[str, Any], Any] = {}

    def _dense(self, rows: int, columns: int) -> torch.Tensor:
        made = torch.randn(rows, columns, generator=self.generator, device=self.device, dtype=torch.bfloat16)
        return made.mul_(0.02)

    def linear(self, name: str, kinds: Any, vocab: int) -> Linear:
        from eaglequant.bench.kernels import random_stored_kinds
        from eaglequant.kernels import fused_linear

        rows = vocab if name == "lm_head" else None
        if kinds is None:
            weight = self.dense[name][:rows]
            return lambda x: F.linear(x, weight)
        if (name, kinds) not in self.quantized:
            out_features, in_features = self.dims.shapes(self.dims.vocab)[name]
            stored = random_stored_kinds(kinds, out_features, in_features, self.device, self.generator)
            self.quantized[name, kinds] = stored
        stored = self.quantized[name, kinds]
        stored = stored if rows is None else stored.rows(slice(0, rows))
        backend = "triton" if self.device == "cuda" else "reference"
        return lambda x: fused_linear(x, stored, backend).to(torch.bfloat16)


def _rms(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), eps=1e-6)


def round_function(weights: Weights, linears: dict[str, Linear], batch: int, k: int, context: int) -> Callable[[], Any]:
    """A closure running one round on fixed inputs (static shapes: capturable in a CUDA graph)."""
    dims, device = weights.dims, weights.device
    hidden3 = torch.randn(batch, 3 * dims.hidden, device=device, dtype=torch.bfloat16)
    first = torch.zeros(batch, dtype=torch.long, device=device)
    cache = torch.randn(2, batch, dims.heads, context + k, dims.head_dim, device=device, dtype=torch.bfloat16)

    def run() -> torch.Tensor:
        h, tokens = linears["fc"](hidden3), first
        for step in range(k):
            x = torch.cat([_rms(weights.embed[tokens]), _rms(h)], dim=-1)
            q, key, value = linears["qkv"](x).view(batch, 3, dims.heads, dims.head_dim).unbind(1)
            length = context + step + 1
            cache[0, :, :, length - 1] = key
            cache[1, :, :, length - 1] = value
            attended = F.scaled_dot_product_attention(q[:, :, None], cache[0, :, :, :length], cache[1, :, :, :length])
            h = h + linears["o"](attended.reshape(batch, dims.attention))
            gate, up = linears["gate_up"](_rms(h)).chunk(2, dim=-1)
            h = h + linears["down"](F.silu(gate) * up)
            tokens = linears["lm_head"](_rms(h)).argmax(dim=-1)
        return tokens

    return run


def median_ms(fn: Callable[[], object], device: str, repeats: int, warmups: int = 3) -> float:
    for _ in range(warmups):
        fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            began = time.perf_counter()
            fn()
            times.append((time.perf_counter() - began) * 1e3)
    return statistics.median(times)


def graph_ms(run: Callable[[], object], repeats: int) -> float:
    """The round captured in one CUDA graph (after eager warm-ups, so every kernel is compiled), replayed."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            run()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    return median_ms(graph.replay, "cuda", repeats)


def kv_bytes(dims: Dims, batch: int, k: int, context: int) -> int:
    """The KV cache a round's attention reads (bf16 keys and values), beside the weights the model counts."""
    return sum(2 * 2 * batch * dims.heads * dims.head_dim * (context + step + 1) for step in range(k))


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def time_variant(weights: Weights, kinds: dict[str, Any], vocab: int, args: argparse.Namespace) -> list[dict]:
    """A row a batch: eager and CUDA-graph medians, or why that batch has none (the other batches and variants are
    still timed: one GPU run has to give what it can)."""
    linears = {name: weights.linear(name, kinds[PART_OF[name]], vocab) for name in LINEARS}
    rows = []
    for batch in args.batch:
        row: dict[str, Any] = {"batch": batch, "eager_ms": None, "graph_ms": None, "error": None, "graph_error": None}
        row["kv_bytes"] = kv_bytes(weights.dims, batch, args.k, args.context)
        try:
            run = round_function(weights, linears, batch, args.k, args.context)
            row["eager_ms"] = median_ms(run, args.device, args.repeats)
        except Exception as exc:
            row["error"] = _failure(exc)
        if args.device == "cuda" and row["eager_ms"] is not None:
            try:
                row["graph_ms"] = graph_ms(run, args.repeats)
            except Exception as exc:  # a capture that fails is reported, the eager figure stands
                row["graph_error"] = _failure(exc)
        print(
            f"  batch {batch}: eager {row['eager_ms']} ms, graph {row['graph_ms']} ms {row['error'] or ''}", flush=True
        )
        rows.append(row)
    return rows


def measure(args: argparse.Namespace, save: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Every variant timed; ``save`` is given the result so far after each (a run cut short keeps what it did)."""
    dims = head_dims(args.scale)
    weights = Weights(dims, args.device)
    variants: list[dict[str, Any]] = []
    result: dict[str, Any] = {}
    for name, vocab_size, scheme, lm_head in VARIANTS:
        vocab = dims.vocab if vocab_size is None else vocab_size // args.scale
        cost = priced(dims, vocab, scheme, lm_head, args.k)
        kinds = part_kinds(cost, scheme, lm_head)
        if lm_head and kinds["lm_head"] is None:  # the model keeps it BF16: time it as asked, and say so
            from eaglequant.schemes.model import load_scheme

            kinds["lm_head"] = load_scheme(lm_head).kinds
        described = {part: "bf16" if pair is None else "/".join(map(str, pair)) for part, pair in kinds.items()}
        print(f"{name}: " + ", ".join(f"{part} {what}" for part, what in described.items()), flush=True)
        variant = {"name": name, "vocab": vocab, "kinds": described}
        variant["model_quantized"] = {p.part: p.quantized for p in cost.parts}
        variant["bytes_per_round"] = cost.bytes_per_round
        variant["roofline_ms"] = cost.bytes_per_round / HBM_BYTES_PER_S * 1e3
        try:
            variant["rows"], variant["error"] = time_variant(weights, kinds, vocab, args), None
        except Exception as exc:  # its weights could not be made: the next variant is still timed
            variant["rows"], variant["error"] = [], _failure(exc)
            print(f"  failed: {variant['error']}", flush=True)
        variants.append(variant)
        result = {"device": describe_device(args.device), "dims": dims.__dict__, **_settings(args)}
        result["variants"] = ratios(variants)
        save(result)
    return result


def ratios(variants: list[dict]) -> list[dict]:
    """Each row's speed-up over the BF16 round at the same batch (full vocabulary), measured and as the bytes model
    says (None where either was not timed); graph times where every timed round was captured, eager ones otherwise."""
    base = {row["batch"]: row for row in variants[0]["rows"]}
    timed = [row for variant in variants for row in variant["rows"] if row["eager_ms"] is not None]
    clock = "graph_ms" if timed and all(row["graph_ms"] for row in timed) else "eager_ms"
    for variant in variants:
        variant["clock"] = clock
        variant["model_speedup"] = variants[0]["bytes_per_round"] / variant["bytes_per_round"]
        for row in variant["rows"]:
            own, bf16 = row.get(clock), base.get(row["batch"], {}).get(clock)
            row["measured_speedup"] = bf16 / own if own and bf16 else None
            row["percent_of_roofline"] = 100 * variant["roofline_ms"] / own if own else None
    return variants


def describe_device(device: str) -> str:
    if device == "cuda":
        return f"{torch.cuda.get_device_name()} (torch {torch.__version__}, CUDA {torch.version.cuda})"
    return f"cpu (torch {torch.__version__}, the torch reference: plumbing only, not a figure)"


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    timed = (
        "one draft round: fc once, then k x (2 RMS norms, fused qkv, SDPA over the KV cache, o_proj, RMS norm, "
        "fused gate_up, SiLU, down_proj, RMS norm, lm_head, argmax, embedding lookup); no rotary embedding"
    )
    return {
        "k": args.k,
        "context": args.context,
        "scale": args.scale,
        "repeats": args.repeats,
        "hbm_bytes_per_s": HBM_BYTES_PER_S,
        "engine_priced": ENGINE,
        "format_priced": FORMAT,
        "timed": timed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--scale", type=int, default=1, help="divide every dimension but head_dim by this")
    parser.add_argument("--batch", type=int, action="append", default=[], help="batch sizes (default 1 2 4 8 16)")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--context", type=int, default=128, help="KV-cache tokens before the round")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    args.batch = args.batch or [1, 2, 4, 8, 16]
    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "--device cuda: torch sees no CUDA GPU (use --device cpu --scale 64 to check the plumbing)", file=sys.stderr
        )
        return 2

    def save(result: dict[str, Any]) -> None:
        if args.json:
            args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")

    with torch.inference_mode():
        result = measure(args, save)
    if not args.json:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
