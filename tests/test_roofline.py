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
    c = step_cost(SEED_70B, HBM, batch_size=1, q_len=1, ctx_len=0)
    assert float(c.weights.bytes) == 80 * LAYER_LINEAR_PARAMS * 2
    assert float(c.weights.flops) == 2 * 80 * LAYER_LINEAR_PARAMS
    # bandwidth bound: bytes / 2.0e12
    assert float(c.weights.time_s) == pytest.approx(80 * LAYER_LINEAR_PARAMS * 2 / 2.0e12, rel=1e-12)


def test_lm_head_streams_the_vocabulary_projection_and_writes_fp32_logits():
    c = step_cost(SEED_70B, HBM, batch_size=2, q_len=3, ctx_len=0)
    assert float(c.lm_head.bytes) == 32000 * 8192 * 2 + 6 * 32000 * 4
    assert float(c.lm_head.flops) == 2 * 6 * 32000 * 8192


def test_fused_attention_reads_each_cache_once_per_step():
    c = step_cost(SEED_70B, HBM, batch_size=3, q_len=1, ctx_len=256)
    assert float(c.attention.bytes) == 3 * 257 * KV_BYTES_PER_TOKEN
    assert float(c.kv_write.bytes) == 3 * 1 * KV_BYTES_PER_TOKEN


def test_naive_attention_rereads_the_cache_per_query_token():
    L, M = 131072, 8
    fused = step_cost(SEED_70B, HBM, q_len=M, ctx_len=L, attention="fused")
    naive = step_cost(SEED_70B, HBM, q_len=M, ctx_len=L, attention="naive")
    # causal block: M·L + M(M+1)/2 query-key pairs against L + M cached rows read once
    assert float(naive.attention.bytes / fused.attention.bytes) == pytest.approx((M * L + 36) / (L + M), rel=1e-12)
    assert float(naive.time_s) > float(fused.time_s)


def test_attention_flops_per_pair_by_hand():
    c = step_cost(SEED_70B, HBM, batch_size=1, q_len=1, ctx_len=99)
    # 100 pairs × 80 layers × 4 × 64 heads × 128
    assert float(c.attention.flops) == 100 * 80 * 4 * 64 * 128


def test_compute_bound_at_large_batch():
    c = step_cost(SEED_70B, HBM, batch_size=4096, q_len=1, ctx_len=0)
    flops = 2 * 80 * LAYER_LINEAR_PARAMS * 4096
    assert float(c.weights.time_s) == pytest.approx(flops / 312e12, rel=1e-12)


def test_verify_stays_on_the_bandwidth_plateau_until_tokens_pass_the_ridge():
    # ridge of the idealised part: 312e12 / 2e12 = 156 FLOP/byte; fp16 weights give 1 FLOP/byte per token
    plain = float(step_cost(SEED_70B, HBM, q_len=1, ctx_len=0).weights.time_s)
    below = float(step_cost(SEED_70B, HBM, q_len=64, ctx_len=0).weights.time_s)
    above = float(step_cost(SEED_70B, HBM, q_len=312, ctx_len=0).weights.time_s)
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
        c = step_cost(moe, HBM, batch_size=tokens, q_len=1, ctx_len=0)
        touched = (float(c.weights.bytes) / 2 / 4 - attn - 256 * 8) / expert
        assert abs(touched - mc) < 5 * se + 1e-9, (tokens, touched, mc)


