"""Prefix caching for one replica: vLLM's automatic prefix caching, at the granularity of a workload's
hashed blocks.

A workload with prefix structure names, for each request, a chain of hash ids: id j stands for the
j-th block of `U` tokens (`Workload.hash_block_tokens`: 512 in the Mooncake trace) together with
everything before it, so two requests whose chains start with the same ids share that prefix. The
cache keeps, per id, the KV blocks of that unit (U / block_size engine blocks; a shorter last unit
keeps its full engine blocks only, as vLLM caches full blocks only) with a reference count:

- a request admitted with a chain whose leading ids are cached starts its prefill after them (the
  hit; at least one prompt token is always computed, so a prompt fully cached keeps its last unit
  out of the hit) and references those units;
- when a running sequence has computed a whole unit of its own chain, the unit is published: its
  blocks move from the sequence's private blocks into the cache (if another sequence published the
  same id meanwhile, the private copy is freed and the cached one referenced — vLLM's block
  deduplication);
- a unit nobody references stays cached but evictable (vLLM's evictor): its blocks count as free
  for allocation, and they are reclaimed least recently used first when free blocks run out.

The engine keeps `used_blocks` (blocks held by running sequences, each shared unit once) and the
cache's `evictable_blocks`; used + evictable never exceeds the replica's blocks. Pure Python over
dicts; the engine calls it on admissions, publications and releases only, never per token.
"""
from __future__ import annotations

from collections import OrderedDict


class PrefixCache:
    """Cached units of one replica: id -> [references, engine blocks]; unreferenced units in LRU order."""

    __slots__ = ("units", "evictable", "evictable_blocks", "n_hit_queries", "n_evicted_units")

    def __init__(self) -> None:
        self.units: dict[int, list] = {}
        self.evictable: OrderedDict[int, int] = OrderedDict()  # id -> blocks, least recently used first
        self.evictable_blocks = 0
        self.n_evicted_units = 0

    def __contains__(self, unit: int) -> bool:
        return unit in self.units

    def match(self, chain) -> int:
        """How many leading ids of `chain` are cached."""
        n = 0
        units = self.units
        for u in chain:
            if int(u) not in units:
                break
            n += 1
        return n

    def acquire(self, unit: int) -> int:
        """Reference a cached unit; returns the blocks that leave the evictable pool (0 if it was in use)."""
        entry = self.units[unit]
        entry[0] += 1
        if entry[0] == 1:
            b = self.evictable.pop(unit)
            self.evictable_blocks -= b
            return b
        return 0

    def release(self, unit: int) -> int:
        """Drop one reference; returns the blocks that become evictable (0 while others hold it)."""
        entry = self.units[unit]
        entry[0] -= 1
        if entry[0] == 0:
            self.evictable[unit] = entry[1]
            self.evictable_blocks += entry[1]
            return entry[1]
        return 0

    def publish(self, unit: int, n_blocks: int) -> bool:
        """A sequence computed this unit: cache it with one reference (the publisher's). False when the
        id is already cached (the caller then frees its private copy and acquires the cached one)."""
        if unit in self.units:
            return False
        self.units[unit] = [1, int(n_blocks)]
        return True

    def evict(self, n_blocks: int) -> int:
        """Reclaim at least n_blocks from unreferenced units, least recently used first; returns the
        blocks reclaimed (less when the pool runs out)."""
        got = 0
        while got < n_blocks and self.evictable:
            unit, b = self.evictable.popitem(last=False)
            del self.units[unit]
            got += b
            self.n_evicted_units += 1
        self.evictable_blocks -= got
        return got


def unit_blocks(unit_index: int, covered_tokens: int, unit_tokens: int, block_size_tokens: int) -> int:
    """Engine blocks a unit keeps: its full blocks (a last unit shorter than U keeps fewer)."""
    start = unit_index * unit_tokens
    n_tok = min(unit_tokens, max(covered_tokens - start, 0))
    return n_tok // block_size_tokens


def hit_units(cache: PrefixCache, chain, *, covered_tokens: int, unit_tokens: int, block_size_tokens: int,
              prompt_tokens: int) -> tuple[int, int]:
    """(units, tokens) a request starting with `chain` finds cached: its leading cached units, their
    full blocks' tokens, dropping trailing units until at least one prompt token is left to compute
    (vLLM computes the last prompt token even on a full hit) and stopping at a unit that keeps less
    than a whole unit (a partial last unit ends the shared prefix)."""
    n = cache.match(chain)
    tokens = 0
    units = 0
    for j in range(n):
        b = unit_blocks(j, covered_tokens, unit_tokens, block_size_tokens)
        tokens += b * block_size_tokens
        units += 1
        if b * block_size_tokens < unit_tokens:
            break
    while units and tokens > prompt_tokens - 1:
        units -= 1
        tokens -= unit_blocks(units, covered_tokens, unit_tokens, block_size_tokens) * block_size_tokens
    return units, tokens


__all__ = ["PrefixCache", "hit_units", "unit_blocks"]
