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
all. Each loaded and unpacked block serves a tile of 8 or 4 query rows. A CPU with AVX2 but not
AVX512-VNNI runs the same tiles with each block's 8 vpdpbusd made of AVX2 instructions (`_block_sum_avx2`: the
same exact integers, so the same results bit for bit) in tiles of 4; elsewhere (or with
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


def _block_sum_avx2(builder, *, q4: bool):
    """What 8 chained vpdpbusd give (16 lanes: c0 + the sum over chunks c of 4 byte products w[c] . x[c]
    each), from AVX2 instructions, the same exact integers. Q4: u8 nibbles (<= 15) times i8 activations
    (in [-127, 127], `quantize_q8`) through vpmaddubsw; an i16 pair sum is at most 2 * 15 * 127 = 3810 in
    size, so the 8 chunks' pair sums add in i16 (<= 30480, no wrap) before one vpmaddwd by ones. Q8_0
    (q4 False) takes its bytes signed, not offset by 128 (255 * 127 pairs would saturate vpmaddubsw):
    |w| times x with w's sign (vpsignb), pair sums <= 2 * 128 * 127 = 32512, widened by vpmaddwd per chunk;
    the caller then adds no -128 * sum(x) correction."""
    c = lambda t, v: ir.Constant(t, v)  # noqa: E731
    mod = builder.module
    maddwd = cgutils.get_or_insert_function(mod, ir.FunctionType(_V(_I32, 8), [_V(_I16, 16)] * 2),
                                            "llvm.x86.avx2.pmadd.wd")
    maddubs = cgutils.get_or_insert_function(mod, ir.FunctionType(_V(_I16, 16), [_V(_I8, 32)] * 2),
                                             "llvm.x86.avx2.pmadd.ub.sw")
    psign = cgutils.get_or_insert_function(mod, ir.FunctionType(_V(_I8, 32), [_V(_I8, 32)] * 2), "llvm.x86.avx2.psign.b")
    absb = cgutils.get_or_insert_function(mod, ir.FunctionType(_V(_I8, 32), [_V(_I8, 32), ir.IntType(1)]), "llvm.abs.v32i8")
    ones = c(_V(_I16, 16), [1] * 16)
    sels = [c(_V(_I32, 32), list(range(32 * h, 32 * h + 32))) for h in range(2)]  # a (64,) byte vector's halves

    def half(v, h):
        v = builder.bitcast(v, _V(_I8, 64))
        return builder.shuffle_vector(v, v, sels[h])

    def pairs(w, x):  # (32,) bytes each -> (16,) i16 pair sums of products
        if not q4:
            w, x = builder.call(absb, [w, c(ir.IntType(1), 0)]), builder.call(psign, [x, w])
        return builder.call(maddubs, [w, x])

    def block(c0, ws, xs):
        out = []
        for h in range(2):
            ps = [pairs(half(w, h), half(x, h)) for w, x in zip(ws, xs)]
            if q4:  # i16 sums in a tree (their order is free: exact integers)
                while len(ps) > 1:
                    ps = [builder.add(ps[i], ps[i + 1]) for i in range(0, len(ps), 2)]
                out.append(builder.call(maddwd, [ps[0], ones]))
            else:
                qs = [builder.call(maddwd, [p, ones]) for p in ps]
                while len(qs) > 1:
                    qs = [builder.add(qs[i], qs[i + 1]) for i in range(0, len(qs), 2)]
                out.append(qs[0])
        return builder.add(c0, builder.shuffle_vector(out[0], out[1], c(_V(_I32, 16), list(range(16)))))
    return block


def _vnni_dot(kind, tm, vnni=True):
    """kind "q4_1", "q4_0" or "q8_0", tm query rows -> an intrinsic
    (out (M, N), g, qs, d, mn: group g as `pack` lays it out, xq (M, K) i8, xd (M, NB) f32, xs (M, NB) i32,
    sx (M, NB) f32, m0, nb, nv) writing out[m0 + t, 16 g + l] for t < tm and lanes l < nv, each lane
    computed as by the plain loop's order and as by a tm = 1 call. Per block b: w[c] (64,) u8 = chunk c of
    the 16 rows (nibbles, or the Q8_0 bytes + 128); per query row t: s (16,) i32 = c0 + sum over c of
    vpdpbusd(w[c], broadcast of xq[t] elements 4 c .. 4 c + 3) (c0 = -8 or -128 times sum(xq[t, block b]);
    on AVX2 Q8_0's bytes stay signed and c0 = 0, see `_block_sum_avx2`: the same sums; all exact integers,
    so how the 8 products are chained does not change a bit); acc[t] = fma(float(s),
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
            if vnni:
                vpdpbusd = cgutils.get_or_insert_function(mod, ir.FunctionType(_V(_I32, 16), [_V(_I32, 16)] * 3),
                                                          "llvm.x86.avx512.vpdpbusd.512")
                n_chains = {8: 1, 4: 2, 1: 4}.get(tm, 1)  # independent vpdpbusd chains per row (the same sums)

                def block_sum(c0, ws, xs):
                    chains = [c0] + [c(_V(_I32, 16), [0] * 16)] * (n_chains - 1)
                    for ch, (w, x) in enumerate(zip(ws, xs)):
                        chains[ch % n_chains] = builder.call(vpdpbusd, [chains[ch % n_chains], w, x])
                    s = chains[0]
                    for ch in chains[1:]:
                        s = builder.add(s, ch)
                    return s
            else:
                block_sum = _block_sum_avx2(builder, q4=kind != "q8_0")
            fma16 = cgutils.get_or_insert_function(mod, ir.FunctionType(_V(_F32, 16), [_V(_F32, 16)] * 3), "llvm.fma.v16f32")

            def vload(ptr, offset, ty, n):
                return builder.load(builder.bitcast(builder.gep(ptr, [offset]), _V(ty, n).as_pointer()), align=1)

            def bcast(v, ty):
                one = builder.insert_element(c(_V(ty, 16), None), v, c(_I32, 0))
                return builder.shuffle_vector(one, c(_V(ty, 16), None), c(_V(_I32, 16), [0] * 16))

            def halves(ptr, b):  # 16 float16 at ptr + 16 b -> (16,) f32
                return builder.fpext(builder.bitcast(vload(ptr, builder.mul(b, c(_I64, 16)), _I16, 16), _V(_HALF, 16)), _V(_F32, 16))

            def step(b, acc):
                w = []
                if kind == "q8_0":  # vpdpbusd takes unsigned bytes: offset by 128 (AVX2's step takes them signed)
                    for ch in range(8):
                        q = vload(p_qs, builder.add(builder.mul(b, c(_I64, 512)), c(_I64, ch * 64)), _I8, 64)
                        w.append(builder.bitcast(builder.xor(q, c(_V(_I8, 64), [0x80] * 64)) if vnni else q, _V(_I32, 16)))
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
                    c0 = c(_V(_I32, 16), [0] * 16)
                    if kind == "q4_0" or (kind == "q8_0" and vnni):  # the offset's correction: -8 or -128 x sum(xq)
                        xsb = builder.load(builder.gep(p_xs[t], [b]))
                        c0 = bcast(builder.mul(xsb, c(_I32, -128 if kind == "q8_0" else -8)), _I32)
                    xv = [bcast(builder.load(builder.gep(p_xq[t], [builder.add(xs8, c(_I64, ch))]), align=1), _I32)
                          for ch in range(8)]
                    s = block_sum(c0, w, xv)
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
_PLAIN = bool(os.environ.get("SPECSIM_DECODER_PLAIN"))  # set: the plain loops (tests them on any CPU)
HAVE_VNNI = bool(_features.get("avx512vnni", False) and _features.get("avx512bw", False) and not _PLAIN)
HAVE_AVX2 = bool(_features.get("avx2", False) and not _PLAIN)
HAVE_TILES = HAVE_VNNI or HAVE_AVX2  # the vector tiles: vpdpbusd, or the same integers from AVX2 instructions
EIGHT_ROW_TILES = HAVE_VNNI or not HAVE_TILES
ROW_TILES = TILES if EIGHT_ROW_TILES else tuple(t for t in TILES if t != 8)  # the tiles the block matmuls run here


if HAVE_VNNI:
    _q4_1_t8, _q4_1_t4, _q4_1_t1, _q4_0_t8, _q4_0_t4, _q4_0_t1, _q8_0_t8, _q8_0_t4, _q8_0_t1 = (
        _vnni_dot(k, t) for k in ("q4_1", "q4_0", "q8_0") for t in TILES)
elif HAVE_AVX2:
    # no tile of 8 (the driver runs tiles of 4): AVX2 has 16 vector registers, and 8 rows' accumulators
    # (two registers each) spill; a row's arithmetic does not depend on its tile
    # (the driver's never-run tile-of-8 slot takes the tile of 4 itself: one intrinsic compiled, not two)
    _q4_1_t4, _q4_1_t1, _q4_0_t4, _q4_0_t1, _q8_0_t4, _q8_0_t1 = (
        _vnni_dot(k, t, vnni=False) for k in ("q4_1", "q4_0", "q8_0") for t in (4, 1))
    _q4_1_t8, _q4_0_t8, _q8_0_t8 = _q4_1_t4, _q4_0_t4, _q8_0_t4
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


# -- attention: per kv head, the R = M * H/G query rows that share its keys, in register tiles ----------
# Scores: a block of up to 4 query rows (held in registers) against one key at a time: 16-lane partial
# products (lane l sums elements l, l + 16, ... of the head dim, in that order, by fused multiply-adds),
# then one fixed tree over the 16 lanes (8 + 8, 4 + 4, 2 + 2, 1 + 1). Values: a block of up to 4 output
# rows held in registers across a run of keys, each key's weight broadcast and fused in (ascending keys).
# A row's arithmetic is therefore the same whatever block holds it, whatever M and whatever thread split.
# The softmax sum puts the k-th key a query sees into lane k % 16 (then a fixed tree over the lanes), and
# the values take the shared rows in tiles, then the new rows the query sees one by one in slot order: so
# a verify pass reproduces each single decode step bit for bit, a tree node's row too, whose ancestors
# sit among masked siblings in the pass but in the shared rows when it is decoded. Keys go in tiles of
# TK, each read once for every row of the thread's share of the kv head. Head dims that are not a multiple of 16 (and CPUs with
# neither AVX-512 nor AVX2 with FMA, or SPECSIM_DECODER_PLAIN=1) take plain loops with the same per-row order within each path.
TK = 64  # keys per tile: 16 KB of keys or values at E = 64, in L1 while every row of the block uses them
_F32 = ir.FloatType()
HAVE_AVX512 = bool(_features.get("avx512f", False) and not os.environ.get("SPECSIM_DECODER_PLAIN"))


def _ir_row_ptrs(builder, ary, rows):
    """Pointers (float*) to rows `rows` (i64 values) of a 2-D array."""
    s0, _ = cgutils.unpack_tuple(builder, ary.strides, 2)
    base = builder.bitcast(ary.data, _I8.as_pointer())
    return [builder.bitcast(builder.gep(base, [builder.mul(r, s0)]), _F32.as_pointer()) for r in rows]


def _ir_loop(builder, lo, hi, body, carried, name):
    """for t in [lo, hi): carried = body(t, carried); returns the carried values after the loop."""
    entry = builder.basic_block
    loop, done = builder.append_basic_block(name + ".loop"), builder.append_basic_block(name + ".done")
    builder.cbranch(builder.icmp_signed("<", lo, hi), loop, done)
    builder.position_at_end(loop)
    t = builder.phi(_I64)
    phis = [builder.phi(v.type) for v in carried]
    new = body(t, phis)
    t2 = builder.add(t, ir.Constant(_I64, 1))
    end = builder.basic_block
    t.add_incoming(lo, entry)
    t.add_incoming(t2, end)
    for p, v0, v1 in zip(phis, carried, new):
        p.add_incoming(v0, entry)
        p.add_incoming(v1, end)
    builder.cbranch(builder.icmp_signed("<", t2, hi), loop, done)
    builder.position_at_end(done)
    res = [builder.phi(v.type) for v in carried]
    for r, v0, v1 in zip(res, carried, new):
        r.add_incoming(v0, entry)
        r.add_incoming(v1, end)
    return res


def _attn_block(kind, rb, nv):
    """kind "scores": (s (R, W), q (R, E), k (C, E), r0, t0, t1) -> s[r0 + b, t] = the dot of q row r0 + b
    with key t, t in [t0, t1), b < rb; kind "values": (acc (R, E), p (R, W), v (C, E), r0, t0, t1) ->
    acc[r0 + b] += p[r0 + b, t] * v[t] for t in [t0, t1) in order. E = 16 nv; f32 2-D arrays, rows
    contiguous."""
    v16 = _V(_F32, 16)

    @intrinsic
    def block(typingctx, a, b, c, r0, t0, t1):
        if not all(isinstance(x, types.Array) and x.dtype == types.float32 and x.ndim == 2 for x in (a, b, c)) \
                or not all(isinstance(x, types.Integer) for x in (r0, t0, t1)):
            return None
        sig = types.void(a, b, c, r0, t0, t1)

        def codegen(context, builder, signature, args):
            k = lambda ty, x: ir.Constant(ty, x)  # noqa: E731
            arys = [context.make_array(t)(context, builder, x) for t, x in zip(signature.args[:3], args[:3])]
            r0_, t0_, t1_ = (context.cast(builder, x, t, types.int64) for x, t in zip(args[3:], signature.args[3:]))
            rows = [builder.add(r0_, k(_I64, i)) for i in range(rb)]
            pa, pb = _ir_row_ptrs(builder, arys[0], rows), _ir_row_ptrs(builder, arys[1], rows)
            s0, _ = cgutils.unpack_tuple(builder, arys[2].strides, 2)
            base = builder.bitcast(arys[2].data, _I8.as_pointer())
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v16, [v16] * 3), "llvm.fma.v16f32")
            vec = lambda ptr, j: builder.bitcast(builder.gep(ptr, [k(_I64, 16 * j)]), v16.as_pointer())  # noqa: E731

            def row_of_c(t):
                return builder.bitcast(builder.gep(base, [builder.mul(t, s0)]), _F32.as_pointer())

            if kind == "values":
                init = [builder.load(vec(pa[i], j), align=4) for i in range(rb) for j in range(nv)]

                def body(t, accs):
                    vv = [builder.load(vec(row_of_c(t), j), align=4) for j in range(nv)]
                    out = []
                    for i in range(rb):
                        w = builder.insert_element(k(v16, None), builder.load(builder.gep(pb[i], [t])), k(_I32, 0))
                        w = builder.shuffle_vector(w, k(v16, None), k(_V(_I32, 16), [0] * 16))
                        out += [builder.call(fma, [w, vv[j], accs[i * nv + j]]) for j in range(nv)]
                    return out
                res = _ir_loop(builder, t0_, t1_, body, init, "attn_values")
                for i in range(rb):
                    for j in range(nv):
                        builder.store(res[i * nv + j], vec(pa[i], j), align=4)
            else:
                qv = [[builder.load(vec(pb[i], j), align=4) for j in range(nv)] for i in range(rb)]

                def half(x, n, upper):
                    return builder.shuffle_vector(x, k(x.type, None), k(_V(_I32, n), list(range(n * upper, n * upper + n))))

                def pick(a, b, idx):
                    return builder.shuffle_vector(a, b, k(_V(_I32, len(idx)), idx))

                def body(t, carried):
                    kv = [builder.load(vec(row_of_c(t), j), align=4) for j in range(nv)]
                    xs = []
                    for i in range(rb):
                        x = builder.fmul(qv[i][0], kv[0])
                        for j in range(1, nv):
                            x = builder.call(fma, [qv[i][j], kv[j], x])
                        xs.append(x)
                    if rb == 4:  # the four rows' trees side by side, each pairing its lanes as one row alone does
                        y01 = builder.fadd(pick(xs[0], xs[1], list(range(8)) + list(range(16, 24))),
                                           pick(xs[0], xs[1], list(range(8, 16)) + list(range(24, 32))))
                        y23 = builder.fadd(pick(xs[2], xs[3], list(range(8)) + list(range(16, 24))),
                                           pick(xs[2], xs[3], list(range(8, 16)) + list(range(24, 32))))
                        lo4 = [b * 8 + j for b in range(4) for j in range(4)]
                        z = builder.fadd(pick(y01, y23, lo4), pick(y01, y23, [i + 4 for i in lo4]))
                        w = builder.fadd(pick(z, z, [4 * i + j for i in range(4) for j in (0, 1)]),
                                         pick(z, z, [4 * i + j for i in range(4) for j in (2, 3)]))
                        for i in range(4):
                            total = builder.fadd(builder.extract_element(w, k(_I32, 2 * i)),
                                                 builder.extract_element(w, k(_I32, 2 * i + 1)))
                            builder.store(total, builder.gep(pa[i], [t]))
                        return carried
                    for i, x in enumerate(xs):
                        for n in (8, 4, 2):
                            x = builder.fadd(half(x, n, 0), half(x, n, 1))
                        total = builder.fadd(builder.extract_element(x, k(_I32, 0)), builder.extract_element(x, k(_I32, 1)))
                        builder.store(total, builder.gep(pa[i], [t]))
                    return carried
                _ir_loop(builder, t0_, t1_, body, [k(_I64, 0)], "attn_scores")
            return context.get_dummy_value()

        return sig, codegen

    return block


def _plain_block(kind, rb, nv):
    """The same blocks as plain loops (each row alone, the same order of operations as the IR path up to
    whether LLVM fuses a multiply and an add, which is then the same for every row)."""
    e = 16 * nv

    @njit(cache=False, fastmath={"nsz", "arcp", "contract", "afn"}, nogil=True)
    def block(a, b, c, r0, t0, t1):
        lanes = np.empty(16, np.float32)
        for i in range(rb):
            r = r0 + i
            if kind == "values":
                for t in range(t0, t1):
                    w = b[r, t]
                    for j in range(e):
                        a[r, j] = w * c[t, j] + a[r, j]
            else:
                for t in range(t0, t1):
                    for l in range(16):
                        lanes[l] = b[r, l] * c[t, l]
                    for j in range(1, nv):
                        for l in range(16):
                            lanes[l] = b[r, 16 * j + l] * c[t, 16 * j + l] + lanes[l]
                    n = 8
                    while n >= 2:
                        for l in range(n):
                            lanes[l] = lanes[l] + lanes[l + n]
                        n //= 2
                    a[r, t] = lanes[0] + lanes[1]
    return block


# The IR's 16-lane vectors need no AVX-512: LLVM splits each into two 8-lane halves on AVX2 with FMA, the same
# operations lane by lane, so the same bits (AVX2's 16 registers then hold half as many; a block's rows spill
# some queries to the stack, which costs loads the FMAs can take as operands, measured no slower than smaller blocks)
HAVE_VECTOR_ATTENTION = HAVE_AVX512 or bool(_features.get("avx2", False) and _features.get("fma", False) and not _PLAIN)
_make = _attn_block if HAVE_VECTOR_ATTENTION else _plain_block
# rows per block by 16-lane chunks of the head dim (registers: rb * nv accumulators, at most 16 of 32)
_BLOCKS = {nv: (4 if nv <= 4 else 2, _make("scores", 4 if nv <= 4 else 2, nv), _make("scores", 1, nv),
                _make("values", 4 if nv <= 4 else 2, nv), _make("values", 1, nv)) for nv in (1, 2, 4, 8)}
(_RB1, _S1A, _S1B, _V1A, _V1B), (_RB2, _S2A, _S2B, _V2A, _V2B) = _BLOCKS[1], _BLOCKS[2]
(_RB4, _S4A, _S4B, _V4A, _V4B), (_RB8, _S8A, _S8B, _V8A, _V8B) = _BLOCKS[4], _BLOCKS[8]


@njit(**_JIT_ORDERED)
def _blocks(kind, a, b, c, r0, r1, t0, t1):
    # rows [r0, r1) against keys [t0, t1): blocks of rb rows, then single rows; kind 0 scores, 1 values
    nv = c.shape[1] // 16
    rb = _RB1 if nv == 1 else _RB2 if nv == 2 else _RB4 if nv == 4 else _RB8
    r = r0
    while r + rb <= r1:
        if nv == 1:
            _S1A(a, b, c, r, t0, t1) if kind == 0 else _V1A(a, b, c, r, t0, t1)
        elif nv == 2:
            _S2A(a, b, c, r, t0, t1) if kind == 0 else _V2A(a, b, c, r, t0, t1)
        elif nv == 4:
            _S4A(a, b, c, r, t0, t1) if kind == 0 else _V4A(a, b, c, r, t0, t1)
        else:
            _S8A(a, b, c, r, t0, t1) if kind == 0 else _V8A(a, b, c, r, t0, t1)
        r += rb
    while r < r1:
        if nv == 1:
            _S1B(a, b, c, r, t0, t1) if kind == 0 else _V1B(a, b, c, r, t0, t1)
        elif nv == 2:
            _S2B(a, b, c, r, t0, t1) if kind == 0 else _V2B(a, b, c, r, t0, t1)
        elif nv == 4:
            _S4B(a, b, c, r, t0, t1) if kind == 0 else _V4B(a, b, c, r, t0, t1)
        else:
            _S8B(a, b, c, r, t0, t1) if kind == 0 else _V8B(a, b, c, r, t0, t1)
        r += 1


@njit(**_JIT_ORDERED)
def _generic_blocks(kind, a, b, c, r0, r1, t0, t1):
    # any head dim: each row alone, elements in order (scores) or keys in order (values)
    for r in range(r0, r1):
        for t in range(t0, t1):
            if kind == 0:
                acc = np.float32(0.0)
                for j in range(c.shape[1]):
                    acc = b[r, j] * c[t, j] + acc
                a[r, t] = acc
            else:
                w = b[r, t]
                for j in range(c.shape[1]):
                    a[r, j] = w * c[t, j] + a[r, j]


@njit(cache=True, fastmath=False, nogil=True)
def _row_max(row, lo, hi, mx, part):
    # row (>= hi,) f32: max(mx, row[lo:hi]); part (16,) scratch. Sixteen independent lane maxima (they
    # vectorize), then the lanes: a maximum is exact, so the grouping cannot change it
    for lane in range(16):
        part[lane] = mx
    n16 = lo + (hi - lo) - (hi - lo) % 16
    for t0 in range(lo, n16, 16):
        for lane in range(16):
            part[lane] = max(part[lane], row[t0 + lane])
    for t in range(n16, hi):
        part[0] = max(part[0], row[t])
    for lane in range(1, 16):
        mx = max(mx, part[lane])
    return max(mx, part[0])


@njit(cache=True, fastmath=False, nogil=True)
def _row_sum(row, n_shared, n_rows, seen, part):
    # row (>= n_rows,) f32; seen (W,) bool: which of rows [n_shared, n_rows) the query sees; part (16,) scratch.
    # The k-th key the query sees (in ascending slot order) goes into lane k % 16, in order; then the lanes by
    # a fixed tree. Counting only the keys it sees makes the sum the same whether its earlier tokens sit in
    # the shared rows (a decode step) or among a tree's rows (a verify pass, with siblings masked out).
    for lane in range(16):
        part[lane] = np.float32(0.0)
    n16 = n_shared - n_shared % 16
    for t0 in range(0, n16, 16):
        for lane in range(16):
            part[lane] += row[t0 + lane]
    k = n16
    for t in range(n16, n_rows):
        if t < n_shared or seen[t - n_shared]:
            part[k % 16] += row[t]
            k += 1
    w = 8
    while w >= 1:
        for lane in range(w):
            part[lane] += part[lane + w]
        w //= 2
    return part[0]


@njit(cache=True, fastmath=False, nogil=True)  # IEEE steps: the vector body and the tail give the same bits
def _exp_row(row, mx, n, bits):
    # row (>= n,) f32: row[t] = exp(row[t] - mx) for t < n; 0 at or below -87 (a masked key's -inf: an exact 0).
    # bits (>= n,) i32 scratch. exp(x) = 2^k e^r as in `swiglu` (Cephes expf); 2^k (k in [-126, 0]) built
    # from its float32 bits, so both loops vectorize and the scaling is one exact multiply
    for t in range(n):
        d = row[t] - mx
        x = max(d, np.float32(-87.0))
        k = np.rint(x * np.float32(1.44269504))
        r = x - k * np.float32(0.693359375) - k * np.float32(-2.12194440e-4)
        p = np.float32(1.9875691500e-4) * r + np.float32(1.3981999507e-3)
        p = p * r + np.float32(8.3334519073e-3)
        p = p * r + np.float32(4.1665795894e-2)
        p = p * r + np.float32(1.6666665459e-1)
        p = p * r + np.float32(5.0000001201e-1)
        row[t] = p * r * r + r + np.float32(1.0)
        bits[t] = (np.int32(k) + np.int32(127)) << np.int32(23) if d > np.float32(-87.0) else np.int32(0)
    two_k = bits[:n].view(np.float32)
    for t in range(n):
        row[t] = row[t] * two_k[t]


@njit(**_JIT_ORDERED)
def _head(out, s, qs, acc, part, bits, q, k, v, g, r0, r1, n_shared, mask, scale):
    # one thread's rows [r0, r1) of kv head g. s (R, >= n_rows + 2): scores, then weights; qs, acc (R, E)
    # scratch: the rows' queries gathered, their outputs; part (16,) f32, bits (>= n_rows,) i32 scratch; q (M, H, E);
    # k, v (C, E); mask (M, W)
    group, top, n_rows, e = s.shape[0] // q.shape[0], s.shape[1] - 2, n_shared + mask.shape[1], q.shape[2]
    blocked = e % 16 == 0 and e <= 128
    for r in range(r0, r1):
        qs[r, :] = q[r // group, g * group + r % group, :]
        acc[r, :] = 0.0
    for t0 in range(0, n_rows, TK):  # scores, a tile of keys for every row; scale, mask and running max
        t1 = min(t0 + TK, n_rows)
        if blocked:
            _blocks(0, s, qs, k, r0, r1, t0, t1)
        else:
            _generic_blocks(0, s, qs, k, r0, r1, t0, t1)
        ts = min(t1, n_shared)
        for r in range(r0, r1):
            m, sr = r // group, s[r]
            mx = sr[top] if t0 > 0 else np.float32(-np.inf)
            for t in range(t0, ts):
                sr[t] = sr[t] * scale
            mx = _row_max(sr, t0, ts, mx, part)
            for t in range(max(t0, n_shared), t1):
                if mask[m, t - n_shared]:
                    sr[t] = sr[t] * scale
                    mx = max(mx, sr[t])
                else:
                    sr[t] = np.float32(-np.inf)
            sr[top] = mx
    for r in range(r0, r1):  # softmax: exp, the sum by lanes of the keys seen and a fixed tree, weights = exp / sum
        sr = s[r]
        _exp_row(sr, sr[top], n_rows, bits)
        inv = np.float32(1.0) / _row_sum(sr, n_shared, n_rows, mask[r // group], part)
        for t in range(n_rows):
            sr[t] = sr[t] * inv
    for t0 in range(0, n_shared, TK):  # values of the shared rows: a tile for every row, keys in order
        if blocked:
            _blocks(1, acc, s, v, r0, r1, t0, min(t0 + TK, n_shared))
        else:
            _generic_blocks(1, acc, s, v, r0, r1, t0, min(t0 + TK, n_shared))
    for r in range(r0, r1):  # then each row's own rows among the new ones, only those it sees, in order
        m = r // group
        for t in range(n_shared, n_rows):
            if mask[m, t - n_shared]:
                if blocked:
                    _blocks(1, acc, s, v, r, r + 1, t, t + 1)
                else:
                    _generic_blocks(1, acc, s, v, r, r + 1, t, t + 1)
    for r in range(r0, r1):
        out[r // group, g * group + r % group, :] = acc[r, :]


@njit(parallel=True, **_JIT_ORDERED)
def _attention(out, scores, qs, acc, part, bits, q, k_cache, v_cache, n_shared, mask, n_c):
    # as `attention`; qs, acc (G, >= R, E), part (n_c, 16) f32 and bits (n_c, >= n_rows) i32 scratch; n_c: chunks of
    # the G * R rows, one per thread
    n_g, n_rows, group = k_cache.shape[0], n_shared + mask.shape[1], q.shape[1] // k_cache.shape[0]
    rows, scale = q.shape[0] * group, np.float32(1.0 / math.sqrt(q.shape[2]))
    if (out.shape != q.shape or v_cache.shape != k_cache.shape or n_g < 1 or q.shape[1] % n_g != 0
            or k_cache.shape[2] != q.shape[2] or mask.shape[0] != q.shape[0] or n_shared < 0
            or n_rows > k_cache.shape[1] or scores.shape[0] < n_g or scores.shape[1] < rows
            or scores.shape[2] < n_rows + 2 or n_c < 1 or qs.shape[0] < n_g or qs.shape[1] < rows
            or qs.shape[2] != q.shape[2] or acc.shape != qs.shape or part.shape[0] < n_c or part.shape[1] != 16
            or bits.shape[0] < n_c or bits.shape[1] < n_rows):
        raise ValueError("attention: shapes of out, scores, q, the caches and the mask do not agree")
    for c in prange(n_c):
        lo, hi = c * n_g * rows // n_c, (c + 1) * n_g * rows // n_c  # rows [lo, hi) of all kv heads
        for g in range(lo // rows, min(n_g, (hi + rows - 1) // rows)):
            r0, r1 = max(lo - g * rows, 0), min(hi - g * rows, rows)
            _head(out, scores[g, :rows], qs[g], acc[g], part[c], bits[c], q, k_cache[g], v_cache[g], g, r0, r1,
                  n_shared, mask, scale)


_ATTN_SCRATCH: dict = {}


def attention(out, scores, q, k_cache, v_cache, n_shared, mask):
    """out (M, H, E) f32; scores (G, >= M * H/G, >= n_shared + W + 2) f32 scratch; q (M, H, E);
    k_cache, v_cache (G, C, E); n_shared: cache rows [0, n_shared) seen by every query;
    mask (M, W) bool: query m sees row n_shared + w.
    Fused per kv head: the scores of all R = M * H/G query rows (key tiles outer, register blocks of
    rows), a softmax per row, then the values (tiles outer, register blocks of rows). The G * R rows,
    kv head major, are cut into T equal chunks, one per thread: a thread reads each key and value of a
    kv head once for all its rows of that head. A row's arithmetic is the same whatever M, T and the
    other rows are (see the section comment)."""
    n_c = get_num_threads()
    g, rows, e = k_cache.shape[0], q.shape[0] * (q.shape[1] // max(k_cache.shape[0], 1)), q.shape[2]
    key = (g, rows, e, n_c, k_cache.shape[1])
    scratch = _ATTN_SCRATCH.get(key)
    if scratch is None:
        if len(_ATTN_SCRATCH) > 32:
            _ATTN_SCRATCH.clear()
        scratch = _ATTN_SCRATCH[key] = (np.zeros((g, rows, e), np.float32), np.zeros((g, rows, e), np.float32),
                                        np.zeros((n_c, 16), np.float32), np.zeros((n_c, k_cache.shape[1]), np.int32))
    _attention(out, scores, *scratch, q, k_cache, v_cache, n_shared, mask, n_c)


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
