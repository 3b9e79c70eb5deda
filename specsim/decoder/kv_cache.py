"""KV cache: contiguous per layer, with a length pointer.

Linear rollback truncates (moves the pointer); tree verification gathers the accepted path's rows
and copies them into contiguous slots (the seed's "KV-cache surgery")."""
from __future__ import annotations

import numpy as np

from ..errors import SpecError


class KVCache:
    """k, v: float32 (n_layer, G, C, E); `length` rows [0, length) are real tokens."""

    def __init__(self, n_layer: int, n_kv_head: int, capacity: int, head_dim: int):
        self.k = np.zeros((n_layer, n_kv_head, capacity, head_dim), np.float32)  # (L, G, C, E)
        self.v = np.zeros_like(self.k)  # (L, G, C, E)
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.k.shape[2]

    def reserve(self, n_new: int) -> int:
        """Check room for n_new rows at the end; return the first slot."""
        if self.length + n_new > self.capacity:
            raise SpecError(f"KV cache: {self.length} + {n_new} tokens exceed the context of "
                            f"{self.capacity} tokens; shorten the prompt or the generation")
        return self.length

    def truncate(self, length: int) -> None:
        """Linear rollback: forget rows [length, ...)."""
        if not 0 <= length <= self.length:
            raise SpecError(f"KV cache: cannot truncate to {length}, it holds {self.length}")
        self.length = length

    def compact(self, start: int, slots: np.ndarray) -> None:
        """Keep rows [0, start) plus the rows `slots` (int64 (A,), ascending, all >= start), copied to
        [start, start + A); forget the rest. The gather-copy of tree verification."""
        slots = np.asarray(slots, dtype=np.int64)
        dest = start + np.arange(slots.size)
        if slots.size and np.any(slots < dest):
            raise SpecError("KV cache: compaction slots must be ascending and at or after `start`")
        moved = slots != dest
        if np.any(moved):
            self.k[:, :, dest[moved]] = self.k[:, :, slots[moved]]
            self.v[:, :, dest[moved]] = self.v[:, :, slots[moved]]
        self.length = start + slots.size

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """Views of the real rows: (L, G, length, E) each."""
        return self.k[:, :, :self.length], self.v[:, :, :self.length]
