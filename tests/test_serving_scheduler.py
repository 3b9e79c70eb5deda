"""The batching policy on its own, without simpy or a workload: `Scheduler.plan` against its plain
twin (tests/naive_scheduler.py) on random replica states, and a few plans worked out by hand."""
from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import naive_scheduler as naive
from specsim.serving.blocks import BlockLedger
from specsim.serving.config import EngineConfig
from specsim.serving.requests import RequestTable
from specsim.serving.running import NEVER, RunningSet
from specsim.serving.scheduler import Scheduler, Swapped, WaitingQueue


def _real(spec: dict, *, fast: bool):
    """The scheduler and its state from a state description (see `states`)."""
    lim = spec["limits"]
    reqs = spec["requests"]
    n = len(reqs)
    table = RequestTable(prompt_tokens=np.array([r.prompt for r in reqs], dtype=np.int64),
                         output_tokens=np.array([r.output for r in reqs], dtype=np.int64),
                         arrival_at_s=np.array([r.arrival for r in reqs], dtype=float),
                         priority=np.array([r.priority for r in reqs], dtype=np.int64))
    table.emitted_tokens[:] = [r.emitted for r in reqs]
    table.transferred_tokens[:] = [r.transferred for r in reqs]
    cfg = EngineConfig(n_blocks=lim.n_blocks, block_size_tokens=lim.block_size, max_num_seqs=lim.max_num_seqs,
                       max_num_batched_tokens=lim.max_num_batched_tokens, chunked_prefill=lim.chunked_prefill,
                       mixed_prefill=lim.mixed_prefill, watermark_frac=spec["watermark_frac"], preemption_mode=lim.preemption_mode,
                       swap_space_blocks=lim.swap_space_blocks, scheduling="priority" if lim.by_priority else "fcfs")
    assert cfg.watermark_blocks == lim.watermark_blocks
    ledger = BlockLedger(n_blocks=lim.n_blocks, block_size_tokens=lim.block_size, watermark_blocks=lim.watermark_blocks,
                         prefix=None, unit_tokens=0, swap_space_blocks=lim.swap_space_blocks)
    running = RunningSet()
    rows = [(r["request"], r["prefill"], r["computed"], r["context"], r["blocks"], 0, 0, NEVER) for r in spec["running"]]
    if rows:
        running.append(rows, table, lambda r, c: c.astype(np.int64))
    running.all_decoding = all(r["computed"] >= r["prefill"] for r in spec["running"])
    ledger.used_blocks = sum(r["blocks"] for r in spec["running"])
    waiting = WaitingQueue(table, lim.by_priority)
    for i in spec["waiting"]:
        waiting.push(i)
    swapped = deque(Swapped(s["request"], s["prefill"], s["computed"], s["context"], 0, s["blocks"])
                    for s in spec["swapped"])
    ledger.swap_used_blocks = sum(s["blocks"] for s in spec["swapped"])
    sched = Scheduler(cfg, slots=lim.slots, requests=table, ledger=ledger, draw_start=lambda r, c: c.astype(np.int64),
                      draw_counter=lambda r, p: p, one_step_per_draw=False, fast=fast)
    assert n == table.n
    return sched, running, waiting, swapped


def _twin(spec: dict) -> naive.State:
    import copy
    return naive.State(limits=spec["limits"], requests={i: copy.copy(r) for i, r in enumerate(spec["requests"])},
                       running=[dict(r) for r in spec["running"]], waiting=list(spec["waiting"]),
                       swapped=[dict(s) for s in spec["swapped"]],
                       used_blocks=sum(r["blocks"] for r in spec["running"]),
                       swap_used_blocks=sum(s["blocks"] for s in spec["swapped"]))


