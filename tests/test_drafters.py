"""Drafter families: each one's cost per cycle and memory, checked against hand formulas.

Expected values are recomputed here from the seed article and the model shapes (bytes over
bandwidth), never read from specsim's own output.
"""
import numpy as np
import pytest

from specsim.speculation import families as drafters
from specsim.speculation.families import DrafterConfig, draft_cost, footprint, make_config
from specsim.cost.roofline import step_cost
from specsim.errors import SpecError
from specsim.specs.hardware import load_hardware
from specsim.specs.models import load_model
from specsim.cost.deployment import Deployment
from specsim.speculation.cycle import speculative_cycle, tokens_per_cycle

HBM = load_hardware("seed-hbm-2tbs")
DDR5 = load_hardware("seed-ddr5-90gbs")
T70 = load_model("seed-70b")


def test_seed_1b_drafter_costs_about_1_ms_on_2_tbs():
    # seed article: "1B drafter, fp16 = 2 GB → ~1 ms/step" = 2e9 B / 2.0e12 B/s; 3 %: the roofline also
    # counts the LM head's logits and the small KV cache
    cfg = make_config("draft_model", T70, drafter="seed-1b")
    c = draft_cost(cfg, T70, Deployment(hardware=HBM), batch_size=1, k=5, context_len=256)
    assert float(c.draft_step_time_s) == pytest.approx(2e9 / 2.0e12, rel=0.03)
    assert float(c.draft_time_s) == pytest.approx(5 * 2e9 / 2.0e12, rel=0.03)  # K sequential steps
    assert float(c.verify_q_len) == 6  # K + 1 positions verified


def test_seed_half_b_drafter_costs_about_4_ms_on_ddr5():
    # seed article: "a 0.5B drafter at ~350 MB costs about 4 ms a step" = 0.35e9 / 90e9 = 3.9 ms
    target = load_model("seed-7b-q4")
    cfg = make_config("draft_model", target, drafter="seed-0.5b")
    c = draft_cost(cfg, target, Deployment(hardware=DDR5), batch_size=1, k=4, context_len=256)
    assert float(c.draft_step_time_s) == pytest.approx(0.35e9 / 90e9, rel=0.03)


def test_eagle_step_is_one_layer_plus_the_lm_head_by_hand():
    # one decoder layer of seed-70b + its LM head + the 2d→d projection, all fp16, at 2 TB/s
    d, h, kv, hd, f, v = 8192, 64, 8, 128, 29184, 32000
    layer = d * h * hd + 2 * d * kv * hd + h * hd * d + 3 * d * f
    params = layer + v * d + 2 * d * d
    c = draft_cost(DrafterConfig(method="eagle"), T70, Deployment(hardware=HBM), batch_size=1, k=4, context_len=16)
    # 2 %: norms, the logits written in fp32 and activations are extra
    assert float(c.draft_step_time_s) == pytest.approx(params * 2 / 2e12, rel=0.02)
    assert float(c.draft_time_s) == pytest.approx(4 * params * 2 / 2e12, rel=0.02)


