"""The measured source for every weight format and KV-cache dtype the tables hold (issue 36 item 2),
checked by hand against the parquet rows, read here with pandas. Shapes are chosen on grid points so
each expected time is a sum of table rows (ms in the files, × 1e-3 to seconds):

- a W4A16 (AWQ int4) target on A100 under vLLM: vLLM 0.14.0 collected no int4 weight-only GEMM on
  a100_sxm, so TensorRT-LLM 1.0.0's weight-only kernel stands in, named on the pass;
- an fp8 KV cache on H100 under SGLang 0.5.14 (fa3 rows with kv_cache_dtype fp8), and the same cache
  refused on A100, whose tables hold bfloat16 KV only (Ampere has no fp8);
- context attention for prompt chunks, with and without a cached prefix.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.cost import measured
from specsim.specs import operator_tables as ot
from specsim.specs.models import load_model

from naive_isotonic import pool_adjacent_violators, rows_by_m

ROOT = ot.package_root()
pytestmark = pytest.mark.skipif(ROOT is None, reason="aiconfigurator-core is not installed (no wheel here)")


def _w4a16():
    """Llama-3.1-8B's layout with 4 KV heads, ffn 8192 and a 65536 vocabulary, so every GEMM is an
    int4_wo grid point: qkv (5120, 4096), o (4096, 4096), gate_up (16384, 4096), down (4096, 8192),
    head (65536, 4096). AWQ checkpoints keep the LM head in 16-bit: lm_head_weight_format bf16."""
    base = load_model("llama-3.1-8b").with_weight_format("int4-awq")
    return dataclasses.replace(base, n_kv_heads=4, ffn_size=8192, vocab_size=65536, lm_head_weight_format="bf16")


W4A16_LAYER_SHAPES = ((5120, 4096), (4096, 4096), (16384, 4096), (4096, 8192))


def _gemm_rows(frame, dtype, m, shapes):
    """{(n, k): ms} at m: the table's rows at those shapes, each fitted non-decreasing in m by the plain twin."""
    return {nk: by_m[m] for nk, by_m in rows_by_m(frame, dtype, shapes).items()}


def _attn_row(frame, ks, kv, b, x, col, heads=32, kv_heads=8):
    r = frame[(frame.kernel_source == ks) & (frame.kv_cache_dtype == kv) & (frame.batch_size == b) & (frame[col] == x)
              & (frame.num_heads == heads) & (frame.num_key_value_heads == kv_heads) & (frame.head_dim == 128)]
    if "window_size" in r:
        r = r[r.window_size == 0]
    assert len(r["latency"].unique()) == 1, r
    return float(r["latency"].iloc[0])


@pytest.mark.parametrize("m", [1, 8, 64])
def test_w4a16_on_a100_vllm_from_the_trtllm_weight_only_rows(m):
    model = _w4a16()
    vllm = ot.load_tables("a100_sxm", "vllm")
    mp = measured.build(vllm, model, 1)
    assert mp is not None
    assert "gemm int4_wo" in mp.label and "(from trtllm 1.0.0)" in mp.label and "lm_head bfloat16" in mp.label
    assert any("stands in" in n and "trtllm 1.0.0" in n for n in mp.notes)
    trt = ot.load_tables("a100_sxm", "trtllm").frames["gemm_perf"]
    assert not (vllm.frames["gemm_perf"].gemm_dtype == "int4_wo").any()  # why trtllm stands in
    w4 = _gemm_rows(trt, "int4_wo", m, W4A16_LAYER_SHAPES)
    layer_ms = w4[(5120, 4096)] + w4[(4096, 4096)] + w4[(16384, 4096)] + w4[(4096, 8192)]
    head_ms = _gemm_rows(vllm.frames["gemm_perf"], "bfloat16", m, [(65536, 4096)])[(65536, 4096)]
    assert float(mp.layers_time_s(m)) == pytest.approx(32 * layer_ms * 1e-3, rel=1e-9)
    assert float(mp.head_time_s(m)) == pytest.approx(head_ms * 1e-3, rel=1e-9)
    # the weight-only kernel is not the bf16 one: the W4A16 pass reads other rows than a bf16 pass
    bf = _gemm_rows(vllm.frames["gemm_perf"], "bfloat16", m, W4A16_LAYER_SHAPES)
    assert layer_ms != pytest.approx(bf[(5120, 4096)] + bf[(4096, 4096)] + bf[(16384, 4096)] + bf[(4096, 8192)], rel=1e-3)
    # one dense block on the pass's weight dtype (an EAGLE projection, a Medusa head)
    assert float(mp.gemm_time_s(4096, 4096, m)) == pytest.approx(w4[(4096, 4096)] * 1e-3, rel=1e-9)


