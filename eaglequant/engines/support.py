"""Which engine loads which (scheme, format) for an EAGLE-3 draft's linear layers: one table.

Rows are scheme kinds (weight kind, activation kind), so a user's own scheme file is judged like the
built-in with the same kinds. ``docs/engines.md`` renders this table (``render_markdown``); a test keeps
the two in step. Each entry names the engine source that decides it, for the release the engine's model
describes (``Engine.release``). Cells of engines with a probe (:mod:`eaglequant.engine_load`: vLLM, SGLang)
are *run*: the engine-load tests load every fixture in them with the engine's own code, and a cell that
says no must fail there. The others (TensorRT-LLM) are *read* from source.
"""

from __future__ import annotations

from dataclasses import dataclass

from eaglequant.common.errors import InputError, Words, placeholder, suggested, words
from eaglequant.engines import ENGINES
from eaglequant.formats import FORMATS
from eaglequant.kinds import weight_kind

ENGINE_NAMES = tuple(ENGINES)
ENGINE_TITLES = {name: engine.title for name, engine in ENGINES.items()}
RUN_ENGINES = ("vllm", "sglang")  # loaded by the engine-load tests (eaglequant.engine_load.PROBES)
FORMAT_NAMES = tuple(FORMATS)
SCHEME_KINDS: dict[tuple[str, str | None], str] = {
    ("fp8-channel", "fp8-token"): "FP8 per-channel W8A8 (dynamic per-token activations)",
    ("fp8-block", "fp8-group"): "FP8 block W8A8 (128x128 weight blocks, dynamic per-token-group activations)",
    ("nvfp4", None): "NVFP4 W4A16",
    ("nvfp4", "nvfp4"): "NVFP4 W4A4 (calibrated input_scale)",
    ("mxfp4", "mxfp4"): "MXFP4 W4A4 (dynamic activations)",
    ("mxfp4", None): "MXFP4 W4A16",
    ("int8-channel", "int8-token"): "INT8 per-channel W8A8 (dynamic per-token activations)",
    ("int4-group", None): "INT4 W4A16 (symmetric, groups of 128)",
    ("int4-group-asym", None): "INT4 W4A16 asymmetric (zero points, groups of 128)",
}


@dataclass(frozen=True)
class Support:
    loads: bool
    note: str  # why, and under which conditions (hardware, versions); source file in the engine
    conditional: bool = False  # loads, but only under the stated conditions: shown to the user as a warning
    mla: bool | str = True  # also holds for MLA (DeepSeek / Kimi) drafts; a string says why not


def _yes(note: str, *, mla: bool | str = True) -> Support:
    return Support(True, note, mla=mla)


def _if(note: str, *, mla: bool | str = True) -> Support:
    return Support(True, note, conditional=True, mla=mla)


def _no(note: str) -> Support:
    return Support(False, note)


