"""The seed article's worked examples, checked against the seed's own arithmetic.

Expected values are the article's numbers (000_27f178a79a0f5ee3.txt), recomputed here by hand from
its stated inputs, never taken from specsim's output:
  70B fp16 = 140 GB on 2.0 TB/s → 140 / 2000 s = 70 ms; 1B fp16 = 2 GB → 1 ms;
  cycle = 5 × 1 ms + 70 ms = 75 ms; 3.5 tokens / 75 ms = 46.7 tok/s against 1 / 70 ms = 14.3 tok/s.
  7B q4 ≈ 4 GB on 90 GB/s → 4 / 90 s = 44.4 ms ≈ 22.5 tok/s; 0.5B at ~350 MB → 0.35 / 90 s = 3.9 ms.
"""
import json

import pytest

from specsim.cli import main
from specsim.errors import DoesNotFitError, SpecError
from specsim.speculation.operating_point import resolve
from specsim.speculation.predict import predict
from specsim.specs.scenario import Scenario, load_scenario

SEED_TARGET_STEP_S = 140e9 / 2.0e12
SEED_DRAFT_STEP_S = 2e9 / 2.0e12
SEED_CYCLE_S = 5 * SEED_DRAFT_STEP_S + SEED_TARGET_STEP_S
SEED_TAU = 3.5


