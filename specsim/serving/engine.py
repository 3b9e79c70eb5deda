"""A vLLM-like continuous-batching engine on simpy: one simpy event per iteration.

Per iteration (vLLM's scheduler, iteration-level batching):
1. Requests that have arrived join the waiting queue (FCFS). A request that could never fit alone
   (its prompt + output + reserved speculative slots need more blocks than the cache minus the
   watermark, or more tokens than max_model_len, or, without chunked prefill, prompt + output more
   than the token budget, since a recompute must prefill both in one iteration) is rejected on
   arrival, counted in the results with its reason, and never scheduled.
2. Running sequences are scheduled first, in admission order, against the token budget
   `max_num_batched_tokens`: a decode takes 1 + k_reserved tokens (its last token and the K slots
   it may draft; M for a tree of M nodes: draft tokens count against the budget), an unfinished prefill takes the
   rest of its prompt or what is left of the budget (chunked prefill). Each decode holds blocks
   for its cache plus 1 + k_reserved slots. When the free blocks cannot cover that, the
   lowest-priority running sequence (the last admitted) is preempted by recompute: its blocks are
   freed and it goes back to the front of the waiting queue to prefill its prompt and the tokens
   it has emitted so far (tokens are never emitted twice).
3. Waiting requests are admitted FCFS while max_num_seqs, the token budget and the free blocks
   allow (blocks for the whole (re)prefill, keeping `watermark_frac` of the cache free); the first
   that does not fit blocks the queue (vLLM's head-of-line order). Without chunked prefill an
   iteration that admits prefills runs only prefills (vLLM v0).
4. The gating policy sees the batch (`policies.Observation`) and returns K; every decoding
   sequence allowed to speculate drafts min(K, its budgeted slots).
5. The iteration's duration is `cost(mix)` for the actual mix (see `IterationMix`); after it the
   accepted drafts are sampled per sequence, tokens are emitted (at most each request's output
   length) and finished requests free their blocks.

All per-sequence work is vectorised in numpy over the running set; Python loops run only over
admissions, preemptions and finished requests. Accepted counts come from a counter-based generator
(SplitMix64 over request key and draw counter), so each request has its own reproducible stream,
independent of which other requests share its batches.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass
from typing import Callable

import numpy as np
import simpy

from ..errors import SpecError
from ..speculation.acceptance import accepted_from_uniforms
from .kv_cache import blocks_for
from .policies import Never, Observation, StaticK
from .workloads import Workload

STATUS_DONE, STATUS_REJECTED, STATUS_UNFINISHED = 0, 1, 2
STATUS_NAMES = ("done", "rejected", "unfinished")
REJECT_REASONS = ("", "larger than the whole KV cache", "longer than max_model_len",
                  "prompt + output longer than the token budget without chunked prefill")


class IterationMix:
    """One iteration's work, what a cost callable is given. Arrays have shape (n_scheduled,).

    q_lens: target tokens per sequence (prefill chunk, or 1 + K for a decode: last token + drafts);
    ctx_lens: tokens already in the sequence's cache; logit_lens: positions needing logits (a
    prefill chunk that does not end its prompt needs none); draft_k: draft depth K per sequence
    (0 = not speculating; a chain drafts K tokens); is_prefill: bool. tree_size: M when the drafts
    form a tree of M nodes (root included) and depth K, verified as q_len = M; 0 for chains.
    """

    __slots__ = ("q_lens", "ctx_lens", "logit_lens", "draft_k", "is_prefill", "tree_size")

    def __init__(self, q_lens, ctx_lens, logit_lens, draft_k, is_prefill, tree_size: int = 0):
        self.q_lens = q_lens
        self.ctx_lens = ctx_lens
        self.logit_lens = logit_lens
        self.draft_k = draft_k
        self.is_prefill = is_prefill
        self.tree_size = tree_size

    @property
    def n_seqs(self) -> int:
        return int(self.q_lens.size)

    def __repr__(self) -> str:
        return (f"IterationMix(n_seqs={self.n_seqs}, tokens={int(self.q_lens.sum())}, "
                f"prefills={int(self.is_prefill.sum())}, draft_tokens={int(self.draft_k.sum())})")


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """Scheduler limits (vLLM names). n_blocks: KV blocks available (see kv_cache.kv_capacity)."""

    n_blocks: int
    block_size_tokens: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    watermark_frac: float = 0.01
    max_model_len: int = 0
    acceptance_window_steps: int = 64

    def __post_init__(self) -> None:
        for name in ("n_blocks", "block_size_tokens", "max_num_seqs", "max_num_batched_tokens", "acceptance_window_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise SpecError(f"[engine]: field '{name}' = {v!r}: expected an integer >= 1")
        if isinstance(self.max_model_len, bool) or not isinstance(self.max_model_len, (int, np.integer)) or self.max_model_len < 0:
            raise SpecError(f"[engine]: field 'max_model_len' = {self.max_model_len!r}: expected an integer >= 0 (0: no limit)")
        if not (0.0 <= self.watermark_frac < 1.0):
            raise SpecError(f"[engine]: field 'watermark_frac' = {self.watermark_frac!r}: expected a fraction in [0, 1)")

    @property
    def watermark_blocks(self) -> int:
        return int(self.watermark_frac * self.n_blocks)


# ---- per-request random streams -------------------------------------------------------------------

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser (Steele, Lea & Flood 2014), elementwise on uint64 arrays."""
    z = x + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def stream_uniforms(keys: np.ndarray, counters: np.ndarray, width: int) -> np.ndarray:
    """Uniforms in [0, 1), shape (n, width): draw counters[i] + j of request i's SplitMix64 stream,
    whose state after c draws is keys[i] + c·γ (γ the golden-ratio increment), mixed once."""
    idx = counters[:, None] + np.arange(width, dtype=np.uint64)[None, :]
    bits = _splitmix64(keys[:, None] + idx * _GOLDEN)
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def request_keys(seed_seq: np.random.SeedSequence, n: int) -> np.ndarray:
    """One 64-bit stream key per request, from the acceptance SeedSequence."""
    base = seed_seq.generate_state(1, dtype=np.uint64)
    return _splitmix64(base ^ np.arange(n, dtype=np.uint64))


