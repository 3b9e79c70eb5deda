"""stacks/trtllm-0.14-draft-target.toml: TensorRT-LLM 0.14's host-orchestrated draft-target loop.

Every expected value here is recomputed from the published numbers the profile's [sources] cite
(clark-s-dev/triton-trtllm-text-io notebooks 0016 and 0017 and lab/results_0016.jsonl, all on one L4
with the NGC 24.10 TensorRT-LLM 0.14.0 container), never read from the file or from specsim's output."""
import pytest

from specsim.cost.deployment import Deployment
from specsim.specs.hardware import load_hardware
from specsim.specs.scenario import load_scenario
from specsim.specs.stacks import load_stack
from specsim.speculation.operating_point import resolve
from specsim.speculation.predict import predict

STACK = "trtllm-0.14-draft-target"
PEAK_BYTES_PER_S = 300e9  # the L4's datasheet bandwidth (hardware/l4.toml)

# notebook 0017 table C: the FP16 0.5B's transformer GEMMs read 716 MB in 2.83 ms (nsys)
BANDWIDTH_FRAC = round(716e6 / 2.83e-3 / PEAK_BYTES_PER_S, 2)
# notebook 0017 table A: the FP16 0.5B decodes a token in 4.941 ms for 988 MB of weights, 24 layers
DRAFT_STEP_S = 4.941e-3
PER_LAYER_S = (DRAFT_STEP_S - 988e6 / (BANDWIDTH_FRAC * PEAK_BYTES_PER_S)) / 24
# notebook 0016 section 5: a batch-1 cycle costs 16.6 + 5.59 K ms; each drafted token beyond a draft step
PER_DRAFT_TOKEN_S = 5.59e-3 - DRAFT_STEP_S
# the per-sequence estimate: about 0.3 ms of Python/pybind work, plus the bonus logits row (half a drafted token's)
PER_SPEC_SEQ_S = 300e-6 + PER_DRAFT_TOKEN_S / 2
# results_0016.jsonl A-base: the plain 1.5B engine, 23.1462 s for 1,729 target passes
PLAIN_STEP_S = 23.1462 / 1729
CYCLE_S = 16.6e-3 - PLAIN_STEP_S - PER_SPEC_SEQ_S
# the C++ executor's own figures, estimates copied from stacks/trtllm.toml
STEP_S, PER_SEQ_S = 100e-6, 3e-6


def test_the_figures_are_the_cited_arithmetic():
    s = load_stack(STACK)
    assert BANDWIDTH_FRAC == 0.84
    assert s.efficiency.bandwidth_frac == BANDWIDTH_FRAC
    assert s.efficiency.step_overhead_s == 0.0
    # the file keeps 0.1 us (per layer) and 1 us (the cycle) of the arithmetic's digits
    assert s.efficiency.per_layer_overhead_s == pytest.approx(PER_LAYER_S, abs=0.05e-6)
    assert s.host.spec_per_draft_token_s == pytest.approx(PER_DRAFT_TOKEN_S, abs=1e-9)
    assert s.host.spec_per_seq_s == pytest.approx(PER_SPEC_SEQ_S, abs=1e-9)
    assert s.cycle_overhead_s == pytest.approx(CYCLE_S, abs=0.5e-6)
    assert (s.host.step_s, s.host.per_seq_s) == pytest.approx((STEP_S, PER_SEQ_S))
    # the loop synchronizes after each generate(): nothing overlaps; one chain verified; the family it runs
    assert s.host.overlap == "none" and s.tree_verification == "none" and s.methods == ("draft_model",)
    for key in ("spec_per_seq_us", "spec_per_draft_token_us", "overlap"):
        assert s.sources["host"][key].strip()


def test_one_cycle_host_time_by_hand():
    """B = 8 sequences speculating K = 4 a cycle (a chain: each verifies K + 1 = 5 positions): host time =
    step + per_seq·B + cycle + spec_per_seq·B + spec_per_draft_token·B·K, from the figures above."""
    b, k = 8, 4
    hand_s = STEP_S + PER_SEQ_S * b + CYCLE_S + PER_SPEC_SEQ_S * b + PER_DRAFT_TOKEN_S * b * k
    assert hand_s == pytest.approx(28.476e-3, abs=1e-6)  # 0.100 + 0.024 + 2.588 + 4.996 + 20.768 ms
    dep = Deployment.from_stack(load_hardware("l4"), load_stack(STACK))
    got = float(dep.host_time_s(n_seqs=b, n_tokens=b * (k + 1), n_spec_seqs=b, n_draft_tokens=b * k,
                                n_draft_passes=k))
    assert got == pytest.approx(hand_s, abs=1e-6)
    # the analytical cycle of the sweep's deployment charges the same host work
    op = resolve(load_scenario("seed-70b-hbm"), hardware="l4", target="qwen2.5-1.5b", drafter="qwen2.5-0.5b",
                 method="draft_model", k=k, stack=STACK, batch_size=b, tree_size=0, tp=1, context_len=136,
                 cost_source="roofline")
    assert float(predict(op).cycle.host_s) == pytest.approx(hand_s, abs=1e-6)


def test_the_uncalibrated_batch_1_cycle_is_the_published_one():
    """results_0016.jsonl A-K4 (batch 1, K = 4, the sweep's speculative fit row): 20.7402 s over 529 target
    passes = 39.21 ms a cycle. The profile's figures were read off other rows (the K sweep's line, the plain
    engine, notebook 0017), so the cycle they give uncalibrated is a check, within 2 %. Context: the 50-token
    prompt and half the 173 output tokens."""
    op = resolve(load_scenario("seed-70b-hbm"), hardware="l4", target="qwen2.5-1.5b", drafter="qwen2.5-0.5b",
                 method="draft_model", k=4, stack=STACK, batch_size=1, tree_size=0, tp=1, context_len=136,
                 cost_source="roofline")
    cycle = predict(op).cycle
    assert float(cycle.cycle_time_s) == pytest.approx(20.7402 / 529, rel=0.02)
    assert float(cycle.draft_step_time_s) == pytest.approx(DRAFT_STEP_S, rel=0.02)  # notebook 0017's 0.5B step
