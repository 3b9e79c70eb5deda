"""Kernels against their numpy twins, the loader against gguf's own dequantizer, and the loader's
errors. Every model here is a tiny random-weight GGUF written with gguf's GGUFWriter."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")
gguf = pytest.importorskip("gguf")

from specsim.decoder import kernels, reference  # noqa: E402
from specsim.decoder.gguf_model import load_gguf  # noqa: E402
from specsim.decoder.kernels.block_dot_plain import ROW_DOTS  # noqa: E402
from specsim.decoder.model import Transformer  # noqa: E402
from specsim.decoder.testing import write_tiny_gguf  # noqa: E402
from specsim.errors import SpecError  # noqa: E402

TYPES = ["F32", "F16", "Q8_0", "Q4_0", "Q4_1"]
NO_TILES = (f"the vector tiles are off ({kernels.kernel_paths()['plain_because']})" if kernels.kernel_paths()["plain_because"]
            else "neither AVX512-VNNI nor AVX2 on this CPU")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return load_gguf(write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf"))


def _rel_err(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize("type_name", ["Q8_0", "Q4_0", "Q4_1", "F16"])
def test_dequantize_matches_gguf(type_name):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((8, 96)).astype(np.float32)
    if type_name == "F16":
        raw = w.astype(np.float16).view(np.uint16)
        expected = w.astype(np.float16).astype(np.float32)
    else:
        qtype = getattr(gguf.GGMLQuantizationType, type_name)
        raw = gguf.quants.quantize(w, qtype)
        expected = gguf.quants.dequantize(raw, qtype)  # second implementation: gguf's own
    np.testing.assert_array_equal(reference.dequantize(type_name, raw, 96), expected)  # exact: same arithmetic


@pytest.mark.parametrize("type_name", TYPES)
@pytest.mark.parametrize("m", [1, 3, 9])
def test_matmul_kernel_matches_twin(type_name, m):
    rng = np.random.default_rng(2)
    n, k = 37, 64
    w = rng.standard_normal((n, k)).astype(np.float32)
    if type_name == "F32":
        raw = w
    elif type_name == "F16":
        raw = w.astype(np.float16).view(np.uint16)
    else:
        raw = gguf.quants.quantize(w, getattr(gguf.GGMLQuantizationType, type_name))
    x = rng.standard_normal((m, k)).astype(np.float32)
    out = np.zeros((m, n), np.float32)
    kernels.matmul(out, kernels.new_scratch(2, m, k), type_name, kernels.pack(type_name, raw, k), x, kernels.F16_LUT)
    twin = np.zeros_like(out)
    reference.matmul(twin, reference.prepare(type_name, raw, k), x)
    assert _rel_err(out, twin) <= 1e-5  # float32 sums in another order (the Q8 activation integers are the same)


def _quantized(type_name, rng, n, k):
    return gguf.quants.quantize(rng.standard_normal((n, k)).astype(np.float32), getattr(gguf.GGMLQuantizationType, type_name))


def test_quantize_q8_matches_twin():
    """The kernel and the twin round activations to the same integers (IEEE float32 steps on both)."""
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((5, 96)) * np.array([1.0, 1e-3, 40.0])[:, None].repeat(32, 1).reshape(1, 96)).astype(np.float32)
    x[1, 32:64] = 0.0  # an all-zero block: scale 0, values 0
    x[2, 5] = 0.5 * np.abs(x[2, :32]).max() / 127 * 255  # land near a rounding tie
    xq, xd, xs = np.zeros((5, 96), np.int8), np.zeros((5, 3), np.float32), np.zeros((5, 3), np.int32)
    sx = np.zeros((5, 3), np.float32)
    kernels.quantize_q8(xq, xd, xs, sx, x)
    np.testing.assert_array_equal(sx, xd * xs.astype(np.float32))
    tq, td, ts = reference.quantize_q8(x)
    np.testing.assert_array_equal(xq, tq)
    np.testing.assert_array_equal(xd, td)
    np.testing.assert_array_equal(xs, ts)
    assert np.abs(xq.astype(np.float32) * np.repeat(xd, 32, axis=1) - x).max() <= np.repeat(xd, 32, axis=1).max() / 2 * 1.0001


@pytest.mark.parametrize("type_name", ["Q8_0", "Q4_0", "Q4_1"])
def test_q8_activations_stay_close_to_float(type_name):
    """Quantizing activations to Q8 (llama.cpp's scheme) costs well under 1 % against float activations."""
    rng = np.random.default_rng(7)
    raw = _quantized(type_name, rng, 64, 256)
    x = rng.standard_normal((3, 256)).astype(np.float32)
    out = np.zeros((3, 64), np.float32)
    kernels.matmul(out, kernels.new_scratch(2, 3, 256), type_name, kernels.pack(type_name, raw, 256), x, kernels.F16_LUT)
    exact = x @ reference.dequantize(type_name, raw, 256).T
    assert _rel_err(out, exact) <= 1e-2


@pytest.mark.skipif(not kernels.HAVE_TILES, reason=NO_TILES)
@pytest.mark.parametrize("type_name", ["Q8_0", "Q4_0", "Q4_1"])
@pytest.mark.parametrize("n", [32, 21])  # whole groups of 16 rows, and a part group (lanes not stored)
def test_vnni_tiles_match_plain_loop(type_name, n):
    """The vector tiles (AVX512-VNNI, or AVX2 where the CPU lacks it) against the plain numba loop (same
    integers, fma instead of multiply and add), and a query row's result in a tile of 8 or 4 is
    bit-identical to the single-row call (on AVX2 the tile of 8 is not used: its name holds the tile of 4)."""
    from numba import njit

    name, k = type_name.lower(), 160
    t8, t4, t1 = kernels.TILE_KERNELS[name]
    plain = ROW_DOTS[name]

    @njit
    def run(o8, o4, o1, op, qs, d, mn, xq, xd, xs, sx):
        nb = xd.shape[1]
        for g in range(qs.shape[0]):
            nv = min(16, o1.shape[1] - 16 * g)
            t8(o8, g, qs[g], d[g], mn[g], xq, xd, xs, sx, 1, nb, nv)
            t4(o4, g, qs[g], d[g], mn[g], xq, xd, xs, sx, 2, nb, nv)
            for m in range(xq.shape[0]):
                t1(o1, g, qs[g], d[g], mn[g], xq, xd, xs, sx, m, nb, nv)
                for lane in range(nv):
                    op[m, 16 * g + lane] = plain(qs[g], d[g], mn[g], xq[m], xd[m], xs[m], nb, lane)

    rng = np.random.default_rng(8)
    packed = kernels.pack(type_name, _quantized(type_name, rng, n, k), k)
    mn = packed[2] if len(packed) == 3 else packed[1]
    xq, xd, xs = reference.quantize_q8(rng.standard_normal((9, k)).astype(np.float32))
    o8, o4, o1, op = (np.full((9, n + 1), 7.0, np.float32) for _ in range(4))  # column n: must stay untouched
    run(o8[:, :n], o4[:, :n], o1[:, :n], op[:, :n], packed[0], packed[1], mn, xq, xd, xs, xd * xs.astype(np.float32))
    eight = 9 if kernels.EIGHT_ROW_TILES else 5
    np.testing.assert_array_equal(o8[1:eight], o1[1:eight])  # rows 1 .. 8 in a tile of 8 (AVX2: 1 .. 4)
    np.testing.assert_array_equal(o4[2:6], o1[2:6])  # rows 2 .. 5 in a tile of 4
    assert (o1[:, n] == 7.0).all()
    assert _rel_err(o1, op) <= 1e-6


@pytest.mark.skipif(not kernels.HAVE_TILES, reason=NO_TILES)
@pytest.mark.parametrize("type_name", ["Q8_0", "Q4_0", "Q4_1"])
def test_tiles_sum_exact_integers_at_the_extremes(type_name):
    """With unit scales the tiles' output is their integer block sums: equal to the integer products
    summed in int64, at the weights' and activations' extremes (nibbles 0 and 15, bytes -128 and 127,
    activations -127 and 127), where an i16 pair sum could saturate."""
    from numba import njit

    name, n, k = type_name.lower(), 16, 64
    _, t4, t1 = kernels.TILE_KERNELS[name]

    @njit
    def run(o4, o1, qs, d, mn, xq, xd, xs, sx):
        t4(o4, 0, qs[0], d[0], mn[0], xq, xd, xs, sx, 0, xd.shape[1], 16)
        for m in range(xq.shape[0]):
            t1(o1, 0, qs[0], d[0], mn[0], xq, xd, xs, sx, m, xd.shape[1], 16)

    rng = np.random.default_rng(11)
    one = np.frombuffer(np.float16(1.0).tobytes(), np.uint8)
    zero = np.frombuffer(np.float16(0.0).tobytes(), np.uint8)
    if type_name == "Q8_0":
        w = rng.choice(np.array([-128, 127, -1, 0, 1], np.int8), size=(n, k))
        w[0], w[1] = -128, 127
        raw = np.concatenate([np.broadcast_to(one, (n, k // 32, 2)), w.reshape(n, k // 32, 32).view(np.uint8)], axis=2)
        values = w.astype(np.int64)
    else:
        nib = rng.choice(np.array([0, 15, 7, 8], np.uint8), size=(n, k))
        nib[0], nib[1] = 15, 0
        blocks = nib.reshape(n, k // 32, 32)
        packed_bytes = blocks[:, :, :16] | (blocks[:, :, 16:] << 4)
        head = [one, zero] if type_name == "Q4_1" else [one]
        raw = np.concatenate([np.broadcast_to(h, (n, k // 32, 2)) for h in head] + [packed_bytes], axis=2)
        values = nib.astype(np.int64) - (8 if type_name == "Q4_0" else 0)
    raw = np.ascontiguousarray(raw.reshape(n, -1))
    packed = kernels.pack(type_name, raw, k)
    mn = packed[2] if len(packed) == 3 else packed[1]
    xq = rng.choice(np.array([-127, 127, -1, 0, 1], np.int8), size=(4, k))
    xq[0], xq[1] = 127, -127
    xd = np.ones((4, k // 32), np.float32)
    xs = xq.reshape(4, k // 32, 32).astype(np.int32).sum(axis=2).astype(np.int32)
    o4, o1 = np.zeros((4, n), np.float32), np.zeros((4, n), np.float32)
    run(o4, o1, packed[0], packed[1], mn, xq, xd, xs, xs.astype(np.float32))
    expected = (xq.astype(np.int64) @ values.T).astype(np.float32)  # exact: |sums| < 2^24
    np.testing.assert_array_equal(o1, expected)
    np.testing.assert_array_equal(o4, expected)


def test_plain_loops_match_twin(tmp_path):
    """Without AVX512-VNNI the block matmuls run plain numba loops: the same checks, in a fresh process
    (SPECSIM_DECODER_PLAIN=1, its own numba cache)."""
    import os
    import subprocess
    import sys

    code = """
import numpy as np, gguf
from specsim.decoder import kernels, reference
assert not kernels.HAVE_VNNI
rng = np.random.default_rng(9)
for t in ("Q8_0", "Q4_0", "Q4_1"):
    raw = gguf.quants.quantize(rng.standard_normal((37, 96)).astype(np.float32), getattr(gguf.GGMLQuantizationType, t))
    x = rng.standard_normal((9, 96)).astype(np.float32)
    out, twin, one = np.zeros((9, 37), np.float32), np.zeros((9, 37), np.float32), np.zeros((1, 37), np.float32)
    kernels.matmul(out, kernels.new_scratch(2, 9, 96), t, kernels.pack(t, raw, 96), x, kernels.F16_LUT)
    reference.matmul(twin, reference.prepare(t, raw, 96), x)
    assert np.abs(out - twin).max() <= 1e-5 * np.abs(twin).max(), t
    kernels.matmul(one, kernels.new_scratch(2, 1, 96), t, kernels.pack(t, raw, 96), x[4:5], kernels.F16_LUT)
    assert (one[0] == out[4]).all(), t
"""
    env = dict(os.environ, SPECSIM_DECODER_PLAIN="1", NUMBA_CACHE_DIR=str(tmp_path))
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300)


@pytest.mark.slow
@pytest.mark.skipif(not kernels.HAVE_VNNI, reason="needs the AVX512-VNNI path (this CPU's, JIT on) to set the AVX2 one against")
def test_avx2_paths_match_avx512_bit_for_bit(tmp_path):
    """On a CPU with AVX-512, the AVX2 paths (SPECSIM_DECODER_ISA=avx2, compiled for Haswell in a fresh
    process) give the same bits as the AVX-512 ones: the block matmuls' integer sums are exact either way,
    and attention's 16-lane vectors are the same operations split into 8-lane halves. So an AVX2 machine
    decodes exactly what this one does, and the AVX2 tiles are tested where AVX2 is not the native path."""
    import os
    import subprocess
    import sys

    code = """
import sys, numpy as np, gguf
from specsim.decoder import kernels
assert kernels.kernel_paths()["block_matmul"] == sys.argv[2], kernels.kernel_paths()
rng, out = np.random.default_rng(10), {}
for t in ("Q8_0", "Q4_0", "Q4_1"):
    raw = gguf.quants.quantize(rng.standard_normal((37, 160)).astype(np.float32), getattr(gguf.GGMLQuantizationType, t))
    x = rng.standard_normal((13, 160)).astype(np.float32)
    out[t] = np.zeros((13, 37), np.float32)
    kernels.matmul(out[t], kernels.new_scratch(2, 13, 160), t, kernels.pack(t, raw, 160), x, kernels.F16_LUT)
for e in (16, 64, 128):
    q, kc, vc = (rng.standard_normal(s).astype(np.float32) for s in ((5, 9, e), (3, 90, e), (3, 90, e)))
    out[f"att{e}"] = np.zeros((5, 9, e), np.float32)
    kernels.attention(out[f"att{e}"], np.zeros((3, 15, 92), np.float32), q, kc, vc, 80, np.tril(np.ones((5, 5), bool)))
np.savez(sys.argv[1], **out)
"""
    avx2 = dict(os.environ, SPECSIM_DECODER_ISA="avx2", NUMBA_CPU_NAME="haswell", NUMBA_CACHE_DIR=str(tmp_path / "nc"))
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "avx2.npz"), "avx2"], env=avx2, check=True, timeout=600)
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "native.npz"), "vnni"], check=True, timeout=600)
    a, b = np.load(tmp_path / "avx2.npz"), np.load(tmp_path / "native.npz")
    assert a.files == b.files
    for name in a.files:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_exp_is_within_one_ulp_of_float64_exp():
    """The one exp polynomial (`kernels.expf`, Cephes' expf) composed with its 2^k: within one float32 unit
    in the last place at 1 (2^-23 relative) of numpy's float64 exp over the whole clamped range [-87, 88]
    (a correctly rounded float32 is within half of that; the polynomial and the range reduction add less)."""
    from numba import njit

    from specsim.decoder.kernels.expf import EXP_HI, EXP_LO, exp_parts, two_to_the_bits

    @njit
    def exp32(out, bits, x):
        for i in range(x.shape[0]):
            out[i], k = exp_parts(x[i])
            bits[i] = two_to_the_bits(k)
        for i in range(x.shape[0]):
            out[i] = out[i] * bits[i:i + 1].view(np.float32)[0]

    x = np.linspace(EXP_LO, EXP_HI, 2_001 if kernels.JIT_OFF else 400_001).astype(np.float32)
    out, bits = np.zeros_like(x), np.zeros(x.shape, np.int32)
    exp32(out, bits, x)
    assert np.abs(out / np.exp(x.astype(np.float64)) - 1.0).max() <= 2.0 ** -23


@pytest.mark.skipif(not kernels.JIT_OFF, reason="checks the NUMBA_DISABLE_JIT=1 pass (.ci/run) itself")
def test_jit_off_pass_runs_the_kernel_bodies_as_python():
    """Under NUMBA_DISABLE_JIT=1 every kernel is its Python function (so its body runs, and counts in
    coverage), and the paths numba cannot run as Python (the LLVM-IR tiles and blocks) are not taken."""
    import types

    from specsim.decoder.kernels import attention_blocks, softmax

    assert kernels.kernel_paths() == {"block_matmul": "plain", "attention": "plain", "plain_because": "NUMBA_DISABLE_JIT=1"}
    python = [kernels.matmul_q4_1, kernels.matmul_f16, kernels.quantize_q8, kernels.rmsnorm, kernels.rope,
              kernels.swiglu, softmax.exp_row, softmax.row_sum, attention_blocks.blocks, *kernels.TILE_KERNELS["q4_1"]]
    assert all(isinstance(f, types.FunctionType) for f in python)


@pytest.mark.parametrize("type_name", ["Q8_0", "Q4_0", "Q4_1"])
def test_matmul_row_does_not_depend_on_m(type_name):
    """Row m of a pass over M tokens is bit-identical to a pass over that token alone: the verify
    pass reproduces the decode logits exactly (no near-tie flips from kernel shapes)."""
    rng = np.random.default_rng(3)
    packed = kernels.pack(type_name, _quantized(type_name, rng, 40, 64), 64)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    scratch = kernels.new_scratch(2, 8, 64)
    full = np.zeros((8, 40), np.float32)
    kernels.matmul(full, scratch, type_name, packed, x, kernels.F16_LUT)
    for i in range(8):
        one = np.zeros((1, 40), np.float32)
        kernels.matmul(one, scratch, type_name, packed, x[i:i + 1], kernels.F16_LUT)
        np.testing.assert_array_equal(one[0], full[i])


def test_small_kernels_match_twins():
    rng = np.random.default_rng(4)
    m, h, g, e, c = 5, 4, 2, 16, 32
    x = rng.standard_normal((m, 64)).astype(np.float32)
    wn = rng.standard_normal(64).astype(np.float32)
    a, b = np.zeros_like(x), np.zeros_like(x)
    kernels.rmsnorm(a, x, wn, 1e-5)
    reference.rmsnorm(b, x, wn, 1e-5)
    assert _rel_err(a, b) <= 1e-6
    q = rng.standard_normal((m, h, e)).astype(np.float32)
    pos = np.array([0, 3, 4, 4, 9], np.int64)
    inv = 10000.0 ** (-np.arange(0, e, 2) / e)
    q1, q2 = q.copy(), q.copy()
    kernels.rope(q1, pos, inv)
    reference.rope(q2, pos, inv)
    assert _rel_err(q1, q2) <= 1e-6
    gate, up = x[:, :32].copy() * 8, x[:, 32:].copy()
    gate[0, :4] = [-100.0, 100.0, 0.0, -87.5]  # past the clamp of exp's argument, and 0
    s1, s2 = np.zeros_like(gate), np.zeros_like(gate)
    kernels.swiglu(s1, np.zeros(gate.shape, np.int32), gate, up)
    with np.errstate(over="ignore"):
        reference.swiglu(s2, None, gate, up)
    assert _rel_err(s1, s2) <= 1e-6
    assert np.all(np.abs(s1 - s2) <= 2e-6 * np.abs(s2) + 1e-30)  # each element, not only the largest
    kc = rng.standard_normal((g, c, e)).astype(np.float32)
    vc = rng.standard_normal((g, c, e)).astype(np.float32)
    mask = rng.random((m, 7)) < 0.5
    mask[:, 0] = True  # every query sees at least one masked row
    o1, o2 = np.zeros((m, h, e), np.float32), np.zeros((m, h, e), np.float32)
    kernels.attention(o1, np.zeros((g, m * h // g, c + 2), np.float32), q, kc, vc, 10, mask)
    reference.attention(o2, None, q, kc, vc, 10, mask)
    assert _rel_err(o1, o2) <= 1e-5


@pytest.mark.parametrize("n_threads", [1, 2])
def test_attention_row_does_not_depend_on_m(n_threads):
    """Fused attention: a query's output is bit-identical whether it runs alone or with other queries,
    under any thread count (so with any split of a kv head's rows), and a chain query run as a decode
    step (its predecessors in the shared rows) matches its row in the verify pass."""
    import numba

    rng = np.random.default_rng(5)
    m, h, g, e, n_shared = 9, 9, 3, 64, 70  # SmolLM2's head shape; keys cross several tiles
    c = n_shared + m
    q = rng.standard_normal((m, h, e)).astype(np.float32)
    kc = rng.standard_normal((g, c, e)).astype(np.float32)
    vc = rng.standard_normal((g, c, e)).astype(np.float32)
    causal = np.tril(np.ones((m, m), bool))
    tree = causal & (rng.random((m, m)) < 0.6) | np.eye(m, dtype=bool)
    saved = numba.get_num_threads()
    try:
        kernels.set_threads(n_threads)
        for mask in (causal, tree):
            full = np.zeros((m, h, e), np.float32)
            kernels.attention(full, np.zeros((g, m * h // g, c + 2), np.float32), q, kc, vc, n_shared, mask)
            twin = np.zeros_like(full)
            reference.attention(twin, None, q, kc, vc, n_shared, mask)
            assert _rel_err(full, twin) <= 1e-5
            for i in range(m):
                one = np.zeros((1, h, e), np.float32)
                kernels.attention(one, np.zeros((g, h // g, c + 2), np.float32), q[i:i + 1], kc, vc, n_shared, mask[i:i + 1])
                np.testing.assert_array_equal(one[0], full[i])
                if mask is causal:  # the decode step of token i: rows [0, n_shared + i) shared, itself new
                    kernels.attention(one, np.zeros((g, h // g, c + 2), np.float32), q[i:i + 1], kc, vc,
                                      n_shared + i, np.ones((1, 1), bool))
                    np.testing.assert_array_equal(one[0], full[i])
    finally:
        kernels.set_threads(saved)


@pytest.mark.parametrize("tied", [False, True])
def test_model_logits_match_numpy_twin(tmp_path, tied):
    g = load_gguf(write_tiny_gguf(tmp_path / "m.gguf", tied=tied, seed=5))
    fast, slow = Transformer(g), Transformer(g, backend="numpy")
    cf, cs = fast.new_cache(64), slow.new_cache(64)
    prompt = np.array(g.tokenizer.encode("the cat and the dog").ids)
    lf, ls = fast.prefill(cf, prompt), slow.prefill(cs, prompt)
    assert _rel_err(lf, ls) <= 1e-4  # the issue's tolerance, float32
    tree_mask = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], bool)
    toks, pos = np.array([5, 6, 7, 8]), cf.length + np.array([0, 1, 1, 2])
    lf = fast.forward(cf, toks, pos, tree_mask).copy()
    ls = slow.forward(cs, toks, pos, tree_mask).copy()
    assert _rel_err(lf, ls) <= 1e-4
    assert _rel_err(cf.k[:, :, :cf.length], cs.k[:, :, :cs.length]) <= 1e-4


def test_tiny_model_uses_every_tensor_type(tiny):
    assert {t.type_name for t in tiny.tensors.values()} == set(TYPES)
    assert tiny.tokenizer.decode(tiny.tokenizer.encode("the cat, 42!").ids) == "the cat, 42!"


def test_other_architecture_is_refused(tmp_path):
    path = write_tiny_gguf(tmp_path / "gpt2.gguf", architecture="gpt2", n_layer=1)
    with pytest.raises(SpecError, match=r"general.architecture = 'gpt2'; supported: llama"):
        load_gguf(path)


def test_unsupported_tensor_type_is_refused(tmp_path):
    path = write_tiny_gguf(tmp_path / "q5.gguf", types={"attn_q": "Q5_0"}, n_layer=1)
    with pytest.raises(SpecError, match=r"blk.0.attn_q.weight.*Q5_0.*supported tensor types: F32, F16, Q4_0, Q4_1, Q8_0"):
        load_gguf(path)


def test_truncated_file_is_refused(tmp_path):
    path = write_tiny_gguf(tmp_path / "cut.gguf", n_layer=1)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 1000])
    with pytest.raises(SpecError, match=r"truncated"):
        load_gguf(path)
    path.write_bytes(data[:100])  # cut inside the header
    with pytest.raises(SpecError, match=r"truncated or corrupt"):
        load_gguf(path)


def test_missing_file_names_fetch(tmp_path):
    with pytest.raises(SpecError, match=r"specsim decoder fetch"):
        load_gguf(tmp_path / "none.gguf")


def test_prompt_longer_than_context_is_refused(tiny):
    model = Transformer(tiny)
    cache = model.new_cache(16)
    with pytest.raises(SpecError, match=r"exceed the context of 16 tokens"):
        model.prefill(cache, np.arange(20))