def test_eagle3_head_by_hand_llama_3_1_8b():
    # EAGLE-3's head for Llama-3.1-8B (SafeAILab/EAGLE eagle/traineagle3/config.json: hidden 4096,
    # 32 heads, 8 KV heads, ffn 14336, draft vocabulary 32000): the attention projections read the
    # 2d-wide [embedding; fused feature] (vLLM PR #16937), an fc fuses three features (3d -> d), and
    # the head has its own LM head over the draft vocabulary. Counted here matrix by matrix.
    d, q, kv, f, v_draft = 4096, 32 * 128, 8 * 128, 14336, 32000
    attn = 2 * d * q + 2 * (2 * d * kv) + q * d      # q, k, v from 2d; o back to d
    mlp = 3 * d * f
    fc = 3 * d * d
    lm = v_draft * d
    norms = 2 * d                                     # the layer's two RMSNorm weights
    target = load_model("llama-3.1-8b")
    cfg = make_config("eagle", target, options={"eagle_version": 3})
    fp = footprint(cfg, target, batch_size=1, context_len=0, k=4)
    assert float(fp["eagle-3 head weights"]) == pytest.approx((attn + mlp + fc + lm + norms) * 2, rel=1e-6)
    # a drafting step streams all of it once (bf16 at 2 TB/s); 2 %: the fp32 logits and the tiny cache
    c = draft_cost(cfg, target, Deployment(hardware=HBM), batch_size=1, k=4, context_len=16)
    assert float(c.draft_step_time_s) == pytest.approx((attn + mlp + fc + lm + norms) * 2 / 2e12, rel=0.02)
    # EAGLE-1/2's head on the same target: the standard layer, the 2d -> d projection, the target's
    # 128,256-token LM head; EAGLE-3's step is cheaper by the LM head it no longer streams
    c1 = draft_cost(make_config("eagle", target), target, Deployment(hardware=HBM), batch_size=1, k=4, context_len=16)
    eagle1 = (2 * d * kv + 2 * q * d) + mlp + 2 * d * d + 128256 * d + norms
    assert float(c1.draft_step_time_s) == pytest.approx(eagle1 * 2 / 2e12, rel=0.02)


def test_eagle3_options_are_checked():
    target = load_model("llama-3.1-8b")
    with pytest.raises(SpecError, match="eagle_version"):
        make_config("eagle", target, options={"eagle_version": 4})
    with pytest.raises(SpecError, match="draft_vocab_size.*eagle_version = 3"):
        make_config("eagle", target, options={"draft_vocab_size": 32000})
    with pytest.raises(SpecError, match="draft_vocab_size.*128256"):
        make_config("eagle", target, options={"eagle_version": 3, "draft_vocab_size": 200000})
    # a target whose vocabulary is already below 32,000 keeps its own (Vicuna's 32,000 here: the same)
    assert drafters.eagle3_draft_vocab(make_config("eagle", T70, options={"eagle_version": 3}), T70) == 32000


def test_medusa_heads_run_inside_the_verify_pass():
    d, v = 8192, 32000
    heads = 5 * (d * d + d + d * v)  # Cai et al. 2024: ResBlock(d) + Linear(d, V) per head
    c = draft_cost(DrafterConfig(method="medusa"), T70, Deployment(hardware=HBM), batch_size=1, k=4, tree_size=64, context_len=16)
    assert float(c.draft_time_s) == 0.0
    assert float(c.verify_q_len) == 64
    # bytes-bound at B·M = 64 < ridge 156: weights + 5 heads' fp32 logits for 64 positions
    assert float(c.verify_extra_s) == pytest.approx((heads * 2 + 64 * 5 * v * 4) / 2e12, rel=1e-6)


def test_prompt_lookup_has_no_weights_and_a_cpu_cost_per_sequence():
    cfg = DrafterConfig(method="prompt_lookup")
    c = draft_cost(cfg, T70, Deployment(hardware=HBM), batch_size=np.array([1, 8]), k=5, context_len=2000)
    # by hand: B × 5 µs per 1000 context tokens (the figure derived from vLLM PR #13365)
    assert np.allclose(c.draft_time_s, np.array([1, 8]) * 5e-6 * 2.0)
    fp = footprint(cfg, T70, batch_size=4, context_len=1000, k=5)
    assert set(fp) == {"speculative slots"}
    # 4 sequences × 5 speculative slots (K; the real token sits in the target's own cache of L + 1)
    # × 80 layers × 2 × 8 heads × 128 × 2 bytes
    assert float(fp["speculative slots"]) == 4 * 5 * 80 * 2 * 8 * 128 * 2


def test_lookahead_scores_window_and_guesses_every_step():
    c = draft_cost(DrafterConfig(method="lookahead"), T70, Deployment(hardware=HBM), batch_size=1, k=1, context_len=0)
    # Fu et al. 2024: lookahead branch W·(N−1) + verification branch G·(N−1) + the current token
    assert float(c.verify_q_len) == 1 + (15 + 15) * 4
    c = draft_cost(DrafterConfig(method="lookahead", lookahead_window=7, lookahead_guesses=7), T70, Deployment(hardware=HBM),
                   batch_size=1, k=1, context_len=0)
    assert float(c.verify_q_len) == 1 + 14 * 4


