"""Acceptance models: the forms people quote for how many drafted tokens the target accepts.

i.i.d. per-token acceptance α (Leviathan et al. 2022): each drafted token is accepted with
probability α given the ones before it were, so a cycle of K drafts emits a truncated-geometric
number of tokens (accepted drafts + the one token the target always contributes), with

    E[tokens per cycle] = τ = (1 − α^(K+1)) / (1 − α)       (Leviathan et al. 2022, eq. 1)
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import brentq

from .errors import field_error


def _check_alpha(alpha) -> np.ndarray:
    a = np.asarray(alpha, dtype=float)
    if np.any(~np.isfinite(a)) or np.any((a < 0) | (a > 1)):
        bad = a[~((a >= 0) & (a <= 1))].flat[0]
        raise field_error("speculation", "alpha", float(bad), "an acceptance rate in [0, 1]")
    return a


def _check_k(k) -> np.ndarray:
    kk = np.asarray(k)
    if kk.dtype.kind not in "iu" and not (kk.dtype.kind == "f" and np.all(kk == np.round(kk))):
        raise field_error("speculation", "k", k, "a whole number of draft tokens")
    if np.any(kk < 0):
        raise field_error("speculation", "k", int(kk[kk < 0].flat[0]) if kk.ndim else int(kk), "an integer >= 0")
    return kk.astype(np.int64)


def tokens_per_cycle_iid(alpha, k) -> np.ndarray:
    """E[tokens emitted per cycle] for i.i.d. acceptance α and K drafts; in [1, K + 1]."""
    a = _check_alpha(alpha)
    kk = _check_k(k)
    a, kk = np.broadcast_arrays(a, kk)
    with np.errstate(divide="ignore", invalid="ignore"):
        geometric = (1.0 - a ** (kk + 1)) / (1.0 - a)
    return np.where(a >= 1.0, kk + 1.0, geometric)


def alpha_from_tau(tau: float, k: int) -> float:
    """The i.i.d. α whose E[tokens per cycle] with K drafts equals τ (inverse of the closed form)."""
    k = int(_check_k(k))
    if not (1.0 <= tau <= k + 1):
        raise field_error("speculation", "tau", tau, f"mean tokens per cycle in [1, K + 1] = [1, {k + 1}]")
    if tau == 1.0:
        return 0.0
    if tau == k + 1:
        return 1.0
    return float(brentq(lambda a: float(tokens_per_cycle_iid(a, k)) - tau, 0.0, 1.0, xtol=1e-14))


