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

from specsim.analyses.advise import _min_batch_advice, advise, paying_batches
from specsim.analyses.gates import WatchedStaticK, gate_thresholds, regrets, truncated
from specsim.analyses.threshold import bands_from_rows, observed_k, off_words
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


def _rows(*pairs, fits_to=None):
    return [{"batch_size": b, "best_k": k, "best_speedup": s, "fits": fits_to is None or b <= fits_to} for b, k, s in pairs]


def test_bands_follow_the_gate_and_never_run_a_k_slower_than_plain_decoding():
    rows = _rows((1, 8, 2.0), (16, 8, 1.9), (32, 2, 1.2), (64, 2, 1.06), (81, 1, 1.02), (82, 1, 1.01), (128, 1, 0.95),
                 (157, 1, 0.93), (158, 1, 0.92), (512, 1, 0.5))
    def spans(bands):
        return [(b["batch_min"], b["batch_max"], b["k"]) for b in bands]
    # analytics alone (margin 0.05): on where it pays 1.05x, so 81 and 82 (1.02x, 1.01x) are off
    assert spans(bands_from_rows(rows, margin=0.05)) == [(1, 16, 8), (32, 64, 2), (81, 512, 0)]
    # a gate at 82 keeps 81 on (1.02x does not slow decoding) and switches 82 and above off
    assert spans(bands_from_rows(rows, margin=0.05, gate=82)) == [(1, 16, 8), (32, 64, 2), (81, 81, 1), (82, 512, 0)]
    # a simulated gate at 158 does not put a band on where every K is slower than plain (0.95x at 128, 0.93x at 157)
    b158 = bands_from_rows(rows, margin=0.05, gate=158)
    assert spans(b158) == [(1, 16, 8), (32, 64, 2), (81, 82, 1), (128, 512, 0)]
    assert all(b["speedup_min"] >= 1.0 for b in b158 if b["k"] > 0)
    # below min_batch and past memory: off
    assert spans(bands_from_rows(_rows((1, 1, 1.5), (4, 2, 1.5), (8, 2, 1.5), fits_to=4), margin=0.05, min_batch=4)) == \
        [(1, 1, 0), (4, 4, 2), (8, 8, 0)]
    # a K above the acceptance's evidence is labelled
    ext = bands_from_rows(rows, margin=0.05, k_observed=5)
    assert [b["extrapolated"] for b in ext] == [True, False, False]
    assert band_rows(ext)[0] == ("1–16", "K = 8 (extrapolated)")
    assert band_rows(bands_from_rows(rows, margin=0.05, gate=82)) == [
        ("1–16", "K = 8"), ("17–64", "K = 2"), ("65–81", "K = 1"), ("82 and above", "off")]


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
    # test_threshold.test_vllm_schedule_ranges_by_hand): no config line, so no warning on one, and the
    # note says no stack ships it (never that V1's schedule starts it)
    assert a.configs["vllm"]["config"] is None
    assert not any("warning" in c for c in a.configs.values())


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


# ---- advice inside the evidence (issue: a K nobody observed, bands slower than plain, notes with None) ----

def _seed_speedup_by_hand(k: int, alpha: float = 0.7773) -> float:
    """The seed article's arithmetic at batch 1: τ(K) = (1 − α^(K+1)) / (1 − α) tokens a cycle; a cycle is
    K drafter steps of 1 ms (2 GB over 2 TB/s) and one verify pass of about the 70 ms target step (140 GB
    over 2 TB/s: K + 1 tokens at batch 1 stay bandwidth bound), so speedup ≈ τ(K) · 70 / (70 + K)."""
    tau = (1 - alpha ** (k + 1)) / (1 - alpha)
    return tau * 70.0 / (70.0 + k)


def test_observed_k_is_the_k_the_acceptance_speaks_for():
    from specsim.specs.calibrations import load_calibration
    from specsim.specs.scenario import load_scenario
    from specsim.speculation.operating_point import resolve

    assert observed_k(resolve_id("seed-70b-hbm")) == 5  # tau = 3.5 given at K = 5
    assert observed_k(resolve_id("llama-70b-h100-chat")) == 4  # alpha given for the scenario's K = 4
    s = load_scenario("seed-70b-hbm")
    three = resolve(replace(s, tau=None, k=3, sections={**s.sections, "acceptance": {"by_position": [0.9, 0.8, 0.7]}}))
    assert observed_k(three) == 3
    cal = load_calibration("smollm2-135m/layer-skip/prose")
    assert observed_k(resolve_id("smollm2-local-heldout")) == max([cal.k, *cal.ks, len(cal.conditional or ())])


