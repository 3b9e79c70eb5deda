"""The block matmuls' vector tile, in LLVM IR: 16 weight rows (one group) against a tile of query rows.

Dimension legend
  M    query rows of the pass;  tm  rows of this tile (8, 4 or 1), rows m0 .. m0 + tm - 1
  N    output rows (weight rows);  group g: weight rows 16 g .. 16 g + 15, one int32 / float32 lane each
  NB   blocks of 32 elements per row;  nv  lanes of the group that are real rows (< 16 in a matrix's last group)

`vector_tile(kind, tm, vnni)` returns an intrinsic with the signature of `block_dot_plain.plain_tile`'s
kernels. Each weight block is loaded and unpacked once for all tm rows of the tile. A lane's float
epilogue is acc = fma(float(s), d * xd, acc) (Q4_1: then acc = fma(m, sx, acc)), blocks in order, with s
the exact integer block sum (`block_sums`): the same operations in the same order whatever tm is, so a
query row's result is bit for bit the same in any tile and for any M.
"""
from __future__ import annotations

from numba.core import types
from numba.extending import intrinsic

from .block_sums import avx2_block_sum, vnni_block_sum
from .llvm_ir import F32, HALF, I8, I16, I32, I64, V, const, counted_loop, declare, row_ptrs, splat16, vload
from .quant import GROUP

TILES = (8, 4, 1)  # query rows per call of a tile kernel: each weight block is unpacked once for all of them
KINDS = ("q4_1", "q4_0", "q8_0")


