"""Arrivals and routing for a run: the arrival feed (an open trace or a closed loop of users), the
router that sends each request to a replica, completions, and the disaggregated handoff.

The dispatcher keeps one timer armed for the next arrival; each replica also asks it to route what
has arrived before it plans an iteration, so an arrival at the instant an iteration starts is seen
by it. In a disaggregated layout a prefill replica hands each request, after its first token, to a
decode replica with its prompt's cache, after the KV transfer time over the prefill replica's link.
The simpy environment is passed in (`env.timeout`); simpy itself is imported by the engine only.
"""
from __future__ import annotations

import heapq
import math

import numpy as np

from .fleet import FleetSpec
from .requests import RequestTable
from .router import Router
from .workloads import Workload


class OpenFeed:
    """Arrivals at the workload's own times."""

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

    def on_done(self, now: float) -> None:
        pass


class ClosedFeed:
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

    def on_done(self, now: float) -> None:
        if self.next_id < self.n:
            heapq.heappush(self.heap, (now + self.think, self.next_id))
            self.next_id += 1
            self.next_at = self.heap[0][0]


class Dispatcher:
    """Routes a workload's requests to the replicas of a fleet (see the module docstring).

    replicas: every replica, in id order (set by the engine); entry: those new requests go to;
    decoders: those a disaggregated handoff goes to; outstanding: requests each replica holds."""

    def __init__(self, workload: Workload, env, *, fleet: FleetSpec):
        self.env = env
        self.fleet = fleet
        self.router = Router(fleet.router)
        if workload.is_closed_loop:
            self.feed = ClosedFeed(workload.n_requests, workload.n_users, workload.think_time_s)
            arrivals = self.feed.arrival_at_s
        else:
            self.feed = OpenFeed(workload.arrival_at_s)
            arrivals = workload.arrival_at_s.copy()
        self.requests = RequestTable.from_workload(workload, arrivals)
        self.chains = workload if (workload.has_prefixes and fleet.router.kind == "prefix_affinity") else None
        self.replicas: list = []
        self.entry: list = []
        self.decoders: list = []
        self.outstanding: list = []
        self.link_free_at: list = []
        self.timer_at = math.inf
        self.token_log: list[tuple] = []  # (requests, first token index, count, at_s) per emission, in time order

    def add(self, replica) -> None:
        self.replicas.append(replica)
        self.outstanding.append(0)
        self.link_free_at.append(0.0)
        (self.decoders if replica.role == "decode" else self.entry).append(replica)

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
        """Route every request that has arrived by `now`."""
        if self.feed.next_at > now:
            return
        for i in self.feed.pop_until(now):
            self._route(int(i), now, self.entry)
        self._arm()

    def _route(self, i: int, now: float, pool: list) -> None:
        if len(pool) == 1:
            rep = pool[0]
        else:
            out = [self.outstanding[r.rid] for r in pool]
            chain = self.chains.hashes_of(i) if self.chains is not None else None
            rep = pool[self.router.pick(out, chain=chain, caches=[r.ledger.prefix for r in pool])]
        if rep.submit(i, now):
            self.outstanding[rep.rid] += 1
        else:  # refused on arrival: its user (closed loop) moves on
            self.rejected(now)

    # -- completions and handoffs
    def rejected(self, now: float) -> None:
        self.feed.on_done(now)
        self._arm()

    def done(self, now: float, replica) -> None:
        self.outstanding[replica.rid] -= 1
        self.feed.on_done(now)
        self._arm()

    def handoff(self, i: int, now: float, replica, *, drafter_tokens: int) -> None:
        """Disaggregated: request i's prompt is computed on prefill replica `replica`; send its cache."""
        req = self.requests
        self.outstanding[replica.rid] -= 1
        req.prefill_replica[i] = replica.rid
        tokens = int(req.prompt_tokens[i])
        start = max(now, self.link_free_at[replica.rid])
        dur = self.fleet.transfer_s(tokens)
        self.link_free_at[replica.rid] = start + (dur - self.fleet.kv_transfer_latency_s)
        req.transferred_tokens[i] = tokens
        req.transferred_drafter_tokens[i] = drafter_tokens
        ev = self.env.timeout(start + dur - now)
        ev.callbacks.append(lambda _ev, i=i: self._route(i, self.env.now, self.decoders))


__all__ = ["ClosedFeed", "Dispatcher", "OpenFeed"]
