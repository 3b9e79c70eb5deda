"""numba kernels of the reference decoder. Each has a numpy twin in `reference.py`.

Dimension legend (every shape comment below uses these letters)
  M    query tokens in this pass (1 when decoding, K+1 or the tree size when verifying)
  N    output rows of a weight matrix;  K  its input width (a multiple of 32 for block types)
  RB   bytes per row of a block-quantized matrix = K / 32 * block bytes (18 Q4_0, 20 Q4_1, 34 Q8_0)
  T    worker threads; each owns one row of a scratch buffer
  D    model width;  F  feed-forward width;  H  query heads;  G  key/value heads;  E  head dim
  C    KV-cache capacity (slots);  W  cache rows seen through the mask (the new or tree rows)
  R    attention rows of one kv head: M * H/G (query m, head g * H/G + i is row m * H/G + i)
  LUT  65536: float16 bit pattern -> float32

Conventions: outputs first; no allocation inside a kernel (scratch comes in); no random draws.
Block-quantized matrices (Q4_0, Q4_1, Q8_0) multiply activations quantized to Q8 as in llama.cpp
(`quantize_q8`: per 32-block, int8 values and a float32 scale, once per pass per matrix): each
block's dot product is an exact int32 sum of weight ints times activation ints, then the float
epilogue d * dx * sum (+ m * dx * sum(xq) for Q4_1). On a CPU with AVX512-VNNI (`_vnni_dot`, LLVM IR)
one 512-bit vpdpbusd covers a pair of blocks, and each unpacked pair is used for a tile of 8 or 4
query rows; elsewhere (or with SPECSIM_DECODER_PLAIN=1) a plain numba loop computes the same integers.
Row m's result is computed by the same arithmetic in the same order whatever M is and whichever tile
holds it, so a verify pass reproduces the single-token logits exactly. F16/F32 matrices keep float
activations: a row is converted once into the thread's scratch row, then dotted with each query row.
"""
from __future__ import annotations

import math
import os

import numpy as np
import llvmlite.binding
from llvmlite import ir
from numba import get_num_threads, njit, prange
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
def quantize_q8(xq, xd, xs, xd8, sx, x):
    # xq (>= M, >= K) i8; xd (>= M, >= NB) f32 block scale; xs (>= M, >= NB) i32 block sum of xq;
    # xd8 (>= M, >= K/4) f32: xd repeated 8 times (a block's lanes in the VNNI dot); sx (>= M, >= NB) f32 = xd * xs;
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
            xd8[m, b * 8:b * 8 + 8] = d


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
        acc += F16_LUT[d[b]] * xd[b] * np.float32(s) + F16_LUT[mn[b]] * (xd[b] * np.float32(xs[b]))  # m * sx
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


# -- the same with AVX512-VNNI: LLVM IR, one vpdpbusd (u8 x i8, 4 products a lane) per pair of blocks ----
_I8, _I16, _I32, _I64, _F32, _HALF = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64), ir.FloatType(), ir.HalfType()
_V = ir.VectorType
PF = 4  # rows ahead whose quant bytes each row dot prefetches (measured: ~10 % more weight stream than none)
TILES = (8, 4, 1)  # query rows per call of a tile kernel: each weight block is unpacked once for all of them


