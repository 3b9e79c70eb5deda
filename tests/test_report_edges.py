"""`specsim report` at the edges of what a scenario may say (issue 37): outputs of one token, SLOs no
request can meet, a K far past the report's usual grid. Each must give a report whose every sentence
is true: no figure that fails to draw, no "nan" where a number or a reason belongs.

Expected values come from definitions, not from a run: TPOT is the time between two output tokens
(serving/metrics.py), so a one-token output has none; an SLO of 1 ns is below the time of any pass
(a prefill of 128 tokens reads every weight of an 8B model once, milliseconds on any part), so no
request meets it; the report's grid holds the scenario's own K, so its caption quotes that K's row.
"""
from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from specsim.cli import main

BASE = """
name = "{name}"
hardware = "h100-sxm"
target = "llama-3.1-8b"
drafter = "llama-3.2-1b"
method = "draft_model"
k = {k}
alpha = {alpha}
"""
WORKLOAD = """
[workload]
kind = "poisson"
n_requests = 30
rate_per_s = 2
prompt = {{ kind = "fixed", tokens = 128 }}
output = {{ kind = "fixed", tokens = {output} }}
{rates}

[slo]
ttft_s = {slo}
tpot_s = {slo}
"""


def _scenario(tmp_path, name, *, k=4, alpha=0.7, output=None, slo=2.0, rates="rates = [1, 2]"):
    text = BASE.format(name=name, k=k, alpha=alpha)
    if output is not None:
        text += WORKLOAD.format(output=output, slo=slo, rates=rates)
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def _report(tmp_path, scenario) -> tuple[str, str]:
    out = tmp_path / "out"
    assert main(["report", str(scenario), "--out", str(out), "--quiet"]) == 0
    md = (out / "report.md").read_text()
    html = re.sub(r"data:[a-z/+]+;base64,[A-Za-z0-9+/=]+", "", (out / "report.html").read_text())  # text only
    return md, html


def _no_nan(*texts):
    for t in texts:
        found = re.findall(r".{0,60}\bnan\b.{0,20}", t, flags=re.IGNORECASE)
        assert not found, found


def test_one_token_outputs_report_without_tpot(tmp_path):
    md, html = _report(tmp_path, _scenario(tmp_path, "one-token", output=1))
    _no_nan(md, html)
    # TPOT needs two output tokens: the latency caption says there is none, and the TPOT-speedup figure
    # (p50 TPOT over never speculating) has nothing to draw, so it is left out rather than captioned
    # "pays at every rate"
    assert "no TPOT at any rate: every output is one token" in md
    assert "speedup_vs_rate.png" not in md and "pays at every rate" not in md
    assert (tmp_path / "out" / "latency_vs_rate.png").is_file()


def test_a_tpot_panel_with_no_values_draws(tmp_path):
    # the panel alone, on rows as the simulator writes them for one-token outputs (TPOT NaN at every rate)
    from specsim.presentation import serving_plots
    from specsim.presentation.plots import png_bytes

    table = pd.DataFrame({"policy": ["never", "never", "static"], "rate_per_s": [1.0, 2.0, 1.0],
                          "tpot_p50_s": np.nan, "tpot_p99_s": np.nan, "ttft_p50_s": [0.01, 0.02, 0.01],
                          "ttft_p99_s": [0.02, 0.03, 0.02]})
    fig = serving_plots.latency_figure(table, slo=SimpleNamespace(ttft_s=2.0, tpot_s=0.05))
    tpot_ax, ttft_ax = fig.axes
    assert tpot_ax.get_yscale() == "linear" and ttft_ax.get_yscale() == "log"
    assert any("no TPOT" in t.get_text() for t in tpot_ax.texts)
    assert png_bytes(fig)[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("rates, where", [("", "at the workload's own arrival rate"),
                                          ("rates = [1, 2]", "at every rate simulated")])
def test_an_slo_no_request_meets_is_said_so(tmp_path, rates, where):
    md, html = _report(tmp_path, _scenario(tmp_path, "tiny-slo", output=16, slo=1e-9, rates=rates))
    _no_nan(md, html)
    assert f"rate: {where} the chosen policy meets the SLO for no request" in md


def test_k64_is_on_the_report_grid_and_quoted(tmp_path):
    md, html = _report(tmp_path, _scenario(tmp_path, "k64", k=64, alpha=0.999))
    _no_nan(md, html)
    grid = pd.read_csv(tmp_path / "out" / "speedup_vs_k.csv")
    assert 64 in set(grid["k"])
    # the caption's figure for K = 64 is the best speedup among that K's rows at the α it names
    a = float(re.search(r"At α = ([0-9.]+) the best K", md).group(1))
    rows = grid[(grid["k"] == 64) & (grid["alpha"].round(2) == a)]
    said = float(re.search(r"K = 64 gives ([0-9.]+)×", md).group(1))
    assert said == pytest.approx(rows["speedup"].max(), abs=0.006)  # the caption prints 2 decimals


def test_captions_say_when_the_scenarios_k_is_off_a_users_grid():
    # a user's [sweep] may leave the scenario's K out: the captions say so instead of printing nan
    from specsim.presentation import figures as F

    data = pd.DataFrame({"k": [1, 2, 1, 2], "alpha": 0.8, "batch_size": [1, 1, 2, 2], "speedup": [1.5, 1.8, 1.2, 1.1]})
    point = SimpleNamespace(k=64, alpha=0.8)
    text = F._caption_speedup_vs_k(data, SimpleNamespace(point=point))
    # by hand: at α 0.8 the best K is 2 (1.8× at B = 1)
    assert text == "At α = 0.80 the best K is 2 (1.80×); K = 64 (the scenario's) is not on this grid."
