"""Attention at a (heads, KV heads) per GPU the tables did not collect: linear between the two nearest
collected shapes at the same head_dim, KV dtype and kernel, cell by cell, never past them.

Expected values are the parquet rows read here with pandas (ms in the files, × 1e-3 to seconds) and
mixed by hand with the weight (h - h_lo) / (h_hi - h_lo); none is copied from specsim's output.
The leave-one-out check drops a collected head count from the tables and compares what the
interpolation gives there with the rows measured there.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specsim.cost import measured
from specsim.specs import operator_tables as ot
from specsim.specs.models import load_model

ROOT = ot.package_root()
pytestmark = pytest.mark.skipif(ROOT is None, reason="aiconfigurator-core is not installed (no wheel here)")
GEN, CTX = "generation_attention_perf", "context_attention_perf"



def _cell_errors(mp, table, truth) -> np.ndarray:
    """|interpolated / measured − 1| of every cell the held-out rows measured (the pass's cells are of its
    2 layers), skipping cells the pass filled past memory."""
    gb, gc, cells, filled = ((mp.attn_batch, mp.attn_step, mp.attn_s / 2, mp.attn_filled) if table == GEN
                             else (mp.ctx_batch, mp.ctx_isl, mp.ctx_s / 2, mp.ctx_filled))
    err = []
    for b in truth.index:
        for c in truth.columns:
            i, j = np.flatnonzero(gb == b), np.flatnonzero(gc == c)
            if np.isnan(truth.loc[b, c]) or not i.size or not j.size or filled[i[0], j[0]]:
                continue
            err.append(abs(cells[i[0], j[0]] / truth.loc[b, c] - 1))
    return np.asarray(err)

def _rows(frame, table, heads, kv_heads, kernel, kv="bfloat16", hd=128):
    """One shape's rows, pivoted to latency in seconds over (batch, step) or (batch, isl)."""
    f = frame[(frame.num_heads == heads) & (frame.num_key_value_heads == kv_heads) & (frame.head_dim == hd)
              & (frame.window_size == 0) & (frame.kv_cache_dtype == kv) & (frame.kernel_source == kernel)]
    if table == GEN:
        f = f[f.isl == 1]
    if "attn_dtype" in f and f.attn_dtype.nunique() > 1:  # TensorRT-LLM context: bf16 math for a bf16 cache
        f = f[f.attn_dtype == "bfloat16"]
    col = "step" if table == GEN else "isl"
    return f.pivot_table(index="batch_size", columns=col, values="latency", aggfunc="median") * 1e-3


def _shard(heads, kv_heads, n_layers=2):
    """Llama-3.1-8B's layout (head_dim 128) with the heads asked for, two layers (the attention tables
    are per layer; the pass multiplies by the layers)."""
    base = load_model("llama-3.1-8b")
    return dataclasses.replace(base, n_heads=heads, n_kv_heads=kv_heads, hidden_size=heads * 128, n_layers=n_layers)


# ---- Qwen2.5-7B: 28 heads, 4 KV heads, between the collected 24 and 32 ---------------------------------

@pytest.mark.parametrize("framework, kernel", [("vllm", "vllm_flash_attn_fa3"), ("sglang", "fa3"),
                                               ("trtllm", "torch_flow")])
