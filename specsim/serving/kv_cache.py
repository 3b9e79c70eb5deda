"""Paged KV cache capacity and block arithmetic (vLLM's PagedAttention layout).

Capacity, on the busiest device of the group (the one that also holds the drafter):

    usable = memory × gpu_memory_utilization − target weights / tp − drafter weights / drafter_tp
             − activation reserve
    n_blocks = floor(usable / bytes per block)

A block holds `block_size` tokens of the target's cache shard on that device and, with a draft
model, the drafter's shard for the same tokens: vLLM v0's SpecDecodeWorker sizes both caches to one
block count (`split_num_cache_blocks_evenly`), so a block's bytes are the sum of both. vLLM's
profiled activation peak is not modelled by default (activation_reserve_bytes = 0); pass it to
model it. Block counts are integers; per-sequence arithmetic is vectorised over numpy arrays.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import DoesNotFitError, field_error
from ..specs.hardware import HardwareProfile
from ..specs.models import ModelSpec
from ..cost.roofline import kv_bytes_per_device, weight_bytes_per_device


@dataclass(frozen=True, slots=True, kw_only=True)
class KVCapacity:
    """How many KV blocks fit, and what the memory of the busiest device is spent on."""

    block_size_tokens: int
    n_blocks: int
    bytes_per_block: float
    memory_bytes: dict

    @property
    def capacity_tokens(self) -> int:
        return self.n_blocks * self.block_size_tokens


def kv_capacity(target: ModelSpec, hw: HardwareProfile, *, tp: int = 1, drafter: ModelSpec | None = None,
                drafter_tp: int = 1, gpu_memory_utilization: float = 0.9, block_size_tokens: int = 16,
                activation_reserve_bytes: float = 0.0, extra_weight_bytes: dict | None = None,
                extra_kv_bytes_per_token: float = 0.0, memory_split: int = 1) -> KVCapacity:
    """KV blocks that fit on one device of the group (see the module docstring).

    extra_weight_bytes: other per-device weights by label (Medusa heads, an EAGLE layer);
    extra_kv_bytes_per_token: per-device cache bytes a drafting head adds per token (EAGLE's one
    layer), stored in the same blocks. memory_split: devices sharing the target's weights and cache
    beyond the tensor-parallel split (a layer split over n devices: n)."""
    where = f"KV cache for {target.id} on {tp}x {hw.id}"
    if not (0.0 < gpu_memory_utilization <= 1.0):
        raise field_error(where, "gpu_memory_utilization", gpu_memory_utilization, "a fraction in (0, 1]")
    if isinstance(block_size_tokens, bool) or not isinstance(block_size_tokens, (int, np.integer)) or block_size_tokens < 1:
        raise field_error(where, "block_size", block_size_tokens, "an integer >= 1 (tokens per block)")
    budget = hw.memory_bytes * gpu_memory_utilization
    memory = {"target weights": weight_bytes_per_device(target, tp) / memory_split}
    per_block = float(kv_bytes_per_device(target, batch_size=1, context_len=block_size_tokens, tp=tp)) / memory_split
    if drafter is not None:
        memory["drafter weights"] = weight_bytes_per_device(drafter, drafter_tp)
        per_block += float(kv_bytes_per_device(drafter, batch_size=1, context_len=block_size_tokens, tp=drafter_tp))
    for label, nbytes in (extra_weight_bytes or {}).items():
        memory[label] = float(nbytes)
    per_block += float(extra_kv_bytes_per_token) * block_size_tokens
    if activation_reserve_bytes:
        memory["activation reserve"] = float(activation_reserve_bytes)
    usable = budget - sum(memory.values())
    n_blocks = int(usable // per_block) if usable > 0 else 0
    if n_blocks < 1:
        detail = ", ".join(f"{k} {v / 1e9:.2f} GB" for k, v in memory.items())
        raise DoesNotFitError(
            f"{where}{' with drafter ' + drafter.id if drafter else ''}: no room for a KV cache: "
            f"{gpu_memory_utilization:.2f} x {hw.memory_bytes / 1e9:.2f} GB = {budget / 1e9:.2f} GB per device, "
            f"{detail}. Use a larger tensor-parallel group, a quantised format or a higher gpu_memory_utilization."
        )
    memory["KV cache"] = n_blocks * per_block
    return KVCapacity(block_size_tokens=int(block_size_tokens), n_blocks=n_blocks, bytes_per_block=per_block,
                      memory_bytes=memory)


def kv_capacity_for(op, *, gpu_memory_utilization: float = 0.9, block_size_tokens: int = 16,
                    activation_reserve_bytes: float = 0.0) -> KVCapacity:
    """KV blocks for an operating point: its target on its deployment, and when it speculates, its
    drafter family's weights and cache (speculation.families.DrafterWork) in the same blocks."""
    dep = op.deployment
    split = dep.memory_split // dep.tp
    extra_w, extra_kv = {}, 0.0
    if op.speculative:
        work = op.work
        if work.weight_bytes:
            extra_w[work.weight_label] = work.weight_bytes / split
        if work.cache_model is not None:
            extra_kv = float(kv_bytes_per_device(work.cache_model, batch_size=1, context_len=1, tp=work.cache_tp)) / split
    return kv_capacity(op.target, op.hardware, tp=dep.tp, gpu_memory_utilization=gpu_memory_utilization,
                       block_size_tokens=block_size_tokens, activation_reserve_bytes=activation_reserve_bytes,
                       extra_weight_bytes=extra_w, extra_kv_bytes_per_token=extra_kv, memory_split=split)


def blocks_for(tokens, block_size_tokens: int):
    """Blocks needed to hold `tokens` tokens (ceil division); int or int64 array like the input."""
    return -(-np.asarray(tokens, dtype=np.int64) // block_size_tokens)
