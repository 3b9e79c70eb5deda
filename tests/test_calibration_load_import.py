"""Importers of `specsim calibrate load --format`: each against a file written by hand from the tool's
documented output, the field names read in its source:
- vLLM: vllm/benchmarks/serve.py (vllm-project/vllm, stored version 009e6d4a1cd6): `result_json` keys
  date, backend, label, model_id, num_prompts, request_rate ("inf" or a number), burstiness,
  max_concurrency, then duration, completed, failed, total_input_tokens, total_output_tokens,
  request_throughput, output_throughput, mean/median/std/pNN _ttft/_tpot/_itl/_e2el _ms, and with
  speculation spec_decode_acceptance_rate (%), spec_decode_acceptance_length, spec_decode_num_drafts,
  spec_decode_draft_tokens, spec_decode_accepted_tokens, spec_decode_per_position_acceptance_rates.
- SGLang: python/sglang/bench_serving.py (sgl-project/sglang, stored version 0033168f0f58): one JSON
  line per run with backend, dataset_name, request_rate, max_concurrency, duration, completed,
  total_input_tokens, total_output_tokens, output_throughput, mean_e2e_latency_ms, mean_ttft_ms,
  mean_tpot_ms, mean_itl_ms, concurrency, accept_length (None without speculation).
- GuideLLM: src/guidellm/benchmark/benchmark.py (vllm-project/guidellm, stored version 47ce2924):
  {"benchmarks": [GenerativeBenchmark]}: args.strategy (type_ concurrent + streams, synchronous,
  constant / poisson + rate), metrics.<name>.successful.mean for prompt_token_count,
  output_token_count, inter_token_latency_ms, request_latency, output_tokens_per_second;
  request_totals.successful. The expected rows are the files' numbers converted by hand.
"""
import json

import pytest

from specsim.calibration.load import sweeps_from_table
from specsim.calibration.load_import import import_load_files
from specsim.errors import InputError, SpecError

CONFIG = dict(sweep="imp", stack="vllm", hardware="h100-sxm", n_devices=1, target="llama-3.1-8b", method="eagle", k=3,
              drafter_options="eagle_version=3")


def _vllm(concurrency, out_tps, tpot_ms, e2el_ms=None, spec=None, rate="inf"):
    d = {"date": "20260101-120000", "endpoint_type": "openai", "backend": "openai", "label": None,
         "model_id": "meta-llama/Llama-3.1-8B-Instruct", "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
         "num_prompts": 80, "request_rate": rate, "burstiness": 1.0, "max_concurrency": concurrency,
         "duration": 30.0, "completed": 80, "failed": 0, "total_input_tokens": 80 * 120,
         "total_output_tokens": 80 * 256, "request_throughput": 2.6, "request_goodput": None,
         "output_throughput": out_tps, "total_token_throughput": out_tps * 1.4, "max_output_tokens_per_s": 900.0,
         "max_concurrent_requests": concurrency, "rtfx": 0.0, "mean_ttft_ms": 40.0, "median_ttft_ms": 38.0,
         "std_ttft_ms": 3.0, "p99_ttft_ms": 60.0, "mean_tpot_ms": tpot_ms, "median_tpot_ms": tpot_ms,
         "std_tpot_ms": 0.2, "p99_tpot_ms": tpot_ms * 1.2, "mean_itl_ms": tpot_ms, "median_itl_ms": tpot_ms,
         "std_itl_ms": 0.5, "p99_itl_ms": tpot_ms * 2}
    if e2el_ms is not None:
        d.update(mean_e2el_ms=e2el_ms, median_e2el_ms=e2el_ms, std_e2el_ms=10.0, p99_e2el_ms=e2el_ms * 1.3)
    if spec is not None:
        d.update(spec_decode_acceptance_rate=spec["rate_pct"], spec_decode_acceptance_length=spec["al"],
                 spec_decode_num_drafts=1000, spec_decode_draft_tokens=3000, spec_decode_accepted_tokens=1500,
                 spec_decode_per_position_acceptance_rates=[0.7, 0.5, 0.3])
    return d


def test_vllm_save_result_files(tmp_path):
    files = []
    for c, tps, tpot, spec in ((1, 130.0, 7.5, None), (8, 900.0, 8.6, None),
                               (1, 260.0, 3.8, {"rate_pct": 50.0, "al": 2.5}), (8, 1200.0, 6.4, {"rate_pct": 48.0, "al": 2.44})):
        p = tmp_path / f"{'spec' if spec else 'base'}-c{c}.json"
        p.write_text(json.dumps(_vllm(c, tps, tpot, e2el_ms=2000.0 if c == 1 else None, spec=spec)))
        files.append(str(p))
    t = import_load_files(files, format="vllm", config=CONFIG)
    [sw] = sweeps_from_table(t.astype(str).replace({"None": ""}), where="imported")
    assert (sw.load_kind, sw.method, sw.k) == ("concurrency", "eagle", 3)
    rows = {(r.load, r.speculative): r for r in sw.rows}
    r = rows[(1.0, False)]
    assert (r.prompt_tokens, r.output_tokens, r.n_requests) == (120, 256, 80)  # 9600 / 80, 20480 / 80
    assert r.tpot_s == pytest.approx(0.0075) and r.e2e_latency_s == pytest.approx(2.0)
    assert r.output_tokens_per_s == 130.0 and r.role == "fit"
    s8 = rows[(8.0, True)]
    assert s8.tau == 2.44 and s8.role == "check" and s8.e2e_latency_s is None  # e2el not asked for
    assert rows[(1.0, True)].role == "fit"  # the lowest-load speculative point fits
    assert sw.measured_speedup(s8) == (pytest.approx(1200.0 / 900.0), "output_tokens_per_s")