def test_qwen25_7b_on_h100_is_the_mean_of_the_24_and_32_head_rows(framework, kernel):
    """28 query heads over 4 KV heads lie half-way between 24 and 32 (weight 4/8): each cell is the mean
    of the two rows, × 28 layers. Before this, Qwen2.5-7B fell back to the roofline on H100."""
    model = load_model("qwen2.5-7b")
    assert (model.n_heads, model.n_kv_heads, model.head_dim, model.n_layers) == (28, 4, 128, 28)
    tables = ot.load_tables("h100_sxm", framework)
    gen, ctx = tables.frames[GEN], tables.frames[CTX]
    assert ((gen.num_heads == 28) & (gen.num_key_value_heads == 4)).sum() == 0  # why it interpolates
    mp = measured.build(tables, model, 1)
    assert mp is not None and measured.covered(model, tables) == ""
    for table in (GEN, CTX):
        assert any(n.startswith(f"{table}: 28/4/128") and "between the collected 24 and 32 heads at 4 KV heads" in n
                   for n in mp.notes), mp.notes
    lo, hi = _rows(gen, GEN, 24, 4, kernel), _rows(gen, GEN, 32, 4, kernel)
    for b, s in ((1, 1023), (8, 4095), (64, 2047), (256, 1023)):  # measured at both ends
        want = 28 * 0.5 * (lo.loc[b, s] + hi.loc[b, s])
        assert mp.attention_time_s(b, s) == pytest.approx(want, rel=1e-12)
    lo, hi = _rows(ctx, CTX, 24, 4, kernel), _rows(ctx, CTX, 32, 4, kernel)
    for b, x in ((1, 1024), (4, 4096), (2, 16384)):
        want = 28 * 0.5 * (lo.loc[b, x] + hi.loc[b, x])  # a fresh prompt: no prefix
        assert mp.context_attention_time_s(b, x, 0) == pytest.approx(want, rel=1e-12)


def test_qwen25_7b_fp8_kv_from_the_fp8_rows_and_refused_on_a100():
    """An fp8 KV cache interpolates the fp8 rows (SGLang fa3 on H100: the mean of 24/4 and 32/4, weight
    1/2); A100 collected no fp8 KV rows at all (Ampere has no fp8), so the dtype is named, not the shape."""
    model = load_model("qwen2.5-7b")
    tables = ot.load_tables("h100_sxm", "sglang")
    mp = measured.build(tables, model, 1, kv_cache_dtype="fp8")
    assert mp is not None
    gen, ctx = tables.frames[GEN], tables.frames[CTX]
    lo, hi = _rows(gen, GEN, 24, 4, "fa3", kv="fp8"), _rows(gen, GEN, 32, 4, "fa3", kv="fp8")
    assert mp.attention_time_s(16, 8191) == pytest.approx(28 * (lo.loc[16, 8191] + hi.loc[16, 8191]) / 2, rel=1e-12)
    lo, hi = _rows(ctx, CTX, 24, 4, "fa3", kv="fp8"), _rows(ctx, CTX, 32, 4, "fa3", kv="fp8")
    assert mp.context_attention_time_s(2, 2048, 0) == pytest.approx(28 * (lo.loc[2, 2048] + hi.loc[2, 2048]) / 2,
                                                                    rel=1e-12)
    assert any("kv fp8" in n and "between the collected 24 and 32" in n for n in mp.notes)
    a100 = ot.load_tables("a100_sxm", "vllm")
    assert not (a100.frames[GEN].kv_cache_dtype == "fp8").any()
    why = measured.covered(model, a100, kv_cache_dtype="fp8")
    assert why.startswith("fp8 KV cache: generation_attention_perf (a100_sxm vllm") and "bfloat16 only" in why, why


def test_qwen25_7b_tp2_interpolates_14_heads_between_12_and_16_at_two_kv_heads():
    """tp 2 leaves 14 heads over 2 KV heads per GPU: weight (14 - 12) / (16 - 12) = 1/2 on vLLM's rows."""
    model = load_model("qwen2.5-7b")
    tables = ot.load_tables("h100_sxm", "vllm")
    mp = measured.build(tables, model, 2)
    assert mp is not None
    gen = tables.frames[GEN]
    lo, hi = _rows(gen, GEN, 12, 2, "vllm_flash_attn_fa3"), _rows(gen, GEN, 16, 2, "vllm_flash_attn_fa3")
    assert mp.attention_time_s(16, 2047) == pytest.approx(28 * (lo.loc[16, 2047] + hi.loc[16, 2047]) / 2, rel=1e-12)
    assert any("between the collected 12 and 16 heads at 2 KV heads" in n for n in mp.notes)


