"""Measured-curve kernel times (specsim.cost.kernels): the formulas by hand on small shapes, their
limits (p = 1 adds, large p is the roofline's max, no table is the roofline), monotonicity in the
token count, the operator list of a known model, and the fitted H100 curve against Vidur's
Llama-2-7B measurements read straight from the CSV."""
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.cost import kernels as K
from specsim.cost.roofline import step_cost
from specsim.specs.data import data_dir
from specsim.specs.hardware import ELEMENTWISE_KINDS, ROW_BLOCKED_KINDS, KernelProfile, load_hardware
from specsim.specs.models import load_model


def _profile(**over) -> KernelProfile:
    kw = dict(n_sm=4, gemm_bandwidth_frac=1.0, gemm_compute_frac=1.0, gemm_overlap_exponent=2.0, gemm_tile=(64, 64),
              gemm_floor_s=2e-6, elementwise_floor_s=1e-6, elementwise_rows_per_sm=2,
              elementwise_bandwidth_frac={k: 0.5 for k in ELEMENTWISE_KINDS},
              elementwise_row_s_per_elem={k: 1e-9 for k in ROW_BLOCKED_KINDS})
    kw.update(over)
    return KernelProfile(**kw)


BW, FLOPS = 1e12, 100e12  # achievable rates handed to gemm_time_s


def test_gemm_time_by_hand():
    # T = 100 tokens, K = 256, N = 256, fp16 everywhere.
    # memory: (256·256·2 + 100·(256·2 + 256·2)) B = 131072 + 102400 = 233472 B at 1e12 B/s = 233.472 ns
    # compute: tiles ⌈100/64⌉·⌈256/64⌉ = 2·4 = 8 over 4 SMs = 2 waves; a tile is 2·64·64·256 = 2,097,152
    #   FLOP on one SM at 100e12/4 = 25e12 FLOP/s = 83.886 ns; 2 waves = 167.772 ns
    # p = 2: sqrt(233.472² + 167.772²) = 287.50 ns; plus the 2 µs floor
    t = float(K.gemm_time_s(_profile(), n_tokens=100, k=256, n=256, bandwidth_bytes_per_s=BW, flops_per_s=FLOPS))
    mem, comp = 233472 / 1e12, 2 * 2 * 64 * 64 * 256 / 25e12
    assert mem == pytest.approx(233.472e-9) and comp == pytest.approx(167.772e-9, rel=1e-5)
    assert t == pytest.approx(2e-6 + math.hypot(mem, comp), rel=1e-12)


def test_overlap_exponent_limits():
    args = dict(n_tokens=100, k=256, n=256, bandwidth_bytes_per_s=BW, flops_per_s=FLOPS, with_floor=False)
    mem, comp = 233472 / 1e12, 2 * 2 * 64 * 64 * 256 / 25e12
    # p = 1: memory and compute add up
    assert float(K.gemm_time_s(_profile(gemm_overlap_exponent=1.0), **args)) == pytest.approx(mem + comp, rel=1e-12)
    # p large: the max (the roofline's perfect overlap); (1 + (c/m)^p)^(1/p) - 1 < 1e-9 at p = 200
    assert float(K.gemm_time_s(_profile(gemm_overlap_exponent=200.0), **args)) == pytest.approx(max(mem, comp), rel=1e-9)


def test_no_table_is_the_pure_roofline():
    t = K.gemm_time_s(None, n_tokens=np.array([1, 1000]), k=4096, n=4096, bandwidth_bytes_per_s=BW, flops_per_s=FLOPS)
    # T = 1: bytes 4096²·2 + 1·(4096·2·2) = 33,570,816 B / 1e12; T = 1000: 2·1000·4096² / 1e14 FLOP/s
    assert t[0] == pytest.approx(33_570_816 / 1e12, rel=1e-12)
    assert t[1] == pytest.approx(2 * 1000 * 4096**2 / 1e14, rel=1e-12)


def test_tokens_padded_to_the_tile_and_waves():
    kp = _profile(gemm_overlap_exponent=200.0, gemm_floor_s=0.0)
    compute_bound = dict(k=4096, n=256, bandwidth_bytes_per_s=1e20, flops_per_s=FLOPS)
    one = float(K.gemm_time_s(kp, n_tokens=1, **compute_bound))
    # 1 and 64 tokens fill the same 64-row tiles: same time; 65 tokens need a second tile row:
    # 2·4 = 8 tiles on 4 SMs is 2 waves, twice the time of 1 wave
    assert float(K.gemm_time_s(kp, n_tokens=64, **compute_bound)) == pytest.approx(one, rel=1e-9)
    assert float(K.gemm_time_s(kp, n_tokens=65, **compute_bound)) == pytest.approx(2 * one, rel=1e-9)