# ---- arrivals -------------------------------------------------------------------------------------

class _OpenFeed:
    def __init__(self, arrival_at_s: np.ndarray):
        self.t = arrival_at_s
        self.i = 0

    def pop_until(self, now: float) -> range:
        j = int(np.searchsorted(self.t, now, side="right"))
        out = range(self.i, max(j, self.i))
        self.i = max(j, self.i)
        return out

    def next_time(self) -> float | None:
        return float(self.t[self.i]) if self.i < self.t.size else None

    def on_done(self, now: float) -> None:
        pass


class _ClosedFeed:
    """n_users users; each completion (or rejection) releases the next request after think time."""

    def __init__(self, n_requests: int, n_users: int, think_time_s: float):
        self.n = n_requests
        self.think = think_time_s
        self.heap = [(0.0, i) for i in range(min(n_users, n_requests))]
        self.next_id = len(self.heap)
        self.arrival_at_s = np.full(n_requests, np.nan)

    def pop_until(self, now: float) -> list[int]:
        out = []
        while self.heap and self.heap[0][0] <= now:
            t, i = heapq.heappop(self.heap)
            self.arrival_at_s[i] = t
            out.append(i)
        return out

    def next_time(self) -> float | None:
        return self.heap[0][0] if self.heap else None

    def on_done(self, now: float) -> None:
        if self.next_id < self.n:
            heapq.heappush(self.heap, (now + self.think, self.next_id))
            self.next_id += 1


# ---- recorded output ------------------------------------------------------------------------------

STEP_COLUMNS = (
    ("start_at_s", np.float64), ("duration_s", np.float64), ("n_running", np.int64), ("n_prefill", np.int64),
    ("n_decode", np.int64), ("n_spec", np.int64), ("k", np.int64), ("n_batched_tokens", np.int64),
    ("n_draft_tokens", np.int64), ("n_accepted_tokens", np.int64), ("n_emitted_tokens", np.int64),
    ("n_wasted_slots", np.int64), ("kv_used_blocks", np.int64), ("n_waiting", np.int64), ("n_preempted", np.int64),
    ("n_prefill_done", np.int64),
)


