"""A load calibration's device terms: where they apply and that every view prices them alike.

The terms (`cost.deployment.Deployment`: device × device_scale + device_per_seq_s per sequence +
device_per_token_s per token the iteration emits) are planted by hand; the expected numbers are
built from the uncalibrated operating point's own pieces with that formula, written out here
(device and host of each iteration, τ tokens a speculating sequence emits), so a test fails if any
view — the serving simulator's iteration, the analytical cycle, the switch-off — drops or doubles a term.
"""
from dataclasses import replace

import numpy as np
import pytest

from specsim.calibration.load import LoadRow, LoadSweep
from specsim.calibration.load_fit import (Terms, calibrated_stack, fit_sweep, predict_sweep, stack_token_share,
                                         sweep_priced_by)
from specsim.cost.deployment import Deployment
from specsim.cost.pricing import source_for, target_step_time
from specsim.errors import SpecError
from specsim.serving.cost import ServingCost
from specsim.serving.mix import IterationMix
from specsim.specs.regimes import entry_from_dict, resolve_regimes
from specsim.specs.scenario import Scenario
from specsim.specs.stacks import load_stack
from specsim.speculation.operating_point import resolve
from specsim.speculation.predict import grid
from specsim.analyses.switch_off import switch_off_point

PLANTED = Terms(device_scale=1.5, device_per_seq_s=10e-6, device_per_token_s=30e-6)
TAU, K, B, CTX = 2.5, 3, 8, 100


def _op(terms: Terms | None, *, stack="vllm-v0", speculative=True, tau=TAU, priced_by=None):
    """The point with `terms` planted as a load calibration fitted through the source that prices it
    here (priced_by: another source's name, to plant a calibration of another source)."""
    st = load_stack(stack)
    kw = dict(method="prompt_lookup", k=K, tau=tau) if speculative else dict(method="none", k=0)
    sc = Scenario(name="t", hardware="h100-sxm", target="llama-3.2-1b", tp=1, batch_size=B, context_len=CTX, **kw)
    if terms is not None:
        plain = resolve(sc, stack_profile=st)
        kind = source_for(plain.target, plain.deployment, target=True).kind
        st = calibrated_stack(st, terms, priced_by=priced_by or kind)
    return resolve(sc, stack_profile=st)


def test_a_calibration_holds_on_the_source_it_was_fitted_through_only():
    """Terms fitted through one source absorbed that source's error: planted as fitted on the other
    source, they are left out of the deployment, and the point says so (op.sources['calibration'])."""
    here = source_for(_op(None).target, _op(None).deployment, target=True).kind
    other = "roofline" if here == "measured" else "measured"
    op = _op(PLANTED, priced_by=other)
    assert not op.deployment.calibrated
    assert f"priced by the {other} source" in op.sources["calibration"] and "left out" in op.sources["calibration"]
    assert _op(PLANTED).deployment.calibrated


def _mix(speculative: bool, b: int = B) -> IterationMix:
    q = K + 1 if speculative else 1
    k = K if speculative else 0
    return IterationMix(np.full(b, q, dtype=np.int64), np.full(b, CTX, dtype=np.int64), np.full(b, q, dtype=np.int64),
                        np.full(b, k, dtype=np.int64), np.zeros(b, dtype=bool), 0, n_spec=b if speculative else 0,
                        uniform_q=q)


def test_the_deployment_carries_a_calibration_and_refuses_a_bad_term():
    dep = _op(PLANTED).deployment
    assert (dep.device_scale, dep.device_per_seq_s, dep.device_per_token_s) == pytest.approx((1.5, 10e-6, 30e-6))
    assert not _op(None).deployment.calibrated
    # 2 ms of device work over 4 sequences emitting 10 tokens: 1.5 × 2 ms + 4 × 10 µs + 10 × 30 µs
    assert dep.calibrated_device_s(2e-3, n_seqs=4, n_emitted=10) == pytest.approx(3e-3 + 40e-6 + 300e-6)
    with pytest.raises(SpecError, match="'device_per_token_s'"):
        replace(dep, device_per_token_s=-1e-6)
    with pytest.raises(SpecError, match="'device_scale'"):
        replace(dep, device_scale=0.0)


