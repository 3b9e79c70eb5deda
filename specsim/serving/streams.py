"""The acceptance streams: each request's own reproducible uniforms, and the accepted drafts they give.

Accepted counts come from a counter-based generator, SplitMix64 over (request key, draw counter): a
request's draws do not depend on which other requests share its batches or its replica, so changing
K, the gate or the fleet leaves every request's stream where it was. `AcceptanceDraws.sample` turns
one iteration's uniforms into accepted drafts per speculating sequence
(`speculation.acceptance.accepted_from_uniforms`): one uniform per cycle for an i.i.d. rate, one
per drafted position for per-position rates, the rates times a factor of each sequence's context
when acceptance moves with context.

For an i.i.d. rate that does not move, every draw a request can make is tabulated once
(`TabulatedDraws`): the same uniforms turned into min(geometric, K) up front, one byte each, and
looked up per cycle; the counts are exactly those `accepted_from_uniforms` gives.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..speculation.acceptance import accepted_from_uniforms

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_TO_UNIT = 1.0 / 9007199254740992.0  # 2^-53: the top 53 bits of a draw as a float in [0, 1)
MAX_TABULATED_DRAWS = 64_000_000  # one byte a draw: at most 64 MB


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser (Steele, Lea & Flood 2014), elementwise on uint64 arrays."""
    z = x + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def _unit(bits: np.ndarray) -> np.ndarray:
    return (bits >> np.uint64(11)).astype(np.float64) * _TO_UNIT


def stream_uniforms(keys: np.ndarray, counters: np.ndarray, width: int) -> np.ndarray:
    """Uniforms in [0, 1), shape (n, width): draw counters[i] + j of request i's SplitMix64 stream,
    whose state after c draws is keys[i] + c·γ (γ the golden-ratio increment), mixed once."""
    idx = counters[:, None] + np.arange(width, dtype=np.uint64)[None, :]
    return _unit(splitmix64(keys[:, None] + idx * _GOLDEN))


def request_keys(seed_seq: np.random.SeedSequence, n: int) -> np.ndarray:
    """One 64-bit stream key per request, from the acceptance SeedSequence."""
    base = seed_seq.generate_state(1, dtype=np.uint64)
    return splitmix64(base ^ np.arange(n, dtype=np.uint64))


class TabulatedDraws:
    """Accepted-draft counts per (request, draw) for an i.i.d. rate that does not move: the same
    stream_uniforms values, turned into min(geometric, k_max) once for every draw a request can make
    (a drafting cycle emits at least one token, so at most output_tokens + 1 draws), and looked up
    per cycle; min(g, K) for a row drafting K is exactly accepted_from_uniforms at K.

    offsets: (n_requests,) where request i's draws start in `g`; g: (sum of draws,) int8 counts."""

    def __init__(self, keys: np.ndarray, output_tokens: np.ndarray, alpha: float, k_max: int):
        per = output_tokens.astype(np.int64) + 1
        self.offsets = np.concatenate([[0], np.cumsum(per)[:-1]]).astype(np.int64)
        total = int(per.sum())
        g = np.empty(total, dtype=np.int8)  # K <= 64: a byte holds it
        chunk = 1 << 22
        owner = np.repeat(np.arange(output_tokens.size, dtype=np.int64), per)
        for s in range(0, total, chunk):
            o = owner[s:s + chunk]
            idx = (np.arange(s, min(s + chunk, total), dtype=np.int64) - self.offsets[o]).astype(np.uint64)
            u = _unit(splitmix64(keys[o] + idx * _GOLDEN))
            if alpha >= 1.0:
                g[s:s + chunk] = k_max
            elif alpha <= 0.0:
                g[s:s + chunk] = 0
            else:  # accepted_from_uniforms' inverse CDF, min(⌊log(1 − U) / log α⌋, K)
                x = np.log1p(-u)
                x /= np.log(np.full(8, alpha))[0]
                np.minimum(x, k_max, out=x)
                g[s:s + chunk] = x  # x >= 0, so the cast floors
        self.g = g


class AcceptanceDraws:
    """Accepted drafts per speculating sequence, from each request's own stream.

    keys: (n_requests,) stream keys; rates: (k_max,) conditional acceptance per draft position (all
    equal: an i.i.d. α); factor(context) -> (n,) multiplies the rates by a function of each
    sequence's cached context (None: acceptance does not move); table: the tabulated draws when the
    rate is i.i.d. and does not move (None: draw from the streams each cycle)."""

    def __init__(self, keys: np.ndarray, rates: np.ndarray, *, factor: Callable[[np.ndarray], np.ndarray] | None,
                 table: TabulatedDraws | None):
        self.keys = keys
        self.rates = rates
        self.iid_alpha = float(rates[0]) if rates.size and bool(np.all(rates == rates[0])) else None
        self.factor = factor
        self.table = table
        self.k_max = int(rates.size)

    def start_of(self, requests: np.ndarray, counters: np.ndarray) -> np.ndarray:
        """Where each request's next draw is, as the running set keeps it: its counter, plus its
        offset in the table when tabulated."""
        c = counters.astype(np.int64)
        return c + self.table.offsets[requests] if self.table is not None else c

    def counters_of(self, requests: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The inverse of start_of: each request's draw counter from its running position."""
        return positions - self.table.offsets[requests] if self.table is not None else positions

    def lookup(self, position: np.ndarray, rows, draft_k: np.ndarray, *, all_at_k_max: bool) -> np.ndarray:
        """Accepted drafts (n,) from the table for the sequences at `rows` of the running set,
        drafting draft_k (n,); their table positions (`position`, the running set's draw column) move
        on by one. all_at_k_max: every row drafts the full K (no cap needed)."""
        g = self.table.g[position[rows]].astype(np.int64)
        position[rows] += 1
        return g if all_at_k_max else np.minimum(g, draft_k)

    def sample(self, position: np.ndarray, rows, draft_k: np.ndarray, r: np.ndarray,
               context_tokens: np.ndarray) -> np.ndarray:
        """Accepted drafts (n,) for the sequences at `rows` of the running set (requests r (n,)),
        drafting draft_k (n,) over context_tokens (n,), from their streams; their stream positions
        (`position`) move on by the draws made."""
        if self.table is not None:
            return self.lookup(position, rows, draft_k, all_at_k_max=False)
        k = int(draft_k.max())
        f = None if self.factor is None else np.asarray(self.factor(context_tokens), dtype=np.float64)
        counters = position[rows].astype(np.uint64)
        if self.iid_alpha is not None:
            rates = np.full(r.size, self.iid_alpha) if f is None else np.clip(self.iid_alpha * f, 0.0, 1.0)
            u = stream_uniforms(self.keys[r], counters, 1)[:, 0]
            position[rows] += 1
        else:
            base = self.rates[None, :k]
            rates = np.broadcast_to(base, (r.size, k)) if f is None else np.clip(base * f[:, None], 0.0, 1.0)
            u = stream_uniforms(self.keys[r], counters, k)
            position[rows] += draft_k
        return accepted_from_uniforms(u, rates, draft_k)


__all__ = ["AcceptanceDraws", "MAX_TABULATED_DRAWS", "TabulatedDraws", "request_keys", "splitmix64", "stream_uniforms"]
