"""The block matmuls' plain loops: one weight row (a lane of a group) against one Q8 activation row, and
a tile kernel made of them with the vector tile's signature. They run where the CPU has neither
AVX512-VNNI nor AVX2 (or with SPECSIM_DECODER_PLAIN=1, or NUMBA_DISABLE_JIT=1), and they are what the
tests hold the vector tiles to: the same exact integer block sums and the same epilogue order.

Dimension legend
  M    query rows;  N  output rows;  NB  blocks of 32 elements per row;  nb  = NB
  g    a group of 16 weight rows as `quant.pack` interleaves them;  l  a row's lane in its group (< 16)
  nv   lanes of the group that are real rows (< 16 in a matrix's last group)
Arrays of one group: qs (NB * 256,) u8 nibbles (Q4) or (NB * 512,) i8 (Q8_0); d, mn (NB * 16,) u16
float16 scale and min (Q4_0 and Q8_0 pass d again as mn and ignore it). One activation row: xq (>= K,)
i8, xd (>= NB,) f32 its block scales, xs (>= NB,) i32 its block sums.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .host import EXACT
from .quant import F16_LUT, GROUP


@njit(**EXACT)
def dot_q4_1(qs, d, mn, xq, xd, xs, nb, l):
    acc = np.float32(0.0)
    for b in range(nb):
        s = np.int32(0)
        for k in range(4):
            for j in range(4):
                q = np.int32(qs[b * 256 + k * 64 + l * 4 + j])
                s += (q & np.int32(15)) * np.int32(xq[b * 32 + 4 * k + j]) + (q >> np.int32(4)) * np.int32(xq[b * 32 + 16 + 4 * k + j])
        acc = acc + np.float32(s) * (F16_LUT[d[b * 16 + l]] * xd[b])
        acc = acc + F16_LUT[mn[b * 16 + l]] * (xd[b] * np.float32(xs[b]))  # m * sx
    return acc


@njit(**EXACT)
def dot_q4_0(qs, d, mn, xq, xd, xs, nb, l):
    acc = np.float32(0.0)
    for b in range(nb):
        s = np.int32(-8) * xs[b]
        for k in range(4):
            for j in range(4):
                q = np.int32(qs[b * 256 + k * 64 + l * 4 + j])
                s += (q & np.int32(15)) * np.int32(xq[b * 32 + 4 * k + j]) + (q >> np.int32(4)) * np.int32(xq[b * 32 + 16 + 4 * k + j])
        acc = acc + np.float32(s) * (F16_LUT[d[b * 16 + l]] * xd[b])
    return acc


@njit(**EXACT)
def dot_q8_0(qs, d, mn, xq, xd, xs, nb, l):
    acc = np.float32(0.0)
    for b in range(nb):
        s = np.int32(0)
        for c in range(8):
            for j in range(4):
                s += np.int32(qs[b * 512 + c * 64 + l * 4 + j]) * np.int32(xq[b * 32 + 4 * c + j])
        acc = acc + np.float32(s) * (F16_LUT[d[b * 16 + l]] * xd[b])
    return acc


ROW_DOTS = {"q4_1": dot_q4_1, "q4_0": dot_q4_0, "q8_0": dot_q8_0}


def plain_tile(row_dot, tm):
    """The plain loop behind the vector tile's signature, one query row and one lane at a time: out (M, N)
    f32 rows m0 .. m0 + tm - 1, lanes below nv of group g (not cached: a closure)."""
    @njit(cache=False, fastmath=False, nogil=True)
    def dot(out, g, qs, d, mn, xq, xd, xs, sx, m0, nb, nv):
        for m in range(m0, m0 + tm):
            for l in range(nv):
                out[m, g * GROUP + l] = row_dot(qs, d, mn, xq[m], xd[m], xs[m], nb, l)
    return dot
