"""`specsim simulate` end to end on a tiny scenario, and the scenario sections' validation."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsim.cli import main
from specsim.errors import SpecError
from specsim.serving import build_serving as _build_from_point, crossover_rate, sweep
from specsim.serving.setup import resolve_data_path
from specsim.specs.scenario import load_scenario
from specsim.speculation.operating_point import resolve


def build_serving(scenario, **kw):
    return _build_from_point(resolve(scenario), **kw)

SCENARIO = """
name = "tiny"
hardware = "h100-sxm"
target = "llama-3.1-8b"
drafter = "llama-3.2-1b"
method = "draft_model"
k = 3
alpha = 0.8
tp = 1
[workload]
kind = "trace"
trace = "{trace}"
rates = [1.0, 4.0]
[engine]
max_num_seqs = 8
max_num_batched_tokens = 512
{engine_extra}
[policies]
never = {{ kind = "never" }}
static = {{ kind = "static", k = 3 }}
gate = {{ kind = "disable_by_batch_size", k = 3, threshold = 4 }}
[slo]
ttft_s = 1.0
tpot_s = 0.05
"""


def _scenario(tmp_path: Path, engine_extra: str = "", n: int = 24) -> Path:
    trace = tmp_path / "trace.csv"
    rows = [f"{i * 0.5},{64 + 7 * i},{8 + (i % 5) * 6}" for i in range(n)]
    trace.write_text("arrival_time_s,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    path = tmp_path / "tiny.toml"
    path.write_text(SCENARIO.format(trace=trace, engine_extra=engine_extra))
    return path


def test_simulate_cli_table_csv_and_plots(tmp_path, capsys):
    path = _scenario(tmp_path)
    out = tmp_path / "out"
    assert main(["simulate", str(path), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "TPOT p50" in text and "static" in text and "gate" in text and "KV cache:" in text
    assert "switch-off point (analytic): " in text and "under the workload" in text
    assert (out / "summary.csv").is_file() and (out / "requests_static_rate4.csv").is_file()
    sizes = __import__("pandas").read_csv(out / "batch_sizes.csv")
    assert set(sizes["policy"]) == {"never", "static", "gate"} and sizes["time_frac"].between(0, 1).all()
    for png in ("latency_vs_rate.png", "throughput_vs_rate.png", "goodput_vs_rate.png", "speedup_vs_rate.png"):
        assert (out / png).stat().st_size > 10_000
    manifest = json.loads((out / "manifest.json").read_text())
    assert "summary.csv" in manifest["files"] and "requests_static_rate4.csv" in manifest["files"]
    # a reused --out is refused without --force; with --force an earlier run's files do not linger
    assert main(["simulate", str(path), "--out", str(out), "--rates", "2", "--no-plots"]) == 5
    assert "not empty" in capsys.readouterr().err
    assert main(["simulate", str(path), "--out", str(out), "--rates", "2", "--no-plots", "--force"]) == 0
    capsys.readouterr()
    assert not (out / "requests_static_rate4.csv").exists() and (out / "requests_static_rate2.csv").is_file()
    assert not (out / "latency_vs_rate.png").exists()
    assert main(["simulate", str(path), "--rates", "2", "--policies", "never,static", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in data["runs"]] == ["never", "static"]
    assert all(r["n_done"] == 24 for r in data["runs"])
    assert data["runs"][1]["num_drafts"] > 0 and data["runs"][0]["num_drafts"] == 0


def test_simulate_cli_bad_flags(tmp_path, capsys):
    path = _scenario(tmp_path)
    assert main(["simulate", str(path), "--rates", "1,fast"]) == 2
    assert "--rates" in capsys.readouterr().err
    assert main(["simulate", str(path), "--policies", "sometimes"]) == 2
    assert "policy 'sometimes'" in capsys.readouterr().err
    for flags, fragment in ((["--rates", "1,1"], "each value once"), (["--policies", "never,never"], "each value once"),
                            (["--seed", "-1"], "--seed"), (["--rates", "0"], "out of range")):
        assert main(["simulate", str(path), *flags]) == 2
        assert fragment in capsys.readouterr().err


@pytest.mark.parametrize("extra, fragment", [
    ("max_num_seq = 4", "unknown key 'max_num_seq'"),
    ("max_num_batched_tokens = 0", "'max_num_batched_tokens'"),
    ("gpu_memory_utilization = 1.5", "gpu_memory_utilization"),
    # one block of ten million tokens: named as the block size, not as a cache with no room
    ("block_size = 10000000", "'block_size' = 10000000: expected at most 4096"),
])
def test_engine_section_is_validated(tmp_path, extra, fragment):
    path = _scenario(tmp_path, engine_extra=extra)
    if extra.startswith("max_num_batched_tokens"):
        path.write_text(path.read_text().replace("max_num_batched_tokens = 512\n", ""))
    with pytest.raises(SpecError, match=fragment):
        build_serving(load_scenario(str(path)))


def test_workload_and_slo_sections_are_validated(tmp_path):
    path = _scenario(tmp_path)
    text = path.read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('kind = "trace"', 'kind = "trace"\nratez = [1]'))
    with pytest.raises(SpecError, match="unknown key 'ratez'"):
        build_serving(load_scenario(str(bad)))
    bad.write_text(text.replace("tpot_s = 0.05", "tpot_s = -1"))
    with pytest.raises(SpecError, match="'tpot_s'"):
        build_serving(load_scenario(str(bad)))
    bad.write_text(text.replace("alpha = 0.8\n", ""))
    with pytest.raises(SpecError, match="acceptance rate"):
        build_serving(load_scenario(str(bad)))


def test_missing_trace_names_specsim_data(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSIM_DATA", str(tmp_path))
    with pytest.raises(SpecError, match="SPECSIM_DATA"):
        resolve_data_path("traces/nope.csv")


def test_shipped_scenario_builds_and_crossover_helper(tmp_path):
    try:
        setup = build_serving(load_scenario("llama-70b-h100-chat"))
    except SpecError as exc:
        if "SPECSIM_DATA" in str(exc):
            pytest.skip(str(exc))
        raise
    assert setup.workload.n_requests > 1000 and set(setup.policies) == {"never", "static_k4", "gate_bs112"}
    assert setup.acceptance == (0.7,) and setup.acceptance_factor is None
    import pandas as pd
    t = pd.DataFrame({"policy": ["p"] * 3, "rate_per_s": [1.0, 2.0, 4.0], "speedup_tpot_p50": [2.0, 1.5, 0.5]})
    # 1.5 at rate 2, 0.5 at rate 4: crosses 1 half way in log2(rate): 2^1.5
    assert crossover_rate(t, "p") == pytest.approx(2 ** 1.5)


def test_eagle_scenario_counts_its_head_in_memory_and_runs(tmp_path):
    path = _scenario(tmp_path, n=8)
    text = path.read_text().replace('drafter = "llama-3.2-1b"\nmethod = "draft_model"', 'method = "eagle"')
    path.write_text(text)
    setup = build_serving(load_scenario(str(path)))
    assert "eagle head weights" in setup.capacity.memory_bytes
    table, _ = sweep(setup, rates=[2.0], policies=["never", "static"])
    assert table["n_done"].tolist() == [8, 8] and table.loc[1, "num_drafts"] > 0


def test_shipped_scenario_under_memory_pressure_preempts_and_conserves():
    """The Azure trace at 8 req/s into a cache cut to 3,000 blocks: preemption by recompute happens,
    the cache never overflows, every request finishes with exactly its tokens, none emitted twice;
    and the fitted cost twin reproduces an exact-cost run to rounding."""
    from dataclasses import replace

    import numpy as np

    from specsim.serving import ServingCost, simulate
    try:
        setup = build_serving(load_scenario("llama-70b-h100-chat"))
    except SpecError as exc:
        if "SPECSIM_DATA" in str(exc):
            pytest.skip(str(exc))
        raise
    w = setup.workload.head(400).at_rate(8.0)
    cfg = replace(setup.config, n_blocks=3000)
    r = simulate(w, config=cfg, cost=setup.cost, policy=setup.policies["static_k4"], acceptance=setup.acceptance,
                 record_tokens=True)
    req, tok = r.requests, r.tokens()
    assert (req["status"] == "done").all() and (req["emitted_tokens"] == req["output_tokens"]).all()
    assert r.summary["n_preemptions"] > 0 and r.steps["kv_used_blocks"].max() <= 3000
    assert len(tok) == len(set(zip(tok["request"], tok["token_index"]))) == int(req["output_tokens"].sum())
    exact = ServingCost(setup.point, exact=True)
    w2 = setup.workload.head(150).at_rate(4.0)
    a = simulate(w2, config=setup.config, cost=setup.cost, policy=setup.policies["static_k4"], acceptance=setup.acceptance)
    b = simulate(w2, config=setup.config, cost=exact, policy=setup.policies["static_k4"], acceptance=setup.acceptance)
    assert np.allclose(a.requests["finish_at_s"], b.requests["finish_at_s"], rtol=0, atol=1e-9)


def test_scenario_acceptance_model_keys(tmp_path):
    path = _scenario(tmp_path, n=6)
    text = path.read_text().replace('[workload]', '[acceptance]\ncontext_decay_per_token = 1e-6\n'
                                    'temperature_slope = 0.5\nreference_temperature = 0.0\n[workload]')
    path.write_text(text.replace('alpha = 0.8', 'alpha = 0.8\ntemperature = 0.4'))
    setup = build_serving(load_scenario(str(path)))
    f = setup.acceptance_factor
    # each sequence's rate: 0.8 · exp(−1e-6 (L − L_ref) − 0.5 (0.4 − 0)); L_ref = the scenario's context 1024
    assert setup.acceptance == (0.8,)
    assert f(1024) == pytest.approx(2.718281828459045 ** -0.2)
    assert f(101024) == pytest.approx(2.718281828459045 ** (-0.2 - 0.1))
    table, _ = sweep(setup, rates=[2.0], policies=["static"])
    assert table["n_done"].tolist() == [6]
    path.write_text(text.replace("temperature_slope = 0.5", "temperature_slope = nan"))
    with pytest.raises(SpecError, match="temperature_slope"):
        build_serving(load_scenario(str(path)))


def test_moved_keys_say_where_they_went(tmp_path):
    path = _scenario(tmp_path, n=6)
    path.write_text(path.read_text().replace('rates = [1.0, 4.0]', 'rates = [1.0, 4.0]\nacceptance_by_position = [0.8]'))
    with pytest.raises(SpecError, match=r"moved to \[acceptance\] by_position"):
        load_scenario(str(path))


@pytest.mark.parametrize("extra, fragment", [('chunked_prefill = "false"', "a boolean"),
                                             ("block_size = 4.5", "an integer")])
def test_engine_types_are_checked(tmp_path, extra, fragment):
    with pytest.raises(SpecError, match=fragment):
        build_serving(load_scenario(str(_scenario(tmp_path, engine_extra=extra))))


def test_empty_window_is_an_empty_result(tmp_path, capsys):
    path = _scenario(tmp_path)
    path.write_text(path.read_text().replace('rates = [1.0, 4.0]', 'rates = [1.0, 4.0]\nwindow_s = [1000, 2000]'))
    assert main(["simulate", str(path)]) == 6
    assert "no requests" in capsys.readouterr().err
