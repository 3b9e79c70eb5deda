"""`specsim calibrate load` under hostile input (issue 33): each case is refused in one line naming the
file, the line (or record) and the column (or field) with the rule, or handled correctly, in seconds.

The cases are the issue's: metrics far outside any plausible unit (1e-300 s, 1e300 s), one-token
outputs, a configuration that does not exist on a sweep of check rows only, tables and result files
far larger than a campaign, acceptance and speedups above K + 1 (a cycle emits at most the K drafted
tokens and the bonus one, and costs at least one plain step), empty reports, output folders that would
lose a user's file, and a written scenario whose predict and report must stay consistent.
Bounds checked here come from the rule itself (K + 1, the cycle's parts adding up), never from the
code's own output. Simulations are kept tiny (a 1B target, 16-token requests).
"""
from __future__ import annotations

import csv
import json
import math
import re
import time
from pathlib import Path

import numpy as np
import pytest

from specsim.calibration.load import COLUMNS, MAX_ROWS, MAX_SWEEP_ROWS, sweeps_from_table
from specsim.calibration.load_fit import _least_squares
from cli_refusals import refused, run
from specsim.errors import SpecError

BASE = dict(stack="vllm", hardware="h100-sxm", n_devices=1, target="llama-3.2-1b", target_dtype="", method="none",
            drafter="", k="", tree_size="", drafter_options="", load_kind="concurrency", prompt_tokens=16,
            output_tokens=16, context_len="", tpot_s="", e2e_latency_s="", output_tokens_per_s="",
            measured_speedup="", tau="", alpha="", source="by hand")


def write(path: Path, rows) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS))
        w.writeheader()
        for r in rows:
            w.writerow({**BASE, **r})
    return path


def sweep_rows(name="s", **over):
    """A small valid sweep: two plain loads, two speculative (prompt lookup, K = 3)."""
    rows = [dict(sweep=name, load=1, speculative=0, output_tokens_per_s=100.0, role="fit"),
            dict(sweep=name, load=4, speculative=0, output_tokens_per_s=360.0, role="fit"),
            dict(sweep=name, method="prompt_lookup", k=3, load=1, speculative=1, output_tokens_per_s=200.0, tau=2.5,
                 role="fit"),
            dict(sweep=name, method="prompt_lookup", k=3, load=4, speculative=1, output_tokens_per_s=500.0, tau=2.5,
                 role="check")]
    for r in rows:
        r.update(over)
    return rows


# ---- metrics past any unit: refused on read --------------------------------------------------------

@pytest.mark.parametrize("value", ["1e-300", "1e+300"])
def test_an_e2e_latency_past_any_unit_is_refused(tmp_path, capsys, value):
    f = write(tmp_path / "t.csv", [dict(sweep="s", load=1, speculative=0, e2e_latency_s=float(value), role="fit"),
                                   dict(sweep="s", load=4, speculative=0, e2e_latency_s=0.5, role="fit")])
    rc, _, err = run(["calibrate", "load", f], capsys, limit_s=10)
    refused(rc, err, 2, "t.csv: line 2: column 'e2e_latency_s'", value, "[1e-06, 1e+06]")


@pytest.mark.parametrize("column, value", [("tpot_s", 1e-9), ("output_tokens_per_s", 1e12)])
def test_other_metrics_past_any_unit_are_refused(tmp_path, capsys, column, value):
    rows = sweep_rows()
    rows[1].update({column: value})
    rc, _, err = run(["calibrate", "load", write(tmp_path / "t.csv", rows)], capsys, limit_s=10)
    refused(rc, err, 2, f"line 3: column {column!r}")


def test_one_output_token_is_refused_not_a_traceback(tmp_path, capsys):
    # the case: TPOT rows of one-token requests gave "Residuals are not finite in the initial point"
    rows = sweep_rows(output_tokens=1)
    for r in rows:
        r["tpot_s"], r["output_tokens_per_s"] = (0.006 if r["speculative"] else 0.01), ""
    rc, _, err = run(["calibrate", "load", write(tmp_path / "t.csv", rows)], capsys, limit_s=10)
    refused(rc, err, 2, "line 2: column 'output_tokens' = '1'", "at least 2")