class _StepLog:
    def __init__(self, capacity: int = 4096):
        self.n = 0
        self.cols = {name: np.zeros(capacity, dtype=dt) for name, dt in STEP_COLUMNS}

    def append(self, row: tuple) -> None:
        if self.n == len(self.cols["start_at_s"]):
            for name in self.cols:
                self.cols[name] = np.concatenate([self.cols[name], np.zeros_like(self.cols[name])])
        n = self.n
        for (name, _), v in zip(STEP_COLUMNS, row):
            self.cols[name][n] = v
        self.n += 1

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: arr[: self.n].copy() for name, arr in self.cols.items()}


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineRun:
    """Raw arrays from one run; metrics.py turns them into DataFrames and a summary."""

    arrival_at_s: np.ndarray       # (n_requests,)
    first_token_at_s: np.ndarray   # (n_requests,) NaN if never
    finish_at_s: np.ndarray        # (n_requests,)
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    emitted_tokens: np.ndarray     # (n_requests,) tokens actually emitted
    status: np.ndarray             # (n_requests,) STATUS_*
    reject_reason: np.ndarray      # (n_requests,) index into REJECT_REASONS
    n_preemptions: np.ndarray      # (n_requests,)
    n_draft_tokens: np.ndarray     # (n_requests,)
    n_accepted_tokens: np.ndarray  # (n_requests,)
    n_spec_steps: np.ndarray       # (n_requests,)
    steps: dict                    # STEP_COLUMNS -> (n_steps,)
    accepted_per_position: np.ndarray  # (k_max,) accepted drafts at position j
    drafted_per_position: np.ndarray   # (k_max,) drafts proposed at position j
    n_blocks: int
    block_size_tokens: int
    end_at_s: float
    token_log: tuple | None        # (request, first_token_index, count, at_s) arrays when recorded


_CONSTANT_POLICIES = (StaticK, Never)  # need no Observation: K is k_reserved

# ---- the engine -----------------------------------------------------------------------------------

