"""Acceptance imported from serving stacks' logs and metrics (specsim.calibration.imports).

Every sample below is written by hand from the stacks' documented formats (vLLM's
vllm/spec_decode/metrics.py and vllm/v1/spec_decode/metrics.py log strings and Prometheus counter
names, SGLang's scheduler log line, llama.cpp's speculative example summary), with counts chosen so
the expected figures can be worked out by hand; each expected value says how."""
from __future__ import annotations

import numpy as np
import pytest

from specsim.calibration.imports import (detect_format, import_acceptance, read_llama_cpp, read_sglang_log,
                                         read_vllm_prometheus, read_vllm_v0_log, read_vllm_v1_log)
from specsim.errors import InputError, SpecError

# K = 3, 100 drafts of 3 tokens; accepted prefix lengths A: 20 drafts A = 0, 20 A = 1, 20 A = 2, 40 A = 3.
# Drafts with A >= 1, 2, 3: 80, 60, 40 (rates 0.800, 0.600, 0.400); accepted = 80 + 60 + 40 = 180;
# τ = 1 + 180 / 100 = 2.80; drafted 300.
V1_LINE = ("INFO 05-01 10:00:10 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 2.80, "
           "Accepted throughput: 18.00 tokens/s, Drafted throughput: 30.00 tokens/s, Accepted: 180 tokens, "
           "Drafted: 300 tokens, Per-position acceptance rate: 0.800, 0.600, 0.400, Avg Draft acceptance rate: 60.0%")
# the same mix over 50 drafts, in the older layout (rate first, no throughputs)
V1_OLD = ("INFO 05-01 10:00:20 [metrics.py:88] SpecDecoding metrics: Draft acceptance rate: 60.0%, Mean acceptance "
          "length: 2.80, Accepted: 90 tokens, Drafted: 150 tokens, Per-position acceptance rate: 0.800, 0.600, 0.400")


def test_vllm_v1_lines_add_up_to_the_hand_counts():
    text = "\n".join(["INFO unrelated line", V1_LINE, V1_OLD])
    imp = read_vllm_v1_log(text)
    assert imp.k == 3 and imp.n_lines == 2
    assert imp.n_drafts == 150 and imp.n_draft_tokens == 450 and imp.n_accepted == 270
    assert imp.per_position == (120.0, 90.0, 60.0)
    # conditional: c1 = 120/150, c2 = 90/120, c3 = 60/90 (exact ratios of the counts)
    np.testing.assert_allclose(imp.conditional.estimate, [0.8, 0.75, 60 / 90], rtol=0, atol=1e-12)
    # i.i.d. MLE S / (S + F): S = 270 accepted, F = drafts that stopped short of K = 150 − 60 = 90
    assert imp.iid.estimate == pytest.approx(270 / 360, abs=1e-12)
    assert imp.iid.ci_low < 0.75 < imp.iid.ci_high
    assert imp.tau == pytest.approx(2.8, abs=1e-12)


def test_vllm_v0_cumulative_lines_and_a_restart():
    head = "INFO 10-16 19:05:47 metrics.py:367] Speculative metrics: Draft acceptance rate: {r}, System efficiency: 0.5, "
    body = "Number of speculative tokens: 4, Number of accepted tokens: {a}, Number of draft tokens: {d}, Number of emitted tokens: {e}."
    lines = [head.format(r="0.600") + body.format(a=300, d=500, e=350),
             head.format(r="0.600") + body.format(a=600, d=1000, e=700),   # same run, later: replaces the first
             head.format(r="0.600") + body.format(a=120, d=200, e=140)]   # counters fell: a new run
    imp = read_vllm_v0_log("\n".join(lines))
    # runs' last lines: (600, 1000, 700) + (120, 200, 140); drafts = 1200 / 4 = 300
    assert imp.k == 4 and imp.n_drafts == 300 and imp.n_draft_tokens == 1200
    # every drafted position one trial: α̂ = 720 / 1200 = 0.6; τ = emitted / drafts = 840 / 300 = 2.8
    assert imp.iid.estimate == pytest.approx(0.6, abs=1e-12)
    assert imp.tau == pytest.approx(2.8, abs=1e-12) and imp.n_accepted == 840 - 300
    assert imp.iid.ci_low < 0.6 < imp.iid.ci_high