def test_residuals_that_are_not_finite_are_refused_naming_the_fit():
    with pytest.raises(SpecError, match="the plain fit: the rows give no finite residual"):
        _least_squares(lambda x: np.array([np.nan, 1.0]), [0.0], [-1.0], [1.0], what="the plain fit")


# ---- a configuration that does not exist, every row a check row -----------------------------------

@pytest.mark.parametrize("column, value, needle", [
    ("hardware", "nope-gpu", "column 'hardware' = 'nope-gpu'"),
    ("target", "nope-model", "column 'target' = 'nope-model'"),
    ("target_dtype", "fp3", "field 'target_dtype' = 'fp3'"),
])
def test_an_unknown_configuration_is_refused_when_every_row_is_a_check_row(tmp_path, capsys, column, value, needle):
    rows = [dict(r, role="check", **{column: value}) for r in sweep_rows()]
    rc, _, err = run(["calibrate", "load", write(tmp_path / "t.csv", rows)], capsys, limit_s=10)
    refused(rc, err, 2, "t.csv", "sweep 's' line 2", needle)


@pytest.mark.parametrize("change, needle", [
    (dict(method="warpdrive"), "field 'method' = 'warpdrive'"),
    (dict(method="draft_model", drafter="nope-drafter"), "column 'drafter' = 'nope-drafter'"),
    (dict(method="draft_model", drafter="llama-3.2-1b"), "expected a draft model other than the target"),
])
@pytest.mark.parametrize("role", ["fit", "check"])
def test_an_impossible_drafter_is_refused_whatever_the_rows_role(tmp_path, capsys, change, needle, role):
    rows = sweep_rows()
    for r in rows[2:]:
        r.update(change, role=role)
    rc, _, err = run(["calibrate", "load", write(tmp_path / "t.csv", rows)], capsys, limit_s=10)
    refused(rc, err, 2, "sweep 's' line 4", needle)


# ---- acceptance and speedup above K + 1 -----------------------------------------------------------

def test_tau_above_k_plus_1_is_refused(tmp_path, capsys):
    rows = sweep_rows()
    rows[3]["tau"] = 60  # K = 3: at most 4 tokens a verify
    rc, _, err = run(["calibrate", "load", write(tmp_path / "t.csv", rows)], capsys, limit_s=10)
    refused(rc, err, 2, "line 5: column 'tau' = '60'", "[1, 4]")


def test_a_published_speedup_above_k_plus_1_is_refused(tmp_path, capsys):
    rows = sweep_rows()
    rows[3].update(output_tokens_per_s="", tpot_s=0.01, measured_speedup=9.0)
    rc, _, err = run(["calibrate", "load", write(tmp_path / "t.csv", rows)], capsys, limit_s=10)
    refused(rc, err, 2, "line 5: column 'measured_speedup' = '9.0'", "at most K + 1 = 4")


def test_a_speedup_worked_from_the_metrics_above_k_plus_1_is_refused(tmp_path, capsys):
    rows = sweep_rows()
    rows[3]["output_tokens_per_s"] = 360.0 * 4.5  # against 360 on the plain row: 4.5 > K + 1 = 4
    rc, _, err = run(["calibrate", "load", write(tmp_path / "t.csv", rows)], capsys, limit_s=10)
    refused(rc, err, 2, "line 5: column 'output_tokens_per_s'", "plain row (line 3)", "4.5", "at most K + 1 = 4")


def _import_argv(files, fmt, k=4):
    return (["calibrate", "load", *files, "--format", fmt, "--stack", "vllm", "--hardware", "h100-sxm",
             "--n-devices", "1", "--target", "llama-3.2-1b", "--method", "prompt_lookup", "--k", str(k)])


def _vllm(conc, acc=None):
    d = {"max_concurrency": conc, "completed": 10, "total_input_tokens": 160, "total_output_tokens": 160,
         "output_throughput": 100.0 * conc, "mean_tpot_ms": 10.0, "mean_e2el_ms": 200.0}
    if acc is not None:
        d["spec_decode_acceptance_length"] = acc
    return d