@pytest.mark.parametrize("speculative", [False, True])
def test_the_serving_iteration_pays_the_terms_per_sequence_and_per_emitted_token(speculative):
    """B sequences: a plain iteration emits B tokens, a speculating one B·τ (the τ the scenario gives)."""
    plain_dev, plain_host, _, _ = ServingCost(_op(None)).parts(_mix(speculative))
    dev, host, _, _ = ServingCost(_op(PLANTED)).parts(_mix(speculative))
    emitted = B * (TAU if speculative else 1.0)
    assert dev == pytest.approx(1.5 * plain_dev + B * 10e-6 + emitted * 30e-6, rel=1e-12)
    assert host == pytest.approx(plain_host, rel=1e-12)  # host work untouched


def test_the_analytical_cycle_and_the_serving_iteration_agree_on_a_calibrated_stack():
    op = _op(PLANTED)
    g = grid(op, k=[K], batch_size=[B], context_len=[CTX])
    cost = ServingCost(op)
    assert float(g.cycle_time_s.ravel()[0]) == pytest.approx(cost(_mix(True)), rel=1e-9)
    assert float(g.target_step_time_s.ravel()[0]) == pytest.approx(cost(_mix(False)), rel=1e-9)


def test_the_switch_off_reads_the_calibrated_terms():
    """The decode-only speedup at each batch, rebuilt by hand from the uncalibrated pieces (vllm-v0 adds
    host to device: no overlap), and the switch-off where it first falls below 1 (τ = 1.6: speculation
    loses within 256 sequences, and a per-token cost moves where)."""
    terms = Terms(device_scale=1.2, device_per_seq_s=0.0, device_per_token_s=300e-6)  # a heavy per-token cost
    tau = 1.6
    cal, raw = _op(terms, tau=tau), _op(None, tau=tau)
    dep = raw.deployment
    bs = np.arange(1, 257)
    g = grid(raw, k=[K], batch_size=list(bs), context_len=[CTX])
    cycle0 = g.cycle_time_s.ravel()
    q = K + 1
    host_s = dep.host_time_s(n_seqs=bs, n_tokens=bs * q, n_spec_seqs=bs, n_draft_tokens=bs * (q - 1), n_draft_passes=0)
    dev_s = cycle0 - host_s
    dev_p = target_step_time(raw.target, dep, batch_size=bs, q_len=1, context_len=CTX)
    host_p = dep.host_time_s(n_seqs=bs, n_tokens=bs)
    plain = 1.2 * dev_p + 300e-6 * bs + host_p
    spec = 1.2 * dev_s + 300e-6 * bs * tau + host_s
    by_hand = (tau / spec) / (1.0 / plain)
    got = grid(cal, k=[K], batch_size=list(bs), context_len=[CTX]).speedup.ravel()
    np.testing.assert_allclose(got, by_hand, rtol=1e-9)
    below = bs[by_hand < 1.0]
    assert below.size, "the planted per-token cost should make speculation lose at some batch"
    off = switch_off_point(cal, batch_limit=256, max_batch_speculative=10_000)
    assert off.batch_off == int(below[0])
    assert switch_off_point(raw, batch_limit=256, max_batch_speculative=10_000).batch_off != off.batch_off


def test_the_per_token_share_regime_reads_checks_and_resolves():
    e = entry_from_dict({"property": "per_token_share", "value": 0.75, "versions": ">=0.5", "status": "fitted",
                         "source": "a test"}, where="t")
    assert resolve_regimes([e], version="0.5.5").per_token_share == 0.75
    assert resolve_regimes([e], version="0.4.6").per_token_share is None
    for bad in (1.5, -0.1, "all"):
        with pytest.raises(SpecError, match="'value'"):
            entry_from_dict({"property": "per_token_share", "value": bad, "versions": "*", "status": "fitted",
                             "source": "a test"}, where="t")
    st = replace(load_stack("vllm"), regimes=(e,))
    assert stack_token_share(st, "0.6") == 0.75 and stack_token_share(st, None) == 0.0