_FP8 = ("fp8-channel", "fp8-token")
_FB = ("fp8-block", "fp8-group")
_NV16 = ("nvfp4", None)
_NV4 = ("nvfp4", "nvfp4")
_MX4 = ("mxfp4", "mxfp4")
_MX16 = ("mxfp4", None)
_I8 = ("int8-channel", "int8-token")
_I4 = ("int4-group", None)
_I4Z = ("int4-group-asym", None)
_TRT_NO_QUARK = _no("TensorRT-LLM never reads quant_method quark (_torch/model_config.py::load_hf_quant_config)")
_TRT12_NO_MLA = "TensorRT-LLM 1.2.x has no EAGLE-3 MLA draft model (_torch/models/modeling_speculative.py)"
_TRT12_NO_CT = _no(
    "TensorRT-LLM 1.2.x does not read compressed-tensors configs (_torch/model_config.py; added on main, PR #10796)"
)
_TRT_NO_MX = _no("TensorRT-LLM has no dense-linear MXFP4 method (MXFP4 is implemented for MoE layers only)")
_VLLM_FP8_BLOCK = (
    "block-FP8 W8A8 on SM89+ (CUTLASS or Triton); on Hopper with DeepGEMM installed it re-quantizes the weights to "
    "power-of-two block scales at load (utils/deep_gemm.py); CPU needs AMX"
)
_SGL_NO_MLA_FP4 = "SGLang's models/kimi_k25_eagle3.py drops modelopt_fp4 configs"
_VLLM_WNA16 = (
    "CompressedTensorsWNA16 (compressed_tensors.py::_is_wNa16_group_channel, format pack-quantized), kernel by "
    "platform (kernels/linear/__init__.py::choose_mp_linear_kernel): Machete, Marlin or Triton W4A16 on CUDA, "
    "Triton on ROCm, CPUWNA16 on CPU (out- and in-features multiples of 32)"
)
_SGL_WNA16 = (
    "CompressedTensorsWNA16 runs Marlin only (schemes/compressed_tensors_wNa16.py): CUDA SM80+, whose tiles need "
    "every module's out-features a multiple of 64 and in-features of 128 (marlin_utils.py::"
    "verify_marlin_supports_shape; process_weights_after_loading ignores the check's answer); no CPU or ROCm path"
)
_TRT_MAIN_NO_INT4 = _no(
    "main maps 4-bit compressed-tensors groups to float formats only: an INT4 group without input_activations "
    "fails reading their strategy (models/quant_config_utils.py::_quant_config_from_config_group)"
)

