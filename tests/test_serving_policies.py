"""Gating policies are pure functions of an Observation: no simpy, no engine."""
from __future__ import annotations

import pytest

from specsim.errors import SpecError
from specsim.serving.policies import AcceptanceOffSwitch, DisableByBatchSize, GoodputOptimalK, KByBatchBand, Never, Observation, StaticK, expected_tokens_per_cycle, policy_from_dict
from specsim.speculation.acceptance import tokens_per_cycle_iid


def obs(**kw):
    kw.setdefault("n_running", 1)
    return Observation(**kw)


def test_never_and_static():
    assert Never()(obs(n_running=1)) == 0 and Never().k_reserved == 0
    assert StaticK(k=4)(obs(n_running=500)) == 4 and StaticK(k=4).k_reserved == 4


def test_disable_by_batch_size_uses_vllm_v0_greater_or_equal():
    p = DisableByBatchSize(k=4, threshold=16)
    # vLLM v0 SpecDecodeWorker: running_queue_size >= disable_by_batch_size disables speculation
    assert [p(obs(n_running=b)) for b in (1, 15, 16, 17)] == [4, 4, 0, 0]
    assert p.k_reserved == 4  # the scheduler keeps reserving lookahead slots while it is off
    assert not p.sticky_off and DisableByBatchSize(k=4, threshold=16, sticky=True).sticky_off


def test_k_by_batch_band():
    p = KByBatchBand(bands=((1, 5), (8, 3), (32, 1), (64, 0)))
    assert [p(obs(n_running=b)) for b in (1, 7, 8, 31, 32, 64, 1000)] == [5, 5, 3, 3, 1, 0, 0]
    assert p.k_reserved == 5
    with pytest.raises(SpecError, match="bands"):
        KByBatchBand(bands=((8, 3), (4, 1)))


def test_acceptance_off_switch_with_probe():
    p = AcceptanceOffSwitch(k=4, min_acceptance_frac=0.5, min_window_tokens=10, probe_every_steps=100)
    assert p(obs()) == 4  # no data yet
    assert p(obs(window_draft_tokens=8, window_accepted_tokens=0)) == 4  # too little data
    assert p(obs(window_draft_tokens=100, window_accepted_tokens=60)) == 4
    assert p(obs(window_draft_tokens=100, window_accepted_tokens=40, steps_since_draft=3)) == 0
    assert p(obs(window_draft_tokens=100, window_accepted_tokens=40, steps_since_draft=100)) == 4  # probe


def test_observation_estimates():
    o = obs(window_draft_tokens=40, window_accepted_tokens=30, window_rejections=10)
    assert o.acceptance_frac == pytest.approx(0.75)
    assert o.alpha_estimate == pytest.approx(30 / 40)  # accepted / (accepted + rejections)
    assert obs(alpha_prior=0.6).alpha_estimate == 0.6


def test_expected_tokens_matches_the_closed_form():
    for a in (0.0, 0.3, 0.7, 0.99, 1.0):
        for k in (0, 1, 4, 8):
            assert expected_tokens_per_cycle(a, k) == pytest.approx(float(tokens_per_cycle_iid(a, k)), rel=1e-12)


def test_goodput_optimal_k_picks_the_argmax_of_tokens_per_second():
    # a bandwidth-bound step (cost flat in K) favours the largest K; a step whose cost grows fast
    # with K favours K = 0. By hand with alpha = 0.5: tokens(K) = 2 - 0.5^K.
    flat = obs(n_running=4, n_decoding=4, alpha_prior=0.5, step_time_s=lambda k: 0.010)
    assert GoodputOptimalK(k_max=5)(flat) == 5
    steep = obs(n_running=4, n_decoding=4, alpha_prior=0.5, step_time_s=lambda k: 0.010 * (1 + k))
    assert GoodputOptimalK(k_max=5)(steep) == 0
    # middle: time 10 ms + 4 ms per K: goodput(K) ∝ (2 - 0.5^K) / (10 + 4K): K=1: 1.5/14 = 0.107,
    # K=2: 1.75/18 = 0.0972, K=0: 1/10 = 0.1 -> K = 1
    mid = obs(n_running=4, n_decoding=4, alpha_prior=0.5, step_time_s=lambda k: 0.010 + 0.004 * k)
    assert GoodputOptimalK(k_max=5)(mid) == 1


def test_policy_from_dict_validates():
    p = policy_from_dict("gate", {"kind": "disable_by_batch_size", "k": 4, "threshold": 8})
    assert isinstance(p, DisableByBatchSize) and p.name == "gate"
    band = policy_from_dict("band", {"kind": "k_by_batch_band", "bands": [[1, 4], [16, 0]]})
    assert band(obs(n_running=20)) == 0
    with pytest.raises(SpecError, match="unknown key 'treshold'"):
        policy_from_dict("gate", {"kind": "disable_by_batch_size", "k": 4, "treshold": 8})
    with pytest.raises(SpecError, match="field 'kind' = 'sometimes'"):
        policy_from_dict("x", {"kind": "sometimes"})
    with pytest.raises(SpecError, match="field 'k'"):
        policy_from_dict("x", {"kind": "static", "k": -1})
