"""Stack behaviours that depend on the drafter family (specs.regimes `spec_seq_host_us`,
`spec_max_running` and a method's own `overlap`): SGLang's NGRAM worker builds each request's tree mask in
a Python loop; SGLang runs at most 48 requests at once when a launch speculates without setting
--max-running-requests; vLLM's async scheduler, the default from 0.14, turns itself off for the n-gram
proposer.

Expected values come from the sources the stack file cites, worked by hand: SGLang PR #20744 profiled
the verify step at batch 32 at 3.875 ms with the loop and 0.99 ms with one kernel, so the loop costs
(3.875 - 0.99) / 32 ms a request; `ServerArgs._handle_speculative_decoding` writes 48.
"""
from dataclasses import replace

import pytest

from specsim.calibration.load import read_load_sweeps
from specsim.calibration.load_fit import row_scenario
from specsim.errors import SpecError
from specsim.serving.rates import run_one
from specsim.serving.setup import build_serving
from specsim.specs.regimes import entry_from_dict
from specsim.specs.scenario import Scenario
from specsim.specs.stacks import load_stack
from specsim.speculation.operating_point import resolve
from specsim.speculation.predict import predict

NGRAM_LOOP_S = (3.875e-3 - 0.99e-3) / 32  # SGLang PR #20744, batch 32: what the kernel removes, a request
SGLANG_SPEC_CAP = 48  # ServerArgs._handle_speculative_decoding


def _scenario(**kw) -> Scenario:
    base = dict(name="t", hardware="h100-sxm", target="smollm2-135m", stack="sglang", stack_version="0.5.9",
                method="prompt_lookup", k=3, alpha=0.6, batch_size=16, context_len=512)
    sections = kw.pop("sections", {})
    base.update(kw)
    return Scenario(**base, sections=sections, given=frozenset(base))


def _without(stack, prop: str):
    return replace(stack, regimes=tuple(e for e in stack.regimes if e.property != prop))


def test_the_ngram_mask_loop_adds_its_measured_cost_a_speculating_sequence_by_hand():
    sg = load_stack("sglang")
    op = resolve(_scenario())
    # the stack file writes the figure rounded to the microsecond
    assert op.deployment.host.spec_per_seq_s == pytest.approx(sg.host.spec_per_seq_s + NGRAM_LOOP_S, abs=0.5e-6)
    note = op.sources["method host work"]
    assert "prompt_lookup adds 90 µs" in note and "#20744" in note
    # the analytic cycle pays it once per speculating sequence: SGLang speculates without the overlap
    # scheduler, so host work adds to the device's (batch 16 here)
    bare = resolve(_scenario(), stack_profile=_without(sg, "spec_seq_host_us"))
    assert "method host work" not in bare.sources
    extra = op.deployment.host.spec_per_seq_s - bare.deployment.host.spec_per_seq_s
    a, b = predict(op).to_dict(), predict(bare).to_dict()
    assert a["cycle_host_s"] - b["cycle_host_s"] == pytest.approx(16 * extra, rel=1e-9)
    assert a["cycle_time_s"] - b["cycle_time_s"] == pytest.approx(16 * extra, rel=1e-9)
    # the plain step carries no speculation work
    assert a["target_step_time_s"] == pytest.approx(b["target_step_time_s"], rel=1e-12)


def test_other_methods_and_stacks_pay_no_ngram_loop():
    sg = load_stack("sglang")
    op = resolve(_scenario(target="smollm2-360m", method="draft_model", drafter="smollm2-135m", k=3))
    assert op.deployment.host.spec_per_seq_s == pytest.approx(sg.host.spec_per_seq_s, rel=1e-12)
    vl = resolve(_scenario(stack="vllm", stack_version="0.10.1"))
    assert vl.deployment.host.spec_per_seq_s == pytest.approx(load_stack("vllm").host.spec_per_seq_s, rel=1e-12)