def test_elementwise_by_hand():
    kp = _profile()
    # norm over T = 10 rows of 4096: bandwidth term 10·4096·2·2 B / (1e12 · 0.5) = 327.68 ns;
    # row term ⌈10 / (4 SMs · 2 rows)⌉ = 2 waves · 4096 elements · 1 ns = 8.192 µs; plus the 1 µs floor
    t = float(K.elementwise_time_s(kp, "norm", n_tokens=10, bytes_=10 * 4096 * 4, row_elems=4096,
                                   peak_bandwidth_bytes_per_s=1e12))
    assert t == pytest.approx(1e-6 + 8.192e-6, rel=1e-12)
    # the residual add is a flat kernel: no row term
    t = float(K.elementwise_time_s(kp, "add", n_tokens=10, bytes_=10 * 4096 * 6, row_elems=4096,
                                   peak_bandwidth_bytes_per_s=1e12))
    assert t == pytest.approx(1e-6 + 10 * 4096 * 6 / 0.5e12, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 8192), st.integers(1, 2000), st.integers(1, 16384), st.integers(1, 16384),
       st.floats(1.0, 8.0), st.sampled_from(["norm", "rope", "act", "add", "embed"]))
def test_kernel_times_never_decrease_with_tokens(t, step, k, n, p, kind):
    kp = _profile(gemm_overlap_exponent=p, n_sm=132)
    g = K.gemm_time_s(kp, n_tokens=np.array([t, t + step]), k=k, n=n, bandwidth_bytes_per_s=3e12, flops_per_s=7e14)
    assert g[1] >= g[0]
    e = K.elementwise_time_s(kp, kind, n_tokens=np.array([t, t + step]), bytes_=np.array([t, t + step]) * 4.0 * n,
                             row_elems=n, peak_bandwidth_bytes_per_s=3e12)
    assert e[1] >= e[0]


def test_llama_2_7b_operators_by_hand():
    ops = {o.name: o for o in K.step_operators(load_model("llama-2-7b"), 2)}
    # config.json: hidden 4096, 32 heads of 128 (no GQA), FFN 11008 gated; tp = 2 splits the heads and the FFN
    assert (ops["attn_pre_proj"].k, ops["attn_pre_proj"].n) == (4096, (4096 + 2 * 4096) / 2)
    assert (ops["attn_post_proj"].k, ops["attn_post_proj"].n) == (4096 / 2, 4096)
    assert (ops["mlp_up_proj"].k, ops["mlp_up_proj"].n) == (4096, 2 * 11008 / 2)
    assert (ops["mlp_down_proj"].k, ops["mlp_down_proj"].n) == (11008 / 2, 4096)
    assert ops["attn_pre_proj"].count == 32 and ops["emb"].count == 1
    # rotary over 32 query + 32 key heads of 128, half of them per device; read and write in fp16
    assert ops["attn_rope"].row_elems == 64 * 128 / 2 and ops["attn_rope"].bytes_per_token == 4 * 64 * 128 / 2
    assert ops["mlp_act"].bytes_per_token == 3 * 2 * 11008 / 2  # read gate and up, write the product


# ---- against Vidur's measurements, read straight from the CSV ---------------------------------------
VIDUR_7B_H100 = data_dir() / "perf/vidur/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv"
PROJECTIONS = ["attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"]


def _csv_projection_sums(tokens) -> np.ndarray:
    d = pd.read_csv(VIDUR_7B_H100)
    d = d[d["num_tensor_parallel_workers"] == 1]
    per_op = d.groupby("num_tokens")[[f"time_stats.{op}.median" for op in PROJECTIONS]].median()
    return per_op.sum(axis=1).loc[list(tokens)].to_numpy() * 1e-3  # ms in the file


@pytest.mark.skipif(not VIDUR_7B_H100.is_file(), reason=f"Vidur profile not found at {VIDUR_7B_H100}")
def test_llama_2_7b_h100_projections_follow_the_measured_curve():
    tokens = [1, 64, 128, 256, 512]
    measured = _csv_projection_sums(tokens)
    # the figures, read from the same file, to the precision it printed them:
    # 0.156, 0.162, 0.180, 0.260 ms (±0.0005) and 0.33 ms (±0.005)
    assert measured[:4] * 1e3 == pytest.approx([0.156, 0.162, 0.180, 0.260], abs=0.0005 + 1e-12)
    assert measured[4] * 1e3 == pytest.approx(0.33, abs=0.005)
    hw, model = load_hardware("h100-sxm"), load_model("llama-2-7b")
    per_layer = step_cost(model, hw, batch_size=np.array(tokens)).weights.time_s / model.n_layers
    # each point within 20 % (the measured curve is not even monotone: 224 and 256 tokens take longer
    # than 320), and the curve must rise where the measurement rises: the roofline's 1.05× from 1 to
    # 256 tokens is what the issue calls wrong; measured 1.67×, so anything at or above 1.3× is shape
    assert per_layer == pytest.approx(measured, rel=0.20)
    assert per_layer[3] / per_layer[0] > 1.3
    roofline = step_cost(model, _without_curve(hw), batch_size=np.array(tokens)).weights.time_s / model.n_layers
    assert roofline[3] / roofline[0] < 1.1  # the pure roofline stays on its plateau (the complaint)


