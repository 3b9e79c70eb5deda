"""The element-wise kernels of a layer: RMSNorm, rotary positions (llama.cpp's adjacent-pair "norm" rope)
and SwiGLU, each over the M rows of a pass.

Dimension legend
  M    query rows of the pass;  D  model width;  F  feed-forward width
  H    query heads;  E  head dim (even: rope rotates pairs)
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .expf import EXP_HI, EXP_LO, exp_parts, two_to_the_bits
from .host import EXACT, FAST


@njit(**FAST)
def rmsnorm(out, x, weight, eps):
    # out (M, D) f32; x (M, D) f32; weight (D,) f32
    d = x.shape[1]
    if out.shape[0] != x.shape[0] or out.shape[1] != d or weight.shape[0] != d:
        raise ValueError("rmsnorm: shapes of out, x and weight do not agree")
    for m in range(x.shape[0]):
        ss = np.float32(0.0)
        for j in range(d):
            ss += x[m, j] * x[m, j]
        scale = np.float32(1.0) / np.sqrt(ss / np.float32(d) + np.float32(eps))
        for j in range(d):
            out[m, j] = x[m, j] * scale * weight[j]


@njit(**FAST)
def rope(x, positions, inv_freq):
    # x (M, H, E) f32, rotated in place, adjacent pairs (llama.cpp "norm" rope); positions (M,) i64;
    # inv_freq (E/2,) f64
    if positions.shape[0] != x.shape[0] or 2 * inv_freq.shape[0] > x.shape[2]:
        raise ValueError("rope: shapes of x, positions and inv_freq do not agree")
    for m in range(x.shape[0]):
        for i in range(inv_freq.shape[0]):
            angle = positions[m] * inv_freq[i]
            c = np.float32(math.cos(angle))
            s = np.float32(math.sin(angle))
            for h in range(x.shape[1]):
                a = x[m, h, 2 * i]
                b = x[m, h, 2 * i + 1]
                x[m, h, 2 * i] = a * c - b * s
                x[m, h, 2 * i + 1] = a * s + b * c


@njit(**EXACT)  # no reassociation: it would undo the two-part ln 2 of `expf`
def swiglu(out, bits, gate, up):
    # out (M, F) f32; bits (>= M, >= F) i32 scratch; gate (M, F); up (M, F): out = silu(gate) * up
    if out.shape != gate.shape or up.shape != gate.shape or bits.shape[0] < gate.shape[0] or bits.shape[1] < gate.shape[1]:
        raise ValueError("swiglu: shapes of out, bits, gate and up do not agree")
    for m in range(gate.shape[0]):
        bm, om, gm = bits[m], out[m], gate[m]
        for j in range(gate.shape[1]):  # exp(-g) = e^r 2^n (`expf`): no call, no branch, the loop vectorizes
            om[j], n = exp_parts(min(max(-gm[j], EXP_LO), EXP_HI))
            bm[j] = two_to_the_bits(n)  # the float32 bits of 2^n
        two_n = bm.view(np.float32)
        for j in range(gate.shape[1]):
            om[j] = gm[j] * up[m, j] / (np.float32(1.0) + om[j] * two_n[j])
