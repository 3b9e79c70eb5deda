"""Fleets and the new engine options: replicas behind a router, the disaggregated layout's KV handoff,
prefix caching against what the Mooncake trace's hash ids imply, swap preemption, priorities, and the
drafter's catch-up — exact timelines with a constant cost where a hand count is possible, and the
conservation and determinism properties (hypothesis) over all of them together."""
from __future__ import annotations

import json
import functools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specsim.errors import SpecError
from specsim.serving import EngineConfig, Workload, simulate
from specsim.serving.fleet import FleetSpec
from specsim.serving.policies import DisableByBatchSize, Never, StaticK
from specsim.serving.prefix_cache import PrefixCache, hit_units
from specsim.serving.router import Router, RouterConfig, imbalanced, prefix_choice
from specsim.serving.workloads import conversation_hashes, read_mooncake
from specsim.specs.data import data_path

TICK = 0.01
MOONCAKE = "traces/mooncake_fast25/conversation_trace.jsonl"



@pytest.fixture(params=[True, False], ids=["fast path", "general path"])
def sim(request):
    """simulate, with the engine's fast path on or off (the timelines are the same either way)."""
    return functools.partial(simulate, fast_path=request.param)

def const(mix):
    return TICK


def work(arrivals, prompts, outputs, **kw):
    return Workload(arrival_at_s=np.asarray(arrivals, dtype=float), prompt_tokens=np.asarray(prompts),
                    output_tokens=np.asarray(outputs), **kw)


def timeline(result):
    t = result.tokens()
    return [(int(r), int(i), round(float(a), 6)) for r, i, a in zip(t["request"], t["token_index"], t["at_s"])]


# ---- routing, pure ------------------------------------------------------------------------------

def test_round_robin_and_least_outstanding_picks():
    rr = Router(RouterConfig(kind="round_robin"))
    assert [rr.pick([0, 0, 0]) for _ in range(5)] == [0, 1, 2, 0, 1]
    lo = Router(RouterConfig(kind="least_outstanding"))
    assert lo.pick([3, 1, 1]) == 1 and lo.pick([0, 5, 0]) == 0


def test_prefix_affinity_follows_the_longest_match_unless_imbalanced_or_below_threshold():
    cfg = RouterConfig(kind="prefix_affinity")  # cache_threshold 0.3, abs 64, rel 1.5 (vllm-router defaults)
    # chain of 10 units: replica 2 holds 6 of them (0.6 >= 0.3) although it is busier
    assert prefix_choice([1, 0, 5], [1, 0, 6], 10, cfg) == 2
    # 2 of 10 is below the threshold: the smallest cache (ties: least loaded)
    assert prefix_choice([1, 0, 5], [1, 0, 2], 10, cfg, [40, 90, 10]) == 2
    assert prefix_choice([1, 0, 5], [1, 0, 2], 10, cfg, [40, 40, 40]) == 1
    # imbalance: 100 - 10 > 64 and 100 > 1.5 x 10: least loaded whatever the match
    assert imbalanced([100, 10], cfg) and prefix_choice([100, 10], [10, 0], 10, cfg) == 1
    # equal matches: the less loaded of them
    assert prefix_choice([4, 2, 3], [5, 0, 5], 10, cfg) == 2
    with pytest.raises(SpecError, match="router"):
        RouterConfig(kind="random")


def test_prefix_cache_references_eviction_and_hits():
    c = PrefixCache()
    assert c.publish(7, 32) and not c.publish(7, 32)
    assert c.release(7) == 32 and c.evictable_blocks == 32  # unreferenced: evictable, still cached
    assert c.match([7, 8]) == 1
    assert c.acquire(7) == 32 and c.evictable_blocks == 0   # referenced again: out of the pool
    c.publish(8, 32)
    c.release(8)
    c.release(7)
    assert c.evict(10) == 32 and 8 not in c and 7 in c        # least recently released first
    # a prompt fully cached keeps at least one token to compute: 2 units of 512, prompt 1024
    c2 = PrefixCache()
    c2.publish(1, 32)
    c2.publish(2, 32)
    assert hit_units(c2, [1, 2], covered_tokens=1024, unit_tokens=512, block_size_tokens=16,
                     prompt_tokens=1024) == (1, 512)
    # a short last unit of 300 tokens keeps its 18 full blocks (288 tokens)
    assert hit_units(c2, [1, 2], covered_tokens=812, unit_tokens=512, block_size_tokens=16,
                     prompt_tokens=2000) == (2, 512 + 288)