def test_layer_skip_drafts_with_the_first_layers():
    target = load_model("llama-2-7b")
    cfg = DrafterConfig(method="layer_skip", skip_layers=8)
    c = draft_cost(cfg, target, Deployment(hardware=HBM), batch_size=1, k=3, context_len=0)
    d, f, v = 4096, 11008, 32000
    per_layer = 4 * d * d + 3 * d * f
    assert float(c.draft_step_time_s) == pytest.approx((8 * per_layer + v * d) * 2 / 2e12, rel=0.02)
    assert "drafter weights" not in footprint(cfg, target, batch_size=1, context_len=100, k=3)


def test_sparse_kv_self_speculation_gains_with_batch_at_long_context():
    # MagicDec (Chen et al. 2024): at long context the KV read dominates, drafting with a 512-token
    # window is cheap relative to a full step, so the speedup grows with B; a draft model's shrinks.
    target = load_model("llama-2-7b-32k")
    dep = Deployment(hardware=load_hardware("h100-sxm"))
    b = np.array([1, 4, 16, 64])
    def speedup(method, ctx, batch=b):
        cfg = make_config(method, target)
        tau = tokens_per_cycle(cfg, alpha=0.8, k=3)
        return speculative_cycle(cfg, target, dep, batch_size=batch, k=3, context_len=ctx, tokens_per_cycle=tau).speedup
    sparse = speedup("sparse_kv", 32768)
    assert np.all(np.diff(sparse) > 0), sparse
    assert sparse[-1] > 1.5
    # at short context the same self-speculation loses with batch: the weights dominate again
    short = speedup("sparse_kv", 256, np.array([1, 512]))
    assert short[1] < short[0]


def test_mtp_needs_a_target_with_mtp_layers():
    with pytest.raises(SpecError, match="MTP layers"):
        make_config("mtp", T70)
    ds = load_model("deepseek-v3")
    cfg = make_config("mtp", ds)
    c = draft_cost(cfg, ds, Deployment(hardware=load_hardware("h200-sxm"), n_devices=8), batch_size=1, k=2, context_len=1024)
    # one MoE block (like the last layer) + the shared head: far below a full step, well above zero
    full = step_cost(ds, load_hardware("h200-sxm"), batch_size=1, q_len=1, context_len=1024, tp=8).time_s
    assert 0.005 * float(full) < float(c.draft_step_time_s) < 0.2 * float(full)


def test_tokenizer_trap_through_make_config():
    with pytest.raises(SpecError, match="tokenizer"):
        make_config("draft_model", T70, drafter="seed-0.5b")
    assert make_config("draft_model", T70, drafter="seed-0.5b", allow_cross_tokenizer=True).drafter.id == "seed-0.5b"


def test_bad_config_is_refused_with_the_field():
    with pytest.raises(SpecError, match="lookahead_ngram"):
        DrafterConfig(method="lookahead", lookahead_ngram=1)
    with pytest.raises(SpecError, match="method"):
        DrafterConfig(method="speculate-harder")
    with pytest.raises(SpecError, match=r"\[drafter_options\].*unknown key 'heads'"):
        make_config("medusa", T70, options={"heads": 4})
    with pytest.raises(SpecError, match="tree_size"):
        draft_cost(DrafterConfig(method="prompt_lookup"), T70, Deployment(hardware=HBM), batch_size=1, k=4, tree_size=9, context_len=0)


def test_draft_model_tree_expands_one_level_per_step():
    cfg = make_config("draft_model", T70, drafter="seed-1b")
    chain = draft_cost(cfg, T70, Deployment(hardware=HBM), batch_size=1, k=4, context_len=0)
    tree = draft_cost(cfg, T70, Deployment(hardware=HBM), batch_size=1, k=4, tree_size=33, context_len=0)
    # 32 drafted nodes over 4 levels: 8 per step, still bandwidth bound on the 1B → same time per step
    assert float(tree.verify_q_len) == 33
    assert float(tree.draft_step_time_s) == pytest.approx(float(chain.draft_step_time_s), rel=0.01)


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