@pytest.mark.parametrize("raw, field", [
    ({"property": "spec_seq_host_us", "value": 90}, "method"),
    ({"property": "spec_seq_host_us", "method": "prompt_lookup", "value": -1}, "value"),
    ({"property": "spec_seq_host_us", "method": "prompt_lookup", "value": 2e6}, "value"),  # two seconds: a unit slip
    ({"property": "spec_max_running", "method": "eagle", "value": 0}, "value"),
    ({"property": "spec_max_running", "method": "eagle", "value": 4.5}, "value"),
    ({"property": "spec_max_running", "method": "", "value": 48}, "method"),
])
def test_bad_method_regimes_are_refused_naming_the_field(raw, field):
    with pytest.raises(SpecError, match=f"'{field}'"):
        entry_from_dict({"versions": "*", "status": "code", "source": "a test", **raw}, where="t")


def test_a_regime_naming_no_drafter_family_is_refused():
    sg = load_stack("sglang")
    bad = entry_from_dict({"property": "spec_seq_host_us", "method": "ngram", "value": 90, "versions": "*",
                           "status": "code", "source": "a test"}, where="t")
    stack = replace(sg, regimes=sg.regimes + (bad,))
    with pytest.raises(SpecError, match=r"'method' = 'ngram'.*prompt_lookup"):
        resolve(_scenario(), stack_profile=stack)


def _closed_loop(users: int, **engine):
    wl = {"kind": "closed_loop", "n_users": users, "n_requests": 2 * users,
          "prompt": {"kind": "fixed", "tokens": 16}, "output": {"kind": "fixed", "tokens": 6}}
    return {"workload": wl, **({"engine": engine} if engine else {})}


def test_sglang_caps_a_speculating_launch_at_48_unless_the_launch_sets_the_limit():
    setup = build_serving(resolve(_scenario(sections=_closed_loop(64))))
    assert setup.config.max_num_seqs == SGLANG_SPEC_CAP
    assert setup.plain_config.max_num_seqs == 256  # a launch without speculation keeps the engine's default
    # the cap's note (SGLang's other note, that a prefill runs alone, is tests/test_prefill_batches.py's)
    [cap] = [n for n in setup.notes if "sequences at once" in n]
    assert "48" in cap and "max_num_seqs" in cap
    # the simulated engine never runs more than 48 speculating, and its never-drafting baseline runs all 64
    spec = run_one(setup, "static_k3", None)
    plain = run_one(setup, "never", None)
    assert spec.steps["n_running"].max() == SGLANG_SPEC_CAP
    assert plain.steps["n_running"].max() == 64
    # the launch set the limit: no cap, no note
    given = build_serving(resolve(_scenario(sections=_closed_loop(64, max_num_seqs=128))))
    assert given.config.max_num_seqs == 128 and not any("sequences at once" in n for n in given.notes)
    # vLLM has no such reset; a launch without speculation is never capped
    assert build_serving(resolve(_scenario(stack="vllm", stack_version="0.10.1",
                                           sections=_closed_loop(64)))).config.max_num_seqs == 256
    assert build_serving(resolve(_scenario(method="none", k=0, sections=_closed_loop(64)))).config.max_num_seqs == 256


def test_a_cap_above_the_limit_the_engine_already_has_changes_nothing():
    sg = load_stack("sglang")
    big = entry_from_dict({"property": "spec_max_running", "method": "prompt_lookup", "value": 1000, "versions": "*",
                           "status": "code", "source": "a test"}, where="t")
    stack = replace(_without(sg, "spec_max_running"), regimes=_without(sg, "spec_max_running").regimes + (big,))
    setup = build_serving(resolve(_scenario(sections=_closed_loop(64)), stack_profile=stack))
    assert setup.config.max_num_seqs == 256 and not any("sequences at once" in n for n in setup.notes)


HEADER = ("sweep,stack,stack_version,hardware,n_devices,target,target_dtype,method,drafter,k,tree_size,drafter_options,"
          "load_kind,load,prompt_tokens,output_tokens,max_num_seqs,context_len,speculative,tpot_s,e2e_latency_s,"
          "output_tokens_per_s,measured_speedup,tau,alpha,role,source\n")


