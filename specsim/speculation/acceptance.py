"""Acceptance models: the forms people quote for how many drafted tokens the target accepts.

i.i.d. per-token acceptance α (Leviathan et al. 2022): each drafted token is accepted with
probability α given the ones before it were, so a cycle of K drafts emits a truncated-geometric
number of tokens (accepted drafts + the one token the target always contributes), with

    E[tokens per cycle] = τ = (1 − α^(K+1)) / (1 − α)       (Leviathan et al. 2022, eq. 1)

Beyond i.i.d.: conversions between the accepted-length histogram, conditional and unconditional
(vLLM) per-position rates, τ, vLLM's draft acceptance rate and Sequoia's per-rank tree vector;
maximum-likelihood fits returning a frozen `AcceptanceFit` (estimate, likelihood-ratio interval,
n, log-likelihood); `AcceptanceModel`, an explicit and by default absent dependence on context
length and temperature; and `sample_accepted_lengths` for the simulators. Conventions: K drafts per
cycle, A ∈ {0..K} accepted drafts, τ = E[A] + 1.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import chdtri, xlog1py, xlogy

from ..errors import field_error


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
        # 1 − α^(K+1) as −expm1((K+1)·log α): no cancellation as α → 1 (1 − α is exact there)
        geometric = -np.expm1((kk + 1) * np.log(a)) / (1.0 - a)
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


# --------------------------------------------------------------------------------------------------
# Forms of a linear draft's acceptance, K drafts per cycle, A = accepted drafts ∈ {0..K}
# --------------------------------------------------------------------------------------------------
#   histogram    h (..., K+1): h[a] = P(A = a) (counts are accepted and normalised)
#   unconditional u (..., K):  u[i−1] = P(A ≥ i), non-increasing — vLLM's per-position acceptance
#                              rates, num_accepted_tokens_per_pos[i−1] / num_drafts (vLLM v1 spec
#                              decode metrics, `vllm:spec_decode_num_accepted_tokens_per_pos`)
#   conditional  c (..., K):   c[i−1] = P(A ≥ i | A ≥ i−1), the chance position i is accepted given
#                              all before it were; c = α everywhere is the i.i.d. model
#   τ:                         E[A] + 1, tokens per cycle with the bonus token (vLLM's "mean
#                              acceptance length", SGLang's `accept_length`)
# Every conversion works on the last axis and broadcasts over the leading ones.

def _as_probs(name: str, x, *, min_ndim: int = 1) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if a.ndim < min_ndim:
        raise field_error("acceptance", name, x, f"an array with at least {min_ndim} dimension(s)")
    if np.any(~np.isfinite(a)) or np.any((a < 0) | (a > 1)):
        raise field_error("acceptance", name, np.asarray(x).tolist(), "probabilities in [0, 1]")
    return a


def _as_histogram(hist) -> np.ndarray:
    h = np.asarray(hist, dtype=float)
    if h.ndim < 1 or h.shape[-1] < 1:
        raise field_error("acceptance", "hist", hist, "an array over accepted lengths 0..K (last axis)")
    if np.any(~np.isfinite(h)) or np.any(h < 0):
        raise field_error("acceptance", "hist", np.asarray(hist).tolist(), "non-negative counts or probabilities")
    total = h.sum(axis=-1, keepdims=True)
    if np.any(total <= 0):
        raise field_error("acceptance", "hist", np.asarray(hist).tolist(), "at least one observation per histogram")
    return h / total


def conditional_from_iid(alpha, k: int) -> np.ndarray:
    """float (..., K): the i.i.d. model as conditional rates, c_i = α for every position."""
    a = _check_alpha(alpha)
    kk = int(_check_k(k))
    return np.repeat(a[..., None], kk, axis=-1)


def unconditional_from_conditional(cond) -> np.ndarray:
    """u_i = P(A ≥ i) = Π_{j ≤ i} c_j (chain rule)."""
    return np.cumprod(_as_probs("cond", cond), axis=-1)


def conditional_from_unconditional(uncond) -> np.ndarray:
    """c_i = u_i / u_{i−1} (u_0 = 1). Where u_{i−1} = 0 the position is never reached and c_i is
    undefined; it is returned as 0 so the result still describes the same distribution."""
    u = _as_probs("uncond", uncond)
    if np.any(np.diff(u, axis=-1) > 1e-12):
        raise field_error("acceptance", "uncond", u.tolist(), "non-increasing rates (P(A ≥ i) cannot grow with i)")
    prev = np.concatenate([np.ones(u.shape[:-1] + (1,)), u[..., :-1]], axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.where(prev > 0, u / np.where(prev > 0, prev, 1.0), 0.0)
    return np.clip(c, 0.0, 1.0)


def histogram_from_unconditional(uncond) -> np.ndarray:
    """h_a = u_a − u_{a+1} with u_0 = 1 and u_{K+1} = 0: float (..., K+1)."""
    u = _as_probs("uncond", uncond)
    if np.any(np.diff(u, axis=-1) > 1e-12):
        raise field_error("acceptance", "uncond", u.tolist(), "non-increasing rates (P(A ≥ i) cannot grow with i)")
    lead = u.shape[:-1] + (1,)
    upper = np.concatenate([np.ones(lead), u], axis=-1)
    lower = np.concatenate([u, np.zeros(lead)], axis=-1)
    return np.clip(upper - lower, 0.0, None)


def unconditional_from_histogram(hist) -> np.ndarray:
    """u_i = Σ_{a ≥ i} h_a for i = 1..K (h normalised first): float (..., K)."""
    h = _as_histogram(hist)
    tail = np.cumsum(h[..., ::-1], axis=-1)[..., ::-1]  # tail[a] = P(A ≥ a)
    return np.clip(tail[..., 1:], 0.0, 1.0)


def histogram_from_conditional(cond) -> np.ndarray:
    """h_a = (Π_{j ≤ a} c_j)(1 − c_{a+1}), h_K = Π c_j: float (..., K+1)."""
    return histogram_from_unconditional(unconditional_from_conditional(cond))


def conditional_from_histogram(hist) -> np.ndarray:
    """c_i = P(A ≥ i) / P(A ≥ i−1); 0 where position i is never reached."""
    return conditional_from_unconditional(unconditional_from_histogram(hist))


def histogram_from_iid(alpha, k: int) -> np.ndarray:
    """The truncated geometric: h_a = α^a (1 − α) for a < K, h_K = α^K."""
    return histogram_from_conditional(conditional_from_iid(alpha, k))


def tau_from_histogram(hist) -> np.ndarray:
    """τ = Σ_a (a + 1) h_a = E[A] + 1."""
    h = _as_histogram(hist)
    return (h * np.arange(1, h.shape[-1] + 1)).sum(axis=-1)


def tau_from_unconditional(uncond) -> np.ndarray:
    """τ = 1 + Σ_i P(A ≥ i) (the tail-sum formula for E[A]); vLLM's mean acceptance length."""
    return 1.0 + _as_probs("uncond", uncond).sum(axis=-1)


