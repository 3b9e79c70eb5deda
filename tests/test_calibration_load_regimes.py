"""Load regimes (specs.regimes) and what they change in an iteration's cost (serving.cost).

Expected values are worked by hand from the figures the stack files cite (126 µs a layer from SGLang
PR #4247's with/without-CUDA-graph pair; DeepSeek-V3's MLA shape; vLLM issue #49548's dynamic-K
tax), never read back from the code's own output.
"""
import numpy as np
import pytest

from specsim.errors import SpecError
from specsim.serving.cost import ServingCost, regime_advice, regimes_for
from specsim.serving.mix import IterationMix
from specsim.specs.hardware import load_hardware
from specsim.specs.regimes import (VersionRange, calibration_notes, entry_from_dict, parse_version,
                                   resolve_regimes)
from specsim.specs.scenario import Scenario
from specsim.cost.pricing import source_for
from specsim.specs.stacks import load_stack
from specsim.speculation.operating_point import resolve


def _entry(**kw):
    base = {"versions": "*", "status": "code", "source": "a test"}
    base.update(kw)
    return entry_from_dict(base, where="t")


def test_versions_order_and_ranges():
    assert parse_version("v0.10.1rc2") == (0, 10, 1)
    assert parse_version("0.4.6.post5") > parse_version("0.4.6")
    assert VersionRange("0.4.7-0.4.99").holds(parse_version("0.4.10"))  # 10 > 7 as a number, not as text
    assert not VersionRange("<0.11.1").holds(parse_version("0.11.1"))
    assert VersionRange(">=0.11.1").holds(parse_version("0.11.1"))
    assert VersionRange("0.5").holds(parse_version("0.5.5"))  # a release series
    assert not VersionRange(">=0.8.0").holds(None)  # no version given: only '*' holds
    assert VersionRange("*").holds(None)


@pytest.mark.parametrize("raw, field", [
    ({"property": "cuda_graph_max", "pass": "verify", "max_batch": 8, "max_tokens": 64}, "max_batch"),
    ({"property": "cuda_graph_max", "pass": "prefill", "max_batch": 8}, "pass"),
    ({"property": "overlap", "plain": "yes", "speculative": False}, "plain"),
    ({"property": "eager_layer_us"}, "value"),
    ({"property": "dynamic_k_tax", "low_batch": 8, "low_frac": 0.1, "high_batch": 2, "high_frac": 0.2}, "high_batch"),
    ({"property": "cuda_graph_max", "pass": "verify", "max_batch": 8, "status": "guess"}, "status"),
    ({"property": "warp_speed"}, "property"),
])
def test_bad_entries_are_refused_naming_the_field(raw, field):
    with pytest.raises(SpecError, match=f"'{field}'"):
        _entry(**raw)


def test_every_entry_needs_versions_status_and_source():
    with pytest.raises(SpecError, match="'source'"):
        entry_from_dict({"property": "eager_layer_us", "value": 1, "versions": "*", "status": "code"}, where="t")
    with pytest.raises(SpecError, match="unknown key 'valeu'"):
        _entry(property="eager_layer_us", valeu=3)


def test_a_specific_range_wins_over_star_and_no_version_lists_what_depends_on_it():
    es = [_entry(property="cuda_graph_max", **{"pass": "verify"}, max_batch=160),
          _entry(property="cuda_graph_max", **{"pass": "verify"}, max_batch=8, versions="<0.4.7"),
          _entry(property="eager_layer_us", value=100, versions=">=0.5.0"),
          _entry(property="overlap", plain=True, speculative=False, status="unmeasured", source="assumed")]
    r = resolve_regimes(es, version="0.4.6")
    assert dict(r.graph_max_batch) == {"verify": 8}
    assert r.eager_layer_s == 0.0
    none = resolve_regimes(es, version=None)
    assert dict(none.graph_max_batch) == {"verify": 160}
    assert any(q.startswith("eager_layer_us depends on the stack's version") for q in none.open_questions)
    assert any("overlap" in q and "unmeasured" in q for q in none.open_questions)  # an unmeasured regime in force
    assert none.overlap == (True, False)


