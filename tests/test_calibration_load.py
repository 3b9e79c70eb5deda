"""`specsim calibrate load`: the load-sweep table, the fit and its predictions, the calibrated scenario.

Numbers here come from the rows written by hand (speedups as ratios of the rows' own metrics), from
terms planted in a stack and recovered by the fit, and from a second way of computing the same
thing (a row simulated with the fitted terms against the re-timed record of one simulation).
The simulations are kept tiny (a 1B target, 16-token prompts and outputs) so the file runs in seconds.
"""
import json
from dataclasses import replace

import pandas as pd
import pytest

from specsim.calibration.load import COLUMNS, LoadRow, LoadSweep, sweeps_from_table
from specsim.calibration.load_fit import (Terms, assign_roles, calibrated_stack, fit_sweep, predict_sweep, run_row,
                                         sweep_priced_by)
from specsim.errors import SpecError
from specsim.specs.stacks import load_stack

BASE = dict(stack="vllm", stack_version="", hardware="h100-sxm", n_devices=1, target="llama-3.2-1b", target_dtype="",
            drafter="", tree_size="", drafter_options="", load_kind="concurrency", prompt_tokens=16, output_tokens=16,
            context_len="", tpot_s="", e2e_latency_s="", measured_speedup="", tau="", alpha="", source="by hand")


def _table(rows):
    out = []
    for r in rows:
        d = dict(BASE)
        d.update(r)
        out.append(d)
    return pd.DataFrame(out)[list(COLUMNS) + [c for c in out[0] if c not in COLUMNS]].astype(str).replace({"None": ""})


def _rows():
    return [dict(sweep="s", method="none", k="", load=1, speculative=0, output_tokens_per_s=100.0, role="fit"),
            dict(sweep="s", method="none", k="", load=4, speculative=0, output_tokens_per_s=360.0, role="fit"),
            dict(sweep="s", method="prompt_lookup", k=3, load=1, speculative=1, output_tokens_per_s=200.0, tau=2.5,
                 role="fit"),
            dict(sweep="s", method="prompt_lookup", k=3, load=4, speculative=1, tpot_s=0.01, measured_speedup=0.9,
                 role="check")]


def test_a_table_reads_into_sweeps_and_speedups_by_hand():
    [sw] = sweeps_from_table(_table(_rows()), where="t.csv")
    assert (sw.name, sw.method, sw.k, sw.load_kind, len(sw.rows)) == ("s", "prompt_lookup", 3, "concurrency", 4)
    low = [r for r in sw.speculative() if r.load == 1][0]
    assert sw.measured_speedup(low) == (pytest.approx(200.0 / 100.0), "output_tokens_per_s")
    high = [r for r in sw.speculative() if r.load == 4][0]
    assert sw.measured_speedup(high) == (0.9, "measured_speedup")  # as published, never recomputed
    assert sw.load_range() == (1.0, 4.0)


@pytest.mark.parametrize("change, message", [
    ({"load_kind": "burst"}, "line 2: column 'load_kind' = 'burst'"),
    ({"role": "train"}, "line 2: column 'role' = 'train': expected fit or check"),
    ({"output_tokens_per_s": ""}, "line 2: no metric"),
    ({"measured_speedup": 1.2}, "line 2: column 'measured_speedup' = '1.2': expected empty on a plain row"),
    ({"tau": 2.5}, "line 2: column 'tau' = '2.5': expected empty on a plain row"),
    ({"alpha": 0.6}, "line 2: column 'alpha' = '0.6': expected empty on a plain row"),
    ({"prompt_tokens": ""}, "line 2: column 'prompt_tokens' is empty"),
    ({"load": 2.5}, "line 2: column 'load' = '2.5': expected a whole number of users"),
    ({"speculative": 2}, "line 2: column 'speculative' = '2': expected 0 (plain decoding) or 1"),
    ({"n_devices": 0}, "line 2: column 'n_devices' = '0'"),
])
def test_bad_cells_are_refused_in_one_line(change, message):
    rows = _rows()
    rows[0].update(change)
    with pytest.raises(SpecError) as err:
        sweeps_from_table(_table(rows), where="t.csv")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_sweep_shares_one_configuration_and_one_acceptance_input():
    rows = _rows()
    rows[1]["hardware"] = "a100-sxm-80gb"
    with pytest.raises(SpecError, match="sweep 's': column 'hardware' differs between its rows"):
        sweeps_from_table(_table(rows), where="t.csv")
    rows = _rows()
    rows[2]["alpha"] = 0.7
    with pytest.raises(SpecError, match="line 4: columns 'tau' and 'alpha' both given"):
        sweeps_from_table(_table(rows), where="t.csv")
    rows = _rows()
    t = _table(rows)
    t["rate_limit"] = "1"
    with pytest.raises(SpecError, match="unknown column 'rate_limit'"):
        sweeps_from_table(t, where="t.csv")


def _sweep(load_kind="concurrency", loads=(1, 2, 4)):
    rows = []
    line = 2
    for spec in (False, True):
        for ld in loads:
            rows.append(LoadRow(sweep="planted", line=line, load=float(ld), speculative=spec, role="fit",
                                prompt_tokens=16, output_tokens=16, n_requests=2 * ld, context_len=64,
                                output_tokens_per_s=1.0, tau=2.2 if spec else None))
            line += 1
    return LoadSweep(name="planted", stack="vllm", hardware="h100-sxm", n_devices=1, target="llama-3.2-1b",
                     load_kind=load_kind, method="prompt_lookup", k=3, rows=tuple(rows), file="planted.csv")


