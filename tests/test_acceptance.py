"""Tests for specsim.acceptance: conversions between acceptance forms, fits, sampling, context model.

Expected values are worked by hand in the test (noted beside each), computed by a second
implementation written here (a direct log-likelihood maximised with scipy), or checked by Monte
Carlo simulation of the accept/reject process with a tolerance from its standard error.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar
from scipy.stats import chi2

from specsim.speculation.acceptance import AcceptanceModel, alpha_from_tau, conditional_from_histogram, conditional_from_iid, conditional_from_rank_acceptance, conditional_from_unconditional, draft_acceptance_rate_from_tau, fit_conditional_rates, fit_iid_alpha, fit_rank_acceptance, fit_vllm_counters, histogram_from_conditional, histogram_from_iid, histogram_from_unconditional, rank_acceptance_from_conditional, sample_accepted_lengths, tau_from_conditional, tau_from_draft_acceptance_rate, tau_from_histogram, tau_from_unconditional, tau_from_vllm_counters, tokens_per_cycle_iid, unconditional_from_conditional, unconditional_from_histogram
from specsim.errors import SpecError

rates = st.floats(0.0, 1.0, allow_nan=False)
cond_vectors = st.lists(rates, min_size=1, max_size=8)

# ---------------------------------------------------------------------------------------------
# conversions: worked examples
# ---------------------------------------------------------------------------------------------


def test_vllm_worked_example():
    # by hand: 100 drafts of K = 3; per-position accepted counts 80, 50, 20
    uncond = np.array([80, 50, 20]) / 100
    hist = [0.2, 0.3, 0.3, 0.2]                          # P(A = a) = u_a − u_{a+1}
    cond = [0.8, 50 / 80, 20 / 50]                      # u_i / u_{i−1}
    np.testing.assert_allclose(histogram_from_unconditional(uncond), hist, atol=1e-15)
    np.testing.assert_allclose(conditional_from_unconditional(uncond), cond, rtol=1e-14)
    np.testing.assert_allclose(conditional_from_histogram(hist), cond, rtol=1e-14)
    np.testing.assert_allclose(unconditional_from_histogram([20, 30, 30, 20]), uncond, rtol=1e-14)  # counts
    np.testing.assert_allclose(unconditional_from_conditional(cond), uncond, rtol=1e-14)
    assert tau_from_unconditional(uncond) == pytest.approx(2.5, rel=1e-14)   # 1 + (80+50+20)/100
    assert tau_from_histogram(hist) == pytest.approx(2.5, rel=1e-14)         # .2·1 + .3·2 + .3·3 + .2·4
    assert tau_from_conditional(cond) == pytest.approx(2.5, rel=1e-14)
    assert draft_acceptance_rate_from_tau(2.5, 3) == pytest.approx(0.5)      # 150 accepted / 300 drafted
    assert tau_from_draft_acceptance_rate(0.5, 3) == pytest.approx(2.5)
    counters = {"num_drafts": 100, "num_draft_tokens": 300, "num_accepted_tokens": 150,
                "num_accepted_tokens_per_pos": [80, 50, 20]}
    assert tau_from_vllm_counters(counters) == pytest.approx(2.5)


def test_iid_histogram_by_hand():
    np.testing.assert_allclose(histogram_from_iid(0.5, 2), [0.5, 0.25, 0.25], rtol=1e-15)
    np.testing.assert_allclose(conditional_from_iid(0.3, 3), [0.3, 0.3, 0.3])
    assert tau_from_histogram(histogram_from_iid(0.5, 2)) == pytest.approx(1.75)  # 1 + .5 + .25
    # vectorised over α: (2, K+1)
    np.testing.assert_allclose(histogram_from_iid([0.0, 1.0], 2), [[1, 0, 0], [0, 0, 1]])


def test_rank_acceptance_by_hand():
    # c = [0.5, 0.5]: rank 0 accepted half the time, rank 1 half of the remaining half
    np.testing.assert_allclose(rank_acceptance_from_conditional([0.5, 0.5]), [0.5, 0.25])
    np.testing.assert_allclose(conditional_from_rank_acceptance([0.5, 0.25]), [0.5, 0.5])
    with pytest.raises(SpecError, match="sum <= 1"):
        conditional_from_rank_acceptance([0.8, 0.8])


def test_conversion_validation():
    with pytest.raises(SpecError, match="non-increasing"):
        histogram_from_unconditional([0.5, 0.6])
    with pytest.raises(SpecError, match=r"\[0, 1\]"):
        unconditional_from_conditional([1.2])
    with pytest.raises(SpecError, match="non-negative"):
        tau_from_histogram([1, -1])
    with pytest.raises(SpecError, match="at least one"):
        tau_from_histogram([0, 0])


def test_unreached_positions_become_zero():
    # P(A ≥ 1) = 0: position 2 is never tried, its conditional rate is reported as 0
    np.testing.assert_allclose(conditional_from_unconditional([0.0, 0.0]), [0.0, 0.0])
    np.testing.assert_allclose(histogram_from_conditional([0.0, 0.7]), [1.0, 0.0, 0.0])


# ---------------------------------------------------------------------------------------------
# conversions: properties
# ---------------------------------------------------------------------------------------------


@given(cond=cond_vectors)
def test_conversion_properties(cond):
    k = len(cond)
    hist = histogram_from_conditional(cond)
    uncond = unconditional_from_conditional(cond)
    tau = tau_from_conditional(cond)
    assert 1.0 - 1e-12 <= tau <= k + 1 + 1e-12
    assert hist.shape == (k + 1,) and np.all(hist >= 0) and hist.sum() == pytest.approx(1.0)
    assert np.all(np.diff(uncond) <= 1e-15)                                   # non-increasing
    assert tau_from_histogram(hist) == pytest.approx(tau, rel=1e-12)
    assert tau_from_unconditional(uncond) == pytest.approx(tau, rel=1e-12)
    np.testing.assert_allclose(unconditional_from_histogram(hist), uncond, atol=1e-12)
    np.testing.assert_allclose(histogram_from_unconditional(uncond), hist, atol=1e-12)
    # back to conditional: equal wherever the position is reached at all
    back = conditional_from_histogram(hist)
    reached = np.concatenate([[1.0], uncond[:-1]]) > 1e-6  # tail sums lose ~1e-15 absolute
    np.testing.assert_allclose(back[reached], np.asarray(cond)[reached], atol=1e-6)
    # and the round trip is exact in distribution
    np.testing.assert_allclose(histogram_from_conditional(back), hist, atol=1e-12)


@given(cond=cond_vectors)
def test_rank_round_trip(cond):
    p = rank_acceptance_from_conditional(cond)
    assert p.sum() <= 1 + 1e-12
    np.testing.assert_allclose(rank_acceptance_from_conditional(conditional_from_rank_acceptance(p)), p, atol=1e-12)


@given(alpha=rates, k=st.integers(0, 12))
def test_iid_forms_agree(alpha, k):
    # the conditional machinery and the closed form are separate code paths
    assert tau_from_conditional(conditional_from_iid(alpha, k)) == pytest.approx(
        float(tokens_per_cycle_iid(alpha, k)), rel=1e-12)


@given(alpha=st.floats(0.0, 1.0), k=st.integers(1, 10))
def test_alpha_from_tau_round_trip(alpha, k):
    tau = float(tokens_per_cycle_iid(alpha, k))
    back = alpha_from_tau(tau, k)
    assert float(tokens_per_cycle_iid(back, k)) == pytest.approx(tau, rel=1e-9, abs=1e-12)


def test_tokens_per_cycle_iid_against_monte_carlo():
    # an independent simulation of Leviathan et al.'s process: K Bernoulli(α) draws per cycle, the
    # cycle emits the accepted prefix plus one target token
    rng = np.random.default_rng(7)
    for alpha, k in [(0.6, 3), (0.85, 6)]:
        ok = rng.random((200_000, k)) < alpha
        tokens = 1 + np.cumprod(ok, axis=1).sum(axis=1)
        se = tokens.std(ddof=1) / math.sqrt(tokens.size)
        assert abs(tokens.mean() - float(tokens_per_cycle_iid(alpha, k))) < 5 * se


# ---------------------------------------------------------------------------------------------
# sampling
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec,k", [(0.7, 5), ([0.9, 0.6, 0.3, 0.8], 4)], ids=["iid", "conditional"])
def test_sampled_histogram_matches_closed_form(spec, k):
    n = 200_000
    a = sample_accepted_lengths(np.random.default_rng(11), spec, k, n)
    assert a.shape == (n,) and a.dtype == np.int64 and a.min() >= 0 and a.max() <= k
    expected = histogram_from_iid(spec, k) if np.ndim(spec) == 0 else histogram_from_conditional(spec)
    observed = np.bincount(a, minlength=k + 1) / n
    se = np.sqrt(expected * (1 - expected) / n)
    assert np.all(np.abs(observed - expected) <= 5 * se + 1e-12)


def test_sampling_edges_and_shapes():
    rng = np.random.default_rng(0)
    assert np.all(sample_accepted_lengths(rng, 0.0, 4, 100) == 0)
    assert np.all(sample_accepted_lengths(rng, 1.0, 4, 100) == 4)
    assert np.all(sample_accepted_lengths(rng, [1.0, 0.0, 1.0], 3, 50) == 1)
    assert sample_accepted_lengths(rng, 0.5, 3, (4, 5)).shape == (4, 5)
    # one α per draw, broadcast to size
    a = sample_accepted_lengths(rng, np.array(0.5), 3, 10)
    assert a.shape == (10,)
    # same seed, same draws
    assert np.array_equal(sample_accepted_lengths(np.random.default_rng(3), 0.8, 4, 50),
                          sample_accepted_lengths(np.random.default_rng(3), 0.8, 4, 50))
    with pytest.raises(SpecError, match="K = 3"):
        sample_accepted_lengths(rng, [0.5, 0.5], 3, 10)


# ---------------------------------------------------------------------------------------------
# fits
# ---------------------------------------------------------------------------------------------


def _trunc_geom_loglik(alpha, lengths, k):
    """A second implementation: Σ log P(A = a) with the pmf written out term by term."""
    ll = 0.0
    for a in lengths:
        ll += a * math.log(alpha) + (math.log1p(-alpha) if a < k else 0.0)
    return ll


def test_fit_iid_alpha_by_hand_and_by_optimizer():
    lengths, k = [0, 1, 2, 2], 2
    fit = fit_iid_alpha(lengths, k)
    assert fit.estimate == pytest.approx(5 / 7, rel=1e-12)  # S = 5 accepted, F = 2 rejections
    assert fit.n_obs == 4 and fit.k == 2 and fit.level == 0.95 and fit.parameter == "alpha"
    rng = np.random.default_rng(5)
    sample = sample_accepted_lengths(rng, 0.65, 5, 300)
    fit = fit_iid_alpha(sample, 5, level=0.9)
    opt = minimize_scalar(lambda a: -_trunc_geom_loglik(a, sample, 5), bounds=(1e-9, 1 - 1e-9),
                          method="bounded", options={"xatol": 1e-10})
    assert fit.estimate == pytest.approx(opt.x, abs=1e-6)
    assert fit.log_likelihood == pytest.approx(-opt.fun, rel=1e-9)
    # the interval's ends sit where the log-likelihood has dropped by χ²₁(0.9)/2
    drop = 0.5 * chi2.ppf(0.9, 1)
    for end in (fit.ci_low, fit.ci_high):
        assert fit.log_likelihood - _trunc_geom_loglik(end, sample, 5) == pytest.approx(drop, rel=1e-6)
    assert fit.ci_low < fit.estimate < fit.ci_high
    assert fit.tau == pytest.approx(float(tokens_per_cycle_iid(fit.estimate, 5)))


def test_fit_iid_alpha_boundaries():
    fit = fit_iid_alpha([0, 0, 0], 4)
    assert fit.estimate == 0 and fit.ci_low == 0 and 0 < fit.ci_high < 1
    fit = fit_iid_alpha([4, 4], 4)
    assert fit.estimate == 1 and fit.ci_high == 1 and 0 < fit.ci_low < 1
    with pytest.raises(SpecError, match=r"\[0, K = 4\]"):
        fit_iid_alpha([5], 4)
    with pytest.raises(SpecError, match="level"):
        fit_iid_alpha([1], 4, level=1.5)


def test_fit_iid_alpha_coverage_is_nominal():
    # 2000 replications of 100 cycles: coverage of a 95 % interval has standard error ~0.005
    rng = np.random.default_rng(2024)
    alpha, k, reps = 0.7, 4, 2000
    samples = sample_accepted_lengths(rng, alpha, k, (reps, 100))
    hits = sum(f.ci_low <= alpha <= f.ci_high for f in (fit_iid_alpha(s, k) for s in samples))
    assert 0.93 <= hits / reps <= 0.97  # nominal 0.95 ± 3.5 standard errors


def test_fit_conditional_rates_by_hand():
    fit = fit_conditional_rates([0, 1, 2, 2], 2)
    # position 1: tried 4 times, accepted 3; position 2: tried 3, accepted 2
    np.testing.assert_allclose(fit.estimate, [0.75, 2 / 3], rtol=1e-12)
    assert fit.tau == pytest.approx(1 + 5 / 4)
    fit = fit_conditional_rates([0, 0], 3)  # positions 2, 3 never tried
    assert fit.estimate[0] == 0 and np.all(np.isnan(fit.estimate[1:]))
    np.testing.assert_array_equal(fit.ci_low[1:], 0)
    np.testing.assert_array_equal(fit.ci_high[1:], 1)


def test_fit_conditional_rates_coverage_is_nominal():
    rng = np.random.default_rng(99)
    cond, k, reps = np.array([0.85, 0.7, 0.6]), 3, 1500
    samples = sample_accepted_lengths(rng, cond, k, (reps, 150))
    hits = np.zeros(k)
    for s in samples:
        f = fit_conditional_rates(s, k)
        hits += (f.ci_low <= cond) & (cond <= f.ci_high)
    assert np.all((hits / reps >= 0.925) & (hits / reps <= 0.975))  # 0.95 ± ~3.5 s.e. per position


def test_fit_rank_acceptance_by_hand_and_coverage():
    fit = fit_rank_acceptance([60, 20, 5], [100, 40, 20])
    # c = [0.6, 0.5, 0.25] → p = [0.6, 0.4·0.5, 0.4·0.5·0.25]
    np.testing.assert_allclose(fit.estimate, [0.6, 0.2, 0.05], rtol=1e-12)
    assert np.all(fit.ci_low <= fit.estimate) and np.all(fit.estimate <= fit.ci_high)
    # coverage: n nodes verified with a full 3-wide fan-out; which rank is accepted is categorical
    rng = np.random.default_rng(17)
    p = np.array([0.5, 0.2, 0.1])
    reps, n = 1000, 200
    hits = np.zeros(3)
    for _ in range(reps):
        counts = rng.multinomial(n, np.append(p, 1 - p.sum()))[:3]
        tried = n - np.concatenate([[0], np.cumsum(counts)[:-1]])
        f = fit_rank_acceptance(counts, tried)
        hits += (f.ci_low <= p) & (p <= f.ci_high)
    assert np.all(hits / reps >= 0.95 - 3.5 * math.sqrt(0.95 * 0.05 / reps))  # conservative by design


def test_fit_rank_acceptance_validation():
    with pytest.raises(SpecError):
        fit_rank_acceptance([5], [3])
    f = fit_rank_acceptance([5, 0], [10, 0])
    assert np.isnan(f.estimate[1])


def test_vllm_counters_match_the_fits_on_lengths():
    rng = np.random.default_rng(8)
    k = 4
    lengths = sample_accepted_lengths(rng, [0.9, 0.7, 0.6, 0.5], k, 5000)
    per_pos = [int(np.count_nonzero(lengths >= i)) for i in range(1, k + 1)]
    counters = {"vllm:spec_decode_num_drafts_total": lengths.size,
                "vllm:spec_decode_num_draft_tokens_total": lengths.size * k,
                "vllm:spec_decode_num_accepted_tokens_total": int(lengths.sum()),
                "vllm:spec_decode_num_accepted_tokens_per_pos": per_pos}
    direct = fit_conditional_rates(lengths, k)
    from_counters = fit_vllm_counters(counters)
    np.testing.assert_allclose(from_counters.estimate, direct.estimate, rtol=1e-12)
    np.testing.assert_allclose(from_counters.ci_low, direct.ci_low, rtol=1e-9)
    assert from_counters.log_likelihood == pytest.approx(direct.log_likelihood, rel=1e-12)
    iid = fit_vllm_counters(counters, model="iid")
    assert iid.estimate == pytest.approx(fit_iid_alpha(lengths, k).estimate, rel=1e-12)
    # without per-position counts: moments only, α matching τ = 1 + accepted / drafts
    bare = {key: v for key, v in counters.items() if not key.endswith("per_pos")}
    mom = fit_vllm_counters(bare, model="iid")
    assert float(tokens_per_cycle_iid(mom.estimate, k)) == pytest.approx(1 + lengths.mean(), rel=1e-9)
    assert math.isnan(mom.ci_low)
    with pytest.raises(SpecError, match="per_pos"):
        fit_vllm_counters(bare)
    with pytest.raises(SpecError, match="num_drafts_typo"):
        fit_vllm_counters({**counters, "num_drafts_typo": 1})
    with pytest.raises(SpecError, match="sum"):
        fit_vllm_counters({**counters, "vllm:spec_decode_num_accepted_tokens_total": 1})


# ---------------------------------------------------------------------------------------------
# context length and temperature
# ---------------------------------------------------------------------------------------------


def test_acceptance_model_defaults_to_no_dependence():
    m = AcceptanceModel(alpha=0.8)
    np.testing.assert_allclose(m.alpha_at([0, 1000, 128_000], [0.0, 0.7, 1.5]), 0.8)
    assert m.tau_at(4) == pytest.approx(float(tokens_per_cycle_iid(0.8, 4)))


def test_acceptance_model_form_by_hand():
    m = AcceptanceModel(alpha=0.8, context_decay_per_token=1e-6, temperature_slope=0.2,
                        reference_context_len=1000, reference_temperature=0.0)
    # 0.8 · exp(−1e-6 · (129000 − 1000) − 0.2 · 1.0)
    assert m.alpha_at(129_000, 1.0) == pytest.approx(0.8 * math.exp(-0.128 - 0.2), rel=1e-12)
    grid = m.alpha_at(np.array([[1000], [129_000]]), np.array([0.0, 1.0]))
    assert grid.shape == (2, 2) and grid[0, 0] == pytest.approx(0.8)
    # negative slopes are allowed; the rate is clipped at 1
    up = AcceptanceModel(alpha=0.9, context_decay_per_token=-1e-3)
    assert up.alpha_at(10_000) == 1.0
    c = AcceptanceModel(conditional=(0.9, 0.6), temperature_slope=0.5)
    np.testing.assert_allclose(c.conditional_at(2, temperature=1.0), np.array([0.9, 0.6]) * math.exp(-0.5))
    assert c.conditional_at(2, temperature=[0.0, 1.0]).shape == (2, 2)
    with pytest.raises(SpecError):
        c.alpha_at()
    with pytest.raises(SpecError, match="exactly one"):
        AcceptanceModel()
    with pytest.raises(SpecError):
        AcceptanceModel(alpha=0.5).alpha_at(-1)


def test_iid_closed_form_is_accurate_near_one():
    # Σ_{i=0}^{3} α^i summed term by term (no cancellation) against the closed form at α = 1 − 1e-5,
    # where (1 − α^4) / (1 − α) computed naively loses ~5 digits (hypothesis found this case)
    alpha = 0.99999
    direct = math.fsum(alpha ** i for i in range(4))
    assert float(tokens_per_cycle_iid(alpha, 3)) == pytest.approx(direct, rel=1e-14)
    assert float(tokens_per_cycle_iid(0.0, 3)) == 1.0 and float(tokens_per_cycle_iid(1.0, 3)) == 4.0