@st.composite
def states(draw):
    """A replica state as one could find it between two iterations: running rows decoding (blocks for
    their context and at most their next slots, as the engine leaves them) or part-way through a
    prefill (blocks for the whole prompt), requests waiting (fresh, preempted after emitting some
    tokens, or arrived by transfer with their prompt's cache), sequences swapped out."""
    bs = draw(st.sampled_from([1, 4, 16]))
    slots = draw(st.integers(1, 6))
    by_priority = draw(st.booleans())
    n_req = draw(st.integers(1, 14))
    reqs = []
    for i in range(n_req):
        prompt = draw(st.integers(1, 80))
        output = draw(st.integers(1, 40))
        reqs.append(naive.Request(prompt=prompt, output=output, priority=draw(st.integers(0, 2)) if by_priority else 0,
                                  arrival=float(draw(st.integers(0, 5)))))
    roles = draw(st.lists(st.sampled_from(["running", "waiting", "swapped", "none"]), min_size=n_req, max_size=n_req))
    running, waiting, swapped = [], [], []
    for i, (r, role) in enumerate(zip(reqs, roles)):
        if role == "running" or role == "swapped":
            decoding = draw(st.booleans())
            if decoding:
                r.emitted = draw(st.integers(0, r.output - 1))
                prefill = r.prompt + draw(st.integers(0, r.emitted))  # recomputed after a preemption, or not
                context = r.prompt + r.emitted
                blocks = draw(st.integers(naive.blocks_for(context, bs), naive.blocks_for(context + slots, bs)))
                row = dict(request=i, prefill=prefill, computed=prefill, context=context, blocks=blocks)
            else:
                r.emitted = draw(st.integers(0, r.output - 1))
                prefill = r.prompt + r.emitted
                computed = draw(st.integers(0, prefill - 1))
                row = dict(request=i, prefill=prefill, computed=computed, context=computed,
                           blocks=naive.blocks_for(prefill, bs))
            (running if role == "running" else swapped).append(row)
        elif role == "waiting":
            kind = draw(st.sampled_from(["fresh", "preempted", "transferred"]))
            if kind == "preempted":
                r.emitted = draw(st.integers(0, r.output - 1))
            elif kind == "transferred":
                r.emitted = 1 if r.output > 1 else 0
                r.transferred = r.prompt if r.output > 1 else 0
            waiting.append(i)
    if by_priority:
        running.sort(key=lambda row: (reqs[row["request"]].priority, reqs[row["request"]].arrival, row["request"]))
        waiting.sort(key=lambda i: (reqs[i].priority, reqs[i].arrival, i))
    used = sum(row["blocks"] for row in running)
    n_blocks = used + draw(st.integers(0, 60))
    watermark_frac = draw(st.sampled_from([0.0, 0.01, 0.1]))
    swap_used = sum(s["blocks"] for s in swapped)
    limits = naive.Limits(n_blocks=max(n_blocks, 1), block_size=bs, watermark_blocks=int(watermark_frac * max(n_blocks, 1)),
                          max_num_seqs=draw(st.integers(max(len(running), 1), 16)),
                          max_num_batched_tokens=draw(st.integers(1, 96)),
                          chunked_prefill=draw(st.booleans()), mixed_prefill=draw(st.booleans()),
                          preemption_mode=draw(st.sampled_from(["recompute", "swap"])),
                          swap_space_blocks=swap_used + draw(st.integers(0, 40)),
                          by_priority=by_priority, slots=slots)
    return dict(limits=limits, requests=reqs, running=running, waiting=waiting, swapped=swapped,
                watermark_frac=watermark_frac)


def _outcome_real(sched, running, waiting, swapped, plan):
    return dict(allot=plan.allot.tolist(), admitted=list(plan.admitted), preempted=list(plan.preempted),
                swapped_in=list(plan.swapped_in), swap_blocks=plan.swap_blocks,
                running=[(int(r), int(p), int(c), int(x), int(b)) for r, p, c, x, b in
                         zip(running.request, running.prefill_tokens, running.computed_tokens,
                             running.context_tokens, running.blocks)],
                waiting=[waiting.pop() for _ in range(len(waiting))],
                swapped=[(s.request, s.prefill_tokens, s.computed_tokens, s.context_tokens, s.blocks) for s in swapped],
                used=sched.ledger.used_blocks, swap_used=sched.ledger.swap_used_blocks,
                fallbacks=sched.ledger.n_swap_fallbacks,
                n_preemptions={i: int(v) for i, v in enumerate(sched.requests.n_preemptions) if v},
                n_swaps={i: int(v) for i, v in enumerate(sched.requests.n_swaps) if v})


