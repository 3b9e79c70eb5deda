"""Agreement with the analytical model, the fitted roofline twin, and KV capacity by hand."""
from __future__ import annotations

import numpy as np
import pytest

from specsim.speculation.acceptance import tokens_per_cycle_iid
from specsim.specs.hardware import load_hardware
from specsim.specs.models import load_model
from specsim.cost.roofline import kv_bytes_per_device, mixed_step_cost, step_cost
from specsim.serving import EngineConfig, IterationMix, Workload, simulate
from specsim.serving.kv_cache import blocks_for, kv_capacity
from specsim.serving.policies import Never, StaticK
from specsim.serving.cost import ServingCost
from specsim.specs.scenario import Scenario
from specsim.speculation.cycle import cycle_times
from specsim.speculation.operating_point import resolve


def point(hardware, target, *, drafter=None, method="draft_model", tp=1, k=4, alpha=0.7, **kw):
    """An operating point from ids (the serving cost reads everything from it)."""
    return resolve(Scenario(hardware=hardware, target=target, drafter=drafter, method=method, tp=tp, k=k, alpha=alpha,
                            **kw))


def RooflineCost(target, hw, *, tp=1, drafter=None, method="draft_model", exact=False):  # noqa: N802
    return ServingCost(point(hw.id, target.id, drafter=drafter.id if drafter else None,
                             method=method if (drafter or method != "draft_model") else "none", tp=tp), exact=exact)

PROMPT, OUTPUT = 8, 2000


@pytest.fixture(scope="module")
def seed_pair():
    return load_hardware("seed-hbm-2tbs"), load_model("seed-70b"), load_model("seed-1b")


def _steady_throughput(result) -> float:
    """Tokens per second over the middle of the run (iterations starting in [15 %, 80 %] of it),
    away from the synchronised start and the draining tail."""
    s = result.steps
    end = float((s["start_at_s"] + s["duration_s"]).max())
    mid = s[(s["start_at_s"] >= 0.15 * end) & (s["start_at_s"] <= 0.8 * end)]
    return float(mid["n_emitted_tokens"].sum() / mid["duration_s"].sum())


