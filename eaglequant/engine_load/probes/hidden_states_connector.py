"""vLLM's ``ExampleHiddenStatesConnector`` where there is no CUDA: the same files, written synchronously.

vLLM 0.32's stock connector (``distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py``)
copies a finished request's hidden states out of the cache-only layer on a CUDA stream into pinned memory and
writes them from a thread pool; on the CPU build the pinned allocation fails ("pin_memory=True requires a CUDA or
other accelerator backend"). This subclass changes only that step (``_submit_async_write``): it indexes the same
cache slots on the CPU, writes the same safetensors file (``hidden_states`` [T, n_layers, H], ``token_ids`` [T])
under the same ``.lock`` protocol, and reports the request done at once. Everything else (which requests are
saved, the file names, ``include_output_tokens``, TP rank 0 alone writing) is the stock connector's.

vLLM loads it by ``kv_connector_module_path`` (``KVConnectorFactory``): ``{"kv_connector":
"SynchronousHiddenStatesConnector", "kv_connector_module_path": "<package>.hidden_states_connector"}``.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from safetensors.torch import save_file
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
    extract_from_kv_cache,
)


class _Written:
    """What ``get_finished`` polls in place of the stock connector's CUDA event: the write already happened."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


class SynchronousHiddenStatesConnector(ExampleHiddenStatesConnector):
    """The stock connector with its CUDA-stream copy and background write replaced by a plain write."""

    def _submit_async_write(self, pending: Any) -> None:
        if not self._is_tp_rank_zero:
            return
        if self._kv_cache is None or self._kv_cache.is_cuda:
            super()._submit_async_write(pending)
            return
        block_ids = torch.tensor(pending.block_ids, dtype=torch.long)
        offsets = torch.arange(self._block_size, dtype=torch.long)
        slots = (offsets[None, :] + block_ids[:, None] * self._block_size).flatten()
        hidden_states = extract_from_kv_cache(self._kv_cache, slots, pending.token_ids.shape[0]).clone()
        os.makedirs(os.path.dirname(pending.filename) or ".", exist_ok=True)
        lock_fd = self._lock_fds.pop(pending.req_id, None)
        try:
            save_file({"hidden_states": hidden_states, "token_ids": pending.token_ids.clone()}, pending.filename)
        finally:
            if lock_fd is not None:
                os.close(lock_fd)  # releases the stock protocol's LOCK_EX: readers waiting on LOCK_SH go on
        self._req_copy_events[pending.req_id] = _Written()