def _sglang(conc, acc=None):
    return {"max_concurrency": conc, "request_rate": None, "completed": 10, "total_input_tokens": 160,
            "total_output_tokens": 160, "output_throughput": 100.0 * conc, "mean_tpot_ms": 10.0,
            "mean_e2e_latency_ms": 200.0, "accept_length": acc}


@pytest.mark.parametrize("fmt, make, field", [("vllm", _vllm, "spec_decode_acceptance_length"),
                                              ("sglang", _sglang, "accept_length")])
@pytest.mark.parametrize("acc", [50, 75.5, 100])
def test_an_imported_acceptance_length_above_k_plus_1_is_refused(tmp_path, capsys, fmt, make, field, acc):
    f = tmp_path / "r.jsonl"
    f.write_text(json.dumps(make(1)) + "\n" + json.dumps(make(1, acc)) + "\n")
    rc, _, err = run(_import_argv([f], fmt, k=4), capsys, limit_s=10)
    refused(rc, err, 3, "r.jsonl: record 2", f"field {field!r} = {acc:g}", "[1, 5]")


def test_a_vllm_acceptance_length_below_one_is_refused(tmp_path, capsys):
    f = tmp_path / "r.json"
    f.write_text(json.dumps(_vllm(1, 0.5)))
    rc, _, err = run(_import_argv([f], "vllm"), capsys, limit_s=10)
    refused(rc, err, 3, "field 'spec_decode_acceptance_length' = 0.5", ">= 1")


def test_an_empty_guidellm_report_is_refused_beside_a_good_one(tmp_path, capsys):
    mean = {k: {"successful": {"mean": v}} for k, v in [("prompt_token_count", 16), ("output_token_count", 16),
                                                        ("output_tokens_per_second", 100.0),
                                                        ("inter_token_latency_ms", 10.0), ("request_latency", 0.2)]}
    good = {"benchmarks": [{"args": {"strategy": {"type_": "concurrent", "streams": 1}},
                            "request_totals": {"successful": 10}, "metrics": mean}]}
    (tmp_path / "good.json").write_text(json.dumps(good))
    (tmp_path / "empty.json").write_text(json.dumps({"benchmarks": []}))
    rc, _, err = run(_import_argv([f"plain:{tmp_path / 'good.json'}", f"plain:{tmp_path / 'empty.json'}"],
                                  "guidellm"), capsys, limit_s=10)
    refused(rc, err, 3, "empty.json: field 'benchmarks' is empty")


# ---- big input: refused with its size, in seconds -------------------------------------------------

def _big_csv(path: Path, n_sweeps: int, per_sweep: int) -> Path:
    header = ",".join(COLUMNS)
    lines = [header]
    for s in range(n_sweeps):
        for j in range(per_sweep):
            row = {**BASE, "sweep": f"s{s}", "load": j + 1, "speculative": 0, "output_tokens_per_s": 100.0 + j,
                   "role": "fit"}
            lines.append(",".join(str(row[c]) for c in COLUMNS))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("n_sweeps, per_sweep", [(1, 100_000), (20_000, 5)])
def test_a_table_of_10_to_the_5_rows_is_refused_with_its_size(tmp_path, capsys, n_sweeps, per_sweep):
    f = _big_csv(tmp_path / "big.csv", n_sweeps, per_sweep)
    rc, _, err = run(["calibrate", "load", f], capsys, limit_s=10)
    refused(rc, err, 3, "big.csv: 100000 rows", f"at most {MAX_ROWS}")


