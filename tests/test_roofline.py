"""Roofline cost model: hand-derived byte and FLOP counts, limits, a Monte Carlo check of the MoE
expert count, and monotonicity properties."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.errors import SpecError
from specsim.specs.hardware import hardware_from_dict, load_hardware
from specsim.specs.models import load_model, model_from_dict
from specsim.cost.roofline import kv_bytes_per_device, mixed_step_cost, step_cost

HBM = load_hardware("seed-hbm-2tbs")  # 2.0e12 B/s, 312e12 FLOP/s fp16, efficiencies 1, no overhead
SEED_70B = load_model("seed-70b")

# seed-70b by hand: per layer q and o 8192², k and v 8192·1024, FFN 3·8192·29184
LAYER_LINEAR_PARAMS = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 29184  # 868,220,928
KV_BYTES_PER_TOKEN = 80 * 2 * 8 * 128 * 2  # layers × (K and V) × kv heads × head dim × fp16


def _tiny(**over):
    raw = {"id": "tiny", "name": "tiny", "tokenizer": "t", "n_layers": 4, "hidden_size": 256, "n_heads": 8,
           "n_kv_heads": 2, "ffn_size": 512, "vocab_size": 1000, "sources": {"shape": "test"}}
    raw.update(over)
    return model_from_dict(raw)


def test_weight_bytes_at_batch_one_are_the_linear_weights():
    c = step_cost(SEED_70B, HBM, batch_size=1, q_len=1, context_len=0)
    assert float(c.weights.bytes) == 80 * LAYER_LINEAR_PARAMS * 2
    assert float(c.weights.flops) == 2 * 80 * LAYER_LINEAR_PARAMS
    # bandwidth bound: bytes / 2.0e12
    assert float(c.weights.time_s) == pytest.approx(80 * LAYER_LINEAR_PARAMS * 2 / 2.0e12, rel=1e-12)


def test_lm_head_streams_the_vocabulary_projection_and_writes_fp32_logits():
    c = step_cost(SEED_70B, HBM, batch_size=2, q_len=3, context_len=0)
    assert float(c.lm_head.bytes) == 32000 * 8192 * 2 + 6 * 32000 * 4
    assert float(c.lm_head.flops) == 2 * 6 * 32000 * 8192


def test_fused_attention_reads_each_cache_once_per_step():
    c = step_cost(SEED_70B, HBM, batch_size=3, q_len=1, context_len=256)
    assert float(c.attention.bytes) == 3 * 257 * KV_BYTES_PER_TOKEN
    assert float(c.kv_write.bytes) == 3 * 1 * KV_BYTES_PER_TOKEN


def test_naive_attention_rereads_the_cache_per_query_token():
    L, M = 131072, 8
    fused = step_cost(SEED_70B, HBM, q_len=M, context_len=L, attention="fused")
    naive = step_cost(SEED_70B, HBM, q_len=M, context_len=L, attention="naive")
    # causal block: M·L + M(M+1)/2 query-key pairs against L + M cached rows read once
    assert float(naive.attention.bytes / fused.attention.bytes) == pytest.approx((M * L + 36) / (L + M), rel=1e-12)
    assert float(naive.time_s) > float(fused.time_s)


def test_attention_flops_per_pair_by_hand():
    c = step_cost(SEED_70B, HBM, batch_size=1, q_len=1, context_len=99)
    # 100 pairs × 80 layers × 4 × 64 heads × 128
    assert float(c.attention.flops) == 100 * 80 * 4 * 64 * 128


def test_compute_bound_at_large_batch():
    c = step_cost(SEED_70B, HBM, batch_size=4096, q_len=1, context_len=0)
    flops = 2 * 80 * LAYER_LINEAR_PARAMS * 4096
    assert float(c.weights.time_s) == pytest.approx(flops / 312e12, rel=1e-12)


def test_verify_stays_on_the_bandwidth_plateau_until_tokens_pass_the_ridge():
    # ridge of the idealised part: 312e12 / 2e12 = 156 FLOP/byte; fp16 weights give 1 FLOP/byte per token
    plain = float(step_cost(SEED_70B, HBM, q_len=1, context_len=0).weights.time_s)
    below = float(step_cost(SEED_70B, HBM, q_len=64, context_len=0).weights.time_s)
    above = float(step_cost(SEED_70B, HBM, q_len=312, context_len=0).weights.time_s)
    assert below == pytest.approx(plain, rel=1e-12)
    assert above == pytest.approx(2 * plain, rel=1e-12)  # 312 tokens = twice the ridge


def test_moe_expected_experts_matches_monte_carlo():
    moe = _tiny(moe={"n_experts": 8, "n_experts_per_token": 2, "expert_ffn_size": 128})
    rng = np.random.default_rng(0)
    expert = 3 * 256 * 128
    attn = 256 * 256 * 2 + 2 * 256 * 64
    for tokens in (1, 3, 10):
        distinct = [len(set(np.concatenate([rng.choice(8, 2, replace=False) for _ in range(tokens)])))
                    for _ in range(4000)]
        mc = np.mean(distinct)
        se = np.std(distinct) / np.sqrt(len(distinct))
        c = step_cost(moe, HBM, batch_size=tokens, q_len=1, context_len=0)
        touched = (float(c.weights.bytes) / 2 / 4 - attn - 256 * 8) / expert
        assert abs(touched - mc) < 5 * se + 1e-9, (tokens, touched, mc)


def test_tensor_parallel_splits_weights_and_adds_allreduce():
    hw = hardware_from_dict({
        "id": "t", "name": "t", "kind": "gpu", "memory_gb": 80, "mem_bandwidth_gb_s": 1000, "interconnect_gb_s": 100,
        "interconnect_latency_us": 5, "peak_tflops": {"bf16": 100}, "sources": {
            "memory_gb": "test", "mem_bandwidth_gb_s": "test", "interconnect_gb_s": "test",
            "interconnect_latency_us": "test", "peak_tflops": "test"}})
    m = _tiny()
    one = step_cost(m, hw, batch_size=4, q_len=2, context_len=10, tp=1)
    two = step_cost(m, hw, batch_size=4, q_len=2, context_len=10, tp=2)
    assert float(two.weights.bytes) == float(one.weights.bytes) / 2
    assert float(one.communication_s) == 0.0
    # 4 layers × 2 all-reduces (after attention, after the FFN) × (5 µs + 2·(1/2)·8 tokens·256·2 B / 100 GB/s)
    assert float(two.communication_s) == pytest.approx(4 * 2 * (5e-6 + 8 * 256 * 2 / 100e9), rel=1e-12)


def test_tensor_parallel_needs_an_interconnect():
    with pytest.raises(SpecError, match="interconnect_gb_s"):
        step_cost(load_model("seed-7b-q4"), load_hardware("seed-ddr5-90gbs"), tp=2)


def test_sliding_window_caps_attention():
    m = _tiny(sliding_window=64)
    a = step_cost(m, HBM, context_len=64)
    b = step_cost(m, HBM, context_len=10_000)
    assert float(a.attention.bytes) == float(b.attention.bytes)
    assert float(kv_bytes_per_device(m, batch_size=1, context_len=10_000)) == 64 * m.kv_bytes_per_token


def test_mla_cache_holds_the_latent_only():
    m = _tiny(n_heads=8, n_kv_heads=8, mla={"q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
                                            "qk_rope_head_dim": 8, "v_head_dim": 16})
    c = step_cost(m, HBM, context_len=99, tp=1)
    assert float(c.attention.bytes) == 100 * 4 * (32 + 8) * 2  # tokens × layers × latent × bf16


def test_mixed_batch_equals_uniform_batch():
    # a second path through the accounting: per-sequence arrays summed vs closed-form B·(...)
    u = step_cost(SEED_70B, HBM, batch_size=5, q_len=4, context_len=300)
    m = mixed_step_cost(SEED_70B, HBM, q_lens=np.full(5, 4), context_lens=np.full(5, 300))
    assert float(m.time_s) == pytest.approx(float(u.time_s), rel=1e-12)


def test_order_of_magnitude_cpu_step():
    # a ~4 GB model on a ~90 GB/s desktop: tens of milliseconds, not micro- or whole seconds
    t = float(step_cost(load_model("seed-7b-q4"), load_hardware("seed-ddr5-90gbs")).time_s)
    assert 0.02 < t < 0.1


@pytest.mark.parametrize("field,value", [("batch_size", 0), ("q_len", 0), ("context_len", -1), ("batch_size", 2.5)])
def test_bad_shapes_are_refused(field, value):
    with pytest.raises(SpecError, match=field):
        step_cost(SEED_70B, HBM, **{field: value})


def test_unknown_attention_kernel_is_refused():
    with pytest.raises(SpecError, match="attention"):
        step_cost(SEED_70B, HBM, attention="flash")


def test_vectorised_over_a_grid():
    b = np.array([1, 8, 64])[:, None, None]
    m = np.array([1, 4, 16])[None, :, None]
    l = np.array([0, 4096])[None, None, :]
    c = step_cost(SEED_70B, HBM, batch_size=b, q_len=m, context_len=l)
    assert c.time_s.shape == (3, 3, 2)
    assert float(c.time_s[1, 2, 1]) == float(step_cost(SEED_70B, HBM, batch_size=8, q_len=16, context_len=4096).time_s)


MODELS = [SEED_70B, _tiny(), _tiny(moe={"n_experts": 8, "n_experts_per_token": 2, "expert_ffn_size": 128}),
          _tiny(n_kv_heads=8, mla={"q_lora_rank": 0, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
                                   "v_head_dim": 16})]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(range(len(MODELS))), st.integers(1, 512), st.integers(1, 64), st.integers(0, 200_000),
       st.sampled_from(["fused", "naive"]), st.sampled_from(["batch_size", "q_len", "context_len"]), st.integers(1, 1000))
def test_step_time_never_decreases_with_b_m_or_l(mi, b, m, l, kernel, axis, step):
    args = {"batch_size": b, "q_len": m, "context_len": l}
    base = float(step_cost(MODELS[mi], HBM, attention=kernel, **args).time_s)
    args[axis] += step
    assert float(step_cost(MODELS[mi], HBM, attention=kernel, **args).time_s) >= base


# ---- parts with a measured kernel curve (h100-sxm and the parts it transfers to) --------------------
from dataclasses import replace  # noqa: E402

from specsim.cost.roofline import attention_time_s, logits_time_s, overhead_time_s, token_time_s  # noqa: E402

H100 = load_hardware("h100-sxm")
LLAMA_70B = load_model("llama-2-70b")


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(range(len(MODELS))), st.integers(1, 512), st.integers(1, 64), st.integers(0, 200_000),
       st.sampled_from(["batch_size", "q_len", "context_len"]), st.integers(1, 1000), st.sampled_from([1, 2]))
def test_step_time_never_decreases_on_a_measured_curve(mi, b, m, l, axis, step, tp):
    args = {"batch_size": b, "q_len": m, "context_len": l}
    base = float(step_cost(MODELS[mi], H100, tp=tp, **args).time_s)
    args[axis] += step
    assert float(step_cost(MODELS[mi], H100, tp=tp, **args).time_s) >= base


@pytest.mark.parametrize("hw_id", ["h100-sxm", "seed-hbm-2tbs", "a100-pcie-40gb"])
def test_step_splits_into_token_logit_attention_and_fixed_parts(hw_id):
    # second path: the tabulation functions summed must equal mixed_step_cost for random mixes
    hw, model = load_hardware(hw_id), load_model("llama-3.1-8b")
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = int(rng.integers(1, 40))
        q, l = rng.integers(1, 300, n), rng.integers(0, 5000, n)
        g = np.minimum(q, rng.integers(0, 3, n))
        for kernel in ("fused", "naive"):
            exact = float(mixed_step_cost(model, hw, q_lens=q, context_lens=l, logit_lens=g, tp=2, attention=kernel).time_s)
            pairs = float(np.sum(q * l + q * (q + 1) / 2))
            kv = float(np.sum(l + q)) if kernel == "fused" else pairs
            parts = (token_time_s(model, hw, q.sum(), tp=2) + logits_time_s(model, hw, g.sum(), tp=2)
                     + attention_time_s(model, hw, kv_read_tokens=kv, attn_pairs=pairs, tp=2) + overhead_time_s(model, hw))
            assert float(parts) == pytest.approx(exact, rel=1e-12)


def test_token_time_tabulates_over_a_range():
    table = token_time_s(LLAMA_70B, H100, np.arange(0, 4097), tp=4)
    assert table.shape == (4097,) and np.all(np.diff(table) >= 0)
    assert table[128] == pytest.approx(float(token_time_s(LLAMA_70B, H100, 128, tp=4)), rel=1e-15)


def test_measured_all_reduce_replaces_the_guess():
    # h100-sxm.toml [all_reduce], group of 8: 29.8 µs and 349.7 GB/s (fitted to Vidur's DGX H100 file);
    # Llama-2-70B: 80 layers × 2 all-reduces of T · 8192 · 2 bytes
    c = step_cost(LLAMA_70B, H100, batch_size=16, tp=8)
    expected = 80 * 2 * (29.8e-6 + 2 * 7 / 8 * 16 * 8192 * 2 / 349.7e9)
    assert float(c.communication_s) == pytest.approx(expected, rel=1e-12)
    # a group size the table does not measure falls back to the catalog's link figures (10 µs, 450 GB/s)
    c16 = step_cost(load_model("llama-3.1-405b"), H100, batch_size=16, tp=16)
    m = load_model("llama-3.1-405b")
    assert float(c16.communication_s) == pytest.approx(m.n_layers * 2 * (10e-6 + 2 * 15 / 16 * 16 * m.hidden_size * 2 / 450e9),
                                                      rel=1e-12)


def test_a_stack_efficiency_leaves_the_measured_curve_alone_and_prices_attention():
    # a stack's fractions are roofline judgements the measured kernel times replace: halving them
    # leaves the weights, LM head and activations as measured and doubles attention and the KV write
    half = replace(H100.efficiency, bandwidth_frac=H100.efficiency.bandwidth_frac / 2,
                   compute_frac=H100.efficiency.compute_frac / 2)
    own = step_cost(LLAMA_70B, H100, batch_size=4, context_len=2000)
    slow = step_cost(LLAMA_70B, H100, batch_size=4, context_len=2000, efficiency=half)
    for c in ("weights", "lm_head", "activations"):
        assert float(getattr(slow, c).time_s) == float(getattr(own, c).time_s), c
    for c in ("attention", "kv_write"):
        assert float(getattr(slow, c).time_s) == pytest.approx(2 * float(getattr(own, c).time_s), rel=1e-12), c
    # on a part without a curve the same halving doubles the (bandwidth-bound) weights time
    l4 = load_hardware("l4")
    half_l4 = replace(l4.efficiency, bandwidth_frac=l4.efficiency.bandwidth_frac / 2)
    assert float(step_cost(LLAMA_70B.with_weight_format("int4-awq"), l4, efficiency=half_l4).weights.time_s) == pytest.approx(
        2 * float(step_cost(LLAMA_70B.with_weight_format("int4-awq"), l4).weights.time_s), rel=1e-12)


def test_parts_without_a_fitted_curve_stay_on_the_pure_roofline():
    from specsim.specs.hardware import list_hardware

    fitted = {"h100-sxm", "a100-sxm-80gb"}
    transferred = {"h100-pcie", "h200-sxm", "a100-sxm-40gb", "a100-pcie-40gb"}
    for hw in list_hardware():
        if "specsim calibrate machine" in hw.sources.get("kernels", ""):
            # this machine as `specsim calibrate machine` measured it: its curve is its own measurement
            assert hw.kernels is not None and not hw.kernels.transferred_from and hw.kind == "cpu"
        elif hw.id in fitted:
            assert hw.kernels is not None and not hw.kernels.transferred_from
        elif hw.id in transferred:
            assert hw.kernels is not None and hw.kernels.transferred_from in fitted
        else:
            assert hw.kernels is None and hw.all_reduce is None, hw.id
    # and on such a part the weights are max(bytes / bw, FLOPs / peak) exactly (seed-70b on the seed part)
    c = step_cost(SEED_70B, HBM, batch_size=1)
    assert float(c.weights.time_s) == 80 * LAYER_LINEAR_PARAMS * 2 / 2.0e12


def test_h100_decode_step_order_of_magnitude():
    # Llama-2-70B at tp 8, batch 1: at least the weights (138 GB / 8 / 3.35 TB/s = 5.1 ms), well under
    # Splitwise's measured 29.8 ms whole step (host and fixed costs are not in the device model)
    c = step_cost(LLAMA_70B, H100, batch_size=1, context_len=512, tp=8)
    assert 5.1e-3 < float(c.time_s - c.overhead_s) < 29.8e-3