def _sweep(loads=(1, 2, 4)):
    rows, line = [], 2
    for spec in (False, True):
        for ld in loads:
            rows.append(LoadRow(sweep="planted", line=line, load=float(ld), speculative=spec, role="fit",
                                prompt_tokens=16, output_tokens=16, n_requests=2 * ld, output_tokens_per_s=1.0,
                                tau=2.2 if spec else None))
            line += 1
    return LoadSweep(name="planted", stack="vllm", hardware="h100-sxm", n_devices=1, target="llama-3.2-1b",
                     load_kind="concurrency", method="prompt_lookup", k=3, rows=tuple(rows), file="planted.csv")


def test_a_planted_per_token_cost_is_recovered_and_predicts_the_loads_the_fit_never_saw():
    """Rows 'measured' with 10 µs a sequence and 20 µs a token: the plain curve fixes their sum (30 µs;
    a plain sequence emits one token), the share 2/3 splits it, and the speculative loads the fit never
    saw come out right; with share 0 (all of it a sequence) they do not."""
    planted = Terms(device_scale=1.6, device_per_seq_s=10e-6, device_per_token_s=20e-6, cycle_s=2e-3)
    sw = _sweep()
    priced = sweep_priced_by(sw, load_stack("vllm"))  # planted terms hold on the source that prices the sweep
    truth = predict_sweep(sw, stack=calibrated_stack(load_stack("vllm"), planted, priced_by=priced))
    rows = [replace(r, output_tokens_per_s=t["predicted_output_tokens_per_s"], tpot_s=t["predicted_tpot_s"],
                    role="fit" if (not r.speculative or r.load == 1) else "check")
            for r, (_, t) in zip(sw.rows, truth.iterrows())]
    sw = replace(sw, rows=tuple(rows))
    fit = fit_sweep(sw, token_share=2.0 / 3.0)
    assert fit.token_share == pytest.approx(2.0 / 3.0)
    assert fit.terms.device_per_seq_s == pytest.approx(10e-6, rel=3e-2)
    assert fit.terms.device_per_token_s == pytest.approx(20e-6, rel=3e-2)
    assert fit.terms.cycle_s == pytest.approx(2e-3, rel=3e-2)
    assert fit.check_error < 2e-3
    wrong = fit_sweep(sw, token_share=0.0)
    assert wrong.terms.device_per_seq_s == pytest.approx(30e-6, rel=3e-2) and wrong.terms.device_per_token_s == 0.0
    assert wrong.check_error > 5 * fit.check_error
    with pytest.raises(SpecError, match="token share 1.5"):
        fit_sweep(sw, token_share=1.5)


def _planted_rows(name: str, terms: Terms, loads=(1, 2, 4)) -> LoadSweep:
    sw = replace(_sweep(loads), name=name)
    sw = replace(sw, rows=tuple(replace(r, sweep=name) for r in sw.rows))
    priced = sweep_priced_by(sw, load_stack("vllm"))  # planted terms hold on the source that prices the sweep
    truth = predict_sweep(sw, stack=calibrated_stack(load_stack("vllm"), terms, priced_by=priced))
    rows = [replace(r, output_tokens_per_s=t["predicted_output_tokens_per_s"], tpot_s=t["predicted_tpot_s"],
                    role="fit" if (not r.speculative or r.load == min(loads)) else "check")
            for r, (_, t) in zip(sw.rows, truth.iterrows())]
    return replace(sw, rows=tuple(rows))


