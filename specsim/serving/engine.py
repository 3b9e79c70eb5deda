"""A vLLM-like continuous-batching engine on simpy: one simpy event per iteration per replica.

Per iteration of one replica (vLLM v0's scheduler, iteration-level batching):
1. Requests routed to the replica join its waiting queue (FCFS, or by (priority, arrival) with
   `scheduling = "priority"`). A request that could never fit alone (its prompt + output + reserved
   speculative slots need more blocks than the cache minus the watermark, or more tokens than
   max_model_len, or, without chunked prefill, prompt + output more than the token budget, since a
   recompute must prefill both in one iteration) is rejected on arrival, counted in the results with
   its reason, and never scheduled.
2. With priority scheduling, when the best waiting request cannot be admitted and a running one has
   a lower priority, running requests are preempted from the lowest priority up until it can (vLLM
   v0 `_schedule_priority_preemption`).
3. Running sequences are scheduled first, in their order (admission order; (priority, arrival) with
   priorities), against the token budget `max_num_batched_tokens`: a decode takes 1 + k_reserved
   tokens (its last token and the K slots it may draft; M for a tree of M nodes), an unfinished
   prefill the rest of its prompt or what is left of the budget (chunked prefill). Each decode holds
   blocks for its cache plus 1 + k_reserved slots. When the free blocks cannot cover that, the last
   running sequence is preempted: by recompute (its blocks are freed and it goes back to the front
   of the waiting queue to prefill its prompt and the tokens it has emitted so far; tokens are never
   emitted twice) or, with `preemption_mode = "swap"`, by swapping its blocks to host memory (the
   swapped queue; when the host swap space is full it falls back to recompute, where vLLM aborts).
4. If nothing was preempted, swapped sequences come back in order while blocks (keeping the
   watermark), the budget and max_num_seqs allow; swapping a block out or in adds its copy time over
   the host link to the iteration (vLLM v0 copies before the step's forward pass).
5. Waiting requests are admitted in order while max_num_seqs, the token budget and the free blocks
   allow (blocks for the whole (re)prefill, keeping `watermark_frac` of the cache free); the first
   that does not fit blocks the queue (vLLM's head-of-line order). Without chunked prefill an
   iteration that admits prefills runs only prefills (vLLM v0). With prefix caching a request's
   prefill starts after the longest cached prefix of its block chain (`prefix_cache`).
6. The gating policy sees the batch (`policies.Observation`) and returns K; every decoding sequence
   allowed to speculate drafts min(K, its budgeted slots). The drafter runs in every iteration the
   gate has not switched off (vLLM v0 skips the proposer only then), over the prefill chunks too when
   it keeps its own cache.
7. The iteration's duration is `cost(mix)` for the actual mix (see `IterationMix`); after it the
   accepted drafts are sampled per sequence, tokens are emitted (at most each request's output
   length) and finished requests free their blocks.

The drafter's own cache (a draft model, an EAGLE or MTP head): each sequence records how many of its
tokens the drafter has cached. Its first drafting pass of a cycle must first run over what it has not
seen — for a draft model the last accepted draft when all K were accepted (the drafts before it
were its own inputs), for EAGLE/MTP every accepted draft again (their features were the head's own
guesses; the target's now replace them), and after a gate kept the drafter off every token emitted
and every prompt chunk prefilled meanwhile. `IterationMix.catchup` carries those tokens per row;
`drafter_catchup = False` leaves them out (the drafter then runs only in iterations that draft, over
their prefill chunks, and is never behind).

A fleet (`fleet.FleetSpec`) runs N such replicas in one simpy environment behind a router
(`router.Router`); in a disaggregated layout prefill replicas hand each request, after its first
token, to a decode replica with its prompt's cache, after the KV transfer time.

All per-sequence work is vectorised in numpy over the running set; Python loops run only over
admissions, preemptions, swaps, publications of prefix blocks and finished requests. Accepted counts
come from a counter-based generator (SplitMix64 over request key and draw counter), so each request
has its own reproducible stream, independent of which other requests share its batches or replica.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import simpy

from ..errors import SpecError
from ..speculation.acceptance import accepted_from_uniforms
from .config import EngineConfig
from .fleet import FleetSpec
from .kv_cache import blocks_for
from .mix import IterationMix
from .policies import Never, Observation, StaticK
from .prefix_cache import PrefixCache, hit_units, unit_blocks
from .router import Router
from .workloads import Workload

STATUS_DONE, STATUS_REJECTED, STATUS_UNFINISHED = 0, 1, 2
STATUS_NAMES = ("done", "rejected", "unfinished")
REJECT_REASONS = ("", "larger than the whole KV cache", "longer than max_model_len",
                  "prompt + output longer than the token budget without chunked prefill")
DRAFTER_CACHE = ("none", "keep", "refeed")


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


MAX_TABULATED_DRAWS = 64_000_000  # one byte a draw: at most 64 MB


class _Draws:
    """Accepted-draft counts per (request, draw) for an i.i.d. rate that does not move: the same
    stream_uniforms values, turned into min(geometric, k_max) once for every draw a request can make
    (a drafting cycle emits at least one token, so at most output_tokens + 1 draws), and looked up
    per cycle; min(g, K) for a row drafting K is exactly accepted_from_uniforms at K."""

    def __init__(self, keys: np.ndarray, out: np.ndarray, alpha: float, kmax: int):
        per = out.astype(np.int64) + 1
        self.offsets = np.concatenate([[0], np.cumsum(per)[:-1]]).astype(np.int64)
        total = int(per.sum())
        g = np.empty(total, dtype=np.int8)  # K <= 64: a byte holds it
        chunk = 1 << 22
        owner = np.repeat(np.arange(out.size, dtype=np.int64), per)
        for s in range(0, total, chunk):
            o = owner[s:s + chunk]
            idx = (np.arange(s, min(s + chunk, total), dtype=np.int64) - self.offsets[o]).astype(np.uint64)
            bits = _splitmix64(keys[o] + idx * _GOLDEN)
            u = (bits >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
            if alpha >= 1.0:
                g[s:s + chunk] = kmax
            elif alpha <= 0.0:
                g[s:s + chunk] = 0
            else:  # accepted_from_uniforms' inverse CDF, min(⌊log(1 − U) / log α⌋, K); x >= 0, so the cast floors
                x = np.log1p(-u)
                x /= np.log(np.full(8, alpha))[0]
                np.minimum(x, kmax, out=x)
                g[s:s + chunk] = x  # x >= 0, so the cast floors
        self.g = g


# ---- arrivals -------------------------------------------------------------------------------------

class _OpenFeed:
    def __init__(self, arrival_at_s: np.ndarray):
        self.t = arrival_at_s
        self.i = 0
        self.next_at = float(arrival_at_s[0]) if arrival_at_s.size else math.inf

    def pop_until(self, now: float) -> range:
        j = int(np.searchsorted(self.t, now, side="right"))
        out = range(self.i, max(j, self.i))
        self.i = max(j, self.i)
        self.next_at = float(self.t[self.i]) if self.i < self.t.size else math.inf
        return out

    def next_time(self) -> float | None:
        return None if self.next_at == math.inf else self.next_at

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
        self.next_at = 0.0 if self.heap else math.inf

    def pop_until(self, now: float) -> list[int]:
        out = []
        while self.heap and self.heap[0][0] <= now:
            t, i = heapq.heappop(self.heap)
            self.arrival_at_s[i] = t
            out.append(i)
        self.next_at = self.heap[0][0] if self.heap else math.inf
        return out

    def next_time(self) -> float | None:
        return self.heap[0][0] if self.heap else None

    def on_done(self, now: float) -> None:
        if self.next_id < self.n:
            heapq.heappush(self.heap, (now + self.think, self.next_id))
            self.next_id += 1
            self.next_at = self.heap[0][0]


# ---- recorded output ------------------------------------------------------------------------------

STEP_COLUMNS = (
    ("start_at_s", np.float64), ("duration_s", np.float64), ("n_running", np.int64), ("n_prefill", np.int64),
    ("n_decode", np.int64), ("n_spec", np.int64), ("k", np.int64), ("n_batched_tokens", np.int64),
    ("n_draft_tokens", np.int64), ("n_accepted_tokens", np.int64), ("n_emitted_tokens", np.int64),
    ("n_wasted_slots", np.int64), ("kv_used_blocks", np.int64), ("n_waiting", np.int64), ("n_preempted", np.int64),
    ("n_prefill_done", np.int64), ("replica", np.int64), ("drafter_on", np.bool_), ("n_catchup_tokens", np.int64),
    ("catchup_s", np.float64), ("n_prefix_hit_tokens", np.int64), ("kv_cached_blocks", np.int64),
    ("n_swapped", np.int64), ("n_swap_blocks", np.int64), ("swap_s", np.float64),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineRun:
    """Raw arrays from one run (one replica or a fleet); metrics.py turns them into DataFrames."""

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
    steps: dict                    # STEP_COLUMNS -> (n_steps,), every replica's iterations
    accepted_per_position: np.ndarray  # (k_max,) accepted drafts at position j
    drafted_per_position: np.ndarray   # (k_max,) drafts proposed at position j
    n_blocks: int
    block_size_tokens: int
    end_at_s: float
    token_log: tuple | None        # (request, first_token_index, count, at_s) arrays when recorded
    replica: np.ndarray = None     # (n_requests,) the replica that finished it (-1: none)
    prefill_replica: np.ndarray = None  # (n_requests,) disaggregated: where it was prefilled (-1: none)
    prefix_hit_tokens: np.ndarray = None  # (n_requests,) prompt tokens found cached at its first admission
    priority: np.ndarray = None    # (n_requests,) priority class (0 when none was given)
    n_swaps: np.ndarray = None     # (n_requests,) times swapped out
    roles: tuple = ("both",)       # each replica's role
    prefix_evicted_units: int = 0
    n_swap_fallbacks: int = 0      # swap preemptions turned into recompute for want of host space


_CONSTANT_POLICIES = (StaticK, Never)  # need no Observation: K is k_reserved


# ---- state shared by the replicas of a run --------------------------------------------------------

class _Shared:
    """Per-request state (each request lives on one replica at a time), the arrival feed, the
    router, and the handoffs between replicas."""

    def __init__(self, workload: Workload, env, *, keys: np.ndarray, draws: _Draws | None, fleet: FleetSpec,
                 record_tokens: bool):
        n = workload.n_requests
        self.env = env
        self.w = workload
        self.n = n
        self.prompt = workload.prompt_tokens
        self.out = workload.output_tokens
        if workload.is_closed_loop:
            self.feed = _ClosedFeed(n, workload.n_users, workload.think_time_s)
            self.arrival = self.feed.arrival_at_s
        else:
            self.feed = _OpenFeed(workload.arrival_at_s)
            self.arrival = workload.arrival_at_s.copy()
        self.prio = workload.priority if workload.priority is not None else np.zeros(n, dtype=np.int64)
        self.first = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.emitted = np.zeros(n, dtype=np.int64)
        self.status = np.full(n, STATUS_UNFINISHED, dtype=np.int8)
        self.reason = np.zeros(n, dtype=np.int8)
        self.n_preempt = np.zeros(n, dtype=np.int64)
        self.n_swaps = np.zeros(n, dtype=np.int64)
        self.req_draft = np.zeros(n, dtype=np.int64)
        self.req_acc = np.zeros(n, dtype=np.int64)
        self.req_spec_steps = np.zeros(n, dtype=np.int64)
        self.counter = np.zeros(n, dtype=np.uint64)
        self.spec_ok = np.ones(n, dtype=bool)
        self.replica = np.full(n, -1, dtype=np.int64)
        self.prefill_replica = np.full(n, -1, dtype=np.int64)
        self.hit_tokens = np.zeros(n, dtype=np.int64)
        self.admitted_once = np.zeros(n, dtype=bool)
        self.pre_done = np.zeros(n, dtype=np.int64)   # prompt tokens whose cache arrived by transfer
        self.pre_dctx = np.zeros(n, dtype=np.int64)   # ... and the drafter's
        self.keys = keys
        self.draws = draws
        self.fleet = fleet
        self.router = Router(fleet.router)
        self.engines: list = []
        self.entry: list = []       # replicas new requests are routed to
        self.decoders: list = []    # replicas a disaggregated handoff goes to
        self.outstanding: list = []
        self.link_free_at: list = []
        self.record_tokens = record_tokens
        self.tok_log: list[tuple] = []
        self.timer_at = math.inf
        self.has_chains = workload.has_prefixes

    # -- arrivals
    def start(self) -> None:
        self._arm()

    def _arm(self) -> None:
        t = self.feed.next_at
        if t == math.inf or t >= self.timer_at:
            return
        self.timer_at = t
        ev = self.env.timeout(max(t - self.env.now, 0.0))
        ev.callbacks.append(self._on_timer)

    def _on_timer(self, _ev) -> None:
        self.timer_at = math.inf
        self.flush(self.env.now)
        self._arm()

    def flush(self, now: float) -> None:
        """Route every request that has arrived by `now` (each replica calls this before it plans, so an
        arrival at the instant an iteration starts is seen by it)."""
        if self.feed.next_at > now:
            return
        for i in self.feed.pop_until(now):
            self._route(int(i), now, self.entry)
        self._arm()

    def _route(self, i: int, now: float, pool: list) -> None:
        if len(pool) == 1:
            eng = pool[0]
        else:
            out = [self.outstanding[e.rid] for e in pool]
            chain = self.w.hashes_of(i) if self.has_chains and self.fleet.router.kind == "prefix_affinity" else None
            eng = pool[self.router.pick(out, chain=chain, caches=[e.prefix for e in pool])]
        eng.submit(i, now)

    # -- completions and handoffs
    def done(self, i: int, now: float, eng) -> None:
        self.outstanding[eng.rid] -= 1
        self.feed.on_done(now)
        self._arm()

    def handoff(self, i: int, now: float, eng, *, drafter_tokens: int) -> None:
        """Disaggregated: request i's prompt is computed on prefill replica `eng`; send its cache."""
        self.outstanding[eng.rid] -= 1
        self.prefill_replica[i] = eng.rid
        tokens = int(self.prompt[i])
        start = max(now, self.link_free_at[eng.rid])
        dur = self.fleet.transfer_s(tokens)
        self.link_free_at[eng.rid] = start + (dur - self.fleet.kv_transfer_latency_s)
        self.pre_done[i] = tokens
        self.pre_dctx[i] = drafter_tokens
        ev = self.env.timeout(start + dur - now)
        ev.callbacks.append(lambda _ev, i=i: self._route(i, self.env.now, self.decoders))


