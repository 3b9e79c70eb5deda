"""vLLM v0's batching policy for one replica, without time and without simpy: `Scheduler.plan`.

Each iteration the scheduler decides, in vLLM v0's order (`vllm/core/scheduler.py`):
1. priority preemption (`scheduling = "priority"`): while the best waiting request cannot be admitted
   and the lowest-priority running one ranks below it, that one is preempted
   (`_schedule_priority_preemption`);
2. without chunked prefill, waiting prefills first, in a prefill-only batch; with chunked prefill and
   `mixed_prefill = False` (SGLang's order, `Scheduler.get_next_batch_to_run`: "Run prefill first if
   possible"), a prefill-only batch too whenever one can be formed — the rest of a prompt part-way
   through its prefill, then waiting requests admitted as in 5, each taking what is left of the budget
   (chunked) — while the running decodes wait; an iteration with nothing to prefill decodes;
3. the running sequences, in order, against the token budget `max_num_batched_tokens`: a decode takes
   its `slots` (its last token and the K drafts it may verify; M for a tree of M nodes), an
   unfinished prefill the rest of its prompt or what is left of the budget (chunked prefill); each
   decode holds blocks for its cache plus its slots. When the free blocks cannot cover that, the last
   running sequence is preempted: by recompute (its blocks are freed; after this iteration's
   admissions it goes to the front of the waiting queue, to prefill its prompt and the tokens it
   emitted), or with `preemption_mode = "swap"` by swapping its blocks to host memory (recompute when
   the swap space is full, where vLLM aborts);
4. if nothing was preempted, swapped sequences come back in order while the blocks (keeping the
   watermark), the budget and max_num_seqs allow;
5. waiting requests are admitted in order while max_num_seqs, the budget and the free blocks allow
   (blocks for the whole (re)prefill, keeping `watermark_frac` of the cache free); the first that
   does not fit blocks the queue (head-of-line). With prefix caching a request's prefill starts after
   the longest cached prefix of its chain.

`plan` mutates the running set, the queues and the block ledger as it goes (as vLLM's scheduler does)
and returns a `Plan`: the tokens each running row computes this iteration and what was admitted,
preempted and swapped. A request that could never fit alone is refused on arrival
(`rejection_reason`).
"""
from __future__ import annotations

import heapq
from collections import deque
from typing import Callable, NamedTuple

import numpy as np

from .blocks import BlockLedger, blocks_for_tokens
from .config import EngineConfig
from .requests import REJECT_BUDGET, REJECT_CACHE, REJECT_MAX_MODEL_LEN, REJECT_NONE, RequestTable
from .running import NEVER, RunningSet

_EMPTY = np.zeros(0, dtype=np.int64)
_EMPTY.flags.writeable = False


def _in_budget(need: np.ndarray, room: int) -> np.ndarray:
    """What each row in order gets of `room` tokens when it asks for `need`: all of it while the room
    lasts, then what is left, then nothing."""
    return np.clip(room - (np.cumsum(need) - need), 0, need)


class Plan:
    """One iteration's schedule.

    allot: (n_running,) tokens each running row computes (0: not scheduled this iteration); full:
    every row decodes with all its slots (the common case); n_scheduled: rows with tokens;
    admitted / swapped_in: requests that joined the running set, in order; preempted: (request,
    "recompute" | "swap") in order; prefix_hit_tokens: prompt tokens the admissions found cached;
    swap_blocks: blocks copied over the host link (out and in)."""

    __slots__ = ("allot", "full", "n_scheduled", "admitted", "preempted", "swapped_in", "prefix_hit_tokens",
                 "swap_blocks")

    def __init__(self) -> None:
        self.allot = _EMPTY
        self.full = False
        self.n_scheduled = 0
        # most iterations admit, preempt and swap nothing: the lists are made by the first entry
        self.admitted: tuple | list = ()
        self.preempted: tuple | list = ()
        self.swapped_in: tuple | list = ()
        self.prefix_hit_tokens = 0
        self.swap_blocks = 0

    @property
    def n_preempted(self) -> int:
        return len(self.preempted)

    def __repr__(self) -> str:
        return (f"Plan(allot={self.allot.tolist()}, full={self.full}, admitted={self.admitted}, "
                f"preempted={self.preempted}, swapped_in={self.swapped_in})")