def test_vllm_rate_runs_and_refusals(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(_vllm(None, 500.0, 9.0, rate=4.0)))
    t = import_load_files([f"plain:{p}"], format="vllm", config=CONFIG)
    assert (t["load_kind"].iloc[0], float(t["load"].iloc[0])) == ("rate", 4.0)
    p.write_text(json.dumps(_vllm(None, 500.0, 9.0)))
    with pytest.raises(InputError, match="no load: max_concurrency is null and request_rate is 'inf'"):
        import_load_files([str(p)], format="vllm", config=CONFIG)
    bad = _vllm(4, 500.0, 9.0)
    bad["output_throughput"] = "fast"
    p.write_text(json.dumps(bad))
    with pytest.raises(InputError, match="field 'output_throughput' = 'fast'"):
        import_load_files([str(p)], format="vllm", config=CONFIG)
    with pytest.raises(SpecError, match="--hardware: required"):
        import_load_files([str(p)], format="vllm", config={**CONFIG, "hardware": ""})


def _sglang(concurrency, out_tps, tpot_ms, e2e_ms, accept):
    return {"backend": "sglang", "dataset_name": "random", "request_rate": float("inf"),
            "max_concurrency": concurrency, "sharegpt_output_len": None, "random_input_len": 1024,
            "random_output_len": 512, "random_range_ratio": 1.0, "duration": 60.0, "completed": 64,
            "total_input_tokens": 64 * 1024, "total_output_tokens": 64 * 512,
            "total_output_tokens_retokenized": 64 * 512, "request_throughput": 1.0, "input_throughput": 1000.0,
            "output_throughput": out_tps, "mean_e2e_latency_ms": e2e_ms, "median_e2e_latency_ms": e2e_ms,
            "std_e2e_latency_ms": 50.0, "p99_e2e_latency_ms": e2e_ms * 1.2, "mean_ttft_ms": 80.0,
            "median_ttft_ms": 70.0, "std_ttft_ms": 9.0, "p99_ttft_ms": 200.0, "mean_tpot_ms": tpot_ms,
            "median_tpot_ms": tpot_ms, "std_tpot_ms": 0.3, "p99_tpot_ms": tpot_ms * 1.5, "mean_itl_ms": tpot_ms,
            "median_itl_ms": tpot_ms, "std_itl_ms": 1.0, "p95_itl_ms": tpot_ms * 2, "p99_itl_ms": tpot_ms * 3,
            "concurrency": concurrency * 0.97, "accept_length": accept}


def test_sglang_bench_serving_jsonl(tmp_path):
    plain, spec = tmp_path / "plain.jsonl", tmp_path / "eagle.jsonl"
    plain.write_text("\n".join(json.dumps(_sglang(c, tps, tpot, e2e, None)) for c, tps, tpot, e2e in
                               ((1, 150.0, 6.5, 3400.0), (16, 1800.0, 8.7, 4500.0))) + "\n")
    spec.write_text("\n".join(json.dumps(_sglang(c, tps, tpot, e2e, al)) for c, tps, tpot, e2e, al in
                              ((1, 300.0, 3.2, 1700.0, 2.9), (16, 1700.0, 9.2, 4800.0, 2.8))) + "\n")
    t = import_load_files([str(plain), str(spec)], format="sglang", config={**CONFIG, "stack": "sglang"})
    [sw] = sweeps_from_table(t.astype(str).replace({"None": ""}), where="imported")
    rows = {(r.load, r.speculative): r for r in sw.rows}
    assert len(rows) == 4
    r = rows[(16.0, True)]
    assert (r.tau, r.tpot_s, r.e2e_latency_s, r.prompt_tokens, r.output_tokens) == (2.8, pytest.approx(0.0092),
                                                                                    pytest.approx(4.8), 1024, 512)
    assert sw.measured_speedup(r)[0] == pytest.approx(1700.0 / 1800.0)  # a slowdown at 16
    assert "record 2" in r.source


