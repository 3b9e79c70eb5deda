"""The engine's scheduler limits, with vLLM's names (`EngineConfig`)."""
from __future__ import annotations

from dataclasses import dataclass

from ..specs import checks as C
from ..specs.serving_tables import (DEFAULT_MAX_NUM_SEQS, MAX_BLOCK_SIZE, MAX_NUM_SEQS, MAX_WINDOW_STEPS,
                                   PREEMPTION_MODES, SCHEDULING)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """Scheduler limits (vLLM names). n_blocks: KV blocks available (see kv_cache.kv_capacity).

    preemption_mode: "recompute" or "swap"; swap_space_blocks: host blocks for swapped sequences
    (vLLM's swap_space, in blocks); swap_s_per_block: copy time of one block over the host link.
    scheduling: "fcfs" or "priority" (vLLM's scheduling_policy). mixed_prefill: with chunked prefill,
    whether a prefill chunk shares an iteration with the running decodes (vLLM) or runs first in a
    prefill-only iteration while they wait (False: SGLang's scheduler). prefix_caching: reuse cached prefix
    blocks (needs a workload with block chains). drafter_catchup: charge the drafter's catch-up
    (see the module docstring)."""

    n_blocks: int
    block_size_tokens: int = 16
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    mixed_prefill: bool = True
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
        w = "[engine]"
        C.integer(w, "n_blocks", self.n_blocks, lo=1, unit="KV blocks")
        C.integer(w, "block_size_tokens", self.block_size_tokens, lo=1, hi=MAX_BLOCK_SIZE, unit="tokens a block holds")
        C.integer(w, "max_num_seqs", self.max_num_seqs, lo=1, hi=MAX_NUM_SEQS, unit="running sequences at most")
        C.integer(w, "max_num_batched_tokens", self.max_num_batched_tokens, lo=1, unit="tokens per iteration")
        C.integer(w, "acceptance_window_steps", self.acceptance_window_steps, lo=1, hi=MAX_WINDOW_STEPS, unit="iterations")
        C.integer(w, "max_model_len", self.max_model_len, lo=0, unit="tokens; 0: no limit")
        C.fraction(w, "watermark_frac", self.watermark_frac, hi_open=True)
        C.choice(w, "preemption_mode", self.preemption_mode, PREEMPTION_MODES)
        C.choice(w, "scheduling", self.scheduling, SCHEDULING)
        C.integer(w, "swap_space_blocks", self.swap_space_blocks, lo=0, hi=None, unit="host blocks")
        C.number(w, "swap_s_per_block", self.swap_s_per_block, lo=0.0, unit="seconds a block")
        for name in ("prefix_caching", "drafter_catchup", "chunked_prefill", "mixed_prefill"):
            C.boolean(w, name, getattr(self, name))

    @property
    def watermark_blocks(self) -> int:
        return int(self.watermark_frac * self.n_blocks)