def _sweep_csv(tmp_path, cells: list[tuple[int, int, str]]):
    rows = "".join(f"s,sglang,0.5.9,h100-sxm,1,smollm2-135m,,{'prompt_lookup' if spec else 'none'},,"
                   f"{3 if spec else ''},,,concurrency,{load},16,6,{limit},,{spec},,,{1000 + load},,,,fit,a test\n"
                   for load, spec, limit in cells)
    path = tmp_path / "sweep.csv"
    path.write_text(HEADER + rows, encoding="utf-8")
    return path


def test_a_load_sweep_says_what_limit_its_launch_set(tmp_path):
    path = _sweep_csv(tmp_path, [(64, 0, ""), (64, 1, ""), (300, 0, ""), (300, 1, ""), (32, 0, "32"), (32, 1, "32")])
    sweep = read_load_sweeps(path)[0]
    by = {(r.load, r.speculative): r for r in sweep.rows}
    assert by[(32, True)].max_num_seqs == 32 and by[(64, True)].max_num_seqs is None

    def engine(load, spec):
        return row_scenario(sweep, by[(load, spec)], speculative=spec, acceptance={"alpha": 0.6}).sections.get("engine")
    assert engine(32, True) == {"max_num_seqs": 32}  # set by the launch
    assert engine(64, True) is None  # the engine's default, which the stack lowers when it speculates
    assert engine(300, False) == {"max_num_seqs": 300}  # a load past the default: read as raised to it
    cfg = build_serving(resolve(row_scenario(sweep, by[(64, True)], speculative=True, acceptance={"alpha": 0.6})))
    assert cfg.config.max_num_seqs == SGLANG_SPEC_CAP


@pytest.mark.parametrize("cell", ["0", "2.5", "x", "70000"])
def test_a_bad_max_num_seqs_cell_is_refused_naming_line_and_column(tmp_path, cell):
    path = _sweep_csv(tmp_path, [(8, 0, ""), (8, 1, cell)])
    with pytest.raises(SpecError, match=rf"line 3: column 'max_num_seqs' = '{cell}'"):
        read_load_sweeps(path)


# ---- vLLM's async scheduler and the drafter family (an `overlap` load regime that names a method) ----------
# From 0.14 (PR #31998) vLLM overlaps a step's host work with the device's by default, with EAGLE/MTP
# speculation too, but turns the async scheduler off for the n-gram and Medusa proposers (they need the
# sampled tokens on the host: PR #24799), and for a draft model until PR #48341 (taken as 0.26.0).
def _vllm(version, method="prompt_lookup", **kw):
    extra = dict(target="smollm2-360m", drafter="smollm2-135m") if method == "draft_model" else {}
    extra.update(kw)
    return resolve(_scenario(stack="vllm", stack_version=version, method=method, **extra))


@pytest.mark.parametrize("version, method, mode", [
    ("0.28.0", "prompt_lookup", "plain"), ("0.28.0", "medusa", "plain"), ("0.28.0", "eagle", "always"),
    ("0.28.0", "none", "always"), ("0.20.0", "draft_model", "plain"), ("0.28.0", "draft_model", "always"),
    ("0.13.0", "prompt_lookup", "none"), ("0.13.0", "eagle", "none"), (None, "prompt_lookup", "none"),
])
def test_vllm_overlaps_host_work_by_release_and_drafter_family(version, method, mode):
    kw = dict(k=0) if method == "none" else {}
    op = _vllm(version, method, **kw)
    assert op.deployment.host.overlap == mode
    # a change from the stack file's [host] overlap ('none') is said, with its source
    assert ("host overlap" in op.sources) == (mode != load_stack("vllm").host.overlap)


