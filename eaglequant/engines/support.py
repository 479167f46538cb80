"""Which engine loads which (scheme, format) for an EAGLE-3 draft's linear layers: one table.

Rows are scheme kinds (weight kind, activation kind), so a user's own scheme file is judged like the
built-in with the same kinds. ``docs/engines.md`` renders this table (``render_markdown``); a test keeps
the two in step. Each entry names the engine source that decides it.
"""

from __future__ import annotations

from dataclasses import dataclass

from eaglequant.errors import InputError

ENGINE_NAMES = ("vllm", "trtllm", "sglang")
ENGINE_TITLES = {"vllm": "vLLM", "trtllm": "TensorRT-LLM", "sglang": "SGLang"}
FORMAT_NAMES = ("quark", "modelopt", "compressed-tensors")
SCHEME_KINDS: dict[tuple[str, str | None], str] = {
    ("fp8-channel", "fp8-token"): "FP8 per-channel W8A8 (dynamic per-token activations)",
    ("nvfp4", None): "NVFP4 W4A16",
    ("nvfp4", "nvfp4"): "NVFP4 W4A4 (calibrated input_scale)",
    ("mxfp4", "mxfp4"): "MXFP4 W4A4 (dynamic activations)",
    ("mxfp4", None): "MXFP4 W4A16",
}


@dataclass(frozen=True)
class Support:
    loads: bool
    note: str  # why, and under which conditions (hardware, versions)


def _yes(note: str) -> Support:
    return Support(True, note)


def _no(note: str) -> Support:
    return Support(False, note)


_FP8 = ("fp8-channel", "fp8-token")
_NV16 = ("nvfp4", None)
_NV4 = ("nvfp4", "nvfp4")
_MX4 = ("mxfp4", "mxfp4")
_MX16 = ("mxfp4", None)

# (scheme kinds, format) -> engine -> Support. A missing cell means the format cannot store the scheme.
MATRIX: dict[tuple[tuple[str, str | None], str], dict[str, Support]] = {
    (_FP8, "quark"): {
        "vllm": _yes("QuarkW8A8Fp8, per-channel weight + per-token activation (quark/quark.py)"),
        "trtllm": _no("reads only ModelOpt configs (hf_quant_config.json / quant_method modelopt)"),
        "sglang": _yes("Quark W8A8 FP8 (srt/layers/quantization/quark)"),
    },
    (_MX4, "quark"): {
        "vllm": _yes("QuarkOCP_MX: native on ROCm MI350+, emulated elsewhere (quark/schemes/quark_ocp_mx.py)"),
        "trtllm": _no("reads only ModelOpt configs"),
        "sglang": _yes("Quark MXFP4 (ROCm)"),
    },
    (_MX16, "quark"): {
        "vllm": _yes("QuarkOCP_MX weight-only (quark/schemes/quark_ocp_mx.py)"),
        "trtllm": _no("reads only ModelOpt configs"),
        "sglang": _no("Quark weight-only MXFP4 has no SGLang linear method"),
    },
    (_FP8, "modelopt"): {
        "vllm": _yes("FP8_PER_CHANNEL_PER_TOKEN (modelopt.py ModelOptFp8Config)"),
        "trtllm": _yes("QuantAlgo.FP8_PER_CHANNEL_PER_TOKEN (quantization/mode.py)"),
        "sglang": _no("ModelOpt FP8 in SGLang is per-tensor only (modelopt_quant.py)"),
    },
    (_NV16, "modelopt"): {
        "vllm": _yes("W4A16_NVFP4, flat quantization_config form only (modelopt.py)"),
        "trtllm": _yes("QuantAlgo.W4A16_NVFP4"),
        "sglang": _no("SGLang's ModelOpt path has no W4A16_NVFP4"),
    },
    (_NV4, "modelopt"): {
        "vllm": _yes("NVFP4 (modelopt.py ModelOptNvFp4Config); Blackwell native, else emulated/Marlin"),
        "trtllm": _yes("QuantAlgo.NVFP4; Blackwell"),
        "sglang": _yes("ModelOptFp4Config (modelopt_quant.py); Blackwell"),
    },
    (_FP8, "compressed-tensors"): {
        "vllm": _yes("CompressedTensorsW8A8Fp8, channel weights + dynamic token activations"),
        "trtllm": _no("reads only ModelOpt configs"),
        "sglang": _yes("compressed_tensors W8A8 FP8"),
    },
    (_NV16, "compressed-tensors"): {
        "vllm": _yes("CompressedTensorsW4A16Fp4 (Marlin)"),
        "trtllm": _no("reads only ModelOpt configs"),
        "sglang": _no("no W4A16 NVFP4 scheme in SGLang's compressed_tensors"),
    },
    (_NV4, "compressed-tensors"): {
        "vllm": _yes("CompressedTensorsW4A4Fp4"),
        "trtllm": _no("reads only ModelOpt configs"),
        "sglang": _yes("compressed_tensors W4A4 NVFP4"),
    },
    (_MX4, "compressed-tensors"): {
        "vllm": _no("compressed-tensors has no W4A4 MXFP4 linear scheme in vLLM"),
        "trtllm": _no("reads only ModelOpt configs"),
        "sglang": _no("no MXFP4 scheme in SGLang's compressed_tensors"),
    },
    (_MX16, "compressed-tensors"): {
        "vllm": _yes("CompressedTensorsW4A16Mxfp4"),
        "trtllm": _no("reads only ModelOpt configs"),
        "sglang": _no("no MXFP4 scheme in SGLang's compressed_tensors"),
    },
}


