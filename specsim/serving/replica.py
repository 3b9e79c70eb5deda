"""One replica's state between iterations, and what it does in each: schedule, let the gate choose K,
price the mix, sample what was accepted. Emission is `emission.emit`; the loop is `engine.serve`.

The replica owns its running set, queues and block ledger (the scheduler works on them), its gating
policy with the acceptance window the policy observes (the last `acceptance_window_steps`
iterations that drafted), its acceptance histograms and its step log.
"""
from __future__ import annotations

from collections import deque
from typing import Callable

import numpy as np

from ..errors import SpecError
from .blocks import BlockLedger
from .config import EngineConfig
from .dispatch import Dispatcher
from .mix import Batch, Drafting, IterationMix
from .policies import Never, Observation, StaticK
from .prefix_cache import PrefixCache
from .running import RunningSet
from .scheduler import Plan, Scheduler, WaitingQueue
from .streams import AcceptanceDraws

DRAFTER_CACHE = ("none", "keep", "refeed")
_INF = float("inf")
_CONSTANT_POLICIES = (StaticK, Never)  # need no Observation: K is k_reserved


class Replica:
    """One engine replica (see the module docstring). role: "both", "prefill" or "decode"."""

    def __init__(self, dispatcher: Dispatcher, rid: int, role: str, config: EngineConfig,
                 cost: Callable[[IterationMix], float], *, policy, draws: AcceptanceDraws | None, speculative: bool,
                 tree_size: int = 0, drafter_cache: str = "none", record_tokens: bool = False, fast: bool = True,
                 draft_frac: float = 1.0, match_rng: np.random.Generator | None = None):
        self.dispatcher = dispatcher
        self.requests = req = dispatcher.requests
        self.rid = rid
        self.role = role
        self.cfg = config
        self.cost = cost
        self.breakdown = getattr(cost, "breakdown", None)
        self.policy = policy
        self.constant_policy = isinstance(policy, _CONSTANT_POLICIES)
        self.speculative = speculative and policy.k_reserved > 0
        self.k_res = int(policy.k_reserved) if self.speculative else 0
        # a tree of M nodes of depth K: M query tokens per verify, M - 1 speculative slots reserved
        tree = int(tree_size) if self.speculative and tree_size else 0
        if tree and tree < self.k_res + 1:
            raise SpecError(f"serving engine: tree_size {tree} cannot hold a path of depth K = {self.k_res} "
                            f"(needs >= K + 1 nodes)")
        if drafter_cache not in DRAFTER_CACHE:
            raise SpecError(f"serving engine: drafter_cache = {drafter_cache!r}: expected one of {', '.join(DRAFTER_CACHE)}")
        self.dcache = drafter_cache if self.speculative else "none"
        self.drafting = Drafting(k_reserved=self.k_res, tree_size=tree, sticky=policy.sticky_off,
                                 catchup=self.dcache != "none" and config.drafter_catchup, max_seqs=config.max_num_seqs,
                                 draft_frac=draft_frac if self.speculative else 1.0, rng=match_rng)
        self.slots = self.drafting.slots
        self.draws = draws if self.speculative else None
        self.alpha_prior = float(draws.rates[0]) if (draws is not None and draws.rates.size) else None
        self.record_tokens = record_tokens
        self.token_log = dispatcher.token_log  # one log for the fleet, in emission order
        kmax = max(self.k_res, 1)
        self.acc_hist = np.zeros(kmax + 1, dtype=np.int64)    # cycles by accepted drafts 0..kmax
        self.hist_index = np.arange(kmax + 1, dtype=np.int64)
        self.draft_hist = np.zeros(kmax + 1, dtype=np.int64)  # cycles by drafts proposed 0..kmax
        prefix = PrefixCache() if (config.prefix_caching and req.chains is not None) else None
        unit_tokens = req.chains.hash_block_tokens if prefix is not None else 0
        if prefix is not None and unit_tokens % config.block_size_tokens:
            raise SpecError(f"[engine] prefix_caching: the workload's hash blocks of {unit_tokens} tokens are not "
                            f"a whole number of KV blocks of {config.block_size_tokens} tokens")
        self.ledger = BlockLedger(n_blocks=config.n_blocks, block_size_tokens=config.block_size_tokens,
                                  watermark_blocks=config.watermark_blocks, prefix=prefix, unit_tokens=unit_tokens,
                                  swap_space_blocks=config.swap_space_blocks)
        self.running = RunningSet()
        self.waiting = WaitingQueue(req, config.scheduling == "priority")
        self.swapped: deque = deque()
        tabulated = self.draws is not None and self.draws.table is not None
        self.tabulated = tabulated
        if self.draws is not None:
            start, counter = self.draws.start_of, self.draws.counters_of
        else:
            start, counter = (lambda r, c: c.astype(np.int64)), (lambda r, p: p)
        self.scheduler = Scheduler(config, slots=self.slots, requests=req, ledger=self.ledger, draw_start=start,
                                   draw_counter=counter, one_step_per_draw=tabulated, fast=fast)
        self.window = deque()  # (drafted, accepted, rejections) of the last acceptance_window_steps drafting iterations
        self.window_sum = [0, 0, 0]
        self.steps_since_draft = 0
        self.log: list[tuple] = []
        self.wake = None

    @property
    def idle(self) -> bool:
        return not self.running.n and not self.waiting and not self.swapped

    # -- arrival
    def submit(self, i: int, now: float) -> bool:
        """Queue request i, or refuse it (False) when it could never fit alone."""
        reason = self.scheduler.rejection_reason(i)
        if reason:
            self.requests.reject(i, reason, now)
            return False
        self.requests.replica[i] = self.rid
        self.waiting.push(i)
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()
        return True

    # -- one iteration
    def schedule(self) -> tuple[Batch, Plan]:
        plan = self.scheduler.plan(self.running, self.waiting, self.swapped)
        if plan.n_scheduled == 0:
            raise SpecError("serving engine: the waiting queue cannot be admitted into an empty engine "
                            "(a request larger than the cache slipped past the arrival check)")
        return Batch(self.drafting, self.running, plan, self.requests.may_speculate), plan

    def observation(self, batch: Batch, n_decoding: int) -> Observation:
        s = self.window_sum
        return Observation(n_running=self.running.n, n_decoding=n_decoding, n_waiting=len(self.waiting),
                           window_draft_tokens=s[0], window_accepted_tokens=s[1], window_rejections=s[2],
                           steps_since_draft=self.steps_since_draft, alpha_prior=self.alpha_prior,
                           step_time_s=lambda kk: float(self.cost(batch.mix(kk, kk > 0))))

    def choose_k(self, batch: Batch) -> tuple[int, bool]:
        """The policy's K for this iteration (0 when nobody may speculate) and whether the drafter
        runs (the gate has not switched it off)."""
        if not self.speculative:
            return 0, False
        pol = self.policy
        if batch.can_spec is None or (batch.n_pf and not batch.can_spec.any()):
            # nobody drafts; the drafter still runs over prefill chunks unless the gate is off
            if not self.drafting.catchup or not batch.n_pf:
                return 0, False
            if self.constant_policy:
                return 0, True
            return 0, int(pol(self.observation(batch, 0))) > 0
        if self.constant_policy:
            return self.k_res, True
        k = int(pol(self.observation(batch, int(np.count_nonzero(batch.can_spec)))))
        if k < 0 or k > self.k_res:
            raise SpecError(f"policy {getattr(pol, 'name', pol)!r} returned K = {k}; expected 0..{self.k_res} "
                            f"(its reserved slots)")
        if k == 0 and pol.sticky_off:
            self.requests.may_speculate[self.running.request] = False
        return k, k > 0

    def price(self, mix: IterationMix) -> tuple[float, float]:
        """(duration, of which the drafter's catch-up) of the iteration, from the cost model."""
        if self.breakdown is not None:
            duration, catchup_s = self.breakdown(mix)
        else:
            duration, catchup_s = float(self.cost(mix)), 0.0
        if not (0.0 < duration < _INF):
            raise SpecError(f"cost model returned {duration!r} s for {mix!r}; expected a positive duration")
        return duration, catchup_s

    def sample_accepted(self, batch: Batch, mix: IterationMix) -> np.ndarray | None:
        """Accepted drafts per drafting row (None when nobody drafted)."""
        if not batch.k_drafted:
            return None
        rows = batch.spec_ridx
        all_draft = batch.all_draft
        dks = mix.draft_k if all_draft else mix.draft_k[batch.spec_rows]
        full_k = all_draft and bool(mix.uniform_q) and int(dks[0]) == self.k_res
        if self.tabulated:
            return self.draws.lookup(self.running.draw, rows, dks, all_at_k_max=full_k)
        return self.draws.sample(self.running.draw, rows, dks, self.running.request[rows],
                                 batch.ctx if all_draft else batch.ctx[batch.spec_rows])

    # -- after the iteration
    def observe_drafts(self, n_drafted: int, n_accepted: int, n_rejections: int) -> None:
        """The acceptance window moves on by one drafting iteration (or counts one without drafts)."""
        if not n_drafted:
            self.steps_since_draft += 1
            return
        ws = self.window_sum
        self.window.append((n_drafted, n_accepted, n_rejections))
        ws[0] += n_drafted
        ws[1] += n_accepted
        ws[2] += n_rejections
        if len(self.window) > self.cfg.acceptance_window_steps:
            o = self.window.popleft()
            ws[0] -= o[0]
            ws[1] -= o[1]
            ws[2] -= o[2]
        self.steps_since_draft = 0

    def flush_running(self) -> None:
        """Write every running row's counters back (at the end of a run cut short by until_s)."""
        if self.running.n:
            self.running.write_back(np.arange(self.running.n), self.requests, self.scheduler.draw_counter,
                                    one_step_per_draw=self.tabulated)


__all__ = ["DRAFTER_CACHE", "Replica"]
