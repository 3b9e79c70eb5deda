"""One operating point, every entry point: predict, the sweep, threshold, replay, the serving
simulator's cost function and the switch-off's workload view give the same plain step, drafting,
verify and cycle times (1e-9 relative) for a grid of points — every shipped scenario, every stack (and
none), chains and trees where the stack verifies them, tp 1 and 4, layer-split and tensor-parallel
stacks, and every family the serving simulator models — under each cost source (the roofline, and
`auto`: the measured operator tables where the part, stack and model are covered). The paths share
the resolver and the pricing seam but assemble the times separately (the serving cost from an
iteration's mix and its tabulated fast twin, the sweep and threshold from vectorised grids, replay from
a CSV row, the workload view from its own mix of decode rows and prompt chunks), so agreement is a
real check, not an identity."""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from specsim.calibration.replay import replay
from specsim.errors import SpecError
from specsim.presentation.sweep import run_sweep
from specsim.serving.cost import ServingCost
from specsim.serving.engine import IterationMix
from specsim.specs.scenario import load_scenario
from specsim.specs.stacks import list_stacks
from specsim.speculation.families import FAMILIES
from specsim.speculation.operating_point import resolve
from specsim.speculation.predict import predict
from specsim.analyses.switch_off import iteration_mix, switch_off_point

REL = 1e-9
STACKS = [None] + sorted(s.id for s in list_stacks())
# a stack file that lists the families it ships (a measured deployment's profile) is checked on them
OWN_METHODS = {s.id: s.methods for s in list_stacks() if s.methods}
SCENARIOS = ["seed-70b-hbm", "seed-7b-ddr5", "llama-70b-h100-chat"]


def _points():
    """(scenario, overrides) for every point, under the roofline; and under `auto` on the part that has
    measured tables (the H100 scenario: tables for vllm, vllm-v0, sglang, sglang-specforge, trtllm)."""
    return [pytest.param(*p.values, "roofline", id=f"{p.id}-roofline") for p in _grid()] + \
        [pytest.param(*p.values, "auto", id=f"{p.id}-auto") for p in _grid() if p.values[0] == "llama-70b-h100-chat"]


def _grid():
    out = []
    for name, stack, tp, tree in itertools.product(SCENARIOS, STACKS, (1, 4), (False, True)):
        base = load_scenario(name)
        over = dict(stack=stack or "", tp=tp, batch_size=8, tree_size=(base.k + 5) if tree else 0)
        if stack in OWN_METHODS and base.method not in OWN_METHODS[stack]:
            over.update(method=OWN_METHODS[stack][0], drafter="")
        if name == "seed-7b-ddr5" and tp > 1:
            continue  # a single socket: no interconnect for a tensor-parallel group
        out.append(pytest.param(name, over, id=f"{name}-{stack or 'none'}-tp{tp}-{'tree' if tree else 'chain'}"))
    # every family the serving simulator models, on the 70B chat deployment (vLLM where it ships them)
    for method in ("prompt_lookup", "medusa", "eagle", "layer_skip", "sparse_kv"):
        stack = "vllm" if "vllm" in FAMILIES[method].stacks else ("hf-eager" if "hf-eager" in FAMILIES[method].stacks else "")
        out.append(pytest.param("llama-70b-h100-chat", dict(method=method, drafter="", stack=stack, batch_size=4,
                                                             tree_size=0),
                                id=f"llama-70b-h100-chat-{method}-{stack or 'none'}"))
    return out


def _resolve_or_skip(name, over):
    try:
        op = resolve(load_scenario(name), **over)
    except SpecError as exc:  # a stack that runs on one device only, or verifies chains only: refused
        assert any(w in str(exc) for w in ("one device", "verifies chains only")), exc
        pytest.skip(str(exc))
    return op


def _homogeneous_mix(op, *, speculate: bool) -> IterationMix:
    """B sequences decoding at context L with the drafter's cache in step (no catch-up tokens): the
    analytical cycle's premise. The serving engine's catch-up (accepted drafts a drafter with its own
    cache runs again, what it missed while gated off) is a separate term of the serving cost, priced
    and tested on its own (tests/test_serving_fleet.py::test_catchup_is_priced_as_a_longer_first_drafting_pass)."""
    b, l = op.batch_size, op.context_len
    q = op.verify_q_len if speculate else 1
    dk = np.full(b, op.k if speculate else 0, dtype=np.int64)
    return IterationMix(np.full(b, q, dtype=np.int64), np.full(b, l, dtype=np.int64), np.full(b, q, dtype=np.int64),
                        dk, np.zeros(b, dtype=bool), op.tree_size if (speculate and op.is_tree) else 0)


