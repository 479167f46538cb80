"""The engine support matrix: one table in the code, rendered into docs, enforced by convert."""

from __future__ import annotations

from pathlib import Path

import pytest

from eaglequant.engines.support import ENGINE_NAMES, FORMAT_NAMES, MATRIX, SCHEME_KINDS
from eaglequant.engines.support_tables import MATRIX_END, MATRIX_START, render_markdown
from eaglequant.formats import FORMATS
from eaglequant.schemes.model import builtin_scheme_names, load_scheme
from tests.conftest import FIXTURES, ROOT, run_cli


def test_docs_show_the_matrix_in_the_code() -> None:
    text = (ROOT / "docs" / "engines.md").read_text()
    block = text.split(MATRIX_START, 1)[1].split(MATRIX_END, 1)[0]
    assert block.strip() == render_markdown().strip(), "run: python -m eaglequant.engines.support_tables"


def test_matrix_covers_exactly_what_formats_store() -> None:
    for kinds in SCHEME_KINDS:
        for fmt in FORMAT_NAMES:
            stores = FORMATS[fmt].algorithms.get(kinds) is not None
            assert ((kinds, fmt) in MATRIX) == stores, (kinds, fmt)
    for cell in MATRIX.values():
        assert set(cell) == set(ENGINE_NAMES)


def test_every_builtin_scheme_is_in_the_matrix() -> None:
    for name in builtin_scheme_names():
        scheme = load_scheme(name)
        assert scheme.kinds in SCHEME_KINDS and scheme.without_calibration().kinds in SCHEME_KINDS


REFUSED = [
    ("fp8-per-channel", "quark", "trtllm", "--format modelopt"),
    ("fp8-per-channel", "modelopt", "sglang", "--format quark"),
    ("mxfp4", "compressed-tensors", "sglang", "--format quark"),
    ("mxfp4-w4a16", "quark", "trtllm", "--scheme"),
]


@pytest.mark.parametrize(("scheme", "fmt", "engine", "hint"), REFUSED)
def test_convert_refuses_what_an_engine_cannot_load(
    scheme: str, fmt: str, engine: str, hint: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = run_cli("convert", FIXTURES / "specforge-llama", out, "-s", scheme, "--format", fmt, "-e", engine)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot load" in lines[0] and hint in lines[0]
    assert not out.exists()


def test_sglang_refuses_modelopt_nvfp4_for_mla_only(tmp_path: Path) -> None:
    llama = run_cli(
        "convert", FIXTURES / "specforge-llama", tmp_path / "a", "-s", "nvfp4", "--format", "modelopt", "-e", "sglang"
    )
    assert llama.exit_code == 0, llama.stderr
    mla = run_cli(
        "convert", FIXTURES / "torchspec-mla", tmp_path / "b", "-s", "nvfp4", "--format", "modelopt", "-e", "sglang"
    )
    assert mla.exit_code == 2 and "MLA" in mla.stderr


def test_several_engines_must_all_load_it(tmp_path: Path) -> None:
    result = run_cli(
        "convert", FIXTURES / "specforge-llama", tmp_path / "o", "--format", "modelopt", "-e", "vllm", "-e", "trtllm"
    )
    assert result.exit_code == 0, result.stderr
    both = run_cli("convert", FIXTURES / "specforge-llama", tmp_path / "p", "-e", "vllm", "-e", "trtllm")
    assert both.exit_code == 2 and "--format modelopt" in both.stderr


def test_schemes_json_lists_engines() -> None:
    import json

    rows = json.loads(run_cli("schemes", "--json").stdout)["schemes"]
    fp8 = next(r for r in rows if r["name"] == "fp8-per-channel")
    formats = {f["format"]: f for f in fp8["formats"]}
    assert set(formats) == {"quark", "modelopt", "compressed-tensors"}
    assert formats["quark"]["engines"]["trtllm"]["loads"] is False
    assert formats["modelopt"]["algorithm"] == "FP8_PER_CHANNEL_PER_TOKEN"


@pytest.mark.parametrize(
    ("fixture", "scheme", "fmt", "says"),
    [
        ("specforge-llama", "nvfp4", "modelopt", "W4A16_NVFP4 is not a QuantAlgo in 1.2.x"),  # wrote it before
        ("specforge-llama", "nvfp4", "compressed-tensors", "does not read compressed-tensors"),
        ("torchspec-mla", "fp8-per-channel", "modelopt", "no EAGLE-3 MLA draft model"),
    ],
)
def test_trtllm_means_the_installable_release(fixture: str, scheme: str, fmt: str, says: str, tmp_path: Path) -> None:
    """--engine trtllm is TensorRT-LLM 1.2.x: what only main loads is refused, and trtllm-main accepts it."""
    refused = run_cli("convert", FIXTURES / fixture, tmp_path / "a", "-s", scheme, "--format", fmt, "-e", "trtllm")
    assert refused.exit_code == 2 and says in refused.stderr, refused.stderr
    if fmt == "modelopt":
        main = run_cli(
            "convert", FIXTURES / fixture, tmp_path / "b", "-s", scheme, "--format", fmt, "-e", "trtllm-main"
        )
        assert main.exit_code == 0, main.stderr


def test_trtllm_keeps_fc_unquantized(tmp_path: Path) -> None:
    """1.2.x builds the draft's fc without a quant config: --quantize fc is refused for it."""
    result = run_cli(
        "convert",
        FIXTURES / "specforge-llama",
        tmp_path / "o",
        "--format",
        "modelopt",
        "-e",
        "trtllm",
        "--quantize",
        "fc",
    )
    assert result.exit_code == 2 and "fc without a quant config" in result.stderr


def test_matrix_says_run_or_read_with_the_release() -> None:
    text = render_markdown()
    header = text.splitlines()[0]
    assert "vLLM 0.32.0" in header and "SGLang 0.5.23" in header and "TensorRT-LLM 1.2.x" in header
    for line in text.splitlines()[2:]:
        cells = line.strip("|").split("|")[2:]
        if "format cannot store it" in line:
            continue
        for engine, cell in zip(ENGINE_NAMES, cells, strict=True):
            expected = "(run)" if engine in ("vllm", "sglang") else "(read)"
            assert expected in cell, (engine, cell)


def test_every_engine_release_declares_a_cell_for_every_row() -> None:
    """Each release's column lives in its own module; together they must cover the same rows, or a cell would be
    a bare KeyError for one engine and a missing row for another."""
    from eaglequant.engines import ENGINES

    rows = {key for engine in ENGINES.values() for key in engine.cells}
    missing = {name: sorted(rows - set(engine.cells)) for name, engine in ENGINES.items()}
    assert missing == {name: [] for name in ENGINES}
    assert set(MATRIX) == rows


def test_a_newer_release_starts_from_the_older_ones_cells() -> None:
    from eaglequant.engines.trtllm import TrtllmEngine
    from eaglequant.engines.trtllm_main import TrtllmMainEngine

    changed = {key for key, cell in TrtllmMainEngine.cells.items() if TrtllmEngine.cells[key] != cell}
    assert changed and changed < set(TrtllmEngine.cells)  # main overrides some of 1.2.x's cells, not all
    assert issubclass(TrtllmMainEngine, TrtllmEngine)