# ---- prefix caching against the Mooncake trace ----------------------------------------------------

def _implied_hit_tokens(path, n: int) -> tuple[list[int], list[int]]:
    """Per request, straight from the JSON lines: the tokens of its longest leading run of blocks
    whose ids an earlier request carried (512 tokens a block; full 16-token KV blocks of a short last
    block; a short block ends the run; at least one prompt token left to compute)."""
    seen: set = set()
    hits, prompts = [], []
    with open(path) as f:
        for _, line in zip(range(n), f):
            row = json.loads(line)
            ids, p = row["hash_ids"], row["input_length"]
            run = []
            for j, u in enumerate(ids):
                if u not in seen:
                    break
                tokens = min(512, p - 512 * j)
                run.append(tokens // 16 * 16)
                if tokens < 512:
                    break
            while run and sum(run) > p - 1:
                run.pop()
            hits.append(sum(run))
            prompts.append(p)
            seen.update(ids)
    return hits, prompts


def _mooncake_head(n: int) -> Workload:
    w = read_mooncake(data_path(MOONCAKE, what="trace")).head(n)
    # one request at a time (each finished before the next arrives), two output tokens each
    return replace(w, arrival_at_s=np.arange(n) * 100.0, output_tokens=np.full(n, 2))


def test_simulated_prefix_hits_equal_what_the_mooncake_hash_ids_imply(sim):
    n = 800
    hits, prompts = _implied_hit_tokens(data_path(MOONCAKE, what="trace"), n)
    w = _mooncake_head(n)
    big = int(w.prompt_tokens.sum()) // 16 + 10 * n  # room for every block: nothing is evicted
    r = sim(w, config=EngineConfig(n_blocks=big, prefix_caching=True), cost=const, policy=Never())
    assert (r.requests["status"] == "done").all()
    np.testing.assert_array_equal(r.run.prefix_hit_tokens, hits)
    assert r.summary["prefix_hit_rate"] == pytest.approx(sum(hits) / sum(prompts), rel=1e-12)
    assert r.summary["prefix_evicted_units"] == 0
    # a cache of 20,000 blocks (320k tokens) must evict: fewer hits, capacity respected
    small = sim(w, config=EngineConfig(n_blocks=20_000, prefix_caching=True), cost=const, policy=Never())
    assert small.summary["prefix_evicted_units"] > 0
    assert small.summary["prefix_hit_rate"] < r.summary["prefix_hit_rate"]
    st_ = small.steps
    assert (st_["kv_used_blocks"] + st_["kv_cached_blocks"] <= 20_000).all()
    # prefill saved: the iterations carry fewer prompt tokens than without caching
    plain = sim(w, config=EngineConfig(n_blocks=big), cost=const, policy=Never())
    assert r.steps["n_batched_tokens"].sum() == plain.steps["n_batched_tokens"].sum() - sum(hits)


def test_mooncake_reader_keeps_the_hash_ids_and_their_reuse_matches_the_readme():
    w = read_mooncake(data_path(MOONCAKE, what="trace"))
    assert w.hash_block_tokens == 512 and w.has_prefixes
    lens = np.diff(w.block_hash_offsets)
    np.testing.assert_array_equal(lens, -(-w.prompt_tokens // 512))
    # data/traces/README.md: "With an unbounded cache, 36.6 % of all blocks are reused"
    _, first = np.unique(w.block_hashes, return_index=True)
    reused = 1.0 - first.size / w.block_hashes.size
    assert reused == pytest.approx(0.366, abs=0.0005)
    # windows and heads carry the chains along
    h = w.head(3)
    np.testing.assert_array_equal(h.hashes_of(2), w.hashes_of(2))


def test_conversation_sessions_reuse_the_previous_turn_and_its_output():
    # session a: turn 1 prompt 40 + output 24 = 64 tokens = 4 blocks of 16; turn 2 carries those 64
    # and 36 more (prompt 100); session b is unrelated
    h, off = conversation_hashes(["a", "b", "a"], np.array([40, 20, 100]), np.array([24, 10, 5]), block_tokens=16)
    chains = [h[off[i]:off[i + 1]].tolist() for i in range(3)]
    assert chains[0] == [0, 1, 2, 3] and chains[1] == [4] and chains[2][:4] == [0, 1, 2, 3]
    assert len(chains[2]) == (100 + 5) // 16
    w = work([0.0, 0.5, 10.0], [40, 20, 100], [24, 10, 5], block_hashes=h, block_hash_offsets=off,
             hash_block_tokens=16, hashes_cover_output=True)
    r = simulate(w, config=EngineConfig(n_blocks=1000, prefix_caching=True), cost=const, policy=Never())
    # turn 1's cache ends with 40 + 23 tokens (its last token is sampled, never fed back), so three full
    # blocks of 16, prompt and generated, are cached; turn 2 finds those 48 tokens, nothing else hits
    assert r.run.prefix_hit_tokens.tolist() == [0, 0, 48]
    with pytest.raises(SpecError, match="previous turn"):
        conversation_hashes(["a", "a"], np.array([40, 50]), np.array([24, 5]), block_tokens=16)


def test_prefix_affinity_routes_turns_to_the_replica_that_holds_them():
    w = read_mooncake(data_path(MOONCAKE, what="trace")).head(600)
    w = replace(w, arrival_at_s=np.arange(600) * 0.5, output_tokens=np.full(600, 8))
    cfg = EngineConfig(n_blocks=60_000, prefix_caching=True)
    rates = {}
    for kind in ("round_robin", "prefix_affinity"):
        fleet = FleetSpec(n_replicas=4, router=RouterConfig(kind=kind))
        r = simulate(w, config=cfg, cost=const, policy=Never(), fleet=fleet)
        assert (r.requests["status"] == "done").all()
        rates[kind] = r.summary["prefix_hit_rate"]
        assert set(r.requests["replica"]) == {0, 1, 2, 3}
    assert rates["prefix_affinity"] > rates["round_robin"] + 0.02


# ---- replicas ------------------------------------------------------------------------------------

def test_one_replica_fleet_is_the_plain_engine_and_round_robin_splits_requests(sim):
    w = work(np.arange(12) * 0.004, [8] * 12, [5] * 12)
    cfg = EngineConfig(n_blocks=200)
    a = sim(w, config=cfg, cost=const, policy=StaticK(k=2), acceptance=0.6, seed=3)
    b = sim(w, config=cfg, cost=const, policy=StaticK(k=2), acceptance=0.6, seed=3, fleet=FleetSpec(n_replicas=1))
    assert a.requests.drop(columns=["status"]).equals(b.requests.drop(columns=["status"]))
    r = sim(w, config=cfg, cost=const, policy=Never(), fleet=FleetSpec(n_replicas=3,
                                                                              router=RouterConfig(kind="round_robin")))
    assert r.requests["replica"].tolist() == [i % 3 for i in range(12)]
    reps = r.replicas()
    assert reps["n_done"].tolist() == [4, 4, 4] and reps["role"].tolist() == ["both"] * 3
    # each replica alone: request i at 4 ms steps, one prefill + 4 decodes of 10 ms; three replicas
    # finish 12 requests sooner than one
    one = sim(w, config=cfg, cost=const, policy=Never())
    assert r.summary["makespan_s"] < one.summary["makespan_s"]


def test_disaggregated_handoff_timeline_by_hand(sim):
    # prefill replica: [0, 10 ms) prefills 10 tokens, first token at 10 ms; the 10-token cache moves in
    # 5 ms + 10 x 1 ms = 15 ms, reaching the decode replica at 25 ms; it decodes at 35 and 45 ms
    fleet = FleetSpec(layout="disaggregated", n_replicas=2, n_prefill=1, kv_transfer_s_per_token=0.001,
                      kv_transfer_latency_s=0.005)
    r = sim(work([0.0], [10], [3]), config=EngineConfig(n_blocks=100), cost=const, policy=Never(), fleet=fleet,
                 record_tokens=True)
    assert timeline(r) == [(0, 0, 0.01), (0, 1, 0.035), (0, 2, 0.045)]
    assert r.requests["prefill_replica"].tolist() == [0] and r.requests["replica"].tolist() == [1]
    assert r.requests["ttft_s"].round(6).tolist() == [0.01]
    # two prompts leave together: the second transfer waits for the link (one at a time per prefill replica)
    r2 = sim(work([0.0, 0.0], [10, 10], [2, 2]), config=EngineConfig(n_blocks=100), cost=const, policy=Never(),
                  fleet=fleet, record_tokens=True)
    # transfers: [10, 20) ms + 5 ms latency -> 25 ms; [20, 30) + 5 -> 35 ms
    assert timeline(r2) == [(0, 0, 0.01), (1, 0, 0.01), (0, 1, 0.035), (1, 1, 0.045)]
    with pytest.raises(SpecError, match="n_prefill"):
        FleetSpec(layout="disaggregated", n_replicas=2, n_prefill=2)


# ---- swap and priorities -------------------------------------------------------------------------

def test_swap_preemption_moves_blocks_to_host_and_back(sim):
    # 6 blocks of 4 tokens (as the recompute test): the later request is swapped out instead of
    # dropped; each block copy costs 2 ms, added to the iterations that copy
    cfg = EngineConfig(n_blocks=6, block_size_tokens=4, watermark_frac=0.0, preemption_mode="swap",
                       swap_space_blocks=100, swap_s_per_block=0.002)
    r = sim(work([0.0, 0.0], [8, 8], [8, 8]), config=cfg, cost=const, policy=Never(), record_tokens=True)
    req = r.requests
    assert req["status"].tolist() == ["done", "done"] and req["emitted_tokens"].tolist() == [8, 8]
    assert req["n_preemptions"].tolist() == [0, 0] and req["n_swaps"].tolist() == [0, 1]
    steps = r.steps
    assert (steps["kv_used_blocks"] <= 6).all()
    # it held 3 blocks (12 tokens) when swapped out and takes 4 (its context + the slot) coming back
    assert steps["n_swap_blocks"].sum() == 3 + 3 and steps["swap_s"].sum() == pytest.approx(6 * 0.002)
    t = r.tokens()
    assert sorted(zip(t["request"], t["token_index"])) == [(i, j) for i in (0, 1) for j in range(8)]
    # no host space: recompute, and the fallback is counted
    none = sim(work([0.0, 0.0], [8, 8], [8, 8]), config=replace(cfg, swap_space_blocks=0), cost=const,
                    policy=Never())
    assert none.requests["n_preemptions"].tolist() == [0, 1] and none.summary["n_swap_fallbacks"] == 1


def test_priority_scheduling_orders_the_queue_and_preempts_lower_priority(sim):
    # 5 blocks of 4 tokens. Request 0 (priority 1) runs with 12 + 1 tokens; request 1 (priority 0)
    # arrives at 15 ms with a 12-token prompt: it cannot fit beside request 0, which is preempted
    w = work([0.0, 0.015], [12, 12], [6, 2], priority=np.array([1, 0]))
    cfg = EngineConfig(n_blocks=5, block_size_tokens=4, watermark_frac=0.0, scheduling="priority")
    r = sim(w, config=cfg, cost=const, policy=Never(), record_tokens=True)
    req = r.requests
    assert req["n_preemptions"].tolist() == [1, 0] and req["status"].tolist() == ["done", "done"]
    assert req["finish_at_s"][1] < req["finish_at_s"][0]
    fcfs = sim(w, config=replace(cfg, scheduling="fcfs"), cost=const, policy=Never())
    assert fcfs.requests["n_preemptions"].tolist() == [0, 0]
    assert fcfs.requests["finish_at_s"][0] < fcfs.requests["finish_at_s"][1]
    # the waiting queue: three arrive together, priorities 2, 0, 1, one slot at a time
    w3 = work([0.0, 0.0, 0.0], [4, 4, 4], [1, 1, 1], priority=np.array([2, 0, 1]))
    r3 = sim(w3, config=EngineConfig(n_blocks=100, max_num_seqs=1, scheduling="priority"), cost=const,
                  policy=Never())
    assert np.argsort(r3.requests["finish_at_s"].to_numpy()).tolist() == [1, 2, 0]
    assert r3.summary["ttft_p50_s_priority0"] == pytest.approx(0.01)


# ---- the drafter's catch-up ----------------------------------------------------------------------

def _catchups(sim, policy, acceptance, drafter_cache, outputs=(20,), n_blocks=200, arrivals=None):
    seen = []

    def cost(mix):
        seen.append((None if mix.catchup is None else mix.catchup.tolist(), mix.draft_k.tolist(), mix.drafter_on,
                     mix.is_prefill.tolist()))
        return TICK

    arr = arrivals if arrivals is not None else [0.0] * len(outputs)
    r = sim(work(arr, [8] * len(outputs), list(outputs)), config=EngineConfig(n_blocks=n_blocks), cost=cost,
            policy=policy, acceptance=acceptance, drafter_cache=drafter_cache)
    return seen, r


def test_draft_model_catches_up_on_the_last_draft_when_all_k_are_accepted(sim):
    # K = 2, α = 1: every cycle accepts both drafts; the draft model ran over the last token and the
    # first draft, so the next cycle first runs over the second draft: catch-up 1 a cycle
    seen, r = _catchups(sim, StaticK(k=2), 1.0, "keep")
    cycles = [c for c in seen if c[1] == [2]]
    assert cycles[0][0] == [0] and all(c[0] == [1] for c in cycles[1:])
    # α = 0: it rejected the first draft; the drafter's cache already holds the new context
    seen0, _ = _catchups(sim, StaticK(k=2), 0.0, "keep")
    assert all(c[0] == [0] for c in seen0 if c[1] == [2])
    assert r.summary["drafter_catchup_tokens"] == len(cycles) - 1


def test_eagle_runs_again_over_every_accepted_draft(sim):
    seen, _ = _catchups(sim, StaticK(k=3), 1.0, "refeed")
    cycles = [c for c in seen if c[1] == [3]]
    assert cycles[0][0] == [0] and all(c[0] == [3] for c in cycles[1:])


def test_after_the_gate_reopens_the_drafter_prefills_what_it_missed(sim):
    # threshold 2: with both requests running the gate is off (the drafter does not run, not even over
    # the prompts); request 1 finishes after its prefill + 1 decode, and request 0 drafts again: its
    # drafter first runs over the 8 prompt tokens and the token the target fed while off (then, as
    # every cycle, over the newest token as its first drafting pass)
    seen, r = _catchups(sim, DisableByBatchSize(k=2, threshold=2), 0.0, "keep", outputs=(12, 2))
    assert seen[0][2] is False and seen[1][2] is False  # gate off: prefill and decode without the drafter
    assert seen[2][1] == [2] and seen[2][0] == [8 + 1]
    assert seen[3][0] == [0]
    # catch-up off: never behind, no catch-up tokens
    seen_off, _ = _catchups(sim, DisableByBatchSize(k=2, threshold=2), 0.0, "none", outputs=(12, 2))
    assert all(c[0] is None for c in seen_off)


def test_catchup_is_priced_as_a_longer_first_drafting_pass():
    """The serving cost of a mix whose rows carry catch-up tokens c is its cost without them plus the
    drafter's first pass over 1 + c tokens from context − c instead of 1 token from context, priced
    here straight from the roofline (a second implementation of the increment)."""
    from specsim.cost.roofline import mixed_step_cost
    from specsim.serving.cost import ServingCost
    from specsim.serving.engine import IterationMix
    from specsim.specs.scenario import load_scenario
    from specsim.speculation.operating_point import resolve

    op = resolve(load_scenario("llama-70b-h100-chat"), stack="vllm", cost_source="roofline")
    cost = ServingCost(op)
    ctx = np.array([900, 1500, 3000, 120], dtype=np.int64)
    c = np.array([1, 0, 5, 2], dtype=np.int64)
    q = np.full(4, 5, dtype=np.int64)
    dk = np.full(4, 4, dtype=np.int64)
    base = IterationMix(q, ctx, q, dk, np.zeros(4, bool), drafter_on=True)
    with_c = IterationMix(q, ctx, q, dk, np.zeros(4, bool), drafter_on=True, catchup=c)
    work_ = op.drafter.family.work(op.drafter, op.target, op.deployment.tp)
    kw = dict(tp=work_.pass_tp, attention=op.deployment.attention, efficiency=op.deployment.eff)
    step = lambda qq, ll: float(mixed_step_cost(work_.pass_model, op.hardware, q_lens=qq, context_lens=ll,  # noqa: E731
                                                logit_lens=np.ones(4, dtype=np.int64), **kw).time_s)
    expected = step(1 + c, ctx - c) - step(np.ones(4, dtype=np.int64), ctx)
    assert cost.catchup_time_s(with_c) == pytest.approx(expected, rel=1e-9)
    assert cost(with_c) - cost(base) == pytest.approx(expected, rel=1e-6)
    assert cost.catchup_time_s(base) == 0.0


# ---- conservation and determinism, everything on -------------------------------------------------

@st.composite
def fleets(draw):
    n = draw(st.integers(1, 10))
    gaps = draw(st.lists(st.floats(0.0, 0.05), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 30), min_size=n, max_size=n))
    # prefix chains of 4-token blocks over a small alphabet of shared prefixes
    unit = 4
    chains = []
    for p in prompts:
        root = draw(st.integers(0, 2))
        chains.append([1000 * root + j for j in range(-(-p // unit))])
    off = np.concatenate([[0], np.cumsum([len(c) for c in chains])]).astype(np.int64)
    prio = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    w = work(np.cumsum(gaps), prompts, outputs, priority=np.asarray(prio),
             block_hashes=np.asarray([x for c in chains for x in c], dtype=np.int64), block_hash_offsets=off,
             hash_block_tokens=unit)
    bs = draw(st.sampled_from([1, 2, 4]))
    cfg = EngineConfig(n_blocks=draw(st.integers(16, 80)) * (4 // bs), block_size_tokens=bs,
                       max_num_seqs=draw(st.integers(1, 6)), max_num_batched_tokens=draw(st.integers(8, 80)),
                       chunked_prefill=draw(st.booleans()), watermark_frac=draw(st.sampled_from([0.0, 0.05])),
                       preemption_mode=draw(st.sampled_from(["recompute", "swap"])),
                       swap_space_blocks=draw(st.integers(0, 40)), swap_s_per_block=0.0005,
                       scheduling=draw(st.sampled_from(["fcfs", "priority"])), prefix_caching=draw(st.booleans()),
                       drafter_catchup=draw(st.booleans()))
    layout = draw(st.sampled_from(["colocated", "disaggregated"]))
    n_rep = draw(st.integers(1, 3)) if layout == "colocated" else draw(st.integers(2, 4))
    fleet = FleetSpec(layout=layout, n_replicas=n_rep, n_prefill=(draw(st.integers(1, n_rep - 1))
                                                                  if layout == "disaggregated" else 0),
                      router=RouterConfig(kind=draw(st.sampled_from(["round_robin", "least_outstanding",
                                                                     "prefix_affinity"]))),
                      kv_transfer_s_per_token=1e-4, kv_transfer_latency_s=0.001)
    policy = draw(st.sampled_from([Never(), StaticK(k=3), DisableByBatchSize(k=2, threshold=2)]))
    return w, cfg, fleet, policy, draw(st.floats(0.0, 1.0)), draw(st.sampled_from(["none", "keep", "refeed"]))


def varying_cost(mix):
    extra = 0.0 if mix.catchup is None else 1e-5 * float(mix.catchup.sum())
    return 0.002 + 1e-4 * float(mix.q_lens.sum()) + 1e-3 * float(mix.draft_k.max(initial=0)) + extra


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.integers(0, 3))
def test_conservation_with_replicas_prefix_caching_swap_priorities_and_catchup(case, seed):
    w, cfg, fleet, policy, alpha, dcache = case
    kw = dict(config=cfg, cost=varying_cost, policy=policy, acceptance=alpha, seed=seed, fleet=fleet,
              drafter_cache=dcache)
    r = simulate(w, record_tokens=True, **kw)
    req = r.requests
    done = req["status"] == "done"
    rejected = req["status"] == "rejected"
    assert (done | rejected).all()
    assert (req.loc[done, "emitted_tokens"] == req.loc[done, "output_tokens"]).all()
    assert (req.loc[rejected, "emitted_tokens"] == 0).all()
    steps = r.steps
    assert (steps["kv_used_blocks"] <= cfg.n_blocks).all()
    assert (steps["kv_used_blocks"] + steps["kv_cached_blocks"] <= cfg.n_blocks).all()
    assert (steps["n_catchup_tokens"] >= 0).all()
    t = r.tokens()
    pairs = list(zip(t["request"], t["token_index"]))
    assert len(pairs) == len(set(pairs))
    expected = sorted((int(i), j) for i in np.flatnonzero(done.to_numpy()) for j in range(int(w.output_tokens[i])))
    assert sorted(pairs) == expected
    assert (t.groupby("request")["at_s"].diff().dropna() >= 0).all()
    assert (r.run.prefix_hit_tokens <= np.maximum(w.prompt_tokens - 1, 0)).all()
    if fleet.disaggregated:  # first tokens come from prefill replicas, the rest from decode replicas
        n_p = fleet.n_prefill
        assert (req.loc[done & (req["output_tokens"] > 1), "replica"] >= n_p).all()
    # the engine's general path alone gives the same run, token for token
    again = simulate(w, record_tokens=True, fast_path=False, **kw)
    assert again.requests.drop(columns=["status"]).equals(req.drop(columns=["status"]))
    assert again.steps.equals(steps)
    assert again.tokens().equals(t)


def test_tabulated_draws_are_the_request_streams_accepted_counts():
    """The engine's table of accepted counts (i.i.d. α that does not move) holds, for request i's draw
    c, exactly what accepted_from_uniforms makes of that request's c-th stream uniform at K = k_max."""
    from specsim.serving.streams import TabulatedDraws, request_keys, stream_uniforms
    from specsim.speculation.acceptance import accepted_from_uniforms

    keys = request_keys(np.random.SeedSequence(5), 40)
    out = np.arange(1, 41, dtype=np.int64) * 3
    for alpha in (0.0, 0.37, 0.8, 1.0):
        d = TabulatedDraws(keys, out, alpha, 4)
        for i in (0, 7, 39):
            c = np.arange(out[i] + 1, dtype=np.uint64)
            u = stream_uniforms(np.full(c.size, keys[i]), c, 1)[:, 0]
            want = accepted_from_uniforms(u, np.full(c.size, alpha), 4)
            np.testing.assert_array_equal(d.g[d.offsets[i]:d.offsets[i] + c.size], want)