def test_mha_20_heads_on_sglang_along_the_diagonal():
    """Llama-2-13B at tp 2: 20 heads, 20 KV heads (MHA). SGLang collected MHA at 16/16 and 24/24 but no
    row at 20 KV heads: along group size 1 the weight is (20 - 16) / (24 - 16) = 1/2."""
    model = load_model("llama-2-13b")
    assert (model.n_heads, model.n_kv_heads, model.head_dim) == (40, 40, 128)
    tables = ot.load_tables("h100_sxm", "sglang")
    gen = tables.frames[GEN]
    assert not (gen.num_key_value_heads == 20).any()
    mp = measured.build(tables, model, 2)
    assert mp is not None
    lo, hi = _rows(gen, GEN, 16, 16, "fa3"), _rows(gen, GEN, 24, 24, "fa3")
    want = model.n_layers * (lo.loc[4, 1023] + hi.loc[4, 1023]) / 2
    assert mp.attention_time_s(4, 1023) == pytest.approx(want, rel=1e-12)
    assert any("group size 1" in n and "16/16 and 24/24" in n for n in mp.notes), mp.notes


def test_outside_the_collected_heads_is_not_extrapolated():
    """Llama-3.1-405B at tp 1 holds 128 heads over 8 KV heads per GPU; vLLM's generation table stops at 96
    heads there (read below), so the pass is not built and `covered` names what was collected."""
    model = load_model("llama-3.1-405b")
    tables = ot.load_tables("h100_sxm", "vllm")
    gen = tables.frames[GEN]
    at8 = gen[(gen.num_key_value_heads == 8) & (gen.head_dim == 128) & (gen.window_size == 0)
              & (gen.kv_cache_dtype == "bfloat16")]
    collected = sorted(int(h) for h in at8.num_heads.unique())
    assert collected[-1] < 128
    why = measured.covered(model, tables)
    assert measured.build(tables, model, 1) is None
    assert "not extrapolated" in why and "128 heads, 8 KV heads" in why, why
    assert f"num_heads {', '.join(map(str, collected))}" in why, why
    assert "\n" not in why


def test_an_interpolated_pass_stays_cached():
    tables = ot.load_tables("h100_sxm", "vllm")
    model = load_model("qwen2.5-7b")
    assert measured.build(tables, model, 1) is measured.build(tables, model, 1)


# ---- leave one out: how well does the linear form fit the data? ----------------------------------------

def _without(tables, heads, kv_heads):
    """The same tables with every row at (heads, kv_heads) dropped from both attention tables."""
    frames = dict(tables.frames.items())
    for t in (GEN, CTX):
        f = frames[t]
        frames[t] = f[~((f.num_heads == heads) & (f.num_key_value_heads == kv_heads))]
    return dataclasses.replace(tables, frames=frames)


def _errors(framework, kernel, heads, kv_heads, note, table):
    """|interpolated / measured - 1| over every (batch, step|isl) cell the held-out shape measured, with
    its rows dropped from the tables and the pass built at that shape (its note must name `note`)."""
    tables = ot.load_tables("h100_sxm", framework)
    mp = measured.build(_without(tables, heads, kv_heads), _shard(heads, kv_heads), 1)
    assert mp is not None
    assert any(n.startswith(table) and note in n for n in mp.notes), mp.notes
    truth = _rows(tables.frames[table], table, heads, kv_heads, kernel)
    return _cell_errors(mp, table, truth)


# (framework, kernel, held-out heads, KV heads, the collected neighbours) on H100; SGLang and TensorRT-LLM
# collected no 24 heads at 8 KV heads, so there only 4 KV heads.
LEAVE_OUT = [("vllm", "vllm_flash_attn_fa3", 24, 4, 20, 32), ("vllm", "vllm_flash_attn_fa3", 24, 8, 16, 32),
             ("sglang", "fa3", 24, 4, 20, 32), ("trtllm", "torch_flow", 24, 4, 20, 32)]
