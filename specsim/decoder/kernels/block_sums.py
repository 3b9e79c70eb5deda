"""One block's exact integer sums for 16 weight rows at once, in LLVM IR: what 8 chained vpdpbusd give.

Dimension legend
  lane   one of the 16 int32 lanes = one weight row of the group (`quant.pack`'s interleave)
  chunk  4 consecutive elements of the 32-element block; a block is 8 chunks
  w[c]   (64,) bytes: chunk c of the 16 rows (4 bytes a lane);  x[c]  (64,) bytes: the query row's 4
         activation bytes of chunk c broadcast to every lane;  c0  (16,) i32: the starting sums

Each emitter returns block(c0, ws, xs) -> (16,) i32: c0 + the sum over the 8 chunks of each lane's 4 byte
products. All values are exact integers, so how the products are chained or split does not change a bit:
the AVX512-VNNI and the AVX2 emitters give the same sums, and both the plain loop's (`block_dot_plain`).
"""
from __future__ import annotations

from .llvm_ir import I1, I8, I16, I32, V, const, declare


def vnni_block_sum(builder, *, n_chains: int):
    """AVX512-VNNI: vpdpbusd (u8 weights x i8 activations, 4 products a lane) 8 times, in n_chains
    independent chains (more chains hide the instruction's latency when a tile has few query rows), added
    at the end. Q4 weights are nibbles (<= 15); Q8_0's signed bytes come offset by 128 (the caller's c0
    holds the -128 x sum(x) correction)."""
    vpdpbusd = declare(builder, "llvm.x86.avx512.vpdpbusd.512", V(I32, 16), [V(I32, 16)] * 3)

    def block(c0, ws, xs):
        chains = [c0] + [const(V(I32, 16), [0] * 16)] * (n_chains - 1)
        for ch, (w, x) in enumerate(zip(ws, xs)):
            chains[ch % n_chains] = builder.call(vpdpbusd, [chains[ch % n_chains], w, x])
        s = chains[0]
        for ch in chains[1:]:
            s = builder.add(s, ch)
        return s
    return block


def avx2_block_sum(builder, *, q4: bool):
    """The same sums from AVX2 instructions. Q4: u8 nibbles (<= 15) times i8 activations (in [-127, 127],
    `quantize_q8`) through vpmaddubsw; an i16 pair sum is at most 2 * 15 * 127 = 3810 in size, so the 8
    chunks' pair sums add in i16 (<= 30480, no wrap) before one vpmaddwd by ones. Q8_0 (q4 False) takes its
    bytes signed, not offset by 128 (255 * 127 pairs would saturate vpmaddubsw): |w| times x with w's sign
    (vpsignb), pair sums <= 2 * 128 * 127 = 32512, widened by vpmaddwd per chunk; the caller then adds no
    -128 * sum(x) correction. Each 64-byte operand is worked as two 32-byte halves."""
    maddwd = declare(builder, "llvm.x86.avx2.pmadd.wd", V(I32, 8), [V(I16, 16)] * 2)
    maddubs = declare(builder, "llvm.x86.avx2.pmadd.ub.sw", V(I16, 16), [V(I8, 32)] * 2)
    psign = declare(builder, "llvm.x86.avx2.psign.b", V(I8, 32), [V(I8, 32)] * 2)
    absb = declare(builder, "llvm.abs.v32i8", V(I8, 32), [V(I8, 32), I1])
    ones = const(V(I16, 16), [1] * 16)
    sels = [const(V(I32, 32), list(range(32 * h, 32 * h + 32))) for h in range(2)]  # a (64,) byte vector's halves

    def half(v, h):
        v = builder.bitcast(v, V(I8, 64))
        return builder.shuffle_vector(v, v, sels[h])

    def pairs(w, x):  # (32,) bytes each -> (16,) i16 pair sums of products
        if not q4:
            w, x = builder.call(absb, [w, const(I1, 0)]), builder.call(psign, [x, w])
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
        return builder.add(c0, builder.shuffle_vector(out[0], out[1], const(V(I32, 16), list(range(16)))))
    return block