def tau_from_conditional(cond) -> np.ndarray:
    """τ = 1 + Σ_i Π_{j ≤ i} c_j; equals (1 − α^(K+1)) / (1 − α) when every c_i = α."""
    return 1.0 + unconditional_from_conditional(cond).sum(axis=-1)


def position_ratios_from_conditional(cond, alpha: float) -> tuple[float, ...]:
    """r_j = c_j / α: a measured chain's per-position rates relative to its i.i.d. α (both from the
    same cycles), the shape `shaped_conditional` keeps while the level α moves."""
    c = _as_probs("cond", cond)
    a = float(_check_alpha(alpha))
    if c.ndim != 1 or c.size == 0:
        raise field_error("acceptance", "cond", c.tolist(), "a 1-D vector of K rates")
    if a <= 0.0:
        raise field_error("acceptance", "alpha", a, "> 0 (a shape relative to an α of 0 is undefined)")
    return tuple(float(x) for x in c / a)


def shaped_conditional(alpha, ratios, k) -> np.ndarray:
    """Per-position rates (..., K) of a chain whose measured shape moves with its level:
    c_j = clip(α · r_j, 0, 1), positions past the measured ones holding the last ratio (the chain's
    rates level off after the first positions; what lies past them was not measured).
    At the α the ratios came from, these are the measured rates."""
    a = _check_alpha(alpha)
    kk = int(_check_k(k))
    r = np.asarray(ratios, dtype=float)
    if r.ndim != 1 or r.size == 0 or np.any(r < 0) or not np.all(np.isfinite(r)):
        raise field_error("acceptance", "ratios", r.tolist(), "a 1-D vector of finite ratios >= 0")
    r = np.concatenate([r[:kk], np.repeat(r[-1], max(0, kk - r.size))])
    return np.clip(a[..., None] * r, 0.0, 1.0)