def _outcome_twin(state: naive.State, decided: dict):
    return dict(allot=decided["allot"], admitted=decided["admitted"], preempted=decided["preempted"],
                swapped_in=decided["swapped_in"], swap_blocks=decided["swap_blocks"],
                running=[(r["request"], r["prefill"], r["computed"], r["context"], r["blocks"]) for r in state.running],
                waiting=list(state.waiting),
                swapped=[(s["request"], s["prefill"], s["computed"], s["context"], s["blocks"]) for s in state.swapped],
                used=state.used_blocks, swap_used=state.swap_used_blocks, fallbacks=state.n_swap_fallbacks,
                n_preemptions=state.n_preemptions, n_swaps=state.n_swaps)


@pytest.mark.parametrize("fast", [True, False], ids=["fast path", "general path"])
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=states())
def test_plan_equals_its_plain_twin(spec, fast):
    sched, running, waiting, swapped = _real(spec, fast=fast)
    plan = sched.plan(running, waiting, swapped)
    twin = _twin(spec)
    decided = naive.plan(twin)
    assert _outcome_real(sched, running, waiting, swapped, plan) == _outcome_twin(twin, decided)


def _spec(*, running=(), waiting=(), swapped=(), requests, **limits):
    base = dict(n_blocks=100, block_size=4, watermark_blocks=0, max_num_seqs=8, max_num_batched_tokens=16,
                chunked_prefill=True, preemption_mode="recompute", swap_space_blocks=0, by_priority=False, slots=3)
    base.update(limits)
    return dict(limits=naive.Limits(**base), requests=list(requests), running=list(running), waiting=list(waiting),
                swapped=list(swapped), watermark_frac=0.0)


def test_decodes_first_then_a_chunk_of_the_head_of_the_queue():
    # two decodes (K = 2: 3 tokens each) and a 20-token prompt waiting, budget 16: the decodes take 6,
    # the prompt a chunk of the remaining 10; its blocks are taken for the whole prompt (20 / 4 = 5)
    reqs = [naive.Request(prompt=8, output=10, emitted=2), naive.Request(prompt=8, output=10, emitted=2),
            naive.Request(prompt=20, output=5)]
    rows = [dict(request=i, prefill=8, computed=8, context=10, blocks=3) for i in (0, 1)]
    sched, running, waiting, swapped = _real(_spec(requests=reqs, running=rows, waiting=[2]), fast=True)
    plan = sched.plan(running, waiting, swapped)
    assert plan.allot.tolist() == [3, 3, 10]
    assert list(plan.admitted) == [2] and list(plan.preempted) == []
    # blocks: each decode holds 10 + 3 = 13 tokens -> 4 blocks (one more each); the prompt 5
    assert running.blocks.tolist() == [4, 4, 5] and sched.ledger.used_blocks == 13


def test_blocks_running_short_preempt_the_last_row_which_waits_for_the_next_iteration():
    # 7 blocks of 4 tokens; two decodes at context 12 holding 3 blocks each need 4 each for their 3
    # slots (15 tokens): 2 more blocks, 1 free, so the last row is preempted by recompute (6 -> 3 in
    # use), the first grows to 4 (4 in use). Its 12 tokens to recompute would fit in the 3 blocks left,
    # but vLLM v0 puts the preempted back in the waiting queue only after the iteration's admissions
    reqs = [naive.Request(prompt=10, output=9, emitted=2), naive.Request(prompt=10, output=9, emitted=2)]
    rows = [dict(request=i, prefill=10, computed=10, context=12, blocks=3) for i in (0, 1)]
    sched, running, waiting, swapped = _real(_spec(requests=reqs, running=rows, n_blocks=7), fast=True)
    plan = sched.plan(running, waiting, swapped)
    assert list(plan.preempted) == [(1, "recompute")] and list(plan.admitted) == []
    assert plan.allot.tolist() == [3] and running.request.tolist() == [0] and sched.ledger.used_blocks == 4
    assert waiting.peek() == 1 and sched.requests.n_preemptions.tolist() == [0, 1]
    # the next iteration, after the decode emitted its 3 tokens (context 15): it holds 15 + 3 = 18 tokens
    # -> 5 blocks (1 more, 5 in use), then the preempted request would recompute its prompt and the 2
    # tokens it emitted: 12 tokens, 3 blocks > the 2 free
    running.context_tokens[0] += 3
    plan = sched.plan(running, waiting, swapped)
    assert list(plan.admitted) == [] and plan.allot.tolist() == [3]


