"""Two stack behaviours that depend on the drafter family (specs.regimes `spec_seq_host_us` and
`spec_max_running`): SGLang's NGRAM worker builds each request's tree mask in a Python loop, and SGLang
runs at most 48 requests at once when a launch speculates without setting --max-running-requests.

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
    assert len(setup.notes) == 1 and "48" in setup.notes[0] and "max_num_seqs" in setup.notes[0]
    # the simulated engine never runs more than 48 speculating, and its never-drafting baseline runs all 64
    spec = run_one(setup, "static_k3", None)
    plain = run_one(setup, "never", None)
    assert spec.steps["n_running"].max() == SGLANG_SPEC_CAP
    assert plain.steps["n_running"].max() == 64
    # the launch set the limit: no cap, no note
    given = build_serving(resolve(_scenario(sections=_closed_loop(64, max_num_seqs=128))))
    assert given.config.max_num_seqs == 128 and given.notes == ()
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
    assert setup.config.max_num_seqs == 256 and setup.notes == ()


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
