"""Cycle analytics for speculative decoding: tokens per cycle, cycle time, speedup.

A linear cycle (Leviathan et al. 2022, §3; Chen et al. 2023, Alg. 2): the drafter proposes K tokens
in K sequential steps, then the target scores all K + 1 positions (the K drafts and the bonus
position) in one verify pass. With i.i.d. per-token acceptance α the number of tokens a cycle emits
(accepted drafts plus the one token the target always contributes) has expectation

    E[tokens per cycle] = (1 − α^(K+1)) / (1 − α)          (Leviathan et al. 2022, eq. 1)

which is K + 1 at α = 1. Speedup is measured against plain decoding at the same batch size and
context: plain emits B tokens per target step of one query token per sequence.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from .acceptance import alpha_from_tau, tokens_per_cycle_iid  # noqa: F401  (re-exported)


@dataclass(frozen=True, slots=True, kw_only=True)
class CycleTimes:
    """A speculative cycle against plain decoding; arrays broadcast like the inputs.
    tokens_per_s and baseline_tokens_per_s are aggregate over the batch."""

    target_step_time_s: np.ndarray
    draft_step_time_s: np.ndarray
    draft_time_s: np.ndarray
    verify_time_s: np.ndarray
    overhead_s: np.ndarray
    cycle_time_s: np.ndarray
    tokens_per_cycle: np.ndarray
    baseline_tokens_per_s: np.ndarray
    tokens_per_s: np.ndarray
    speedup: np.ndarray


def cycle_times(*, target_step_time_s, draft_time_s, verify_time_s, tokens_per_cycle, batch_size=1,
                draft_step_time_s=None, overhead_s=0.0) -> CycleTimes:
    """cycle = drafting + verify + per-cycle overhead; speedup = (τ / cycle) / (1 / plain step)."""
    target = np.asarray(target_step_time_s, dtype=float)
    draft = np.asarray(draft_time_s, dtype=float)
    verify = np.asarray(verify_time_s, dtype=float)
    over = np.asarray(overhead_s, dtype=float)
    tau = np.asarray(tokens_per_cycle, dtype=float)
    b = np.asarray(batch_size, dtype=float)
    cycle = draft + verify + over
    baseline = b / target
    spec = b * tau / cycle
    return CycleTimes(
        target_step_time_s=target, draft_step_time_s=np.asarray(draft if draft_step_time_s is None else draft_step_time_s, dtype=float),
        draft_time_s=draft, verify_time_s=verify, overhead_s=over, cycle_time_s=cycle, tokens_per_cycle=tau,
        baseline_tokens_per_s=baseline, tokens_per_s=spec, speedup=spec / baseline,
    )