def draft_acceptance_rate_from_tau(tau, k) -> np.ndarray:
    """vLLM's "draft acceptance rate" = num_accepted_tokens / num_draft_tokens = (τ − 1) / K.
    Not the i.i.d. α: a rate of 0.5 at K = 4 is τ = 3, whose i.i.d. α is about 0.75."""
    kk = _check_k(k)
    return (np.asarray(tau, dtype=float) - 1.0) / kk


def tau_from_draft_acceptance_rate(rate, k) -> np.ndarray:
    """τ = 1 + K · (num_accepted_tokens / num_draft_tokens)."""
    kk = _check_k(k)
    return 1.0 + _as_probs("rate", rate, min_ndim=0) * kk


# --------------------------------------------------------------------------------------------------
# Per-rank tree acceptance (Sequoia, Chen et al. 2024, §3.1)
# --------------------------------------------------------------------------------------------------
# p_r: the joint probability that, at an accepted node, candidates 0..r−1 are rejected and the
# r-th ranked candidate is accepted (Σ_r p_r ≤ 1); this is the vector specsim.trees takes.
# c_r: the same event conditional on 0..r−1 having been rejected: c_r = p_r / (1 − Σ_{j<r} p_j).
# For a chain only rank 0 matters and p_0 = c_0 = α.

def rank_acceptance_from_conditional(cond_by_rank) -> np.ndarray:
    """p_r = c_r · Π_{j<r} (1 − c_j): from "accepted given the better ones were rejected" to
    Sequoia's joint per-rank vector (Chen et al. 2024, §3.1)."""
    c = _as_probs("cond_by_rank", cond_by_rank)
    lead = c.shape[:-1] + (1,)
    survive = np.concatenate([np.ones(lead), np.cumprod(1.0 - c, axis=-1)[..., :-1]], axis=-1)
    return c * survive