# MHA (group size 1): the held-out h/h between the collected lo/lo and hi/hi. vLLM's generation table
# holds MHA only up to 8/8, so SGLang and TensorRT-LLM.
LEAVE_OUT_MHA = [("sglang", "fa3", 24, 16, 32), ("sglang", "fa3", 40, 32, 48),
                 ("trtllm", "torch_flow", 24, 16, 32), ("trtllm", "torch_flow", 40, 32, 48)]


@pytest.mark.parametrize("table, median_bound, worst_bound", [
    # measured (bf16 KV, H100 0.12.0 tables, every cell the held-out shape measured and not filled):
    # generation, 608 cells: median 0.83 %, worst 54.3 %: TensorRT-LLM at batch 8, step 63 (its 20-head
    # row reads 19.5 us where 24 and 32 heads read 10.8 and 11.0: the neighbour is the outlier, not
    # the linear form); vLLM/SGLang worst 15.6 % (vLLM 24/8 between 16 and 32); per shape the median
    # is 0.6-1.1 %. Context, 476 cells: median 2.17 %, worst 22.4 % (vLLM 24/8); per shape 1.6-3.3 %.
    (GEN, 0.02, 0.60),
    (CTX, 0.04, 0.30),
])
def test_leave_one_out_24_heads(table, median_bound, worst_bound):
    err = np.concatenate([_errors(fw, k, h, g, f"between the collected {lo} and {hi} heads at {g} KV heads", table)
                          for fw, k, h, g, lo, hi in LEAVE_OUT])
    assert err.size > 400  # the cells compared: 4 shapes × 100+ cells
    med, worst = float(np.median(err)), float(err.max())
    print(f"{table}: {err.size} cells, median {med:.4f}, worst {worst:.4f}")
    assert med < median_bound, med
    assert worst < worst_bound, worst


@pytest.mark.parametrize("table, median_bound, worst_bound", [
    # measured (as above): generation, 536 cells: median 1.31 %, worst 41.6 % (TensorRT-LLM 40/40; per
    # shape the median is 1.2-2.7 %); context, 408 cells: median 1.64 %, worst 18.7 % (1.4-2.6 % per shape).
    (GEN, 0.03, 0.50),
    (CTX, 0.03, 0.25),
])
def test_leave_one_out_mha_along_group_size_one(table, median_bound, worst_bound):
    err = np.concatenate([_errors(fw, k, h, h, f"group size 1 (query heads per KV head) between the collected "
                                  f"{lo}/{lo} and {hi}/{hi}", table) for fw, k, h, lo, hi in LEAVE_OUT_MHA])
    assert err.size > 400
    med, worst = float(np.median(err)), float(err.max())
    print(f"{table} MHA: {err.size} cells, median {med:.4f}, worst {worst:.4f}")
    assert med < median_bound, med
    assert worst < worst_bound, worst


# ---- KV heads the tables did not collect ------------------------------------------------------------------

def test_smollm2_135m_bilinear_in_heads_and_kv_heads_on_trtllm():
    """SmolLM2-135M: 9 heads over 3 KV heads, head_dim 64. TensorRT-LLM on H100 collected no 3 KV heads
    and no 27/9 or 6/2 at group size 3, so: in num_heads at 2 and 4 KV heads (9 between 8 and 16: weight
    1/8 on 16), then linear in KV heads (3 half-way between 2 and 4):
    T = 1/2·(7/8·T(8/2) + 1/8·T(16/2)) + 1/2·(7/8·T(8/4) + 1/8·T(16/4)), × 30 layers."""
    model = load_model("smollm2-135m")
    assert (model.n_heads, model.n_kv_heads, model.head_dim, model.n_layers) == (9, 3, 64, 30)
    tables = ot.load_tables("h100_sxm", "trtllm")
    gen = tables.frames[GEN]
    assert not ((gen.num_key_value_heads == 3) & (gen.head_dim == 64)).any()
    mp = measured.build(tables, model, 1)
    assert mp is not None
    r = {(h, g): _rows(gen, GEN, h, g, "torch_flow", hd=64) for h, g in ((8, 2), (16, 2), (8, 4), (16, 4))}
    for b, s in ((1, 1023), (32, 4095)):
        want = 30 * (0.5 * (7 / 8 * r[8, 2].loc[b, s] + 1 / 8 * r[16, 2].loc[b, s])
                     + 0.5 * (7 / 8 * r[8, 4].loc[b, s] + 1 / 8 * r[16, 4].loc[b, s]))
        assert mp.attention_time_s(b, s) == pytest.approx(want, rel=1e-12)
    assert any(n.startswith(GEN) and "bilinear" in n and "8/2, 16/2, 8/4, 16/4" in n for n in mp.notes), mp.notes