@pytest.mark.parametrize("name, over, cost_source", _points())
def test_every_entry_point_prices_the_point_the_same(name, over, cost_source):
    op = _resolve_or_skip(name, {**over, "cost_source": cost_source})
    p = predict(op, check_memory=False).cycle
    ref = {"plain": float(p.target_step_time_s), "draft": float(p.draft_time_s), "verify": float(p.verify_time_s),
           "cycle": float(p.cycle_time_s), "speedup": float(p.speedup)}

    # the sweep, on a grid holding just this point
    sweep = {"k": [op.k], "batch_size": [op.batch_size], "context_len": [op.context_len]}
    if op.is_tree:
        sweep["tree_size"] = [op.tree_size]
    df = run_sweep(op.with_overrides(sections={"sweep": sweep}))
    row = df[df["is_tree"] == op.is_tree].iloc[0]
    got = {"plain": row["target_step_time_s"], "draft": row["draft_time_s"], "verify": row["verify_time_s"],
           "cycle": row["cycle_time_s"], "speedup": row["speedup"]}
    assert got == pytest.approx(ref, rel=REL), "sweep"

    # threshold's decode-only curve at this batch (the scenario's K)
    so = switch_off_point(op, batch_limit=max(op.batch_size, 16))
    assert so.speedup[op.batch_size - 1] == pytest.approx(ref["speedup"], rel=REL), "threshold"

    # replay, from a CSV row describing the point
    acc = op.acceptance
    here = (op.k, op.tree_size if op.is_tree else None, op.context_len, op.temperature)
    tau = acc.tau_given if acc.tau_point == here else None  # τ where it was measured, else the α it implies
    row = {"id": "pt", "hardware": op.hardware.id, "n_devices": op.deployment.n_devices,
           "stack": op.stack.id if op.stack else None, "target": op.target.id,
           "drafter": op.drafter.drafter.id if op.drafter.drafter is not None else None, "method": op.method,
           "k": op.k, "tree_size": op.tree_size, "batch_size": op.batch_size, "context_len": op.context_len,
           "temperature": op.temperature, "alpha": None if tau is not None else op.alpha,
           "tau": tau, "measured_speedup": 1.0, "target_dtype": op.scenario.target_dtype,
           "drafter_options": ";".join(f"{k}={v}" for k, v in op.drafter.options().items() if v is not None)}
    r = replay(pd.DataFrame([row]), cost_source=cost_source).table.iloc[0]
    if not op.memory.fits:  # replay refuses a configuration that does not fit, and says so
        assert "does not fit" in r["reason"]
    else:
        assert r["reason"] == "", r["reason"]
        got = {"plain": r["predicted_plain_step_s"], "draft": r["predicted_draft_s"], "verify": r["predicted_verify_s"],
               "cycle": r["predicted_cycle_s"], "speedup": r["predicted_speedup"]}
        assert got == pytest.approx(ref, rel=REL), "replay"

    # the serving simulator's cost of one iteration of B sequences decoding at context L
    if op.drafter.family.serving:
        for exact in (False, True):
            cost = ServingCost(op, exact=exact)
            plain, spec = _homogeneous_mix(op, speculate=False), _homogeneous_mix(op, speculate=True)
            got = {"plain": cost(plain), "draft": cost.draft_time_s(spec),
                   "verify": cost.target_time_s(spec) + cost.verify_extra_s(spec), "cycle": cost(spec),
                   "speedup": (op.batch_size * float(p.tokens_per_cycle) / cost(spec)) / (op.batch_size / cost(plain))}
            assert got == pytest.approx(ref, rel=REL), f"serving (exact={exact})"

    # the switch-off's workload view with no prompt beside the decoding rows: the same plain iteration and
    # cycle (its iterations are the serving simulator's, built by analyses.switch_off.iteration_mix)
    if op.drafter.family.serving and op.drafter.family.uses_k:
        cost = ServingCost(op)
        q = op.verify_q_len
        plain = cost(iteration_mix(op, b=op.batch_size, q=1, ctx=op.context_len, prefill_tokens=0, prompt_len=1,
                                   k=0, draft=False))
        cyc = cost(iteration_mix(op, b=op.batch_size, q=q, ctx=op.context_len, prefill_tokens=0, prompt_len=1,
                                 k=op.k, draft=True))
        assert {"plain": plain, "cycle": cyc} == pytest.approx({"plain": ref["plain"], "cycle": ref["cycle"]},
                                                              rel=REL), "workload view"


