"""Plain numpy twins of the kernels in `kernels/`: slow, obviously correct, same signatures
(outputs first). The dequantizers are also checked against `gguf.quants.dequantize` in the tests.
Block-quantized matrices multiply activations quantized to Q8 per 32-block as in llama.cpp
(`quantize_q8`), the same algorithm as the kernels: exact integer block sums, then the float scales.
Rounding to int8 is discontinuous: a last-bit difference upstream (float sums in another order) can move
an activation across a rounding boundary. The tiny test models agree to 1e-4 in logits; on the 30-layer
SmolLM2-135M prompt of the benchmark the kernels and the twin differ by 2.6e-2 of the largest logit (same
top 5 tokens), and Q8 activations move logits by 3.7e-2 against float activations (2.4e-6 between the
float kernels and their twin before this change)."""
from __future__ import annotations

import numpy as np


def _halves(raw, offset):
    # raw (N, NB, BB) u8 -> (N, NB, 1) f32 from the little-endian float16 at byte `offset`
    return raw[:, :, offset:offset + 2].copy().view(np.float16).astype(np.float32)


def dequantize(type_name: str, raw: np.ndarray, n_cols: int) -> np.ndarray:
    """raw: the QTensor bytes/values (N, RB) -> float32 (N, K)."""
    if type_name == "F32":
        return np.asarray(raw, dtype=np.float32)
    if type_name == "F16":
        return raw.view(np.float16).astype(np.float32)
    n = raw.shape[0]
    bb = {"Q4_0": 18, "Q4_1": 20, "Q8_0": 34}[type_name]
    blocks = raw.reshape(n, n_cols // 32, bb)
    d = _halves(blocks, 0)
    if type_name == "Q8_0":
        q = blocks[:, :, 2:].view(np.int8).astype(np.float32)
        return (d * q).reshape(n, n_cols)
    qs = blocks[:, :, 2:] if type_name == "Q4_0" else blocks[:, :, 4:]
    q = np.concatenate([qs & 15, qs >> 4], axis=2).astype(np.float32)  # element j, then j + 16
    if type_name == "Q4_0":
        return (d * (q - 8.0)).reshape(n, n_cols)
    return (d * q + _halves(blocks, 2)).reshape(n, n_cols)


def quantize_q8(x):
    """Activations to Q8 per 32-block, as llama.cpp does before a quantized dot product:
    x (M, K) f32 -> xq (M, K) i8 = rint(x / d), d (M, NB) f32 = max |x| / 127, s (M, NB) i32 = sum of xq."""
    m, k = x.shape
    xb = x.reshape(m, k // 32, 32)
    d = np.abs(xb).max(axis=2) / np.float32(127.0)  # (M, NB) f32
    inv = np.zeros_like(d)
    np.divide(np.float32(1.0), d, out=inv, where=d > 0)
    xq = np.rint(xb * inv[:, :, None]).astype(np.int8)  # (M, NB, 32)
    return xq.reshape(m, k), d, xq.sum(axis=2, dtype=np.int32)


def prepare(type_name: str, raw: np.ndarray, n_cols: int):
    """What the twin's `matmul` multiplies with: F32/F16 -> the float32 matrix (N, K); block types ->
    (q (NB, 32, N) f32 holding the integers, d (NB, N) f32 scale, m (NB, N) f32 min or None), with
    value = d * q (+ m): Q4_0's q is the nibble - 8, Q4_1's the nibble, Q8_0's the int8."""
    if type_name in ("F32", "F16"):
        return dequantize(type_name, raw, n_cols)
    n = raw.shape[0]
    bb = {"Q4_0": 18, "Q4_1": 20, "Q8_0": 34}[type_name]
    blocks = raw.reshape(n, n_cols // 32, bb)
    d = _halves(blocks, 0)[:, :, 0].T.copy()
    if type_name == "Q8_0":
        q = blocks[:, :, 2:].view(np.int8)
    else:
        qs = blocks[:, :, 2:] if type_name == "Q4_0" else blocks[:, :, 4:]
        q = np.concatenate([qs & 15, qs >> 4], axis=2).astype(np.int8)  # element j, then j + 16
        q = q - np.int8(8) if type_name == "Q4_0" else q
    mn = _halves(blocks, 2)[:, :, 0].T.copy() if type_name == "Q4_1" else None
    return q.transpose(1, 2, 0).astype(np.float32), d, mn


def matmul(out, w, x):
    # out (M, N); w from `prepare`; x (M, K)
    if isinstance(w, np.ndarray):
        out[:] = x @ w.T  # float activations
        return
    q, d, mn = w  # (NB, 32, N), (NB, N), (NB, N)
    xq, dx, sx = quantize_q8(x)
    m, nb = dx.shape
    isum = np.matmul(xq.reshape(m, nb, 32).transpose(1, 0, 2).astype(np.float32), q)  # (NB, M, N): exact integers
    sxf = dx * sx.astype(np.float32)  # (M, NB)
    acc = np.zeros((m, q.shape[2]), np.float32)
    for b in range(nb):  # blocks in order, as the kernels: + isum * (d * dx), then Q4_1's + m * (dx * sum(xq))
        acc += isum[b] * (d[b][None, :] * dx[:, b][:, None])
        if mn is not None:
            acc += mn[b][None, :] * sxf[:, b][:, None]
    out[:] = acc


def rmsnorm(out, x, weight, eps):
    # out (M, D); x (M, D); weight (D,)
    out[:] = x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + eps) * weight


def rope(x, positions, inv_freq):
    # x (M, H, E) in place; positions (M,); inv_freq (E/2,)
    angle = positions[:, None].astype(np.float64) * inv_freq[None, :]  # (M, E/2)
    c = np.cos(angle).astype(np.float32)[:, None, :]
    s = np.sin(angle).astype(np.float32)[:, None, :]
    a, b = x[:, :, 0::2].copy(), x[:, :, 1::2].copy()
    x[:, :, 0::2] = a * c - b * s
    x[:, :, 1::2] = a * s + b * c


def attention(out, scores, q, k_cache, v_cache, n_shared, mask):
    """out (M, H, E); scores unused (the kernel's scratch); q (M, H, E); k_cache, v_cache (G, C, E);
    mask (M, W) bool. As the fused kernel: per kv head g, the R = M * H/G query rows that share its
    keys (row m * H/G + i: query m, head g * H/G + i) are scored against all keys at once, softmaxed
    per row (masked keys weigh exactly 0), then multiplied by the values. The kernel sums each row's
    softmax total and weighted values in ascending key order and takes exp as a polynomial (Cephes
    expf, as `swiglu`); the twin leaves the order to numpy and uses np.exp, so the two agree to
    rounding (1e-5 relative), not bit for bit."""
    n_q, n_head, e = q.shape
    n_kv = k_cache.shape[0]
    group = n_head // n_kv
    n_rows = n_shared + mask.shape[1]
    visible = np.concatenate([np.ones((n_q, n_shared), bool), mask], axis=1)  # (M, n_rows)
    visible = np.repeat(visible, group, axis=0)  # (R, n_rows): row m * group + i
    for g in range(n_kv):
        qg = q[:, g * group:(g + 1) * group, :].reshape(n_q * group, e)  # (R, E)
        s = qg @ k_cache[g, :n_rows].T / np.sqrt(e)  # (R, n_rows)
        s = np.where(visible, s, -np.inf)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        out[:, g * group:(g + 1) * group, :] = (p @ v_cache[g, :n_rows]).reshape(n_q, group, e)


def swiglu(out, bits, gate, up):
    # out (M, F); bits unused (the kernel's scratch); gate (M, F); up (M, F)
    out[:] = gate / (1.0 + np.exp(-gate)) * up
