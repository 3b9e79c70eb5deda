"""Attention of the M query tokens of a pass over a kv cache, with a mask for the new (or tree) rows:
fused per kv head, its R = M * H/G query rows in register blocks (`attention_blocks`), the softmax in
fixed orders (`softmax`).

Dimension legend
  M    query tokens in this pass;  H  query heads;  G  key/value heads;  E  head dim
  C    KV-cache capacity (slots);  W  cache rows seen through the mask (the new or tree rows)
  R    attention rows of one kv head: M * H/G (query m, head g * H/G + i is row m * H/G + i)
  T    worker threads, each one chunk of the G * R rows

The softmax sum puts the k-th key a query sees into lane k % 16 (then a fixed tree over the lanes), and
the values take the shared rows in tiles, then the new rows the query sees one by one in slot order: so
a verify pass reproduces each single decode step bit for bit, a tree node's row too, whose ancestors
sit among masked siblings in the pass but in the shared rows when it is decoded. Keys go in tiles of
TK, each read once for every row of the thread's share of the kv head. A row's arithmetic is the same
whatever M, T and the other rows are.
"""
from __future__ import annotations

import math

import numpy as np
from numba import get_num_threads, njit, prange

from .attention_blocks import blocks, generic_blocks
from .host import ORDERED
from .softmax import exp_row, row_max, row_sum

TK = 64  # keys per tile: 16 KB of keys or values at E = 64, in L1 while every row of the block uses them