def _vnni_dot(kind, tm):
    """kind "q4_1", "q4_0" or "q8_0", tm query rows -> an intrinsic
    (out (M, N), r, qs (RB',) u8, d, mn (NB,) u16, xq (M, K) i8, xd (M, NB), xs (M, NB) i32, xd8 (M, K/4),
    sx (M, NB), m0, nb) writing out[m0 + t, r] for t < tm, each computed as by a tm = 1 call (xd unused).
    Per pair of blocks (b, b + 1; a lone last block is padded with zeros): w (64,) u8 = the nibbles, low
    then high, of each block, or the Q8_0 bytes + 128; then for each query row t: lanes (16,) i32 =
    vpdpbusd(c, w, xq[t]) with c = (-8 or -128) * xs[t, b] in lane 0 and xs[t, b + 1] in lane 8 (each block's
    8 lanes sum exactly to the plain integer sum s); acc[t] (16,) f32 = fma(lanes, d * xd8[t], acc[t]) (d
    repeated over each block's 8 lanes); Q4_1: macc[t] (2,) f32 = fma(m, sx[t], macc[t]).
    Result: acc[t] halved by adding its upper half to its lower until one lane is left, plus macc[t][0] + macc[t][1]."""
    @intrinsic
    def dot(typingctx, out, r, qs, d, mn, xq, xd, xs, xd8, sx, m0, nb):
        if (out.dtype, xs.dtype, xd8.dtype, sx.dtype, d.dtype, mn.dtype, out.ndim, xq.ndim, xs.ndim, xd8.ndim,
                sx.ndim) != (types.float32, types.int32, types.float32, types.float32, types.uint16, types.uint16,
                             2, 2, 2, 2, 2) or not all(isinstance(i, types.Integer) for i in (r, m0, nb)):
            return None
        sig = types.void(out, r, qs, d, mn, xq, xd, xs, xd8, sx, m0, nb)

        def codegen(context, builder, signature, args):
            c = lambda t, v: ir.Constant(t, v)  # noqa: E731
            arys = [context.make_array(t)(context, builder, a) if isinstance(t, types.Array) else None
                    for t, a in zip(signature.args, args)]
            args = list(args)
            for i in (1, 10, 11):  # r, m0, nb as int64
                args[i] = context.cast(builder, args[i], signature.args[i], types.int64)

            def rows(ary, ty, t0, col=None):  # pointers to rows m0 + t (element col when given) of a 2-D array
                s0, s1 = cgutils.unpack_tuple(builder, ary.strides, 2)
                base = builder.bitcast(ary.data, _I8.as_pointer())
                off = lambda t: builder.mul(builder.add(args[10], c(_I64, t)), s0)  # noqa: E731
                if col is not None:
                    off = (lambda f: lambda t: builder.add(f(t), builder.mul(col, s1)))(off)
                return [builder.bitcast(builder.gep(base, [off(t)]), ty.as_pointer()) for t in range(t0)]
            p_qs, p_d, p_m = (a.data for a in arys[2:5])
            p_xq, p_xs, p_xd8, p_sx = rows(arys[5], _I8, tm), rows(arys[7], _I32, tm), rows(arys[8], _F32, tm), rows(arys[9], _F32, tm)
            p_out = rows(arys[0], _F32, tm, col=args[1])
            mod = builder.module
            dp = cgutils.get_or_insert_function(mod, ir.FunctionType(_V(_I32, 16), [_V(_I32, 16)] * 3),
                                                "llvm.x86.avx512.vpdpbusd.512")
            fma16 = cgutils.get_or_insert_function(mod, ir.FunctionType(_V(_F32, 16), [_V(_F32, 16)] * 3), "llvm.fma.v16f32")
            fma2 = cgutils.get_or_insert_function(mod, ir.FunctionType(_V(_F32, 2), [_V(_F32, 2)] * 3), "llvm.fma.v2f32")

            def load(ptr, offset, ty, n, lone):  # n elements of ty at ptr + offset, or n / 2 and zeros when lone
                p = builder.gep(ptr, [offset])
                if not lone:
                    return builder.load(builder.bitcast(p, _V(ty, n).as_pointer()), align=1)
                v = builder.load(builder.bitcast(p, _V(ty, n // 2).as_pointer()), align=1)
                return builder.shuffle_vector(v, c(_V(ty, n // 2), None), c(_V(_I32, n), list(range(n))))

            def step(b, acc, macc, lone):  # blocks b, b + 1 (b alone when lone) into every row's accumulators
                if kind == "q8_0":
                    w = builder.xor(load(p_qs, builder.mul(b, c(_I64, 32)), _I8, 64, lone), c(_V(_I8, 64), [0x80] * 64))
                else:  # (the padding of a lone block adds 0: its activations are 0)
                    q = load(p_qs, builder.mul(b, c(_I64, 16)), _I8, 32, lone)
                    lo, hi = builder.and_(q, c(_V(_I8, 32), [15] * 32)), builder.lshr(q, c(_V(_I8, 32), [4] * 32))
                    w = builder.shuffle_vector(lo, hi, c(_V(_I32, 64), [*range(16), *range(32, 48), *range(16, 32), *range(48, 64)]))
                w = builder.bitcast(w, _V(_I32, 16))
                d2 = builder.fpext(builder.bitcast(load(p_d, b, _I16, 2, lone), _V(_HALF, 2)), _V(_F32, 2))
                dv = builder.shuffle_vector(d2, c(_V(_F32, 2), None), c(_V(_I32, 16), [0] * 8 + [1] * 8))
                if kind == "q4_1":
                    mv = builder.fpext(builder.bitcast(load(p_m, b, _I16, 2, lone), _V(_HALF, 2)), _V(_F32, 2))
                acc2, macc2 = [], []
                for t in range(tm):
                    x = builder.bitcast(load(p_xq[t], builder.mul(b, c(_I64, 32)), _I8, 64, lone), _V(_I32, 16))
                    init = c(_V(_I32, 16), None)
                    if kind != "q4_1":
                        corr = builder.mul(load(p_xs[t], b, _I32, 2, lone), c(_V(_I32, 2), [-128 if kind == "q8_0" else -8] * 2))
                        init = builder.shuffle_vector(corr, c(_V(_I32, 2), None), c(_V(_I32, 16), [0] + [2] * 7 + [1] + [2] * 7))
                    lanes = builder.sitofp(builder.call(dp, [init, w, x]), _V(_F32, 16))
                    scale = builder.fmul(dv, load(p_xd8[t], builder.mul(b, c(_I64, 8)), _F32, 16, lone))
                    acc2.append(builder.call(fma16, [lanes, scale, acc[t]]))
                    macc2.append(builder.call(fma2, [mv, load(p_sx[t], b, _F32, 2, lone), macc[t]]) if kind == "q4_1" else macc[t])
                return acc2, macc2

            def phis(incoming):  # [(basic block, acc list, macc list)] -> merged acc, macc
                acc = [builder.phi(_V(_F32, 16)) for _ in range(tm)]
                macc = [builder.phi(_V(_F32, 2)) for _ in range(tm)]
                for bb, a, m in incoming:
                    for phi, v in zip(acc + macc, a + m):
                        phi.add_incoming(v, bb)
                return acc, macc

            # prefetch the quant bytes PF rows ahead (rows are contiguous; a prefetch past the end is harmless)
            pf = cgutils.get_or_insert_function(mod, ir.FunctionType(ir.VoidType(), [_I8.as_pointer(), _I32, _I32, _I32]), "llvm.prefetch.p0")
            row_bytes = builder.mul(args[11], c(_I64, 32 if kind == "q8_0" else 16))
            pf_base = builder.gep(builder.bitcast(p_qs, _I8.as_pointer()), [builder.mul(row_bytes, c(_I64, PF))])
            pf_pre = builder.basic_block
            pf_loop, pf_done = builder.append_basic_block("vnni_dot.pf"), builder.append_basic_block("vnni_dot.pf_done")
            builder.branch(pf_loop)
            builder.position_at_end(pf_loop)
            o = builder.phi(_I64)
            builder.call(pf, [builder.gep(pf_base, [o]), c(_I32, 0), c(_I32, 3), c(_I32, 1)])
            o2 = builder.add(o, c(_I64, 64))
            o.add_incoming(c(_I64, 0), pf_pre)
            o.add_incoming(o2, pf_loop)
            builder.cbranch(builder.icmp_signed("<", o2, row_bytes), pf_loop, pf_done)
            builder.position_at_end(pf_done)
            zero = ([c(_V(_F32, 16), None)] * tm, [c(_V(_F32, 2), None)] * tm)
            nb, n_pairs = args[11], builder.ashr(args[11], c(_I64, 1))
            entry = builder.basic_block
            loop, after, lone, done = (builder.append_basic_block(f"vnni_dot.{n}") for n in ("loop", "after", "lone", "done"))
            builder.cbranch(builder.icmp_signed(">", n_pairs, c(_I64, 0)), loop, after)
            builder.position_at_end(loop)
            i = builder.phi(_I64)
            acc, macc = phis([(entry, *zero)])
            acc2, macc2 = step(builder.mul(i, c(_I64, 2)), acc, macc, False)
            i2 = builder.add(i, c(_I64, 1))
            loop_end = builder.basic_block
            i.add_incoming(c(_I64, 0), entry)
            i.add_incoming(i2, loop_end)
            for phi, v in zip(acc + macc, acc2 + macc2):
                phi.add_incoming(v, loop_end)
            builder.cbranch(builder.icmp_signed("<", i2, n_pairs), loop, after)
            builder.position_at_end(after)
            acc, macc = phis([(entry, *zero), (loop_end, acc2, macc2)])
            builder.cbranch(builder.icmp_signed("<", builder.mul(n_pairs, c(_I64, 2)), nb), lone, done)
            builder.position_at_end(lone)
            acc3, macc3 = step(builder.sub(nb, c(_I64, 1)), acc, macc, True)
            lone_end = builder.basic_block
            builder.branch(done)
            builder.position_at_end(done)
            acc, macc = phis([(after, acc, macc), (lone_end, acc3, macc3)])
            for t in range(tm):
                v, n = acc[t], 16
                while n > 1:  # fixed pairwise order
                    n //= 2
                    half = lambda k: builder.shuffle_vector(v, v, c(_V(_I32, n), list(range(k, k + n))))  # noqa: E731
                    v = builder.fadd(half(0), half(n))
                m_sum = builder.fadd(builder.extract_element(macc[t], c(_I32, 0)), builder.extract_element(macc[t], c(_I32, 1)))
                builder.store(builder.fadd(builder.extract_element(v, c(_I32, 0)), m_sum), p_out[t])
            return context.get_dummy_value()

        return sig, codegen

    return dot


_features = llvmlite.binding.get_host_cpu_features()
HAVE_VNNI = bool(_features.get("avx512vnni", False) and _features.get("avx512bw", False)
                 and not os.environ.get("SPECSIM_DECODER_PLAIN"))  # set: the plain loops (tests them on any CPU)
if HAVE_VNNI:
    _q4_1_t8, _q4_1_t4, _q4_1_t1, _q4_0_t8, _q4_0_t4, _q4_0_t1, _q8_0_t8, _q8_0_t4, _q8_0_t1 = (
        _vnni_dot(k, t) for k in ("q4_1", "q4_0", "q8_0") for t in TILES)
else:  # the plain loop, one query row at a time, behind the same signature (not cached: closures)
    def _plain_tile(row_dot, tm):
        @njit(cache=False, fastmath=True, nogil=True)
        def dot(out, r, qs, d, mn, xq, xd, xs, xd8, sx, m0, nb):
            for m in range(m0, m0 + tm):
                out[m, r] = row_dot(qs, d, mn, xq[m], xd[m], xs[m], nb)
        return dot
    _q4_1_t8, _q4_1_t4, _q4_1_t1, _q4_0_t8, _q4_0_t4, _q4_0_t1, _q8_0_t8, _q8_0_t4, _q8_0_t1 = (
        _plain_tile(f, t) for f in (_plain_q4_1, _plain_q4_0, _plain_q8_0) for t in TILES)

# The block matmuls: quantize x, then every weight row against tiles of 8, then 4 query rows (the weight
# block is unpacked once per tile) and single rows for the rest. fastmath=False: the float epilogue
# is emitted in a fixed order, so a query row's result is the same in any tile and for any M.
_JIT_EXACT = dict(cache=True, fastmath=False, nogil=True)


@njit(parallel=True, **_JIT_EXACT)
def matmul_q4_1(out, xq, xd, xs, xd8, sx, qs, dq, mq, x):
    # out (M, N) f32; xq .. sx: Q8 scratch (`quantize_q8`); qs (N, K/2) u8: byte j of block b holds
    # element j (low nibble) and j + 16 (high nibble); dq, mq (N, NB) u16 float16 scale and min; x (M, K) f32
    quantize_q8(xq, xd, xs, xd8, sx, x)
    n_q, nb, n8 = x.shape[0], dq.shape[1], x.shape[0] - x.shape[0] % 8
    n4 = n_q - n_q % 4
    for r in prange(qs.shape[0]):
        for m in range(0, n8, 8):
            _q4_1_t8(out, r, qs[r], dq[r], mq[r], xq, xd, xs, xd8, sx, m, nb)
        for m in range(n8, n4, 4):
            _q4_1_t4(out, r, qs[r], dq[r], mq[r], xq, xd, xs, xd8, sx, m, nb)
        for m in range(n4, n_q):
            _q4_1_t1(out, r, qs[r], dq[r], mq[r], xq, xd, xs, xd8, sx, m, nb)


@njit(parallel=True, **_JIT_EXACT)
def matmul_q4_0(out, xq, xd, xs, xd8, sx, qs, dq, x):
    # out (M, N) f32; xq .. sx: Q8 scratch; qs (N, K/2) u8 as Q4_1; dq (N, NB) u16; x (M, K) f32
    quantize_q8(xq, xd, xs, xd8, sx, x)
    n_q, nb, n8 = x.shape[0], dq.shape[1], x.shape[0] - x.shape[0] % 8
    n4 = n_q - n_q % 4
    for r in prange(qs.shape[0]):
        for m in range(0, n8, 8):
            _q4_0_t8(out, r, qs[r], dq[r], dq[r], xq, xd, xs, xd8, sx, m, nb)
        for m in range(n8, n4, 4):
            _q4_0_t4(out, r, qs[r], dq[r], dq[r], xq, xd, xs, xd8, sx, m, nb)
        for m in range(n4, n_q):
            _q4_0_t1(out, r, qs[r], dq[r], dq[r], xq, xd, xs, xd8, sx, m, nb)


@njit(parallel=True, **_JIT_EXACT)
def matmul_q8_0(out, xq, xd, xs, xd8, sx, qs, dq, x):
    # out (M, N) f32; xq .. sx: Q8 scratch; qs (N, K) i8; dq (N, NB) u16 float16 scales; x (M, K) f32
    quantize_q8(xq, xd, xs, xd8, sx, x)
    n_q, nb, n8 = x.shape[0], dq.shape[1], x.shape[0] - x.shape[0] % 8
    n4 = n_q - n_q % 4
    for r in prange(qs.shape[0]):
        for m in range(0, n8, 8):
            _q8_0_t8(out, r, qs[r], dq[r], dq[r], xq, xd, xs, xd8, sx, m, nb)
        for m in range(n8, n4, 4):
            _q8_0_t4(out, r, qs[r], dq[r], dq[r], xq, xd, xs, xd8, sx, m, nb)
        for m in range(n4, n_q):
            _q8_0_t1(out, r, qs[r], dq[r], dq[r], xq, xd, xs, xd8, sx, m, nb)


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
    then the Q8 activations: xq (M, K) i8, xd (M, K/32) f32, xs (M, K/32) i32, xd8 (M, K/4) f32, sx (M, K/32) f32)."""
    return (np.zeros((n_threads, 2 * k), np.float32), np.zeros((m, k), np.int8), np.zeros((m, k // 32), np.float32),
            np.zeros((m, k // 32), np.int32), np.zeros((m, k // 4), np.float32), np.zeros((m, k // 32), np.float32))


def matmul(out, scratch, type_name, packed, x, lut):
    """Dispatch on the tensor type. out (M, N); scratch from `new_scratch`; packed from `pack`; x (M, K)."""
    f, q8 = scratch[0], scratch[1:]
    if type_name == "Q4_1":
        matmul_q4_1(out, *q8, packed[0], packed[1], packed[2], x)
    elif type_name == "Q4_0":
        matmul_q4_0(out, *q8, packed[0], packed[1], x)
    elif type_name == "Q8_0":
        matmul_q8_0(out, *q8, packed[0], packed[1], x)
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


TK = 32  # keys per tile of the score pass: a tile (8 KB at E = 64) stays in L1 while every query row uses it


@njit(**_JIT_ORDERED)
def _group_scores(s, q, k, g, r0, r1, n_shared, mask, scale):
    # s (R, >= n_rows + 2) f32, R = M * (H/G): row r = m * (H/G) + i is query m, head g * (H/G) + i;
    # rows [r0, r1) only; column -2 gets each row's max; q (M, H, E); k (C, E) the keys of kv head g; mask (M, W)
    group, top, n_rows = s.shape[0] // q.shape[0], s.shape[1] - 2, n_shared + mask.shape[1]
    for t0 in range(0, n_rows, TK):  # each tile of keys is read once, for every query row
        for r in range(r0, r1):
            m, sr = r // group, s[r]
            qr = q[m, g * group + r % group]
            mx = sr[top] if t0 > 0 else np.float32(-np.inf)
            for t in range(t0, min(t0 + TK, n_rows)):
                if t < n_shared or mask[m, t - n_shared]:
                    sr[t] = _dot(qr, k[t]) * scale
                    mx = max(mx, sr[t])
                else:
                    sr[t] = np.float32(-np.inf)
            sr[top] = mx


@njit(cache=True, fastmath=False, nogil=True)  # IEEE steps: the vector body and the tail give the same bits
def _exp_row(row, mx, n):
    # row (>= n,) f32: row[t] = exp(row[t] - mx) for t < n; 0 below -87 (a masked key's -inf: an exact 0).
    # exp(x) = 2^k e^r as in `swiglu` (Cephes expf), 2^k (k in [-126, 0]) a product of exact powers of two
    for t in range(n):
        x = max(row[t] - mx, np.float32(-87.0))
        k = np.rint(x * np.float32(1.44269504))
        r = x - k * np.float32(0.693359375) - k * np.float32(-2.12194440e-4)
        p = np.float32(1.9875691500e-4) * r + np.float32(1.3981999507e-3)
        p = p * r + np.float32(8.3334519073e-3)
        p = p * r + np.float32(4.1665795894e-2)
        p = p * r + np.float32(1.6666665459e-1)
        p = p * r + np.float32(5.0000001201e-1)
        e, a = p * r * r + r + np.float32(1.0), np.int32(-k)
        e *= np.float32(2.0 ** -1) if a & 1 else np.float32(1.0)
        e *= np.float32(2.0 ** -2) if a & 2 else np.float32(1.0)
        e *= np.float32(2.0 ** -4) if a & 4 else np.float32(1.0)
        e *= np.float32(2.0 ** -8) if a & 8 else np.float32(1.0)
        e *= np.float32(2.0 ** -16) if a & 16 else np.float32(1.0)
        e *= np.float32(2.0 ** -32) if a & 32 else np.float32(1.0)
        e *= np.float32(2.0 ** -64) if a & 64 else np.float32(1.0)
        row[t] = e if row[t] - mx > np.float32(-87.0) else np.float32(0.0)


@njit(**_JIT_ORDERED)
def _softmax_rows(s, r0, r1, n_rows):
    # s (R, >= n_rows + 2), rows [r0, r1): columns [0, n_rows) scores -> exp(score - max); column -1 the
    # reciprocal of their sum, summed in ascending key order (a masked key adds an exact 0)
    top = s.shape[1] - 2
    for r in range(r0, r1):
        row, total = s[r], np.float32(0.0)
        _exp_row(row, s[r, top], n_rows)
        for t in range(n_rows):
            total += row[t]
        row[top + 1] = np.float32(1.0) / total


RB = 8  # query rows per sub-block of the value pass: their output rows (2 KB at E = 64) stay in L1


@njit(**_JIT_ORDERED)
def _group_values(out, s, v, g, r0, r1, n_rows):
    # out (M, H, E); s (R, >= n_rows + 2) from `_softmax_rows`, rows [r0, r1); v (C, E) the values of kv head g.
    # Keys go in pairs: o + p0 v0 + p1 v1 is two fused multiply-adds in key order, the bits of two single
    # steps, with one load and store of o; a pair with a zero weight goes as single steps (0 is skipped)
    group, inv = s.shape[0] // out.shape[0], s.shape[1] - 1
    for r in range(r0, r1):
        out[r // group, g * group + r % group, :] = 0.0
    for t0 in range(0, n_rows, TK):  # each tile of values is read once, for every row
        t1 = min(t0 + TK, n_rows)
        for rb in range(r0, r1, RB):
            mb, hb = rb // group, g * group + rb % group  # query and head of row rb
            for t in range(t0, t1, 2):  # rows inner: independent sums, each in key order
                m, h = mb, hb  # query and head of row r
                for r in range(rb, min(rb + RB, r1)):
                    p0 = s[r, t] * s[r, inv]
                    p1 = s[r, t + 1] * s[r, inv] if t + 1 < t1 else np.float32(0.0)
                    if p0 != 0.0 and p1 != 0.0:
                        for j in range(v.shape[1]):
                            out[m, h, j] = out[m, h, j] + p0 * v[t, j] + p1 * v[t + 1, j]
                    else:
                        for tt in range(t, min(t + 2, t1)):
                            p = p0 if tt == t else p1
                            if p != 0.0:
                                for j in range(v.shape[1]):
                                    out[m, h, j] += p * v[tt, j]
                    h += 1
                    if h == (g + 1) * group:
                        m, h = m + 1, g * group


@njit(parallel=True, **_JIT_ORDERED)
def _attention(out, scores, q, k_cache, v_cache, n_shared, mask, n_c):
    # as `attention`; n_c: chunks of the G * R rows (kv head major), one per thread
    n_g, n_rows, group = k_cache.shape[0], n_shared + mask.shape[1], q.shape[1] // k_cache.shape[0]
    rows, scale = q.shape[0] * group, np.float32(1.0 / math.sqrt(q.shape[2]))
    for c in prange(n_c):
        lo, hi = c * n_g * rows // n_c, (c + 1) * n_g * rows // n_c  # rows [lo, hi) of all kv heads
        for g in range(lo // rows, min(n_g, (hi + rows - 1) // rows)):
            r0, r1 = max(lo - g * rows, 0), min(hi - g * rows, rows)
            s = scores[g, :rows]  # (R, >= n_rows + 2)
            _group_scores(s, q, k_cache[g], g, r0, r1, n_shared, mask, scale)
            _softmax_rows(s, r0, r1, n_rows)
            _group_values(out, s, v_cache[g], g, r0, r1, n_rows)


def attention(out, scores, q, k_cache, v_cache, n_shared, mask):
    """out (M, H, E) f32; scores (G, >= M * H/G, >= n_shared + W + 2) f32 scratch; q (M, H, E);
    k_cache, v_cache (G, C, E); n_shared: cache rows [0, n_shared) seen by every query;
    mask (M, W) bool: query m sees row n_shared + w.
    Fused: per kv head, the scores of all R = M * H/G query rows (keys outer), a softmax per row, then
    the values (values outer). The G * R rows, kv head major, are cut into T equal chunks, one per
    thread: a thread reads each key and value of a kv head once for all its rows of that head, and a
    kv head is read by two threads only where a chunk boundary cuts it. A row's arithmetic is the
    same whatever M, T and the other rows are."""
    _attention(out, scores, q, k_cache, v_cache, n_shared, mask, get_num_threads())


@njit(cache=True, fastmath=False, nogil=True)  # no reassociation: it would undo the two-part ln 2
def swiglu(out, bits, gate, up):
    # out (M, F) f32; bits (>= M, >= F) i32 scratch; gate (M, F); up (M, F): out = silu(gate) * up
    for m in range(gate.shape[0]):
        bm, om, gm = bits[m], out[m], gate[m]
        for j in range(gate.shape[1]):  # exp(-g) = 2^n e^r, r = -g - n ln 2 (Cody-Waite), e^r a polynomial
            x = min(max(-gm[j], np.float32(-87.0)), np.float32(88.0))  # (Cephes expf): the loop vectorizes
            n = np.rint(x * np.float32(1.44269504))
            r = x - n * np.float32(0.693359375) - n * np.float32(-2.12194440e-4)
            p = np.float32(1.9875691500e-4) * r + np.float32(1.3981999507e-3)
            p = p * r + np.float32(8.3334519073e-3)
            p = p * r + np.float32(4.1665795894e-2)
            p = p * r + np.float32(1.6666665459e-1)
            p = p * r + np.float32(5.0000001201e-1)
            om[j] = p * r * r + r + np.float32(1.0)
            bm[j] = (np.int32(n) + np.int32(127)) << np.int32(23)  # the float32 bits of 2^n
        two_n = bm.view(np.float32)
        for j in range(gate.shape[1]):
            om[j] = gm[j] * up[m, j] / (np.float32(1.0) + om[j] * two_n[j])


@njit(parallel=True, **_JIT)
def stream_sum(a):
    # a (S,) f32, a large array read once (the memory-bandwidth probe); numba's parallel reduction
    return a.sum()


def set_threads(n: int) -> None:
    """Threads the parallel kernels use (numba's set_num_threads); scratch buffers made after this."""
    import numba

    numba.set_num_threads(n)
