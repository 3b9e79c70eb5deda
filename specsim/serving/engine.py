"""A vLLM-like continuous-batching engine on simpy: one simpy event per iteration per replica.

Each replica runs `serve`, one iteration a turn (vLLM v0's iteration-level batching):
1. route what has arrived (`dispatch.Dispatcher`); an idle replica waits for the next request;
2. schedule the batch (`scheduler.Scheduler.plan`: priority preemption, the running set against
   the token budget and the free blocks, swap-ins, admissions);
3. the gating policy sees the batch (`policies.Observation`) and returns K; every decoding sequence
   allowed to speculate drafts min(K, its budgeted slots); the drafter runs in every iteration the
   gate has not switched off, over the prefill chunks too when it keeps its own cache;
4. the iteration lasts `cost(mix)` for the actual mix (`mix.IterationMix`), plus the copy time of
   the blocks swapped over the host link (vLLM v0 copies before the step's forward pass);
5. the accepted drafts are sampled per sequence from its own stream (`streams`), tokens are
   emitted, at most each request's output length, and sequences that finished leave
   (`emission.emit`).

The drafter's own cache (a draft model, an EAGLE or MTP head): each sequence records how many of its
tokens the drafter has cached. Its first drafting pass of a cycle must first run over what it has not
seen — for a draft model the last accepted draft when all K were accepted (the drafts before it
were its own inputs), for EAGLE/MTP every accepted draft again (their features were the head's own
guesses; the target's now replace them), and after a gate kept the drafter off every token emitted
and every prompt chunk prefilled meanwhile. `IterationMix.catchup` carries those tokens per row;
`drafter_catchup = False` leaves them out (the drafter then runs only in iterations that draft, over
their prefill chunks, and is never behind).

A fleet (`fleet.FleetSpec`) runs N replicas in one simpy environment behind a router; in a
disaggregated layout prefill replicas hand each request, after its first token, to a decode replica
with its prompt's cache, after the KV transfer time.

All per-sequence work is vectorised in numpy over the running set; Python loops run only over
admissions, preemptions, swaps, publications of prefix blocks and finished requests.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import simpy

from ..errors import SpecError
from .config import EngineConfig
from .dispatch import Dispatcher
from .emission import emit
from .fleet import FleetSpec
from .mix import IterationMix
from .record import EngineRun, at_least, step_arrays
from .replica import Replica
from .requests import REJECT_REASONS, STATUS_DONE, STATUS_NAMES, STATUS_REJECTED, STATUS_UNFINISHED
from .streams import MAX_TABULATED_DRAWS, AcceptanceDraws, TabulatedDraws, request_keys, stream_uniforms
from .workloads import Workload


def serve(env, rep: Replica):
    """One replica's iterations, for as long as the run lasts."""
    swap_s_per_block = rep.cfg.swap_s_per_block
    dispatcher = rep.dispatcher
    feed = dispatcher.feed
    while True:
        now = env.now
        if feed.next_at <= now:
            dispatcher.flush(now)
        if not rep.running.n and not rep.waiting and not rep.swapped:  # idle until a request arrives
            rep.wake = env.event()
            yield rep.wake
            rep.wake = None
            continue
        batch, plan = rep.schedule()
        k, drafter_on = rep.choose_k(batch)
        mix = batch.mix(k, drafter_on)
        duration_s, catchup_s = rep.price(mix)
        swap_s = plan.swap_blocks * swap_s_per_block if plan.swap_blocks else 0.0
        yield env.timeout(duration_s + swap_s)
        accepted = rep.sample_accepted(batch, mix)
        emit(rep, batch, mix, k, accepted, plan, now, env.now, catchup_s, swap_s)