def test_a_sweep_past_its_row_limit_is_refused_and_reading_is_linear(tmp_path, capsys):
    f = _big_csv(tmp_path / "one.csv", 1, MAX_SWEEP_ROWS + 1)
    rc, _, err = run(["calibrate", "load", f], capsys, limit_s=10)
    refused(rc, err, 3, f"sweep 's0': {MAX_SWEEP_ROWS + 1} rows", f"at most {MAX_SWEEP_ROWS}")
    # a table at the limit reads in seconds (its duplicate check once was quadratic in a sweep's rows)
    from specsim.specs.tables import read_csv_table

    table = read_csv_table(_big_csv(tmp_path / "max.csv", MAX_ROWS // MAX_SWEEP_ROWS, MAX_SWEEP_ROWS))
    t0 = time.monotonic()
    sweeps = sweeps_from_table(table, where="max.csv")
    assert time.monotonic() - t0 < 10
    assert sum(len(s.rows) for s in sweeps) == MAX_ROWS


def test_ten_thousand_sglang_records_are_refused_with_their_count(tmp_path, capsys):
    f = tmp_path / "r.jsonl"
    f.write_text("".join(json.dumps(_sglang(1 + i % 64, None if i % 2 else 2.5)) + "\n" for i in range(10_000)))
    rc, _, err = run(_import_argv([f], "sglang"), capsys, limit_s=10)
    refused(rc, err, 3, "r.jsonl: 10000 results", f"at most {MAX_ROWS}")


# ---- flags ------------------------------------------------------------------------------------------

def test_token_share_loo_with_nothing_is_refused(tmp_path, capsys):
    f = write(tmp_path / "t.csv", sweep_rows())
    rc, _, err = run(["calibrate", "load", f, "--token-share-loo", ""], capsys, limit_s=10)
    refused(rc, err, 2, "--token-share-loo ''")
    rc, _, err = run(["calibrate", "load", f, "--token-share-loo"], capsys, limit_s=10)
    assert rc == 2 and "--token-share-loo: expected one argument" in err


# ---- --write-scenario -------------------------------------------------------------------------------

def test_write_scenario_with_an_empty_path_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    f = write(tmp_path / "t.csv", sweep_rows())
    rc, _, err = run(["calibrate", "load", f, "--write-scenario", ""], capsys, limit_s=10)
    refused(rc, err, 5, "--write-scenario ''", "expected a folder path")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]


def test_two_sweeps_whose_names_give_one_file_name_are_refused_before_any_write(tmp_path, capsys):
    f = write(tmp_path / "t.csv", sweep_rows("a b") + sweep_rows("A-b"))  # both 'a-b' on a case-blind disk
    rc, _, err = run(["calibrate", "load", f, "--write-scenario", tmp_path / "out"], capsys, limit_s=10)
    refused(rc, err, 5, "sweeps 'a b' and 'A-b' would both write A-b.toml")
    assert not (tmp_path / "out").exists()


def test_a_users_file_is_not_replaced_without_force(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "s.toml").write_text("my own notes\n")
    f = write(tmp_path / "t.csv", sweep_rows())
    t0 = time.monotonic()
    rc, _, err = run(["calibrate", "load", f, "--write-scenario", out], capsys, limit_s=10)
    refused(rc, err, 5, "s.toml exists: pass --force")
    assert time.monotonic() - t0 < 5  # refused before the fit runs
    assert (out / "s.toml").read_text() == "my own notes\n"
    assert sorted(p.name for p in out.iterdir()) == ["s.toml"]  # nothing else written either
    rc, out_text, err = run(["calibrate", "load", f, "--write-scenario", out, "--force"], capsys, limit_s=20)
    assert rc == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["s.stack.toml", "s.toml"]  # no temporary left behind
    assert (out / "s.toml").read_text().startswith('name = "s-calibrated"')


# ---- the written scenario: predict and report stay consistent -----------------------------------------

def _fast_sweep():
    # plain rows faster than the stack's figures at this hardware: the device's fitted scale is below 1,
    # where predict once showed a negative cycle overhead and a speedup past (K + 1)·plain/verify
    return [dict(sweep="fast", load=1, speculative=0, output_tokens_per_s=1500.0, role="fit"),
            dict(sweep="fast", load=4, speculative=0, output_tokens_per_s=5000.0, role="fit"),
            dict(sweep="fast", method="prompt_lookup", k=3, load=1, speculative=1, output_tokens_per_s=3300.0,
                 tau=3.5, role="fit"),
            dict(sweep="fast", method="prompt_lookup", k=3, load=4, speculative=1, output_tokens_per_s=9000.0,
                 tau=3.5, role="fit")]


def test_predict_on_a_written_scenario_keeps_the_cycle_parts_consistent(tmp_path, capsys):
    f = write(tmp_path / "t.csv", _fast_sweep())
    rc, out, err = run(["calibrate", "load", f, "--write-scenario", tmp_path / "w", "--json"], capsys, limit_s=20)
    assert rc == 0, err
    [sw] = json.loads(out)["sweeps"]
    assert sw["device_scale"] < 1.0  # the case the issue hit
    rc, out, err = run(["predict", tmp_path / "w" / "fast.toml", "--json"], capsys, limit_s=10)
    assert rc == 0, err
    p = json.loads(out)
    k = p["k"] if "k" in p else 3
    assert p["cycle_overhead_s"] >= 0.0
    assert p["draft_time_s"] + p["verify_time_s"] + p["cycle_overhead_s"] == pytest.approx(p["cycle_time_s"], rel=1e-9)
    # a cycle lasts at least its verify pass and emits at most K + 1 tokens
    assert p["speedup"] <= (k + 1) * p["target_step_time_s"] / p["verify_time_s"] * (1 + 1e-9)
    assert p["tokens_per_cycle"] <= k + 1


def _visible_text(html: str) -> str:
    html = re.sub(r"data:[a-z/+]+;base64,[A-Za-z0-9+/=]+", "", html)  # embedded figures
    return re.sub(r"<[^>]+>", " ", html)


def test_the_report_of_a_written_concurrency_scenario_shows_no_nan_or_inf(tmp_path, capsys):
    f = write(tmp_path / "t.csv", sweep_rows())
    rc, _, err = run(["calibrate", "load", f, "--write-scenario", tmp_path / "w"], capsys, limit_s=20)
    assert rc == 0, err
    rc, _, err = run(["report", tmp_path / "w" / "s.toml", "--out", tmp_path / "r", "--requests", "40",
                      "--rates", "5", "--quiet"], capsys, limit_s=30)
    assert rc == 0, err
    for name in ("report.html", "report.md"):
        text = (tmp_path / "r" / name).read_text()
        text = _visible_text(text) if name.endswith(".html") else re.sub(r"\(data:[^)]*\)", "", text)
        bad = re.findall(r".{40}\b(?:nan|NaN|inf|Infinity)\b.{20}", text)
        assert not bad, bad
    assert "SLO: none set" in (tmp_path / "r" / "report.md").read_text()


# ---- the fits say when they did not converge, or ended on a bound -----------------------------------

def test_a_fit_that_stops_at_its_evaluation_cap_says_so():
    # Rosenbrock's valley from its classic start: 25 evaluations (the noisy path's cap) do not reach (1, 1)
    def f(x):
        return np.array([10.0 * (x[1] - x[0] ** 2), 1.0 - x[0]])

    x, notes = _least_squares(f, [-1.2, 1.0], [-5.0, -5.0], [5.0, 5.0], scale=[1.0, 1.0], noisy=True,
                              what="test fit", names=["a", "b"])
    assert np.linalg.norm(np.asarray(x) - 1.0) > 1e-3  # it really did stop short
    assert any("test fit: the fit did not converge (scipy status 0" in n for n in notes), notes


def test_a_scale_past_its_bound_is_said(tmp_path, capsys):
    # the roofline of a 1B model on an H100 gives hundreds of tokens a second; 2 tok/s asks for a scale
    # far past 20 (the fit's bound), which the calibration must say rather than report as fitted
    rows = [dict(sweep="s", load=1, speculative=0, output_tokens_per_s=2.0, role="fit")]
    rc, out, err = run(["calibrate", "load", write(tmp_path / "t.csv", rows)], capsys, limit_s=10)
    assert rc == 0, err
    assert "device_scale ended on its upper bound (x20)" in out