def _without_curve(hw):
    from dataclasses import replace

    return replace(hw, kernels=None)


def _decoder_tile_passes(m: int, tiles=(8, 4, 1)) -> list[int]:
    """The row tiles the reference decoder's block matmul runs for M query rows, read off its driver loop
    (decoder/kernels.py `_tiled_matmul`: tiles of 8 up to n8, of 4 up to n4, then single rows)."""
    n8, n4 = m - m % 8, m - m % 4
    return [8] * (n8 // 8) + [4] * ((n4 - n8) // 4) + [1] * (m - n4)


def test_row_tile_passes_follow_the_decoder_loop():
    from specsim.decoder.kernels import TILES

    assert tuple(TILES) == (8, 4, 1)
    u = 2.5
    for m in range(0, 70):
        passes = _decoder_tile_passes(m)
        assert sum(passes) == m
        assert float(K.row_tile_work(m, TILES, u)) == pytest.approx(sum(s + u for s in passes), rel=1e-12)
    # by hand: M = 5 is one tile of 4 and one single row: (4 + 2.5) + (1 + 2.5) = 10; M = 3 three singles: 10.5
    assert float(K.row_tile_work(5, TILES, u)) == 10.0 and float(K.row_tile_work(3, TILES, u)) == 10.5


def test_row_tiled_gemm_by_hand():
    # compute bound (bandwidth 1e20), p large: t = ⌈⌈N/16⌉/n_SM⌉ · 2·16·K·n_SM · work / flops
    kp = _profile(gemm_tile=(1, 16), gemm_row_tiles=(8, 4, 1), gemm_tile_pass_rows=3.0, n_sm=1,
                  gemm_overlap_exponent=200.0, gemm_floor_s=0.0)
    args = dict(k=576, n=3072, bandwidth_bytes_per_s=1e20, flops_per_s=1e11)
    for m, work in ((1, 4.0), (2, 8.0), (4, 7.0), (8, 11.0), (9, 15.0)):
        want = 192 * 2 * 16 * 576 * work / 1e11
        assert float(K.gemm_time_s(kp, n_tokens=m, **args)) == pytest.approx(want, rel=1e-9)
    # one pass of 4 rows costs less than two single rows when the pass costs more than 2 rows' work
    assert K.gemm_time_s(kp, n_tokens=4, **args) < K.gemm_time_s(kp, n_tokens=2, **args)


@pytest.mark.parametrize("over, field", [(dict(gemm_row_tiles=(4, 8, 1)), "gemm_row_tiles"),
                                         (dict(gemm_row_tiles=(8, 4)), "gemm_row_tiles"),
                                         (dict(gemm_row_tiles=(8, 0, 1)), "gemm_row_tiles"),
                                         (dict(gemm_row_tiles=(8, 4, 1), gemm_tile_pass_rows=-1.0), "gemm_tile_pass_rows"),
                                         (dict(gemm_tile_pass_rows=2.0), "gemm_tile_pass_rows")])
def test_row_tiles_refused_when_malformed(over, field):
    from specsim.errors import SpecError

    with pytest.raises(SpecError, match=field):
        _profile(**over)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 9000), st.integers(1, 30000), st.floats(1.0, 30000.0), st.floats(1.0, 6.0), st.booleans(),
       st.sampled_from([None, 0.0, 1.7, 9.0]))
def test_scalar_gemm_path_matches_the_array_path(t, k, n, p, floor, pass_rows):
    # the plain-float twin used for one step at a time must agree with the numpy path
    tiles = {} if pass_rows is None else dict(gemm_tile=(1, 16), gemm_row_tiles=(8, 4, 1), gemm_tile_pass_rows=pass_rows)
    kp = _profile(gemm_overlap_exponent=p, n_sm=132, **tiles)
    args = dict(k=k, n=n, bandwidth_bytes_per_s=3e12, flops_per_s=7e14, weight_bytes_per_elem=0.5, out_bytes_per_elem=4.0,
                with_floor=floor)
    scalar = float(K.gemm_time_s(kp, n_tokens=t, **args))
    array = K.gemm_time_s(kp, n_tokens=np.array([t, t]), **args)
    assert scalar == pytest.approx(float(array[0]), rel=1e-12, abs=1e-18)


