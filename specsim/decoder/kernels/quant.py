"""The block-quantized formats as the kernels read them: the packed weight layout (`pack`), the Q8
activations the block matmuls multiply them with (`quantize_q8`, as llama.cpp quantizes activations
before a quantized dot product), and the float16 table.

Dimension legend
  M    query rows;  N  output rows of a weight matrix;  K  its input width (a multiple of 32 for block types)
  NB   K / 32 blocks per row;  NG  ceil(N / 16) groups of 16 weight rows;  l  a row's lane in its group
  RB   bytes per row of a block-quantized matrix = NB * block bytes (18 Q4_0, 20 Q4_1, 34 Q8_0)
  LUT  65536: float16 bit pattern -> float32
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .host import EXACT

F16_LUT = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)  # (LUT,)

# -- 16 weight rows (a group, interleaved by `pack`) . one Q8 activation row
# Layout of group g (weight rows 16 g .. 16 g + 15, lane l = row 16 g + l): per block b, chunk c of four
# elements (4 c .. 4 c + 3): Q4 qs[b * 256 + k * 64 + l * 4 + j] = the row's block byte 4 k + j (low nibble
# element 4 k + j = chunk k, high nibble element 16 + 4 k + j = chunk k + 4); Q8_0 qs[b * 512 + c * 64 + l * 4 + j]
# = element 4 c + j; d, mn [b * 16 + l]. Each lane's result: acc = 0; per block in order
# acc = fma(float(s), d * xd, acc) (s the exact integer block sum, Q4_0's -8 * sum(xq) included), then
# Q4_1: acc = fma(m, sx, acc), sx = xd * sum(xq). No horizontal sums: a lane is one output.
GROUP = 16  # weight rows per group: the 16 int32 lanes of a vpdpbusd


@njit(**EXACT)  # explicit: a callee inherits fast-math; IEEE steps as the twin
def quantize_q8(xq, xd, xs, sx, x):
    # xq (>= M, >= K) i8; xd (>= M, >= NB) f32 block scale; xs (>= M, >= NB) i32 block sum of xq;
    # sx (>= M, >= NB) f32 = xd * xs (Q4_1's min term);
    # x (M, K) f32
    for m in range(x.shape[0]):
        for b in range(x.shape[1] // 32):
            amax = np.float32(0.0)
            for j in range(b * 32, b * 32 + 32):
                amax = max(amax, abs(x[m, j]))
            d = amax / np.float32(127.0)
            inv = np.float32(1.0) / d if d > np.float32(0.0) else np.float32(0.0)
            s = 0
            for j in range(b * 32, b * 32 + 32):
                q = np.int32(np.rint(x[m, j] * inv))
                xq[m, j] = q
                s += q
            xd[m, b] = d
            xs[m, b] = s
            sx[m, b] = d * np.float32(s)


def pack(type_name: str, raw: np.ndarray, n_cols: int) -> tuple:
    """GGUF bytes (N, RB) -> the arrays the matmul kernels read. F16 (w (N, K) u16,), F32 (w (N, K) f32,).
    Block types: rows in groups of 16 (the last padded with zero rows), interleaved so that one 64-byte load
    holds four elements of a block for each of the 16 rows (the layout above):
    Q4_x (qs (NG, NB * 256) u8, d (NG, NB * 16) u16, m (NG, NB * 16) u16), Q8_0 (qs (NG, NB * 512) i8, d)."""
    if type_name in ("F32", "F16"):
        return (raw,)
    n, nb = raw.shape[0], n_cols // 32
    bb = {"Q4_0": 18, "Q4_1": 20, "Q8_0": 34}[type_name]
    ng = -(-n // GROUP)
    blocks = np.zeros((ng * GROUP, nb, bb), np.uint8)
    blocks[:n] = raw.reshape(n, nb, bb)

    def halves(off):  # (NG, NB * 16) u16: [g, b * 16 + l] of row 16 g + l
        h = np.ascontiguousarray(blocks[:, :, off:off + 2]).view(np.uint16).reshape(ng, GROUP, nb)
        return np.ascontiguousarray(h.transpose(0, 2, 1)).reshape(ng, nb * GROUP)

    def chunks(q):  # (NG * 16, NB, B) bytes -> (NG, NB * 16 * B): [g, b, chunk of 4 bytes, l, 4]
        nc = q.shape[2] // 4
        q = q.reshape(ng, GROUP, nb, nc, 4).transpose(0, 2, 3, 1, 4)
        return np.ascontiguousarray(q).reshape(ng, nb * nc * GROUP * 4)
    d = halves(0)
    if type_name == "Q8_0":
        return (chunks(blocks[:, :, 2:]).view(np.int8), d)
    if type_name == "Q4_0":
        return (chunks(blocks[:, :, 2:]), d, d)
    return (chunks(blocks[:, :, 4:]), d, halves(2))

