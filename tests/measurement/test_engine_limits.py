"""What vLLM's CPU build refuses to serve, said before anything loads (issue 55, item 2): read from the models'
configs and the engine's distribution, where ``accept`` used to serve the target for minutes, then fail, exit 1."""

from __future__ import annotations

from pathlib import Path

import pytest

import eaglequant
from eaglequant.measurement.engine_limits import cpu_build_refusal
from tests.conftest import run_cli

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def test_what_the_cpu_build_refuses_is_read_from_the_configs() -> None:
    llama, kimi_like = {"hidden_size": 256}, {"kv_lora_rank": 512, "qk_rope_head_dim": 64}
    scaled_down = {"kv_lora_rank": 128, "qk_rope_head_dim": 32}
    assert cpu_build_refusal(llama, llama) is None and cpu_build_refusal(kimi_like, kimi_like) is None
    assert "without MLA" in (cpu_build_refusal(llama, kimi_like) or "")
    assert "the draft's is 160" in (cpu_build_refusal(kimi_like, scaled_down) or "")
    assert "the target's is 160" in (cpu_build_refusal(scaled_down, kimi_like) or "")


@pytest.mark.engine
def test_an_mla_draft_beside_the_llama_target_is_refused_before_anything_loads(tmp_path: Path) -> None:
    """The MLA pair's draft served beside the Llama pair's target: no common KV block size on the CPU build."""
    from tests.engine_load.test_engine_load import engine_python

    draft = FIXTURES / "trained-pair-mla" / "draft"
    dst = tmp_path / "fp8"
    eaglequant.convert(draft, dst, scheme="fp8-per-channel", format="quark")
    shown = run_cli("accept", dst, "--target", FIXTURES / "trained-pair" / "target", "--source", draft,
                    "--engine-python", engine_python("vllm"), "--no-record")  # fmt: skip
    said = " ".join(shown.stderr.split())
    assert shown.exit_code == 2, shown.stderr
    assert "vLLM's CPU build" in said and "an MLA draft beside a target without MLA" in said
    assert "no common block size" in said and "Traceback" not in shown.stderr