def test_tensor_parallel_splits_weights_and_adds_allreduce():
    hw = hardware_from_dict({
        "id": "t", "name": "t", "kind": "gpu", "memory_gb": 80, "mem_bandwidth_gb_s": 1000, "interconnect_gb_s": 100,
        "interconnect_latency_us": 5, "peak_tflops": {"bf16": 100}, "sources": {
            "memory_gb": "test", "mem_bandwidth_gb_s": "test", "interconnect_gb_s": "test",
            "interconnect_latency_us": "test", "peak_tflops": "test"}})
    m = _tiny()
    one = step_cost(m, hw, batch_size=4, q_len=2, ctx_len=10, tp=1)
    two = step_cost(m, hw, batch_size=4, q_len=2, ctx_len=10, tp=2)
    assert float(two.weights.bytes) == float(one.weights.bytes) / 2
    assert float(one.communication_s) == 0.0
    # 4 layers × 2 all-reduces (after attention, after the FFN) × (5 µs + 2·(1/2)·8 tokens·256·2 B / 100 GB/s)
    assert float(two.communication_s) == pytest.approx(4 * 2 * (5e-6 + 8 * 256 * 2 / 100e9), rel=1e-12)


def test_tensor_parallel_needs_an_interconnect():
    with pytest.raises(SpecError, match="interconnect_gb_s"):
        step_cost(load_model("seed-7b-q4"), load_hardware("seed-ddr5-90gbs"), tp=2)


def test_sliding_window_caps_attention():
    m = _tiny(sliding_window=64)
    a = step_cost(m, HBM, ctx_len=64)
    b = step_cost(m, HBM, ctx_len=10_000)
    assert float(a.attention.bytes) == float(b.attention.bytes)
    assert float(kv_bytes_per_device(m, batch_size=1, ctx_len=10_000)) == 64 * m.kv_bytes_per_token


def test_mla_cache_holds_the_latent_only():
    m = _tiny(n_heads=8, n_kv_heads=8, mla={"q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
                                            "qk_rope_head_dim": 8, "v_head_dim": 16})
    c = step_cost(m, HBM, ctx_len=99, tp=1)
    assert float(c.attention.bytes) == 100 * 4 * (32 + 8) * 2  # tokens × layers × latent × bf16


def test_mixed_batch_equals_uniform_batch():
    # a second path through the accounting: per-sequence arrays summed vs closed-form B·(...)
    u = step_cost(SEED_70B, HBM, batch_size=5, q_len=4, ctx_len=300)
    m = mixed_step_cost(SEED_70B, HBM, q_lens=np.full(5, 4), ctx_lens=np.full(5, 300))
    assert float(m.time_s) == pytest.approx(float(u.time_s), rel=1e-12)


def test_order_of_magnitude_cpu_step():
    # a ~4 GB model on a ~90 GB/s desktop: tens of milliseconds, not micro- or whole seconds
    t = float(step_cost(load_model("seed-7b-q4"), load_hardware("seed-ddr5-90gbs")).time_s)
    assert 0.02 < t < 0.1


@pytest.mark.parametrize("field,value", [("batch_size", 0), ("q_len", 0), ("ctx_len", -1), ("batch_size", 2.5)])
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
    c = step_cost(SEED_70B, HBM, batch_size=b, q_len=m, ctx_len=l)
    assert c.time_s.shape == (3, 3, 2)
    assert float(c.time_s[1, 2, 1]) == float(step_cost(SEED_70B, HBM, batch_size=8, q_len=16, ctx_len=4096).time_s)


MODELS = [SEED_70B, _tiny(), _tiny(moe={"n_experts": 8, "n_experts_per_token": 2, "expert_ffn_size": 128}),
          _tiny(n_kv_heads=8, mla={"q_lora_rank": 0, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
                                   "v_head_dim": 16})]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(range(len(MODELS))), st.integers(1, 512), st.integers(1, 64), st.integers(0, 200_000),
       st.sampled_from(["fused", "naive"]), st.sampled_from(["batch_size", "q_len", "ctx_len"]), st.integers(1, 1000))
def test_step_time_never_decreases_with_b_m_or_l(mi, b, m, l, kernel, axis, step):
    args = {"batch_size": b, "q_len": m, "ctx_len": l}
    base = float(step_cost(MODELS[mi], HBM, attention=kernel, **args).time_s)
    args[axis] += step
    assert float(step_cost(MODELS[mi], HBM, attention=kernel, **args).time_s) >= base
