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
Every entry point checks that its arrays' shapes agree before its loops (a ValueError otherwise), so a
caller's mistake never becomes an out-of-bounds read or write: the VNNI tiles load through raw pointers,
where numba's boundscheck cannot see. The tests run the kernels under NUMBA_BOUNDSCHECK=1 as well.
Block-quantized matrices (Q4_0, Q4_1, Q8_0) multiply activations quantized to Q8 as in llama.cpp
(`quantize_q8`: per 32-block, int8 values and a float32 scale, once per pass per matrix): each
block's dot product is an exact int32 sum of weight ints times activation ints, then the float
epilogue acc = fma(sum, d * dx, acc) (+ fma(m, dx * sum(xq), acc) for Q4_1), blocks in order. `pack`
interleaves the weight rows in groups of 16, so that on a CPU with AVX512-VNNI (`_vnni_dot`, LLVM IR)
each int32 lane of a vpdpbusd is one output row: a block is 8 vpdpbusd (4 elements of 16 rows each,
times a broadcast of 4 activation bytes), one convert and one fma, and there is no horizontal sum at
all. Each loaded and unpacked block serves a tile of 8 or 4 query rows; elsewhere (or with
SPECSIM_DECODER_PLAIN=1) a plain numba loop computes the same integers and the same epilogue order.
Row m's result is computed by the same arithmetic in the same order whatever M is and whichever tile
holds it, so a verify pass reproduces the single-token logits exactly. F16/F32 matrices keep float
activations: a row is converted once into the thread's scratch row, then dotted with each query row.
"""
from __future__ import annotations

import math
import os

import numpy as np

from .fetch import configure_numba_cache

configure_numba_cache()  # before numba defines anything: compiled kernels go to a user cache folder

import llvmlite.binding  # noqa: E402
from llvmlite import ir  # noqa: E402
from numba import get_num_threads, njit, prange  # noqa: E402
from numba.core import cgutils, types  # noqa: E402
from numba.extending import intrinsic  # noqa: E402

F16_LUT = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)  # (LUT,)

_JIT = dict(cache=True, fastmath=True, nogil=True)
# Attention sums in order (no reassociation): a row masked out adds an exact 0, so a query's result
# does not depend on how many masked rows the pass carries (tree verify vs plain decode).
_JIT_ORDERED = dict(cache=True, fastmath={"nsz", "arcp", "contract", "afn"}, nogil=True)  # -inf marks masked rows
# Block matmuls: no fast-math, so each output's float epilogue runs in the fixed order written (any tile, any M)
_JIT_EXACT = dict(cache=True, fastmath=False, nogil=True)


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


# -- 16 weight rows (a group, interleaved by `pack`) . one Q8 activation row ----------------------------
# Layout of group g (weight rows 16 g .. 16 g + 15, lane l = row 16 g + l): per block b, chunk c of four
# elements (4 c .. 4 c + 3): Q4 qs[b * 256 + k * 64 + l * 4 + j] = the row's block byte 4 k + j (low nibble
# element 4 k + j = chunk k, high nibble element 16 + 4 k + j = chunk k + 4); Q8_0 qs[b * 512 + c * 64 + l * 4 + j]
# = element 4 c + j; d, mn [b * 16 + l]. Each lane's result: acc = 0; per block in order
# acc = fma(float(s), d * xd, acc) (s the exact integer block sum, Q4_0's -8 * sum(xq) included), then
# Q4_1: acc = fma(m, sx, acc), sx = xd * sum(xq). No horizontal sums: a lane is one output.
GROUP = 16  # weight rows per group: the 16 int32 lanes of a vpdpbusd


@njit(**_JIT_EXACT)
def _plain_q4_1(qs, d, mn, xq, xd, xs, nb, l):
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


@njit(**_JIT_EXACT)
def _plain_q4_0(qs, d, mn, xq, xd, xs, nb, l):
    acc = np.float32(0.0)
    for b in range(nb):
        s = np.int32(-8) * xs[b]
        for k in range(4):
            for j in range(4):
                q = np.int32(qs[b * 256 + k * 64 + l * 4 + j])
                s += (q & np.int32(15)) * np.int32(xq[b * 32 + 4 * k + j]) + (q >> np.int32(4)) * np.int32(xq[b * 32 + 16 + 4 * k + j])
        acc = acc + np.float32(s) * (F16_LUT[d[b * 16 + l]] * xd[b])
    return acc


@njit(**_JIT_EXACT)
def _plain_q8_0(qs, d, mn, xq, xd, xs, nb, l):
    acc = np.float32(0.0)
    for b in range(nb):
        s = np.int32(0)
        for c in range(8):
            for j in range(4):
                s += np.int32(qs[b * 512 + c * 64 + l * 4 + j]) * np.int32(xq[b * 32 + 4 * c + j])
        acc = acc + np.float32(s) * (F16_LUT[d[b * 16 + l]] * xd[b])
    return acc


# -- the same with AVX512-VNNI: LLVM IR, 8 vpdpbusd (u8 x i8, 4 products a lane) per block and query row ----
_I8, _I16, _I32, _I64, _F32, _HALF = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64), ir.FloatType(), ir.HalfType()
_V = ir.VectorType
TILES = (8, 4, 1)  # query rows per call of a tile kernel: each weight block is unpacked once for all of them


def _vnni_dot(kind, tm):
    """kind "q4_1", "q4_0" or "q8_0", tm query rows -> an intrinsic
    (out (M, N), g, qs, d, mn: group g as `pack` lays it out, xq (M, K) i8, xd (M, NB) f32, xs (M, NB) i32,
    sx (M, NB) f32, m0, nb, nv) writing out[m0 + t, 16 g + l] for t < tm and lanes l < nv, each lane
    computed as by the plain loop's order and as by a tm = 1 call. Per block b: w[c] (64,) u8 = chunk c of
    the 16 rows (nibbles, or the Q8_0 bytes + 128); per query row t: s (16,) i32 = c0 + sum over c of
    vpdpbusd(w[c], broadcast of xq[t] elements 4 c .. 4 c + 3) (c0 = -8 or -128 times sum(xq[t, block b]),
    exact integers, so how the 8 products are chained does not change a bit); acc[t] = fma(float(s),
    d * xd[t, b], acc[t]); Q4_1: acc[t] = fma(m, sx[t, b], acc[t])."""
    @intrinsic
    def dot(typingctx, out, g, qs, d, mn, xq, xd, xs, sx, m0, nb, nv):
        if (out.dtype, xd.dtype, xs.dtype, sx.dtype, d.dtype, mn.dtype, out.ndim, xq.ndim, xd.ndim, xs.ndim,
                sx.ndim) != (types.float32, types.float32, types.int32, types.float32, types.uint16, types.uint16,
                             2, 2, 2, 2, 2) or not all(isinstance(i, types.Integer) for i in (g, m0, nb, nv)):
            return None
        sig = types.void(out, g, qs, d, mn, xq, xd, xs, sx, m0, nb, nv)

        def codegen(context, builder, signature, args):
            c = lambda t, v: ir.Constant(t, v)  # noqa: E731
            arys = [context.make_array(t)(context, builder, a) if isinstance(t, types.Array) else None
                    for t, a in zip(signature.args, args)]
            args = list(args)
            for i in (1, 9, 10, 11):  # g, m0, nb, nv as int64
                args[i] = context.cast(builder, args[i], signature.args[i], types.int64)

            def rows(ary, ty, col=None):  # pointers to rows m0 + t (element col when given) of a 2-D array
                s0, s1 = cgutils.unpack_tuple(builder, ary.strides, 2)
                base = builder.bitcast(ary.data, _I8.as_pointer())
                out = []
                for t in range(tm):
                    off = builder.mul(builder.add(args[9], c(_I64, t)), s0)
                    if col is not None:
                        off = builder.add(off, builder.mul(col, s1))
                    out.append(builder.bitcast(builder.gep(base, [off]), ty.as_pointer()))
                return out
            p_qs = builder.bitcast(arys[2].data, _I8.as_pointer())
            p_d, p_m = arys[3].data, arys[4].data
            p_xq, p_xd, p_xs, p_sx = rows(arys[5], _I32), rows(arys[6], _F32), rows(arys[7], _I32), rows(arys[8], _F32)
            p_out = rows(arys[0], _F32, col=builder.mul(args[1], c(_I64, GROUP)))
            mod = builder.module
            dp = cgutils.get_or_insert_function(mod, ir.FunctionType(_V(_I32, 16), [_V(_I32, 16)] * 3),
                                                "llvm.x86.avx512.vpdpbusd.512")
            fma16 = cgutils.get_or_insert_function(mod, ir.FunctionType(_V(_F32, 16), [_V(_F32, 16)] * 3), "llvm.fma.v16f32")

            def vload(ptr, offset, ty, n):
                return builder.load(builder.bitcast(builder.gep(ptr, [offset]), _V(ty, n).as_pointer()), align=1)

            def bcast(v, ty):
                one = builder.insert_element(c(_V(ty, 16), None), v, c(_I32, 0))
                return builder.shuffle_vector(one, c(_V(ty, 16), None), c(_V(_I32, 16), [0] * 16))

            def halves(ptr, b):  # 16 float16 at ptr + 16 b -> (16,) f32
                return builder.fpext(builder.bitcast(vload(ptr, builder.mul(b, c(_I64, 16)), _I16, 16), _V(_HALF, 16)), _V(_F32, 16))

            n_chains = {8: 1, 4: 2, 1: 4}.get(tm, 1)  # independent vpdpbusd chains per row (integers: same sums)

            def step(b, acc):
                w = []
                if kind == "q8_0":
                    for ch in range(8):
                        q = vload(p_qs, builder.add(builder.mul(b, c(_I64, 512)), c(_I64, ch * 64)), _I8, 64)
                        w.append(builder.bitcast(builder.xor(q, c(_V(_I8, 64), [0x80] * 64)), _V(_I32, 16)))
                else:
                    lo, hi = [], []
                    for k in range(4):
                        q = vload(p_qs, builder.add(builder.mul(b, c(_I64, 256)), c(_I64, k * 64)), _I8, 64)
                        lo.append(builder.bitcast(builder.and_(q, c(_V(_I8, 64), [15] * 64)), _V(_I32, 16)))
                        hi.append(builder.bitcast(builder.lshr(q, c(_V(_I8, 64), [4] * 64)), _V(_I32, 16)))
                    w = lo + hi
                dv = halves(p_d, b)
                if kind == "q4_1":
                    mv = halves(p_m, b)
                acc2 = []
                for t in range(tm):
                    xs8 = builder.mul(b, c(_I64, 8))
                    zero = c(_V(_I32, 16), [0] * 16)
                    chains = [zero] * n_chains
                    if kind != "q4_1":
                        xsb = builder.load(builder.gep(p_xs[t], [b]))
                        chains[0] = bcast(builder.mul(xsb, c(_I32, -128 if kind == "q8_0" else -8)), _I32)
                    for ch in range(8):
                        xv = bcast(builder.load(builder.gep(p_xq[t], [builder.add(xs8, c(_I64, ch))]), align=1), _I32)
                        chains[ch % n_chains] = builder.call(dp, [chains[ch % n_chains], w[ch], xv])
                    s = chains[0]
                    for ch in chains[1:]:
                        s = builder.add(s, ch)
                    scale = builder.fmul(dv, bcast(builder.load(builder.gep(p_xd[t], [b])), _F32))
                    a = builder.call(fma16, [builder.sitofp(s, _V(_F32, 16)), scale, acc[t]])
                    if kind == "q4_1":
                        a = builder.call(fma16, [mv, bcast(builder.load(builder.gep(p_sx[t], [b])), _F32), a])
                    acc2.append(a)
                return acc2

            nb = args[10]
            entry = builder.basic_block
            loop, done = builder.append_basic_block("vnni_dot.loop"), builder.append_basic_block("vnni_dot.done")
            zero_acc = c(_V(_F32, 16), [0.0] * 16)
            builder.cbranch(builder.icmp_signed(">", nb, c(_I64, 0)), loop, done)
            builder.position_at_end(loop)
            i = builder.phi(_I64)
            acc = [builder.phi(_V(_F32, 16)) for _ in range(tm)]
            acc2 = step(i, acc)
            i2 = builder.add(i, c(_I64, 1))
            loop_end = builder.basic_block
            i.add_incoming(c(_I64, 0), entry)
            i.add_incoming(i2, loop_end)
            for phi, v in zip(acc, acc2):
                phi.add_incoming(zero_acc, entry)
                phi.add_incoming(v, loop_end)
            builder.cbranch(builder.icmp_signed("<", i2, nb), loop, done)
            builder.position_at_end(done)
            res = [builder.phi(_V(_F32, 16)) for _ in range(tm)]
            for phi, v in zip(res, acc2):
                phi.add_incoming(zero_acc, entry)
                phi.add_incoming(v, loop_end)
            nv = builder.trunc(args[11], _I32)
            mask = builder.icmp_signed("<", c(_V(_I32, 16), list(range(16))), bcast(nv, _I32))
            full, part, end = (builder.append_basic_block(f"vnni_dot.{n}") for n in ("full", "part", "end"))
            builder.cbranch(builder.icmp_signed(">=", args[11], c(_I64, GROUP)), full, part)
            builder.position_at_end(full)
            for t in range(tm):
                builder.store(res[t], builder.bitcast(p_out[t], _V(_F32, 16).as_pointer()), align=4)
            builder.branch(end)
            builder.position_at_end(part)  # the last group of a matrix whose N is not a multiple of 16
            for t in range(tm):
                for l in range(GROUP):
                    yes, nxt = builder.append_basic_block(f"vnni_dot.st{t}_{l}"), builder.append_basic_block(f"vnni_dot.nx{t}_{l}")
                    builder.cbranch(builder.extract_element(mask, c(_I32, l)), yes, nxt)
                    builder.position_at_end(yes)
                    builder.store(builder.extract_element(res[t], c(_I32, l)), builder.gep(p_out[t], [c(_I64, l)]))
                    builder.branch(nxt)
                    builder.position_at_end(nxt)
            builder.branch(end)
            builder.position_at_end(end)
            return context.get_dummy_value()

        return sig, codegen

    return dot


_features = llvmlite.binding.get_host_cpu_features()
HAVE_VNNI = bool(_features.get("avx512vnni", False) and _features.get("avx512bw", False)
                 and not os.environ.get("SPECSIM_DECODER_PLAIN"))  # set: the plain loops (tests them on any CPU)
if HAVE_VNNI:
    _q4_1_t8, _q4_1_t4, _q4_1_t1, _q4_0_t8, _q4_0_t4, _q4_0_t1, _q8_0_t8, _q8_0_t4, _q8_0_t1 = (
        _vnni_dot(k, t) for k in ("q4_1", "q4_0", "q8_0") for t in TILES)
else:  # the plain loop, one query row and one lane at a time, behind the same signature (not cached: closures)
    def _plain_tile(row_dot, tm):
        @njit(cache=False, fastmath=False, nogil=True)
        def dot(out, g, qs, d, mn, xq, xd, xs, sx, m0, nb, nv):
            for m in range(m0, m0 + tm):
                for l in range(nv):
                    out[m, g * GROUP + l] = row_dot(qs, d, mn, xq[m], xd[m], xs[m], nb, l)
        return dot
    _q4_1_t8, _q4_1_t4, _q4_1_t1, _q4_0_t8, _q4_0_t4, _q4_0_t1, _q8_0_t8, _q8_0_t4, _q8_0_t1 = (
        _plain_tile(f, t) for f in (_plain_q4_1, _plain_q4_0, _plain_q8_0) for t in TILES)

# The block matmuls: quantize x, then every group of 16 weight rows against tiles of 8, then 4 query rows
# (each weight block is loaded and unpacked once per tile) and single rows for the rest. A query row's
# result is the same in any tile and for any M (the same per-lane operations in the same order).


def _tiled_matmul(tile8, tile4, tile1, qs_per_block):
    """The driver shared by every block type: Q8-quantize x, then for each group of 16 weight rows
    run the tiles of 8, then 4, then single query rows. Q4_0 and Q8_0 have no block minimum: their
    callers pass `dq` again as `mq`, which their tile kernels ignore. qs_per_block: bytes of qs per
    block of a group (256 for Q4, 512 for Q8_0)."""

    @njit(parallel=True, **_JIT_EXACT)
    def matmul(out, xq, xd, xs, sx, qs, dq, mq, x):
        # out (M, N) f32; xq .. sx: Q8 scratch (`quantize_q8`); qs (NG, NB * 256) u8 (Q4) or (NG, NB * 512)
        # i8 (Q8_0); dq, mq (NG, NB * 16) u16 float16 scale and min, groups of 16 rows as `pack` lays them
        # out (NG = ceil(N / 16)); x (M, K) f32
        n_q, nb, n8, n = x.shape[0], x.shape[1] // 32, x.shape[0] - x.shape[0] % 8, out.shape[1]
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


matmul_q4_1 = _tiled_matmul(_q4_1_t8, _q4_1_t4, _q4_1_t1, 256)
matmul_q4_0 = _tiled_matmul(_q4_0_t8, _q4_0_t4, _q4_0_t1, 256)
matmul_q8_0 = _tiled_matmul(_q8_0_t8, _q8_0_t4, _q8_0_t1, 512)


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
    if (x.shape[1] != w.shape[1] or out.shape[0] != x.shape[0] or out.shape[1] != n or scratch.shape[1] < w.shape[1]
            or lut.shape[0] != 65536):
        raise ValueError("matmul_f16: shapes of out, scratch, w, x and lut do not agree")
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
    if x.shape[1] != w.shape[1] or out.shape[0] != x.shape[0] or out.shape[1] != n:
        raise ValueError("matmul_f32: shapes of out, w and x do not agree")
    for t in prange(n_threads):
        _f32_rows(out, w, x, t * n // n_threads, (t + 1) * n // n_threads)


def pack(type_name: str, raw: np.ndarray, n_cols: int) -> tuple:
    """GGUF bytes (N, RB) -> the arrays the matmul kernels read. F16 (w (N, K) u16,), F32 (w (N, K) f32,).
    Block types: rows in groups of 16 (the last padded with zero rows), interleaved so that one 64-byte load
    holds four elements of a block for each of the 16 rows (see the layout above `_plain_q4_1`):
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


@njit(**_JIT)
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


@njit(**_JIT)
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
    if (out.shape != q.shape or v_cache.shape != k_cache.shape or n_g < 1 or q.shape[1] % n_g != 0
            or k_cache.shape[2] != q.shape[2] or mask.shape[0] != q.shape[0] or n_shared < 0
            or n_rows > k_cache.shape[1] or scores.shape[0] < n_g or scores.shape[1] < rows
            or scores.shape[2] < n_rows + 2 or n_c < 1):
        raise ValueError("attention: shapes of out, scores, q, the caches and the mask do not agree")
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
    if out.shape != gate.shape or up.shape != gate.shape or bits.shape[0] < gate.shape[0] or bits.shape[1] < gate.shape[1]:
        raise ValueError("swiglu: shapes of out, bits, gate and up do not agree")
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
