"""The matrix products of a forward pass: out = x W^T for every weight format the decoder loads.

Dimension legend
  M    query rows (1 when decoding, K+1 or the tree size when verifying);  N  output rows of W
  K    W's input width (a multiple of 32 for block types);  NB  K / 32;  NG  ceil(N / 16) groups of 16 rows
  T    worker threads; each owns one row of a scratch buffer

Block-quantized matrices (Q4_0, Q4_1, Q8_0) multiply activations quantized to Q8 as in llama.cpp
(`quant.quantize_q8`: per 32-block, int8 values and a float32 scale, once per pass per matrix): each
block's dot product is an exact int32 sum of weight ints times activation ints, then the float epilogue
acc = fma(sum, d * dx, acc) (+ fma(m, dx * sum(xq), acc) for Q4_1), blocks in order. `quant.pack`
interleaves the weight rows in groups of 16, so that on a CPU with AVX512-VNNI each int32 lane of a
vpdpbusd is one output row (`block_tiles`, `block_sums`): a block is 8 vpdpbusd, one convert and one fma,
and there is no horizontal sum at all. Each loaded and unpacked block serves a tile of 8 or 4 query rows.
A CPU with AVX2 but not AVX512-VNNI runs the same tiles with each block's 8 vpdpbusd made of AVX2
instructions (the same exact integers, so the same results bit for bit) in tiles of 4; elsewhere (or with
SPECSIM_DECODER_PLAIN=1 or NUMBA_DISABLE_JIT=1) the plain loops of `block_dot_plain` compute the same
integers and the same epilogue order. Row m's result is computed by the same arithmetic in the same order
whatever M is and whichever tile holds it, so a verify pass reproduces the single-token logits exactly.
F16/F32 matrices keep float activations: a row is converted once into the thread's scratch row, then
dotted with each query row. Every entry point checks that its arrays' shapes agree before its loops (a
ValueError otherwise): the tiles load through raw pointers, where numba's boundscheck cannot see.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .block_dot_plain import ROW_DOTS, plain_tile
from .block_tiles import KINDS, TILES, vector_tile
from .host import EXACT, FAST, HAVE_AVX2, HAVE_TILES, HAVE_VNNI
from .quant import GROUP, quantize_q8

EIGHT_ROW_TILES = HAVE_VNNI or not HAVE_TILES
ROW_TILES = TILES if EIGHT_ROW_TILES else tuple(t for t in TILES if t != 8)  # the tiles the block matmuls run here

# kind -> (tile of 8, tile of 4, tile of 1) query rows, the implementation this CPU runs
if HAVE_VNNI:
    TILE_KERNELS = {kind: tuple(vector_tile(kind, t) for t in TILES) for kind in KINDS}
elif HAVE_AVX2:
    # no tile of 8 (the driver runs tiles of 4): AVX2 has 16 vector registers, and 8 rows' accumulators
    # (two registers each) spill; a row's arithmetic does not depend on its tile
    # (the driver's never-run tile-of-8 slot takes the tile of 4 itself: one intrinsic compiled, not two)
    def _avx2_tiles(kind):
        t4, t1 = vector_tile(kind, 4, vnni=False), vector_tile(kind, 1, vnni=False)
        return t4, t4, t1
    TILE_KERNELS = {kind: _avx2_tiles(kind) for kind in KINDS}
else:  # the plain loop, one query row and one lane at a time, behind the same signature
    TILE_KERNELS = {kind: tuple(plain_tile(ROW_DOTS[kind], t) for t in TILES) for kind in KINDS}


def _tiled_matmul(tile8, tile4, tile1, qs_per_block):
    """The driver shared by every block type: Q8-quantize x, then for each group of 16 weight rows
    run the tiles of 8, then 4, then single query rows. Q4_0 and Q8_0 have no block minimum: their
    callers pass `dq` again as `mq`, which their tile kernels ignore. qs_per_block: bytes of qs per
    block of a group (256 for Q4, 512 for Q8_0)."""

    @njit(parallel=True, **EXACT)
    def matmul(out, xq, xd, xs, sx, qs, dq, mq, x):
        # out (M, N) f32; xq .. sx: Q8 scratch (`quantize_q8`); qs (NG, NB * 256) u8 (Q4) or (NG, NB * 512)
        # i8 (Q8_0); dq, mq (NG, NB * 16) u16 float16 scale and min, groups of 16 rows as `pack` lays them
        # out (NG = ceil(N / 16)); x (M, K) f32
        n_q, nb, n = x.shape[0], x.shape[1] // 32, out.shape[1]
        n8 = n_q - n_q % 8 if EIGHT_ROW_TILES else 0
        if (x.shape[1] % 32 != 0 or out.shape[0] != n_q or qs.shape[0] != (n + GROUP - 1) // GROUP
                or qs.shape[1] != nb * qs_per_block or dq.shape[0] != qs.shape[0] or dq.shape[1] != nb * GROUP
                or mq.shape[0] != dq.shape[0] or mq.shape[1] != dq.shape[1] or xq.shape[0] < n_q
                or xq.shape[1] < x.shape[1] or xd.shape[0] < n_q or xd.shape[1] < nb or xs.shape[0] < n_q
                or xs.shape[1] < nb or sx.shape[0] < n_q or sx.shape[1] < nb):
            raise ValueError("block matmul: shapes of out, scratch, weights and x do not agree")
        quantize_q8(xq, xd, xs, sx, x)
        n4 = n_q - n_q % 4
        for g in prange(qs.shape[0]):
            nv = min(GROUP, n - g * GROUP)
            for m in range(0, n8, 8):
                tile8(out, g, qs[g], dq[g], mq[g], xq, xd, xs, sx, m, nb, nv)
            for m in range(n8, n4, 4):
                tile4(out, g, qs[g], dq[g], mq[g], xq, xd, xs, sx, m, nb, nv)
            for m in range(n4, n_q):
                tile1(out, g, qs[g], dq[g], mq[g], xq, xd, xs, sx, m, nb, nv)

    return matmul


matmul_q4_1 = _tiled_matmul(*TILE_KERNELS["q4_1"], 256)
matmul_q4_0 = _tiled_matmul(*TILE_KERNELS["q4_0"], 256)
matmul_q8_0 = _tiled_matmul(*TILE_KERNELS["q8_0"], 512)


@njit(**FAST)
def _dot_rows(out, r, wf, x):
    # out (M, N); wf (K,) row r of the weight, converted to float32; x (M, K)
    for m in range(x.shape[0]):
        xm = x[m]
        acc = np.float32(0.0)
        for i in range(wf.shape[0]):
            acc += wf[i] * xm[i]
        out[m, r] = acc


@njit(**FAST)
def _f16_rows(out, buf, w, x, lut, r0, r1):
    # out (M, N); buf (>= K,); w (N, K) u16; x (M, K)
    wf = buf[0:w.shape[1]]
    for r in range(r0, r1):
        w_r = w[r]
        for i in range(w.shape[1]):
            wf[i] = lut[w_r[i]]
        _dot_rows(out, r, wf, x)


@njit(parallel=True, **FAST)
def matmul_f16(out, scratch, w, x, lut):
    # out (M, N) f32; scratch (T, >= K) f32; w (N, K) u16 float16 bit patterns; x (M, K); lut (LUT,)
    n, n_threads = w.shape[0], scratch.shape[0]
    if (x.shape[1] != w.shape[1] or out.shape[0] != x.shape[0] or out.shape[1] != n or scratch.shape[1] < w.shape[1]
            or lut.shape[0] != 65536):
        raise ValueError("matmul_f16: shapes of out, scratch, w, x and lut do not agree")
    for t in prange(n_threads):
        _f16_rows(out, scratch[t], w, x, lut, t * n // n_threads, (t + 1) * n // n_threads)


@njit(**FAST)
def _f32_rows(out, w, x, r0, r1):
    # out (M, N); w (N, K) f32; x (M, K)
    for r in range(r0, r1):
        _dot_rows(out, r, w[r], x)


@njit(parallel=True, **FAST)
def matmul_f32(out, scratch, w, x):
    # out (M, N) f32; scratch (T, *) only sets the thread count; w (N, K) f32; x (M, K) f32
    n, n_threads = w.shape[0], scratch.shape[0]
    if x.shape[1] != w.shape[1] or out.shape[0] != x.shape[0] or out.shape[1] != n:
        raise ValueError("matmul_f32: shapes of out, w and x do not agree")
    for t in prange(n_threads):
        _f32_rows(out, w, x, t * n // n_threads, (t + 1) * n // n_threads)


def new_scratch(n_threads: int, m: int, k: int) -> tuple:
    """Scratch for `matmul` over up to M query rows of width up to K: (f32 (T, 2K) for F16/F32 rows,
    then the Q8 activations: xq (M, K) i8, xd (M, K/32) f32, xs (M, K/32) i32, sx (M, K/32) f32)."""
    return (np.zeros((n_threads, 2 * k), np.float32), np.zeros((m, k), np.int8), np.zeros((m, k // 32), np.float32),
            np.zeros((m, k // 32), np.int32), np.zeros((m, k // 32), np.float32))


def matmul(out, scratch, type_name, packed, x, lut):
    """Dispatch on the tensor type. out (M, N); scratch from `new_scratch`; packed from `pack`; x (M, K)."""
    f, q8 = scratch[0], scratch[1:]
    if type_name == "Q4_1":
        matmul_q4_1(out, *q8, packed[0], packed[1], packed[2], x)
    elif type_name == "Q4_0":
        matmul_q4_0(out, *q8, packed[0], packed[1], packed[1], x)
    elif type_name == "Q8_0":
        matmul_q8_0(out, *q8, packed[0], packed[1], packed[1], x)
    elif type_name == "F16":
        matmul_f16(out, f, packed[0], x, lut)
    else:
        matmul_f32(out, f, packed[0], x)