def test_swap_mode_falls_back_to_recompute_when_the_host_space_is_full():
    # the same squeeze with preemption_mode = "swap" and 2 host blocks: the 3 blocks do not fit, so
    # the row is recomputed and counted as a fallback; with 3 host blocks it is swapped out
    reqs = [naive.Request(prompt=10, output=9, emitted=2), naive.Request(prompt=10, output=9, emitted=2)]
    rows = [dict(request=i, prefill=10, computed=10, context=12, blocks=3) for i in (0, 1)]
    for space, want in ((2, "recompute"), (3, "swap")):
        sched, running, waiting, swapped = _real(_spec(requests=reqs, running=rows, n_blocks=7, preemption_mode="swap",
                                                       swap_space_blocks=space), fast=True)
        plan = sched.plan(running, waiting, swapped)
        assert list(plan.preempted) == [(1, want)]
        assert sched.ledger.n_swap_fallbacks == (want == "recompute")
        assert [s.request for s in swapped] == ([1] if want == "swap" else [])
        assert plan.swap_blocks == (3 if want == "swap" else 0)


def test_sglangs_prefill_runs_first_alone_in_chunks_and_the_decodes_wait():
    # SGLang's order (mixed_prefill = False): the same state as above (two decodes of 3 slots, a 20-token
    # prompt waiting, budget 16) runs the prompt's first chunk of 16 alone; the decodes get nothing
    reqs = [naive.Request(prompt=8, output=10, emitted=2), naive.Request(prompt=8, output=10, emitted=2),
            naive.Request(prompt=20, output=5)]
    rows = [dict(request=i, prefill=8, computed=8, context=10, blocks=3) for i in (0, 1)]
    sched, running, waiting, swapped = _real(_spec(requests=reqs, running=rows, waiting=[2], mixed_prefill=False),
                                             fast=True)
    plan = sched.plan(running, waiting, swapped)
    assert plan.allot.tolist() == [0, 0, 16] and list(plan.admitted) == [2] and plan.n_scheduled == 1
    # blocks: the decodes hold theirs (3 each, no growth: they do not run), the prompt its whole 20 / 4 = 5
    assert running.blocks.tolist() == [3, 3, 5] and sched.ledger.used_blocks == 11
    # next iteration: the rest of the prompt (4 tokens), again alone
    running.computed_tokens[2] = running.context_tokens[2] = 16
    plan = sched.plan(running, waiting, swapped)
    assert plan.allot.tolist() == [0, 0, 4] and list(plan.admitted) == []
    # nothing left to prefill: all three decode (its prefill emitted the prompt's first token: context 21)
    running.computed_tokens[2], running.context_tokens[2] = 20, 21
    plan = sched.plan(running, waiting, swapped)
    assert plan.allot.tolist() == [3, 3, 3]
    # with mixing (vLLM), the first iteration is the one worked above: [3, 3, 10]
    sched, running, waiting, swapped = _real(_spec(requests=reqs, running=rows, waiting=[2], mixed_prefill=True),
                                             fast=True)
    assert sched.plan(running, waiting, swapped).allot.tolist() == [3, 3, 10]


def test_a_prefill_first_iteration_that_admits_nothing_decodes():
    # a prompt waiting that cannot get its blocks (2 free, it needs 5): nothing prefills, the decodes run
    reqs = [naive.Request(prompt=8, output=10, emitted=2), naive.Request(prompt=20, output=5)]
    rows = [dict(request=0, prefill=8, computed=8, context=10, blocks=3)]
    sched, running, waiting, swapped = _real(_spec(requests=reqs, running=rows, waiting=[1], n_blocks=6,
                                                   mixed_prefill=False), fast=False)
    plan = sched.plan(running, waiting, swapped)
    assert plan.allot.tolist() == [3] and list(plan.admitted) == [] and waiting.peek() == 1