SEED_CFGS = {m: (make_config(m, T70, drafter="seed-1b") if m == "draft_model" else DrafterConfig(method=m))
             for m in drafters.METHODS if m != "mtp"}


@settings(deadline=None, max_examples=60)
@given(st.sampled_from(sorted(SEED_CFGS)), st.integers(1, 256), st.integers(1, 8), st.integers(0, 65536))
def test_drafting_costs_are_positive_and_grow_with_batch_and_depth(method, b, k, ctx):
    cfg = SEED_CFGS[method]
    c = draft_cost(cfg, T70, Deployment(hardware=HBM), batch_size=np.array([b, 2 * b]), k=k, context_len=ctx)
    assert np.all(c.draft_time_s >= 0) and np.all(c.verify_extra_s >= 0)
    assert c.draft_time_s[1] >= c.draft_time_s[0]  # twice the sequences never drafts faster
    deeper = draft_cost(cfg, T70, Deployment(hardware=HBM), batch_size=b, k=k + 1, context_len=ctx)
    assert float(deeper.draft_time_s) >= float(c.draft_time_s[0])
    if method != "lookahead":
        assert np.all(c.verify_q_len == k + 1)
    fp = footprint(cfg, T70, batch_size=b, context_len=ctx, k=k)
    assert all(np.all(np.asarray(v) >= 0) for v in fp.values())


# ---- the draft side pass by pass, as each stack's code runs it (issue 26) --------------------------

def _hf_eagle2(k=6, tree=60, top_k=10):
    from specsim.specs.scenario import Scenario
    from specsim.speculation.operating_point import resolve

    return resolve(Scenario(name="hf-eagle2", hardware="a100-sxm-80gb", target="vicuna-7b", method="eagle", k=k,
                            tree_size=tree, tau=4.0, batch_size=1, context_len=512, stack="hf-eager",
                            sections={"drafter_options": {"eagle_version": 2, "eagle_top_k": top_k}}))


def test_eagle2_drafts_top_k_a_level_each_pass_a_head_pass_not_a_model_step():
    """EAGLE-2 as SafeAILab/EAGLE topK_genrate runs it on hf-eager, K = 6 levels, top-k 10, B = 1, L = 512:
    pass 0 scores the 1 new token at L cached; pass j >= 1 scores 10 tokens after L + 1 + 10 (j - 1).
    Every pass pays the stack's head-pass cost, 3532 us (stacks/hf-eager.toml [drafting] head_pass_us),
    not its model step overhead of 3000 us, plus its one layer's 830 us; the 2d -> d projection on each
    scored token. A plain twin adds the six passes up from step_cost and the numbers in the stack file."""
    from dataclasses import replace

    from specsim.speculation.families import eagle_head

    op = _hf_eagle2()
    dep, target = op.deployment, op.target
    head = eagle_head(target)
    eff = replace(dep.eff, step_overhead_s=3532e-6)
    assert dep.eff.step_overhead_s == pytest.approx(3000e-6) and dep.eff.per_layer_overhead_s == pytest.approx(830e-6)
    total = 0.0
    for j, (w, ctx) in enumerate([(1, 512)] + [(10, 512 + 1 + 10 * (j - 1)) for j in range(1, 6)]):
        t = float(step_cost(head, op.hardware, batch_size=1, q_len=w, context_len=ctx, efficiency=eff).time_s)
        # the projection by hand: max(weight bytes / achievable bandwidth, 2 FLOP a weight a token / achievable peak)
        params = 2.0 * 4096 * 4096
        bw = op.hardware.mem_bandwidth_bytes_per_s * dep.eff.bandwidth_frac
        peak = op.hardware.peak_flops_per_s[op.hardware.compute_dtype_for("fp16")] * dep.eff.compute_frac
        t += max(params * 2.0 / bw, 2.0 * w * params / peak)
        total += t
    c = draft_cost(op.drafter, target, dep, batch_size=1, k=6, tree_size=60, context_len=512, work=op.work)
    assert float(c.draft_time_s) == pytest.approx(total, rel=1e-12)
    # the head-pass cost replaced the step overhead: 6 passes x (3532 - 3000) us dearer than model steps
    as_model = draft_cost(op.drafter, target, replace(dep, drafting=type(dep.drafting)()), batch_size=1, k=6,
                          tree_size=60, context_len=512, work=op.work)
    assert float(as_model.draft_time_s) - float(c.draft_time_s) == pytest.approx(6 * (3000e-6 - 3532e-6), rel=1e-9)


