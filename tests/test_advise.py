"""`specsim advise`: the verdict, the gate the serving simulation picks, and the checks behind it.

The expected numbers are derived independently of advise's own path: the switch-off batch from
`predict` at neighbouring batches; the best policy at each rate from the per-request rows of each run
(attainment and p50 TPOT recomputed here from TTFT, TPOT and the SLO, not read from the summaries).
"""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from specsim.analyses.advise import _bands_with_gate, advise, paying_batches
from specsim.analyses.gates import WatchedStaticK, gate_thresholds, regrets, truncated
from specsim.cli import main
from specsim.errors import DoesNotFitError
from specsim.presentation.text import band_rows
from specsim.serving import build_serving
from specsim.serving.policies import DisableByBatchSize, StaticK
from specsim.serving.rates import run_one
from specsim.speculation.operating_point import resolve_id
from specsim.speculation.predict import predict


def test_gate_thresholds_surround_the_analytic_point():
    # 0.5, 0.75, 1, 1.25, 1.5, 2 × 80, clipped to 2..256
    assert gate_thresholds(80, max_num_seqs=256) == [40, 60, 80, 100, 120, 160]
    assert gate_thresholds(200, max_num_seqs=256) == [100, 150, 200, 250, 256]
    assert gate_thresholds(1, max_num_seqs=256) == [2, 4, 8]
    assert gate_thresholds(None, max_num_seqs=256) == [64, 128]


def test_regret_is_measured_against_the_best_attainment_then_the_best_tpot():
    t = pd.DataFrame({"policy": ["a", "b", "c", "a", "b", "c"], "rate_per_s": [1, 1, 1, 2, 2, 2],
                      "slo_attainment_frac": [1.0, 0.99, 0.90, 0.5, 0.6, 0.59],
                      "tpot_p50_s": [0.010, 0.0104, 0.005, 0.05, 0.06, 0.066]})
    r = regrets(t).set_index(["policy", "rate_per_s"])["regret"]
    # rate 1: best attainment 1.0; eligible a, b (within 0.02); best TPOT among them 0.010
    assert r[("a", 1)] == pytest.approx(0.0)
    assert r[("b", 1)] == pytest.approx(max(0.01 / 0.02, (0.0104 / 0.010 - 1) / 0.05))  # 0.8
    assert r[("c", 1)] == pytest.approx(0.10 / 0.02)  # attainment 10 points short: 5
    # rate 2: best attainment 0.6 (b); eligible b, c; best TPOT 0.06
    assert r[("b", 2)] == pytest.approx(0.0)
    assert r[("c", 2)] == pytest.approx(max(0.01 / 0.02, (0.066 / 0.06 - 1) / 0.05))  # 2.0
    assert r[("a", 2)] == pytest.approx(0.10 / 0.02)


def test_bands_follow_the_gate():
    bands = [{"batch_min": 1, "batch_max": 16, "k": 8, "speedup_min": 2.0},
             {"batch_min": 32, "batch_max": 64, "k": 2, "speedup_min": 1.2},
             {"batch_min": 96, "batch_max": 512, "k": 0, "speedup_min": 0.5}]
    assert [(b["batch_min"], b["batch_max"], b["k"]) for b in _bands_with_gate(bands, 82)] == \
        [(1, 16, 8), (32, 81, 2), (82, 512, 0)]
    assert [(b["batch_min"], b["batch_max"], b["k"]) for b in _bands_with_gate(bands, 40)] == \
        [(1, 16, 8), (32, 39, 2), (40, 512, 0)]
    # a gate above the analytic off band keeps the last paying K up to the gate
    assert [(b["batch_min"], b["batch_max"], b["k"]) for b in _bands_with_gate(bands, 158)] == \
        [(1, 16, 8), (32, 157, 2), (158, 512, 0)]
    rows = band_rows(_bands_with_gate(bands, 82))
    assert rows == [("1–16", "K = 8"), ("17–81", "K = 2"), ("82 and above", "off")]


def _speedup(op, b):
    return float(predict(op.with_overrides(batch_size=b), check_memory=False).cycle.speedup)


def test_seed_70b_gate_is_where_predict_stops_clearing_the_margin():
    op = resolve_id("seed-70b-hbm")
    a = advise(op)
    assert a.on and a.min_batch is None and a.gates is None
    g = a.gate_batch
    m = a.margin  # the scenario's [threshold] margin, 0.1
    assert m == pytest.approx(0.1)
    assert _speedup(op, g - 1) >= 1 + m > _speedup(op, g)
    assert a.configs["vllm-v0"]["config"]["disable_by_batch_size"] == g
    assert a.configs["vllm"]["config"]["num_speculative_tokens_per_batch_size"] == [[1, g - 1, 5], [g, 1024, 0]]
    assert a.configs["vllm"]["config"]["num_speculative_tokens"] == 5
    assert a.speedup_b1 == pytest.approx(_speedup(op, 1), rel=1e-9)
    # the acceptance band: α ± 0.05 around the α that gives τ = 3.5 at K = 5
    assert [r["alpha"] for r in a.band.rows] == pytest.approx([op.alpha - 0.05, op.alpha + 0.05])
    assert not a.band.calibrated and "varied by ±0.05" in a.band.text()