def _without_kv_level(tables, kv_heads, hd=128):
    frames = dict(tables.frames.items())
    for t in (GEN, CTX):
        f = frames[t]
        frames[t] = f[~((f.num_key_value_heads == kv_heads) & (f.head_dim == hd))]
    return dataclasses.replace(tables, frames=frames)


def _kv_errors(framework, kernel, heads, table):
    """As _errors, with every 4-KV-head row at head_dim 128 dropped: the pass comes from other KV heads.
    Returns (errors, the path its note names) or None where 4 KV heads never measured `heads`."""
    tables = ot.load_tables("h100_sxm", framework)
    truth = _rows(tables.frames[table], table, heads, 4, kernel)
    if truth.empty:
        return None
    mp = measured.build(_without_kv_level(tables, 4), _shard(heads, 4), 1)
    assert mp is not None
    note = [n for n in mp.notes if n.startswith(f"{table}: {heads}/4/128")]
    assert len(note) == 1, mp.notes
    path = "bilinear" if "bilinear" in note[0] else "group size" if "group size" in note[0] else note[0]
    return _cell_errors(mp, table, truth), path


@pytest.mark.parametrize("table, median_bound, worst_bound", [
    # measured, 4 KV heads at head_dim 128 left out on H100 (bf16 KV; 12, 24, 32 and 40 heads where the
    # framework measured them at 4 KV heads; vLLM, SGLang, TensorRT-LLM):
        # generation, 1,132 cells: median 2.06 %, worst 57.0 % (vLLM 12/4 along group size 3 from 3/1 and 24/8);
    # context, 1,428 cells: median 2.84 %, worst 36.7 % (SGLang 24/4 from 12/2 and 48/8). Per shape the
    # median is 1.7-2.5 % (generation) and 1.0-6.1 % (context); 40/4 goes bilinear (no 10/1 or 20/2):
    # 2.1 % / 34.7 % (generation, vLLM), 1.0-3.7 % / 11-16 % (context). The gap is 2 -> 8 KV heads, a factor
    # 4; the shipped models need at most a factor 2 (2 -> 4, 4 -> 8, 16/16 -> 24/24...).
    (GEN, 0.03, 0.65),
    (CTX, 0.04, 0.45),
])
def test_leave_one_out_four_kv_heads(table, median_bound, worst_bound):
    errs, paths = [], set()
    for fw, k in (("vllm", "vllm_flash_attn_fa3"), ("sglang", "fa3"), ("trtllm", "torch_flow")):
        for h in (12, 24, 32, 40):
            got = _kv_errors(fw, k, h, table)
            if got is not None:
                errs.append(got[0])
                paths.add(got[1])
    assert paths == {"bilinear", "group size"}, paths  # both KV-head paths are checked
    err = np.concatenate(errs)
    med, worst = float(np.median(err)), float(err.max())
    print(f"{table} KV heads: {err.size} cells, median {med:.4f}, worst {worst:.4f}")
    assert err.size > 900
    assert med < median_bound, med
    assert worst < worst_bound, worst