def vector_tile(kind, tm, vnni=True):
    """kind "q4_1", "q4_0" or "q8_0", tm query rows -> an intrinsic
    (out (M, N), g, qs, d, mn: group g as `pack` lays it out, xq (M, K) i8, xd (M, NB) f32, xs (M, NB) i32,
    sx (M, NB) f32, m0, nb, nv) writing out[m0 + t, 16 g + l] for t < tm and lanes l < nv, each lane
    computed as by the plain loop's order and as by a tm = 1 call. Per block b: w[c] (64,) u8 = chunk c of
    the 16 rows (nibbles, or the Q8_0 bytes + 128); per query row t: s (16,) i32 = c0 + sum over c of
    vpdpbusd(w[c], broadcast of xq[t] elements 4 c .. 4 c + 3) (c0 = -8 or -128 times sum(xq[t, block b]);
    on AVX2 Q8_0's bytes stay signed and c0 = 0, see `avx2_block_sum`: the same sums; all exact integers,
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
            arys = [context.make_array(t)(context, builder, a) if isinstance(t, types.Array) else None
                    for t, a in zip(signature.args, args)]
            args = list(args)
            for i in (1, 9, 10, 11):  # g, m0, nb, nv as int64
                args[i] = context.cast(builder, args[i], signature.args[i], types.int64)
            rows = [builder.add(args[9], const(I64, t)) for t in range(tm)]  # m0 + t
            p_qs = builder.bitcast(arys[2].data, I8.as_pointer())
            p_d, p_m = arys[3].data, arys[4].data
            p_xq, p_xd = row_ptrs(builder, arys[5], rows, I32), row_ptrs(builder, arys[6], rows, F32)
            p_xs, p_sx = row_ptrs(builder, arys[7], rows, I32), row_ptrs(builder, arys[8], rows, F32)
            p_out = row_ptrs(builder, arys[0], rows, F32, col=builder.mul(args[1], const(I64, GROUP)))
            if vnni:  # independent vpdpbusd chains per row (the same sums)
                block_sum = vnni_block_sum(builder, n_chains={8: 1, 4: 2, 1: 4}.get(tm, 1))
            else:
                block_sum = avx2_block_sum(builder, q4=kind != "q8_0")
            fma16 = declare(builder, "llvm.fma.v16f32", V(F32, 16), [V(F32, 16)] * 3)

            def halves(ptr, b):  # 16 float16 at ptr + 16 b -> (16,) f32
                return builder.fpext(builder.bitcast(vload(builder, ptr, builder.mul(b, const(I64, 16)), I16, 16),
                                                     V(HALF, 16)), V(F32, 16))

            def step(b, acc):
                w = []
                if kind == "q8_0":  # vpdpbusd takes unsigned bytes: offset by 128 (AVX2's step takes them signed)
                    for ch in range(8):
                        q = vload(builder, p_qs, builder.add(builder.mul(b, const(I64, 512)), const(I64, ch * 64)), I8, 64)
                        w.append(builder.bitcast(builder.xor(q, const(V(I8, 64), [0x80] * 64)) if vnni else q, V(I32, 16)))
                else:
                    lo, hi = [], []
                    for k in range(4):
                        q = vload(builder, p_qs, builder.add(builder.mul(b, const(I64, 256)), const(I64, k * 64)), I8, 64)
                        lo.append(builder.bitcast(builder.and_(q, const(V(I8, 64), [15] * 64)), V(I32, 16)))
                        hi.append(builder.bitcast(builder.lshr(q, const(V(I8, 64), [4] * 64)), V(I32, 16)))
                    w = lo + hi
                dv = halves(p_d, b)
                if kind == "q4_1":
                    mv = halves(p_m, b)
                acc2 = []
                for t in range(tm):
                    xs8 = builder.mul(b, const(I64, 8))
                    c0 = const(V(I32, 16), [0] * 16)
                    if kind == "q4_0" or (kind == "q8_0" and vnni):  # the offset's correction: -8 or -128 x sum(xq)
                        xsb = builder.load(builder.gep(p_xs[t], [b]))
                        c0 = splat16(builder, builder.mul(xsb, const(I32, -128 if kind == "q8_0" else -8)), I32)
                    xv = [splat16(builder, builder.load(builder.gep(p_xq[t], [builder.add(xs8, const(I64, ch))]), align=1),
                                  I32) for ch in range(8)]
                    s = block_sum(c0, w, xv)
                    scale = builder.fmul(dv, splat16(builder, builder.load(builder.gep(p_xd[t], [b])), F32))
                    a = builder.call(fma16, [builder.sitofp(s, V(F32, 16)), scale, acc[t]])
                    if kind == "q4_1":
                        a = builder.call(fma16, [mv, splat16(builder, builder.load(builder.gep(p_sx[t], [b])), F32), a])
                    acc2.append(a)
                return acc2

            res = counted_loop(builder, const(I64, 0), args[10], step, [const(V(F32, 16), [0.0] * 16)] * tm, "vnni_dot")
            _store(builder, res, p_out, args[11])
            return context.get_dummy_value()

        return sig, codegen

    return dot


def _store(builder, res, p_out, nv):
    """Each row's (16,) result to its output row: all 16 lanes when nv >= 16, else lane by lane below nv
    (the last group of a matrix whose N is not a multiple of 16: the lanes beyond are padding rows)."""
    mask = builder.icmp_signed("<", const(V(I32, 16), list(range(16))), splat16(builder, builder.trunc(nv, I32), I32))
    full, part, end = (builder.append_basic_block(f"vnni_dot.{n}") for n in ("full", "part", "end"))
    builder.cbranch(builder.icmp_signed(">=", nv, const(I64, GROUP)), full, part)
    builder.position_at_end(full)
    for t, r in enumerate(res):
        builder.store(r, builder.bitcast(p_out[t], V(F32, 16).as_pointer()), align=4)
    builder.branch(end)
    builder.position_at_end(part)
    for t, r in enumerate(res):
        for lane in range(GROUP):
            yes, nxt = builder.append_basic_block(f"vnni_dot.st{t}_{lane}"), builder.append_basic_block(f"vnni_dot.nx{t}_{lane}")
            builder.cbranch(builder.extract_element(mask, const(I32, lane)), yes, nxt)
            builder.position_at_end(yes)
            builder.store(builder.extract_element(r, const(I32, lane)), builder.gep(p_out[t], [const(I64, lane)]))
            builder.branch(nxt)
            builder.position_at_end(nxt)
    builder.branch(end)
    builder.position_at_end(end)
