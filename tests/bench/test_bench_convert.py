"""``bench convert``: the synthetic heads have the real shapes, and a run on the tiny head gives every figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from eaglequant.bench.convert import bench_convert, default_format
from eaglequant.bench.heads import cached_head, kimi_mla, llama_head


def test_full_size_heads_have_the_real_sizes() -> None:
    # FORMATS.md: one 6.36 GB bf16 file for the SpecForge Kimi-K2.5 head; MLA a little smaller.
    assert round(llama_head().nbytes / 1e9, 2) == 6.36
    assert 5.5e9 < kimi_mla().nbytes < 6.36e9


@pytest.mark.slow
def test_tiny_run_reports_every_figure(tmp_path: Path) -> None:
    from eaglequant import api

    src = cached_head("tiny", tmp_path / "cache")
    assert cached_head("tiny", tmp_path / "cache") == src  # generated once
    assert api.inspect(src).plan.head.layout == "specforge-llama"

    result = bench_convert(tmp_path / "cache", tmp_path / "work", heads=("tiny",), schemes=("nvfp4",), anchors=False)
    last_copy = result["runs"].pop()  # the floor is timed again after the head's other runs
    copies = [run for run in result["runs"] if run["kind"] == "copy"] + [last_copy]
    assert last_copy["scheme"] == "cp -r + sync, again" and len(copies) == 2
    floor = (copies[0]["wall_s"] + copies[1]["wall_s"]) / 2
    assert [c["vs_copy"] for c in copies] == [round(c["wall_s"] / floor, 2) for c in copies]
    verified = result["runs"].pop()  # verify of the first scheme's output, then convert --verify, come after it
    assert verified["scheme"] == "nvfp4 (modelopt) --verify" and verified["error"] is None
    checked = result["runs"].pop()
    assert checked["scheme"] == "verify of nvfp4 (modelopt)" and checked["error"] is None
    assert checked["wall_s"] > 0 and checked["output_bytes"] is None
    runs = {run["kind"]: run for run in result["runs"]}
    assert set(runs) == {"copy", "round-trip", "eaglequant"}
    assert all(run["error"] is None and run["wall_s"] > 0 and run["peak_rss_bytes"] > 0 for run in runs.values())
    assert runs["eaglequant"]["scheme"] == f"nvfp4 ({default_format('nvfp4')})" == "nvfp4 (modelopt)"
    assert 0 < runs["eaglequant"]["output_bytes"] < runs["copy"]["output_bytes"]
    assert list((tmp_path / "work").iterdir()) == []  # every output deleted


def test_the_machine_record_names_every_installed_vendor_version() -> None:
    from importlib.util import find_spec

    from eaglequant.bench.convert import VENDOR_MODULES, machine

    vendors = machine()["vendors"]
    installed = [vendor for vendor, module in VENDOR_MODULES.items() if find_spec(module) is not None]
    assert all(vendors[vendor] for vendor in installed)