# ---- one replica ----------------------------------------------------------------------------------

class _Waiting:
    """The waiting queue: FCFS (preempted requests go back to the front), or ordered by
    (priority, arrival, request) with priority scheduling."""

    def __init__(self, sh: _Shared, by_priority: bool):
        self.sh = sh
        self.by_priority = by_priority
        self.q: deque | list = [] if by_priority else deque()

    def __len__(self) -> int:
        return len(self.q)

    def __bool__(self) -> bool:
        return bool(self.q)

    def key(self, i: int):
        return (int(self.sh.prio[i]), float(self.sh.arrival[i]), i)

    def push(self, i: int) -> None:
        if self.by_priority:
            heapq.heappush(self.q, self.key(i))
        else:
            self.q.append(i)

    def push_front(self, i: int) -> None:
        if self.by_priority:
            heapq.heappush(self.q, self.key(i))
        else:
            self.q.appendleft(i)

    def peek(self) -> int:
        return self.q[0][2] if self.by_priority else self.q[0]

    def pop(self) -> int:
        return heapq.heappop(self.q)[2] if self.by_priority else self.q.popleft()


# running-set matrix columns (one row per running sequence, in scheduling order)
(C_REQ, C_PLEN, C_DONE, C_CTX, C_ALLOC, C_DCTX, C_SHARED, C_PUBAT, C_OUT, C_LEFT, C_DRAFT, C_ACC, C_STEPS,
 C_DRAW) = range(14)