def test_an_ngram_cycle_on_vllm_0_28_pays_its_host_work_after_the_device_by_hand():
    """Qwen3-8B-sized work at batch 32: with the async scheduler the cycle lasts max(device, host); without
    it device + host. The device part is larger here, so the two differ by exactly the cycle's host time."""
    sync = _vllm("0.28.0", target="qwen3-8b", batch_size=32, context_len=300)
    vl = load_stack("vllm")
    asynch = resolve(_scenario(stack="vllm", stack_version="0.28.0", target="qwen3-8b", batch_size=32, context_len=300),
                     stack_profile=replace(vl, regimes=tuple(e for e in vl.regimes
                                                             if e.fields.get("method") != "prompt_lookup")))
    assert (sync.deployment.host.overlap, asynch.deployment.host.overlap) == ("plain", "always")
    a, b = predict(sync).to_dict(), predict(asynch).to_dict()
    assert a["host_overlaps_device"] == {"plain": True, "speculative": False}
    assert a["cycle_host_s"] == pytest.approx(b["cycle_host_s"], rel=1e-12) and a["cycle_host_s"] > 0
    assert b["cycle_time_s"] > b["cycle_host_s"]  # the device part is the longer one
    assert a["cycle_time_s"] - b["cycle_time_s"] == pytest.approx(a["cycle_host_s"], rel=1e-9)
    assert a["target_step_time_s"] == pytest.approx(b["target_step_time_s"], rel=1e-12)  # the plain step: unchanged


def test_the_serving_simulator_reads_the_same_overlap_as_the_analytical_cycle():
    from specsim.serving.cost import ServingCost
    from specsim.serving.engine import IterationMix
    import numpy as np

    op = _vllm("0.28.0", target="qwen3-8b", batch_size=32, context_len=300)
    cost = ServingCost(op)
    b, q = op.batch_size, op.verify_q_len

    def mix(spec):
        n = q if spec else 1
        return IterationMix(np.full(b, n, dtype=np.int64), np.full(b, op.context_len, dtype=np.int64),
                            np.full(b, n, dtype=np.int64), np.full(b, op.k if spec else 0, dtype=np.int64),
                            np.zeros(b, dtype=bool), 0)
    assert cost.parts(mix(False))[3] is True and cost.parts(mix(True))[3] is False
    p = predict(op, check_memory=False).cycle
    assert cost(mix(True)) == pytest.approx(float(p.cycle_time_s), rel=1e-9)
    assert cost(mix(False)) == pytest.approx(float(p.target_step_time_s), rel=1e-9)
    # the plain step overlaps: max(device, host), not their sum; the cycle does not: device + host
    assert float(p.target_step_time_s) == pytest.approx(max(float(p.plain_device_s), float(p.plain_host_s)), rel=1e-12)
    assert float(p.cycle_time_s) == pytest.approx(float(p.device_s) + float(p.host_s), rel=1e-12)


@pytest.mark.parametrize("raw, field", [
    ({"property": "overlap", "method": "prompt_lookup", "plain": True, "speculative": False}, "plain"),
    ({"property": "overlap", "method": "prompt_lookup"}, "speculative"),
    ({"property": "overlap", "method": "", "speculative": False}, "method"),
    ({"property": "overlap", "method": "prompt_lookup", "speculative": "no"}, "speculative"),
])
def test_a_bad_method_overlap_entry_is_refused_naming_the_field(raw, field):
    with pytest.raises(SpecError, match=f"'{field}'"):
        entry_from_dict({"versions": "*", "status": "code", "source": "a test", **raw}, where="t")


def test_a_method_overlap_entry_naming_no_drafter_family_is_refused():
    vl = load_stack("vllm")
    bad = entry_from_dict({"property": "overlap", "method": "ngram", "speculative": False, "versions": "*",
                           "status": "code", "source": "a test"}, where="t")
    with pytest.raises(SpecError, match=r"'method' = 'ngram'.*prompt_lookup"):
        resolve(_scenario(stack="vllm", stack_version="0.28.0"), stack_profile=replace(vl, regimes=vl.regimes + (bad,)))