def test_the_grid_covers_layer_split_and_tensor_parallel_stacks_and_trees():
    kinds = {s.id: (s.multi_gpu, s.tree_verification) for s in list_stacks()}
    assert any(m == "layer_split" for m, _ in kinds.values()) and any(m == "tensor_parallel" for m, _ in kinds.values())
    assert any(t != "none" for _, t in kinds.values())
    ids = [p.id for p in _grid()]
    assert any("hf-eager-tp4-tree" in i for i in ids) and any("vllm-tp4-chain" in i for i in ids)


def test_layer_split_hop_is_in_every_path():
    """hf-eager splits layers over devices: the plain step pays (n − 1) hops, and predict and the sweep
    both include them (they disagreed before there was one resolver)."""
    op = resolve(load_scenario("seed-70b-hbm"), stack="hf-eager", tp=4)
    assert op.deployment.multi_gpu == "layer_split" and op.deployment.hop_s == pytest.approx(3 * 50e-6)
    one = resolve(load_scenario("seed-70b-hbm"), stack="hf-eager", tp=1)
    d = float(predict(op).cycle.target_step_time_s) - float(predict(one).cycle.target_step_time_s)
    assert d == pytest.approx(3 * 50e-6, rel=1e-9)  # the memory split changes nothing else


def test_the_serving_simulator_uses_the_scenarios_stack():
    """With stack = vllm the simulator's iteration costs what predict says, including the stack's
    per-cycle overhead (before the resolver it ignored the stack)."""
    op = resolve(load_scenario("llama-70b-h100-chat"), stack="vllm", batch_size=1)
    cost = ServingCost(op)
    p = predict(op).cycle
    assert cost(_homogeneous_mix(op, speculate=False)) == pytest.approx(float(p.target_step_time_s), rel=1e-9)
    assert cost.overhead_s(_homogeneous_mix(op, speculate=True)) == pytest.approx(float(p.overhead_s), rel=1e-9)
    assert float(p.overhead_s) >= 991e-6  # vLLM's cycle_overhead_us


@pytest.mark.parametrize("name", SCENARIOS)
def test_threshold_sweep_plot_and_simulate_name_the_same_switch_off(name, tmp_path, capsys):
    """`threshold` recommends a switch-off point; the sweep's batch plot marks one (and writes it to
    switch_off.json); `simulate` prints one beside its crossover. For every shipped scenario they are
    the same number with the same stated assumptions (run on a copy with a small sweep grid and a one
    minute window of its trace, so the test is quick; all three read the same copy)."""
    import json

    from specsim.cli import main

    raw = load_scenario(name).to_dict()
    raw["sweep"] = {"batch_size": [1, 2], "plots": ["speedup_vs_batch"]}
    if "workload" in raw:
        raw["workload"]["window_s"] = [0, 60]
    path = tmp_path / f"{name}.toml"
    path.write_text(_toml(raw))
    assert main(["threshold", str(path), "--json"]) == 0
    t = json.loads(capsys.readouterr().out)["recommended"]
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    capsys.readouterr()
    s = json.loads((tmp_path / "out" / "switch_off.json").read_text())
    assert (s["batch_off"], s["assumptions"]) == (t["batch_off"], t["assumptions"])
    if "workload" in raw:
        assert main(["simulate", str(path), "--rates", "1", "--policies", "never", "--json", "--quiet"]) == 0
        sim = json.loads(capsys.readouterr().out)["switch_off"]
        assert (sim["batch_off"], sim["assumptions"]) == (t["batch_off"], t["assumptions"])
        assert t["view"].startswith("under the workload")
    else:
        assert t["view"] == "decode only"


def _toml(raw: dict) -> str:
    from specsim.specs.catalog import to_toml
    return to_toml(raw)


def test_the_description_says_where_the_drafter_options_come_from(tmp_path):
    path = tmp_path / "e3.toml"
    path.write_text('name = "e3"\nhardware = "h100-sxm"\ntarget = "llama-3.1-8b"\nmethod = "eagle"\nk = 4\n'
                    'alpha = 0.7\n[drafter_options]\neagle_version = 3\n')
    text = resolve(load_scenario(path)).describe()
    line = next(t for t in text.splitlines() if "drafter options" in t)
    assert "eagle_version = 3" in line and f"{path} [drafter_options]" in line
    assert "draft_vocab_size" not in line  # unset: EAGLE-3's default applies, not printed as None
    plain = next(t for t in resolve(load_scenario(path), method="medusa").describe().splitlines()
                 if "drafter options" in t)
    assert "defaults of the family" not in line and "n_heads_medusa = 5" in plain