def test_long_context_pays_only_above_a_batch():
    # at 128k the cache, not the weights, dominates: the sparse-KV draft gains with the batch
    op = resolve_id("llama-8b-128k-sparse-kv")
    a = advise(op)
    assert a.on and a.min_batch is not None and a.min_batch > 1
    b = a.min_batch
    assert _speedup(op, b - 1) < 1 + a.margin <= _speedup(op, b)
    assert "only while the running batch is ≥" in a.headline
    # no stack ships MagicDec's self-speculation (vLLM V1's schedule could start it at that batch:
    # test_threshold.test_vllm_schedule_ranges_by_hand), so every config line carries the warning
    assert a.configs["vllm"]["config"] is None
    assert all("warning" in c for c in a.configs.values())


def test_off_when_it_never_pays_and_when_the_target_does_not_fit(capsys):
    op = resolve_id("seed-70b-hbm", alpha=0.05)
    a = advise(op)
    assert not a.on and a.gate_batch is None
    assert all(_speedup(op, b) < 1 + a.margin for b in (1, 2, 8))
    assert all(a.configs[v]["config"] is None and "leave --speculative-config out" in a.configs[v]["note"]
               for v in ("vllm", "vllm-v0"))
    with pytest.raises(DoesNotFitError):
        advise(resolve_id("seed-70b-hbm", hardware="seed-ddr5-90gbs"))


def test_paying_batches_reads_the_curve():
    op = resolve_id("seed-70b-hbm")
    from specsim.analyses.threshold import recommended_switch_off
    so = recommended_switch_off(op)
    on, off = paying_batches(so, 0.1)
    assert on == 1 and off == so.batch_off


def _small_chat(n=60):
    op = resolve_id("llama-70b-h100-chat")
    return op, truncated(build_serving(op), n)


def test_a_gate_above_the_largest_batch_seen_runs_exactly_like_always_on():
    op, setup = _small_chat()
    watched = WatchedStaticK(k=op.k, name="static")
    setup = replace(setup, policies={"static": StaticK(k=op.k, name="static"), "w": watched,
                                     "gate": DisableByBatchSize(k=op.k, threshold=10_000, name="gate")})
    a = run_one(setup, "static", 4.0)
    b = run_one(setup, "w", 4.0)
    c = run_one(setup, "gate", 4.0)
    assert watched.max_running >= 1
    for other in (b, c):
        pd.testing.assert_frame_equal(a.requests, other.requests)
    # and a gate the batch does reach changes the run
    low = replace(setup, policies={"g": DisableByBatchSize(k=op.k, threshold=max(watched.max_running - 1, 1), name="g")})
    d = run_one(low, "g", 4.0)
    assert not a.requests["finish_at_s"].equals(d.requests["finish_at_s"])


def _recompute(res, slo):
    """Attainment and p50 TPOT from a run's per-request rows (done, TTFT and TPOT against the SLO)."""
    r = res.requests
    done = (r["status"] == "done").to_numpy()
    ttft = r["ttft_s"].to_numpy(float)
    tpot = r["tpot_s"].to_numpy(float)
    out = r["output_tokens"].to_numpy()
    ok = done & (ttft <= slo.ttft_s) & ((out == 1) | (tpot <= slo.tpot_s))
    t = tpot[done & np.isfinite(tpot)]
    return ok.mean(), float(np.median(t)) if t.size else np.inf


@pytest.mark.slow
def test_advise_gate_is_no_worse_than_the_best_policy_at_every_rate():
    """llama-70b-h100-chat on its first 300 requests at every rate of the scenario: the chosen gate's
    attainment is within 2 points of the best policy's, and its p50 TPOT within 5 % of the best among
    those, at every rate — recomputed here from the per-request rows."""
    op = resolve_id("llama-70b-h100-chat")
    a = advise(op, n_requests=300)
    g = a.gates
    assert g is not None and a.on
    assert set(g.rates) == set(build_serving(op).rates)  # every rate of the scenario
    names = list(dict.fromkeys(g.table["policy"]))
    assert {"never", f"static_k{op.k}"} <= set(names) and len(names) >= 6
    for rate in g.rates:
        stats = {n: _recompute(g.results[(n, rate)], g.slo) for n in names}
        best_att = max(s[0] for s in stats.values())
        best_tpot = min(s[1] for s in stats.values() if s[0] >= best_att - 0.02 - 1e-12)
        att, tpot = stats[g.chosen]
        assert att >= best_att - 0.02 - 1e-12, (rate, g.chosen, stats)
        assert tpot <= best_tpot * 1.05 + 1e-12, (rate, g.chosen, stats)
    # the configs carry the chosen gate
    cfg = a.configs["vllm-v0"]["config"]
    assert cfg.get("disable_by_batch_size") == a.gate_batch == g.chosen_threshold
    assert a.configs["vllm"]["config"]["num_speculative_tokens_per_batch_size"][-1][0] == a.gate_batch


def test_cli_text_json_and_bad_flags(capsys):
    assert main(["advise", "seed-7b-ddr5", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[2].startswith("VERDICT: ON")
    assert "Paste into your serving stack" in text and "What would change the answer" in text
    assert main(["advise", "seed-7b-ddr5", "--json", "--quiet"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["on"] is True and d["gate_batch"] >= 2 and d["uncertainty"]["delta"] == 0.05
    assert main(["advise", "seed-7b-ddr5", "--requests", "0"]) == 2
    assert "--requests 0" in capsys.readouterr().err
    assert main(["advise", "seed-7b-ddr5", "--alpha-delta", "0.7", "--quiet"]) == 2
    with pytest.raises(SystemExit):  # an unknown flag: argparse's usage error
        main(["advise", "seed-70b-hbm", "--hardware", "x"])
