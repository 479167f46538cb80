"""What a user reads when a rule needs the target's layer count, and the checkpoint's names for what is kept."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.cli.as_user import as_user
from tests.conftest import FIXTURES
from tests.project.test_bad_input import assert_refused

# -- a listed pair on the bundled fixture says why it needs the layer count and what N is -------------------


def test_native_fp8_on_the_fixture_says_what_is_kept_why_and_what_n_is(tmp_path: Path) -> None:
    """The fixture's k_proj has 64 rows, so block FP8 keeps q/k/v unquantized on its own; vLLM reads a native fp8
    config's exclusions by exact name, and the draft's layer is numbered after the target's: the line says all that
    in the checkpoint's names, and where N comes from; the target's config.json then does it."""
    src, dst = FIXTURES / "specforge-llama", tmp_path / "x"
    line = assert_refused(
        as_user("convert", src, dst, "--scheme", "fp8-block", "--format", "fp8"),
        (
            "midlayer.self_attn.q_proj, midlayer.self_attn.k_proj, midlayer.self_attn.v_proj",
            "midlayer.self_attn.k_proj: out-features 64 is not a multiple of 128",
            "are kept unquantized",
            "by exact name",
            "model.layers.{L}.self_attn.qkv_proj",
            "--target-layers N",
            "num_hidden_layers (in its config.json",
            "--target-config",
        ),
    )
    assert not re.search(r"(?<![.\w])layers\.0\.", line), line  # no canonical names the checkpoint does not have
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"num_hidden_layers": 32}))
    done = as_user("convert", src, dst, "--scheme", "fp8-block", "--format", "fp8", "--target-config", target)
    assert done.exit_code == 0, done.stderr
    rules = json.loads((dst / "config.json").read_text())["quantization_config"]["modules_to_not_convert"]
    assert "model.layers.32.self_attn.qkv_proj" in rules


def test_schemes_marks_the_pairs_that_need_the_layer_count() -> None:
    rows = json.loads(as_user("schemes", "--json").stdout)["schemes"]
    marked = [
        (row["name"], fmt["format"], engine)
        for row in rows
        for fmt in row["formats"]
        for engine, cell in fmt["engines"].items()
        if cell and cell["needs_target_layers"]
    ]
    assert marked == [("fp8-block", "fp8", "vllm"), ("fp8-block", "fp8", "vllm==0.33.0")]
    for columns in ("80", "200"):
        shown = as_user("schemes", env={"COLUMNS": columns}).stdout
        assert "yes* (SM89+; CPU with AMX) +L" in shown and "+L: keeping a decoder linear unquantized" in shown, shown


# -- one naming scheme, the checkpoint's, with the engines' runtime name beside it -------------------------


def test_kept_linears_are_named_as_the_checkpoint_names_them(tmp_path: Path) -> None:
    shown = as_user(
        "convert",
        FIXTURES / "specforge-llama",
        tmp_path / "y",
        "--scheme",
        "fp8-block",
        "--format",
        "compressed-tensors",
        env={"COLUMNS": "400"},
    )
    assert shown.exit_code == 0, shown.stderr
    canonical = re.compile(r"(?<![.\w])layers\.0\.")  # the checkpoint has only midlayer.* names
    assert not canonical.search(shown.stdout + shown.stderr), shown.stdout + shown.stderr
    note = next(line for line in shown.stderr.splitlines() if line.startswith("note: kept "))
    assert note.startswith(
        "note: kept midlayer.self_attn.q_proj, midlayer.self_attn.k_proj, midlayer.self_attn.v_proj unquantized "
        "(one module at run time: vLLM's model.layers.{L}.self_attn.qkv_proj): midlayer.self_attn.k_proj's "
        "out-features 64 is not a multiple of 128"
    ), note
    assert (
        "kept midlayer.self_attn.q_proj.weight: fused with midlayer.self_attn.k_proj: out-features 64" in shown.stdout
    )
