"""Every code a :class:`~eaglequant.common.findings.Finding` may carry, each with what it means in one line.

A finding made with a code that is not here is refused (``ValueError``): add the code here, with its line, first.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

_CODES = {
    # reading records
    "unrecorded": "a finding read from a record written before findings had codes: its message only",
    # verify: the files against the report
    "listed-but-missing": "a file the report lists is not there",
    "sha256-differs": "a file's SHA-256 is not the one the report records",
    "hashed-while-writing": "the SHA-256 digests were taken while the files were written",
    "invalid-scale": "a scale tensor holds values that are not finite and positive",
    "fused-scales-differ": "the members of a fused group store different scales where the engines need one",
    "no-recorded-scheme": "the report records no scheme: the checkpoint was checked against a fallback",
    "per-module-thresholds": "a scheme's thresholds are per module",
    "activations-not-simulated": "a weight-only scheme: parity and fidelity do not simulate quantized activations",
    "parity-failed": "a layer's output is further from the source's than the scheme's thresholds allow",
    "fidelity-failed": "the draft head's output distribution moved further than the thresholds allow",
    "acceptance-failed": "the measured acceptance is below what the scheme allows",
    "acceptance-inconclusive": "the change in acceptance straddles the budget: more prompts would tell",
    "no-source": "no source checkpoint was given: parity and fidelity were not checked",
    "judged-as-searched": "acceptance judged against the source and budget `search` recorded",
    "source-vocabulary-differs": "the source's vocabulary differs from DST's: parity and fidelity ran against "
    "the head DST was converted from, or not at all",
    "parity-not-checked": "a layer's parity could not be checked",
    "fidelity-not-checked": "the draft head's fidelity could not be checked",
    # verify: the copied tensors and config against the source
    "copies-not-compared": "the copied tensors were not compared with the source's",
    "copies-compared": "how many copied tensors are identical to the source's",
    "copy-missing": "a tensor the source has is not in the checkpoint",
    "not-in-source": "a copied tensor the checkpoint has is not in the source",
    "dtype-differs": "a copied tensor's dtype is not the source's",
    "shape-differs": "a copied tensor's shape is not the source's",
    "values-differ": "a copied tensor's values are not the source's",
    "change-not-from-source": "a recorded config change does not start from the source's value",
    "config-differs": "a config.json value is not the source's and no recorded change explains it",
    # formats and the configs they write
    "fused-rows-unaligned": "a fused group's rows do not align with the kind's blocks",
    "rows-not-packable": "a linear's rows cannot be packed in the kind's storage",
    "columns-unaligned": "a linear's columns are not a whole number of the kind's blocks",
    "exclusion-keys-disagree": "the config's exclusion keys list different modules",
    "exclude-modules-without-ignore": "the config has exclude_modules without ignore",
    "configs-disagree": "config.json and the format's own quantization config disagree",
    "config-contradiction": "the checkpoint's quantization config contradicts itself",
    "rule-breaks-loader": "an exclusion rule of the config breaks the engine's loader",
    # planning a conversion
    "no-calib-data": "a scheme with calibrated activations was given no captured inputs: it is written without them",
    "kept-unstorable": "a linear the format cannot store is kept in its source dtype with its fused group",
    "engine-condition": "a targeted engine loads the scheme only under a condition",
    "rocm-aiter-mla": "vLLM on ROCm with AITER re-quantizes an MLA draft's kv_b_proj online",
    "may-shorten-context": "the engine may serve the target with a shorter context than its own",
    "shorter-context": "the engine serves the target with a shorter context than its own",
    "local-verifier": "the engine refuses `vllm serve DRAFT` for a speculators head whose verifier is not a Hub id",
    "shared-lm-head": "the draft reads the target's lm_head, which the engine can quantize online",
    # explain: what an engine reads
    "cannot-load": "the engine cannot load the checkpoint",
    "excluded-in-some-spellings": "a module is excluded under some of its names only",
    "stored-quantized": "a module the engine runs unquantized is stored quantized",
    "weight-not-quantized": "a module the engine runs quantized is stored unquantized",
    "not-expected": "a tensor the engine does not expect (loading fails)",
    "missing": "a tensor the engine expects is missing",
    "tensor-mismatch": "a tensor's dtype or shape is not what the engine expects",
    # engine load checks
    "postprocess-not-run": "the engine's post-load processing was not run on CPU",
    "shared-from-target": "a module the engine shares from the target instead of loading",
    "no-such-module": "the engine builds no such module (eaglequant's model of it is wrong)",
    "loads-against-matrix": "the engine loads a checkpoint eaglequant's support matrix says it does not",
    "unconsumed": "no engine parameter took a tensor",
    "quantized-unplanned": "the engine quantizes a module eaglequant did not plan quantized",
    "not-as-planned": "the engine runs a module otherwise than eaglequant planned",
    "value-differs": "a loaded parameter's values are not the file's",
    "never-loaded": "no checkpoint tensor reached a parameter",
    "gemm-error-over-bound": "the engine's GEMM error is over the bound",
    "inexact-int8-gemm": "the platform's int8 GEMM is inexact: the bound is widened",
    # acceptance
    "running-servers": "acceptance was measured on servers already running",
    "launched-servers": "acceptance was measured on servers eaglequant started",
    "one-server": "acceptance was measured on one running server: no reference, no DST",
    "live-traffic": "acceptance was read over a window of a server's live traffic",
    "bundled-prompts": "no prompts were given: the bundled held-out prompts, written for the bundled pair, were used",
    "served-dequantized": "a quantized module was served dequantized",
    "draft-sample-method": "the draft's sampling method in the speculative config",
    "not-lossless": "the quantized draft's greedy output differs from the source's",
    "acceptance-out-of-range": "a measured acceptance length outside 1 to k + 1, or a rate outside 0 to 1",
    "speedup-past-acceptance": "a measured speed-up above the acceptance length at its k, which no draft can reach",
    "speedup-unsettled": "a measured speed-up whose 95% interval spans more than a factor of 2 (high over low)",
    "target-alone-drifted": "the target alone's decode rate moved between its runs by more than 15%",
    "target-alone-once": "the target alone was served once: drift between processes was not checked",
    "over-budget": "the whole interval of the acceptance change is past the budget",
    "no-inputs": "acceptance was not predicted: no captured inputs",
    "no-target-choices": "acceptance was not predicted: the captured inputs hold no target choices",
    "chain-unsupported": "acceptance was not predicted for this draft's chain",
    # search
    "needs-layer-count": "candidates skipped: their rules need the target's layer count (--target-layers)",
    "engine-does-not-load": "candidates skipped: a targeted engine does not load the scheme in that format",
    "lm-head-unstorable": "candidates skipped: the format cannot store lm_head in its own scheme",
    "lm-head-scheme-unread": "candidates skipped: an engine does not read lm_head's own scheme in that format",
    "lm-head-unquantized": "candidates skipped: an engine runs lm_head unquantized in that format",
    "engine-needs-quantized": "candidates skipped: an engine cannot load unquantized a linear the candidate keeps",
    "nothing-quantized": "candidates skipped: the format stores none of the head's linears in that scheme",
    "pruned-source-kept": "the pruned source was left beside the chosen draft",
    # publishing and batches
    "source-card-unreadable": "the source's model card cannot be read",
    "forced": "uploaded with --force despite the verdict",
    "verified-at-conversion": "the upload relies on the verification done at conversion",
    "dry-run": "a dry run: nothing was sent",
    "card-renamed": "README.md was changed to name the uploaded draft",
    "hub-offline": "HF_HUB_OFFLINE is set: uploads are judged from the local destination",
}

FINDING_CODES: Final = MappingProxyType(_CODES)