def test_leave_one_source_out_predicts_each_sweep_at_the_share_the_others_chose():
    """Sweep A is planted paying its 30 µs per emitted token, sweep B per sequence: left out, A gets the
    share B prefers (0) and B the share A prefers (1) — a sweep's own rows never choose its share.
    (The planted rows cite no source: each sweep is its own.)"""
    from specsim.calibration.load_share import leave_one_source_out

    a = _planted_rows("a", Terms(device_scale=1.3, device_per_token_s=30e-6, cycle_s=2e-3))
    b = _planted_rows("b", Terms(device_scale=1.3, device_per_seq_s=30e-6, cycle_s=2e-3), loads=(1, 3, 6))
    fit = leave_one_source_out([a, b], shares=(1.0, 0.0))
    assert fit.shares == (0.0, 1.0)
    assert fit.chosen == {"a": 0.0, "b": 1.0}
    assert fit.sources == {"a": "a", "b": "b"} and fit.groups == {"a": 0, "b": 1}
    grid = {(g["sweep"], g["share"]): g["median_abs_error"] for g in fit.grid()}
    assert grid[("a", 1.0)] < grid[("a", 0.0)] and grid[("b", 0.0)] < grid[("b", 1.0)]
    loo = {f.sweep.name: f.token_share for f in fit.loo.fits}
    assert loo == {"a": 0.0, "b": 1.0}
    assert fit.loo.summary()["median_relative_error"] > min(grid.values())  # the wrong share, honestly reported
    with pytest.raises(SpecError, match="at least 2"):
        leave_one_source_out([a], shares=(0.0, 1.0))
    with pytest.raises(SpecError, match=r"shares in \[0, 1\]"):
        leave_one_source_out([a, b], shares=(0.0, 2.0))


def _planted_with_extra(name: str, extra_us: float, loads=(1, 2, 4)) -> LoadSweep:
    """A sweep whose speculating sequences pay `extra_us` more a cycle than the vllm stack says."""
    from specsim.calibration.load_fit import with_spec_seq_extra

    terms = Terms(device_scale=1.2, device_per_seq_s=5e-6, cycle_s=1e-3)
    sw = replace(_sweep(loads), name=name)
    sw = replace(sw, rows=tuple(replace(r, sweep=name) for r in sw.rows))
    base = with_spec_seq_extra(load_stack("vllm"), extra_us)
    assert base.host.spec_per_seq_s == pytest.approx(load_stack("vllm").host.spec_per_seq_s + extra_us * 1e-6)
    truth = predict_sweep(sw, stack=calibrated_stack(base, terms, priced_by=sweep_priced_by(sw, base)))
    rows = [replace(r, output_tokens_per_s=t["predicted_output_tokens_per_s"], tpot_s=t["predicted_tpot_s"],
                    role="fit" if (not r.speculative or r.load == min(loads)) else "check")
            for r, (_, t) in zip(sw.rows, truth.iterrows())]
    return replace(sw, rows=tuple(rows))