def test_graph_capture_by_sequences_and_by_tokens():
    r = resolve_regimes([_entry(property="cuda_graph_max", **{"pass": "verify"}, max_tokens=512)])
    # vLLM captures token counts: a verify of 128 x (1 + 3) = 512 tokens replays, of 129 x 4 does not
    assert r.graph_captured("verify", n_seqs=128, n_tokens=512)
    assert not r.graph_captured("verify", n_seqs=129, n_tokens=516)
    assert r.graph_captured("draft", n_seqs=10 ** 6, n_tokens=10 ** 6)  # no cap known: replayed


def test_catalog_regimes_read_from_the_stacks_code_and_threads():
    sg = load_stack("sglang")
    old = resolve_regimes(sg.regimes, version="0.4.6", tp=1, memory_gb=80)
    assert old.graph_max_batch["draft_extend"] == 0  # before SGLang PR #6606 the extend pass ran eagerly
    assert old.graph_max_batch["verify"] == 160  # the 0.4 server_args default on >= 25 GB parts
    assert resolve_regimes(sg.regimes, version="0.5.5", tp=4, memory_gb=80).graph_max_batch["verify"] == 512
    # PR #4247: 19.42 vs 14.24 ms a cycle over 41 layer-passes, written rounded to the microsecond
    assert old.eager_layer_s == pytest.approx((5.36 / 276.30 - 5.39 / 378.57) / 41, abs=0.5e-6)
    vl = load_stack("vllm")
    assert resolve_regimes(vl.regimes, version="0.10.1").verify_path["mla"] == "prefill"  # issue #21984
    assert resolve_regimes(vl.regimes, version="0.10.1", attention="mha").verify_path == {}
    trt = resolve_regimes(load_stack("trtllm").regimes, version=None)
    # waynehacking8: 162 -> 374 tok/s with CUDA graphs, 32 layers; written rounded to the microsecond
    assert trt.eager_layer_s == pytest.approx((1 / 162 - 1 / 374) / 32, abs=0.5e-6)


def _op(**kw):
    base = dict(name="t", hardware="h100-sxm", target="smollm2-135m", stack="vllm", method="none", k=0,
                batch_size=1, context_len=100)
    base.update(kw)
    return resolve(Scenario(**base, given=frozenset(base)))


def _prefill(tokens: int) -> IterationMix:
    q = np.array([tokens], dtype=np.int64)
    return IterationMix(q, np.zeros(1, dtype=np.int64), np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64),
                        np.ones(1, dtype=bool), 0)


def test_a_pass_past_its_capture_runs_eagerly_at_least_its_launches():
    """vLLM >= 0.8: a mixed pass of more than 512 tokens runs eagerly; SmolLM2-135M's 30 layers at the
    assumed 126 µs a layer is 3.78 ms, far above its device work for 600 tokens on an H100."""
    v10 = ServingCost(_op(stack_version="0.10.1"))
    v07 = ServingCost(_op(stack_version="0.7.0"))  # before V1's capture sizes: no cap, no eager floor
    dev, host, _, _ = v10.parts(_prefill(600))
    assert dev == pytest.approx(30 * 126e-6, rel=1e-12)
    assert v07.parts(_prefill(600))[0] < 30 * 126e-6 / 2  # its own device work: the floor binds
    assert v10.parts(_prefill(500))[0] == pytest.approx(v07.parts(_prefill(500))[0], rel=1e-12)  # captured
    assert host == pytest.approx(v07.parts(_prefill(600))[1])


def test_no_version_means_no_regime_changes_the_cost():
    """Without stack_version only '*' entries apply (vLLM's: per_token_share, which only splits a load
    calibration's terms and prices nothing by itself, and the overlap of the n-gram and Medusa proposers'
    speculating iterations, which a plain point never runs): the cost is the one at a release no regime
    covers, and the host model is the stack file's."""
    a = ServingCost(_op())
    mix = _prefill(600)
    applied = [(e.property, e.fields.get("method")) for e in a.regimes.applied]
    assert applied == [("overlap", "prompt_lookup"), ("overlap", "medusa"), ("per_token_share", None)]
    assert a.op.deployment.host.overlap == load_stack("vllm").host.overlap == "none"
    assert a.parts(mix)[0] == pytest.approx(ServingCost(_op(stack_version="0.7.0")).parts(mix)[0], rel=1e-12)