def test_each_tile_its_own_pass_cost():
    from specsim.decoder.kernels import TILES

    # with a_s = s + u the per-tile form is the one-u form, whatever M (a second way to the same sum)
    u = 1.7
    for m in range(0, 70):
        assert float(K.row_tile_work(m, TILES, 0.0, tuple(s + u for s in TILES))) == \
            pytest.approx(float(K.row_tile_work(m, TILES, u)), rel=1e-12)
    # by hand with costs 8 / 5 / 2: M = 5 is a 4-row pass and a single row, 5 + 2 = 7; M = 12 is
    # 8 + 4 rows, 8 + 5 = 13; M = 7 is 4 + 1 + 1 + 1, 5 + 3·2 = 11, dearer than M = 8's one pass
    cost = (8.0, 5.0, 2.0)
    assert [float(K.row_tile_work(m, TILES, 0.0, cost)) for m in (5, 12, 7, 8)] == [7.0, 13.0, 11.0, 8.0]
    kp = _profile(gemm_tile=(1, 16), gemm_row_tiles=(8, 4, 1), gemm_tile_pass_cost=cost, n_sm=1,
                  gemm_overlap_exponent=200.0, gemm_floor_s=0.0)
    args = dict(k=576, n=3072, bandwidth_bytes_per_s=1e20, flops_per_s=1e11)
    for m, work in ((5, 7.0), (12, 13.0)):
        want = 192 * 2 * 16 * 576 * work / 1e11
        assert float(K.gemm_time_s(kp, n_tokens=m, **args)) == pytest.approx(want, rel=1e-9)
        assert float(K.gemm_time_s(kp, n_tokens=float(m) + 0.0, **args)) == \
            pytest.approx(float(K.gemm_time_s(kp, n_tokens=np.array([m, m]), **args)[0]), rel=1e-12)


@pytest.mark.parametrize("over, field", [
    (dict(gemm_row_tiles=(8, 4, 1), gemm_tile_pass_cost=(8.0, 5.0)), "gemm_tile_pass_cost"),
    (dict(gemm_row_tiles=(8, 4, 1), gemm_tile_pass_cost=(8.0, 0.0, 1.0)), "gemm_tile_pass_cost"),
    (dict(gemm_row_tiles=(8, 4, 1), gemm_tile_pass_cost=(8.0, 5.0, 2.0), gemm_tile_pass_rows=1.0), "gemm_tile_pass_rows"),
    (dict(attention_overlap_exponent=0.5), "attention_overlap_exponent"),
    (dict(attention_overlap_exponent=float("nan")), "attention_overlap_exponent")])
def test_tile_costs_and_attention_overlap_refused_when_malformed(over, field):
    from specsim.errors import SpecError

    with pytest.raises(SpecError, match=field):
        _profile(**over)


def test_attention_overlap_by_hand():
    # 3 MB read at 1e9 B/s = 3 ms; 4e9 FLOP at 1e12 FLOP/s = 4 ms. max: 4 ms; q = 1: 7 ms; q = 2: 5 ms
    args = dict(bytes_=3e6, flops=4e9, bandwidth_bytes_per_s=1e9, flops_per_s=1e12)
    assert float(K.attention_time_s(None, **args)) == pytest.approx(4e-3, rel=1e-12)
    assert float(K.attention_time_s(_profile(), **args)) == pytest.approx(4e-3, rel=1e-12)  # default: inf, the max
    assert float(K.attention_time_s(_profile(attention_overlap_exponent=1.0), **args)) == pytest.approx(7e-3, rel=1e-12)
    assert float(K.attention_time_s(_profile(attention_overlap_exponent=2.0), **args)) == pytest.approx(5e-3, rel=1e-12)


def test_step_attention_uses_the_parts_overlap_and_the_fast_serving_cost_agrees():
    from dataclasses import replace

    from specsim.cost.pricing import RooflineSource
    from specsim.serving.cost import FastStep

    hw = load_hardware("local")
    model = load_model("smollm2-135m-q4_1")
    q = 2.0
    part = replace(hw, kernels=replace(hw.kernels, attention_overlap_exponent=q))
    sc = step_cost(model, part, batch_size=1, q_len=4, context_len=1000)
    eff = part.efficiency
    mem = float(sc.attention.bytes) / (part.mem_bandwidth_bytes_per_s * eff.bandwidth_frac)
    comp = float(sc.attention.flops) / (part.peak_flops_per_s[sc.attention_dtype] * eff.compute_frac)
    assert float(sc.attention.time_s) == pytest.approx(math.hypot(mem, comp), rel=1e-12)
    fast = FastStep(RooflineSource(model, part, tp=1, attention="fused", efficiency=None))
    assert fast.ok  # its own checks against the source's exact price passed with the overlap
    for qs, ls in (([5], [700]), ([1, 3, 9], [10, 2000, 300])):
        exact = fast.exact(qs, ls, qs)
        assert fast(qs, ls, qs) == pytest.approx(exact, rel=1e-9)