def _predict_json(capsys, *argv):
    assert main(["predict", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_seed_70b_hbm_reproduces_the_article(capsys):
    r = _predict_json(capsys, "scenarios/seed-70b-hbm.toml")
    # 1 % for the target: the roofline also counts the KV cache, the LM head's logits and
    # activations, and does not stream the embedding table (the seed's 140 GB includes it).
    assert r["target_step_time_s"] == pytest.approx(SEED_TARGET_STEP_S, rel=0.01)
    assert r["draft_step_time_s"] == pytest.approx(SEED_DRAFT_STEP_S, rel=0.03)
    assert r["cycle_time_s"] == pytest.approx(SEED_CYCLE_S, rel=0.01)
    assert r["tokens_per_cycle"] == pytest.approx(SEED_TAU, abs=1e-9)
    assert r["tokens_per_s"] == pytest.approx(SEED_TAU / SEED_CYCLE_S, rel=0.01)  # ≈ 47 tok/s
    assert r["baseline_tokens_per_s"] == pytest.approx(1 / SEED_TARGET_STEP_S, rel=0.01)  # ≈ 14 tok/s
    assert r["speedup"] == pytest.approx(3.3, abs=0.05)  # the article rounds 46.7 / 14.3 = 3.27 to ~3.3×
    # the verify pass over K + 1 = 6 tokens costs barely more than a single-token step (B·M ≪ ops:byte)
    assert r["verify_time_s"] / r["target_step_time_s"] < 1.01


def test_seed_7b_ddr5_reproduces_the_article(capsys):
    r = _predict_json(capsys, "scenarios/seed-7b-ddr5.toml")
    # 3 %: the seed counts weights only; the 256-token multi-head KV cache adds about 1.5 %.
    assert r["target_step_time_s"] == pytest.approx(4.0e9 / 90e9, rel=0.03)
    assert r["baseline_tokens_per_s"] == pytest.approx(90 / 4.0, rel=0.03)
    assert r["draft_step_time_s"] == pytest.approx(0.35e9 / 90e9, rel=0.03)


def test_tokens_per_cycle_from_alpha_uses_the_closed_form():
    s = load_scenario("seed-70b-hbm").with_overrides(alpha=0.8)
    p = predict(resolve(s))
    # (1 − α^(K+1)) / (1 − α) with α = 0.8, K = 5, by hand: (1 − 0.262144) / 0.2 = 3.68928
    assert float(p.cycle.tokens_per_cycle) == pytest.approx(3.68928, rel=1e-12)


def test_alpha_one_is_legal_and_gives_k_plus_one():
    p = predict(resolve(load_scenario("seed-70b-hbm"), alpha=1.0))
    assert float(p.cycle.tokens_per_cycle) == 6.0


@pytest.mark.parametrize("alpha", [-0.1, 1.2])
def test_alpha_outside_unit_interval_is_refused(capsys, alpha):
    assert main(["predict", "seed-70b-hbm", "--alpha", str(alpha)]) == 2
    err = capsys.readouterr().err
    assert "alpha" in err and str(alpha) in err and "[0, 1]" in err


@pytest.mark.parametrize("dtype", ["fp3", "FP8"])
def test_unknown_target_dtype_is_refused_naming_the_field(capsys, dtype):
    assert main(["predict", "seed-70b-hbm", "--target-dtype", dtype]) == 2
    err = capsys.readouterr().err
    assert f"'target_dtype' = '{dtype}'" in err and "fp8" in err and len(err.strip().splitlines()) == 1


def test_negative_k_is_refused(capsys):
    assert main(["predict", "seed-70b-hbm", "--k", "-1"]) == 2
    err = capsys.readouterr().err
    assert "'k'" in err and "-1" in err


def test_tau_above_k_plus_one_is_refused():
    with pytest.raises(SpecError, match=r"tau.*\[1, K \+ 1\]"):
        resolve(load_scenario("seed-70b-hbm"), tau=7.0)


def test_unknown_hardware_lists_close_matches(capsys):
    assert main(["predict", "seed-70b-hbm", "--hardware", "seed-hbm-2tb"]) == 2
    err = capsys.readouterr().err
    assert "unknown hardware id 'seed-hbm-2tb'" in err and "seed-hbm-2tbs" in err


def test_tokenizer_trap_is_refused_unless_allowed():
    # seed-70b uses the 'seed' tokenizer, seed-0.5b the CPU pair's 'seed-cpu' one
    s = load_scenario("seed-70b-hbm").with_overrides(drafter="seed-0.5b")
    with pytest.raises(SpecError, match="tokenizer 'seed-cpu'.*'seed'"):
        resolve(s)
    assert predict(resolve(s, allow_cross_tokenizer=True)).cycle.speedup > 1


def test_batch_that_does_not_fit_says_by_how_much():
    # 140 GB weights + 1B drafter on a 192 GB part; a 70B KV cache is 327,680 B/token (80 layers ×
    # 2 × 8 heads × 128 × 2 B) → 64 sequences of 120,000 tokens need 2.5 TB.
    op = resolve(load_scenario("seed-70b-hbm"), batch_size=64, context_len=120000)
    assert not op.memory.fits
    with pytest.raises(DoesNotFitError, match=r"does not fit.*short by.*Largest batch that fits"):
        predict(op)
    # the largest batch by hand: (192 GB − 140 GB target − 2.03 GB drafter weights) over a
    # sequence's caches; one more sequence does not fit
    top = op.memory.max_batch_speculative
    assert resolve(load_scenario("seed-70b-hbm"), batch_size=top, context_len=120000).memory.fits
    assert not resolve(load_scenario("seed-70b-hbm"), batch_size=top + 1, context_len=120000).memory.fits


def test_unknown_scenario_key_is_refused(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('hardware = "seed-hbm-2tbs"\ntarget = "seed-70b"\nbatchsize = 4\n')
    with pytest.raises(SpecError, match="unknown key 'batchsize'.*batch_size"):
        load_scenario(path)


def test_alpha_and_tau_together_are_refused():
    with pytest.raises(SpecError, match="either alpha or tau"):
        Scenario(alpha=0.5, tau=2.0)


def test_method_none_is_plain_decoding():
    p = predict(resolve(load_scenario("seed-70b-hbm"), method="none"))
    assert float(p.cycle.speedup) == 1.0


def test_context_past_the_models_maximum_is_refused(capsys):
    # seed-70b holds 131,072 tokens; a step of K + 1 = 6 after 131,070 cached tokens would overrun it
    assert main(["predict", "seed-70b-hbm", "--context", "131070"]) == 2
    err = capsys.readouterr().err
    assert "context_len" in err and "131070" in err and "<= 131066" in err


def test_a_stack_that_does_not_ship_the_family_is_refused():
    with pytest.raises(SpecError, match="family the stack 'vllm' ships"):
        resolve(load_scenario("seed-70b-hbm"), stack="vllm", method="lookahead", tau=None, alpha=0.5)


def test_predict_stack_flag_applies_the_stacks_costs(capsys):
    plain = _predict_json(capsys, "seed-70b-hbm")
    vllm = _predict_json(capsys, "seed-70b-hbm", "--stack", "vllm")
    assert vllm["stack"] == "vllm" and plain["stack"] is None
    # vLLM at 0.8 of the bandwidth, plus its per-pass overheads and its host work per iteration
    assert vllm["target_step_time_s"] > plain["target_step_time_s"] / 0.8
    # the cycle's overhead by hand (stacks/vllm.toml [host], B = 1, K = 5): step 350 + 10 per sequence
    # + cycle 991 + 90 per speculating sequence + 2 per drafted token × 5 = 1451 µs of host work, plus
    # the device's reading of the extra logits, which at 0.8 of the bandwidth takes 1/0.8 as long
    assert vllm["cycle_overhead_s"] == pytest.approx(1451e-6 + plain["cycle_overhead_s"] / 0.8, rel=1e-9)


def test_describe_names_the_sources(capsys):
    assert main(["predict", "seed-70b-hbm", "--k", "3", "--describe"]) == 0
    out = capsys.readouterr().out
    assert "flag / override" in out and "seed-70b-hbm.toml" in out and "operating point" in out


def test_text_output_is_readable(capsys):
    assert main(["predict", "seed-70b-hbm"]) == 0
    out = capsys.readouterr().out
    assert "speedup" in out and "ms" in out and "seed-70b" in out


def test_a_measured_baseline_anchors_the_stacks_fixed_costs(capsys):
    """Spec-Bench's vanilla Vicuna-7B runs about 40 tok/s (25 ms) where hf-eager's estimated overheads
    give 39 ms: anchored, the plain step is exactly the measured one, the device time is unchanged,
    and the fixed costs of every pass shrink by one factor (so the speculative cycle changes too)."""
    base = load_scenario("seed-70b-hbm")
    s = base.with_overrides(hardware="a100-sxm-80gb", target="vicuna-7b", method="medusa", k=4, tree_size=64,
                            tau=2.32, stack="hf-eager", context_len=512, drafter="")
    plain = resolve(s)
    anchored = resolve(s, baseline_tokens_per_s=40.0)
    assert float(predict(anchored).cycle.target_step_time_s) == pytest.approx(1 / 40.0, rel=1e-9)
    a = anchored.anchor
    assert a["predicted_step_time_s"] == pytest.approx(float(predict(plain).cycle.target_step_time_s), rel=1e-12)
    assert 0 < a["fixed_cost_scale"] < 1 and anchored.deployment.eff.per_layer_overhead_s < plain.deployment.eff.per_layer_overhead_s
    assert main(["predict", "--hardware", "a100-sxm-80gb", "--target", "vicuna-7b", "--method", "none",
                 "--stack", "hf-eager", "--baseline-tokens-per-s", "40"]) == 0
    assert "anchored" in capsys.readouterr().out


def test_a_baseline_faster_than_the_device_is_refused():
    # 70B fp16 on 2 TB/s cannot step in 1 ms: 140 GB must stream every step
    # the refusal names the input as given: a step time in seconds here
    with pytest.raises(SpecError, match=r"baseline_step_time_s' = 0.001: expected at least 0.0697.* s: the device time alone"):
        resolve(load_scenario("seed-70b-hbm"), baseline_step_time_s=0.001)
    with pytest.raises(SpecError, match=r"baseline_tokens_per_s' = 1000.0: expected at most 14.3.* tokens/s"):
        resolve(load_scenario("seed-70b-hbm"), baseline_tokens_per_s=1000.0)


def test_a_baseline_slower_than_any_fixed_cost_could_explain_is_refused():
    # 1e6 s a step (a unit mistake) would need the stack's fixed costs scaled past MAX_FIXED_COST_SCALE;
    # brentq used to fail on it with an internal error
    for kw, field in (({"baseline_step_time_s": 1e6}, "baseline_step_time_s"),
                      ({"baseline_tokens_per_s": 1e-300}, "baseline_tokens_per_s")):
        with pytest.raises(SpecError, match=field + ".*fixed costs"):
            resolve(load_scenario("seed-70b-hbm"), stack="vllm", **kw)


# ---- drafting facts resolved once (issue 27) -----------------------------------------------------

def _hf_eager_eagle_tp2(k=3):
    return resolve(Scenario(name="hf-eagle-tp2", hardware="a100-sxm-80gb", target="vicuna-7b", method="eagle", k=k,
                            alpha=0.7, batch_size=1, context_len=512, tp=2, stack="hf-eager"))


def test_verify_step_and_cycle_verify_agree_with_the_layer_split_hop():
    """hf-eager splits layers over the 2 devices: one boundary, so a pass pays 1 × layer_split_hop_us
    = 50 µs (stacks/hf-eager.toml) on top of the one-device roofline. The Prediction's verify step
    and the cycle's verify time are the same figure, hop included."""
    from specsim.cost.roofline import step_cost

    op = _hf_eager_eagle_tp2()
    p = predict(op)
    assert op.deployment.multi_gpu == "layer_split" and op.deployment.tp == 1
    one_device = step_cost(op.target, op.hardware, batch_size=1, q_len=4, context_len=512, tp=1,
                           attention=op.deployment.attention, efficiency=op.deployment.eff).time_s
    hop_s = (2 - 1) * 50e-6
    assert float(p.verify_step.time_s) == pytest.approx(float(one_device) + hop_s, rel=1e-12)
    assert float(p.verify_step.time_s) + p.verify_extra_s == pytest.approx(float(p.cycle.verify_time_s), rel=1e-12)
    assert float(p.plain_step.time_s) - float(step_cost(op.target, op.hardware, batch_size=1, q_len=1, context_len=512,
                                                        tp=1, attention=op.deployment.attention,
                                                        efficiency=op.deployment.eff).time_s) == pytest.approx(hop_s, rel=1e-9)


def test_predict_prices_each_distinct_pass_once(monkeypatch):
    """A chain of K = 3 drafted by an EAGLE head: the plain step, the verify pass over K + 1 = 4 tokens
    and the head's three passes (contexts L, L + 1, L + 2) are five distinct passes, each priced once."""
    from specsim.cost.pricing import RooflineSource

    calls = []
    real = RooflineSource.price

    def counting(self, shape):  # every pass goes through its source's price (cost.pricing), here the roofline
        m, b = float(shape.tokens) / float(shape.seqs), float(shape.seqs)
        calls.append((self.model.id, m, float(shape.kv_read) / b - m, b))
        return real(self, shape)

    monkeypatch.setattr(RooflineSource, "price", counting)
    op = _hf_eager_eagle_tp2(k=3)
    predict(op)
    assert len(calls) == 5
    assert len(set(calls)) == 5
    head = [c for c in calls if c[0] != op.target.id]
    assert sorted(c[2] for c in head) == [512.0, 513.0, 514.0]


def test_predict_prints_every_iteration_as_device_and_host_on_one_basis():
    """Llama-3.1-8B + a 1B drafter on an H100 with vLLM (host after the device, stacks/vllm.toml overlap
    'none'): the plain iteration is its device pass plus the host's work, the cycle its device work plus
    its host work, and the verify pass is a device time like the plain pass. By hand from the stack file:
    plain host = step_us 350 + per_seq_us 10 = 360 µs; a cycle's host = 350 + 10 + cycle_overhead_us
    (991 µs, or the [measured] figure where the tables price the target) + spec_per_seq_us 90 +
    spec_per_draft_token_us 2 × 4 drafted tokens."""
    from specsim.specs.scenario import Scenario
    from specsim.speculation.operating_point import resolve

    for source in ("roofline", "auto"):
        op = resolve(Scenario(hardware="h100-sxm", target="llama-3.1-8b", drafter="llama-3.2-1b", stack="vllm",
                              alpha=0.7, cost_source=source))
        r = predict(op).to_dict()
        assert r["plain_host_s"] == pytest.approx(360e-6, rel=1e-9)
        assert r["plain_device_s"] == pytest.approx(r["plain_step"]["time_s"], rel=1e-12)
        assert r["target_step_time_s"] == pytest.approx(r["plain_device_s"] + r["plain_host_s"], rel=1e-12)
        cycle_us = op.deployment.cycle_overhead_s * 1e6
        assert r["cycle_host_s"] == pytest.approx((350 + 10 + cycle_us + 90 + 2 * 4) * 1e-6, rel=1e-9)
        assert r["cycle_time_s"] == pytest.approx(r["cycle_device_s"] + r["cycle_host_s"], rel=1e-12)
        assert r["verify_time_s"] == pytest.approx(r["verify_step"]["time_s"], rel=1e-12)  # a device time
        assert r["cycle_device_s"] >= r["draft_time_s"] + r["verify_time_s"]
        assert r["priced_by"]["target"].startswith("roofline" if source == "roofline" else "aiconfigurator-core")


def test_the_roofline_source_gives_the_roofline_s_figures():
    """--cost-source roofline prices the target's passes exactly as cost.roofline.step_cost does at the
    stack's efficiency (the figures specsim gave before the measured tables), and the drafter's likewise;
    with auto on the same H100 + vLLM point, the tables price both and the figures differ."""
    from specsim.cost.roofline import step_cost
    from specsim.specs.scenario import Scenario
    from specsim.speculation.operating_point import resolve

    sc = Scenario(hardware="h100-sxm", target="llama-3.1-8b", drafter="llama-3.2-1b", stack="vllm", alpha=0.7)
    op = resolve(sc, cost_source="roofline")
    p = predict(op)
    kw = dict(context_len=op.context_len, tp=1, attention="fused", efficiency=op.deployment.eff)
    assert float(p.plain_step.time_s) == pytest.approx(float(step_cost(op.target, op.hardware, batch_size=1, q_len=1,
                                                                       **kw).time_s), rel=1e-12)
    assert float(p.verify_step.time_s) == pytest.approx(float(step_cost(op.target, op.hardware, batch_size=1,
                                                                        q_len=op.k + 1, **kw).time_s), rel=1e-12)
    assert float(p.draft_step.time_s) == pytest.approx(float(step_cost(op.drafter.drafter, op.hardware, batch_size=1,
                                                                       q_len=1, **kw).time_s), rel=1e-12)
    from specsim.specs.operator_tables import package_root
    if package_root() is None:
        pytest.skip("aiconfigurator-core's tables are not installed: auto is the roofline here")
    m = predict(resolve(sc))
    assert m.plain_step.source.startswith("aiconfigurator-core") and m.draft_step.source.startswith("aiconfigurator-core")
    assert float(m.plain_step.time_s) != pytest.approx(float(p.plain_step.time_s), rel=1e-3)


# --stack-version: the release a stack's load regimes read, from the command line as a scenario file says it.
# vLLM's stack file: from 0.14 a plain launch overlaps its host work with the device (async scheduling) and an
# n-gram launch does not (VllmConfig turns async scheduling off for it); before 0.14 neither overlaps.
_NGRAM_FLAGS = ("--hardware", "h100-sxm", "--target", "qwen3-8b", "--method", "prompt_lookup", "--stack", "vllm",
                "--k", "3", "--tau", "2.03", "--batch", "32", "--context", "190")


def test_stack_version_flag_prices_the_point_the_scenario_field_does(capsys, tmp_path):
    path = tmp_path / "v028.toml"
    path.write_text('name = "v028"\nhardware = "h100-sxm"\ntarget = "qwen3-8b"\nmethod = "prompt_lookup"\n'
                    'stack = "vllm"\nstack_version = "0.28.0"\nk = 3\nbatch_size = 32\ncontext_len = 190\n')
    from_file = _predict_json(capsys, str(path), "--tau", "2.03")
    from_flag = _predict_json(capsys, *_NGRAM_FLAGS, "--stack-version", "0.28.0")
    assert from_flag["stack_version"] == from_file["stack_version"] == "0.28.0"
    for key in ("target_step_time_s", "cycle_time_s", "speedup", "plain_host_s", "cycle_host_s"):
        assert from_flag[key] == pytest.approx(from_file[key], rel=1e-12), key
    assert from_flag["host_overlaps_device"] == {"plain": True, "speculative": False}


def test_without_a_stack_version_only_the_every_release_regimes_apply(capsys):
    r = _predict_json(capsys, *_NGRAM_FLAGS)
    assert r["stack_version"] is None
    # the n-gram entry holds for every release; the plain launch's overlap needs 0.14 or later
    assert r["host_overlaps_device"] == {"plain": False, "speculative": False}
    # so the plain step pays its host work after the device, by the definition of no overlap
    assert r["target_step_time_s"] == pytest.approx(r["plain_device_s"] + r["plain_host_s"], rel=1e-12)
    old = _predict_json(capsys, *_NGRAM_FLAGS, "--stack-version", "0.13.0")
    assert old["host_overlaps_device"] == {"plain": False, "speculative": False}
    assert old["target_step_time_s"] == pytest.approx(r["target_step_time_s"], rel=1e-12)


@pytest.mark.parametrize("argv, words", [
    (("--stack-version", "0.x"), ("stack_version", "'0.x'", "a release such as")),
    (("--stack", "none", "--stack-version", "0.28.0"), ("stack_version", "'0.28.0'", "a stack to be the version of")),
])
def test_a_bad_stack_version_is_refused_naming_the_field(capsys, argv, words):
    flags = list(_NGRAM_FLAGS)
    if "--stack" in argv:
        i = flags.index("--stack")
        del flags[i:i + 2]
    assert main(["predict", *flags, *argv]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