class Swapped(NamedTuple):
    """A sequence whose blocks wait in host memory."""
    request: int
    prefill_tokens: int
    computed_tokens: int
    context_tokens: int
    drafter_tokens: int
    blocks: int


class WaitingQueue:
    """The waiting queue: FCFS (preempted requests go back to the front), or ordered by
    (priority, arrival, request) with priority scheduling."""

    def __init__(self, requests: RequestTable, by_priority: bool):
        self.requests = requests
        self.by_priority = by_priority
        self.q: deque | list = [] if by_priority else deque()

    def __len__(self) -> int:
        return len(self.q)

    def __bool__(self) -> bool:
        return bool(self.q)

    def push(self, i: int) -> None:
        if self.by_priority:
            heapq.heappush(self.q, self.requests.order_key(i))
        else:
            self.q.append(i)

    def push_front(self, i: int) -> None:
        if self.by_priority:
            heapq.heappush(self.q, self.requests.order_key(i))
        else:
            self.q.appendleft(i)

    def peek(self) -> int:
        return self.q[0][2] if self.by_priority else self.q[0]

    def pop(self) -> int:
        return heapq.heappop(self.q)[2] if self.by_priority else self.q.popleft()


class Admission(NamedTuple):
    """What admitting a waiting request takes."""
    prefill_tokens: int    # its (re)prefill
    computed_tokens: int   # already computed: a cached prefix, or a cache that arrived by transfer
    drafter_tokens: int    # the drafter's cached tokens
    blocks: int            # blocks in its table
    new_blocks: int        # blocks newly in use (evictable prefix units it references included)
    units: list            # prefix units it references
    shared_blocks: int     # their blocks


