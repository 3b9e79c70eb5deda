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
Block-quantized matrices (Q4_0, Q4_1, Q8_0) multiply activations quantized to Q8 as in llama.cpp
(`quantize_q8`: per 32-block, int8 values and a float32 scale, once per token per matrix): each
block's dot product is an exact int32 sum of weight ints times activation ints, then the float
epilogue d * dx * sum (+ m * dx * sum(xq) for Q4_1). On a CPU with AVX512-VNNI the row dot is one
`vpdpbusd` per block (`_vnni_row_dot`, LLVM IR); elsewhere a plain numba loop with the same integers.
Row m's result is computed by the same arithmetic in the same order whatever M is, so a verify pass
reproduces the single-token logits exactly. F16/F32 matrices keep float activations: a row is
converted once into the thread's scratch row, then dotted with each of the M query rows.
"""
from __future__ import annotations

import math

import numpy as np
import llvmlite.binding
from llvmlite import ir
from numba import njit, prange
from numba.core import cgutils, types
from numba.extending import intrinsic

F16_LUT = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)  # (LUT,)

_JIT = dict(cache=True, fastmath=True, nogil=True)
# Attention sums in order (no reassociation): a row masked out adds an exact 0, so a query's result
# does not depend on how many masked rows the pass carries (tree verify vs plain decode).
_JIT_ORDERED = dict(cache=True, fastmath={"nsz", "arcp", "contract", "afn"}, nogil=True)  # -inf marks masked rows


@njit(**_JIT)
def _dot_rows(out, r, wf, x):
    # out (M, N); wf (K,) row r of the weight, converted to float32; x (M, K)
    for m in range(x.shape[0]):
        xm = x[m]
        acc = np.float32(0.0)
        for i in range(wf.shape[0]):
            acc += wf[i] * xm[i]
        out[m, r] = acc


@njit(cache=True, fastmath=False, nogil=True)  # explicit: a callee inherits fast-math; IEEE steps as the twin
def quantize_q8(xq, xd, xs, x):
    # xq (>= M, >= K) i8; xd (>= M, >= NB) f32 block scale; xs (>= M, >= NB) i32 block sum of xq; x (M, K) f32
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


# -- one weight row . one Q8 activation row, plain numba (any CPU) ------------------------------------
# qs: the row's quant bytes; d, mn (NB,) u16 float16 scale and min; xq (>= K,) i8; xd (>= NB,) f32;
# xs (>= NB,) i32; nb blocks. Value of a weight: Q4_1 d * q + m, Q4_0 d * (q - 8), Q8_0 d * q.
@njit(**_JIT)
def _plain_q4_1(qs, d, mn, xq, xd, xs, nb):
    acc = np.float32(0.0)
    for b in range(nb):
        s = np.int32(0)
        for j in range(16):
            q = np.int32(qs[b * 16 + j])
            s += (q & np.int32(15)) * np.int32(xq[b * 32 + j]) + (q >> np.int32(4)) * np.int32(xq[b * 32 + 16 + j])
        acc += F16_LUT[d[b]] * xd[b] * np.float32(s) + F16_LUT[mn[b]] * (xd[b] * np.float32(xs[b]))
    return acc


@njit(**_JIT)
def _plain_q4_0(qs, d, mn, xq, xd, xs, nb):
    acc = np.float32(0.0)
    for b in range(nb):
        s = np.int32(-8) * xs[b]
        for j in range(16):
            q = np.int32(qs[b * 16 + j])
            s += (q & np.int32(15)) * np.int32(xq[b * 32 + j]) + (q >> np.int32(4)) * np.int32(xq[b * 32 + 16 + j])
        acc += F16_LUT[d[b]] * xd[b] * np.float32(s)
    return acc


@njit(**_JIT)
def _plain_q8_0(qs, d, mn, xq, xd, xs, nb):
    acc = np.float32(0.0)
    for b in range(nb):
        s = np.int32(0)
        for j in range(32):
            s += np.int32(qs[b * 32 + j]) * np.int32(xq[b * 32 + j])
        acc += F16_LUT[d[b]] * xd[b] * np.float32(s)
    return acc


# -- the same with AVX512-VNNI: LLVM IR, one vpdpbusd (u8 x i8, 4 products a lane) per 32-block -----------
_I8, _I32, _I64, _F32 = ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.FloatType()
_V16I8, _V32I8, _V8I32, _V8F32 = (ir.VectorType(_I8, 16), ir.VectorType(_I8, 32), ir.VectorType(_I32, 8),
                                  ir.VectorType(_F32, 8))


def _vnni_row_dot(kind):
    """kind "q4_1", "q4_0" or "q8_0" -> an intrinsic with the `_plain_*` signature. Per block b:
    w (32,) u8 = the nibbles (low then high) or the Q8_0 bytes + 128; lanes (8,) i32 = vpdpbusd(c, w, xq)
    with c = (-8 or -128) * xs[b] in lane 0 (so the lane sum is exactly the plain integer sum s);
    acc (8,) f32 += lanes * (d * xd); Q4_1 adds m * (xd * xs) in a scalar. Result: acc's lanes summed in order."""
    @intrinsic
    def row_dot(typingctx, qs, d, mn, xq, xd, xs, nb):
        if (xs.dtype, xd.dtype, d.dtype, mn.dtype, nb) != (types.int32, types.float32, types.uint16, types.uint16, types.int64):
            return None
        sig = types.float32(qs, d, mn, xq, xd, xs, nb)

        def codegen(context, builder, signature, args):
            p_qs, p_d, p_m, p_xq, p_xd, p_xs = (context.make_array(t)(context, builder, a).data
                                                for t, a in zip(signature.args[:6], args[:6]))
            mod = builder.module
            dp = cgutils.get_or_insert_function(mod, ir.FunctionType(_V8I32, [_V8I32] * 3), "llvm.x86.avx512.vpdpbusd.256")
            fma = cgutils.get_or_insert_function(mod, ir.FunctionType(_V8F32, [_V8F32] * 3), "llvm.fma.v8f32")
            half = lambda p, b: builder.fpext(builder.bitcast(builder.load(builder.gep(p, [b])), ir.HalfType()), _F32)  # noqa: E731
            c = lambda t, v: ir.Constant(t, v)  # noqa: E731
            pre = builder.basic_block
            loop, done = builder.append_basic_block("row_dot.loop"), builder.append_basic_block("row_dot.done")
            builder.branch(loop)
            builder.position_at_end(loop)
            b, acc, macc = builder.phi(_I64), builder.phi(_V8F32), builder.phi(_F32)
            if kind == "q8_0":
                wp = builder.bitcast(builder.gep(p_qs, [builder.mul(b, c(_I64, 32))]), _V32I8.as_pointer())
                w = builder.xor(builder.load(wp, align=1), c(_V32I8, [0x80] * 32))
            else:
                qp = builder.bitcast(builder.gep(p_qs, [builder.mul(b, c(_I64, 16))]), _V16I8.as_pointer())
                q = builder.load(qp, align=1)
                lo, hi = builder.and_(q, c(_V16I8, [15] * 16)), builder.lshr(q, c(_V16I8, [4] * 16))
                w = builder.shuffle_vector(lo, hi, c(ir.VectorType(_I32, 32), list(range(32))))
            xv = builder.load(builder.bitcast(builder.gep(p_xq, [builder.mul(b, c(_I64, 32))]), _V32I8.as_pointer()), align=1)
            xs_b = builder.load(builder.gep(p_xs, [b]))
            init = c(_V8I32, None)
            if kind != "q4_1":
                init = builder.insert_element(init, builder.mul(xs_b, c(_I32, -128 if kind == "q8_0" else -8)), c(_I32, 0))
            lanes = builder.call(dp, [init, builder.bitcast(w, _V8I32), builder.bitcast(xv, _V8I32)])
            xd_b = builder.load(builder.gep(p_xd, [b]))
            s = builder.insert_element(c(_V8F32, None), builder.fmul(half(p_d, b), xd_b), c(_I32, 0))
            s = builder.shuffle_vector(s, c(_V8F32, None), c(ir.VectorType(_I32, 8), [0] * 8))
            acc2 = builder.call(fma, [builder.sitofp(lanes, _V8F32), s, acc])
            macc2 = macc
            if kind == "q4_1":
                macc2 = builder.fadd(macc, builder.fmul(half(p_m, b), builder.fmul(xd_b, builder.sitofp(xs_b, _F32))))
            b2 = builder.add(b, c(_I64, 1))
            for phi, v0, v1 in ((b, c(_I64, 0), b2), (acc, c(_V8F32, None), acc2), (macc, c(_F32, 0.0), macc2)):
                phi.add_incoming(v0, pre)
                phi.add_incoming(v1, loop)
            builder.cbranch(builder.icmp_signed("<", b2, args[6]), loop, done)
            builder.position_at_end(done)
            total = macc2
            for i in range(8):
                total = builder.fadd(total, builder.extract_element(acc2, c(_I32, i)))
            return total

        return sig, codegen

    return row_dot