def test_the_extra_cost_a_speculating_sequence_is_chosen_by_the_other_sources():
    """Sweep A is planted with 400 µs more host work a speculating sequence a cycle, B with none. One
    speculative fit load cannot tell that cost from a fixed one a cycle (the lowest load absorbs it), so
    at the wrong extra the higher loads miss; at its own extra each sweep's check rows come back. Left
    out by source, A is predicted at B's choice (0) and B at A's (400): a sweep never picks its own."""
    from specsim.calibration.load_fit import fit_sweep
    from specsim.calibration.load_share import leave_one_source_out

    a = _planted_with_extra("a", 400.0)
    b = _planted_with_extra("b", 0.0, loads=(1, 3, 6))
    right, wrong = fit_sweep(a, token_share=0.0, spec_seq_extra_us=400.0), fit_sweep(a, token_share=0.0)
    assert right.spec_seq_extra_us == 400.0 and right.check_error < 2e-3
    assert wrong.check_error > 10 * right.check_error
    fit = leave_one_source_out([a, b], shares=(0.0,), extras_us=(400.0, 0.0))
    assert fit.extras_us == (0.0, 400.0) and fit.points == [(0.0, 0.0), (0.0, 400.0)]
    assert fit.chosen_extra == {"a": 0.0, "b": 400.0} and fit.chosen == {"a": 0.0, "b": 0.0}
    assert {f.sweep.name: f.spec_seq_extra_us for f in fit.loo.fits} == {"a": 0.0, "b": 400.0}
    grid = {(g["sweep"], g["spec_seq_extra_us"]): g["median_abs_error"] for g in fit.grid()}
    assert grid[("a", 400.0)] < grid[("a", 0.0)] and grid[("b", 0.0)] < grid[("b", 400.0)]
    with pytest.raises(SpecError, match="by_share"):
        fit.by_share
    with pytest.raises(SpecError, match=r"extra host cost a speculating sequence \[-1.0\] us"):
        leave_one_source_out([a, b], shares=(0.0,), extras_us=(-1.0,))
    with pytest.raises(SpecError, match="3 shares x 8 extras = 24 points; at most 21"):
        leave_one_source_out([a, b], shares=(0.0, 0.5, 1.0), extras_us=tuple(range(0, 80, 10)))


def _cited(sw: LoadSweep, source: str) -> LoadSweep:
    return replace(sw, rows=tuple(replace(r, source=source) for r in sw.rows))


def test_sibling_sweeps_of_one_source_are_left_out_together():
    """A and A2 cite one GitHub issue (in two spellings), B another issue of the same repository. A and A2
    are planted paying per emitted token, B per sequence. Left out one sweep at a time, A's share would
    be chosen by A2 and B together, and A2's three check rows outvote B's two (share 1, checked below
    from the scan itself); left out by source, A's share is chosen by B alone (0), as is A2's."""
    import numpy as np

    from specsim.calibration.load_share import _median_check_error, leave_one_source_out

    tok = Terms(device_scale=1.3, device_per_token_s=30e-6, cycle_s=2e-3)
    a = _cited(_planted_rows("a", tok), "foo/bar issue #7 'a thread', table 1")
    a2 = _cited(_planted_rows("a2", tok, loads=(1, 2, 4, 8)), "second table of github.com/Foo/Bar/issues/7")
    b = _cited(_planted_rows("b", Terms(device_scale=1.3, device_per_seq_s=30e-6, cycle_s=2e-3), loads=(1, 3, 6)),
               "foo/bar issue #8")
    fit = leave_one_source_out([a, a2, b], shares=(0.0, 1.0))
    assert fit.sources == {"a": "foo/bar#7", "a2": "foo/bar#7", "b": "foo/bar#8"}
    assert fit.groups["a"] == fit.groups["a2"] != fit.groups["b"]
    assert fit.chosen == {"a": 0.0, "a2": 0.0, "b": 1.0}
    # what leaving A alone out would have chosen: the share least wrong over A2's and B's check rows
    by_sweep = {s: [f for f in fit.by_share[s].fits if f.sweep.name != "a"] for s in fit.shares}
    sweep_out = min(fit.shares, key=lambda s: _median_check_error(by_sweep[s]))
    assert sweep_out == 1.0 and np.isfinite(_median_check_error(by_sweep[0.0]))
    with pytest.raises(SpecError, match="all share one source"):
        leave_one_source_out([a, a2], shares=(0.0, 1.0))