class _Engine:
    """State of one run; `process` is the simpy process. Not reused across runs."""

    def __init__(self, workload: Workload, config: EngineConfig, cost: Callable[[IterationMix], float], *,
                 policy, acceptance: np.ndarray, speculative: bool, keys: np.ndarray, record_tokens: bool,
                 tree_size: int = 0, acceptance_factor: Callable[[np.ndarray], np.ndarray] | None = None):
        self.cfg = config
        self.cost = cost
        self.policy = policy
        self.speculative = speculative and policy.k_reserved > 0
        self.k_res = int(policy.k_reserved) if self.speculative else 0
        # a tree of M nodes of depth K: M query tokens per verify, M - 1 speculative slots reserved
        self.tree = int(tree_size) if self.speculative and tree_size else 0
        if self.tree and self.tree < self.k_res + 1:
            raise SpecError(f"serving engine: tree_size {self.tree} cannot hold a path of depth K = {self.k_res} "
                            f"(needs >= K + 1 nodes)")
        self.slots = self.tree if self.tree else 1 + self.k_res  # tokens a decode takes per iteration
        kmax = max(self.k_res, 1)
        acc = np.asarray(acceptance, dtype=np.float64).ravel()
        self.acc = np.concatenate([acc, np.repeat(acc[-1:], max(kmax - acc.size, 0))])[:kmax] if acc.size else np.zeros(kmax)
        self.alpha_prior = float(acc[0]) if acc.size else None
        iid = acc.size > 0 and bool(np.all(self.acc == self.acc[0]))
        self.iid_alpha = float(self.acc[0]) if iid else None
        self.acc_factor = acceptance_factor  # rates × factor(context) per sequence (AcceptanceModel.factor)
        self.keys = keys
        n = workload.n_requests
        self.n = n
        self.prompt = workload.prompt_tokens
        self.out = workload.output_tokens
        if workload.is_closed_loop:
            self.feed = _ClosedFeed(n, workload.n_users, workload.think_time_s)
            self.arrival = self.feed.arrival_at_s
        else:
            self.feed = _OpenFeed(workload.arrival_at_s)
            self.arrival = workload.arrival_at_s.copy()
        self.first = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.emitted = np.zeros(n, dtype=np.int64)
        self.status = np.full(n, STATUS_UNFINISHED, dtype=np.int8)
        self.reason = np.zeros(n, dtype=np.int8)
        self.n_preempt = np.zeros(n, dtype=np.int64)
        self.req_draft = np.zeros(n, dtype=np.int64)
        self.req_acc = np.zeros(n, dtype=np.int64)
        self.req_spec_steps = np.zeros(n, dtype=np.int64)
        self.counter = np.zeros(n, dtype=np.uint64)
        self.spec_ok = np.ones(n, dtype=bool)
        self.acc_hist = np.zeros(kmax + 1, dtype=np.int64)    # cycles by accepted drafts 0..kmax
        self.draft_hist = np.zeros(kmax + 1, dtype=np.int64)  # cycles by drafts proposed 0..kmax
        self.waiting: deque[int] = deque()
        # running set, admission order (index 0 = highest priority)
        self.r_req = np.zeros(0, dtype=np.int64)
        self.r_plen = np.zeros(0, dtype=np.int64)   # tokens to prefill (prompt + emitted at admission)
        self.r_done = np.zeros(0, dtype=np.int64)   # tokens prefilled so far
        self.r_ctx = np.zeros(0, dtype=np.int64)    # tokens in the cache
        self.r_alloc = np.zeros(0, dtype=np.int64)  # blocks held
        self.used_blocks = 0
        self.log = _StepLog()
        w = config.acceptance_window_steps
        self.win = np.zeros((w, 3), dtype=np.int64)  # drafted, accepted, rejections per step
        self.win_i = 0
        self.win_sum = np.zeros(3, dtype=np.int64)
        self.steps_since_draft = 0
        self.record_tokens = record_tokens
        self.tok_log: list[tuple] = []
        # one-request feasibility limit, in blocks
        self.max_blocks_alone = config.n_blocks - config.watermark_blocks

    # -- arrivals and rejection
    def _arrive(self, now: float) -> None:
        cfg = self.cfg
        for i in self.feed.pop_until(now):
            total = int(self.prompt[i] + self.out[i])
            reason = 0
            if int(blocks_for(total + self.slots - 1, cfg.block_size_tokens)) > self.max_blocks_alone:
                reason = 1
            elif cfg.max_model_len and total > cfg.max_model_len:
                reason = 2
            elif not cfg.chunked_prefill and total > cfg.max_num_batched_tokens:
                reason = 3
            if reason:
                self.status[i] = STATUS_REJECTED
                self.reason[i] = reason
                self.finish[i] = now
                self.feed.on_done(now)
            else:
                self.waiting.append(i)

    def _remove(self, keep: np.ndarray) -> None:
        self.r_req, self.r_plen, self.r_done = self.r_req[keep], self.r_plen[keep], self.r_done[keep]
        self.r_ctx, self.r_alloc = self.r_ctx[keep], self.r_alloc[keep]

    def _preempt_last(self) -> None:
        i = int(self.r_req[-1])
        self.used_blocks -= int(self.r_alloc[-1])
        keep = np.ones(self.r_req.size, dtype=bool)
        keep[-1] = False
        self._remove(keep)
        self.n_preempt[i] += 1
        self.waiting.appendleft(i)

    # -- scheduling
    def _schedule_running(self, budget: int):
        """Token allotments for the running set (admission order), preempting from the tail while
        the blocks run short. Returns (allot (n_running,), new block counts, n_preempted);
        allot is None when nothing is left running."""
        bs = self.cfg.block_size_tokens
        n_preempted = 0
        slots = self.slots
        while self.r_req.size:
            decode = self.r_done >= self.r_plen
            if decode.all():  # the common case: no prefill in progress
                if self.r_req.size * slots <= budget:
                    allot = np.full(self.r_req.size, slots, dtype=np.int64)
                else:
                    need = np.full(self.r_req.size, slots, dtype=np.int64)
                    allot = np.clip(budget - (np.cumsum(need) - need), 0, need)
                hold = self.r_ctx + allot
            else:
                need = np.where(decode, slots, self.r_plen - self.r_done)
                allot = np.clip(budget - (np.cumsum(need) - need), 0, need)
                hold = np.where(decode, self.r_ctx + allot, self.r_plen)
            grow = -(-hold // bs) - self.r_alloc
            np.maximum(grow, 0, out=grow)
            extra = int(np.add.reduce(grow))
            if extra <= self.cfg.n_blocks - self.used_blocks:
                return allot, self.r_alloc + grow, extra, n_preempted
            self._preempt_last()
            n_preempted += 1
        return None, None, 0, n_preempted

    def _admit(self, budget_left: int) -> int:
        """Admit waiting requests FCFS; returns tokens of budget used."""
        cfg = self.cfg
        bs = cfg.block_size_tokens
        used = 0
        new_req, new_plen, new_alloc = [], [], []
        n_run = self.r_req.size
        while self.waiting and n_run < cfg.max_num_seqs and budget_left - used > 0:
            i = self.waiting[0]
            plen = int(self.prompt[i] + self.emitted[i])
            if not cfg.chunked_prefill and plen > budget_left - used:
                break
            blocks = int(blocks_for(plen, bs))
            if self.cfg.n_blocks - self.used_blocks - blocks < cfg.watermark_blocks:
                break
            self.waiting.popleft()
            self.used_blocks += blocks
            used += min(plen, budget_left - used)
            new_req.append(i)
            new_plen.append(plen)
            new_alloc.append(blocks)
            n_run += 1
        if new_req:
            k = len(new_req)
            self.r_req = np.concatenate([self.r_req, np.asarray(new_req, dtype=np.int64)])
            self.r_plen = np.concatenate([self.r_plen, np.asarray(new_plen, dtype=np.int64)])
            self.r_done = np.concatenate([self.r_done, np.zeros(k, dtype=np.int64)])
            self.r_ctx = np.concatenate([self.r_ctx, np.zeros(k, dtype=np.int64)])
            self.r_alloc = np.concatenate([self.r_alloc, np.asarray(new_alloc, dtype=np.int64)])
        return len(new_req)

    def _plan(self):
        """Choose this iteration's batch. Returns (allot (n_running,), n_preempted)."""
        cfg = self.cfg
        budget = cfg.max_num_batched_tokens
        n_before = self.r_req.size
        if not cfg.chunked_prefill and self.waiting:
            # vLLM v0 without chunked prefill: waiting prefills first, in a prefill-only batch
            n_adm = self._admit(budget)
            if n_adm:
                allot = np.zeros(self.r_req.size, dtype=np.int64)
                allot[n_before:] = self.r_plen[n_before:]
                return allot, 0
        allot, new_alloc, extra, n_pre = self._schedule_running(budget)
        if allot is not None:
            self.used_blocks += extra
            self.r_alloc = new_alloc
            used = int(np.add.reduce(allot))
        else:
            allot = np.zeros(0, dtype=np.int64)
            used = 0
        n0 = self.r_req.size
        if cfg.chunked_prefill or not n0:
            if self._admit(budget - used):
                room = budget - used
                plen_new = self.r_plen[n0:]
                new_allot = np.minimum(plen_new, np.maximum(room - (np.cumsum(plen_new) - plen_new), 0))
                allot = np.concatenate([allot, new_allot])
        return allot, n_pre

    # -- one iteration, step by step: plan the batch, let the policy choose K, price it, run it,
    #    sample what was accepted and emit
    def process(self, env: simpy.Environment):
        while True:
            now = env.now
            self._arrive(now)
            if not self.r_req.size and not self.waiting:
                nxt = self.feed.next_time()
                if nxt is None:
                    return
                yield env.timeout(max(nxt - now, 0.0))
                continue
            batch = self._plan_iteration()
            if batch is None:
                if not self.r_req.size and self.waiting:
                    raise SpecError("serving engine: the waiting queue cannot be admitted into an empty engine "
                                    "(a request larger than the cache slipped past the arrival check)")
                nxt = self.feed.next_time()
                yield env.timeout(max((nxt if nxt is not None else now) - now, 1e-9))
                continue
            k = self._choose_k(batch)
            mix = batch.mix(k)
            duration = float(self.cost(mix))
            if not (duration > 0.0 and math.isfinite(duration)):
                raise SpecError(f"cost model returned {duration!r} s for {mix!r}; expected a positive duration")
            yield env.timeout(duration)
            accepted = self._sample_accepted(batch, mix)
            self._emit(batch, mix, k, accepted, start_at_s=now, now=env.now)

    def _plan_iteration(self) -> "_Batch | None":
        """Schedule the running set and admissions (see the module docstring), as a _Batch."""
        allot, n_pre = self._plan()
        n_sched = int(np.count_nonzero(allot))
        if n_sched == 0:
            return None
        return _Batch(self, allot, n_pre)

    def _choose_k(self, batch: "_Batch") -> int:
        """The policy's K for this iteration (0 when nobody may speculate)."""
        if batch.can_spec is None or not batch.can_spec.any():
            return 0
        pol = self.policy
        if isinstance(pol, _CONSTANT_POLICIES):
            return pol.k_reserved
        s = self.win_sum
        obs = Observation(n_running=int(self.r_req.size), n_decoding=int(np.count_nonzero(batch.can_spec)),
                          n_waiting=len(self.waiting), window_draft_tokens=int(s[0]), window_accepted_tokens=int(s[1]),
                          window_rejections=int(s[2]), steps_since_draft=self.steps_since_draft,
                          alpha_prior=self.alpha_prior, step_time_s=lambda kk: float(self.cost(batch.mix(kk))))
        k = int(pol(obs))
        if k < 0 or k > self.k_res:
            raise SpecError(f"policy {getattr(pol, 'name', pol)!r} returned K = {k}; expected 0..{self.k_res} "
                            f"(its reserved slots)")
        if k == 0 and pol.sticky_off:
            self.spec_ok[self.r_req] = False
        return k

    def _sample_accepted(self, batch: "_Batch", mix: IterationMix) -> np.ndarray | None:
        """Accepted drafts per speculating row, from each request's own stream of uniforms
        (speculation.acceptance.accepted_from_uniforms): one uniform per cycle for an i.i.d. rate, one
        per drafted position for per-position rates; rates × factor(context) when acceptance moves
        with context. None when nobody drafted."""
        rows = np.flatnonzero(mix.draft_k)
        if rows.size == 0:
            return None
        r = batch.req[rows]
        dks = mix.draft_k[rows]
        kmax = int(dks.max())
        f = None if self.acc_factor is None else np.asarray(self.acc_factor(batch.ctx[rows]), dtype=np.float64)
        if self.iid_alpha is not None:
            rates = np.full(rows.size, self.iid_alpha) if f is None else np.clip(self.iid_alpha * f, 0.0, 1.0)
            u = stream_uniforms(self.keys[r], self.counter[r], 1)[:, 0]
            self.counter[r] += np.uint64(1)
        else:
            base = self.acc[None, :kmax]
            rates = np.broadcast_to(base, (rows.size, kmax)) if f is None else np.clip(base * f[:, None], 0.0, 1.0)
            u = stream_uniforms(self.keys[r], self.counter[r], kmax)
            self.counter[r] += dks.astype(np.uint64)
        return accepted_from_uniforms(u, rates, dks)

    def _emit(self, batch: "_Batch", mix: IterationMix, k: int, accepted, *, start_at_s: float, now: float) -> None:
        """Tokens out, state forward: a prefill that ends its prompt emits one token, a plain decode
        one, a speculating decode its accepted drafts plus the target's own token; never past the
        request's output length. Then the counters, the acceptance window, the step log and the
        finished requests."""
        add, count = np.add.reduce, np.count_nonzero
        req, a, ctx, is_pf, pf_end, idx = batch.req, batch.a, batch.ctx, batch.is_pf, batch.pf_end, batch.idx
        n_pf = batch.n_pf
        emit = np.where(is_pf, pf_end, 1).astype(np.int64) if n_pf else np.ones(a.size, dtype=np.int64)
        n_drafted = acc_tok = rejections = n_spec = 0
        if accepted is not None:
            rows = np.flatnonzero(mix.draft_k)
            r, dks = req[rows], mix.draft_k[rows]
            n_spec = rows.size
            n_drafted = int(add(dks)) if not self.tree else n_spec * (self.tree - 1)
            emit[rows] += accepted
            self.acc_hist += np.bincount(accepted, minlength=self.acc_hist.size)
            self.draft_hist += np.bincount(dks, minlength=self.draft_hist.size)
            acc_tok = int(add(accepted))
            rejections = int(count(accepted < dks))
            self.req_draft[r] += dks if not self.tree else self.tree - 1
            self.req_acc[r] += accepted
            self.req_spec_steps[r] += 1
        emitted_before = self.emitted[req]
        np.minimum(emit, self.out[req] - emitted_before, out=emit)
        if n_pf:
            self.r_done[idx] = batch.done_before + np.where(is_pf, a, 0)
            self.r_ctx[idx] = ctx + np.where(is_pf, a, emit)
        else:
            self.r_ctx[idx] = ctx + emit
        fresh = emitted_before == 0
        if fresh.any():
            fresh &= emit > 0
            self.first[req[fresh]] = now
        if self.record_tokens:
            got = emit > 0
            rr = req[got]
            self.tok_log.append((rr.copy(), emitted_before[got].copy(), emit[got].copy(), np.full(rr.size, now)))
        emitted_after = emitted_before + emit
        self.emitted[req] = emitted_after
        finished = emitted_after >= self.out[req]
        # acceptance window: the last `acceptance_window_steps` iterations that drafted
        if n_drafted:
            w = self.win[self.win_i]
            self.win_sum -= w
            w[0], w[1], w[2] = n_drafted, acc_tok, rejections
            self.win_sum += w
            self.win_i = (self.win_i + 1) % self.win.shape[0]
        self.steps_since_draft = 0 if n_drafted else self.steps_since_draft + 1
        self.log.append((start_at_s, now - start_at_s, self.r_req.size, n_pf, batch.n_dec, n_spec, k,
                         int(add(mix.q_lens)), n_drafted, acc_tok, int(add(emit)), n_drafted - acc_tok,
                         self.used_blocks, len(self.waiting), batch.n_preempted, int(count(pf_end)) if n_pf else 0))
        if finished.any():
            fin_rows = np.flatnonzero(finished) if batch.every else idx[finished]
            fr = self.r_req[fin_rows]
            self.finish[fr] = now
            self.status[fr] = STATUS_DONE
            self.used_blocks -= int(add(self.r_alloc[fin_rows]))
            keep = np.ones(self.r_req.size, dtype=bool)
            keep[fin_rows] = False
            self._remove(keep)
            for _ in range(fr.size):
                self.feed.on_done(now)

    def result(self, end_at_s: float) -> EngineRun:
        tok = None
        if self.record_tokens:
            if self.tok_log:
                tok = tuple(np.concatenate(c) for c in zip(*self.tok_log))
            else:
                tok = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
        return EngineRun(arrival_at_s=self.arrival, first_token_at_s=self.first, finish_at_s=self.finish,
                         prompt_tokens=self.prompt, output_tokens=self.out, emitted_tokens=self.emitted,
                         status=self.status, reject_reason=self.reason, n_preemptions=self.n_preempt,
                         n_draft_tokens=self.req_draft, n_accepted_tokens=self.req_acc,
                         n_spec_steps=self.req_spec_steps, steps=self.log.arrays(),
                         accepted_per_position=_at_least(self.acc_hist)[1: self.k_res + 1],
                         drafted_per_position=_at_least(self.draft_hist)[1: self.k_res + 1],
                         n_blocks=self.cfg.n_blocks, block_size_tokens=self.cfg.block_size_tokens,
                         end_at_s=end_at_s, token_log=tok)


class _Batch:
    """One iteration's scheduled rows (a view of the running set) and the mix it makes for a K."""

    def __init__(self, eng: _Engine, allot: np.ndarray, n_preempted: int):
        n_sched = int(np.count_nonzero(allot))
        self.every = n_sched == allot.size
        self.idx = slice(None) if self.every else np.flatnonzero(allot)
        idx = self.idx
        self.req = eng.r_req if self.every else eng.r_req[idx]
        self.a = allot if self.every else allot[idx]
        self.done_before = eng.r_done if self.every else eng.r_done[idx]
        plen = eng.r_plen if self.every else eng.r_plen[idx]
        self.ctx = eng.r_ctx if self.every else eng.r_ctx[idx]
        self.is_pf = self.done_before < plen
        self.n_pf = int(np.count_nonzero(self.is_pf))
        self.n_dec = self.a.size - self.n_pf
        self.pf_end = self.is_pf & (self.done_before + self.a >= plen)
        self.n_preempted = n_preempted
        self.tree = eng.tree
        if eng.k_res and self.n_dec:
            self.can_spec = ~self.is_pf & eng.spec_ok[self.req]
            # a decode's budgeted draft depth (a prefill's is masked by can_spec); a tree is verified
            # whole or not at all
            self.k_cap = self.a - 1 if not self.tree else np.where(self.a >= self.tree, eng.k_res, 0)
        else:
            self.can_spec = None

    def mix(self, k: int) -> IterationMix:
        a, is_pf = self.a, self.is_pf
        if self.can_spec is None or k == 0:
            dk = np.zeros(a.size, dtype=np.int64)
            q = np.where(is_pf, a, 1) if self.n_pf else np.ones(a.size, dtype=np.int64)
        else:
            dk = np.where(self.can_spec, np.minimum(k, self.k_cap), 0)
            width = np.where(dk > 0, self.tree, 1) if self.tree else 1 + dk
            q = np.where(is_pf, a, width) if self.n_pf else width
        logits = np.where(is_pf, self.pf_end, q) if self.n_pf else q
        return IterationMix(q, self.ctx, logits, dk, is_pf, self.tree)


def _at_least(hist: np.ndarray) -> np.ndarray:
    """out[j] = number of cycles with a value >= j (so out[j + 1] counts position j + 1 reached)."""
    return np.cumsum(hist[::-1])[::-1].copy()


def run_engine(workload: Workload, config: EngineConfig, cost: Callable[[IterationMix], float], *, policy,
               acceptance=(), speculative: bool = True, seed_seq: np.random.SeedSequence | None = None,
               record_tokens: bool = False, until_s: float | None = None, tree_size: int = 0,
               acceptance_factor: Callable[[np.ndarray], np.ndarray] | None = None) -> EngineRun:
    """Run one workload through the engine in a fresh simpy.Environment.

    acceptance: per-position conditional acceptance rates (α_1, α_2, ...; one value = i.i.d. α; the
    last value repeats). seed_seq: the acceptance SeedSequence (per-request streams are derived
    from it). until_s: stop the clock there (requests still in flight are 'unfinished').
    tree_size: M > 0 verifies a draft tree of M nodes (depth K) per speculating sequence: M tokens
    of budget and M - 1 reserved slots each; acceptance is then the per-depth rate along the tree.
    acceptance_factor(ctx) -> (n,) multiplies each drafting sequence's rates by a function of its
    cached context (e.g. specsim.acceptance.AcceptanceModel.factor), clipped to [0, 1]."""
    seed_seq = seed_seq if seed_seq is not None else np.random.SeedSequence(0)
    keys = request_keys(seed_seq, workload.n_requests)
    acceptance = np.asarray(acceptance, dtype=float)
    if speculative and policy.k_reserved > 0 and acceptance.size == 0:
        raise SpecError("serving engine: speculation needs an acceptance rate (alpha, tau or per-position rates)")
    eng = _Engine(workload, config, cost, policy=policy, acceptance=acceptance,
                  speculative=speculative, keys=keys, record_tokens=record_tokens, tree_size=tree_size,
                  acceptance_factor=acceptance_factor)
    env = simpy.Environment()
    proc = env.process(eng.process(env))
    env.run(until=proc if until_s is None else until_s)
    return eng.result(float(env.now))