@njit(**ORDERED)
def _head(out, s, qs, acc, part, bits, q, k, v, g, r0, r1, n_shared, mask, scale):
    # one thread's rows [r0, r1) of kv head g. s (R, >= n_rows + 2): scores, then weights; qs, acc (R, E)
    # scratch: the rows' queries gathered, their outputs; part (16,) f32, bits (>= n_rows,) i32 scratch; q (M, H, E);
    # k, v (C, E); mask (M, W)
    group, e = s.shape[0] // q.shape[0], q.shape[2]
    blocked = e % 16 == 0 and e <= 128
    for r in range(r0, r1):
        qs[r, :] = q[r // group, g * group + r % group, :]
        acc[r, :] = 0.0
    _scores(s, qs, part, k, r0, r1, group, n_shared, mask, scale, blocked)
    _softmax(s, part, bits, r0, r1, group, n_shared, mask)
    _values(acc, s, v, r0, r1, group, n_shared, mask, blocked)
    for r in range(r0, r1):
        out[r // group, g * group + r % group, :] = acc[r, :]


@njit(**ORDERED)
def _scores(s, qs, part, k, r0, r1, group, n_shared, mask, scale, blocked):
    # s (R, >= n_rows + 2): rows [r0, r1) get q . k times scale for every key, -inf where the mask hides a new
    # row, and their running maximum in column top = s.shape[1] - 2; qs (R, E); part (16,); k (C, E);
    # mask (M, W). A tile of keys for every row, then its scale, mask and maximum
    top, n_rows = s.shape[1] - 2, n_shared + mask.shape[1]
    for t0 in range(0, n_rows, TK):
        t1 = min(t0 + TK, n_rows)
        if blocked:
            blocks(0, s, qs, k, r0, r1, t0, t1)
        else:
            generic_blocks(0, s, qs, k, r0, r1, t0, t1)
        ts = min(t1, n_shared)
        for r in range(r0, r1):
            m, sr = r // group, s[r]
            mx = sr[top] if t0 > 0 else np.float32(-np.inf)
            for t in range(t0, ts):
                sr[t] = sr[t] * scale
            mx = row_max(sr, t0, ts, mx, part)
            for t in range(max(t0, n_shared), t1):
                if mask[m, t - n_shared]:
                    sr[t] = sr[t] * scale
                    mx = max(mx, sr[t])
                else:
                    sr[t] = np.float32(-np.inf)
            sr[top] = mx


@njit(**ORDERED)
def _softmax(s, part, bits, r0, r1, group, n_shared, mask):
    # s (R, >= n_rows + 2): rows [r0, r1) from scores to weights: exp, the sum by lanes of the keys the row's
    # query sees and a fixed tree, weights = exp / sum; part (16,), bits (>= n_rows,) scratch; mask (M, W)
    top, n_rows = s.shape[1] - 2, n_shared + mask.shape[1]
    for r in range(r0, r1):
        sr = s[r]
        exp_row(sr, sr[top], n_rows, bits)
        inv = np.float32(1.0) / row_sum(sr, n_shared, n_rows, mask[r // group], part)
        for t in range(n_rows):
            sr[t] = sr[t] * inv


@njit(**ORDERED)
def _values(acc, s, v, r0, r1, group, n_shared, mask, blocked):
    # acc (R, E) += the weights s (R, >= n_rows) times v (C, E): the shared rows in tiles for every row, keys in
    # order; then each row's own rows among the new ones, only those its query sees, in order
    n_rows = n_shared + mask.shape[1]
    for t0 in range(0, n_shared, TK):
        if blocked:
            blocks(1, acc, s, v, r0, r1, t0, min(t0 + TK, n_shared))
        else:
            generic_blocks(1, acc, s, v, r0, r1, t0, min(t0 + TK, n_shared))
    for r in range(r0, r1):
        m = r // group
        for t in range(n_shared, n_rows):
            if mask[m, t - n_shared]:
                if blocked:
                    blocks(1, acc, s, v, r, r + 1, t, t + 1)
                else:
                    generic_blocks(1, acc, s, v, r, r + 1, t, t + 1)


@njit(parallel=True, **ORDERED)
def _attention(out, scores, qs, acc, part, bits, q, k_cache, v_cache, n_shared, mask, n_c):
    # as `attention`; qs, acc (G, >= R, E), part (n_c, 16) f32 and bits (n_c, >= n_rows) i32 scratch; n_c: chunks of
    # the G * R rows, one per thread
    n_g, n_rows, group = k_cache.shape[0], n_shared + mask.shape[1], q.shape[1] // k_cache.shape[0]
    rows, scale = q.shape[0] * group, np.float32(1.0 / math.sqrt(q.shape[2]))
    if (out.shape != q.shape or v_cache.shape != k_cache.shape or n_g < 1 or q.shape[1] % n_g != 0
            or k_cache.shape[2] != q.shape[2] or mask.shape[0] != q.shape[0] or n_shared < 0
            or n_rows > k_cache.shape[1] or scores.shape[0] < n_g or scores.shape[1] < rows
            or scores.shape[2] < n_rows + 2 or n_c < 1 or qs.shape[0] < n_g or qs.shape[1] < rows
            or qs.shape[2] != q.shape[2] or acc.shape != qs.shape or part.shape[0] < n_c or part.shape[1] != 16
            or bits.shape[0] < n_c or bits.shape[1] < n_rows):
        raise ValueError("attention: shapes of out, scores, q, the caches and the mask do not agree")
    for c in prange(n_c):
        lo, hi = c * n_g * rows // n_c, (c + 1) * n_g * rows // n_c  # rows [lo, hi) of all kv heads
        for g in range(lo // rows, min(n_g, (hi + rows - 1) // rows)):
            r0, r1 = max(lo - g * rows, 0), min(hi - g * rows, rows)
            _head(out, scores[g, :rows], qs[g], acc[g], part[c], bits[c], q, k_cache[g], v_cache[g], g, r0, r1,
                  n_shared, mask, scale)


_ATTN_SCRATCH: dict = {}


def attention(out, scores, q, k_cache, v_cache, n_shared, mask):
    """out (M, H, E) f32; scores (G, >= M * H/G, >= n_shared + W + 2) f32 scratch; q (M, H, E);
    k_cache, v_cache (G, C, E); n_shared: cache rows [0, n_shared) seen by every query;
    mask (M, W) bool: query m sees row n_shared + w.
    Fused per kv head: the scores of all R = M * H/G query rows (key tiles outer, register blocks of
    rows), a softmax per row, then the values (tiles outer, register blocks of rows). The G * R rows,
    kv head major, are cut into T equal chunks, one per thread: a thread reads each key and value of a
    kv head once for all its rows of that head. A row's arithmetic is the same whatever M, T and the
    other rows are (see the module docstring)."""
    n_c = get_num_threads()
    g, rows, e = k_cache.shape[0], q.shape[0] * (q.shape[1] // max(k_cache.shape[0], 1)), q.shape[2]
    key = (g, rows, e, n_c, k_cache.shape[1])
    scratch = _ATTN_SCRATCH.get(key)
    if scratch is None:
        if len(_ATTN_SCRATCH) > 32:
            _ATTN_SCRATCH.clear()
        scratch = _ATTN_SCRATCH[key] = (np.zeros((g, rows, e), np.float32), np.zeros((g, rows, e), np.float32),
                                        np.zeros((n_c, 16), np.float32), np.zeros((n_c, k_cache.shape[1]), np.int32))
    _attention(out, scores, *scratch, q, k_cache, v_cache, n_shared, mask, n_c)