def test_mla_verification_on_the_prefill_path_by_hand():
    """DeepSeek-V3 MTP (K = 1) on 8 x H200, vLLM 0.10.1 (prefill path) against 0.11.1 (decode path):
    64 rows verifying 2 tokens after 2000 cached ones. Per layer and device (16 of 128 heads):
    up-projection 2·512·16·(128 + 128) FLOP and expanded keys and values 2·2·16·(128 + 64 + 128) bytes a
    cached token; 61 layers."""
    kw = dict(hardware="h200-sxm", target="deepseek-v3", tp=8, method="mtp", k=1, tau=1.8, batch_size=64,
              context_len=2000)
    old, new = ServingCost(_op(stack_version="0.10.1", **kw)), ServingCost(_op(stack_version="0.11.1", **kw))
    b, ctx = 64, 2000
    mix = IterationMix(np.full(b, 2, dtype=np.int64), np.full(b, ctx, dtype=np.int64), np.full(b, 2, dtype=np.int64),
                       np.ones(b, dtype=np.int64), np.zeros(b, dtype=bool), 0, n_spec=b, uniform_q=2)
    hw = load_hardware("h200-sxm")
    eff = old.dep.eff
    tokens = b * ctx
    flops = 2 * 512 * 16 * 256 * tokens
    nbytes = 4 * 16 * 320 * tokens
    per_layer = max(nbytes / (4800e9 * eff.bandwidth_frac), flops / (989.4e12 * eff.compute_frac))
    assert hw.mem_bandwidth_bytes_per_s == pytest.approx(4800e9)
    assert old.parts(mix)[0] - new.parts(mix)[0] == pytest.approx(61 * per_layer, rel=1e-9)
    assert 61 * per_layer > 0.04  # tens of ms: the cost that doubled TPOT in prompt-heavy traffic
    assert new.regimes.open_questions  # the 0.11.1 default backend's path is an unmeasured assumption


def test_overlap_and_dynamic_k_tax_and_a_calibration():
    op = _op(stack_version="0.27.0", target="llama-3.2-1b", method="prompt_lookup", k=3, alpha=0.6)
    plain = ServingCost(op)
    taxed = ServingCost(op, dynamic_k=True)
    b = 95
    mix = IterationMix(np.ones(b, dtype=np.int64), np.full(b, 300, dtype=np.int64), np.ones(b, dtype=np.int64),
                       np.zeros(b, dtype=np.int64), np.zeros(b, dtype=bool), 0, n_spec=0, uniform_q=1)
    d0, h0, _, ov = plain.parts(mix)
    assert ov  # async scheduling from 0.14: host work hides behind the device, plain and speculating
    assert plain(mix) == pytest.approx(max(d0, h0))
    # issue #49548: +6.56 % at 2, +21.58 % at 189; at 95 sequences, linearly between
    frac = 0.0656 + (0.2158 - 0.0656) * (95 - 2) / (189 - 2)
    assert taxed.parts(mix)[0] == pytest.approx(d0 * (1 + frac), rel=1e-12)
    from dataclasses import replace

    cal = entry_from_dict({"property": "calibration", "versions": "*", "status": "fitted", "source": "test",
                           "sweep": "s", "file": "f.csv", "load_kind": "concurrency", "load_min": 1, "load_max": 64,
                           "n_fit_rows": 5, "fit_error_frac": 0.03, "command": "specsim calibrate load f.csv",
                           "device_scale": 2.0, "device_per_seq_us": 10.0,
                           # fitted through the source that prices this point (a calibration holds on that source only)
                           "priced_by": source_for(op.target, op.deployment, target=True).kind}, where="t")
    stack = load_stack("vllm")
    op2 = resolve(op.scenario, stack_profile=replace(stack, regimes=stack.regimes + (cal,)))
    c = ServingCost(op2)
    assert c.parts(mix)[0] == pytest.approx(2.0 * d0 + 10e-6 * b, rel=1e-12)
    changes, notes = regime_advice(op2, batch=128)
    assert "calibrated from load sweep 's'" in notes[0] and "1–64" in notes[0]
    assert notes[1].startswith("WARNING") and "128" in notes[1]  # outside the loads the sweep covered
    assert calibration_notes(regimes_for(op2), batch=32)[1:] == []
    assert calibration_notes(regimes_for(op)) == []
