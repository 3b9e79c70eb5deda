"""exp in float32 as the kernels compute it, written once: Cephes' expf (S. Moshier's Cephes library,
expf.c; the SIMD math libraries descended from sse_mathfun use the same constants).

exp(x) = 2^k e^r with k = rint(x / ln 2) and r = x - k ln 2, ln 2 in two parts (Cody and Waite: 0.693359375
is exact in a few bits, -2.12194440e-4 the rest), so r is exact to float32; e^r on [-ln 2 / 2, ln 2 / 2]
is 1 + r + r^2 p(r) with p Cephes' degree-5 polynomial. The caller builds 2^k from its float32 bits and
multiplies: one exact scaling. Its loops then vectorize (no call, no branch), and with IEEE steps (no
fast-math: reassociation would undo the two-part ln 2) a vector body and a scalar tail give the same bits.
The numpy twins use np.exp (tests/test_decoder_kernels.py states how close the kernels come).
"""
from __future__ import annotations

import numpy as np
from numba import njit

EXP_LO, EXP_HI = np.float32(-87.0), np.float32(88.0)  # the arguments whose 2^k is a normal float32


@njit(inline="always", fastmath=False, nogil=True)
def exp_parts(x):
    # x f32 in [EXP_LO, EXP_HI] (the caller clamps) -> (e^r f32, k f32): exp(x) = e^r * 2^k, k integral
    k = np.rint(x * np.float32(1.44269504))
    r = x - k * np.float32(0.693359375) - k * np.float32(-2.12194440e-4)
    p = np.float32(1.9875691500e-4) * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    return p * r * r + r + np.float32(1.0), k


@njit(inline="always", fastmath=False, nogil=True)
def two_to_the_bits(k):
    # k f32 integral in [-126, 127] -> the i32 bit pattern of the float32 2^k
    return (np.int32(k) + np.int32(127)) << np.int32(23)