def test_no_k_above_the_observed_one_is_recommended_and_one_asked_for_is_labelled_everywhere():
    from specsim.presentation.text import format_advice, format_policy

    op = resolve_id("seed-70b-hbm")
    by_hand = [_seed_speedup_by_hand(k) for k in range(1, 9)]
    assert int(np.argmax(by_hand[:5])) + 1 == 5 and int(np.argmax(by_hand)) + 1 == 8  # i.i.d. α past K = 5 picks 8
    a = advise(op)
    assert max(b["k"] for b in a.bands) == 5 and a.bands[0]["k"] == 5
    assert not any(b["extrapolated"] for b in a.bands)
    assert a.configs["trtllm"]["config"]["max_draft_len"] == 5 and "warning" not in a.configs["trtllm"]
    # asked for: [threshold] k_max = 8 runs K = 8 at small batches, labelled in the bands, the TensorRT-LLM
    # lines (max_draft_len, draft_len_schedule) and the notes
    wide = op.with_overrides(sections={"threshold": {**op.section("threshold"), "k_max": 8}})
    w = advise(wide)
    assert w.bands[0]["k"] == 8 and w.bands[0]["extrapolated"]
    assert all(b["extrapolated"] == (b["k"] > 5) for b in w.bands)
    trt = w.configs["trtllm"]
    assert trt["config"]["max_draft_len"] == 8 and trt["config"]["draft_len_schedule"][w.bands[0]["batch_max"]] == 8
    assert "extrapolated" in trt["warning"] and "max_draft_len 8" in trt["warning"] and "K = 5" in trt["warning"]
    text = format_advice(w)
    assert "K = 8 (extrapolated)" in text and "NOTE: max_draft_len 8" in text
    assert any("K above 5 is extrapolated" in n for n in w.notes)
    assert "extrapolated" in format_policy(w.policy)
    # the extrapolated K = 8 against K = 5 at batch 1: the seed's arithmetic, by hand, to 1 %
    ratio = w.policy.per_batch[0]["best_speedup"] / a.policy.per_batch[0]["best_speedup"]
    assert ratio == pytest.approx(by_hand[7] / by_hand[4], rel=0.01)


def test_the_verdicts_k_and_the_bands_k_agree_or_one_line_says_where_they_differ():
    op = resolve_id("seed-70b-hbm")
    a = advise(op)
    rows = band_rows(a.bands)
    differ = [(r, k) for r, k in rows if k not in ("off", f"K = {a.k}")]
    assert differ and a.k_note.count("K = ") == len(differ) + 1  # the verdict's K, then each band that differs
    for r, k in differ:
        assert f"{k} at batch {r}" in a.k_note
    # bands only up to batch 16, all at the verdict's K = 5: nothing to say
    short = op.with_overrides(sections={"threshold": {**op.section("threshold"), "batch_sizes": [1, 2, 4, 8, 16]}})
    s = advise(short)
    assert {b["k"] for b in s.bands} == {5} and s.k_note is None


def test_no_note_prints_none():
    from specsim.presentation.text import format_advice, format_policy
    from specsim.analyses.switch_off import switch_off_point

    so = switch_off_point(resolve_id("seed-70b-hbm"), batch_limit=16)  # pays at every batch to 16
    assert so.batch_off is None and off_words(so) == "it pays at every batch to 16"
    for name in ("seed-70b-hbm", "seed-7b-ddr5", "llama-70b-h100-chat", "llama-8b-h100-code-pld",
                 "llama-8b-128k-sparse-kv"):
        a = advise(resolve_id(name), simulate=False)
        for text in (format_advice(a), format_policy(a.policy), *a.notes, *a.assumptions):
            assert "None" not in text, (name, text)


def test_a_stack_that_does_not_ship_the_method_gets_no_warning_and_the_note_names_only_shipped_stacks():
    a = advise(resolve_id("llama-8b-128k-sparse-kv"))
    assert a.min_batch == 4
    for c in a.configs.values():
        assert c.get("config") is None and "warning" not in c  # vLLM does not ship sparse_kv: nothing to warn about
    note = next(n for n in a.notes if "below about 4" in n)
    assert "V1" not in note and "ships 'sparse_kv'" in note
    configs = {"vllm": {"config": {}, "expresses_min_batch": True}, "vllm-v0": {"config": {}},
               "sglang": {"flags": ["--x"]}, "trtllm": {"config": None, "note": "not shipped"}}
    note = _min_batch_advice(resolve_id("llama-8b-128k-sparse-kv"), configs, 4)
    assert "vLLM V1's per-batch schedule starts it at 4" in note and "vLLM V0, SGLang can only switch it off" in note
    assert "warning" not in configs["vllm"] and "warning" in configs["vllm-v0"] and "warning" in configs["sglang"]
    assert "warning" not in configs["trtllm"]


@pytest.mark.parametrize("edit, note", [
    (lambda s: s.replace("[slo]", "[fleet]\nn_replicas = 4\n\n[slo]"), "no simulated run reached a running batch"),
    (lambda s: s.replace("ttft_s = 2.0", "ttft_s = 1e-9").replace("tpot_s = 0.05", "tpot_s = 1e-9"),
     "no simulated policy meets the SLO"),
])
def test_a_band_is_never_recommended_where_it_slows_decoding(tmp_path, edit, note):
    from pathlib import Path

    from specsim.analyses.advise import largest_simulated_batch
    from specsim.analyses.threshold import recommended_switch_off

    src = (Path(__file__).resolve().parents[1] / "scenarios" / "llama-70b-h100-chat.toml").read_text()
    path = tmp_path / "edited.toml"
    path.write_text(edit(src))
    op = resolve_id(str(path))
    a = advise(op, rates=[1, 8], n_requests=200)
    assert a.on
    for b in a.bands:
        if b["k"] > 0:
            assert b["speedup_min"] >= 1.0, b
    assert any(note in n for n in a.notes), a.notes
    if "fleet" in note or "reached" in note:
        # four replicas share the stream: no replica's batch reaches the gates, so the analytic point decides
        off = recommended_switch_off(op).batch_off
        assert largest_simulated_batch(a.gates) < off == a.gate_batch
