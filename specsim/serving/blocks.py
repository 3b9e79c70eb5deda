"""A replica's KV block ledger: the blocks in use, the prefix units shared between sequences, and the
host swap space.

`used_blocks` counts the blocks held by running sequences, each shared prefix unit once; the prefix
cache's unreferenced units are evictable and count as free (`prefix_cache.PrefixCache`), and are
reclaimed when the physically free blocks run short. The ledger also keeps, per running request,
the prefix units its block table references and how far along its chain it has published, and
publishes units as sequences complete them (vLLM's automatic prefix caching).
"""
from __future__ import annotations

import numpy as np

from .prefix_cache import PrefixCache, hit_units, unit_blocks
from .requests import RequestTable
from .running import NEVER, RunningSet

_PAST_CHAIN = 1 << 30  # a chain position past every chain: nothing more to publish


class BlockLedger:
    """n_blocks: the replica's KV blocks; watermark_blocks: kept free when admitting; prefix: the
    prefix cache (None without prefix caching); unit_tokens: tokens per prefix unit (the workload's
    hashed blocks); swap_space_blocks: host blocks for swapped sequences."""

    def __init__(self, *, n_blocks: int, block_size_tokens: int, watermark_blocks: int, prefix: PrefixCache | None,
                 unit_tokens: int, swap_space_blocks: int):
        self.n_blocks = n_blocks
        self.block_size_tokens = block_size_tokens
        self.watermark_blocks = watermark_blocks
        self.used_blocks = 0
        self.prefix = prefix
        self.unit_tokens = unit_tokens
        self.swap_space_blocks = swap_space_blocks
        self.swap_used_blocks = 0
        self.n_swap_fallbacks = 0
        self.units_of: dict[int, list] = {}   # request -> prefix unit ids its table references
        self.chain_pos: dict[int, int] = {}   # request -> units of its chain published or referenced

    @property
    def free_blocks(self) -> int:
        return self.n_blocks - self.used_blocks

    def can_take(self, n_blocks: int) -> bool:
        """Whether n_blocks more leave the watermark free (admission's rule)."""
        return self.n_blocks - self.used_blocks - n_blocks >= self.watermark_blocks

    def take(self, n_blocks: int) -> None:
        """n_blocks more in use; reclaim evictable prefix units if the physically free ones run short."""
        self.used_blocks += n_blocks
        if self.prefix is not None:
            short = self.used_blocks + self.prefix.evictable_blocks - self.n_blocks
            if short > 0:
                self.prefix.evict(short)

    def release(self, running: RunningSet, row: int) -> None:
        """Free a running row's blocks: its private ones, and its references to prefix units."""
        if self.prefix is None:
            self.used_blocks -= int(running.blocks[row])
            return
        self.used_blocks -= int(running.blocks[row] - running.shared_blocks[row])
        i = int(running.request[row])
        for u in self.units_of.pop(i, ()):
            self.used_blocks -= self.prefix.release(u)
        self.chain_pos.pop(i, None)

    # -- swap space
    def swap_room(self, n_blocks: int) -> bool:
        return self.swap_used_blocks + n_blocks <= self.swap_space_blocks

    # -- prefix units
    def cached_prefix(self, requests: RequestTable, i: int, prompt_tokens: int) -> tuple[list, int]:
        """(unit ids, tokens) of request i's chain found cached (at least one prompt token is left)."""
        chain = requests.chains.hashes_of(i)
        if not chain.size:
            return [], 0
        n_units, hit = hit_units(self.prefix, chain, covered_tokens=requests.chains.hashed_tokens(i),
                                 unit_tokens=self.unit_tokens, block_size_tokens=self.block_size_tokens,
                                 prompt_tokens=prompt_tokens)
        return [int(u) for u in chain[:n_units]], hit

    def evictable_among(self, units: list) -> int:
        """Blocks of these cached units that are evictable now (referencing them takes them)."""
        pref = self.prefix
        return sum(pref.units[u][1] for u in units if pref.units[u][0] == 0)

    def reference(self, i: int, units: list, requests: RequestTable) -> int:
        """Request i's table references these cached units; returns its publish_at_tokens."""
        for u in units:
            self.used_blocks += self.prefix.acquire(u)
        self.units_of[i] = units
        self.chain_pos[i] = len(units)
        return self.next_unit_end(requests, i, len(units))

    def private(self, i: int) -> None:
        """Request i is back with private blocks only (a swap-in): nothing left to publish."""
        self.units_of[i] = []
        self.chain_pos[i] = _PAST_CHAIN

    def next_unit_end(self, requests: RequestTable, i: int, j: int) -> int:
        """Tokens computed when request i's unit j is complete (NEVER past its chain)."""
        w = requests.chains
        n = int(w.block_hash_offsets[i + 1] - w.block_hash_offsets[i])
        if j >= n:
            return NEVER
        covered = w.hashed_tokens(i)
        if unit_blocks(j, covered, self.unit_tokens, self.block_size_tokens) == 0:
            return NEVER
        return min((j + 1) * self.unit_tokens, covered)

    def publish(self, running: RunningSet, rows: np.ndarray, requests: RequestTable) -> None:
        """Rows that completed units of their chain: put those units in the prefix cache (or, when
        another sequence put the same id there first, reference it and free the private copy)."""
        pref, bs = self.prefix, self.block_size_tokens
        for row in rows.tolist():
            i = int(running.request[row])
            chain = requests.chains.hashes_of(i)
            covered = requests.chains.hashed_tokens(i)
            computed = int(running.context_tokens[row])
            j = self.chain_pos[i]
            while j < chain.size and computed >= self.next_unit_end(requests, i, j):
                u = int(chain[j])
                b = unit_blocks(j, covered, self.unit_tokens, bs)
                if not pref.publish(u, b):
                    self.used_blocks += pref.acquire(u)
                    self.used_blocks -= b
                self.units_of[i].append(u)
                running.shared_blocks[row] += b
                j += 1
                if b * bs < self.unit_tokens:
                    j = _PAST_CHAIN  # a short unit ends what this chain can share
                    break
            self.chain_pos[i] = j
            running.publish_at_tokens[row] = self.next_unit_end(requests, i, j) if j < chain.size else NEVER

    @property
    def cached_blocks(self) -> int:
        """Blocks of unreferenced cached units (free, but holding reusable prefixes)."""
        return self.prefix.evictable_blocks if self.prefix is not None else 0


def blocks_for_tokens(tokens: int, block_size_tokens: int) -> int:
    return -(-int(tokens) // block_size_tokens)


__all__ = ["BlockLedger", "blocks_for_tokens"]
