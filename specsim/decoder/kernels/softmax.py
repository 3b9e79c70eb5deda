"""The softmax of one attention row in three IEEE-step kernels: the running maximum, exp(score - max) and
the sum of the keys the query sees, each in a fixed order so that a verify pass and a decode step give
the same bits (see `attention`).

Dimension legend
  n_rows  keys of the row: n_shared rows every query sees, then W new (or tree) rows behind the mask
  W       the new rows;  seen (W,) bool: which of them this query sees
  part    (16,) f32 scratch: one partial per lane;  bits (>= n_rows,) i32 scratch
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .expf import EXP_LO, exp_parts, two_to_the_bits
from .host import EXACT


@njit(**EXACT)
def row_max(row, lo, hi, mx, part):
    # row (>= hi,) f32: max(mx, row[lo:hi]); part (16,) scratch. Sixteen independent lane maxima (they
    # vectorize), then the lanes: a maximum is exact, so the grouping cannot change it
    for lane in range(16):
        part[lane] = mx
    n16 = lo + (hi - lo) - (hi - lo) % 16
    for t0 in range(lo, n16, 16):
        for lane in range(16):
            part[lane] = max(part[lane], row[t0 + lane])
    for t in range(n16, hi):
        part[0] = max(part[0], row[t])
    for lane in range(1, 16):
        mx = max(mx, part[lane])
    return max(mx, part[0])


@njit(**EXACT)
def row_sum(row, n_shared, n_rows, seen, part):
    # row (>= n_rows,) f32; seen (W,) bool: which of rows [n_shared, n_rows) the query sees; part (16,) scratch.
    # The k-th key the query sees (in ascending slot order) goes into lane k % 16, in order; then the lanes by
    # a fixed tree. Counting only the keys it sees makes the sum the same whether its earlier tokens sit in
    # the shared rows (a decode step) or among a tree's rows (a verify pass, with siblings masked out).
    for lane in range(16):
        part[lane] = np.float32(0.0)
    n16 = n_shared - n_shared % 16
    for t0 in range(0, n16, 16):
        for lane in range(16):
            part[lane] += row[t0 + lane]
    k = n16
    for t in range(n16, n_rows):
        if t < n_shared or seen[t - n_shared]:
            part[k % 16] += row[t]
            k += 1
    w = 8
    while w >= 1:
        for lane in range(w):
            part[lane] += part[lane + w]
        w //= 2
    return part[0]


@njit(**EXACT)  # IEEE steps: the vector body and the tail give the same bits
def exp_row(row, mx, n, bits):
    # row (>= n,) f32: row[t] = exp(row[t] - mx) for t < n; 0 at or below -87 (a masked key's -inf: an exact 0).
    # bits (>= n,) i32 scratch. exp(x) = e^r 2^k (`expf`), 2^k (k in [-126, 0]) from its float32 bits, so
    # both loops vectorize and the scaling is one exact multiply
    for t in range(n):
        d = row[t] - mx
        row[t], k = exp_parts(max(d, EXP_LO))
        bits[t] = two_to_the_bits(k) if d > EXP_LO else np.int32(0)
    two_k = bits[:n].view(np.float32)
    for t in range(n):
        row[t] = row[t] * two_k[t]