def test_w4a16_attention_and_prefill_from_the_vllm_rows():
    """A verify of 8 tokens for one sequence after 1015 cached: batch 8 at kv 1023 (batch widening);
    two prompt chunks of 1024 tokens after 1024 cached: T(2, 2048) - T(2, 1024) against T(2, 1024)."""
    mp = measured.build(ot.load_tables("a100_sxm", "vllm"), _w4a16(), 1)
    tab = ot.load_tables("a100_sxm", "vllm").frames
    gen, ctx = tab["generation_attention_perf"], tab["context_attention_perf"]
    dec_ms = _attn_row(gen, "vllm_flash_attn", "bfloat16", 8, 1023, "step", kv_heads=4)
    assert float(mp.attention_time_s(8, 1023)) == pytest.approx(32 * dec_ms * 1e-3, rel=1e-9)
    t2048 = _attn_row(ctx, "vllm_flash_attn", "bfloat16", 2, 2048, "isl", kv_heads=4)
    t1024 = _attn_row(ctx, "vllm_flash_attn", "bfloat16", 2, 1024, "isl", kv_heads=4)
    chunk_ms = max(t2048 - t1024, t1024)
    assert float(mp.context_attention_time_s(2, 1024, 1024)) == pytest.approx(32 * chunk_ms * 1e-3, rel=1e-9)
    assert float(mp.context_attention_time_s(2, 1024, 0)) == pytest.approx(32 * t1024 * 1e-3, rel=1e-9)
    assert float(mp.context_attention_time_s(0, 1024, 0)) == 0.0


def test_fp8_kv_cache_on_h100_sglang_from_the_fp8_rows():
    """Llama-3.1-8B with an fp8 KV cache: the fa3 rows whose kv_cache_dtype is fp8, decode and prefill;
    the same model with a bf16 cache reads other rows. kv_cache_dtype= on build is the same choice."""
    base = load_model("llama-3.1-8b")
    model = dataclasses.replace(base, kv_cache_dtype="fp8")
    tables = ot.load_tables("h100_sxm", "sglang", "0.5.14")
    mp = measured.build(tables, model, 1)
    assert mp is not None and "kv fp8" in mp.label
    gen, ctx = tables.frames["generation_attention_perf"], tables.frames["context_attention_perf"]
    for b, step in ((1, 1023), (16, 4095)):
        fp8_ms = _attn_row(gen, "fa3", "fp8", b, step, "step")
        assert float(mp.attention_time_s(b, step)) == pytest.approx(32 * fp8_ms * 1e-3, rel=1e-9)
    c4096 = _attn_row(ctx, "fa3", "fp8", 4, 4096, "isl")
    c2048 = _attn_row(ctx, "fa3", "fp8", 4, 2048, "isl")
    assert float(mp.context_attention_time_s(4, 2048, 2048)) == pytest.approx(32 * max(c4096 - c2048, c2048) * 1e-3,
                                                                              rel=1e-9)
    bf = measured.build(tables, base, 1)
    bf_ms = _attn_row(gen, "fa3", "bfloat16", 16, 4095, "step")
    assert float(bf.attention_time_s(16, 4095)) == pytest.approx(32 * bf_ms * 1e-3, rel=1e-9)
    assert bf_ms != pytest.approx(_attn_row(gen, "fa3", "fp8", 16, 4095, "step"), rel=1e-3)
    over = measured.build(tables, base, 1, kv_cache_dtype="fp8")
    assert float(over.attention_time_s(16, 4095)) == float(mp.attention_time_s(16, 4095))