# (scheme kinds, format) -> engine -> Support. A missing cell means the format cannot store the scheme.
# vLLM 0.32.0 and SGLang 0.5.23 are run (tests/test_engine_load.py); TensorRT-LLM 1.2.x and main are read.
MATRIX: dict[tuple[tuple[str, str | None], str], dict[str, Support]] = {
    (_FP8, "quark"): {
        "vllm": _yes("QuarkW8A8Fp8, channel weights + dynamic token activations (quark/quark.py::_is_fp8_w8a8); SM89+"),
        "trtllm": _TRT_NO_QUARK,
        "sglang": _yes("QuarkW8A8Fp8 (srt/layers/quantization/quark/quark.py); SM89+ or ROCm"),
        "trtllm-main": _TRT_NO_QUARK,
    },
    (_MX4, "quark"): {
        "vllm": _if("QuarkOCP_MX: native on Blackwell and MI355, Marlin weight-only on Hopper, emulated on MI300"),
        "trtllm": _TRT_NO_QUARK,
        "sglang": _if("Quark W4A4 MXFP4 runs on ROCm only (AITER kernels)"),
        "trtllm-main": _TRT_NO_QUARK,
    },
    (_MX16, "quark"): {
        "vllm": _if("QuarkOCP_MX weight-only: Marlin on CUDA, emulated on ROCm (needs amd-quark installed)"),
        "trtllm": _TRT_NO_QUARK,
        "sglang": _no("SGLang's Quark MXFP4 requires FP4 activations"),
        "trtllm-main": _TRT_NO_QUARK,
    },
    (_FP8, "modelopt"): {
        "vllm": _yes("FP8_PER_CHANNEL_PER_TOKEN (modelopt.py::ModelOptFp8Config), flat or nested config"),
        "trtllm": _yes(
            "FP8_PER_CHANNEL_PER_TOKEN → FP8RowwiseLinearMethod (_torch/modules/linear.py)", mla=_TRT12_NO_MLA
        ),
        "sglang": _no("ModelOptFp8Config accepts only per-tensor FP8 (modelopt_quant.py::from_config)"),
        "trtllm-main": _yes("FP8_PER_CHANNEL_PER_TOKEN → FP8RowwiseLinearMethod (_torch/modules/linear.py)"),
    },
    (_NV16, "modelopt"): {
        "vllm": _if("W4A16_NVFP4 from config.json's flat form only; Marlin on CUDA, no ROCm kernel"),
        "trtllm": _no("W4A16_NVFP4 is not a QuantAlgo in 1.2.x (quantization/mode.py; added on main, PR #15703)"),
        "sglang": _yes("ModelOptFp4Config W4A16_NVFP4 (Marlin, SM80+)", mla=_SGL_NO_MLA_FP4),
        "trtllm-main": _yes("W4A16_NVFP4 → W4A16NVFP4LinearMethod (_torch/modules/linear.py; main since July 2026)"),
    },
    (_NV4, "modelopt"): {
        "vllm": _if("ModelOptNvFp4Config: native on Blackwell; Hopper runs it weight-only (Marlin); ROCm emulated"),
        "trtllm": _if("NVFP4LinearMethod: Blackwell (SM100/SM120) only", mla=_TRT12_NO_MLA),
        "sglang": _if("ModelOptFp4Config: native on SM100+, weight-only Marlin on SM80-90", mla=_SGL_NO_MLA_FP4),
        "trtllm-main": _if("NVFP4LinearMethod: Blackwell (SM100/SM120) only"),
    },
    (_FP8, "compressed-tensors"): {
        "vllm": _yes("CompressedTensorsW8A8Fp8, channel weights ([N, 1] scale) + dynamic token activations"),
        "trtllm": _TRT12_NO_CT,
        "sglang": _yes("CompressedTensorsW8A8Fp8 (srt/layers/quantization/compressed_tensors)"),
        "trtllm-main": _no("its FP8 rowwise path expects a 1-D [N] weight_scale; compressed-tensors stores [N, 1]"),
    },
    (_FB, "compressed-tensors"): {
        "vllm": _if(f"CompressedTensorsW8A8Fp8, block strategy: {_VLLM_FP8_BLOCK}"),
        "trtllm": _TRT12_NO_CT,
        "sglang": _yes("CompressedTensorsW8A8Fp8, block strategy (schemes/compressed_tensors_w8a8_fp8.py)"),
        "trtllm-main": _no(
            "main reads a compressed-tensors config's config_groups['group_0'] only, and llm-compressor names this "
            "group FP8_BLOCK (models/quant_config_utils.py)"
        ),
    },
    (_FB, "fp8"): {
        "vllm": _if(f"Fp8Config with weight_block_size: {_VLLM_FP8_BLOCK}"),
        "trtllm": _no(
            "1.2.x: how it reads a native fp8 config's exclusions could not be established at the release tag "
            "(_torch/model_config.py)"
        ),
        "sglang": _yes("Fp8Config with weight_block_size (srt/layers/quantization/fp8.py)"),
        "trtllm-main": _yes(
            "FP8_BLOCK_SCALES, exclusions from modules_to_not_convert (_torch/model_config.py); an MLA kv_b_proj is "
            "dequantized from its block scales (modeling_deepseekv3.py)"
        ),
    },
    (_NV16, "compressed-tensors"): {
        "vllm": _if("CompressedTensorsW4A4Fp4(use_a16) on CUDA (Marlin); no ROCm kernel"),
        "trtllm": _TRT12_NO_CT,
        "sglang": _yes("CompressedTensorsW4A16Fp4 (Marlin, SM80+)"),
        "trtllm-main": _no("main reads compressed-tensors with 8-bit weights only (_torch/model_config.py)"),
    },
    (_NV4, "compressed-tensors"): {
        "vllm": _if("CompressedTensorsW4A4Fp4: native on Blackwell, weight-only Marlin on Hopper, ROCm emulated"),
        "trtllm": _TRT12_NO_CT,
        "sglang": _if("CompressedTensorsW4A4Fp4: native on SM100+, weight-only Marlin below"),
        "trtllm-main": _no("main reads compressed-tensors with 8-bit weights only (_torch/model_config.py)"),
    },
    (_MX4, "compressed-tensors"): {
        "vllm": _if("same OCP-MX kernels as Quark: native on Blackwell and MI355, else Marlin or emulation"),
        "trtllm": _TRT12_NO_CT,
        "sglang": _no("SGLang's compressed_tensors has no dense MXFP4 scheme"),
        "trtllm-main": _TRT_NO_MX,
    },
    (_MX16, "compressed-tensors"): {
        "vllm": _if("loads, but quantizes activations anyway on Blackwell and ROCm (runs W4A4); W4A16 on Hopper"),
        "trtllm": _TRT12_NO_CT,
        "sglang": _no("SGLang's compressed_tensors has no dense MXFP4 scheme"),
        "trtllm-main": _TRT_NO_MX,
    },
    (_I8, "quark"): {
        "vllm": _yes("QuarkW8A8Int8, channel weights + dynamic per-token inputs (quark/quark.py::_is_w8a8_int8)"),
        "trtllm": _TRT_NO_QUARK,
        "sglang": _no(
            "SGLang's Quark config has W8A8 FP8 and MXFP4 schemes only; INT8 raises NotImplementedError "
            "(srt/layers/quantization/quark/quark.py::_get_scheme_from_config)"
        ),
        "trtllm-main": _TRT_NO_QUARK,
    },
    (_I8, "compressed-tensors"): {
        "vllm": _yes(
            "CompressedTensorsW8A8Int8, channel weights + dynamic token activations "
            "(compressed_tensors.py::_is_dynamic_token_w8a8): CUTLASS/Triton on CUDA SM75+, oneDNN on CPU"
        ),
        "trtllm": _TRT12_NO_CT,
        "sglang": _yes(
            "CompressedTensorsW8A8Int8 (compressed_tensors.py::_is_dynamic_token_w8a8; "
            "schemes/compressed_tensors_w8a8_int8.py): CUDA (sgl-kernel int8_scaled_mm)"
        ),
        "trtllm-main": _no(
            "main reads 8-bit channel weights with token activations as FP8_PER_CHANNEL_PER_TOKEN whatever their "
            "type (models/quant_config_utils.py::_quant_config_from_config_group): INT8 codes would run as FP8"
        ),
    },
    (_I4, "compressed-tensors"): {
        "vllm": _yes(f"{_VLLM_WNA16}; symmetric codes as uint4b8"),
        "trtllm": _TRT12_NO_CT,
        "sglang": _if(_SGL_WNA16),
        "trtllm-main": _TRT_MAIN_NO_INT4,
    },
    (_I4Z, "compressed-tensors"): {
        "vllm": _yes(f"{_VLLM_WNA16}; zero points as uint4 (Machete, Marlin, Triton W4A16 and CPUWNA16 take them)"),
        "trtllm": _TRT12_NO_CT,
        "sglang": _if(f"{_SGL_WNA16}; zero points through Marlin's uint4 path"),
        "trtllm-main": _TRT_MAIN_NO_INT4,
    },
}


