"""What a reader of the output could trip on: every size in decimal units, every error figure saying whether it
measures the stored weights or the kernel's GEMM output, every engine release named in one form."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from eaglequant.common.sizes import decimal_bytes
from tests.conftest import FIXTURES, run_cli

SRC = FIXTURES / "specforge-llama"  # vocabulary 512
BINARY_UNITS = re.compile(r"\b[KMGT]iB\b")
ERROR_FIGURE = re.compile(r"SQNR|error|cosine")


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A verified FP8 conversion in AMD Quark format (README command (a)), and all it printed."""
    dst = tmp_path_factory.mktemp("units") / "fp8"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", "250")  # one line a header, however long
        result = run_cli("convert", SRC, dst, "--scheme", "fp8-per-channel", "--format", "quark", "--verify")
        assert result.exit_code == 0, result.stderr
        yield dst, result.stdout + result.stderr


def _header_cells(shown: str) -> list[str]:
    """The cells of every table's header row (rich draws them between ┃)."""
    rows = [line for line in shown.splitlines() if line.startswith("┃")]
    return [cell.strip() for row in rows for cell in row.strip("┃").split("┃")]


@pytest.mark.parametrize(
    ("count", "text"),
    [(0, "0 B"), (999, "999 B"), (1000, "1.00 kB"), (1_048_576, "1.05 MB"), (11_410_000_000, "11.41 GB")],
)
def test_sizes_read_in_decimal_units(count: int, text: str) -> None:
    assert decimal_bytes(count) == text


def test_no_command_shows_a_size_in_binary_units(converted: tuple[Path, str], tmp_path: Path) -> None:
    dst, shown = converted
    counts = tmp_path / "counts.json"
    counts.write_text(json.dumps([(token * 37) % 512 for token in range(512)]))
    runs = [
        run_cli("explain", dst, "--engine", "all"),
        run_cli("inspect", SRC),
        run_cli("prune", SRC, tmp_path / "pruned", "--size", "64", "--counts", counts),
    ]
    assert all(run.exit_code == 0 for run in runs), [run.stderr for run in runs]
    shown += "".join(run.stdout + run.stderr for run in runs)
    assert "lm_head 65.54 kB → 16.38 kB" in shown  # the pruned lm_head, 256 and then 64 rows of 128 bf16
    assert BINARY_UNITS.findall(shown) == []


def test_each_error_figure_says_whether_it_measures_the_weights_or_the_output(converted: tuple[Path, str]) -> None:
    _, shown = converted
    figures = [cell for cell in _header_cells(shown) if ERROR_FIGURE.search(cell)]
    assert len(figures) == 6  # convert's two, verify's three and its worst scale block
    assert [cell for cell in figures if not re.match(r"(weight|output|worst weight) ", cell)] == []


def _cost_table_engines(shown: str) -> list[str]:
    """The engine column of the table of weight bytes read per speculative round."""
    table = shown[shown.index("weight bytes read per speculative round") :].split("└")[0]
    return [line.strip("│").split("│")[0].strip() for line in table.splitlines() if line.startswith("│")]


def test_explain_names_every_engine_release_in_one_form(converted: tuple[Path, str]) -> None:
    from eaglequant.engines import ENGINES

    dst, _ = converted
    result = run_cli("explain", dst, "--engine", "all")
    assert result.exit_code == 0, result.stderr
    titles = [engine.titled for engine in ENGINES.values()]
    assert _cost_table_engines(result.stdout) == ["vLLM 0.32.0", "vLLM 0.33.0", "SGLang 0.5.23"]
    assert all(title in result.stdout for title in titles)
    other_forms = [f"{e.key} {e.release}" for e in ENGINES.values()] + [f"=={e.release}" for e in ENGINES.values()]
    assert [form for form in other_forms if form in result.stdout] == []


def test_schemes_names_the_release_behind_each_engine_column_in_the_same_form() -> None:
    from eaglequant.engines import ENGINES

    result = run_cli("schemes")
    assert result.exit_code == 0, result.stderr
    releases = " ".join(result.stdout[result.stdout.index("releases: ") :].split("\n\n")[0].split())
    expected = "; ".join(f"{name}: {engine.titled}" for name, engine in ENGINES.items())
    assert releases.startswith(f"releases: {expected}")


def test_the_card_says_what_each_error_figure_measures(converted: tuple[Path, str]) -> None:
    dst, _ = converted
    card = (dst / "README.md").read_text()
    headers = [line.strip("|").split("|") for line in card.splitlines() if line.startswith("| module |")]
    figures = [cell.strip() for row in headers for cell in row if ERROR_FIGURE.search(cell)]
    assert figures == ["weight SQNR (dB)", "weight relative error", "output SQNR (dB)", "output cosine"]