_features = llvmlite.binding.get_host_cpu_features()
HAVE_VNNI = bool(_features.get("avx512vnni", False) and _features.get("avx512vl", False))
if HAVE_VNNI:
    _dot_q4_1, _dot_q4_0, _dot_q8_0 = (_vnni_row_dot(k) for k in ("q4_1", "q4_0", "q8_0"))
else:
    _dot_q4_1, _dot_q4_0, _dot_q8_0 = _plain_q4_1, _plain_q4_0, _plain_q8_0


@njit(parallel=True, **_JIT)
def matmul_q4_1(out, xq, xd, xs, qs, dq, mq, x):
    # out (M, N) f32; xq, xd, xs: Q8 scratch (`quantize_q8`); qs (N, K/2) u8: byte j of block b holds
    # element j (low nibble) and j + 16 (high nibble); dq, mq (N, NB) u16 float16 scale and min; x (M, K) f32
    quantize_q8(xq, xd, xs, x)
    for r in prange(qs.shape[0]):
        for m in range(x.shape[0]):
            out[m, r] = _dot_q4_1(qs[r], dq[r], mq[r], xq[m], xd[m], xs[m], dq.shape[1])


@njit(parallel=True, **_JIT)
def matmul_q4_0(out, xq, xd, xs, qs, dq, x):
    # out (M, N) f32; xq, xd, xs: Q8 scratch; qs (N, K/2) u8 as Q4_1; dq (N, NB) u16; x (M, K) f32
    quantize_q8(xq, xd, xs, x)
    for r in prange(qs.shape[0]):
        for m in range(x.shape[0]):
            out[m, r] = _dot_q4_0(qs[r], dq[r], dq[r], xq[m], xd[m], xs[m], dq.shape[1])


