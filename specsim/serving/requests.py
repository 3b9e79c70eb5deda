"""Per-request state of one run: what each request asked for and what happened to it, one array each.

A request lives on one replica at a time. While it runs, its counters travel in its row of the
replica's running set (`running.RunningSet`) and are written back here when it leaves (finished,
preempted, handed off), so an iteration never scatters into these arrays.
"""
from __future__ import annotations

import numpy as np

from .workloads import Workload

STATUS_DONE, STATUS_REJECTED, STATUS_UNFINISHED = 0, 1, 2
STATUS_NAMES = ("done", "rejected", "unfinished")
# why a request was refused on arrival (index 0: it was not)
REJECT_NONE, REJECT_CACHE, REJECT_MAX_MODEL_LEN, REJECT_BUDGET = 0, 1, 2, 3
REJECT_REASONS = ("", "larger than the whole KV cache", "longer than max_model_len",
                  "prompt + output longer than the token budget without chunked prefill")


class RequestTable:
    """Every request's inputs and outcome. Arrays have shape (n_requests,).

    Inputs: prompt_tokens, output_tokens, arrival_at_s (NaN until a closed loop releases it),
    priority (lower is served first). Outcome: first_token_at_s, finish_at_s (NaN if never),
    emitted_tokens, status (STATUS_*), reject_reason (REJECT_*), n_preemptions (by recompute),
    n_swaps (swapped out), n_draft_tokens, n_accepted_tokens, n_spec_steps (cycles that drafted),
    replica (where it was last served, -1 none), prefill_replica (disaggregated: where its prompt
    was computed), prefix_hit_tokens (prompt tokens found cached at its first admission).
    Between replicas: draw_counter (its acceptance stream's next draw), may_speculate (False once a
    sticky gate switched it off), admitted_once, transferred_tokens / transferred_drafter_tokens
    (a cache that arrived by transfer: the target's and the drafter's tokens in it, until admitted).
    chains: the workload when it has prefix chains (hashes_of, hashed_tokens), else None."""

    def __init__(self, *, prompt_tokens: np.ndarray, output_tokens: np.ndarray, arrival_at_s: np.ndarray,
                 priority: np.ndarray | None = None, chains: Workload | None = None):
        n = int(prompt_tokens.size)
        self.n = n
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.arrival_at_s = arrival_at_s
        self.priority = priority if priority is not None else np.zeros(n, dtype=np.int64)
        self.chains = chains
        self.first_token_at_s = np.full(n, np.nan)
        self.finish_at_s = np.full(n, np.nan)
        self.emitted_tokens = np.zeros(n, dtype=np.int64)
        self.status = np.full(n, STATUS_UNFINISHED, dtype=np.int8)
        self.reject_reason = np.zeros(n, dtype=np.int8)
        self.n_preemptions = np.zeros(n, dtype=np.int64)
        self.n_swaps = np.zeros(n, dtype=np.int64)
        self.n_draft_tokens = np.zeros(n, dtype=np.int64)
        self.n_accepted_tokens = np.zeros(n, dtype=np.int64)
        self.n_spec_steps = np.zeros(n, dtype=np.int64)
        self.draw_counter = np.zeros(n, dtype=np.uint64)
        self.may_speculate = np.ones(n, dtype=bool)
        self.replica = np.full(n, -1, dtype=np.int64)
        self.prefill_replica = np.full(n, -1, dtype=np.int64)
        self.prefix_hit_tokens = np.zeros(n, dtype=np.int64)
        self.admitted_once = np.zeros(n, dtype=bool)
        self.transferred_tokens = np.zeros(n, dtype=np.int64)
        self.transferred_drafter_tokens = np.zeros(n, dtype=np.int64)

    @classmethod
    def from_workload(cls, w: Workload, arrival_at_s: np.ndarray) -> "RequestTable":
        return cls(prompt_tokens=w.prompt_tokens, output_tokens=w.output_tokens, arrival_at_s=arrival_at_s,
                   priority=w.priority, chains=w if w.has_prefixes else None)

    def order_key(self, i: int) -> tuple:
        """Priority scheduling's order: (priority, arrival, request)."""
        return (int(self.priority[i]), float(self.arrival_at_s[i]), i)

    def reject(self, i: int, reason: int, now: float) -> None:
        self.status[i] = STATUS_REJECTED
        self.reject_reason[i] = reason
        self.finish_at_s[i] = now

    def finish(self, requests: np.ndarray, now: float) -> None:
        self.finish_at_s[requests] = now
        self.status[requests] = STATUS_DONE


__all__ = ["REJECT_REASONS", "RequestTable", "STATUS_DONE", "STATUS_NAMES", "STATUS_REJECTED", "STATUS_UNFINISHED"]
