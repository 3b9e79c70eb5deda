"""Workloads: trace readers in their own formats, bad-input errors naming file/line/value,
synthetic arrivals and lengths, time scaling and windows."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from specsim.errors import SpecError
from specsim.serving import workloads as wl

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_azure_reader_parses_seven_digit_fractions_relative_to_first_row(tmp_path):
    p = _write(tmp_path, "a.csv", AZURE_HEADER + "\n2023-11-16 18:15:46.6805900,374,44\n"
               "2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:16:00.0000000,1,1")  # no final newline
    w = wl.read_azure(p)
    # by hand: 50.9951690 - 46.6805900 = 4.314579 s; 60 - 46.68059 = 13.31941 s
    np.testing.assert_allclose(w.arrival_at_s, [0.0, 4.314579, 13.31941], atol=1e-6)
    assert w.prompt_tokens.tolist() == [374, 396, 1] and w.output_tokens.tolist() == [44, 109, 1]


@pytest.mark.parametrize("body, line, fragment", [
    ("2023-11-16 18:15:46.68,374,-5", 2, "'GeneratedTokens' = '-5'"),
    ("2023-11-16 18:15:46.68,37.5,5", 2, "'ContextTokens' = '37.5'"),
    ("2023-11-16 18:15:46.68,0,5", 2, "'ContextTokens' = '0'"),
    ("2023-11-16 18:15:46.68,10,5\nyesterday,10,5", 3, "'TIMESTAMP' = 'yesterday'"),
    ("2023-11-16 18:15:46.68,10,5\n2023-11-16 18:15:45.00,10,5", 3, "no earlier than the previous"),
    ("2023-02-30 18:15:46.68,10,5", 2, "valid calendar date"),
])
def test_azure_bad_rows_name_file_line_and_value(tmp_path, body, line, fragment):
    p = _write(tmp_path, "bad.csv", AZURE_HEADER + "\n" + body + "\n")
    with pytest.raises(SpecError) as exc:
        wl.read_azure(p)
    msg = str(exc.value)
    assert str(p) in msg and f"line {line}" in msg and fragment in msg


def test_missing_column_is_named(tmp_path):
    p = _write(tmp_path, "bad.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,10\n")
    with pytest.raises(SpecError, match=r"bad\.csv: line 1: missing column 'GeneratedTokens'"):
        wl.read_azure(p)


def test_plain_csv_and_its_errors(tmp_path):
    p = _write(tmp_path, "p.csv", "arrival_time_s,prompt_tokens,output_tokens\n0.5,10,2\n0.5,3,4\n2.25,7,1\n")
    w = wl.read_trace(p)
    assert w.arrival_at_s.tolist() == [0.5, 0.5, 2.25] and w.output_tokens.tolist() == [2, 4, 1]
    bad = _write(tmp_path, "q.csv", "arrival_time_s,prompt_tokens,output_tokens\n1.0,10,2\n0.5,3,4\n")
    with pytest.raises(SpecError, match=r"q\.csv: line 3: column 'arrival_time_s' = '0\.5'"):
        wl.read_trace(bad)
    nan = _write(tmp_path, "r.csv", "arrival_time_s,prompt_tokens,output_tokens\nnan,10,2\n")
    with pytest.raises(SpecError, match=r"r\.csv: line 2: column 'arrival_time_s' = 'nan'"):
        wl.read_trace(nan)


def test_mooncake_reader_ms_timestamps_and_seeded_jitter(tmp_path):
    rows = [(0, 100, 5), (0, 200, 6), (0, 300, 7), (3000, 50, 1), (6001, 60, 2)]
    p = _write(tmp_path, "m.jsonl", "\n".join(json.dumps({"timestamp": t, "input_length": i, "output_length": o,
                                                          "hash_ids": [0]}) for t, i, o in rows))
    raw = wl.read_mooncake(p)
    assert raw.arrival_at_s.tolist() == [0.0, 0.0, 0.0, 3.0, 6.001] and raw.notes == ()
    a = wl.read_mooncake(p, rng=np.random.default_rng(1)).arrival_at_s
    b = wl.read_mooncake(p, rng=np.random.default_rng(1)).arrival_at_s
    assert a.tolist() == b.tolist()  # seeded
    assert np.all(np.diff(a) >= 0)  # file order kept
    assert len(set(a[:3].tolist())) == 3  # the shared quantum is spread out ...
    # ... within its bin, before the next quantum (times relative to the first jittered arrival)
    assert a[2] - a[0] < 3.0 and a[2] <= a[3]
    assert "jitter" in wl.read_mooncake(p, rng=np.random.default_rng(1)).notes[0]


@pytest.mark.parametrize("line, fragment", [
    ('{"timestamp": 0, "input_length": 5}', "missing field 'output_length'"),
    ('{"timestamp": -1, "input_length": 5, "output_length": 1}', "'timestamp' = -1"),
    ('{"timestamp": 0, "input_length": 5.5, "output_length": 1}', "'input_length' = 5.5"),
    ('not json', "not valid JSON"),
])
def test_mooncake_bad_lines(tmp_path, line, fragment):
    p = _write(tmp_path, "m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n' + line + "\n")
    with pytest.raises(SpecError) as exc:
        wl.read_mooncake(p)
    assert "m.jsonl: line 2" in str(exc.value) and fragment in str(exc.value)


def test_time_scaling_and_window():
    w = wl.Workload(arrival_at_s=np.array([0.0, 1.0, 2.0, 3.0, 4.0]), prompt_tokens=np.arange(1, 6),
                    output_tokens=np.ones(5, dtype=np.int64))
    assert w.mean_rate_per_s == pytest.approx(1.0)
    assert w.scaled(2.0).arrival_at_s.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert w.at_rate(4.0).mean_rate_per_s == pytest.approx(4.0)
    win = w.window(1.0, 3.0)
    assert win.arrival_at_s.tolist() == [0.0, 1.0] and win.prompt_tokens.tolist() == [2, 3]
    with pytest.raises(SpecError):
        w.scaled(0.0)


def test_poisson_and_gamma_arrivals_have_the_asked_rate_and_cv():
    rng = np.random.default_rng(7)
    t = wl.poisson_arrivals(rng, rate_per_s=5.0, n_requests=20001)
    gaps = np.diff(t)
    # 20,000 exponential gaps: the mean's standard error is 1/5/sqrt(2e4) = 0.0014 s; 3 % tolerance
    assert gaps.mean() == pytest.approx(0.2, rel=0.03) and gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.03)
    g = np.diff(wl.gamma_arrivals(rng, rate_per_s=5.0, cv=3.0, n_requests=20001))
    assert g.mean() == pytest.approx(0.2, rel=0.08) and g.std() / g.mean() == pytest.approx(3.0, rel=0.08)


def test_lengths_and_lognormal_fit():
    rng = np.random.default_rng(3)
    assert wl.Lengths(kind="fixed", tokens=7).sample(rng, 3).tolist() == [7, 7, 7]
    u = wl.Lengths(kind="uniform", min=2, max=4).sample(rng, 1000)
    assert set(u.tolist()) == {2, 3, 4}
    x = np.rint(rng.lognormal(5.0, 0.8, size=20000)).astype(int) + 1
    fit = wl.fit_lognormal(x)
    assert fit.mu == pytest.approx(5.0, abs=0.02) and fit.sigma == pytest.approx(0.8, abs=0.02)
    assert fit.sample(rng, 1000).max() <= x.max()
    with pytest.raises(SpecError, match="field 'tokens'"):
        wl.Lengths(kind="fixed", tokens=0)


def test_closed_loop_workload_has_no_arrival_times():
    w = wl.closed_loop(n_users=3, n_requests=5, prompt=wl.Lengths(kind="fixed", tokens=4),
                       output=wl.Lengths(kind="fixed", tokens=2), rng_lengths=np.random.default_rng(0))
    assert w.is_closed_loop and np.isnan(w.arrival_at_s).all() and w.n_users == 3
    with pytest.raises(SpecError):
        w.scaled(2.0)


def test_shipped_azure_conversation_trace_matches_its_readme():
    from specsim.specs.data import data_dir
    path = data_dir() / "traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv"
    w = wl.read_azure(path)
    # README: 19,366 requests over 3,501.7 s; context mean 1,155; generated mean 211, max 1,000
    assert w.n_requests == 19366
    assert w.duration_s == pytest.approx(3501.7, abs=0.1)
    assert w.prompt_tokens.mean() == pytest.approx(1155, abs=1) and w.output_tokens.max() == 1000
    assert not math.isnan(w.mean_rate_per_s)


def test_shipped_mooncake_trace_reads_with_jitter_inside_its_quanta():
    from specsim.specs.data import data_dir
    path = data_dir() / "traces/mooncake_fast25/conversation_trace.jsonl"
    raw = wl.read_mooncake(path)
    w = wl.read_mooncake(path, rng=np.random.default_rng(0))
    # README: 12,031 requests, 1,180 distinct timestamps ~3 s apart, input mean 12,035, output max 2,000
    assert w.n_requests == 12031 and len(np.unique(raw.arrival_at_s)) == 1180
    assert w.prompt_tokens.mean() == pytest.approx(12035, abs=1) and w.output_tokens.max() == 2000
    assert np.all(np.diff(w.arrival_at_s) >= 0) and len(np.unique(w.arrival_at_s)) == 12031
    # each request stays within its ~3 s quantum (both series are shifted to start at 0)
    assert np.all(np.abs(w.arrival_at_s - raw.arrival_at_s) < 3.01)


def test_arrivals_and_lengths_come_from_separate_streams():
    """SeedSequence(seed).spawn(3): arrivals [0], lengths [1], acceptance [2]; changing the length
    distribution (or K, or the policy) leaves the arrival times unchanged."""
    from specsim.serving.setup import build_workload
    from specsim.specs.scenario import Scenario
    from specsim.speculation.operating_point import resolve
    op = resolve(Scenario(name="x", method="none"))
    raw = {"kind": "poisson", "n_requests": 50, "rate_per_s": 3.0, "prompt": {"kind": "fixed", "tokens": 10},
           "output": {"kind": "uniform", "min": 1, "max": 9}}
    a, _, _ = build_workload(op, raw, seed=4)
    b, _, _ = build_workload(op, {**raw, "prompt": {"kind": "uniform", "min": 5, "max": 500}}, seed=4)
    c, _, _ = build_workload(op, raw, seed=5)
    assert np.array_equal(a.arrival_at_s, b.arrival_at_s) and np.array_equal(a.output_tokens, b.output_tokens)
    assert not np.array_equal(a.arrival_at_s, c.arrival_at_s)
    with pytest.raises(SpecError, match="unknown key 'rate'"):
        build_workload(op, {**raw, "rate": 3.0}, seed=4)


def test_a_lognormal_sigma_of_minus_zero_is_zero():
    """sigma = -0.0 equals 0 and is accepted, so it must draw as 0 does: every length exp(mu) rounded
    (mu = 3: e^3 = 20.09 -> 20). numpy's lognormal refuses -0.0 by its sign bit (the CLI fuzz found it)."""
    draws = wl.Lengths(kind="lognormal", mu=3.0, sigma=-0.0).sample(np.random.default_rng(0), 5)
    assert draws.tolist() == [20] * 5
