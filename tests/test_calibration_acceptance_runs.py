"""Acceptance calibrated on the reference decoder (specsim.calibration.acceptance_runs) and the file a
scenario names (specsim.specs.calibrations, operating_point's `[acceptance] calibrated`)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from specsim.calibration.acceptance_runs import (AcceptanceRunConfig, _rank_counts, bernoulli_trials,
                                                 calibrate_acceptance, calibration_table, fit_dependence, fit_iid,
                                                 fit_positions, prompt_index, between_prompt_interval,
                                                 CycleRecord)
from specsim.errors import SpecError
from specsim.specs.calibrations import calibration_from_dict
from specsim.specs.catalog import to_toml


def test_bernoulli_trials_by_hand():
    # cycle 0: drafted 3, accepted 1 -> 1, 0; cycle 1: drafted 2, accepted 2 -> 1, 1; cycle 2: drafted 0 -> none
    y, idx = bernoulli_trials([3, 2, 0], [1, 2, 0])
    assert y.tolist() == [1, 0, 1, 1] and idx.tolist() == [0, 0, 1, 1]
    with pytest.raises(SpecError):
        bernoulli_trials([1], [2])


def test_iid_over_variable_draft_lengths_is_s_over_s_plus_f():
    drafted = [4, 4, 2, 0, 3]
    accepted = [4, 1, 2, 0, 0]
    f = fit_iid(drafted, accepted, level=0.95)
    # S = 4 + 1 + 2 + 0 + 0 = 7 accepted; F = cycles that stopped short of their draft: (4,1) and (3,0) = 2
    assert f.estimate == pytest.approx(7 / 9, abs=1e-12)
    assert f.ci_low < 7 / 9 < f.ci_high


def test_positions_by_hand():
    drafted = [3, 3, 3, 1]
    accepted = [0, 2, 3, 1]
    p = fit_positions(drafted, accepted, k=3, level=0.95)
    # position 1: tried by all 4, accepted by 3; position 2: tried by the 2 that drafted >= 2 and accepted
    # the first (cycles 1, 2), accepted by both; position 3: tried by those two, accepted by one
    assert [x.estimate for x in p] == pytest.approx([3 / 4, 1.0, 0.5], abs=1e-12)


def test_rank_counts_walk_the_tree():
    from specsim.decoder.drafters import Draft
    from specsim.decoder.generate import Cycle
    from specsim.speculation.trees import from_choices

    tree = from_choices(((0,), (1,), (0, 0)))  # root; node 1 rank 0, node 2 rank 1, node 3 child of 1
    nodes = {tuple(): 0}
    # tokens: root 5, rank-0 child 7, rank-1 child 8, its child (under node 1) 9
    toks = np.zeros(tree.n_nodes, np.int64)
    for i in range(tree.n_nodes):
        toks[i] = {0: 5}.get(i, 0)
    toks[:] = [5, 7, 8, 9] if tree.parents.tolist() == [-1, 0, 0, 1] else toks
    assert tree.parents.tolist() == [-1, 0, 0, 1] and tree.ranks.tolist() == [0, 0, 1, 0]
    d = Draft(toks, tree)
    # cycle 1: the rank-1 child (8) accepted, then the target's own token 3: ranks 0, 1 tried at the root
    # (0 rejected, 1 accepted); node 2 has no children
    # cycle 2: nothing accepted: both ranks at the root tried and rejected
    # cycle 3: 7 then 9 accepted: rank 0 at the root (accepted), rank 0 under node 1 (accepted), leaf
    cycles = [Cycle(n_drafted=2, n_accepted=1, n_nodes=4, draft_s=0, verify_s=0),
              Cycle(n_drafted=2, n_accepted=0, n_nodes=4, draft_s=0, verify_s=0),
              Cycle(n_drafted=2, n_accepted=2, n_nodes=4, draft_s=0, verify_s=0)]
    tokens = np.array([1, 8, 3, 4, 7, 9, 6])
    acc, tried = _rank_counts([d, d, d], cycles, tokens, 2)
    # rank 0: tried 1 (c1) + 1 (c2) + 2 (c3) = 4, accepted 2 (c3); rank 1: tried 1 (c1) + 1 (c2), accepted 1
    assert acc.tolist() == [2, 1] and tried.tolist() == [4, 2]
    # a generation cut at its requested length inside the last cycle: that cycle is left out
    acc, tried = _rank_counts([d, d, d], cycles, tokens[:6], 2)
    assert acc.tolist() == [0, 1] and tried.tolist() == [2, 2]
    del nodes


def test_dependence_recovers_a_planted_decay():
    rng = np.random.default_rng(0)
    n = 60000
    length = rng.uniform(100, 2100, n)
    temp = rng.choice([0.0, 0.7, 1.0], n)
    lam, s, a_ref = 2e-4, 0.3, 0.8
    p = a_ref * np.exp(-lam * (length - 1000) - s * temp)
    y = (rng.random(n) < p).astype(int)
    f = fit_dependence(y, length, temp, reference_context_len=1000, reference_temperature=0.0)
    # with 60,000 trials the planted values sit inside the 95 % profile intervals (a 1-in-20 miss would be
    # chance; the seed is fixed)
    assert f.context_decay_ci[0] < lam < f.context_decay_ci[1]
    assert f.temperature_slope_ci[0] < s < f.temperature_slope_ci[1]
    assert f.alpha_ref == pytest.approx(a_ref, abs=0.02)
    one = fit_dependence(y, np.full(n, 500), np.zeros(n), reference_context_len=500, reference_temperature=0)
    assert one.context_decay_per_token == 0 and one.temperature_slope == 0 and len(one.notes) == 2


def test_context_slope_is_read_within_prompts():
    # two prompts, planted with no context dependence at all: the short one is predictable (α 0.8), the
    # long one is not (α 0.4). Pooled, long context and low acceptance go together and a steep decay
    # is "found"; read within each prompt (one α per prompt), the slope is about 0
    rng = np.random.default_rng(3)
    n = 20_000
    prompt = np.repeat([0, 1], n)
    length = np.concatenate([rng.integers(250, 350, n), rng.integers(450, 550, n)])
    p = np.where(prompt == 0, 0.8, 0.4)
    y = (rng.random(2 * n) < p).astype(int)
    t = np.zeros(2 * n)
    pooled = fit_dependence(y, length, t, reference_context_len=400, reference_temperature=0.0)
    assert pooled.context_decay_ci[0] > 1e-3  # 0.8 -> 0.4 over 200 tokens: log(2) / 200 = 3.5e-3 per token
    within = fit_dependence(y, length, t, reference_context_len=400, reference_temperature=0.0, group=prompt)
    assert within.context_decay_ci[0] < 0 < within.context_decay_ci[1] and abs(within.context_decay_per_token) < 5e-4
    assert within.n_groups == 2 and within.alpha_ref == pytest.approx(0.6, abs=0.01)  # the trial-weighted mean


def test_prompt_index_from_recorded_or_from_context_steps():
    # recorded by run_drafter ...
    r = _record(0.0, [3, 3, 3, 3], [3, 0, 1, 0], [100, 104, 105, 90])
    assert prompt_index(r).tolist() == [0, 0, 0, 1]  # a step of -15 tokens starts prompt 1
    # ... or read off the context: within a prompt a cycle adds 1..K + 1 = 4 tokens; +40 is a new prompt
    r2 = _record(0.0, [3, 3, 3], [3, 1, 0], [100, 104, 144])
    assert prompt_index(r2).tolist() == [0, 0, 1]
    r3 = CycleRecord(drafter="prompt-lookup", workload="code-edit", temperature=0.0, verify="greedy", k=3,
                     drafted=np.array([3, 3]), accepted=np.array([3, 3]), context_len=np.array([100, 104]),
                     prompt=np.array([0, 1]))
    assert prompt_index(r3).tolist() == [0, 1]


def test_between_prompt_interval_by_hand():
    # three prompts that agree (60/40 each): no between-prompt variance, the interval ~ the pooled one
    same = between_prompt_interval([60, 60, 60], [40, 40, 40], level=0.95)
    # the half-count logit of each: (60 + 0.5) / (40 + 0.5) -> 60.5 / 101
    assert same["between_prompt_sd_logit"] == 0.0 and same["alpha"] == pytest.approx(60.5 / 101, rel=1e-12)
    # ... and three that do not (90, 50, 10 of 100): DerSimonian-Laird by hand on the logit scale
    s, f = np.array([90, 50, 10.0]), np.array([10, 50, 90.0])
    y = np.log((s + 0.5) / (f + 0.5))
    v = 1 / (s + 0.5) + 1 / (f + 0.5)
    w = 1 / v
    q = np.sum(w * (y - np.sum(w * y) / w.sum()) ** 2)
    tau2 = (q - 2) / (w.sum() - (w ** 2).sum() / w.sum())
    r = between_prompt_interval(s, f, level=0.95)
    assert r["between_prompt_sd_logit"] == pytest.approx(np.sqrt(tau2), rel=1e-12)
    mu = np.sum(y / (v + tau2)) / np.sum(1 / (v + tau2))
    assert r["alpha"] == pytest.approx(1 / (1 + np.exp(-mu)), rel=1e-12)
    # with 2 degrees of freedom and prompts this far apart, the interval spans most of (0, 1)
    assert r["ci_low"] < 0.1 and r["ci_high"] > 0.9
    assert between_prompt_interval([5], [5], level=0.95) is None  # one prompt: no spread to read


def _record(temperature, drafted, accepted, ctx):
    return CycleRecord(drafter="prompt-lookup", workload="code-edit", temperature=temperature, verify="greedy", k=3,
                       drafted=np.array(drafted), accepted=np.array(accepted), context_len=np.array(ctx))


def test_calibration_table_round_trips_through_the_reader():
    recs = [_record(0.0, [3, 3, 0, 2, 3], [3, 1, 0, 2, 0], [100, 104, 106, 107, 110]),
            _record(1.0, [3, 3, 3], [0, 1, 2], [100, 101, 103]),
            _record(0.7, [3, 3], [0, 0], [100, 101])]  # position 2 never reached: a nan in that run's row
    t = calibration_table(recs, target_id="smollm2-135m-q4_1", name="x/prompt-lookup/code-edit", command="test",
                          level=0.95, k=3)
    # T = 0: S = 3 + 1 + 2 + 0 = 6, F = (3,1), (3,0) = 2  ->  α = 6 / 8
    assert t["iid"]["alpha"] == pytest.approx(0.75, abs=1e-12)
    assert t["reference"]["temperature"] == 0.0 and t["reference"]["context_len"] == 105.5  # median of drafting cycles
    import tomllib

    cal = calibration_from_dict(tomllib.loads(to_toml(t)), where="t.toml", name="x/prompt-lookup/code-edit")
    assert cal.alpha == pytest.approx(0.75) and cal.method == "prompt_lookup" and cal.temperatures == (0.0, 0.7, 1.0)
    # the runs do not vary the context apart from the response: its slope is reported, the one applied is 0
    assert cal.context_decay_per_token == 0.0 and cal.context_decay_ci == (0.0, 0.0)
    assert cal.within_prompt_context_slope == pytest.approx(t["dependence"]["within_prompt_context_slope"])
    assert "not identified" in t["notes"]
    assert math.isnan(cal.runs[2]["conditional"][1])
    assert cal.coverage_warnings(context_len=105, temperature=0.0, method="prompt_lookup") == []
    w = cal.coverage_warnings(context_len=2048, temperature=0.5, method="layer_skip", workload="prose", k=8)
    assert len(w) == 5 and "2048" in w[0] and "between" in w[1]


def test_scenario_names_a_calibration(tmp_path):
    from specsim.specs.scenario import scenario_from_dict
    from specsim.speculation.operating_point import resolve

    recs = [_record(0.0, [3] * 8, [3, 3, 1, 2, 3, 0, 3, 2], list(range(100, 108))),
            _record(1.0, [3] * 4, [0, 1, 2, 3], [100, 101, 103, 105])]
    t = calibration_table(recs, target_id="smollm2-135m-q4_1", name="t", command="test", level=0.95, k=3)
    path = tmp_path / "cal.toml"
    path.write_text(to_toml(t))
    base = dict(hardware="ddr5-5600-2ch", target="smollm2-135m", method="prompt_lookup", k=3, context_len=104)
    op = resolve(scenario_from_dict({**base, "acceptance": {"calibrated": str(path), "workload": "prose"}}))
    # at the reference temperature 0, moved along the fitted context decay from the reference context
    lam, ref = t["dependence"]["context_decay_per_token"], t["reference"]["context_len"]
    assert op.alpha == pytest.approx(t["iid"]["alpha"] * math.exp(-lam * (104 - ref)), rel=1e-12)
    assert op.acceptance.calibration.alpha_low < op.alpha < op.acceptance.calibration.alpha_high
    assert op.acceptance.workload == "prose"
    op2 = resolve(scenario_from_dict({**base, "acceptance": f"calibrated:{path}"}))
    assert op2.alpha == op.alpha
    with pytest.raises(SpecError, match="alpha"):
        resolve(scenario_from_dict({**base, "alpha": 0.5, "acceptance": {"calibrated": str(path)}}))
    with pytest.raises(SpecError, match="not found"):
        resolve(scenario_from_dict({**base, "acceptance": {"calibrated": "no/such/calibration"}}))
    with pytest.raises(SpecError, match="workload"):
        resolve(scenario_from_dict({**base, "alpha": 0.5, "acceptance": {"workload": "prose"}}))


def test_a_calibrated_chain_keeps_its_measured_shape(tmp_path):
    """τ of a calibrated chain from its per-position rates (worked by hand from the cycles), moved with
    α as ratios, the same in predict, the grid and the serving engine's rates; past the measured
    positions the last ratio holds."""
    from specsim.specs.scenario import scenario_from_dict
    from specsim.speculation.operating_point import resolve
    from specsim.speculation.predict import grid, tokens_per_cycle_at, with_alpha

    recs = [_record(0.0, [3] * 8, [3, 3, 1, 2, 3, 0, 3, 2], list(range(100, 108)))]
    t = calibration_table(recs, target_id="smollm2-135m-q4_1", name="t", command="test", level=0.95, k=3)
    path = tmp_path / "cal.toml"
    path.write_text(to_toml(t))
    # by hand: 7 of 8 cycles pass position 1, 6 of those 7 position 2, 4 of those 6 position 3;
    # accepted 17 of 17 + 4 trials -> i.i.d. α = 17/21
    cond, alpha_cal = np.array([7 / 8, 6 / 7, 4 / 6]), 17 / 21
    assert t["iid"]["alpha"] == pytest.approx(alpha_cal, rel=1e-12)
    np.testing.assert_allclose(t["conditional"]["rates"], cond, rtol=1e-12)
    base = dict(hardware="ddr5-5600-2ch", target="smollm2-135m", method="prompt_lookup", k=3, context_len=104,
                acceptance={"calibrated": str(path)},
                workload={"kind": "poisson", "n_requests": 4, "prompt": {"kind": "fixed", "tokens": 64},
                          "output": {"kind": "fixed", "tokens": 16}, "rate_per_s": 1.0})
    op = resolve(scenario_from_dict(base))
    a = op.alpha

    def by_hand(alpha, k):
        r = np.concatenate([cond / alpha_cal, np.repeat(cond[-1] / alpha_cal, max(0, k - 3))])[:k]
        return 1.0 + np.cumprod(np.minimum(1.0, alpha * r)).sum()

    assert t["dependence"]["context_decay_per_token"] == 0.0 and a == pytest.approx(alpha_cal, rel=1e-12)
    assert tokens_per_cycle_at(op) == pytest.approx(1 + 17 / 8, rel=1e-12)  # the cycles' mean: (3+3+1+2+3+0+3+2)/8 + 1
    for k in (1, 2, 3, 5):
        assert tokens_per_cycle_at(op, k=k) == pytest.approx(by_hand(a, k), rel=1e-12)
    # the i.i.d. α alone would give (1 − α^4)/(1 − α) = 3.00 at K = 3, not the 3.125 the cycles emitted
    assert abs((1 - alpha_cal ** 4) / (1 - alpha_cal) - (1 + 17 / 8)) > 0.1
    g = grid(op, k=[1, 2, 3, 5])
    np.testing.assert_allclose(g.tokens_per_cycle.ravel(), [by_hand(a, k) for k in (1, 2, 3, 5)], rtol=1e-12)
    low = with_alpha(op, 0.5)  # a band end keeps the shape at its own level
    assert tokens_per_cycle_at(low) == pytest.approx(by_hand(0.5, 3), rel=1e-12)
    np.testing.assert_allclose(grid(low, k=[3]).tokens_per_cycle.ravel(), [by_hand(0.5, 3)], rtol=1e-12)
    # the serving engine draws from the same rates (it repeats the last past K)
    from specsim.serving.setup import build_serving

    np.testing.assert_allclose(build_serving(op).acceptance, np.minimum(1.0, a * cond / alpha_cal), rtol=1e-12)
    # a written α has no measured shape
    written = resolve(scenario_from_dict({k: v for k, v in base.items() if k != "acceptance"} | {"alpha": a}))
    assert written.acceptance.position_ratios is None and tokens_per_cycle_at(written) == pytest.approx(
        (1 - a ** 4) / (1 - a), rel=1e-12)


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    from specsim.decoder.testing import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", n_ctx=4096)


def test_calibrate_on_the_tiny_model(tiny_path):
    cfg = AcceptanceRunConfig(model=tiny_path, drafters=("prompt-lookup", "tree"), workloads=("code-edit",),
                              temperatures=(0.0, 1.0), k=3, layers=2, n_prompts=1, tokens=12)
    res = calibrate_acceptance(cfg, command="test", target_id="tiny", name_prefix="tiny")
    assert set(res.tables) == {"tiny/prompt-lookup/code-edit", "tiny/tree/code-edit"}
    for t in res.tables.values():
        a = t["iid"]
        assert 0 <= a["ci_low"] <= a["alpha"] <= a["ci_high"] <= 1 and a["n_cycles"] > 0
        assert [r["temperature"] for r in t["runs"]] == [0.0, 1.0]
    assert "rank" in res.tables["tiny/tree/code-edit"]
    with pytest.raises(SpecError, match="drafters"):
        AcceptanceRunConfig(drafters=("nope",))
    assert math.isfinite(res.tables["tiny/tree/code-edit"]["dependence"]["temperature_slope"])


def test_records_resume(tiny_path, tmp_path):
    cfg = AcceptanceRunConfig(model=tiny_path, drafters=("prompt-lookup",), workloads=("code-edit",),
                              temperatures=(0.0,), k=3, n_prompts=1, tokens=8)
    rec = tmp_path / "records.jsonl"
    a = calibrate_acceptance(cfg, command="test", target_id="tiny", name_prefix="tiny", records=rec)
    said = []
    b = calibrate_acceptance(cfg, command="test", target_id="tiny", name_prefix="tiny", records=rec,
                             progress=said.append)
    assert said == []  # read back, not run again
    import json

    same = lambda t: json.dumps(t, sort_keys=True, default=str)  # noqa: E731  (nan != nan in a plain ==)
    assert same(a.tables) == same(b.tables) and len(rec.read_text().splitlines()) == 1


def test_dependence_fit_with_many_prompts_matches_a_plain_simplex_fit():
    """The quasi-Newton fit on the analytic gradient against a plain twin: the same likelihood written
    out here, maximised by Nelder-Mead (slow but derivative-free), on 4 prompts; and on 24 prompts (26
    parameters, where the simplex search stalls) the planted slopes lie inside the fitted intervals."""
    from scipy.optimize import minimize
    from scipy.special import expit, logit

    rng = np.random.default_rng(5)
    n_g, per = 4, 1500
    g = np.repeat(np.arange(n_g), per)
    a_g = np.array([0.3, 0.5, 0.7, 0.85])
    length = 200 + np.concatenate([np.sort(rng.integers(0, 400, per)) for _ in range(n_g)])
    temp = rng.choice([0.0, 0.7, 1.0], n_g * per)
    lam, s = 5e-4, 0.4
    y = (rng.random(n_g * per) < a_g[g] * np.exp(-lam * (length - 400) - s * temp)).astype(int)
    f = fit_dependence(y, length, temp, reference_context_len=400, reference_temperature=0.0, group=g)

    def nll(th):
        p = np.clip(expit(th[:n_g])[g] * np.exp(-th[n_g] * 1e-3 * (length - 400) - th[n_g + 1] * temp), 1e-12, 1 - 1e-12)
        return -np.sum(y * np.log(p) + (1 - y) * np.log1p(-p))
    twin = minimize(nll, np.r_[logit(a_g), 0.0, 0.0], method="Nelder-Mead",
                    options=dict(xatol=1e-10, fatol=1e-10, maxiter=100_000, maxfev=100_000))
    assert f.context_decay_per_token == pytest.approx(twin.x[n_g] * 1e-3, rel=2e-3)
    assert f.temperature_slope == pytest.approx(twin.x[n_g + 1], rel=2e-3)
    assert f.alpha_ref == pytest.approx(float(np.mean(expit(twin.x[:n_g]))), rel=1e-4)  # equal trials per prompt

    n_g = 24
    g = np.repeat(np.arange(n_g), 400)
    a_g = rng.uniform(0.3, 0.9, n_g)
    length = 200 + np.concatenate([np.sort(rng.integers(0, 400, 400)) for _ in range(n_g)])
    temp = rng.choice([0.0, 0.7, 1.0], g.size)
    y = (rng.random(g.size) < a_g[g] * np.exp(-lam * (length - 400) - s * temp)).astype(int)
    f = fit_dependence(y, length, temp, reference_context_len=400, reference_temperature=0.0, group=g)
    assert f.n_groups == 24
    assert f.context_decay_ci[0] < lam < f.context_decay_ci[1]
    assert f.temperature_slope_ci[0] < s < f.temperature_slope_ci[1]
