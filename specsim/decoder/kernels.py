"""numba kernels of the reference decoder. Each has a numpy twin in `reference.py`.

Dimension legend (every shape comment below uses these letters)
  M    query tokens in this pass (1 when decoding, K+1 or the tree size when verifying)
  N    output rows of a weight matrix;  K  its input width (a multiple of 32 for block types)
  RB   bytes per row of a block-quantized matrix = K / 32 * block bytes (18 Q4_0, 20 Q4_1, 34 Q8_0)
  T    worker threads; each owns one row of a scratch buffer
  D    model width;  F  feed-forward width;  H  query heads;  G  key/value heads;  E  head dim
  C    KV-cache capacity (slots);  W  cache rows seen through the mask (the new or tree rows)
  LUT  65536: float16 bit pattern -> float32

Conventions: outputs first; no allocation inside a kernel (scratch comes in); no random draws.
A row of a weight matrix is dequantized once into the thread's scratch row, then dotted with each of
the M query rows: the weight bytes are read once per pass whatever M is, and row m's result does not
depend on M (the same summation order), so a verify pass reproduces the single-token logits exactly.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

F16_LUT = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)  # (LUT,)

_JIT = dict(cache=True, fastmath=True, nogil=True)
# Attention sums in order (no reassociation): a row masked out adds an exact 0, so a query's result
# does not depend on how many masked rows the pass carries (tree verify vs plain decode).
_JIT_ORDERED = dict(cache=True, fastmath={"nsz", "arcp", "contract", "afn"}, nogil=True)  # -inf marks masked rows


@njit(**_JIT)
def _dot_rows(out, r, wf, x):
    # out (M, N); wf (K,) row r of the weight, dequantized; x (M, K)
    for m in range(x.shape[0]):
        xm = x[m]
        acc = np.float32(0.0)
        for i in range(wf.shape[0]):
            acc += wf[i] * xm[i]
        out[m, r] = acc


@njit(**_JIT)
def _q4_rows(out, buf, qs, dq, mq, has_min, x, lut, r0, r1):
    # out (M, N); buf (>= 2K,) scratch; qs (N, K/2) u8: byte j of block b holds element j (low
    # nibble) and j + 16 (high nibble); dq, mq (N, NB) u16 float16 scale and min; x (M, K)
    h = qs.shape[1]
    lo, hi, wf = buf[0:h], buf[h:2 * h], buf[2 * h:4 * h]
    for r in range(r0, r1):
        q_r = qs[r]
        for i in range(h):  # flat over the row: vectorizes
            q = np.int32(q_r[i])
            lo[i] = np.float32(q & np.int32(15))
            hi[i] = np.float32(q >> np.int32(4))
        for b in range(dq.shape[1]):
            d = lut[dq[r, b]]
            mn = lut[mq[r, b]] if has_min else np.float32(-8.0) * d
            for j in range(16):
                wf[b * 32 + j] = d * lo[b * 16 + j] + mn
                wf[b * 32 + 16 + j] = d * hi[b * 16 + j] + mn
        _dot_rows(out, r, wf, x)


@njit(parallel=True, **_JIT)
def matmul_q4(out, scratch, qs, dq, mq, has_min, x, lut):
    # out (M, N) f32; scratch (T, >= 2K) f32; qs (N, K/2) u8; dq, mq (N, NB) u16; has_min: Q4_1 (True)
    # or Q4_0 (False: value = d * (q - 8)); x (M, K) f32; lut (LUT,) f32
    n, n_threads = qs.shape[0], scratch.shape[0]
    for t in prange(n_threads):
        _q4_rows(out, scratch[t], qs, dq, mq, has_min, x, lut, t * n // n_threads, (t + 1) * n // n_threads)


@njit(**_JIT)
def _q8_rows(out, buf, qs, dq, x, lut, r0, r1):
    # out (M, N); buf (>= 2K,); qs (N, K) i8; dq (N, NB) u16; x (M, K)
    k = qs.shape[1]
    qf, wf = buf[0:k], buf[k:2 * k]
    for r in range(r0, r1):
        q_r = qs[r]
        for i in range(k):
            qf[i] = np.float32(q_r[i])
        for b in range(dq.shape[1]):
            d = lut[dq[r, b]]
            for j in range(32):
                wf[b * 32 + j] = d * qf[b * 32 + j]
        _dot_rows(out, r, wf, x)


@njit(parallel=True, **_JIT)
def matmul_q8_0(out, scratch, qs, dq, x, lut):
    # out (M, N) f32; scratch (T, >= 2K) f32; qs (N, K) i8; dq (N, NB) u16 float16 scales; x (M, K); lut (LUT,)
    n, n_threads = qs.shape[0], scratch.shape[0]
    for t in prange(n_threads):
        _q8_rows(out, scratch[t], qs, dq, x, lut, t * n // n_threads, (t + 1) * n // n_threads)


@njit(**_JIT)
def _f16_rows(out, buf, w, x, lut, r0, r1):
    # out (M, N); buf (>= K,); w (N, K) u16; x (M, K)
    wf = buf[0:w.shape[1]]
    for r in range(r0, r1):
        w_r = w[r]
        for i in range(w.shape[1]):
            wf[i] = lut[w_r[i]]
        _dot_rows(out, r, wf, x)


@njit(parallel=True, **_JIT)
def matmul_f16(out, scratch, w, x, lut):
    # out (M, N) f32; scratch (T, >= K) f32; w (N, K) u16 float16 bit patterns; x (M, K); lut (LUT,)
    n, n_threads = w.shape[0], scratch.shape[0]
    for t in prange(n_threads):
        _f16_rows(out, scratch[t], w, x, lut, t * n // n_threads, (t + 1) * n // n_threads)


@njit(**_JIT)
def _f32_rows(out, w, x, r0, r1):
    # out (M, N); w (N, K) f32; x (M, K)
    for r in range(r0, r1):
        _dot_rows(out, r, w[r], x)


@njit(parallel=True, **_JIT)
def matmul_f32(out, scratch, w, x):
    # out (M, N) f32; scratch (T, *) only sets the thread count; w (N, K) f32; x (M, K) f32
    n, n_threads = w.shape[0], scratch.shape[0]
    for t in prange(n_threads):
        _f32_rows(out, w, x, t * n // n_threads, (t + 1) * n // n_threads)


def pack(type_name: str, raw: np.ndarray, n_cols: int) -> tuple:
    """GGUF bytes (N, RB) -> the arrays the matmul kernels read (same bytes, split by field so the
    inner loops run over contiguous memory): Q4_x (qs (N, K/2) u8, d (N, NB) u16, m (N, NB) u16),
    Q8_0 (qs (N, K) i8, d (N, NB) u16), F16 (w (N, K) u16,), F32 (w (N, K) f32,)."""
    if type_name in ("F32", "F16"):
        return (raw,)
    n, nb = raw.shape[0], n_cols // 32
    bb = {"Q4_0": 18, "Q4_1": 20, "Q8_0": 34}[type_name]
    blocks = raw.reshape(n, nb, bb)
    d = np.ascontiguousarray(blocks[:, :, 0:2]).view(np.uint16).reshape(n, nb)
    if type_name == "Q8_0":
        return (np.ascontiguousarray(blocks[:, :, 2:]).view(np.int8).reshape(n, n_cols), d)
    if type_name == "Q4_0":
        return (np.ascontiguousarray(blocks[:, :, 2:]).reshape(n, n_cols // 2), d, d)
    m = np.ascontiguousarray(blocks[:, :, 2:4]).view(np.uint16).reshape(n, nb)
    return (np.ascontiguousarray(blocks[:, :, 4:]).reshape(n, n_cols // 2), d, m)


def matmul(out, scratch, type_name, packed, x, lut):
    """Dispatch on the tensor type. out (M, N); scratch (T, >= 2K); packed from `pack`; x (M, K)."""
    if type_name == "Q4_1":
        matmul_q4(out, scratch, packed[0], packed[1], packed[2], True, x, lut)
    elif type_name == "Q4_0":
        matmul_q4(out, scratch, packed[0], packed[1], packed[2], False, x, lut)
    elif type_name == "Q8_0":
        matmul_q8_0(out, scratch, packed[0], packed[1], x, lut)
    elif type_name == "F16":
        matmul_f16(out, scratch, packed[0], x, lut)
    else:
        matmul_f32(out, scratch, packed[0], x)


@njit(**_JIT)
def rmsnorm(out, x, weight, eps):
    # out (M, D) f32; x (M, D) f32; weight (D,) f32
    d = x.shape[1]
    for m in range(x.shape[0]):
        ss = np.float32(0.0)
        for j in range(d):
            ss += x[m, j] * x[m, j]
        scale = np.float32(1.0) / np.sqrt(ss / np.float32(d) + np.float32(eps))
        for j in range(d):
            out[m, j] = x[m, j] * scale * weight[j]


@njit(**_JIT)
def rope(x, positions, inv_freq):
    # x (M, H, E) f32, rotated in place, adjacent pairs (llama.cpp "norm" rope); positions (M,) i64;
    # inv_freq (E/2,) f64
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


@njit(**_JIT)
def _dot(a, b):
    # a (E,), b (E,): a fixed length, so the vectorized order is the same for every query
    acc = np.float32(0.0)
    for j in range(a.shape[0]):
        acc += a[j] * b[j]
    return acc


@njit(parallel=True, **_JIT_ORDERED)
def attention(out, scores, q, k_cache, v_cache, n_shared, mask):
    # out (M, H, E) f32; scores (H, C) f32 scratch; q (M, H, E); k_cache, v_cache (G, C, E);
    # n_shared: cache rows [0, n_shared) seen by every query; mask (M, W) bool: query m sees row n_shared + w
    n_q, n_head, e = q.shape
    group = n_head // k_cache.shape[0]
    scale = np.float32(1.0 / math.sqrt(e))
    for h in prange(n_head):
        g = h // group
        s = scores[h]
        for m in range(n_q):
            top = np.float32(-np.inf)
            for t in range(n_shared + mask.shape[1]):
                if t >= n_shared and not mask[m, t - n_shared]:
                    s[t] = np.float32(-np.inf)
                    continue
                s[t] = _dot(q[m, h], k_cache[g, t]) * scale
                top = max(top, s[t])
            total = np.float32(0.0)
            for t in range(n_shared + mask.shape[1]):
                s[t] = np.exp(s[t] - top)
                total += s[t]
            for j in range(e):
                out[m, h, j] = 0.0
            for t in range(n_shared + mask.shape[1]):
                p = s[t] / total
                if p != 0.0:
                    for j in range(e):
                        out[m, h, j] += p * v_cache[g, t, j]


@njit(**_JIT)
def swiglu(out, gate, up):
    # out (M, F) f32; gate (M, F); up (M, F): out = silu(gate) * up
    for m in range(gate.shape[0]):
        for j in range(gate.shape[1]):
            g = gate[m, j]
            out[m, j] = g / (np.float32(1.0) + np.exp(-g)) * up[m, j]


@njit(parallel=True, **_JIT)
def stream_sum(a):
    # a (S,) f32, a large array read once (the memory-bandwidth probe); numba's parallel reduction
    return a.sum()


def set_threads(n: int) -> None:
    """Threads the parallel kernels use (numba's set_num_threads); scratch buffers made after this."""
    import numba

    numba.set_num_threads(n)