def support(kinds: tuple[str, str | None], format_name: str, engine: str) -> Support | None:
    """None when the format cannot store the scheme at all."""
    cell = MATRIX.get((kinds, format_name))
    return None if cell is None else cell[engine]


def working_combinations(kinds: tuple[str, str | None], engines: list[str]) -> list[tuple[tuple[str, str | None], str]]:
    """(scheme kinds, format) pairs every engine in ``engines`` loads: same scheme first, then the others."""
    order = [kinds, *(k for k in SCHEME_KINDS if k != kinds)]
    return [
        (k, fmt)
        for k in order
        for fmt in FORMAT_NAMES
        if (cell := MATRIX.get((k, fmt))) is not None and all(cell[e].loads for e in engines)
    ]


def check_engines(
    kinds: tuple[str, str | None], scheme_name: str, format_name: str, engines: list[str], scheme_names: dict
) -> None:
    """Refuse, in one line naming a combination that works, what a targeted engine cannot load.

    ``scheme_names``: scheme kinds -> a built-in scheme name, to name an alternative scheme.
    """
    for engine in engines:
        cell = support(kinds, format_name, engine)
        if cell is None or cell.loads:
            continue
        working = [(k, f) for k, f in working_combinations(kinds, engines) if k == kinds or k in scheme_names]
        if not working:
            hint = f"no scheme loads in all of {', '.join(ENGINE_TITLES[e] for e in engines)}; target fewer engines"
        elif working[0][0] == kinds:
            hint = f"use --format {working[0][1]}, which {' and '.join(ENGINE_TITLES[e] for e in engines)} load"
        else:
            k, f = working[0]
            hint = f"use --scheme {scheme_names[k]} --format {f}"
        raise InputError(
            f"{ENGINE_TITLES[engine]} cannot load {scheme_name} ({SCHEME_KINDS.get(kinds, kinds)}) "
            f"in {format_name} format: {cell.note}",
            hint=hint,
        )


def render_markdown() -> str:
    """The matrix as a Markdown table (rows: scheme × format; columns: engines)."""
    header = "| scheme | format | " + " | ".join(ENGINE_TITLES[e] for e in ENGINE_NAMES) + " |"
    lines = [header, "|" + "---|" * (2 + len(ENGINE_NAMES))]
    for kinds, title in SCHEME_KINDS.items():
        for fmt in FORMAT_NAMES:
            cell = MATRIX.get((kinds, fmt))
            if cell is None:
                cells = ["— (format cannot store it)"] + [""] * (len(ENGINE_NAMES) - 1)
            else:
                cells = [f"{'yes' if cell[e].loads else 'no'}: {cell[e].note}" for e in ENGINE_NAMES]
            lines.append(f"| {title} | {fmt} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
