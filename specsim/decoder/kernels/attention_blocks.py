"""Attention's register blocks: rows of one kv head against a run of keys, for the scores (q . k) and for
the values (acc += p v), in 16-lane vectors (LLVM IR) or as plain loops with the same order per row.

Dimension legend
  R    attention rows of one kv head: M * H/G (query m, head g * H/G + i is row m * H/G + i)
  W    score columns of a row (keys);  C  KV-cache capacity (slots);  E  head dim = 16 nv
  rb   rows held in registers per block (4 when nv <= 4, else 2: rb * nv accumulators, at most 16 of 32)

Scores: a block of up to 4 query rows (held in registers) against one key at a time: 16-lane partial
products (lane l sums elements l, l + 16, ... of the head dim, in that order, by fused multiply-adds),
then one fixed tree over the 16 lanes (8 + 8, 4 + 4, 2 + 2, 1 + 1). Values: a block of up to 4 output
rows held in registers across a run of keys, each key's weight broadcast and fused in (ascending keys).
A row's arithmetic is therefore the same whatever block holds it, whatever M and whatever thread split.
The IR's 16-lane vectors run on AVX-512 and, split by LLVM into 8-lane halves, on AVX2 with FMA
(`host.HAVE_VECTOR_ATTENTION`); elsewhere the plain blocks run. Head dims that are not a multiple of 16
(or above 128) take `generic_blocks`: each row alone, elements in order.
"""
from __future__ import annotations

import numpy as np
from numba import njit
from numba.core import cgutils, types
from numba.extending import intrinsic

from .host import HAVE_VECTOR_ATTENTION, ORDERED
from .llvm_ir import F32, I8, I32, I64, V, const, counted_loop, declare, row_ptrs, splat16


def vector_block(kind, rb, nv):
    """kind "scores": (s (R, W), q (R, E), k (C, E), r0, t0, t1) -> s[r0 + b, t] = the dot of q row r0 + b
    with key t, t in [t0, t1), b < rb; kind "values": (acc (R, E), p (R, W), v (C, E), r0, t0, t1) ->
    acc[r0 + b] += p[r0 + b, t] * v[t] for t in [t0, t1) in order. E = 16 nv; f32 2-D arrays, rows
    contiguous."""
    v16 = V(F32, 16)

    @intrinsic
    def block(typingctx, a, b, c, r0, t0, t1):
        if not all(isinstance(x, types.Array) and x.dtype == types.float32 and x.ndim == 2 for x in (a, b, c)) \
                or not all(isinstance(x, types.Integer) for x in (r0, t0, t1)):
            return None
        sig = types.void(a, b, c, r0, t0, t1)

        def codegen(context, builder, signature, args):
            k = const
            arys = [context.make_array(t)(context, builder, x) for t, x in zip(signature.args[:3], args[:3])]
            r0_, t0_, t1_ = (context.cast(builder, x, t, types.int64) for x, t in zip(args[3:], signature.args[3:]))
            rows = [builder.add(r0_, k(I64, i)) for i in range(rb)]
            pa, pb = row_ptrs(builder, arys[0], rows), row_ptrs(builder, arys[1], rows)
            s0, _ = cgutils.unpack_tuple(builder, arys[2].strides, 2)
            base = builder.bitcast(arys[2].data, I8.as_pointer())
            fma = declare(builder, "llvm.fma.v16f32", v16, [v16] * 3)
            vec = lambda ptr, j: builder.bitcast(builder.gep(ptr, [k(I64, 16 * j)]), v16.as_pointer())  # noqa: E731

            def row_of_c(t):
                return builder.bitcast(builder.gep(base, [builder.mul(t, s0)]), F32.as_pointer())

            if kind == "values":
                init = [builder.load(vec(pa[i], j), align=4) for i in range(rb) for j in range(nv)]

                def body(t, accs):
                    vv = [builder.load(vec(row_of_c(t), j), align=4) for j in range(nv)]
                    out = []
                    for i in range(rb):
                        w = splat16(builder, builder.load(builder.gep(pb[i], [t])), F32)
                        out += [builder.call(fma, [w, vv[j], accs[i * nv + j]]) for j in range(nv)]
                    return out
                res = counted_loop(builder, t0_, t1_, body, init, "attn_values")
                for i in range(rb):
                    for j in range(nv):
                        builder.store(res[i * nv + j], vec(pa[i], j), align=4)
            else:
                qv = [[builder.load(vec(pb[i], j), align=4) for j in range(nv)] for i in range(rb)]

                def half(x, n, upper):
                    return builder.shuffle_vector(x, k(x.type, None), k(V(I32, n), list(range(n * upper, n * upper + n))))

                def pick(a, b, idx):
                    return builder.shuffle_vector(a, b, k(V(I32, len(idx)), idx))

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
                            total = builder.fadd(builder.extract_element(w, k(I32, 2 * i)),
                                                 builder.extract_element(w, k(I32, 2 * i + 1)))
                            builder.store(total, builder.gep(pa[i], [t]))
                        return carried
                    for i, x in enumerate(xs):
                        for n in (8, 4, 2):
                            x = builder.fadd(half(x, n, 0), half(x, n, 1))
                        total = builder.fadd(builder.extract_element(x, k(I32, 0)), builder.extract_element(x, k(I32, 1)))
                        builder.store(total, builder.gep(pa[i], [t]))
                    return carried
                counted_loop(builder, t0_, t1_, body, [k(I64, 0)], "attn_scores")
            return context.get_dummy_value()

        return sig, codegen

    return block


def plain_block(kind, rb, nv):
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


_make = vector_block if HAVE_VECTOR_ATTENTION else plain_block
# rows per block by 16-lane chunks of the head dim (registers: rb * nv accumulators, at most 16 of 32)
_BLOCKS = {nv: (4 if nv <= 4 else 2, _make("scores", 4 if nv <= 4 else 2, nv), _make("scores", 1, nv),
                _make("values", 4 if nv <= 4 else 2, nv), _make("values", 1, nv)) for nv in (1, 2, 4, 8)}
(_RB1, _S1A, _S1B, _V1A, _V1B), (_RB2, _S2A, _S2B, _V2A, _V2B) = _BLOCKS[1], _BLOCKS[2]
(_RB4, _S4A, _S4B, _V4A, _V4B), (_RB8, _S8A, _S8B, _V8A, _V8B) = _BLOCKS[4], _BLOCKS[8]


@njit(**ORDERED)
def blocks(kind, a, b, c, r0, r1, t0, t1):
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


@njit(**ORDERED)
def generic_blocks(kind, a, b, c, r0, r1, t0, t1):
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