def test_eagle2_tree_is_built_per_node_on_the_host_and_verified_through_a_masked_pass():
    """After drafting, topK_genrate builds the tree's mask in a Python loop, 3 ops a node (two selects and
    an add) at eager_op_us = 11.4 us: 34.2 us a drafted node, charged with the host's per-drafted-token
    work. The verify pass through the reference repo's masked eager attention moves masked_score_bytes =
    32 bytes per score of the 59 extra positions: 59 x (512 + 61/2) keys x 32 heads x 32 layers = 32.8 M
    scores, 1.05 GB at 2039 GB/s x 0.685 (the stack's bandwidth fraction): 0.75 ms."""
    from specsim.specs.stacks import load_stack

    op = _hf_eagle2()
    stack = load_stack("hf-eager")
    assert op.deployment.host.spec_per_draft_token_s == pytest.approx(stack.host.spec_per_draft_token_s + 3 * 11.4e-6)
    c = draft_cost(op.drafter, op.target, op.deployment, batch_size=1, k=6, tree_size=60, context_len=512, work=op.work)
    scores = 59 * (512 + 61 / 2) * 32 * 32
    assert float(c.verify_extra_s) == pytest.approx(scores * 32 / (2039e9 * 0.685), rel=1e-12)
    # EAGLE-1 drafts a static tree: no per-node host loop, its head's 30 ops a pass if no head_pass_us
    e1 = make_config("eagle", op.target, options={"eagle_version": 1})
    assert e1.family.work(e1, op.target, 1).tree_ops_per_node == 0.0


def test_a_stack_without_a_drafting_table_charges_a_head_pass_as_a_model_pass():
    from specsim.speculation.families import pass_efficiency

    hw = load_hardware("h100-sxm")
    from specsim.specs.stacks import load_stack

    dep = Deployment.from_stack(hw, load_stack("vllm"))
    target = load_model("llama-3.1-8b")
    cfg = make_config("eagle", target)
    work = cfg.family.work(cfg, target, 1)
    assert work.pass_kind == "head" and pass_efficiency(work, dep) == dep.eff


def test_hydra_heads_by_hand():
    """Hydra's grounded head i takes [hidden; the embeddings of its i + 1 predecessors]: a ResBlock
    (i + 2)d -> d of two linears with biases, then its d x V LM head (Spec-Bench model/hydra). Vicuna-7B,
    d = 4096, V = 32000, 4 heads: head 0 = 2 (2·4096² + 4096) + 4096·32000 = 198.2 M parameters; the four
    hold sum over i of 2((i + 2)d² + d), plus 4 dV, at 2 bytes each (fp16)."""
    target = load_model("vicuna-7b")
    cfg = make_config("hydra", target)
    d, v = 4096, 32000
    assert drafters.hydra_head_params(target, cfg, 0) == 2 * (2 * d * d + d) + d * v
    want = sum(2 * ((i + 2) * d * d + d) + d * v for i in range(4))
    work = cfg.family.work(cfg, target, 1)
    assert work.weight_bytes == pytest.approx(want * 2.0)
    assert work.dense_pass_params == pytest.approx(want / 4)
    assert work.pass_model is None and work.has_passes and work.masked_verify
    # its passes on hf-eager: 4 heads of 9 ops at 11.4 us each (a Hydra head has no decoder layer, so
    # head_pass_us, fitted on EAGLE's one-layer head, does not apply)
    from specsim.speculation.families import pass_efficiency
    from specsim.specs.stacks import load_stack

    dep = Deployment.from_stack(load_hardware("a100-sxm-80gb"), load_stack("hf-eager"))
    assert pass_efficiency(work, dep).step_overhead_s == pytest.approx(9 * 11.4e-6)


