"""Run in vLLM's interpreter: write hidden-state files the way speculators' data generation does, with vLLM's own
``extract_hidden_states`` method and its hidden-states connector (the stock class where CUDA is present; on the
CPU build its subclass from the probes package, which changes only the CUDA-stream copy).

``python vllm_hidden_states_writer.py TARGET OUT_DIR LAYER_IDS_JSON TOKENS_JSON DTYPE``: one prefill request per
token sequence (``max_tokens=1``), so each file holds the whole sequence; the files stay in OUT_DIR.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def main(target: str, out: str, layer_ids: list[int], sequences: list[list[int]], dtype: str) -> None:
    from engine_probes.vllm_capture import await_hidden_states, connector_config
    from vllm import LLM, SamplingParams
    from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import cleanup_hidden_states
    from vllm.inputs import TokensPrompt

    llm = LLM(
        model=target,
        dtype=dtype,
        max_model_len=max(len(s) for s in sequences) + 8,
        enforce_eager=True,
        max_num_seqs=1,
        enable_prefix_caching=False,
        gpu_memory_utilization=0.1,
        speculative_config={
            "method": "extract_hidden_states",
            "num_speculative_tokens": 1,
            "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": layer_ids}},
        },
        kv_transfer_config=connector_config(out),
    )
    for tokens in sequences:
        output = llm.generate([TokensPrompt(prompt_token_ids=tokens)], SamplingParams(max_tokens=1), use_tqdm=False)
        path = output[0].kv_transfer_params["hidden_states_path"]
        await_hidden_states(llm, path)
        cleanup_hidden_states(path, keep_hidden_states=True)  # the lock goes, the file stays


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5])
