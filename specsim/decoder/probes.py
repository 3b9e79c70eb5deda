"""Probes of this machine for `specsim calibrate machine`: the float32 multiply-add rate the decoder's
attention can reach (independent accumulators in registers, nothing read from memory), and a parallel
call that does nothing (the floor a numba parallel region costs). The memory-bandwidth probe is
`kernels.stream_sum`; the matrix products are the decoder's own `kernels.matmul`."""
from __future__ import annotations

from .fetch import configure_numba_cache

configure_numba_cache()

import numpy as np  # noqa: E402
from numba import njit, prange  # noqa: E402

LANES = 64  # independent accumulators per thread: 4 vectors of 16 float32, enough to hide FMA latency


@njit(cache=True, fastmath=True, nogil=True)
def _fma_chain(acc, x, y, n):
    # acc (LANES,) f32: n rounds of acc = acc * x + y, each lane independent (vectorizes to FMAs)
    for _ in range(n):
        for j in range(acc.shape[0]):
            acc[j] = acc[j] * x + y
    return acc.sum()


@njit(parallel=True, cache=True, fastmath=True, nogil=True)
def fma_rate(out, n):
    # out (T, LANES) f32 scratch, one row per thread; n rounds each: 2 * LANES * n FLOP per thread
    for t in prange(out.shape[0]):
        out[t, 0] = _fma_chain(out[t], np.float32(0.999999), np.float32(1e-7), n)


@njit(parallel=True, cache=True, nogil=True)
def empty_parallel(out):
    # out (T,) f32: one store per thread (the cost of entering and leaving a parallel region)
    for t in prange(out.shape[0]):
        out[t] = t


def max_threads() -> int:
    """The threads numba's parallel kernels may use here (NUMBA_NUM_THREADS)."""
    import numba

    return int(numba.config.NUMBA_NUM_THREADS)


def fma_flops(n_threads: int, n: int) -> float:
    """FLOP one fma_rate call does: 2 per multiply-add, LANES lanes, n rounds, each thread."""
    return 2.0 * LANES * n * n_threads