class Scheduler:
    """vLLM v0's policy over one replica's state (see the module docstring).

    slots: tokens a decode takes per iteration (1 + K reserved, or M for a tree); draw_start /
    draw_counter: a request's acceptance-stream position in and out of the running set
    (`streams.AcceptanceDraws.start_of` / `counters_of`); one_step_per_draw: tabulated draws (the
    cycles are counted from the draws). fast: take the common case (every row decoding, all their
    slots within the budget) in a few array operations; False runs the general path every iteration
    (the same plans)."""

    def __init__(self, config: EngineConfig, *, slots: int, requests: RequestTable, ledger: BlockLedger,
                 draw_start: Callable, draw_counter: Callable, one_step_per_draw: bool, fast: bool = True):
        self.cfg = config
        self.slots = slots
        self.requests = requests
        self.ledger = ledger
        self.draw_start = draw_start
        self.draw_counter = draw_counter
        self.one_step_per_draw = one_step_per_draw
        self.fast = fast
        self.by_priority = config.scheduling == "priority"
        self.max_blocks_alone = config.n_blocks - config.watermark_blocks
        self._all_slots = np.full(config.max_num_seqs + 1, slots, dtype=np.int64)
        self._all_slots.flags.writeable = False

    # -- arrival
    def rejection_reason(self, i: int) -> int:
        """Why request i can never be served alone (REJECT_*; REJECT_NONE if it can): its prompt +
        output + reserved slots need more blocks than the cache minus the watermark, or more tokens
        than max_model_len, or, without chunked prefill, more than the token budget (a recompute
        prefills both in one iteration)."""
        cfg = self.cfg
        total = int(self.requests.prompt_tokens[i] + self.requests.output_tokens[i])
        if blocks_for_tokens(total + self.slots - 1, cfg.block_size_tokens) > self.max_blocks_alone:
            return REJECT_CACHE
        if cfg.max_model_len and total > cfg.max_model_len:
            return REJECT_MAX_MODEL_LEN
        if not cfg.chunked_prefill and total > cfg.max_num_batched_tokens:
            return REJECT_BUDGET
        return REJECT_NONE

    # -- one iteration
    def plan(self, running: RunningSet, waiting: WaitingQueue, swapped: deque) -> Plan:
        cfg = self.cfg
        budget = cfg.max_num_batched_tokens
        plan = Plan()
        if self.by_priority and waiting and running.n:
            self._priority_preemption(running, waiting, swapped, plan)
        if cfg.chunked_prefill and not cfg.mixed_prefill and not swapped and (
                waiting or (running.n and not running.all_decoding)):
            if self._prefill_first(running, waiting, budget, plan):
                return plan
        if not cfg.chunked_prefill and waiting and not swapped:
            # vLLM v0 without chunked prefill: waiting prefills first, in a prefill-only batch
            if self._admit(running, waiting, budget, plan):
                if self.by_priority:
                    self._sort(running)
                # only the admitted prefills run (everything running before is decoding); a cache that
                # arrived by transfer has nothing to prefill and decodes with the others below
                allot = np.where(running.computed_tokens < running.prefill_tokens,
                                 running.prefill_tokens - running.computed_tokens, 0)
                if allot.any():
                    plan.allot, plan.n_scheduled = allot, int(np.count_nonzero(allot))
                    return plan
        n_before = len(plan.preempted)
        # requests preempted by recompute now rejoin the waiting queue's front after this iteration's
        # admissions (vLLM v0: waiting.extendleft(running_scheduled.preempted) after _schedule_prefills)
        recompute: list[int] = []
        allot = self._schedule_running(running, waiting, swapped, budget, plan, recompute)
        preempted_now = len(plan.preempted) > n_before
        n0 = running.n
        if not swapped and not waiting:
            for i in recompute:
                waiting.push_front(i)
            plan.allot = allot
            plan.n_scheduled = allot.size if plan.full else int(np.count_nonzero(allot))
            return plan
        used = int(np.add.reduce(allot)) if n0 else 0
        if swapped and not preempted_now:
            self._swap_in(running, swapped, budget - used, plan)
        if waiting and (cfg.chunked_prefill or not n0):
            self._admit(running, waiting, budget - used - (running.n - n0) * self.slots, plan)
        if running.n > n0:
            plan.full = False
            room = budget - used
            computed, prefill = running.computed_tokens[n0:], running.prefill_tokens[n0:]
            # a prefill takes the rest of its prompt; a decode (swapped back in, or a cache that arrived
            # by transfer) its slots, whose blocks it took when it joined
            need = np.where(computed >= prefill, self.slots, prefill - computed)
            new_allot = _in_budget(need, room)
            allot = np.concatenate([allot, new_allot])
            if self.by_priority:
                order = self._sort(running)
                if order is not None:
                    allot = allot[order]
        for i in recompute:
            waiting.push_front(i)
        plan.allot = allot
        plan.n_scheduled = allot.size if plan.full else int(np.count_nonzero(allot))
        return plan

    def _prefill_first(self, running: RunningSet, waiting: WaitingQueue, budget: int, plan: Plan) -> bool:
        """SGLang's prefill batch: the prompts part-way through their prefill continue, in order, then
        waiting requests are admitted, each taking what is left of the budget; the decoding rows get
        nothing this iteration. False (the plan left to the decode path) when nothing prefills. Blocks
        need no growth: a prefilling row holds blocks for its whole prompt from its admission."""
        n0 = running.n
        need = np.maximum(running.prefill_tokens - running.computed_tokens, 0) if n0 else _EMPTY
        allot = _in_budget(need, budget)
        used = int(np.add.reduce(allot)) if n0 else 0
        if waiting and budget - used > 0:
            self._admit(running, waiting, budget - used, plan)
        if running.n > n0:
            new = np.maximum(running.prefill_tokens[n0:] - running.computed_tokens[n0:], 0)
            room = budget - used
            allot = np.concatenate([allot, _in_budget(new, room)])
        if not allot.any():
            return False
        if self.by_priority:
            order = self._sort(running)
            if order is not None:
                allot = allot[order]
        plan.allot, plan.full = allot, False
        plan.n_scheduled = int(np.count_nonzero(allot))
        return True

    def _schedule_running(self, running: RunningSet, waiting: WaitingQueue, swapped: deque, budget: int,
                          plan: Plan, recompute: list) -> np.ndarray:
        """Token allotments for the running set (in order), preempting from the tail while the blocks
        run short."""
        bs = self.cfg.block_size_tokens
        slots = self.slots
        ledger = self.ledger
        plan.full = False
        while running.n:
            n = running.n
            if self.fast and running.all_decoding and n * slots <= budget:
                # the common case: every row decodes with all its slots; a row's blocks never exceed
                # what its context plus the slots need (contexts only grow), so the growth is >= 0.
                # Without shared prefixes the blocks in use are the rows' blocks, so the growth is
                # what the new tables need beyond them
                need = running.context_tokens + (slots + bs - 1)
                need //= bs
                if ledger.prefix is None:
                    extra = int(np.add.reduce(need)) - ledger.used_blocks
                    grow = None
                else:
                    grow = need
                    grow -= running.blocks
                    extra = int(np.add.reduce(grow))
                if extra <= ledger.n_blocks - ledger.used_blocks:
                    if extra:
                        ledger.take(extra)
                        if grow is None:
                            running.blocks[:] = need
                        else:
                            running.blocks += grow
                    plan.full = True
                    return self._all_slots[:n]
                self._preempt(running, waiting, swapped, n - 1, plan, recompute)
                continue
            decode = running.decoding()
            if decode.all():  # no prefill in progress
                if n * slots <= budget:
                    allot = self._all_slots[:n]
                    full = True
                else:
                    need = np.full(n, slots, dtype=np.int64)
                    allot = _in_budget(need, budget)
                    full = False
                hold = running.context_tokens + allot
            else:
                need = np.where(decode, slots, running.prefill_tokens - running.computed_tokens)
                allot = _in_budget(need, budget)
                hold = np.where(decode, running.context_tokens + allot, running.prefill_tokens)
                full = False
            grow = (hold + (bs - 1)) // bs - running.blocks
            np.maximum(grow, 0, out=grow)
            extra = int(np.add.reduce(grow))
            if extra <= ledger.n_blocks - ledger.used_blocks:
                if extra:
                    ledger.take(extra)
                    running.blocks += grow
                plan.full = full and self.fast
                return allot
            self._preempt(running, waiting, swapped, n - 1, plan, recompute)
        return _EMPTY

    def _preempt(self, running: RunningSet, waiting: WaitingQueue, swapped: deque, row: int, plan: Plan,
                 recompute: list | None = None) -> None:
        """Preempt a running row: swap its blocks to host memory (swap mode, room permitting) or drop
        them to recompute later, back at the front of the waiting queue (or, given `recompute`, listed
        there for the caller to put back)."""
        req, ledger = self.requests, self.ledger
        i = int(running.request[row])
        blocks = int(running.blocks[row])
        swap = self.cfg.preemption_mode == "swap"
        if swap and not ledger.swap_room(blocks):
            swap = False
            ledger.n_swap_fallbacks += 1
        running.write_back([row], req, self.draw_counter, one_step_per_draw=self.one_step_per_draw)
        ledger.release(running, row)
        if swap:
            swapped.append(Swapped(i, int(running.prefill_tokens[row]), int(running.computed_tokens[row]),
                                   int(running.context_tokens[row]), int(running.drafter_tokens[row]), blocks))
            ledger.swap_used_blocks += blocks
            plan.swap_blocks += blocks
            req.n_swaps[i] += 1
        else:
            req.n_preemptions[i] += 1
            if recompute is None:
                waiting.push_front(i)
            else:
                recompute.append(i)
        plan.preempted = [*plan.preempted, (i, "swap" if swap else "recompute")]
        running.drop(row)

    def admission(self, i: int) -> Admission:
        """What admitting waiting request i takes."""
        req, bs = self.requests, self.cfg.block_size_tokens
        prefill = int(req.prompt_tokens[i] + req.emitted_tokens[i])
        transferred = int(req.transferred_tokens[i])
        computed = drafter = transferred
        if transferred:
            drafter = int(req.transferred_drafter_tokens[i])
            prefill = transferred
        units: list = []
        shared = 0
        if self.ledger.prefix is not None and not transferred:
            units, hit = self.ledger.cached_prefix(req, i, prefill)
            if units:
                shared = hit // bs
                computed = drafter = hit
        # a cache that arrived by transfer decodes at once: its blocks cover the slots of its first decode
        blocks = -(-(prefill + (self.slots if transferred else 0)) // bs)
        new = blocks - shared
        if units:
            new += self.ledger.evictable_among(units)
        return Admission(prefill, computed, drafter, blocks, new, units, shared)

    def _admit(self, running: RunningSet, waiting: WaitingQueue, budget_left: int, plan: Plan) -> int:
        """Admit waiting requests in order; returns how many."""
        cfg, req, ledger = self.cfg, self.requests, self.ledger
        used = 0
        rows = []
        n_run = running.n
        while waiting and n_run < cfg.max_num_seqs and budget_left - used > 0:
            i = waiting.peek()
            a = self.admission(i)
            if not cfg.chunked_prefill and a.prefill_tokens - a.computed_tokens > budget_left - used:
                break
            if not ledger.can_take(a.new_blocks):
                break
            waiting.pop()
            publish_at = NEVER
            if ledger.prefix is not None:
                publish_at = ledger.reference(i, a.units, req)
            ledger.take(a.blocks - a.shared_blocks)
            transferred = bool(req.transferred_tokens[i])
            if not req.admitted_once[i]:
                req.admitted_once[i] = True
                req.prefix_hit_tokens[i] = 0 if transferred else a.computed_tokens
            if not transferred:
                plan.prefix_hit_tokens += a.computed_tokens
            req.transferred_tokens[i] = 0
            used += min(a.prefill_tokens - a.computed_tokens, budget_left - used)
            rows.append((i, a.prefill_tokens, a.computed_tokens, a.computed_tokens, a.blocks, a.drafter_tokens,
                         a.shared_blocks, publish_at))
            n_run += 1
        if rows:
            running.append(rows, req, self.draw_start)
            plan.admitted = [*plan.admitted, *(r[0] for r in rows)]
        return len(rows)

    def _swap_in(self, running: RunningSet, swapped: deque, budget_left: int, plan: Plan) -> int:
        """Bring swapped sequences back in order while blocks, budget and max_num_seqs allow."""
        cfg, ledger = self.cfg, self.ledger
        rows = []
        n_run = running.n
        while swapped and n_run < cfg.max_num_seqs and budget_left >= self.slots:
            s = swapped[0]
            decoding = s.computed_tokens >= s.prefill_tokens
            need = max(s.blocks, blocks_for_tokens(s.context_tokens + self.slots, cfg.block_size_tokens)) \
                if decoding else s.blocks
            if not ledger.can_take(need):
                break
            swapped.popleft()
            ledger.swap_used_blocks -= s.blocks
            plan.swap_blocks += s.blocks
            ledger.take(need)
            budget_left -= self.slots if decoding else min(s.prefill_tokens - s.computed_tokens, budget_left)
            if ledger.prefix is not None:  # back as private blocks: nothing left to publish
                ledger.private(s.request)
            rows.append((s.request, s.prefill_tokens, s.computed_tokens, s.context_tokens, need, s.drafter_tokens, 0,
                         NEVER))
            n_run += 1
        if rows:
            running.append(rows, self.requests, self.draw_start)
            plan.swapped_in = [*plan.swapped_in, *(r[0] for r in rows)]
        return len(rows)

    def _priority_preemption(self, running: RunningSet, waiting: WaitingQueue, swapped: deque, plan: Plan) -> None:
        """vLLM v0 `_schedule_priority_preemption`: while the best waiting request cannot be admitted
        and the lowest-priority running one ranks below it, preempt that one."""
        req, cfg = self.requests, self.cfg
        i = waiting.peek()
        key = req.order_key(i)
        while running.n:
            if req.order_key(int(running.request[-1])) <= key:
                break
            a = self.admission(i)
            if (a.prefill_tokens - a.computed_tokens > 0 and running.n < cfg.max_num_seqs
                    and self.ledger.can_take(a.new_blocks)):
                break
            self._preempt(running, waiting, swapped, running.n - 1, plan)

    def _sort(self, running: RunningSet) -> np.ndarray | None:
        """With priorities, keep the running set in (priority, arrival, request) order; returns the
        permutation applied (None when nothing moved)."""
        req = self.requests
        r = running.request
        order = np.lexsort((r, req.arrival_at_s[r], req.priority[r]))
        if np.array_equal(order, np.arange(r.size)):
            return None
        running.reorder(order)
        return order


__all__ = ["Admission", "Plan", "Scheduler", "Swapped", "WaitingQueue"]