def test_the_cli_takes_a_share_and_refuses_a_bad_one(tmp_path, capsys):
    import json

    from specsim.calibration.load import COLUMNS
    from specsim.cli import main

    sw = _planted_rows("s", Terms(device_scale=1.3, device_per_token_s=30e-6))
    recs = []
    for r in sw.rows:
        recs.append({c: "" for c in COLUMNS} | {
            "sweep": "s", "stack": "vllm", "hardware": "h100-sxm", "n_devices": 1, "target": "llama-3.2-1b",
            "method": "prompt_lookup" if r.speculative else "none", "k": 3 if r.speculative else "",
            "load_kind": "concurrency", "load": int(r.load), "prompt_tokens": 16, "output_tokens": 16,
            "speculative": int(r.speculative), "output_tokens_per_s": r.output_tokens_per_s,
            "tau": r.tau if r.speculative else "", "role": r.role, "source": "by hand", "n_requests": r.n_requests})
    import pandas as pd

    csv = tmp_path / "s.csv"
    pd.DataFrame(recs).to_csv(csv, index=False)
    assert main(["calibrate", "load", str(csv), "--json", "--token-share", "0.5"]) == 0
    out = json.loads(capsys.readouterr().out)
    s = out["sweeps"][0]
    assert s["token_share"] == 0.5
    assert s["device_per_token_us"] == pytest.approx(s["device_per_seq_us"], rel=1e-9)  # the sum split in half
    assert main(["calibrate", "load", str(csv), "--token-share", "1.5"]) == 2
    assert "--token-share 1.5: expected a share in [0, 1]" in capsys.readouterr().err
    assert main(["calibrate", "load", str(csv), "--token-share-loo", "0,1"]) == 2  # one sweep: nothing to leave out
    assert "at least 2 needed" in capsys.readouterr().err
    assert main(["calibrate", "load", str(csv), "--spec-seq-loo", "0,40"]) == 2
    assert "--spec-seq-loo: scanned jointly with the per-token share" in capsys.readouterr().err
    assert main(["calibrate", "load", str(csv), "--token-share", "1", "--spec-seq-loo", "0,-5"]) == 2
    assert "--spec-seq-loo '0,-5': -5 is out of range" in capsys.readouterr().err
    assert main(["calibrate", "load", str(csv), "--token-share", "1", "--spec-seq-loo", "0,40"]) == 2
    assert "--spec-seq-loo: 1 sweep given, at least 2 needed" in capsys.readouterr().err


def test_a_tree_sweep_writes_the_alpha_whose_tree_gives_its_tau(tmp_path):
    """A τ given for a tree holds only where it was measured; the written scenario gives the α that the
    tree formula turns into that τ, so the switch-off's grid (other batches) reads the same τ as the row."""
    from specsim.calibration.load_fit import LoadCalibration, write_scenarios
    from specsim.speculation.cycle import tokens_per_cycle
    from specsim.speculation.operating_point import resolve_id

    rows, line = [], 2
    for spec, ld, thr in ((False, 1, 100.0), (False, 4, 330.0), (True, 1, 180.0), (True, 4, 500.0)):
        rows.append(LoadRow(sweep="tree", line=line, load=float(ld), speculative=spec, role="fit", prompt_tokens=16,
                            output_tokens=16, n_requests=2 * ld, output_tokens_per_s=thr, tau=2.4 if spec else None))
        line += 1
    sw = LoadSweep(name="tree", stack="sglang", hardware="h100-sxm", n_devices=1, target="llama-3.2-1b",
                   load_kind="concurrency", method="eagle", k=3, tree_size=8,
                   drafter_options={"eagle_version": 3, "eagle_top_k": 3}, rows=tuple(rows), file="tree.csv")
    fit = fit_sweep(sw, token_share=1.0)
    paths = write_scenarios(LoadCalibration(fits=(fit,)), tmp_path, command="test")
    op = resolve_id(str([p for p in paths if not p.name.endswith(".stack.toml")][0]))
    acc = op.require_acceptance()
    assert acc.tau_given is None and acc.model.alpha < 0.99
    tau = float(tokens_per_cycle(op.drafter, alpha=acc.model.alpha, k=3, tree_size=8, n_ranks=acc.n_ranks,
                                 rank_decay=acc.rank_decay))
    assert tau == pytest.approx(2.4, rel=1e-9)
    g = grid(op, k=[3], batch_size=[1, 16], context_len=[op.context_len])
    np.testing.assert_allclose(g.tokens_per_cycle.ravel(), 2.4, rtol=1e-9)