def support(kinds: tuple[str, str | None], format_name: str, engine: str, attention: str = "mha") -> Support | None:
    """None when the format cannot store the scheme at all."""
    cell = MATRIX.get((kinds, format_name))
    if cell is None:
        return None
    entry = cell[engine]
    if attention == "mla" and entry.loads and entry.mla is not True:
        return _no(f"not for MLA drafts: {entry.mla}" if isinstance(entry.mla, str) else f"{entry.note}; not for MLA")
    return entry


def _loads_everywhere(kinds: tuple[str, str | None], fmt: str, engines: list[str], attention: str) -> bool:
    return all((cell := support(kinds, fmt, e, attention)) is not None and cell.loads for e in engines)


def _weight_bits(kinds: tuple[str, str | None]) -> int:
    return weight_kind(kinds[0]).bits


def check_engines(
    kinds: tuple[str, str | None],
    scheme_name: str,
    format_name: str,
    engines: list[str],
    attention: str,
    scheme_names: dict[tuple[str, str | None], str],
) -> list[str]:
    """Refuse, in one line naming a combination that works, what a targeted engine cannot load.

    Returns the conditions under which the targeted engines load it (to show as warnings).
    ``scheme_names``: scheme kinds -> a built-in scheme name, to suggest another scheme.
    """
    warnings = []
    for engine in engines:
        cell = support(kinds, format_name, engine, attention)
        if cell is None:
            continue
        if cell.loads:
            if cell.conditional:
                warnings.append(f"{ENGINE_TITLES[engine]}: {cell.note}")
            continue
        others = sorted((k for k in scheme_names if k != kinds), key=lambda k: _weight_bits(k) != _weight_bits(kinds))
        candidates = [kinds, *others]  # another scheme of the same weight width first: 4-bit for 4-bit
        working = [(k, f) for k in candidates for f in FORMAT_NAMES if _loads_everywhere(k, f, engines, attention)]
        titles = _engines_words(engines)
        hint: str | Words
        if not working:
            hint = f"no built-in scheme loads in {titles}; target fewer engines"
        elif working[0][0] == kinds:
            hint = words("use ", suggested("format", working[0][1]), f", which {titles} can load")
        else:
            (found, fmt), name = working[0], scheme_names[working[0][0]]
            # a scheme named for two kinds (nvfp4: W4A4, W4A16 without calib) gives the first only with calib
            twice = list(scheme_names.values()).count(name) > 1
            calib = (" with captured inputs (convert ", placeholder("calib", "FILE"), ")") if twice and found[1] else ()
            scheme = () if name == scheme_name else (suggested("scheme", name), " ")
            hint = words("use ", *scheme, suggested("format", fmt), *calib, f", which {titles} can load")
        raise InputError(
            f"{ENGINE_TITLES[engine]} cannot load {scheme_name} ({SCHEME_KINDS.get(kinds, kinds)}) "
            f"in {format_name} format: {cell.note}",
            hint=hint,
        )
    return warnings