@njit(parallel=True, **_JIT)
def matmul_q8_0(out, xq, xd, xs, qs, dq, x):
    # out (M, N) f32; xq, xd, xs: Q8 scratch; qs (N, K) i8; dq (N, NB) u16 float16 scales; x (M, K) f32
    quantize_q8(xq, xd, xs, x)
    for r in prange(qs.shape[0]):
        for m in range(x.shape[0]):
            out[m, r] = _dot_q8_0(qs[r], dq[r], dq[r], xq[m], xd[m], xs[m], dq.shape[1])


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


def new_scratch(n_threads: int, m: int, k: int) -> tuple:
    """Scratch for `matmul` over up to M query rows of width up to K: (f32 (T, 2K) for F16/F32 rows,
    then the Q8 activations: xq (M, K) i8, xd (M, K/32) f32, xs (M, K/32) i32)."""
    return (np.zeros((n_threads, 2 * k), np.float32), np.zeros((m, k), np.int8),
            np.zeros((m, k // 32), np.float32), np.zeros((m, k // 32), np.int32))


def matmul(out, scratch, type_name, packed, x, lut):
    """Dispatch on the tensor type. out (M, N); scratch from `new_scratch`; packed from `pack`; x (M, K)."""
    f, xq, xd, xs = scratch
    if type_name == "Q4_1":
        matmul_q4_1(out, xq, xd, xs, packed[0], packed[1], packed[2], x)
    elif type_name == "Q4_0":
        matmul_q4_0(out, xq, xd, xs, packed[0], packed[1], x)
    elif type_name == "Q8_0":
        matmul_q8_0(out, xq, xd, xs, packed[0], packed[1], x)
    elif type_name == "F16":
        matmul_f16(out, f, packed[0], x, lut)
    else:
        matmul_f32(out, f, packed[0], x)


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