N_COLS = 14
_NEVER = 1 << 62


class _Engine:
    """One replica; `process` is its simpy process.

    The running set is one int64 matrix R (one row per sequence, in scheduling order: index 0 is the
    highest priority) whose columns are exposed as views (r_req, r_plen, r_done, r_ctx, ...). A row
    carries the request's counters while it runs (tokens emitted, drafts proposed and accepted, the
    position in its acceptance stream) and writes them back to the shared per-request arrays when it
    leaves, so an iteration updates contiguous columns and never scatters into per-request arrays."""

    def __init__(self, sh: _Shared, rid: int, role: str, config: EngineConfig, cost: Callable[[IterationMix], float], *,
                 policy, acceptance: np.ndarray, speculative: bool, tree_size: int = 0,
                 acceptance_factor: Callable[[np.ndarray], np.ndarray] | None = None, drafter_cache: str = "none"):
        self.sh = sh
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
        if drafter_cache not in DRAFTER_CACHE:
            raise SpecError(f"serving engine: drafter_cache = {drafter_cache!r}: expected one of {', '.join(DRAFTER_CACHE)}")
        self.dcache = drafter_cache if self.speculative else "none"
        self.catchup = self.dcache != "none" and config.drafter_catchup
        self.acc_hist = np.zeros(kmax + 1, dtype=np.int64)    # cycles by accepted drafts 0..kmax
        self._hist_index = np.arange(kmax + 1, dtype=np.int64)
        self.draft_hist = np.zeros(kmax + 1, dtype=np.int64)  # cycles by drafts proposed 0..kmax
        self.by_priority = config.scheduling == "priority"
        self.waiting = _Waiting(sh, self.by_priority)
        self.swapped: deque = deque()      # (request, plen, done, ctx, dctx, blocks)
        self.swap_used = 0
        self.n_swap_fallbacks = 0
        self.R = np.zeros((0, N_COLS), dtype=np.int64)
        self._views()
        self.r_units: dict[int, list] = {}  # request -> prefix unit ids it references
        self.r_pub: dict[int, int] = {}     # request -> units of its chain published or referenced
        self.used_blocks = 0
        self.prefix = PrefixCache() if (config.prefix_caching and sh.has_chains) else None
        self.unit_tokens = sh.w.hash_block_tokens if self.prefix is not None else 0
        if self.prefix is not None and self.unit_tokens % config.block_size_tokens:
            raise SpecError(f"[engine] prefix_caching: the workload's hash blocks of {self.unit_tokens} tokens are not "
                            f"a whole number of KV blocks of {config.block_size_tokens} tokens")
        self.log: list[tuple] = []
        self.win = deque()  # (drafted, accepted, rejections) of the last acceptance_window_steps drafting iterations
        self.win_len = config.acceptance_window_steps
        self.win_sum = [0, 0, 0]
        self.steps_since_draft = 0
        self.wake = None
        # one-request feasibility limit, in blocks
        self.max_blocks_alone = config.n_blocks - config.watermark_blocks
        self.it_hit = self.it_swap_blocks = self.it_swapped = 0
        self.full_allot = False
        self._ones = np.ones(config.max_num_seqs + 1, dtype=np.int64)
        self._true = np.ones(config.max_num_seqs + 1, dtype=bool)
        self._false = np.zeros(config.max_num_seqs + 1, dtype=bool)
        self._slots = np.full(config.max_num_seqs + 1, self.slots, dtype=np.int64)
        m = config.max_num_seqs + 1
        self._dk = [np.full(m, k, dtype=np.int64) for k in range(self.k_res + 1)]
        self._q = [np.full(m, self.tree if (self.tree and k) else 1 + k, dtype=np.int64) for k in range(self.k_res + 1)]
        for arr in (self._ones, self._true, self._false, self._slots, *self._dk, *self._q):
            arr.flags.writeable = False
        self.all_decoding = True  # no running row is part-way through a prefill

    def _views(self) -> None:
        R = self.R
        self.r_req, self.r_plen, self.r_done, self.r_ctx = R[:, 0], R[:, 1], R[:, 2], R[:, 3]
        self.r_alloc, self.r_dctx, self.r_shared, self.r_pub_at = R[:, 4], R[:, 5], R[:, 6], R[:, 7]
        self.r_out, self.r_left, self.r_draft, self.r_acc = R[:, 8], R[:, 9], R[:, 10], R[:, 11]
        self.r_steps, self.r_draw = R[:, 12], R[:, 13]

    # -- arrivals and rejection
    def submit(self, i: int, now: float) -> None:
        sh, cfg = self.sh, self.cfg
        total = int(sh.prompt[i] + sh.out[i])
        reason = 0
        if int(blocks_for(total + self.slots - 1, cfg.block_size_tokens)) > self.max_blocks_alone:
            reason = 1
        elif cfg.max_model_len and total > cfg.max_model_len:
            reason = 2
        elif not cfg.chunked_prefill and total > cfg.max_num_batched_tokens:
            reason = 3
        if reason:
            sh.status[i] = STATUS_REJECTED
            sh.reason[i] = reason
            sh.finish[i] = now
            sh.feed.on_done(now)
            sh._arm()
            return
        sh.outstanding[self.rid] += 1
        sh.replica[i] = self.rid
        self.waiting.push(i)
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()

    # -- rows in and out of the running set
    def _append(self, rows: list) -> None:
        """rows: (request, plen, done, ctx, alloc, dctx, shared, pub_at) of sequences joining the running set."""
        sh = self.sh
        new = np.zeros((len(rows), N_COLS), dtype=np.int64)
        new[:, :C_OUT] = np.asarray(rows, dtype=np.int64)
        r = new[:, C_REQ]
        new[:, C_OUT] = sh.out[r]
        new[:, C_LEFT] = new[:, C_OUT] - sh.emitted[r]
        new[:, C_DRAFT] = sh.req_draft[r]
        new[:, C_ACC] = sh.req_acc[r]
        new[:, C_STEPS] = sh.req_spec_steps[r]
        new[:, C_DRAW] = sh.counter[r].astype(np.int64) + (sh.draws.offsets[r] if sh.draws is not None else 0)
        self.R = np.concatenate([self.R, new]) if self.R.size else new
        self._views()
        self.all_decoding = False

    def _store(self, rows) -> None:
        """Write running rows' counters back to the shared per-request arrays."""
        sh = self.sh
        R = self.R[rows]
        r = R[:, C_REQ]
        sh.emitted[r] = R[:, C_OUT] - R[:, C_LEFT]
        sh.req_draft[r] = R[:, C_DRAFT]
        sh.req_acc[r] = R[:, C_ACC]
        if sh.draws is not None:  # one tabulated draw per drafting step: the steps are the draws made here
            counter = R[:, C_DRAW] - sh.draws.offsets[r]
            sh.req_spec_steps[r] = R[:, C_STEPS] + counter - sh.counter[r].astype(np.int64)
            sh.counter[r] = counter.astype(np.uint64)
        else:
            sh.req_spec_steps[r] = R[:, C_STEPS]
            sh.counter[r] = R[:, C_DRAW].astype(np.uint64)

    def _remove(self, keep: np.ndarray) -> None:
        self.R = self.R[keep]
        self._views()

    def _sort_running(self) -> np.ndarray | None:
        """With priorities, keep the running set in (priority, arrival, request) order; returns the
        permutation applied (None when nothing moved)."""
        sh = self.sh
        r = self.r_req
        order = np.lexsort((r, sh.arrival[r], sh.prio[r]))
        if np.array_equal(order, np.arange(r.size)):
            return None
        self.R = self.R[order]
        self._views()
        return order

    # -- block accounting (prefix units are shared; evictable units count as free)
    def _take(self, n_blocks: int) -> None:
        """n_blocks more in use; reclaim evictable prefix units if the physically free ones run short."""
        self.used_blocks += n_blocks
        if self.prefix is not None:
            short = self.used_blocks + self.prefix.evictable_blocks - self.cfg.n_blocks
            if short > 0:
                self.prefix.evict(short)

    def _release_row(self, row: int) -> None:
        """Free a running row's blocks: its private ones, and its references to prefix units."""
        if self.prefix is None:
            self.used_blocks -= int(self.r_alloc[row])
        else:
            self.used_blocks -= int(self.r_alloc[row] - self.r_shared[row])
            i = int(self.r_req[row])
            for u in self.r_units.pop(i, ()):
                self.used_blocks -= self.prefix.release(u)
            self.r_pub.pop(i, None)

    def _preempt_row(self, row: int) -> None:
        """Preempt a running row: swap its blocks to host memory (swap mode, room permitting) or drop
        them to recompute later."""
        sh = self.sh
        i = int(self.r_req[row])
        blocks = int(self.r_alloc[row])
        swap = self.cfg.preemption_mode == "swap"
        if swap and self.swap_used + blocks > self.cfg.swap_space_blocks:
            swap = False
            self.n_swap_fallbacks += 1
        self._store([row])
        self._release_row(row)
        if swap:
            self.swapped.append((i, int(self.r_plen[row]), int(self.r_done[row]), int(self.r_ctx[row]),
                                 int(self.r_dctx[row]), blocks))
            self.swap_used += blocks
            self.it_swap_blocks += blocks
            sh.n_swaps[i] += 1
        else:
            sh.n_preempt[i] += 1
            self.waiting.push_front(i)
        keep = np.ones(self.r_req.size, dtype=bool)
        keep[row] = False
        self._remove(keep)

    # -- scheduling
    def _schedule_running(self, budget: int):
        """Token allotments for the running set (in order), preempting from the tail while the blocks
        run short. Returns (allot (n_running,), n_preempted)."""
        bs = self.cfg.block_size_tokens
        n_preempted = 0
        slots = self.slots
        self.full_allot = False
        while self.r_req.size:
            n = self.r_req.size
            if self.all_decoding and n * slots <= budget:
                # the common case: every row decodes with all its slots; a row's blocks never exceed
                # what its context plus the slots need (contexts only grow), so the growth is >= 0
                grow = (self.r_ctx + (slots + bs - 1)) // bs
                grow -= self.r_alloc
                extra = int(np.add.reduce(grow))
                if extra <= self.cfg.n_blocks - self.used_blocks:
                    if extra:
                        self._take(extra)
                        self.r_alloc += grow
                    self.full_allot = True
                    return self._slots[:n], n_preempted
                self._preempt_row(n - 1)
                n_preempted += 1
                continue
            decode = self.r_done >= self.r_plen
            if decode.all():  # no prefill in progress
                if n * slots <= budget:
                    allot = self._slots[:n]
                    full = True
                else:
                    need = np.full(n, slots, dtype=np.int64)
                    allot = np.clip(budget - (np.cumsum(need) - need), 0, need)
                    full = False
                hold = self.r_ctx + allot
            else:
                need = np.where(decode, slots, self.r_plen - self.r_done)
                allot = np.clip(budget - (np.cumsum(need) - need), 0, need)
                hold = np.where(decode, self.r_ctx + allot, self.r_plen)
                full = False
            grow = (hold + (bs - 1)) // bs - self.r_alloc
            np.maximum(grow, 0, out=grow)
            extra = int(np.add.reduce(grow))
            if extra <= self.cfg.n_blocks - self.used_blocks:
                if extra:
                    self._take(extra)
                    self.r_alloc += grow
                self.full_allot = full
                return allot, n_preempted
            self._preempt_row(n - 1)
            n_preempted += 1
        return np.zeros(0, dtype=np.int64), n_preempted

    def _admission(self, i: int):
        """What admitting waiting request i takes: (prefill length, tokens already computed, drafter's
        cached tokens, blocks in its table, new blocks in use, prefix units it would reference,
        their blocks)."""
        sh, cfg = self.sh, self.cfg
        bs = cfg.block_size_tokens
        plen = int(sh.prompt[i] + sh.emitted[i])
        done = dctx = int(sh.pre_done[i])
        if done:
            dctx = int(sh.pre_dctx[i])
            plen = done
        units: list = []
        shared = 0
        if self.prefix is not None and not done:
            chain = sh.w.hashes_of(i)
            if chain.size:
                n_u, hit = hit_units(self.prefix, chain, covered_tokens=sh.w.hashed_tokens(i),
                                     unit_tokens=self.unit_tokens, block_size_tokens=bs, prompt_tokens=plen)
                if n_u:
                    units = [int(u) for u in chain[:n_u]]
                    shared = hit // bs
                    done = dctx = hit
        # a cache that arrived by transfer decodes at once: its blocks cover the slots of its first decode
        blocks = -(-(plen + (self.slots if int(sh.pre_done[i]) else 0)) // bs)
        new = blocks - shared
        if units:
            pref = self.prefix
            new += sum(pref.units[u][1] for u in units if pref.units[u][0] == 0)
        return plen, done, dctx, blocks, new, units, shared

    def _admit(self, budget_left: int) -> int:
        """Admit waiting requests in order; returns how many."""
        cfg, sh = self.cfg, self.sh
        used = 0
        rows = []
        n_run = self.r_req.size
        while self.waiting and n_run < cfg.max_num_seqs and budget_left - used > 0:
            i = self.waiting.peek()
            plen, done, dctx, blocks, new, units, shared = self._admission(i)
            if not cfg.chunked_prefill and plen - done > budget_left - used:
                break
            if cfg.n_blocks - self.used_blocks - new < cfg.watermark_blocks:
                break
            self.waiting.pop()
            for u in units:
                self.used_blocks += self.prefix.acquire(u)
            self._take(blocks - shared)
            transferred = bool(sh.pre_done[i])
            if not sh.admitted_once[i]:
                sh.admitted_once[i] = True
                sh.hit_tokens[i] = 0 if transferred else done
            if not transferred:
                self.it_hit += done
            sh.pre_done[i] = 0
            used += min(plen - done, budget_left - used)
            pub_at = _NEVER
            if self.prefix is not None:
                self.r_units[i] = units
                self.r_pub[i] = len(units)
                pub_at = self._next_unit_end(i, len(units))
            rows.append((i, plen, done, done, blocks, dctx, shared, pub_at))
            n_run += 1
        if rows:
            self._append(rows)
        return len(rows)

    def _swap_in(self, budget_left: int) -> int:
        """Bring swapped sequences back in order while blocks, budget and max_num_seqs allow."""
        cfg = self.cfg
        rows = []
        n_run = self.r_req.size
        while self.swapped and n_run < cfg.max_num_seqs and budget_left >= self.slots:
            i, plen, done, ctx, dctx, blocks = self.swapped[0]
            need = max(blocks, -(-(ctx + self.slots) // cfg.block_size_tokens)) if done >= plen else blocks
            if cfg.n_blocks - self.used_blocks - need < cfg.watermark_blocks:
                break
            self.swapped.popleft()
            self.swap_used -= blocks
            self.it_swap_blocks += blocks
            self._take(need)
            budget_left -= self.slots if done >= plen else min(plen - done, budget_left)
            if self.prefix is not None:  # back as private blocks: nothing left to publish
                self.r_units[i] = []
                self.r_pub[i] = 1 << 30
            rows.append((i, plen, done, ctx, need, dctx, 0, _NEVER))
            n_run += 1
        if rows:
            self._append(rows)
        self.it_swapped += len(rows)
        return len(rows)

    def _priority_preemption(self) -> int:
        """vLLM v0 `_schedule_priority_preemption`: while the best waiting request cannot be admitted
        and the lowest-priority running one ranks below it, preempt that one."""
        cfg = self.cfg
        i = self.waiting.peek()
        key = self.waiting.key(i)
        n = 0
        while self.r_req.size:
            last = int(self.r_req[-1])
            if self.waiting.key(last) <= key:
                break
            plen, done, _, _, new, _, _ = self._admission(i)
            if (plen - done > 0 and self.r_req.size < cfg.max_num_seqs
                    and cfg.n_blocks - self.used_blocks - new >= cfg.watermark_blocks):
                break
            self._preempt_row(self.r_req.size - 1)
            n += 1
        return n

    def _plan(self):
        """Choose this iteration's batch. Returns (allot (n_running,), n_preempted)."""
        cfg = self.cfg
        budget = cfg.max_num_batched_tokens
        n_pre = 0
        if self.by_priority and self.waiting and self.r_req.size:
            n_pre += self._priority_preemption()
        if not cfg.chunked_prefill and self.waiting and not self.swapped:
            # vLLM v0 without chunked prefill: waiting prefills first, in a prefill-only batch
            if self._admit(budget):
                if self.by_priority:
                    self._sort_running()
                self.full_allot = False
                # only the admitted prefills run (everything running before is decoding); a cache that
                # arrived by transfer has nothing to prefill and decodes with the others below
                allot = np.where(self.r_done < self.r_plen, self.r_plen - self.r_done, 0)
                if allot.any():
                    return allot, n_pre
        allot, pre = self._schedule_running(budget)
        n_pre += pre
        n0 = self.r_req.size
        if not self.swapped and not self.waiting:
            return allot, n_pre
        used = int(np.add.reduce(allot)) if n0 else 0
        if self.swapped and pre == 0:
            self._swap_in(budget - used)
        if self.waiting and (cfg.chunked_prefill or not n0):
            self._admit(budget - used - (self.r_req.size - n0) * self.slots)
        if self.r_req.size > n0:
            self.full_allot = False
            room = budget - used
            done, plen = self.r_done[n0:], self.r_plen[n0:]
            # a prefill takes the rest of its prompt; a decode (swapped back in, or a cache that arrived
            # by transfer) its slots, whose blocks it took when it joined
            need = np.where(done >= plen, self.slots, plen - done)
            new_allot = np.minimum(need, np.maximum(room - (np.cumsum(need) - need), 0))
            allot = np.concatenate([allot, new_allot])
            if self.by_priority:
                order = self._sort_running()
                if order is not None:
                    allot = allot[order]
        return allot, n_pre

    # -- one iteration, step by step: plan the batch, let the policy choose K, price it, run it,
    #    sample what was accepted and emit
    def process(self, env):
        sh = self.sh
        feed = sh.feed
        breakdown = self.breakdown
        timeout = env.timeout
        swap_per_block = self.cfg.swap_s_per_block
        record = sh.record_tokens
        steady = self.speculative and self.constant_policy  # K = k_reserved whenever every row decodes
        while True:
            now = env.now
            if feed.next_at <= now:
                sh.flush(now)
            if not self.r_req.size and not self.waiting and not self.swapped:
                self.wake = env.event()
                yield self.wake
                self.wake = None
                continue
            batch = self._plan_iteration()
            if batch is None:
                raise SpecError("serving engine: the waiting queue cannot be admitted into an empty engine "
                                "(a request larger than the cache slipped past the arrival check)")
            if steady and not batch.n_pf and batch.can_spec is not None:
                k, on = self.k_res, True
            else:
                k, on = self._choose_k(batch)
            mix = batch.mix(k, on)
            if breakdown is not None:
                duration, catchup_s = breakdown(mix)
            else:
                duration, catchup_s = float(self.cost(mix)), 0.0
            if not (duration > 0.0 and math.isfinite(duration)):
                raise SpecError(f"cost model returned {duration!r} s for {mix!r}; expected a positive duration")
            swap_s = self.it_swap_blocks * swap_per_block if self.it_swap_blocks else 0.0
            yield timeout(duration + swap_s)
            accepted = self._sample_accepted(batch, mix) if batch.k_drafted else None
            if (batch.every and not batch.n_pf and not record and mix.uniform_q
                    and (accepted is None or batch.all_draft)):
                self._emit_decodes(batch, mix, k, accepted, start_at_s=now, now=env.now, catchup_s=catchup_s,
                                   swap_s=swap_s)
            else:
                self._emit(batch, mix, k, accepted, start_at_s=now, now=env.now, catchup_s=catchup_s, swap_s=swap_s)

    def _plan_iteration(self) -> "_Batch | None":
        """Schedule the running set, swap-ins and admissions (see the module docstring), as a _Batch."""
        self.it_hit = self.it_swap_blocks = self.it_swapped = 0
        allot, n_pre = self._plan()
        if self.full_allot:
            return _Batch(self, allot, n_pre, allot.size)
        n_sched = int(np.count_nonzero(allot))
        if n_sched == 0:
            return None
        return _Batch(self, allot, n_pre, n_sched)

    def _observation(self, batch: "_Batch", n_decoding: int) -> Observation:
        s = self.win_sum
        return Observation(n_running=int(self.r_req.size), n_decoding=n_decoding, n_waiting=len(self.waiting),
                           window_draft_tokens=s[0], window_accepted_tokens=s[1], window_rejections=s[2],
                           steps_since_draft=self.steps_since_draft, alpha_prior=self.alpha_prior,
                           step_time_s=lambda kk: float(self.cost(batch.mix(kk, kk > 0))))

    def _choose_k(self, batch: "_Batch") -> tuple[int, bool]:
        """The policy's K for this iteration (0 when nobody may speculate) and whether the drafter
        runs (the gate has not switched it off)."""
        if not self.speculative:
            return 0, False
        pol = self.policy
        if batch.can_spec is None or (batch.n_pf and not batch.can_spec.any()):
            # nobody drafts; the drafter still runs over prefill chunks unless the gate is off
            if not self.catchup or not batch.n_pf:
                return 0, False
            if self.constant_policy:
                return 0, True
            return 0, int(pol(self._observation(batch, 0))) > 0
        if self.constant_policy:
            return pol.k_reserved, True
        k = int(pol(self._observation(batch, int(np.count_nonzero(batch.can_spec)))))
        if k < 0 or k > self.k_res:
            raise SpecError(f"policy {getattr(pol, 'name', pol)!r} returned K = {k}; expected 0..{self.k_res} "
                            f"(its reserved slots)")
        if k == 0 and pol.sticky_off:
            self.sh.spec_ok[self.r_req] = False
        return k, k > 0

    def _sample_accepted(self, batch: "_Batch", mix: IterationMix) -> np.ndarray | None:
        """Accepted drafts per speculating row, from each request's own stream of uniforms
        (speculation.acceptance.accepted_from_uniforms): one uniform per cycle for an i.i.d. rate, one
        per drafted position for per-position rates; rates × factor(context) when acceptance moves
        with context. None when nobody drafted."""
        if not batch.k_drafted:
            return None
        sh = self.sh
        ridx = batch.spec_ridx  # rows of R that draft (a slice when all of them do)
        dks = mix.draft_k if batch.all_draft else mix.draft_k[batch.spec_rows]
        draw = self.r_draw
        if sh.draws is not None:
            g = sh.draws.g[draw[ridx]].astype(np.int64)
            draw[ridx] += 1
            if batch.all_draft and mix.uniform_q and int(dks[0]) == self.k_res:
                return g  # tabulated as min(geometric, k_res): nothing left to cap
            return np.minimum(g, dks)
        r = self.r_req[ridx]
        kmax = int(dks.max())
        ctx = batch.ctx if batch.all_draft else batch.ctx[batch.spec_rows]
        f = None if self.acc_factor is None else np.asarray(self.acc_factor(ctx), dtype=np.float64)
        cnt = draw[ridx].astype(np.uint64)
        if self.iid_alpha is not None:
            rates = np.full(r.size, self.iid_alpha) if f is None else np.clip(self.iid_alpha * f, 0.0, 1.0)
            u = stream_uniforms(sh.keys[r], cnt, 1)[:, 0]
            draw[ridx] += 1
        else:
            base = self.acc[None, :kmax]
            rates = np.broadcast_to(base, (r.size, kmax)) if f is None else np.clip(base * f[:, None], 0.0, 1.0)
            u = stream_uniforms(sh.keys[r], cnt, kmax)
            draw[ridx] += dks
        return accepted_from_uniforms(u, rates, dks)

    def _emit(self, batch: "_Batch", mix: IterationMix, k: int, accepted, *, start_at_s: float, now: float,
              catchup_s: float, swap_s: float) -> None:
        """Tokens out, state forward: a prefill that ends its prompt emits one token, a plain decode
        one, a speculating decode its accepted drafts plus the target's own token; never past the
        request's output length. Then the drafter's cache, prefix publications, the counters, the
        acceptance window, the step log, handoffs and finished requests."""
        sh = self.sh
        add, count = np.add.reduce, np.count_nonzero
        a, is_pf, pf_end, idx, every = batch.a, batch.is_pf, batch.pf_end, batch.idx, batch.every
        n_pf = batch.n_pf
        n = a.size
        n_drafted = acc_tok = rejections = n_spec = 0
        uniform_k = batch.all_draft and mix.uniform_q
        tabulated = sh.draws is not None
        if accepted is not None:
            ridx = batch.spec_ridx
            dks = mix.draft_k if batch.all_draft else mix.draft_k[batch.spec_rows]
            n_spec = accepted.size
            if batch.all_draft and not n_pf:
                emit = accepted + 1
            else:
                emit = np.where(is_pf, pf_end, 1).astype(np.int64) if n_pf else np.ones(n, dtype=np.int64)
                emit[batch.spec_rows] += accepted
            b = np.bincount(accepted, minlength=self.acc_hist.size)
            self.acc_hist += b
            acc_tok = int(b @ self._hist_index)
            if uniform_k:  # every row drafted K = k
                self.draft_hist[k] += n_spec
                n_drafted = n_spec * k if not self.tree else n_spec * (self.tree - 1)
                rejections = n_spec - int(b[k:].sum())
                self.r_draft[ridx] += k if not self.tree else self.tree - 1
            else:
                self.draft_hist += np.bincount(dks, minlength=self.draft_hist.size)
                n_drafted = int(add(dks)) if not self.tree else n_spec * (self.tree - 1)
                rejections = int(count(accepted < dks))
                self.r_draft[ridx] += dks if not self.tree else self.tree - 1
            self.r_acc[ridx] += accepted
            if not tabulated:  # (tabulated: one draw per step, counted from the draws at the end)
                self.r_steps[ridx] += 1
        else:
            emit = np.where(is_pf, pf_end, 1).astype(np.int64) if n_pf else np.ones(n, dtype=np.int64)
        left_col = self.r_left
        need_before = n_pf or sh.record_tokens
        left = left_col[idx] if not every else left_col
        emitted_before = (self.r_out[idx] - left) if need_before else None
        np.minimum(emit, left, out=emit)
        ctx = batch.ctx
        # the drafter's cache: what it ran over this iteration (module docstring)
        n_catchup = 0
        fast_dctx = False
        if mix.catchup is not None:
            n_catchup = int(add(mix.catchup))
            if batch.all_draft and not n_pf and every and accepted is not None:
                fast_dctx = True  # set below from the new context
            else:
                d = self.r_dctx[idx]
                if every:
                    d = d.copy()
                if n_pf:
                    d = np.where(is_pf, batch.done_before + a, d)
                if accepted is not None:
                    rows = batch.spec_rows
                    if self.dcache == "keep":
                        d[rows] = ctx[rows] + 1 + np.minimum(accepted, mix.draft_k[rows] - 1)
                    else:
                        d[rows] = ctx[rows] + 1
                self.r_dctx[idx] = d
        if fast_dctx and self.dcache == "refeed":
            self.r_dctx[:] = ctx  # the newest token is its first pass's; the accepted drafts it runs again
            self.r_dctx += 1
        if n_pf:
            new_done = batch.done_before + np.where(is_pf, a, 0)
            self.r_done[idx] = new_done
            self.r_ctx[idx] = ctx + np.where(is_pf, a, emit)
        elif every:
            self.r_ctx += emit
        else:
            self.r_ctx[idx] = ctx + emit
        if fast_dctx and self.dcache == "keep":
            # it cached the newest token and drafts 1..K−1: all of the new context but the last
            # draft when all K were accepted (a row whose emission was capped finishes now)
            np.subtract(self.r_ctx, accepted >= mix.draft_k if not uniform_k else accepted >= k, out=self.r_dctx)
        if self.prefix is not None:
            ready = np.flatnonzero(self.r_ctx >= self.r_pub_at)
            if ready.size:
                self._publish(ready)
        if n_pf:
            fresh = pf_end & (emitted_before == 0)
            if fresh.any():
                sh.first[batch.req[fresh]] = now
        if sh.record_tokens:
            got = emit > 0
            rr = batch.req[got]
            sh.tok_log.append((rr.copy(), emitted_before[got].copy(), emit[got].copy(), np.full(rr.size, now)))
        finished = emit >= left
        if every:
            left_col -= emit
        else:
            left_col[idx] = left - emit
        # acceptance window: the last `acceptance_window_steps` iterations that drafted
        if n_drafted:
            ws = self.win_sum
            self.win.append((n_drafted, acc_tok, rejections))
            ws[0] += n_drafted
            ws[1] += acc_tok
            ws[2] += rejections
            if len(self.win) > self.win_len:
                o = self.win.popleft()
                ws[0] -= o[0]
                ws[1] -= o[1]
                ws[2] -= o[2]
            self.steps_since_draft = 0
        else:
            self.steps_since_draft += 1
        if n_pf or not self.all_decoding:  # every row ran and every prefill among them ended: all decode now
            self.all_decoding = every and (not n_pf or int(count(pf_end)) == n_pf)
        self.log.append((start_at_s, now - start_at_s, self.r_req.size, n_pf, batch.n_dec, n_spec, k,
                         n * mix.uniform_q if mix.uniform_q else int(add(mix.q_lens)), n_drafted, acc_tok, int(add(emit)), n_drafted - acc_tok,
                         self.used_blocks, len(self.waiting), batch.n_preempted, int(count(pf_end)) if n_pf else 0,
                         self.rid, bool(mix.drafter_on), n_catchup, catchup_s, self.it_hit,
                         self.prefix.evictable_blocks if self.prefix is not None else 0, self.it_swapped,
                         self.it_swap_blocks, swap_s))
        leave = finished
        if self.role == "prefill" and n_pf:
            leave = finished | pf_end
        if leave.any():
            rows = np.flatnonzero(leave) if every else idx[leave]
            fin = finished[leave]
            self._store(rows)
            fr = self.r_req[rows]
            for row, i, f in zip(rows.tolist(), fr.tolist(), fin.tolist()):
                if not f:  # disaggregated: the prompt is computed, on to a decode replica
                    sh.handoff(i, now, self, drafter_tokens=int(self.r_dctx[row]) if sh.fleet.prefill_runs_drafter else 0)
                self._release_row(row)
            done = fr[fin]
            sh.finish[done] = now
            sh.status[done] = STATUS_DONE
            keep = np.ones(self.r_req.size, dtype=bool)
            keep[rows] = False
            self._remove(keep)
            for i in done.tolist():
                sh.done(i, now, self)

    def _emit_decodes(self, batch: "_Batch", mix: IterationMix, k: int, accepted, *, start_at_s: float, now: float,
                      catchup_s: float, swap_s: float) -> None:
        """_emit for the common iteration: every running row decodes, all drafting K = k or none
        drafting (the same bookkeeping, in fewer array operations)."""
        n = batch.a.size
        left = self.r_left
        if accepted is None:
            emit = np.ones(n, dtype=np.int64)
            n_spec = n_drafted = acc_tok = rejections = 0
        else:
            n_spec = n
            emit = accepted + 1
            b = np.bincount(accepted, minlength=self._hist_index.size)
            self.acc_hist += b
            acc_tok = int(b @ self._hist_index)
            self.draft_hist[k] += n
            per = k if not self.tree else self.tree - 1
            n_drafted = n * per
            rejections = n - int(b[k])
            self.r_draft += per
            self.r_acc += accepted
            if self.sh.draws is None:
                self.r_steps += 1
        np.minimum(emit, left, out=emit)
        finished = emit >= left
        cu = mix.catchup
        n_catchup = 0
        if cu is not None:
            n_catchup = mix.sum_catchup if mix.sum_catchup is not None else int(np.add.reduce(cu))
            if self.dcache == "refeed" and accepted is not None:
                self.r_dctx[:] = self.r_ctx
                self.r_dctx += 1
        self.r_ctx += emit
        if cu is not None and self.dcache == "keep" and accepted is not None:
            np.subtract(self.r_ctx, accepted >= k, out=self.r_dctx)
        left -= emit
        if self.prefix is not None:
            ready = np.flatnonzero(self.r_ctx >= self.r_pub_at)
            if ready.size:
                self._publish(ready)
        if n_drafted:
            ws = self.win_sum
            self.win.append((n_drafted, acc_tok, rejections))
            ws[0] += n_drafted
            ws[1] += acc_tok
            ws[2] += rejections
            if len(self.win) > self.win_len:
                o = self.win.popleft()
                ws[0] -= o[0]
                ws[1] -= o[1]
                ws[2] -= o[2]
            self.steps_since_draft = 0
        else:
            self.steps_since_draft += 1
        self.log.append((start_at_s, now - start_at_s, n, 0, n, n_spec, k, n * mix.uniform_q, n_drafted, acc_tok,
                         int(np.add.reduce(emit)), n_drafted - acc_tok, self.used_blocks, len(self.waiting),
                         batch.n_preempted, 0, self.rid, bool(mix.drafter_on), n_catchup, catchup_s, self.it_hit,
                         self.prefix.evictable_blocks if self.prefix is not None else 0, self.it_swapped,
                         self.it_swap_blocks, swap_s))
        if finished.any():
            self._finish_rows(np.flatnonzero(finished), now)

    def _finish_rows(self, rows: np.ndarray, now: float) -> None:
        """Rows whose requests emitted their last token: write back, free, count as done."""
        sh = self.sh
        self._store(rows)
        fr = self.r_req[rows]
        for row in rows.tolist():
            self._release_row(row)
        sh.finish[fr] = now
        sh.status[fr] = STATUS_DONE
        keep = np.ones(self.r_req.size, dtype=bool)
        keep[rows] = False
        self._remove(keep)
        for i in fr.tolist():
            sh.done(i, now, self)

    def _next_unit_end(self, i: int, j: int) -> int:
        """Tokens computed when request i's unit j is complete (never, past its chain)."""
        w = self.sh.w
        n = int(w.block_hash_offsets[i + 1] - w.block_hash_offsets[i])
        if j >= n:
            return _NEVER
        covered = w.hashed_tokens(i)
        if unit_blocks(j, covered, self.unit_tokens, self.cfg.block_size_tokens) == 0:
            return _NEVER
        return min((j + 1) * self.unit_tokens, covered)

    def _publish(self, rows: np.ndarray) -> None:
        """Rows that completed units of their chain: put those units in the prefix cache (or, when
        another sequence put the same id there first, reference it and free the private copy)."""
        sh, pref, bs = self.sh, self.prefix, self.cfg.block_size_tokens
        for row in rows.tolist():
            i = int(self.r_req[row])
            chain = sh.w.hashes_of(i)
            covered = sh.w.hashed_tokens(i)
            computed = int(self.r_ctx[row])
            j = self.r_pub[i]
            while j < chain.size and computed >= self._next_unit_end(i, j):
                u = int(chain[j])
                b = unit_blocks(j, covered, self.unit_tokens, bs)
                if not pref.publish(u, b):
                    self.used_blocks += pref.acquire(u)
                    self.used_blocks -= b
                self.r_units[i].append(u)
                self.r_shared[row] += b
                j += 1
                if b * bs < self.unit_tokens:
                    j = 1 << 30  # a short unit ends what this chain can share
                    break
            self.r_pub[i] = j
            self.r_pub_at[row] = self._next_unit_end(i, j) if j < chain.size else _NEVER

    def flush_running(self) -> None:
        """Write every running row's counters back (at the end of a run cut short by until_s)."""
        if self.r_req.size:
            self._store(np.arange(self.r_req.size))


class _Batch:
    """One iteration's scheduled rows (a view of the running set) and the mix it makes for a K."""

    __slots__ = ("eng", "every", "idx", "req", "a", "done_before", "ctx", "is_pf", "n_pf", "n_dec", "pf_end",
                 "n_preempted", "tree", "can_spec", "k_cap", "spec_rows", "spec_ridx", "k_drafted", "dctx",
                 "all_draft")

    def __init__(self, eng: _Engine, allot: np.ndarray, n_preempted: int, n_sched: int):
        self.eng = eng
        n = allot.size
        self.every = every = n_sched == n
        self.idx = idx = slice(None) if every else np.flatnonzero(allot)
        self.req = eng.r_req if every else eng.r_req[idx]
        self.a = allot if every else allot[idx]
        self.ctx = eng.r_ctx if every else eng.r_ctx[idx]
        self.dctx = eng.r_dctx if every else eng.r_dctx[idx]
        self.n_preempted = n_preempted
        self.tree = eng.tree
        self.spec_rows = self.spec_ridx = None
        self.k_drafted = 0
        self.all_draft = False
        m = self.a.size
        if eng.full_allot:  # every running row decodes with all its slots
            self.done_before = eng.r_done
            self.is_pf = self.pf_end = eng._false[:m]
            self.n_pf = 0
        else:
            self.done_before = eng.r_done if every else eng.r_done[idx]
            plen = eng.r_plen if every else eng.r_plen[idx]
            self.is_pf = self.done_before < plen
            self.n_pf = int(np.count_nonzero(self.is_pf))
            self.pf_end = self.is_pf & (self.done_before + self.a >= plen)
        self.n_dec = m - self.n_pf
        if eng.k_res and self.n_dec:
            # spec_ok only changes when a sticky gate trips
            sticky = eng.policy.sticky_off
            if self.n_pf:
                self.can_spec = ~self.is_pf & eng.sh.spec_ok[self.req] if sticky else ~self.is_pf
            else:
                self.can_spec = eng.sh.spec_ok[self.req] if sticky else eng._true[:m]
            # a decode's budgeted draft depth (a prefill's is masked by can_spec); a tree is verified
            # whole or not at all
            if eng.full_allot:
                self.k_cap = None  # every decode has all its slots
            else:
                self.k_cap = self.a - 1 if not self.tree else np.where(self.a >= self.tree, eng.k_res, 0)
        else:
            self.can_spec = None

    def mix(self, k: int, drafter_on: bool | None = None) -> IterationMix:
        a, is_pf = self.a, self.is_pf
        eng = self.eng
        m = a.size
        n_pf = self.n_pf
        if self.can_spec is None or k == 0:
            dk = np.zeros(m, dtype=np.int64)
            q = np.where(is_pf, a, 1) if n_pf else eng._ones[:m]
            spec_rows, kd, all_draft = None, 0, False
        else:
            uniform = self.k_cap is None and not n_pf and not eng.policy.sticky_off
            if uniform:  # every row drafts K
                dk = eng._dk[k][:m]
                q = eng._q[k][:m]
                spec_rows, kd, all_draft = None, m, True
            else:
                cap = self.k_cap if self.k_cap is not None else eng.k_res
                dk = np.where(self.can_spec, np.minimum(k, cap), 0)
                width = np.where(dk > 0, self.tree, 1) if self.tree else 1 + dk
                q = np.where(is_pf, a, width) if n_pf else width
                spec_rows = np.flatnonzero(dk)
                kd = spec_rows.size
                all_draft = kd == m
        logits = np.where(is_pf, self.pf_end, q) if n_pf else q
        catchup = None
        if eng.catchup and drafter_on:
            if n_pf:
                catchup = np.where(is_pf, self.done_before - self.dctx, np.where(dk > 0, self.ctx - self.dctx, 0))
            elif kd:
                catchup = self.ctx - self.dctx if all_draft else np.where(dk > 0, self.ctx - self.dctx, 0)
        self.spec_rows, self.k_drafted, self.all_draft = spec_rows, kd, all_draft
        if kd:
            self.spec_ridx = (slice(None) if self.every else self.idx) if all_draft else \
                (spec_rows if self.every else self.idx[spec_rows])
        uq = 0
        if not n_pf:
            uq = 1 if kd == 0 else ((self.tree if self.tree else 1 + k) if (all_draft and self.k_cap is None) else 0)
        return IterationMix(q, self.ctx, logits, dk, is_pf, self.tree, n_prefill=n_pf,
                            drafter_on=bool(drafter_on) if eng.catchup else (kd > 0), catchup=catchup,
                            n_spec=kd, uniform_q=uq)


def _at_least(hist: np.ndarray) -> np.ndarray:
    """out[j] = number of cycles with a value >= j (so out[j + 1] counts position j + 1 reached)."""
    return np.cumsum(hist[::-1])[::-1].copy()


def _step_arrays(logs: list) -> dict:
    """The replicas' step logs (tuples of STEP_COLUMNS) as one array per column, replica by replica
    (every value is a float64-exact number: times, counts far below 2^53, flags)."""
    rows = [row for log in logs for row in log]
    if not rows:
        return {name: np.zeros(0, dtype=dt) for name, dt in STEP_COLUMNS}
    table = np.array(rows, dtype=np.float64)
    return {name: (table[:, j].copy() if dt == np.float64 else table[:, j].astype(dt))
            for j, (name, dt) in enumerate(STEP_COLUMNS)}


def run_engine(workload: Workload, config: EngineConfig, cost: Callable[[IterationMix], float], *, policy,
               acceptance=(), speculative: bool = True, seed_seq: np.random.SeedSequence | None = None,
               record_tokens: bool = False, until_s: float | None = None, tree_size: int = 0,
               acceptance_factor: Callable[[np.ndarray], np.ndarray] | None = None, fleet: FleetSpec | None = None,
               drafter_cache: str = "none") -> EngineRun:
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
    (EAGLE/MTP: the accepted drafts are run again with the target's features)."""
    seed_seq = seed_seq if seed_seq is not None else np.random.SeedSequence(0)
    fleet = fleet if fleet is not None else FleetSpec()
    keys = request_keys(seed_seq, workload.n_requests)
    acceptance = np.asarray(acceptance, dtype=float)
    spec = speculative and policy.k_reserved > 0
    if spec and acceptance.size == 0:
        raise SpecError("serving engine: speculation needs an acceptance rate (alpha, tau or per-position rates)")
    draws = None
    if (spec and acceptance.size and np.all(acceptance == acceptance.ravel()[0]) and acceptance_factor is None
            and int(workload.output_tokens.sum()) + workload.n_requests <= MAX_TABULATED_DRAWS):
        draws = _Draws(keys, workload.output_tokens, float(acceptance.ravel()[0]), int(policy.k_reserved))
    env = simpy.Environment()
    sh = _Shared(workload, env, keys=keys, draws=draws, fleet=fleet, record_tokens=record_tokens)
    for rid, role in enumerate(fleet.roles()):
        eng = _Engine(sh, rid, role, config, cost, policy=policy, acceptance=acceptance, speculative=speculative,
                      tree_size=tree_size, acceptance_factor=acceptance_factor, drafter_cache=drafter_cache)
        sh.engines.append(eng)
        sh.outstanding.append(0)
        sh.link_free_at.append(0.0)
    sh.entry = [e for e in sh.engines if e.role != "decode"]
    sh.decoders = [e for e in sh.engines if e.role == "decode"]
    for eng in sh.engines:
        env.process(eng.process(env))
    sh.start()
    env.run(until=until_s)
    end = float(env.now) if until_s is None else float(until_s)
    for eng in sh.engines:
        eng.flush_running()
    return _result(sh, end)


def _result(sh: _Shared, end_at_s: float) -> EngineRun:
    engines = sh.engines
    e0 = engines[0]
    tok = None
    if sh.record_tokens:
        if sh.tok_log:
            tok = tuple(np.concatenate(c) for c in zip(*sh.tok_log))
        else:
            tok = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
    acc_hist = sum(e.acc_hist for e in engines)
    draft_hist = sum(e.draft_hist for e in engines)
    return EngineRun(arrival_at_s=sh.arrival, first_token_at_s=sh.first, finish_at_s=sh.finish,
                     prompt_tokens=sh.prompt, output_tokens=sh.out, emitted_tokens=sh.emitted,
                     status=sh.status, reject_reason=sh.reason, n_preemptions=sh.n_preempt,
                     n_draft_tokens=sh.req_draft, n_accepted_tokens=sh.req_acc,
                     n_spec_steps=sh.req_spec_steps, steps=_step_arrays([e.log for e in engines]),
                     accepted_per_position=_at_least(acc_hist)[1: e0.k_res + 1],
                     drafted_per_position=_at_least(draft_hist)[1: e0.k_res + 1],
                     n_blocks=e0.cfg.n_blocks, block_size_tokens=e0.cfg.block_size_tokens,
                     end_at_s=end_at_s, token_log=tok, replica=sh.replica, prefill_replica=sh.prefill_replica,
                     prefix_hit_tokens=sh.hit_tokens, priority=sh.prio, n_swaps=sh.n_swaps,
                     roles=tuple(e.role for e in engines),
                     prefix_evicted_units=sum(e.prefix.n_evicted_units for e in engines if e.prefix is not None),
                     n_swap_fallbacks=sum(e.n_swap_fallbacks for e in engines))