def _engines_words(engines: list[str]) -> str:
    """``vLLM and SGLang``; ``vLLM, SGLang and TensorRT-LLM main``; every engine: ``every engine``."""
    if set(engines) == set(ENGINE_NAMES) and len(engines) > 2:
        return "every engine"
    titles = [ENGINE_TITLES[e] for e in engines]
    return titles[0] if len(titles) == 1 else f"{', '.join(titles[:-1])} and {titles[-1]}"


def evidence(engine: str) -> str:
    """ "run" when the engine-load tests load every fixture in the engine's cells, else "read" (from source)."""
    return "run" if engine in RUN_ENGINES else "read"


def _cell_text(cell: Support, engine: str) -> str:
    text = f"{'yes' if cell.loads else 'no'} ({evidence(engine)}): {cell.note}"
    if cell.loads and cell.mla is not True:
        text += f"; MLA drafts: no{f', {cell.mla}' if isinstance(cell.mla, str) else ''}"
    return text


def render_markdown() -> str:
    """The matrix as a Markdown table (rows: scheme × format; columns: engines)."""
    header = (
        "| scheme | format | " + " | ".join(f"{ENGINE_TITLES[e]} {ENGINES[e].release}" for e in ENGINE_NAMES) + " |"
    )
    lines = [header, "|" + "---|" * (2 + len(ENGINE_NAMES))]
    for kinds, title in SCHEME_KINDS.items():
        for fmt in FORMAT_NAMES:
            cell = MATRIX.get((kinds, fmt))
            if cell is None:
                cells = ["— (format cannot store it)"] + [""] * (len(ENGINE_NAMES) - 1)
            else:
                cells = [_cell_text(cell[e], e) for e in ENGINE_NAMES]
            lines.append(f"| {title} | {fmt} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


MATRIX_START, MATRIX_END = "<!-- support-matrix:start -->", "<!-- support-matrix:end -->"


def update_docs(path: str = "docs/engines.md") -> None:
    """Rewrite the matrix block in ``docs/engines.md`` from MATRIX: ``python -m eaglequant.engines.support``."""
    from pathlib import Path

    doc = Path(path)
    text = doc.read_text(encoding="utf-8")
    head, rest = text.split(MATRIX_START, 1)
    _, tail = rest.split(MATRIX_END, 1)
    doc.write_text(f"{head}{MATRIX_START}\n{render_markdown()}{MATRIX_END}{tail}", encoding="utf-8")


if __name__ == "__main__":
    update_docs()
