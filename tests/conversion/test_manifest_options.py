from __future__ import annotations

from eaglequant.conversion.manifest_options import manifest_options
from eaglequant.conversion.options import ConversionOptions
from eaglequant.engines.target import TargetModel


def test_the_manifest_records_what_decides_the_bytes_not_how_fast() -> None:
    options = ConversionOptions(engines=["sglang", "vllm"], exclude=["midlayer.mlp.*"], max_shard_size="1GB")
    target = TargetModel(61, "--target-layers", context=262144)
    recorded = manifest_options(options, target)
    assert set(recorded) == {
        "scheme",
        "scheme_sha256",
        "format",
        "engines",
        "exclude",
        "quantize",
        "target_layers",
        "max_shard_bytes",
        "calib_sha256",
        "verify",
        "repo_id",
    }
    assert recorded["engines"] == ["sglang", "vllm"] and recorded["target_layers"] == 61
    assert recorded["max_shard_bytes"] == 10**9 and recorded["exclude"] == ["midlayer.mlp.*"]
    faster = ConversionOptions.build(options, workers=4, device="cuda")  # the device is not asked for here
    assert manifest_options(faster, target) == recorded
    assert manifest_options(ConversionOptions.build(options, verify_output=True), target) != recorded
    matched = manifest_options(ConversionOptions.build(options, match_target_context=True), target)
    assert matched == {**recorded, "target_context": 262144}  # the length written into the draft's config