def test_fp8_kv_cache_on_a100_is_not_covered_and_says_why():
    model = dataclasses.replace(load_model("llama-3.1-8b"), kv_cache_dtype="fp8")
    tables = ot.load_tables("a100_sxm", "vllm")
    assert measured.build(tables, model, 1) is None
    why = measured.covered(model, tables)
    assert "fp8 KV cache" in why and "a100_sxm vllm 0.14.0" in why and "bfloat16 only" in why


@pytest.mark.parametrize("fmt,system,framework,expect", [
    ("fp8", "h100_sxm", "vllm", "gemm fp8 CutlassFP8ScaledMMLinearKernel"),
    ("fp8-block", "h100_sxm", "vllm", "gemm fp8_block"),
    ("nvfp4", "b200_sxm", "sglang", "gemm nvfp4"),
    ("int8-wo", "h100_sxm", "sglang", "gemm int8_wo sglang (from sglang 0.5.6.post2)"),
    ("int8", "a100_sxm", "trtllm", "gemm sq"),
])
def test_each_collected_format_reaches_its_rows(fmt, system, framework, expect):
    """Which collection holds which gemm_dtype (read from the files with pandas in this test): the
    pass names the kernel it read, and a stand-in where the stack's own collection lacks the dtype."""
    model = load_model("llama-3.1-8b").with_weight_format(fmt)
    mp = measured.build(ot.load_tables(system, framework), model, 1)
    assert mp is not None and expect in mp.label, mp and mp.label


@pytest.mark.parametrize("fmt,system,framework", [("int4-awq", "h100_sxm", "vllm"), ("nvfp4", "h100_sxm", "sglang"),
                                                  ("gguf-q4_0", "h100_sxm", "sglang"), ("fp4", "b200_sxm", "vllm")])
def test_a_format_no_collection_holds_is_not_covered(fmt, system, framework):
    model = load_model("llama-3.1-8b").with_weight_format(fmt)
    tables = ot.load_tables(system, framework)
    assert measured.build(tables, model, 1) is None
    why = measured.covered(model, tables)
    assert fmt in why or measured.FORMAT_GEMM_DTYPES.get(fmt, "?") in why, why
    # the survey says no framework on the part has it: check that from the files, not from specsim
    dtype = measured.FORMAT_GEMM_DTYPES.get(fmt)
    if dtype is not None:
        import pandas as pd
        files = list((ROOT / system / "gemm").glob("*/*/gemm_perf.parquet"))
        assert files and not any((pd.read_parquet(f, columns=["gemm_dtype"]).gemm_dtype == dtype).any() for f in files)


def test_build_is_cached_and_vectorised():
    """Built once per (tables, model, tp, KV dtype); an array evaluation equals the scalar ones."""
    tables = ot.load_tables("h100_sxm", "sglang")
    model = load_model("llama-3.1-8b")
    assert measured.build(tables, model, 1) is measured.build(tables, model, 1)
    mp = measured.build(tables, model, 1)
    b = np.array([1.0, 3.0, 77.0, 5000.0])
    s = np.array([1.0, 700.0, 20000.0, 200000.0])
    for f, args in ((mp.attention_time_s, (b, s)), (mp.context_attention_time_s, (b, s, b)),
                    (mp.layers_time_s, (s,)), (mp.head_time_s, (b,))):
        vec = f(*args)
        assert vec.shape == b.shape
        assert vec.tolist() == [float(f(*(a[i] for a in args))) for i in range(b.size)]


def _moe_rows(frame, dist, hidden, ffn, topk, experts, tp):
    """{tokens: ms} of the fused Triton kernel's rows at one expert shape and routing, bf16, ep 1."""
    r = frame[(frame.moe_dtype == "bfloat16") & (frame.hidden_size == hidden) & (frame.inter_size == ffn)
              & (frame.topk == topk) & (frame.num_experts == experts) & (frame.moe_tp_size == tp)
              & (frame.moe_ep_size == 1) & (frame.distribution == dist)
              & (frame.kernel_source == "sglang_fused_moe_triton")]
    assert not r.duplicated("num_tokens").any()
    r = r.sort_values("num_tokens")  # fitted non-decreasing in the tokens, as the source reads them
    return dict(zip(r.num_tokens.tolist(), pool_adjacent_violators(r.latency.to_numpy())))