def conditional_from_rank_acceptance(rank_acceptance) -> np.ndarray:
    """c_r = p_r / (1 − Σ_{j<r} p_j); 0 where the better ranks always accept (never reached)."""
    p = _as_probs("rank_acceptance", rank_acceptance)
    if np.any(p.sum(axis=-1) > 1 + 1e-9):
        raise field_error("acceptance", "rank_acceptance", p.tolist(), "joint per-rank probabilities (sum <= 1)")
    lead = p.shape[:-1] + (1,)
    left = 1.0 - np.concatenate([np.zeros(lead), np.cumsum(p, axis=-1)[..., :-1]], axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.where(left > 1e-15, p / np.where(left > 1e-15, left, 1.0), 0.0)
    return np.clip(c, 0.0, 1.0)


# --------------------------------------------------------------------------------------------------
# Fitting by maximum likelihood
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptanceFit:
    """A fitted acceptance parameter, shaped like scipy's OptimizeResult but frozen.

    parameter: "alpha" (i.i.d. rate, a float), "conditional" (per-position rates, (K,)) or
        "rank_acceptance" (Sequoia's joint per-rank vector, (R,)).
    estimate, ci_low, ci_high: the MLE and the confidence interval at `level` (pointwise per entry).
    n_obs: cycles observed (for rank fits: candidate examinations). log_likelihood: at the MLE.
    method: how the estimate and the interval were made. k: drafts per cycle (None for rank fits).
    """

    parameter: str
    estimate: float | np.ndarray
    ci_low: float | np.ndarray
    ci_high: float | np.ndarray
    level: float
    n_obs: int
    log_likelihood: float
    method: str
    k: int | None = None

    def __post_init__(self) -> None:
        for name in ("estimate", "ci_low", "ci_high"):
            value = getattr(self, name)
            if isinstance(value, np.ndarray):
                value = value.copy()
                value.setflags(write=False)
                object.__setattr__(self, name, value)

    @property
    def tau(self) -> float:
        """τ implied by the estimate (linear drafts only)."""
        if self.parameter == "alpha":
            return float(tokens_per_cycle_iid(self.estimate, self.k))
        if self.parameter == "conditional":
            return float(tau_from_conditional(np.nan_to_num(self.estimate, nan=0.0)))
        raise field_error("AcceptanceFit", "parameter", self.parameter, "'alpha' or 'conditional' for τ")


def _check_level(level) -> float:
    if not (0.0 < float(level) < 1.0):
        raise field_error("acceptance", "level", level, "a confidence level in (0, 1)")
    return float(level)


def _bernoulli_loglik(a: float, s: float, f: float) -> float:
    return float(xlogy(s, a) + xlog1py(f, -a))


def _lr_interval(s: float, f: float, level: float) -> tuple[float, float, float, float]:
    """MLE, likelihood-ratio interval and max log-likelihood for ℓ(a) = s·log a + f·log(1 − a).

    The interval is {a : 2(ℓ(â) − ℓ(a)) ≤ χ²₁(level)} (Wilks); with one parameter this is the profile
    likelihood interval. It stays inside [0, 1] and reaches the boundary when s = 0 or f = 0.
    """
    n = s + f
    if n <= 0:
        return float("nan"), 0.0, 1.0, 0.0
    a_hat = s / n
    ll_hat = _bernoulli_loglik(a_hat, s, f)
    half = 0.5 * float(chdtri(1, 1.0 - level))  # χ²₁ quantile at `level`

    def excess(a: float) -> float:
        return ll_hat - _bernoulli_loglik(a, s, f) - half

    lo = 0.0 if s == 0 else brentq(excess, 0.0, a_hat, xtol=1e-14)
    hi = 1.0 if f == 0 else brentq(excess, a_hat, 1.0, xtol=1e-14)
    return a_hat, float(lo), float(hi), ll_hat


def _check_lengths(accepted_lengths, k: int) -> tuple[np.ndarray, int]:
    kk = int(_check_k(k))
    a = np.asarray(accepted_lengths)
    if a.size and (a.dtype.kind not in "iu" and not np.all(np.asarray(a, dtype=float) == np.round(a))):
        raise field_error("acceptance", "accepted_lengths", "non-integer values", "whole numbers of accepted drafts")
    a = np.asarray(a, dtype=np.int64).ravel()
    if np.any((a < 0) | (a > kk)):
        raise field_error("acceptance", "accepted_lengths", int(a[(a < 0) | (a > kk)][0]), f"accepted drafts in [0, K = {kk}]")
    return a, kk


def fit_iid_alpha(accepted_lengths, k: int, *, level: float = 0.95) -> AcceptanceFit:
    """MLE of the i.i.d. acceptance rate α from the accepted draft counts of linear cycles of K.

    Model: truncated geometric, P(A = a) = α^a (1 − α) for a < K, P(A = K) = α^K (Leviathan et
    al. 2022, §3.1). The likelihood is α^S (1 − α)^F with S = Σ a (accepted drafts) and F = the
    number of cycles that ended in a rejection (a < K), so the MLE is α̂ = S / (S + F) exactly.
    Interval: likelihood ratio (Wilks, χ²₁), which here is the profile-likelihood interval.
    """
    level = _check_level(level)
    a, kk = _check_lengths(accepted_lengths, k)
    s = float(a.sum())
    f = float(np.count_nonzero(a < kk))
    est, lo, hi, ll = _lr_interval(s, f, level)
    return AcceptanceFit(parameter="alpha", estimate=est, ci_low=lo, ci_high=hi, level=level, n_obs=int(a.size),
                         log_likelihood=ll, method="closed-form MLE of the truncated geometric; "
                         "likelihood-ratio (profile) interval, chi-square(1)", k=kk)


def _per_position_fit(successes: np.ndarray, trials: np.ndarray, level: float):
    est, lo, hi = (np.empty(successes.size) for _ in range(3))
    ll = 0.0
    for i, (s, n) in enumerate(zip(successes, trials)):
        est[i], lo[i], hi[i], lli = _lr_interval(float(s), float(n - s), level)
        ll += lli
    return est, lo, hi, ll


def fit_conditional_rates(accepted_lengths, k: int, *, level: float = 0.95) -> AcceptanceFit:
    """MLE of the conditional per-position rates c_1..c_K from accepted draft counts.

    Position i is tried in the cycles with A ≥ i − 1 and accepted in those with A ≥ i, so the
    likelihood factors into K binomials and ĉ_i = #(A ≥ i) / #(A ≥ i − 1) (the empirical histogram
    is the nonparametric MLE; this is it in conditional form). Intervals: likelihood ratio per
    position (pointwise, not simultaneous). A position never tried is nan with interval [0, 1].
    """
    level = _check_level(level)
    a, kk = _check_lengths(accepted_lengths, k)
    reached = np.array([np.count_nonzero(a >= i) for i in range(kk + 1)], dtype=float)
    est, lo, hi, ll = _per_position_fit(reached[1:], reached[:-1], level)
    return AcceptanceFit(parameter="conditional", estimate=est, ci_low=lo, ci_high=hi, level=level,
                         n_obs=int(a.size), log_likelihood=ll,
                         method="per-position binomial MLE; likelihood-ratio intervals, chi-square(1)", k=kk)


def fit_rank_acceptance(accepted, tried, *, level: float = 0.95) -> AcceptanceFit:
    """MLE of Sequoia's per-rank acceptance vector from tree-verification counts.

    accepted[r]: times the rank-r candidate was accepted; tried[r]: times it was examined (its
    parent accepted, candidates 0..r−1 rejected, and the tree had a rank-r child). Each rank is a
    binomial in c_r = P(accept r | 0..r−1 rejected), ĉ_r = accepted[r] / tried[r], and the estimate
    is p_r = ĉ_r Π_{j<r} (1 − ĉ_j) (Chen et al. 2024, §3.1). Interval for p_r: the product of the
    per-rank likelihood-ratio intervals, each at level^(1/(r+1)) (Šidák), which is conservative.
    Ranks never tried come back nan; trim them before passing the vector to specsim.trees.
    """
    level = _check_level(level)
    acc = np.asarray(accepted, dtype=float)
    tr = np.asarray(tried, dtype=float)
    if acc.ndim != 1 or acc.shape != tr.shape or acc.size == 0:
        raise field_error("acceptance", "accepted", np.asarray(accepted).tolist(), "a 1-D count per rank, shaped like tried")
    if np.any(acc < 0) or np.any(acc > tr) or np.any(acc != np.round(acc)) or np.any(tr != np.round(tr)):
        raise field_error("acceptance", "accepted", acc.tolist(), "whole counts with 0 <= accepted <= tried")
    c, _, _, ll = _per_position_fit(acc, tr, level)
    est = rank_acceptance_from_conditional(np.nan_to_num(c, nan=0.0))
    est = np.where(tr > 0, est, np.nan)
    lo, hi = np.empty(acc.size), np.empty(acc.size)
    for r in range(acc.size):
        lvl = level ** (1.0 / (r + 1))
        bounds = [_lr_interval(float(acc[j]), float(tr[j] - acc[j]), lvl)[1:3] for j in range(r + 1)]
        lo[r] = bounds[r][0] * np.prod([1.0 - b[1] for b in bounds[:r]])
        hi[r] = bounds[r][1] * np.prod([1.0 - b[0] for b in bounds[:r]])
    return AcceptanceFit(parameter="rank_acceptance", estimate=est, ci_low=lo, ci_high=hi, level=level,
                         n_obs=int(tr.sum()), log_likelihood=ll,
                         method="per-rank binomial MLE; product of Sidak-adjusted likelihood-ratio intervals")


_VLLM_KEYS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos")


def _vllm_counters(counters) -> dict:
    out = {}
    for key, value in dict(counters).items():
        name = str(key).removeprefix("vllm:").removeprefix("spec_decode_").removesuffix("_total")
        if name not in _VLLM_KEYS:
            raise field_error("vllm counters", str(key), value, f"one of {', '.join(_VLLM_KEYS)}")
        out[name] = value
    for need in ("num_drafts", "num_accepted_tokens"):
        if need not in out:
            raise field_error("vllm counters", need, None, "present (a cumulative count)")
    return out


def tau_from_vllm_counters(counters) -> float:
    """vLLM's mean acceptance length: 1 + num_accepted_tokens / num_drafts."""
    c = _vllm_counters(counters)
    if c["num_drafts"] <= 0:
        raise field_error("vllm counters", "num_drafts", c["num_drafts"], "> 0")
    return 1.0 + float(c["num_accepted_tokens"]) / float(c["num_drafts"])


def fit_vllm_counters(counters, *, model: str = "conditional", level: float = 0.95) -> AcceptanceFit:
    """Fit acceptance from vLLM's speculative-decoding counters (v1 metrics, cumulative).

    counters: a mapping with num_drafts, num_accepted_tokens, and optionally num_draft_tokens and
    num_accepted_tokens_per_pos (a list of K counts: drafts whose position i was accepted, i.e. with
    A ≥ i + 1). Prometheus names (`vllm:spec_decode_num_drafts_total`, ...) are accepted too.
    model="conditional": per-position binomial MLE (needs the per-position counts).
    model="iid": the truncated-geometric MLE, whose sufficient statistics S = num_accepted_tokens and
    F = num_drafts − per_pos[K−1] come from the counts; without per-position counts only the
    method-of-moments α (matching τ) is possible, returned with a nan interval and log-likelihood.
    """
    level = _check_level(level)
    c = _vllm_counters(counters)
    n = float(c["num_drafts"])
    accepted = float(c["num_accepted_tokens"])
    per_pos = c.get("num_accepted_tokens_per_pos")
    if per_pos is not None:
        per_pos = np.asarray(per_pos, dtype=float)
        k = per_pos.size
        if k == 0 or np.any(np.diff(per_pos) > 0) or per_pos[0] > n or np.any(per_pos < 0):
            raise field_error("vllm counters", "num_accepted_tokens_per_pos", per_pos.tolist(),
                              "K non-increasing counts, the first at most num_drafts")
        if not np.isclose(per_pos.sum(), accepted, rtol=1e-9, atol=0.5):
            raise field_error("vllm counters", "num_accepted_tokens", accepted,
                              f"the sum of num_accepted_tokens_per_pos = {per_pos.sum():g}")
    elif "num_draft_tokens" in c and n > 0:
        ratio = float(c["num_draft_tokens"]) / n
        if abs(ratio - round(ratio)) > 1e-6:
            raise field_error("vllm counters", "num_draft_tokens", c["num_draft_tokens"],
                              "num_drafts × K (a whole K); pass num_accepted_tokens_per_pos instead")
        k = int(round(ratio))
    else:
        raise field_error("vllm counters", "num_draft_tokens", None, "present when per-position counts are absent")
    if model == "conditional":
        if per_pos is None:
            raise field_error("vllm counters", "num_accepted_tokens_per_pos", None,
                              "present for model='conditional' (or use model='iid')")
        trials = np.concatenate([[n], per_pos[:-1]])
        est, lo, hi, ll = _per_position_fit(per_pos, trials, level)
        return AcceptanceFit(parameter="conditional", estimate=est, ci_low=lo, ci_high=hi, level=level,
                             n_obs=int(n), log_likelihood=ll, k=k,
                             method="per-position binomial MLE from vLLM counters; likelihood-ratio intervals")
    if model == "iid":
        if per_pos is not None:
            est, lo, hi, ll = _lr_interval(accepted, n - per_pos[-1], level)
            return AcceptanceFit(parameter="alpha", estimate=est, ci_low=lo, ci_high=hi, level=level, n_obs=int(n),
                                 log_likelihood=ll, k=k, method="truncated-geometric MLE from vLLM counters; "
                                 "likelihood-ratio (profile) interval, chi-square(1)")
        tau = 1.0 + accepted / n
        est = alpha_from_tau(min(max(tau, 1.0), k + 1.0), k)
        return AcceptanceFit(parameter="alpha", estimate=est, ci_low=float("nan"), ci_high=float("nan"),
                             level=level, n_obs=int(n), log_likelihood=float("nan"), k=k,
                             method="method of moments (alpha matching tau); no per-position counts, no interval")
    raise field_error("fit_vllm_counters", "model", model, "'conditional' or 'iid'")


# --------------------------------------------------------------------------------------------------
# Dependence on context length and temperature
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptanceModel:
    """Acceptance as a function of context length and sampling temperature — an assumption.

    Functional form (an assumption, not a law; calibrate it, e.g. from the reference decoder's
    measurements at a few contexts and temperatures, or from your serving stack's metrics):

        rate(L, T) = clip(rate_ref · exp(−λ · (L − L_ref) − s · (T − T_ref)), 0, 1)

    applied to `alpha` or to every entry of `conditional`, with λ = `context_decay_per_token`
    (relative loss of acceptance per token of context, 1/token) and s = `temperature_slope` (relative
    loss per unit of temperature). Both default to 0: no dependence. rate_ref is what was measured at
    context `reference_context_len` (tokens) and temperature `reference_temperature`. Example:
    λ = 1e-6 multiplies α by exp(−0.128) ≈ 0.88 at a 128k context.
    Exactly one of `alpha` (i.i.d. rate) and `conditional` (per-position rates, (K,)) is set.
    """

    alpha: float | None = None
    conditional: tuple[float, ...] | None = None
    context_decay_per_token: float = 0.0
    temperature_slope: float = 0.0
    reference_context_len: float = 0.0
    reference_temperature: float = 0.0

    def __post_init__(self) -> None:
        if (self.alpha is None) == (self.conditional is None):
            raise field_error("AcceptanceModel", "alpha", self.alpha, "exactly one of alpha and conditional set")
        if self.alpha is not None:
            object.__setattr__(self, "alpha", float(_check_alpha(self.alpha)))
        else:
            cond = _as_probs("conditional", self.conditional)
            if cond.ndim != 1:
                raise field_error("AcceptanceModel", "conditional", self.conditional, "a 1-D vector of K rates")
            object.__setattr__(self, "conditional", tuple(float(x) for x in cond))
        for name in ("context_decay_per_token", "temperature_slope", "reference_context_len", "reference_temperature"):
            value = getattr(self, name)
            if isinstance(value, bool) or not np.isfinite(float(value)):
                raise field_error("AcceptanceModel", name, value, "a finite number")
            object.__setattr__(self, name, float(value))
        if self.reference_context_len < 0 or self.reference_temperature < 0:
            raise field_error("AcceptanceModel", "reference_context_len", self.reference_context_len,
                              "a context (tokens) and temperature >= 0")

    def factor(self, context_len=None, temperature=None) -> np.ndarray:
        """exp(−λ (L − L_ref) − s (T − T_ref)); arguments default to the reference point."""
        length = np.asarray(self.reference_context_len if context_len is None else context_len, dtype=float)
        temp = np.asarray(self.reference_temperature if temperature is None else temperature, dtype=float)
        if np.any(length < 0) or np.any(temp < 0):
            raise field_error("AcceptanceModel", "context_len", context_len, "context (tokens) and temperature >= 0")
        return np.exp(-self.context_decay_per_token * (length - self.reference_context_len)
                      - self.temperature_slope * (temp - self.reference_temperature))

    def alpha_at(self, context_len=None, temperature=None) -> np.ndarray:
        """The i.i.d. α at context L (tokens) and temperature T, broadcast over both."""
        if self.alpha is None:
            raise field_error("AcceptanceModel", "alpha", None, "set (this model holds conditional rates: use conditional_at)")
        return np.clip(self.alpha * self.factor(context_len, temperature), 0.0, 1.0)

    def conditional_at(self, k: int, context_len=None, temperature=None) -> np.ndarray:
        """Conditional per-position rates (..., K) at L and T; an i.i.d. model repeats α over K."""
        f = self.factor(context_len, temperature)[..., None]
        if self.alpha is not None:
            base = conditional_from_iid(self.alpha, k)
        else:
            kk = int(_check_k(k))
            if kk > len(self.conditional):
                raise field_error("AcceptanceModel", "k", kk, f"<= {len(self.conditional)} (rates given per position)")
            base = np.asarray(self.conditional[:kk])
        return np.clip(base * f, 0.0, 1.0)

    def tau_at(self, k: int, context_len=None, temperature=None) -> np.ndarray:
        """τ (tokens per cycle, bonus included) with K drafts at L and T."""
        return tau_from_conditional(self.conditional_at(k, context_len, temperature))


# --------------------------------------------------------------------------------------------------
# Sampling
# --------------------------------------------------------------------------------------------------

def accepted_from_uniforms(u, rates, k) -> np.ndarray:
    """Accepted drafts per cycle from uniforms the caller drew (simulators with their own streams).

    rates: i.i.d. α per cycle, shape (n,) (or a scalar) → u has shape (n,), one uniform per cycle,
    and A = min(⌊log(1 − U) / log α⌋, K) (the inverse CDF of the truncated geometric, P(A ≥ j) = α^j);
    or conditional per-position rates, shape (n, J) → u has shape (n, J), and A = the number of
    leading positions with U_j < c_j, at most K. k: drafts per cycle, a scalar or (n,) array.
    α = 1 accepts all K drafts, α = 0 none."""
    r = np.asarray(rates, dtype=float)
    uu = np.asarray(u, dtype=float)
    kk = np.asarray(k)
    if r.ndim <= 1:
        with np.errstate(divide="ignore", invalid="ignore"):
            draws = np.floor(np.log1p(-uu) / np.log(r))
        draws = np.where(r >= 1.0, kk, np.where(r <= 0.0, 0, np.minimum(np.nan_to_num(draws, posinf=1 << 30), kk)))
        return np.asarray(draws, dtype=np.int64)
    ok = uu < r
    if kk.ndim or int(kk) < r.shape[-1]:
        ok &= np.arange(r.shape[-1]) < np.asarray(kk)[..., None]
    return np.cumprod(ok, axis=-1).sum(axis=-1).astype(np.int64)


def sample_accepted_lengths(rng: np.random.Generator, alpha_or_conditional, k: int, size) -> np.ndarray:
    """int64 array of shape `size`: accepted drafts per cycle (0..K), drawn with `rng`.

    alpha_or_conditional: a scalar α (i.i.d.; an array broadcastable to `size` gives each draw its
    own α) — or conditional rates with K on the last axis, shape (..., K) broadcastable to
    size + (K,). A 0-d value is α; anything with a last axis of K entries is read as conditional
    rates (so to give per-draw α, pass α[..., None] * ones(K) or call with a scalar per group).
    The draws are `accepted_from_uniforms` of uniforms from `rng`: one per cycle for i.i.d. α, K per
    cycle for conditional rates.
    """
    kk = int(_check_k(k))
    shape = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
    x = np.asarray(alpha_or_conditional, dtype=float)
    if x.ndim == 0:
        a = np.broadcast_to(_check_alpha(x), shape)
        return accepted_from_uniforms(rng.random(shape).reshape(-1), a.reshape(-1), kk).reshape(shape)
    c = _as_probs("alpha_or_conditional", x)
    if c.shape[-1] != kk:
        raise field_error("sample_accepted_lengths", "alpha_or_conditional", c.shape,
                          f"a scalar alpha or conditional rates with K = {kk} entries on the last axis")
    u = rng.random(shape + (kk,))
    return accepted_from_uniforms(u, np.broadcast_to(c, shape + (kk,)), kk)
