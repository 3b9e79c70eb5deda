"""Linear speculation: invariants of the closed form and of the cycle arithmetic."""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from specsim.errors import DoesNotFitError
from specsim.speculation.operating_point import resolve
from specsim.speculation.predict import predict
from specsim.specs.scenario import load_scenario
from specsim.speculation.cycle import alpha_from_tau, cycle_times, tokens_per_cycle_iid


@given(st.floats(0, 1), st.integers(0, 64))
def test_tokens_per_cycle_lies_in_one_to_k_plus_one(alpha, k):
    tau = float(tokens_per_cycle_iid(alpha, k))
    assert 1.0 - 1e-12 <= tau <= k + 1 + 1e-12


def test_closed_form_by_hand():
    # K = 2: 1 + α + α², α = 0.5 → 1.75
    assert float(tokens_per_cycle_iid(0.5, 2)) == pytest.approx(1.75, rel=1e-15)
    assert float(tokens_per_cycle_iid(0.0, 7)) == 1.0
    assert float(tokens_per_cycle_iid(1.0, 7)) == 8.0


@given(st.floats(0.01, 0.99), st.integers(1, 16))
def test_alpha_from_tau_inverts_the_closed_form(alpha, k):
    assert alpha_from_tau(float(tokens_per_cycle_iid(alpha, k)), k) == pytest.approx(alpha, abs=1e-9)


@settings(deadline=None, max_examples=50)
@given(st.integers(1, 8), st.integers(1, 64), st.integers(0, 8192))
def test_speedup_at_zero_acceptance_is_below_one_when_drafting_costs_anything(k, b, l):
    op = resolve(load_scenario("seed-70b-hbm"), alpha=0.0, k=k, batch_size=b, context_len=l)
    try:
        p = predict(op)
    except DoesNotFitError:
        assume(False)  # only configurations that fit in memory are predictions at all
    assert float(p.cycle.speedup) < 1.0


def test_cycle_arithmetic_by_hand():
    c = cycle_times(target_step_time_s=0.070, draft_time_s=0.005, verify_time_s=0.070, tokens_per_cycle=3.5,
                    batch_size=np.array([1, 4]))
    assert np.allclose(c.cycle_time_s, 0.075)
    assert np.allclose(c.tokens_per_s, np.array([1, 4]) * 3.5 / 0.075)
    assert np.allclose(c.speedup, 3.5 / 0.075 * 0.070)