PROM = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="llama"} 60.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="llama"} 40.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="llama"} 1.7463e+09
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="llama"} 180.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="llama"} 120.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="llama"} 108.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="llama"} 72.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama",position="0"} 48.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama",position="1"} 36.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama",position="2"} 24.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="llama",position="0"} 32.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="llama",position="1"} 24.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="llama",position="2"} 16.0
vllm:num_requests_running{engine="0",model_name="llama"} 3.0
"""


def test_prometheus_scrape_sums_engines_to_the_hand_counts():
    imp = read_vllm_prometheus(PROM)
    # engines add: 100 drafts, 300 draft tokens, 180 accepted, per position 80, 60, 40 (the V1 example)
    assert (imp.n_drafts, imp.n_draft_tokens, imp.n_accepted) == (100, 300, 180)
    np.testing.assert_allclose(imp.conditional.estimate, [0.8, 0.75, 40 / 60], atol=1e-12)
    assert imp.iid.estimate == pytest.approx(180 / 240, abs=1e-12)  # S = 180, F = 100 − 40
    assert detect_format(PROM) == "vllm-prometheus"


def test_prometheus_two_models_must_be_named():
    text = PROM + 'vllm:spec_decode_num_drafts_total{engine="0",model_name="other"} 5.0\n'
    with pytest.raises(SpecError, match="other"):
        read_vllm_prometheus(text)
    assert read_vllm_prometheus(text, model_name="llama").n_drafts == 100


def test_sglang_accept_length_weighted_by_running_requests():
    text = "\n".join([
        "[2025-05-01 10:00:00] Decode batch. #running-req: 2, #token: 900, token usage: 0.01, accept len: 2.80, "
        "gen throughput (token/s): 120.00, #queue-req: 0, ",
        "[2025-05-01 10:00:05] Decode batch. #running-req: 1, #token: 950, token usage: 0.01, accept len: 3.40, "
        "accept rate: 0.80, cuda graph: True, gen throughput (token/s): 60.00, #queue-req: 0, ",
    ])
    imp = read_sglang_log(text, k=3)
    assert imp.tau == pytest.approx((2 * 2.8 + 3.4) / 3, abs=1e-12)  # = 3.0
    a = imp.iid.estimate  # the α with 1 + α + α² + α³ = 3 (K = 3), checked on the polynomial itself
    assert 1 + a + a ** 2 + a ** 3 == pytest.approx(3.0, abs=1e-9)
    assert imp.iid.ci_low < a < imp.iid.ci_high
    with pytest.raises(SpecError, match="draft length SGLang ran with"):
        read_sglang_log(text, k=None)


def test_llama_cpp_summary():
    text = "\n".join(["encoded   40 tokens in    0.100 seconds", "n_draft   = 4", "n_predict = 130", "n_drafted = 200",
                      "n_accept  = 80", "accept    = 40.000%"])
    imp = read_llama_cpp(text)
    assert imp.k == 4 and imp.n_drafts == 50  # cycles = 130 − 80
    assert imp.tau == pytest.approx(130 / 50, abs=1e-12)  # 2.6
    a = imp.iid.estimate
    assert 1 + a + a ** 2 + a ** 3 + a ** 4 == pytest.approx(2.6, abs=1e-9)
    assert imp.iid.ci_low < a < imp.iid.ci_high


@pytest.mark.parametrize("text, line", [
    (V1_LINE + "\n" + V1_LINE.replace("Accepted: 180", "Accepted: many"), 2),
    ("x\n" + V1_LINE.replace("Mean acceptance length: 2.80", "Mean acceptance length: 2.10"), 2),  # disagrees
    ("Speculative metrics: Draft acceptance rate: 0.6, System efficiency: 0.5, Number of speculative tokens: 4, "
     "Number of accepted tokens: 10, Number of draft tokens: 1001, Number of emitted tokens: 300.", 1),
    ("# TYPE x counter\n\nvllm:spec_decode_num_drafts_total{engine=\"0\"} lots\n", 3),
    ("vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\"} 4\n", 1),
    ("a\nb\nDecode batch. #running-req: 1, accept len: 9.50, gen throughput (token/s): 1.0", 3),
])
def test_malformed_lines_are_named(tmp_path, text, line):
    f = tmp_path / "log.txt"
    f.write_text(text)
    with pytest.raises(InputError, match=rf"log\.txt:{line}:"):
        import_acceptance(f, k=3 if "Decode batch" in text else None)


def test_detect_and_refuse():
    assert detect_format(V1_LINE) == "vllm-v1-log"
    assert detect_format("nothing here") is None


def test_unrecognised_file(tmp_path):
    f = tmp_path / "empty.log"
    f.write_text("hello\n")
    with pytest.raises(InputError, match="no speculative-decoding metrics"):
        import_acceptance(f)
    with pytest.raises(InputError, match="no such file"):
        import_acceptance(tmp_path / "missing.log")


def test_cli_import_writes_a_calibration_a_scenario_names(tmp_path, capsys):
    from specsim.cli import main
    from specsim.specs.scenario import scenario_from_dict
    from specsim.speculation.operating_point import resolve

    log = tmp_path / "vllm.log"
    log.write_text(V1_LINE + "\n" + V1_OLD + "\n")
    out = tmp_path / "cal.toml"
    assert main(["calibrate", "acceptance", "--import", str(log), "--out", str(out), "--name",
                 "llama-3.1-8b/eagle/chat", "--context-len", "1500"]) == 0
    assert "α = 0.7500" in capsys.readouterr().out  # 270 / 360, as in the V1 test
    op = resolve(scenario_from_dict({"target": "llama-3.1-8b", "method": "eagle", "k": 3, "context_len": 1500,
                                     "acceptance": {"calibrated": str(out)}}))
    assert op.alpha == pytest.approx(0.75, abs=1e-12)
    assert main(["calibrate", "acceptance", "--import", str(log), "--out", str(out), "--name", "no-slashes"]) == 2
    assert "target/drafter/workload" in capsys.readouterr().err
    bad = tmp_path / "bad.log"
    bad.write_text("x\n" + V1_LINE.replace("Drafted: 300", "Drafted: lots") + "\n")
    assert main(["calibrate", "acceptance", "--import", str(bad)]) == 3
    assert "bad.log:2:" in capsys.readouterr().err
