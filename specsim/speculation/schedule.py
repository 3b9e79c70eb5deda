"""Draft lengths that change from cycle to cycle: Hugging Face assisted generation's heuristic.

transformers' assisted generation (4.3x, the version Spec-Bench pins: 4.37.1) starts at
`num_assistant_tokens` = 5 and, with `num_assistant_tokens_schedule = "heuristic"`, adds 2 after a
cycle whose drafts were all accepted and subtracts 1 (to at least 1) otherwise
(`generation/candidate_generator.py`, `update_candidate_strategy`). With i.i.d. acceptance α a cycle of
K drafts accepts all of them with probability α^K, so K is a Markov chain on 1, 2, ...:

    K → K + 2 with probability α^K,   K → max(1, K − 1) otherwise,

whose stationary distribution π weights the cycles: over many cycles the tokens per second are
Σ π_K τ_K / Σ π_K cycle_K (a renewal-reward average), τ_K the i.i.d. closed form at K. The chain is
truncated at K_MAX (α^K is negligible beyond it for any α < 1; at α = 1 the draft would grow
without bound, and the cap stands in).
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import brentq

from ..errors import field_error
from .acceptance import tokens_per_cycle_iid

SCHEDULES = ("fixed", "hf-heuristic")
K_MAX = 64


def hf_heuristic_stationary(alpha: float, *, k_max: int = K_MAX) -> tuple[np.ndarray, np.ndarray]:
    """(K states 1..k_max, their stationary probabilities) of the heuristic schedule at i.i.d. α."""
    a = float(alpha)
    if not 0.0 <= a <= 1.0:
        raise field_error("schedule", "alpha", a, "an acceptance rate in [0, 1]")
    ks = np.arange(1, k_max + 1)
    n = ks.size
    P = np.zeros((n, n))
    for i, k in enumerate(ks):
        up = a ** k
        P[i, min(k + 2, k_max) - 1] += up
        P[i, max(k - 1, 1) - 1] += 1.0 - up
    # π P = π, Σπ = 1: replace one balance equation by the normalisation
    A = P.T - np.eye(n)
    A[-1, :] = 1.0
    rhs = np.zeros(n)
    rhs[-1] = 1.0
    pi = np.linalg.solve(A, rhs)
    pi = np.clip(pi, 0.0, None)
    return ks, pi / pi.sum()


def hf_heuristic_tau(alpha: float) -> float:
    """Mean tokens per cycle (bonus included) under the heuristic schedule at i.i.d. α."""
    ks, pi = hf_heuristic_stationary(alpha)
    return float(pi @ tokens_per_cycle_iid(alpha, ks))


def alpha_from_hf_heuristic_tau(tau: float, *, where: str = "acceptance") -> float:
    """The i.i.d. α whose heuristic schedule emits τ tokens per cycle on average."""
    top = hf_heuristic_tau(1.0)
    if not 1.0 <= tau <= top:
        raise field_error(where, "tau", tau, f"mean tokens per cycle in [1, {top:.1f}] under the heuristic schedule")
    if tau == 1.0:
        return 0.0
    return float(brentq(lambda a: hf_heuristic_tau(a) - tau, 0.0, 1.0 - 1e-12, xtol=1e-13))


__all__ = ["SCHEDULES", "K_MAX", "hf_heuristic_stationary", "hf_heuristic_tau", "alpha_from_hf_heuristic_tau"]