def test_hydra_plus_plus_prefix_layer_by_hand():
    """Hydra++ (hydra_head_arch = "prefix-mlp", the released checkpoints' recipe) runs one decoder layer of the
    target's shape over the verified hidden states once a cycle, before its heads (Spec-Bench
    prefix_mlp_head.py _grounded_proposal). Vicuna-7B, d = 4096, FFN 11008: 4d² + 3·d·11008 + 2d =
    202,383,360 parameters, 404.8 MB in fp16. On hf-eager on an A100-80GB at batch 1 and 512 cached tokens the
    pass streams those and the layer's cache (512 x 2 x 4096 x 2 B = 8.4 MB) at 2039 GB/s x 0.685 (0.296 ms)
    and pays the stack's head_pass_us (3532 us, a one-layer forward called from the drafting code) and one
    layer's per_layer_overhead_us (830 us): 4.66 ms a cycle more than the same heads without it."""
    from specsim.specs.stacks import load_stack

    target = load_model("vicuna-7b")
    dep = Deployment.from_stack(load_hardware("a100-sxm-80gb"), load_stack("hf-eager"))
    plain = make_config("hydra", target, options={"hydra_mlp_layers": 4})
    plus = make_config("hydra", target, options={"hydra_mlp_layers": 4, "hydra_head_arch": "prefix-mlp"})
    layer = 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096
    w0, w1 = plain.family.work(plain, target, 1), plus.family.work(plus, target, 1)
    assert w1.weight_bytes - w0.weight_bytes == pytest.approx(layer * 2.0)
    assert w0.cycle_pass_model is None and w1.cycle_pass_model.n_layers == 1
    c0 = draft_cost(plain, target, dep, batch_size=1, k=4, tree_size=64, context_len=512)
    c1 = draft_cost(plus, target, dep, batch_size=1, k=4, tree_size=64, context_len=512)
    want = (layer * 2.0 + 512 * 2 * 4096 * 2.0) / (2039e9 * 0.685) + 3532e-6 + 830e-6
    assert float(c1.draft_time_s - c0.draft_time_s) == pytest.approx(want, rel=0.02)
    assert float(c1.n_draft_steps) == float(c0.n_draft_steps) == 4  # a once-a-cycle pass, not a fifth head
    fp = footprint(plus, target, batch_size=1, context_len=512, k=4, tree_size=64)
    assert "hydra prefix layer KV cache" in fp
    with pytest.raises(SpecError, match="hydra_head_arch"):
        make_config("hydra", target, options={"hydra_head_arch": "prefix"})


def test_draft_target_step_ratios_of_published_pairs():
    """The pairs table (data/published/draft_target_ratios.csv): ten read first-hand, each published ratio
    the two models' own speeds inverted (e.g. gpt-fast's Llama-2-7B/70B int4 pair, 25.25 / 196.80 = 0.128),
    and the model's ratio within a factor of two of each (the table with the errors is printed by
    benchmarks/draft_target_ratios.py)."""
    from specsim.calibration.replay import draft_target_ratios

    r = draft_target_ratios()
    t = r.table.set_index("pair")
    read = t[~t["recalled"]]
    assert len(read) >= 10
    assert t.loc["gptfast-llama2-7b-70b-int4-tp1", "published_ratio"] == pytest.approx(25.25 / 196.80, rel=1e-12)
    assert ((read["model_ratio"] / read["published_ratio"]).between(0.5, 2.0)).all(), read["relative_error"].to_dict()
    # a small draft model is not charged almost the target's step: every modelled ratio is below 0.25
    assert (t["model_ratio"] < 0.25).all()