@pytest.mark.parametrize("batch", [1, 8, 32])
@pytest.mark.parametrize("k", [0, 4])
def test_closed_loop_reaches_the_analytical_throughput(seed_pair, batch, k):
    """B users, fixed lengths, no memory pressure: the engine's steady-state tokens/s is within 2 %
    of the analytical figure for batch B at the mean decode context (the step cost is affine in the
    context while the attention term stays bandwidth bound, so the mean of the step times is the
    step time at the mean context). Analytical: plain B / t_step(B, 1, L); speculative
    B·τ / (K·t_draft(B, 1, L) + t_verify(B, K + 1, L)) with τ = (1 − α^(K+1)) / (1 − α).
    Prompts are short (8 tokens) and outputs long (2,000) because the analytical figure leaves out
    prefill iterations; measured residuals are under 0.6 % (by a run of these cases)."""
    hw, target, drafter = seed_pair
    alpha = 0.7
    n_rounds = max(4, 16 // batch)  # enough verify cycles that sampling noise stays well under 2 %
    w = Workload(arrival_at_s=np.full(batch * n_rounds, np.nan), prompt_tokens=np.full(batch * n_rounds, PROMPT),
                 output_tokens=np.full(batch * n_rounds, OUTPUT), n_users=batch)
    cap = kv_capacity(target, hw, tp=1, drafter=drafter)
    assert cap.capacity_tokens > 1.1 * batch * (PROMPT + OUTPUT + k + 1)  # no memory pressure
    cost = RooflineCost(target, hw, tp=1, drafter=drafter, method="draft_model")
    cfg = EngineConfig(n_blocks=cap.n_blocks, max_num_seqs=batch, max_num_batched_tokens=1 << 20)
    policy = StaticK(k=k) if k else Never()
    r = simulate(w, config=cfg, cost=cost, policy=policy, acceptance=alpha, seed=1)
    assert r.summary["n_done"] == batch * n_rounds

    ctx = PROMPT + OUTPUT / 2  # mean cached context over a request's decode steps
    plain = step_cost(target, hw, batch_size=batch, q_len=1, context_len=ctx).time_s
    if k == 0:
        analytic = batch / float(plain)
    else:
        draft = step_cost(drafter, hw, batch_size=batch, q_len=1, context_len=ctx).time_s
        verify = step_cost(target, hw, batch_size=batch, q_len=k + 1, context_len=ctx).time_s
        tau = float(tokens_per_cycle_iid(alpha, k))
        analytic = float(cycle_times(target_step_time_s=plain, draft_time_s=k * draft, verify_time_s=verify,
                                     tokens_per_cycle=tau, batch_size=batch).tokens_per_s)
    assert _steady_throughput(r) == pytest.approx(analytic, rel=0.02)


def _random_mix(rng, n, k_max):
    is_pf = rng.random(n) < 0.2
    dk = np.where(is_pf, 0, rng.integers(0, k_max + 1, size=n))
    q = np.where(is_pf, rng.integers(1, 3000, size=n), 1 + dk)
    ctx = rng.integers(0, 20000, size=n)
    logits = np.where(is_pf, rng.integers(0, 2, size=n), q)
    return IterationMix(q.astype(np.int64), ctx.astype(np.int64), logits.astype(np.int64), dk.astype(np.int64), is_pf)


@pytest.mark.parametrize("hw_id, target_id, drafter_id, tp", [
    ("h100-sxm", "llama-3.1-70b", "llama-3.2-1b", 4), ("seed-hbm-2tbs", "seed-70b", "seed-1b", 1),
    ("h100-sxm", "llama-3.1-8b", "llama-3.2-1b", 1)])
def test_fitted_cost_twin_equals_mixed_step_cost(hw_id, target_id, drafter_id, tp):
    hw, target, drafter = load_hardware(hw_id), load_model(target_id), load_model(drafter_id)
    fast = RooflineCost(target, hw, tp=tp, drafter=drafter)
    exact = RooflineCost(target, hw, tp=tp, drafter=drafter, exact=True)
    assert not exact.target.ok and not exact.drafter.ok
    if hw_id.startswith("seed"):  # the pure roofline is affine in the mix sums: the fast twin applies
        assert fast.target.ok and fast.drafter.ok
    rng = np.random.default_rng(5)
    for n in (1, 3, 17, 200):
        mix = _random_mix(rng, n, 6)
        ref = float(mixed_step_cost(target, hw, q_lens=mix.q_lens, context_lens=mix.context_lens, logit_lens=mix.logit_lens,
                                    tp=tp).time_s)
        assert fast.target_time_s(mix) == pytest.approx(ref, rel=1e-9)
        assert fast.draft_time_s(mix) == pytest.approx(exact.draft_time_s(mix), rel=1e-9)
    # the drafter's K passes by hand for a uniform decode batch: pass j at context ctx + j
    ctx = np.array([100, 2000, 50], dtype=np.int64)
    mix = IterationMix(np.full(3, 4), ctx, np.full(3, 4), np.full(3, 3), np.zeros(3, dtype=bool))
    by_hand = sum(float(mixed_step_cost(drafter, hw, q_lens=np.ones(3, dtype=np.int64), context_lens=ctx + j).time_s)
                  for j in range(3))
    assert fast.draft_time_s(mix) == pytest.approx(by_hand, rel=1e-9)


def test_one_decode_iteration_of_70b_on_4xh100_is_milliseconds():
    # order of magnitude: 141 GB / 4 devices / (3.35 TB/s × 0.85) ≈ 12.4 ms of weight streaming
    cost = ServingCost(point("h100-sxm", "llama-3.1-70b", method="none", tp=4))
    t = cost(IterationMix(np.ones(1, dtype=np.int64), np.array([1000]), np.ones(1, dtype=np.int64),
                          np.zeros(1, dtype=np.int64), np.zeros(1, dtype=bool)))
    assert 0.010 < t < 0.030


def test_kv_capacity_by_hand():
    hw, target, drafter = load_hardware("h100-sxm"), load_model("llama-3.1-70b"), load_model("llama-3.2-1b")
    cap = kv_capacity(target, hw, tp=4, drafter=drafter, drafter_tp=1, gpu_memory_utilization=0.9, block_size_tokens=16)
    # by hand: per token, target 80 layers × 2 (K, V) × 8 KV heads × 128 × 2 bytes / 4 devices = 81,920 B;
    # drafter 16 × 2 × 8 × 64 × 2 = 32,768 B unsharded; a block of 16 tokens = 16 × 114,688 B
    assert target.n_layers == 80 and target.n_kv_heads == 8 and target.head_dim == 128
    per_block = 16 * (80 * 2 * 8 * 128 * 2 / 4 + 16 * 2 * 8 * 64 * 2)
    assert cap.bytes_per_block == pytest.approx(per_block)
    assert cap.bytes_per_block == pytest.approx(16 * (float(kv_bytes_per_device(target, batch_size=1, context_len=1, tp=4))
                                                       + float(kv_bytes_per_device(drafter, batch_size=1, context_len=1))))
    free = 0.9 * 80 * 2**30 - target.weight_bytes / 4 - drafter.weight_bytes
    assert cap.n_blocks == int(free // per_block)
    assert 150_000 < cap.capacity_tokens < 500_000  # ~40 GB of ~115 kB tokens: a few hundred thousand
    assert blocks_for(np.array([0, 1, 16, 17]), 16).tolist() == [0, 1, 1, 2]


def test_no_room_for_the_cache_is_an_error():
    from specsim.errors import DoesNotFitError
    with pytest.raises(DoesNotFitError, match="no room for a KV cache"):
        kv_capacity(load_model("llama-3.1-70b"), load_hardware("h100-sxm"), tp=1)


@pytest.mark.parametrize("method", ["medusa", "eagle", "layer_skip", "sparse_kv"])
def test_other_drafter_families_cost_what_specsim_drafters_says(method):
    # a batch of four sequences whose contexts average 512: drafting is affine in the summed context
    # (while no pass leaves the bandwidth roof), so it equals the analytical cost at L = 512
    from specsim.speculation import families as drafters
    op = point("h100-sxm", "llama-3.1-70b", method=method, tp=4)
    cost = ServingCost(op)
    ctx = np.array([496, 512, 528, 512], dtype=np.int64)
    mix = IterationMix(np.full(4, 5), ctx, np.full(4, 5), np.full(4, 4), np.zeros(4, dtype=bool))
    dc = drafters.draft_cost(op.drafter, op.target, op.deployment, batch_size=4, k=4, context_len=512)
    assert cost.draft_time_s(mix) + cost.verify_extra_s(mix) == pytest.approx(
        float(dc.draft_time_s + dc.verify_extra_s), rel=1e-9)
    plain = IterationMix(np.ones(4, dtype=np.int64), ctx, np.ones(4, dtype=np.int64), np.zeros(4, dtype=np.int64),
                         np.zeros(4, dtype=bool))
    assert cost.draft_time_s(plain) == 0.0


def test_prompt_lookup_costs_a_cpu_search_per_sequence():
    from specsim.speculation import families as drafters
    cost = ServingCost(point("h100-sxm", "llama-3.1-8b", method="prompt_lookup"))
    mix = IterationMix(np.full(2, 4), np.array([1000, 3000]), np.full(2, 4), np.full(2, 3), np.zeros(2, dtype=bool))
    # drafters' estimate, c per sequence per 1k tokens of context, at 1k and 3k tokens: 4c
    assert cost.draft_time_s(mix) == pytest.approx(4 * drafters.PROMPT_LOOKUP_S_PER_SEQ_PER_KTOKEN)


def test_tree_drafting_passes_by_hand():
    hw, target, drafter = load_hardware("h100-sxm"), load_model("llama-3.1-8b"), load_model("llama-3.2-1b")
    fast = RooflineCost(target, hw, drafter=drafter)
    exact = RooflineCost(target, hw, drafter=drafter, exact=True)
    ctx = np.array([300, 700], dtype=np.int64)
    # M = 7 nodes, depth 3: 2 nodes a level; pass j scores 2 tokens per sequence at ctx + 2j
    mix = IterationMix(np.full(2, 7), ctx, np.full(2, 7), np.full(2, 3), np.zeros(2, dtype=bool), tree_size=7)
    by_hand = sum(float(mixed_step_cost(drafter, hw, q_lens=np.full(2, 2), context_lens=ctx + 2 * j).time_s)
                  for j in range(3))
    assert fast.draft_time_s(mix) == pytest.approx(by_hand, rel=1e-9)
    assert exact.draft_time_s(mix) == pytest.approx(by_hand, rel=1e-12)