def test_mixtral_moe_layers_from_the_moe_rows():
    """Mixtral-8x7B on H100 SGLang, tp 1, m = 16 tokens (a grid point of both the GEMM and the MoE
    tables): 32 layers × (qkv (6144, 4096) + o (4096, 4096) + router (8 → the smallest measured n, 32,
    4096) + the fused MoE layer: hidden 4096, expert ffn 14336, top-2 of 8, tp 1, ep 1, the fused Triton
    kernel's balanced rows at the experts uniform routing touches). By hand: 16 tokens touch
    8·(1 − (6/8)^16) experts; a balanced row of 2 tokens reads 4 experts and one of 4 tokens all 8, so the
    kernel's time at that count lies between them; 16 tokens are past the 4 at which balanced routing reads
    every expert, so the 16-token row is scaled by that time over the 4-token row's."""
    model = load_model("mixtral-8x7b")
    tables = ot.load_tables("h100_sxm", "sglang")
    mp = measured.build(tables, model, 1)
    assert mp is not None and "moe bfloat16 sglang_fused_moe_triton balanced at uniform-routing experts" in mp.label
    assert any("router" in n and "below the measured" in n for n in mp.notes)
    g = _gemm_rows(tables.frames["gemm_perf"], "bfloat16", 16, [(6144, 4096), (4096, 4096), (32, 4096)])
    bal = _moe_rows(tables.frames["moe_perf"], "balanced", 4096, 14336, 2, 8, 1)
    touched = 8 * (1 - (6 / 8) ** 16)
    at_touched = bal[2] + (touched - 4) / (8 - 4) * (bal[4] - bal[2])
    layer_ms = g[(6144, 4096)] + g[(4096, 4096)] + g[(32, 4096)] + bal[16] * at_touched / bal[4]
    assert float(mp.layers_time_s(16)) == pytest.approx(32 * layer_ms * 1e-3, rel=1e-9)


def test_moe_layers_read_balanced_rows_at_the_uniform_routing_expert_count():
    """Qwen3-30B-A3B on H100 SGLang, tp 2 (top-8 of 128 experts). Balanced rows of 1, 2, 4, 8 and 16 tokens
    read 8, 16, 32, 64 and 128 experts. By hand, the routed-expert time of one layer:
    - 4 tokens touch 128·(1 − (120/128)^4) = 29.1 experts under uniform routing: between the 2- and 4-token
      rows, 13.1/16 of the way;
    - 64 tokens touch 128·(1 − (120/128)^64) = 125.9: the 64-token row times the time at 125.9 experts (between
      the 8- and 16-token rows) over the time at 128 (the 16-token row);
    - half a token (a share of a pass) reads no fewer than one token's 8 experts: the 1-token row."""
    model = load_model("qwen3-30b-a3b")
    tables = ot.load_tables("h100_sxm", "sglang")
    bal = _moe_rows(tables.frames["moe_perf"], "balanced", 2048, 768, 8, 128, 2)
    notes = []
    (curve, reach), why = measured._moe(tables, model, 2, "bfloat16", np.array([0.5, 4.0, 64.0]), [], notes)
    assert why == "" and notes == [] and reach == max(bal)
    t4 = 128 * (1 - (120 / 128) ** 4)
    t64 = 128 * (1 - (120 / 128) ** 64)
    want = [bal[1],
            bal[2] + (t4 - 16) / 16 * (bal[4] - bal[2]),
            bal[64] * (bal[8] + (t64 - 64) / 64 * (bal[16] - bal[8])) / bal[16]]
    assert (curve * 1e3).tolist() == pytest.approx(want, rel=1e-9)
    assert 29.0 < t4 < 29.2 and 125.8 < t64 < 126.0


