"""The engine's scheduler limits, with vLLM's names (`EngineConfig`)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import SpecError

PREEMPTION_MODES = ("recompute", "swap")
SCHEDULING = ("fcfs", "priority")


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """Scheduler limits (vLLM names). n_blocks: KV blocks available (see kv_cache.kv_capacity).

    preemption_mode: "recompute" or "swap"; swap_space_blocks: host blocks for swapped sequences
    (vLLM's swap_space, in blocks); swap_s_per_block: copy time of one block over the host link.
    scheduling: "fcfs" or "priority" (vLLM's scheduling_policy). prefix_caching: reuse cached prefix
    blocks (needs a workload with block chains). drafter_catchup: charge the drafter's catch-up
    (see the module docstring)."""

    n_blocks: int
    block_size_tokens: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    watermark_frac: float = 0.01
    max_model_len: int = 0
    acceptance_window_steps: int = 64
    preemption_mode: str = "recompute"
    swap_space_blocks: int = 0
    swap_s_per_block: float = 0.0
    scheduling: str = "fcfs"
    prefix_caching: bool = False
    drafter_catchup: bool = True

    def __post_init__(self) -> None:
        for name in ("n_blocks", "block_size_tokens", "max_num_seqs", "max_num_batched_tokens", "acceptance_window_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise SpecError(f"[engine]: field '{name}' = {v!r}: expected an integer >= 1")
        if isinstance(self.max_model_len, bool) or not isinstance(self.max_model_len, (int, np.integer)) or self.max_model_len < 0:
            raise SpecError(f"[engine]: field 'max_model_len' = {self.max_model_len!r}: expected an integer >= 0 (0: no limit)")
        if not (0.0 <= self.watermark_frac < 1.0):
            raise SpecError(f"[engine]: field 'watermark_frac' = {self.watermark_frac!r}: expected a fraction in [0, 1)")
        if self.preemption_mode not in PREEMPTION_MODES:
            raise SpecError(f"[engine]: field 'preemption_mode' = {self.preemption_mode!r}: expected one of "
                            f"{', '.join(PREEMPTION_MODES)}")
        if self.scheduling not in SCHEDULING:
            raise SpecError(f"[engine]: field 'scheduling' = {self.scheduling!r}: expected one of {', '.join(SCHEDULING)}")
        if isinstance(self.swap_space_blocks, bool) or not isinstance(self.swap_space_blocks, (int, np.integer)) \
                or self.swap_space_blocks < 0:
            raise SpecError(f"[engine]: swap_space_blocks = {self.swap_space_blocks!r}: expected an integer >= 0")
        if not (isinstance(self.swap_s_per_block, (int, float)) and self.swap_s_per_block >= 0
                and math.isfinite(self.swap_s_per_block)):
            raise SpecError(f"[engine]: swap_s_per_block = {self.swap_s_per_block!r}: expected a duration >= 0")
        for name in ("prefix_caching", "drafter_catchup", "chunked_prefill"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"[engine]: field {name!r} = {getattr(self, name)!r}: expected true or false")

    @property
    def watermark_blocks(self) -> int:
        return int(self.watermark_frac * self.n_blocks)
