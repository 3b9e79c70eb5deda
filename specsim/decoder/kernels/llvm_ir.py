"""LLVM IR helpers shared by the kernels written as numba intrinsics (the block-matmul tiles and the
attention blocks): the types, pointers to array rows, a broadcast, and a counted loop with carried values.
Nothing here computes; each helper emits the instructions its docstring names."""
from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils

I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
F32, HALF = ir.FloatType(), ir.HalfType()
V = ir.VectorType  # V(F32, 16): a 512-bit vector of 16 float32 (two 256-bit halves on AVX2)


def const(ty, value):
    return ir.Constant(ty, value)


def declare(builder, name: str, ret, args):
    """The LLVM intrinsic `name` (e.g. "llvm.fma.v16f32") declared in the builder's module."""
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(ret, list(args)), name)


def row_ptrs(builder, ary, rows, ty=F32, col=None):
    """Pointers (ty*) to rows `rows` (i64 values) of a 2-D numba array, at element `col` (an i64) of each
    row when given (byte offsets from the array's strides)."""
    s0, s1 = cgutils.unpack_tuple(builder, ary.strides, 2)
    base = builder.bitcast(ary.data, I8.as_pointer())
    out = []
    for r in rows:
        off = builder.mul(r, s0)
        if col is not None:
            off = builder.add(off, builder.mul(col, s1))
        out.append(builder.bitcast(builder.gep(base, [off]), ty.as_pointer()))
    return out


def splat16(builder, value, ty):
    """A (16,) vector of `value` (a scalar of type ty) in every lane."""
    one = builder.insert_element(const(V(ty, 16), None), value, const(I32, 0))
    return builder.shuffle_vector(one, const(V(ty, 16), None), const(V(I32, 16), [0] * 16))


def vload(builder, ptr, offset, ty, n):
    """An unaligned load of n elements of type ty at ptr + offset (elements of ptr's type)."""
    return builder.load(builder.bitcast(builder.gep(ptr, [offset]), V(ty, n).as_pointer()), align=1)


def counted_loop(builder, lo, hi, body, carried, name):
    """for t in [lo, hi): carried = body(t, carried) (lo, hi i64 values); returns the carried values after
    the loop (the initial ones when lo >= hi)."""
    entry = builder.basic_block
    loop, done = builder.append_basic_block(name + ".loop"), builder.append_basic_block(name + ".done")
    builder.cbranch(builder.icmp_signed("<", lo, hi), loop, done)
    builder.position_at_end(loop)
    t = builder.phi(I64)
    phis = [builder.phi(v.type) for v in carried]
    new = body(t, phis)
    t2 = builder.add(t, const(I64, 1))
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
