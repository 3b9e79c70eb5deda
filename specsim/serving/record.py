"""What a run records: the per-request outcome and every iteration's step log, as raw arrays
(`EngineRun`); metrics.py turns them into DataFrames."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STEP_COLUMNS = (
    ("start_at_s", np.float64), ("duration_s", np.float64), ("n_running", np.int64), ("n_prefill", np.int64),
    ("n_decode", np.int64), ("n_spec", np.int64), ("k", np.int64), ("n_batched_tokens", np.int64),
    ("n_draft_tokens", np.int64), ("n_accepted_tokens", np.int64), ("n_emitted_tokens", np.int64),
    ("n_wasted_slots", np.int64), ("kv_used_blocks", np.int64), ("n_waiting", np.int64), ("n_preempted", np.int64),
    ("n_prefill_done", np.int64), ("replica", np.int64), ("drafter_on", np.bool_), ("n_catchup_tokens", np.int64),
    ("catchup_s", np.float64), ("n_prefix_hit_tokens", np.int64), ("kv_cached_blocks", np.int64),
    ("n_swapped", np.int64), ("n_swap_blocks", np.int64), ("swap_s", np.float64),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineRun:
    """Raw arrays from one run (one replica or a fleet); metrics.py turns them into DataFrames."""

    arrival_at_s: np.ndarray       # (n_requests,)
    first_token_at_s: np.ndarray   # (n_requests,) NaN if never
    finish_at_s: np.ndarray        # (n_requests,)
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    emitted_tokens: np.ndarray     # (n_requests,) tokens actually emitted
    status: np.ndarray             # (n_requests,) STATUS_*
    reject_reason: np.ndarray      # (n_requests,) index into REJECT_REASONS
    n_preemptions: np.ndarray      # (n_requests,)
    n_draft_tokens: np.ndarray     # (n_requests,)
    n_accepted_tokens: np.ndarray  # (n_requests,)
    n_spec_steps: np.ndarray       # (n_requests,)
    steps: dict                    # STEP_COLUMNS -> (n_steps,), every replica's iterations
    accepted_per_position: np.ndarray  # (k_max,) accepted drafts at position j
    drafted_per_position: np.ndarray   # (k_max,) drafts proposed at position j
    n_blocks: int
    block_size_tokens: int
    end_at_s: float
    token_log: tuple | None        # (request, first_token_index, count, at_s) arrays when recorded
    replica: np.ndarray = None     # (n_requests,) the replica that finished it (-1: none)
    prefill_replica: np.ndarray = None  # (n_requests,) disaggregated: where it was prefilled (-1: none)
    prefix_hit_tokens: np.ndarray = None  # (n_requests,) prompt tokens found cached at its first admission
    priority: np.ndarray = None    # (n_requests,) priority class (0 when none was given)
    n_swaps: np.ndarray = None     # (n_requests,) times swapped out
    roles: tuple = ("both",)       # each replica's role
    prefix_evicted_units: int = 0
    n_swap_fallbacks: int = 0      # swap preemptions turned into recompute for want of host space


def at_least(hist: np.ndarray) -> np.ndarray:
    """out[j] = number of cycles with a value >= j (so out[j + 1] counts position j + 1 reached)."""
    return np.cumsum(hist[::-1])[::-1].copy()


def step_arrays(logs: list) -> dict:
    """The replicas' step logs (tuples of STEP_COLUMNS) as one array per column, replica by replica
    (every value is a float64-exact number: times, counts far below 2^53, flags)."""
    rows = [row for log in logs for row in log]
    if not rows:
        return {name: np.zeros(0, dtype=dt) for name, dt in STEP_COLUMNS}
    table = np.array(rows, dtype=np.float64)
    return {name: (table[:, j].copy() if dt == np.float64 else table[:, j].astype(dt))
            for j, (name, dt) in enumerate(STEP_COLUMNS)}


__all__ = ["EngineRun", "STEP_COLUMNS", "at_least", "step_arrays"]