def run_engine(workload: Workload, config: EngineConfig, cost: Callable[[IterationMix], float], *, policy,
               acceptance=(), speculative: bool = True, seed_seq: np.random.SeedSequence | None = None,
               record_tokens: bool = False, until_s: float | None = None, tree_size: int = 0,
               acceptance_factor: Callable[[np.ndarray], np.ndarray] | None = None, fleet: FleetSpec | None = None,
               drafter_cache: str = "none", fast_path: bool = True, draft_frac: float = 1.0) -> EngineRun:
    """Run one workload through the engine (or a fleet of engines) in a fresh simpy.Environment.

    acceptance: per-position conditional acceptance rates (α_1, α_2, ...; one value = i.i.d. α; the
    last value repeats). seed_seq: the acceptance SeedSequence (per-request streams are derived
    from it). until_s: stop the clock there (requests still in flight are 'unfinished').
    tree_size: M > 0 verifies a draft tree of M nodes (depth K) per speculating sequence: M tokens
    of budget and M - 1 reserved slots each; acceptance is then the per-depth rate along the tree.
    acceptance_factor(ctx) -> (n,) multiplies each drafting sequence's rates by a function of its
    cached context (e.g. specsim.acceptance.AcceptanceModel.factor), clipped to [0, 1].
    fleet: replicas, layout and router (None: one replica). drafter_cache: "none" (the drafter keeps
    no cache of its own), "keep" (a draft model: it keeps what it cached while drafting) or "refeed"
    (EAGLE/MTP: the accepted drafts are run again with the target's features). fast_path: take the
    common iteration's shortcuts (tabulated draws, whole-column scheduling); False gives the same
    run through the general path only (tests compare the two). draft_frac: the share of a sequence's
    cycles in which the proposer finds something to draft (prompt lookup's matches); each replica draws
    which rows did, per iteration, from its own stream of seed_seq."""
    seed_seq = seed_seq if seed_seq is not None else np.random.SeedSequence(0)
    fleet = fleet if fleet is not None else FleetSpec()
    keys = request_keys(seed_seq, workload.n_requests)
    acceptance = np.asarray(acceptance, dtype=float).ravel()
    k_res = int(policy.k_reserved)
    spec = speculative and k_res > 0
    if spec and acceptance.size == 0:
        raise SpecError("serving engine: speculation needs an acceptance rate (alpha, tau or per-position rates)")
    draws = None
    if spec:
        kmax = max(k_res, 1)
        rates = np.concatenate([acceptance, np.repeat(acceptance[-1:], max(kmax - acceptance.size, 0))])[:kmax]
        table = None
        if (fast_path and np.all(acceptance == acceptance[0]) and acceptance_factor is None
                and int(workload.output_tokens.sum()) + workload.n_requests <= MAX_TABULATED_DRAWS):
            table = TabulatedDraws(keys, workload.output_tokens, float(acceptance[0]), k_res)
        draws = AcceptanceDraws(keys, rates, factor=acceptance_factor, table=table)
    env = simpy.Environment()
    dispatcher = Dispatcher(workload, env, fleet=fleet)
    for rid, role in enumerate(fleet.roles()):
        match_rng = None
        if draft_frac < 1.0:  # its own stream: the acceptance draws and arrivals stay as they were
            match_rng = np.random.default_rng(np.random.SeedSequence(seed_seq.entropy,
                                                                     spawn_key=tuple(seed_seq.spawn_key) + (0x6E67, rid)))
        dispatcher.add(Replica(dispatcher, rid, role, config, cost, policy=policy, draws=draws, speculative=speculative,
                               tree_size=tree_size, drafter_cache=drafter_cache, record_tokens=record_tokens,
                               fast=fast_path, draft_frac=draft_frac, match_rng=match_rng))
    for rep in dispatcher.replicas:
        env.process(serve(env, rep))
    dispatcher.start()
    env.run(until=until_s)
    end = float(env.now) if until_s is None else float(until_s)
    for rep in dispatcher.replicas:
        rep.flush_running()
    return _result(dispatcher, end, record_tokens)


def _result(dispatcher: Dispatcher, end_at_s: float, record_tokens: bool) -> EngineRun:
    reps = dispatcher.replicas
    r0 = reps[0]
    req = dispatcher.requests
    tok = None
    if record_tokens:
        if dispatcher.token_log:
            tok = tuple(np.concatenate(c) for c in zip(*dispatcher.token_log))
        else:
            tok = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
    acc_hist = sum(r.acc_hist for r in reps)
    draft_hist = sum(r.draft_hist for r in reps)
    return EngineRun(arrival_at_s=req.arrival_at_s, first_token_at_s=req.first_token_at_s, finish_at_s=req.finish_at_s,
                     prompt_tokens=req.prompt_tokens, output_tokens=req.output_tokens,
                     emitted_tokens=req.emitted_tokens, status=req.status, reject_reason=req.reject_reason,
                     n_preemptions=req.n_preemptions, n_draft_tokens=req.n_draft_tokens,
                     n_accepted_tokens=req.n_accepted_tokens, n_spec_steps=req.n_spec_steps,
                     steps=step_arrays([r.log for r in reps]),
                     accepted_per_position=at_least(acc_hist)[1: r0.k_res + 1],
                     drafted_per_position=at_least(draft_hist)[1: r0.k_res + 1],
                     n_blocks=r0.cfg.n_blocks, block_size_tokens=r0.cfg.block_size_tokens,
                     end_at_s=end_at_s, token_log=tok, replica=req.replica, prefill_replica=req.prefill_replica,
                     prefix_hit_tokens=req.prefix_hit_tokens, priority=req.priority, n_swaps=req.n_swaps,
                     roles=tuple(r.role for r in reps),
                     prefix_evicted_units=sum(r.ledger.prefix.n_evicted_units for r in reps
                                              if r.ledger.prefix is not None),
                     n_swap_fallbacks=sum(r.ledger.n_swap_fallbacks for r in reps))


__all__ = ["EngineConfig", "EngineRun", "IterationMix", "REJECT_REASONS", "STATUS_DONE", "STATUS_NAMES",
           "STATUS_REJECTED", "STATUS_UNFINISHED", "run_engine", "serve", "stream_uniforms"]