def test_every_source_reads_a_moe_layer_at_one_expert_count():
    """The roofline's and the kernel curves' MoE bytes and the tables' reading share MoESpec.experts_touched;
    checked here against a Monte Carlo of independent uniform top-k draws (8 of 128, at 4 and 64 tokens)."""
    moe = load_model("qwen3-30b-a3b").moe
    rng = np.random.default_rng(7)
    for tokens in (4, 64):
        picks = np.argsort(rng.random((2000, tokens, 128)), axis=-1)[..., :8].reshape(2000, -1)
        distinct = [np.unique(row).size for row in picks]
        assert float(moe.experts_touched(tokens)) == pytest.approx(np.mean(distinct), rel=0.01)


def test_an_moe_shape_the_tables_lack_says_which():
    model = load_model("llama-4-scout")
    tables = ot.load_tables("a100_sxm", "vllm")
    why = measured.covered(model, tables)
    assert "moe_perf (a100_sxm vllm 0.14.0) has no row for hidden 5120, expert ffn 8192, top-1 of 16" in why
    qwen = load_model("qwen3-30b-a3b")
    assert "no tp 8 (ep 1) rows" in measured.covered(qwen, tables, tp=8)


@pytest.mark.parametrize("system,kernel,noted", [("h100_sxm", "fa3", False), ("rtx_pro_6000_server", "flashinfer", False),
                                                 ("b200_sxm", "trtllm_mha", True)])
def test_attention_kernel_is_the_frameworks_default_where_collected(system, kernel, noted):
    """SGLang 0.5.14's default attention backend by SM (AIC's attention_lane_defaults.yaml: 90 fa3,
    100 triton, 120 flashinfer). B200 collected only trtllm_mha at 32/8/128 (checked in the file here):
    it stands in for triton, and the pass says so."""
    tables = ot.load_tables(system, "sglang")
    mp = measured.build(tables, load_model("llama-3.1-8b"), 1)
    assert f"generation_attention {kernel}" in mp.label and f"context_attention {kernel}" in mp.label
    assert any("default triton kernel" in n and "stands in" in n for n in mp.notes) == noted
    if noted:
        a = tables.frames["generation_attention_perf"]
        shape = a[(a.num_heads == 32) & (a.num_key_value_heads == 8) & (a.head_dim == 128) & (a.window_size == 0)]
        assert set(shape.kernel_source) == {"trtllm_mha"}


def test_sliding_window_reads_the_last_window_tokens():
    """Mistral-7B (window 4096) on H100 SGLang: a decode at kv 100,000 reads 4096 cached tokens, so it
    costs the full-attention row at step 4095 (the grid point just below; 4096 is interpolated between
    4095 and 8191 by hand); a chunk after a 50,000-token prefix sees a 4096-token prefix."""
    model = load_model("mistral-7b")
    tables = ot.load_tables("h100_sxm", "sglang")
    mp = measured.build(tables, model, 1)
    assert mp is not None and any("sliding window 4096" in n for n in mp.notes)
    gen = tables.frames["generation_attention_perf"]
    r4095 = _attn_row(gen, "fa3", "bfloat16", 1, 4095, "step")
    r8191 = _attn_row(gen, "fa3", "bfloat16", 1, 8191, "step")
    by_hand = r4095 + (4096 - 4095) / (8191 - 4095) * (r8191 - r4095)
    assert float(mp.attention_time_s(1, 100_000)) == pytest.approx(32 * by_hand * 1e-3, rel=1e-9)
    assert float(mp.attention_time_s(1, 4096)) == float(mp.attention_time_s(1, 100_000))
    assert float(mp.context_attention_time_s(1, 512, 50_000)) == float(mp.context_attention_time_s(1, 512, 4096))
    assert mp.range_notes(n_tokens=1, n_queries=1, kv_len=1_000_000) == ()  # 4096 read: inside the grid