def test_retiming_one_simulation_equals_simulating_with_the_terms():
    """The fit's shortcut: the same closed loop re-timed with other terms gives what a new simulation
    with those terms gives (the iterations do not depend on how long they take)."""
    sw = _sweep()
    priced = sweep_priced_by(sw, load_stack("vllm"))  # planted terms hold on the source that prices the sweep
    base = calibrated_stack(load_stack("vllm"), Terms(), priced_by=priced)
    t = Terms(device_scale=1.7, device_per_seq_s=40e-6, cycle_s=3e-3, spec_per_seq_s=15e-6)
    for r in sw.rows:
        run = run_row(sw, r, stack=base, speculative=r.speculative, acceptance={"tau": r.tau})
        assert run.retimable
        direct = run_row(sw, r, stack=calibrated_stack(load_stack("vllm"), t, priced_by=priced), speculative=r.speculative,
                         acceptance={"tau": r.tau}).metrics
        again = run.retime(t, Terms())
        for m in ("tpot_s", "e2e_latency_s", "output_tokens_per_s"):
            assert again[m] == pytest.approx(direct[m], rel=1e-9), (r.load, r.speculative, m)


@pytest.mark.parametrize("load_kind", ["concurrency", "batch"])
def test_the_fit_recovers_planted_terms(load_kind):
    """Rows 'measured' on a stack with planted terms (device x1.6 + 30 µs a sequence, +2 ms a cycle,
    +20 µs a speculating sequence) are fitted back from the plain curve and two speculative loads."""
    planted = Terms(device_scale=1.6, device_per_seq_s=30e-6, cycle_s=2e-3, spec_per_seq_s=20e-6)
    sw = _sweep(load_kind)
    priced = sweep_priced_by(sw, load_stack("vllm"))  # planted terms hold on the source that prices the sweep
    truth = predict_sweep(sw, stack=calibrated_stack(load_stack("vllm"), planted, priced_by=priced))
    rows = []
    for r, (_, t) in zip(sw.rows, truth.iterrows()):
        rows.append(replace(r, output_tokens_per_s=t["predicted_output_tokens_per_s"],
                            tpot_s=t["predicted_tpot_s"], role="fit" if (not r.speculative or r.load <= 2) else "check"))
    fit = fit_sweep(replace(sw, rows=tuple(rows)), token_share=0.0)  # planted per sequence, not per token
    assert fit.terms.device_scale == pytest.approx(1.6, rel=2e-3)
    assert fit.terms.device_per_seq_s == pytest.approx(30e-6, rel=2e-2)
    assert fit.terms.cycle_s == pytest.approx(2e-3, rel=2e-2)
    assert fit.terms.spec_per_seq_s == pytest.approx(20e-6, rel=5e-2)
    assert fit.check_error < 1e-3  # the load it never saw, predicted


def test_roles_from_the_plain_curve_and_the_lowest_speculative_load():
    sw = _sweep()
    low = assign_roles(sw, "plain+lowest")
    assert [(r.load, r.speculative, r.role) for r in low.speculative()] == [(1.0, True, "fit"), (2.0, True, "check"),
                                                                              (4.0, True, "check")]
    assert all(r.role == "fit" for r in assign_roles(sw, "plain").plain())
    assert all(r.role == "check" for r in assign_roles(sw, "plain").speculative())
    with pytest.raises(SpecError, match="--roles 'all'"):
        assign_roles(sw, "all")


def test_the_cli_prints_the_named_keys_and_writes_a_scenario_advise_reads(tmp_path, capsys):
    from specsim.cli import main

    csv = tmp_path / "sweep.csv"
    _table(_rows()).to_csv(csv, index=False)
    assert main(["calibrate", "load", str(csv), "--json", "--write-scenario", str(tmp_path / "out")]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("sweeps", "rows", "median_relative_error", "n_slowdowns", "n_slowdowns_missed"):
        assert key in out
    for key in ("sweep", "load", "role", "speculative", "measured_speedup", "predicted_speedup", "relative_error"):
        assert key in out["rows"][0]
    assert out["n_slowdowns"] == 1  # the 0.9 at load 4
    scen = [p for p in out["written"] if not p.endswith(".stack.toml")][0]
    from specsim.analyses.advise import advise
    from specsim.speculation.operating_point import resolve_id

    a = advise(resolve_id(scen), simulate=False)
    assert any(n.startswith("calibrated from load sweep 's'") for n in a.notes)
    assert main(["calibrate", "load", str(csv), "--sweep", "nope"]) == 2
    assert "--sweep 'nope': no such sweep" in capsys.readouterr().err


def test_the_shipped_sweeps_read_and_cite_their_sources():
    from specsim.calibration.load import read_load_sweeps
    from specsim.specs.data import data_path

    sweeps = read_load_sweeps(data_path("published/load_sweeps.csv"))
    assert len(sweeps) >= 4
    for sw in sweeps:
        for r in sw.rows:
            assert "github.com" in r.source or "commit" in r.source
