"""The options a conversion records in its manifest: everything besides the source that decides the bytes of the
output (not how fast it was made), with the target as the plan resolved it. The API joins them here, once the plan
holds, so the options are read once and the plan's results are not sent back to them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eaglequant.checkpoint.hashing import file_sha256
from eaglequant.conversion.options import ConversionOptions
from eaglequant.draft.connector_files import inputs_sha256
from eaglequant.engines.target import TargetModel


def manifest_options(options: ConversionOptions, target: TargetModel) -> dict[str, Any]:
    """``options`` as the manifest records them; ``target``: the target as the plan resolved it (its layer count
    from ``target_layers``, or read from ``target_config`` or the head)."""
    calib = None if options.calib is None else inputs_sha256(options.calib)
    scheme = options.resolved_scheme
    matched = {"target_context": target.context} if options.match_target_context else {}
    rules = options.assignment.rules
    own = {
        rule.pattern: {"scheme": rule.scheme.name, "scheme_sha256": file_sha256(Path(rule.scheme.source))}
        for rule in sorted(rules, key=lambda rule: rule.pattern)
    }
    return {
        "scheme": scheme.name,
        "scheme_sha256": file_sha256(Path(scheme.source)),
        **({"scheme_for": own} if own else {}),
        "format": options.format,
        "engines": sorted(options.engines),
        "exclude": list(options.exclude),
        "quantize": list(options.quantize),
        "target_layers": target.count,
        **matched,
        "max_shard_bytes": options.max_shard_bytes,
        "calib_sha256": calib,
        "verify": options.verify_output,
        "repo_id": options.repo_id,
    }


def manifest_key(src: str | Path, options: ConversionOptions) -> str:
    """The manifest key converting ``src`` with ``options`` would record, without converting. A local source's
    headers are read (and the options checked against them); a Hub source is not downloaded: its weights' SHA-256
    come from the Hub's file listing, and only its small side files (config.json, ...) are fetched."""
    from eaglequant.conversion.source import planned
    from eaglequant.engines.target import resolve_target
    from eaglequant.hub.client import hub_offline, is_hub_reference, remote_source_digests, resolve_source
    from eaglequant.record.manifest import conversion_manifest, manifest_key_of

    if is_hub_reference(src) and not hub_offline():
        # the target's layer count resolved from the Hub's config.json as ConversionRequest.of resolves it
        files, config = remote_source_digests(str(src))
        target = resolve_target(options.target_layers, options.target_config, config)
        return manifest_key_of(files, manifest_options(options, target))
    source = resolve_source(src)
    with planned(source, options) as (_, plan):
        recorded = manifest_options(options, plan.target)
    return conversion_manifest(source, recorded).key