def test_moe_routing_falls_back_in_order_and_says_so():
    """Qwen3-30B-A3B on H100 SGLang, tp 2: balanced rows read at the uniform-routing expert count by
    default; with them taken out of the table, AIConfigurator's power_law_1.01 rows stand in read by token
    count, then power_law_1.2, and the pass notes which (each at 64 tokens, against the table's own rows)."""
    model = load_model("qwen3-30b-a3b")
    tables = ot.load_tables("h100_sxm", "sglang")
    moe = tables.frames["moe_perf"]
    base = measured.build(tables, model, 2)
    assert "balanced at uniform-routing experts" in base.label and not any("routing read" in n for n in base.notes)
    for dropped, used in ((("balanced",), "power_law_1.01"), (("balanced", "power_law_1.01"), "power_law_1.2")):
        t = dataclasses.replace(tables, frames={**tables.frames, "moe_perf": moe[~moe.distribution.isin(dropped)]})
        mp = measured.build(t, model, 2)
        assert f"moe bfloat16 sglang_fused_moe_triton {used}" in mp.label
        assert any("no balanced rows" in n and f"{used} routing read by token count" in n for n in mp.notes)
        assert 64 in _moe_rows(moe, used, 2048, 768, 8, 128, 2)
        with_row = mp.layers_time_s(64)
        t2 = dataclasses.replace(t, frames={**t.frames, "moe_perf": t.frames["moe_perf"].assign(
            latency_s=lambda f: f.latency_s.where(f.distribution != used, f.latency_s + 1e-3))})
        # one millisecond more on every row of that routing (a shift the non-decreasing fit keeps) moves each
        # of the model's MoE layers by exactly that much at 64 tokens
        moved = measured.build(t2, model, 2).layers_time_s(64) - with_row
        assert float(moved) == pytest.approx(model.n_layers * 1e-3, rel=1e-6)


def test_balanced_rows_that_all_read_every_expert_fall_back_and_say_why():
    """Balanced rows from 16 tokens up only (each reads all 128 experts of Qwen3-30B-A3B) give no time
    against the experts read: the power-law rows stand in by token count, and the note says why."""
    model = load_model("qwen3-30b-a3b")
    tables = ot.load_tables("h100_sxm", "sglang")
    moe = tables.frames["moe_perf"]
    kept = moe[~((moe.distribution == "balanced") & (moe.num_tokens < 16))]
    mp = measured.build(dataclasses.replace(tables, frames={**tables.frames, "moe_perf": kept}), model, 2)
    assert "moe bfloat16 sglang_fused_moe_triton power_law_1.01" in mp.label
    assert any("balanced rows only at token counts that read every expert" in n for n in mp.notes)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=1e-6, max_value=1e-1, allow_nan=False), min_size=1, max_size=40))
def test_the_nondecreasing_fit_matches_its_plain_twin(latencies):
    """measured.nondecreasing (scipy's isotonic regression) against pooling adjacent violators written out:
    the same fit, non-decreasing, with the measured total kept (each pooled block keeps its sum)."""
    fit = measured.nondecreasing(np.asarray(latencies))
    assert fit.tolist() == pytest.approx(pool_adjacent_violators(latencies), rel=1e-9, abs=1e-15)
    assert np.all(np.diff(fit) >= -1e-15)
    assert fit.sum() == pytest.approx(sum(latencies), rel=1e-9)


@pytest.mark.parametrize("system,framework,model_id,tp", [
    ("h100_sxm", "vllm", "qwen3-8b", 1), ("h100_sxm", "sglang", "llama-3.1-8b", 1),
    ("h100_sxm", "sglang", "qwen3-30b-a3b", 2), ("a100_sxm", "vllm", "llama-3.1-8b", 1)])
def test_a_measured_pass_never_gets_cheaper_with_more_tokens(system, framework, model_id, tp):
    """The invariant the fit buys: the layers' and the LM head's time over 1..4096 tokens never falls (read
    raw, Qwen3-8B's layers on H100 vLLM cost 5.79 ms at 32 tokens and 5.26 ms at 48)."""
    mp = measured.build(ot.load_tables(system, framework), load_model(model_id), tp)
    assert mp is not None
    tokens = np.arange(1, 4097, dtype=np.float64)
    for curve in (mp.layers_time_s(tokens), mp.head_time_s(tokens)):
        assert np.all(np.diff(curve) >= -1e-12 * curve[1:])