def _guidellm(strategy, *, out_tps, itl_ms, latency_s, prompt=256.0, output=128.0, n=50):
    def dist(mean):
        return {"successful": {"mean": mean, "median": mean, "std_dev": 0.0}, "errored": {"mean": 0.0},
                "incomplete": {"mean": 0.0}, "total": {"mean": mean}}
    return {"type_": "generative_benchmark", "id_": "x", "run_id": "r",
            "args": {"strategy": strategy, "strategy_index": 0, "max_number": n, "max_duration": None},
            "metrics": {"requests_per_second": dist(1.0), "request_concurrency": dist(4.0),
                        "request_latency": dist(latency_s), "prompt_token_count": dist(prompt),
                        "output_token_count": dist(output), "time_to_first_token_ms": dist(50.0),
                        "time_per_output_token_ms": dist(itl_ms * 1.1), "inter_token_latency_ms": dist(itl_ms),
                        "output_tokens_per_second": dist(out_tps), "tokens_per_second": dist(out_tps * 3)},
            "request_totals": {"successful": n, "incomplete": 0, "errored": 0, "total": n}}


def test_guidellm_benchmark_json(tmp_path):
    base, spec = tmp_path / "base.json", tmp_path / "spec.json"
    base.write_text(json.dumps({"benchmarks": [
        _guidellm({"type_": "synchronous"}, out_tps=110.0, itl_ms=8.8, latency_s=1.2),
        _guidellm({"type_": "concurrent", "streams": 8}, out_tps=780.0, itl_ms=9.9, latency_s=1.4)]}))
    spec.write_text(json.dumps({"benchmarks": [
        _guidellm({"type_": "synchronous"}, out_tps=240.0, itl_ms=4.0, latency_s=0.6),
        _guidellm({"type_": "concurrent", "streams": 8}, out_tps=820.0, itl_ms=9.1, latency_s=1.3)]}))
    t = import_load_files([str(base), f"spec:{spec}"], format="guidellm", config=CONFIG)
    [sw] = sweeps_from_table(t.astype(str).replace({"None": ""}), where="imported")
    rows = {(r.load, r.speculative): r for r in sw.rows}
    assert set(rows) == {(1.0, False), (8.0, False), (1.0, True), (8.0, True)}  # synchronous is concurrency 1
    r = rows[(8.0, True)]
    assert (r.tpot_s, r.e2e_latency_s, r.prompt_tokens, r.output_tokens, r.n_requests, r.tau) == (
        pytest.approx(0.0091), 1.3, 256, 128, 50, None)  # GuideLLM records no acceptance: fitted later
    rate = tmp_path / "rate.json"
    rate.write_text(json.dumps({"benchmarks": [_guidellm({"type_": "poisson", "rate": 2.5}, out_tps=300.0, itl_ms=9.0,
                                                         latency_s=1.2)]}))
    assert float(import_load_files([str(rate)], format="guidellm", config=CONFIG)["load"].iloc[0]) == 2.5
    rate.write_text(json.dumps({"benchmarks": [_guidellm({"type_": "throughput"}, out_tps=3.0, itl_ms=9.0,
                                                         latency_s=1.0)]}))
    with pytest.raises(InputError, match="args.strategy.type_' = 'throughput'"):
        import_load_files([str(rate)], format="guidellm", config=CONFIG)
    rate.write_text(json.dumps({"runs": []}))
    with pytest.raises(InputError, match="expected a GuideLLM report"):
        import_load_files([str(rate)], format="guidellm", config=CONFIG)


def test_files_that_mix_load_kinds_or_are_not_json(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_vllm(4, 500.0, 9.0)))
    b.write_text(json.dumps(_vllm(None, 500.0, 9.0, rate=2.0)))
    with pytest.raises(InputError, match="mix load kinds"):
        import_load_files([str(a), str(b)], format="vllm", config=CONFIG)
    b.write_text("{not json\n")
    with pytest.raises(InputError, match="line 1: not JSON"):
        import_load_files([str(b)], format="vllm", config=CONFIG)
    with pytest.raises(InputError, match="file not found"):
        import_load_files([str(tmp_path / "none.json")], format="vllm", config=CONFIG)


def test_the_cli_calibrates_imported_files(tmp_path, capsys):
    from specsim.cli import main

    files = []
    for c, tps, tpot, spec in ((1, 130.0, 7.5, None), (4, 480.0, 8.1, None), (1, 200.0, 4.9, {"rate_pct": 40.0, "al": 2.2})):
        p = tmp_path / f"{'spec' if spec else 'base'}-c{c}.json"
        d = _vllm(c, tps, tpot, spec=spec)
        d.update(completed=4 * c, total_input_tokens=4 * c * 16, total_output_tokens=4 * c * 16)
        p.write_text(json.dumps(d))
        files.append(str(p))
    argv = ["calibrate", "load", *files, "--format", "vllm", "--sweep", "mine", "--stack", "vllm", "--hardware",
            "h100-sxm", "--n-devices", "1", "--target", "llama-3.2-1b", "--method", "prompt_lookup", "--k", "3", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert [s["sweep"] for s in out["sweeps"]] == ["mine"]
    assert {(r["load"], r["speculative"], r["role"]) for r in out["rows"]} == {(1.0, 0, "fit"), (4.0, 0, "fit"),
                                                                                (1.0, 1, "fit")}
