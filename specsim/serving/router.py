"""Routing requests to replicas: pure functions of what the router sees, tested without simpy.

A fleet runs N replicas of one engine, each with its own KV cache, prefix cache, queues and gating
state; the router picks the replica of each arriving request (and, in a disaggregated layout, the
prefill replica and then the decode replica). Policies:

- `round_robin`: replica i mod N.
- `least_outstanding`: the replica with the fewest requests assigned and not yet finished (waiting,
  running or swapped there); ties to the lowest index.
- `prefix_affinity`: cache-aware routing as the vLLM router and the SGLang gateway do it by default
  (their `cache_aware` policy; defaults as documented for vllm-router v0.1.15 and sglang-gateway
  v0.3.1 in GPUStack's operator docs, "Model Deployment Routing"): the replica whose prefix cache
  holds the longest leading part of the request's block chain, when that part is at least
  `cache_threshold` (0.3) of the chain; below it, the replica with the smallest cache (their "smallest
  record", so new prefixes spread over the fleet; ties to the least loaded); and the least loaded
  replica whenever the fleet is imbalanced — the busiest replica has more than
  `balance_abs_threshold` (64) requests over the idlest and more than `balance_rel_threshold` (1.5)
  times as many. Their routers mirror each worker's cache in a radix tree; we read the replica's own
  prefix cache, which that tree mirrors. Without prefix structure it is least_outstanding.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..specs import checks as C
from ..specs.serving_tables import (DEFAULT_BALANCE_ABS_THRESHOLD, DEFAULT_BALANCE_REL_THRESHOLD,
                                    DEFAULT_CACHE_THRESHOLD, ROUTERS)


@dataclass(frozen=True, slots=True, kw_only=True)
class RouterConfig:
    kind: str = "least_outstanding"
    cache_threshold: float = DEFAULT_CACHE_THRESHOLD
    balance_abs_threshold: int = DEFAULT_BALANCE_ABS_THRESHOLD
    balance_rel_threshold: float = DEFAULT_BALANCE_REL_THRESHOLD

    def __post_init__(self) -> None:
        w = "[fleet]"
        C.choice(w, "router", self.kind, ROUTERS)
        C.fraction(w, "cache_threshold", self.cache_threshold)
        C.integer(w, "balance_abs_threshold", self.balance_abs_threshold, lo=0, unit="requests")
        C.number(w, "balance_rel_threshold", self.balance_rel_threshold, lo=1.0, hi=1e6, unit="a ratio")


def least_loaded(outstanding) -> int:
    """The replica with the fewest outstanding requests (lowest index on ties)."""
    return int(np.argmin(outstanding))


def imbalanced(outstanding, cfg: RouterConfig) -> bool:
    """The cache-aware routers' imbalance test: max − min > abs threshold and max > rel × min."""
    hi, lo = max(outstanding), min(outstanding)
    return hi - lo > cfg.balance_abs_threshold and hi > cfg.balance_rel_threshold * lo


def prefix_choice(outstanding, matched_units, chain_units: int, cfg: RouterConfig, cache_sizes=None) -> int:
    """prefix_affinity's pick from each replica's outstanding count, cached leading units of the
    request's chain and cache size (units held; None: all equal)."""
    if chain_units == 0 or imbalanced(outstanding, cfg):
        return least_loaded(outstanding)
    best = max(matched_units)
    if best == 0 or best / chain_units < cfg.cache_threshold:
        sizes = cache_sizes if cache_sizes is not None else [0] * len(outstanding)
        return min(range(len(outstanding)), key=lambda i: (sizes[i], outstanding[i], i))
    # the longest match; among equals, the least loaded
    cands = [i for i, m in enumerate(matched_units) if m == best]
    return min(cands, key=lambda i: (outstanding[i], i))


class Router:
    """The routing state of one run (the round-robin counter)."""

    def __init__(self, cfg: RouterConfig):
        self.cfg = cfg
        self.next_rr = 0

    def pick(self, outstanding, *, chain=None, caches=None) -> int:
        """A replica index for a request with block chain `chain` (None: no prefix structure), given the
        outstanding counts and the candidate replicas' prefix caches (same order)."""
        kind = self.cfg.kind
        if kind == "round_robin":
            i = self.next_rr % len(outstanding)
            self.next_rr += 1
            return i
        if kind == "prefix_affinity" and chain is not None and caches is not None and len(chain):
            matched = [c.match(chain) if c is not None else 0 for c in caches]
            sizes = [len(c.units) if c is not None else 0 for c in caches]
            return prefix_choice(outstanding, matched, len(chain), self.cfg, sizes)
        return least_loaded(outstanding)


__all__ = ["ROUTERS", "RouterConfig", "Router", "least_loaded", "imbalanced", "prefix_choice"]
