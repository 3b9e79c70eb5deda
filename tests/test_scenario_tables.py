"""A scenario's tables as frozen specs (specsim.specs.serving_tables, analysis_tables, drafting_tables),
built and checked when the scenario is made, and read by the serving setup. Expected figures are
written from scenarios/README.md and worked by hand."""
from __future__ import annotations

import dataclasses
import math

import pytest

from specsim.errors import SpecError
from specsim.specs.catalog import to_toml
from specsim.specs.scenario import list_scenarios, load_scenario, scenario_from_dict
from specsim.specs.serving_tables import EngineTable, LengthsTable, PolicyTable, WorkloadTable

POINT = {"hardware": "h100-sxm", "target": "llama-3.1-8b", "drafter": "llama-3.2-1b", "method": "draft_model", "k": 4,
         "alpha": 0.7}
WL = {"kind": "poisson", "n_requests": 10, "rate_per_s": 2.0, "prompt": {"kind": "fixed", "tokens": 64},
      "output": {"kind": "fixed", "tokens": 8}}


def test_every_shipped_scenario_has_its_tables_as_specs():
    for s in list_scenarios():
        t = s.tables
        assert (t.workload is None) == ("workload" not in s.sections)
        assert (t.policies is None) == ("policies" not in s.sections)
        assert dataclasses.is_dataclass(t.engine) and t.engine.__dataclass_params__.frozen


def test_specs_are_frozen_slotted_and_keyword_only():
    for cls in (EngineTable, WorkloadTable, LengthsTable, PolicyTable):
        assert cls.__dataclass_params__.frozen and hasattr(cls, "__slots__")
        assert all(f.kw_only for f in dataclasses.fields(cls))
    with pytest.raises(dataclasses.FrozenInstanceError):
        EngineTable().max_num_seqs = 1


def test_engine_defaults_are_the_readmes():
    e = scenario_from_dict(dict(POINT, engine={})).tables.engine
    assert (e.max_num_seqs, e.max_num_batched_tokens, e.block_size, e.gpu_memory_utilization, e.watermark_frac,
            e.acceptance_window_steps, e.swap_space_gib) == (256, 8192, 16, 0.9, 0.01, 64, 4.0)
    # PCIe 5.0 x16: 32 GT/s x 16 lanes x 128/130 encoding / 8 bits = 63.015 GB/s
    assert e.swap_bandwidth_gb_s == pytest.approx(63.015, abs=5e-4)
    assert e.chunked_prefill and e.drafter_catchup and not e.prefix_caching
    assert e.max_model_len is None and e.n_blocks is None


def test_the_serving_setup_reads_the_specs():
    from specsim.serving.setup import build_serving
    from specsim.speculation.operating_point import resolve

    raw = dict(POINT, workload=WL, engine={"max_num_seqs": 32, "preemption_mode": "swap", "swap_space_gib": 1.0},
               fleet={"n_replicas": 3, "router": "round_robin"}, slo={"ttft_s": 0.5},
               policies={"never": {"kind": "never"}, "band": {"kind": "k_by_batch_band", "bands": [[1, 4], [16, 2]]}})
    setup = build_serving(resolve(scenario_from_dict(raw)))
    cap, cfg = setup.capacity, setup.config
    assert cfg.max_num_seqs == 32 and cfg.preemption_mode == "swap"
    # 1 GiB of host memory in blocks of bytes_per_block, rounded down
    assert cfg.swap_space_blocks == 2 ** 30 // cap.bytes_per_block
    assert cfg.max_model_len == 131072  # the target's maximum context when [engine] does not set it
    assert setup.fleet.n_replicas == 3 and setup.fleet.router.kind == "round_robin"
    assert setup.slo.ttft_s == 0.5 and setup.slo.tpot_s == math.inf
    assert setup.policies["band"].bands == ((1, 4), (16, 2)) and setup.policies["band"].k_reserved == 4


def test_overrides_and_replaced_tables_are_checked_again():
    s = scenario_from_dict(dict(POINT, engine={"max_num_seqs": 8}))
    with pytest.raises(SpecError, match=r"\[engine\]: field 'max_num_seqs' = 0"):
        s.with_overrides(sections={"engine": {"max_num_seqs": 0}})
    with pytest.raises(SpecError, match=r"\[threshold\] k has moved to .*k_max"):
        s.with_overrides(sections={"threshold": {"k": [1]}})
    with pytest.raises(SpecError, match="max_num_seqs = 8"):  # a table joined to another through the override
        s.with_overrides(sections={"policies": {"g": {"kind": "disable_by_batch_size", "k": 2, "threshold": 9}}})
    with pytest.raises(SpecError, match="unknown table"):
        dataclasses.replace(s, sections={"engines": {}})


def test_lengths_and_the_expected_size_of_a_run():
    mu, sigma = 5.0, 0.5
    ln = LengthsTable(kind="lognormal", mu=mu, sigma=sigma, where="x")
    assert ln.expected_tokens == pytest.approx(math.exp(5.125))  # exp(μ + σ²/2) = e^5.125 = 168.17
    by_mean = LengthsTable(kind="lognormal", mean_tokens=200.0, sigma=0.5, where="x")
    assert by_mean.log_mean == pytest.approx(math.log(200.0) - 0.125)
    assert LengthsTable(kind="uniform", min=10, max=30, where="x").expected_tokens == 20.0
    t = WorkloadTable.from_table(dict(WL, n_requests=1000), where="w")
    assert t.expected_output_tokens() == 8000.0
    assert WorkloadTable.from_table({"kind": "trace", "trace": "t.csv"}, where="w").expected_output_tokens() is None


def test_a_run_of_more_than_a_billion_output_tokens_is_refused(tmp_path):
    import numpy as np

    from specsim.serving.setup import MAX_SIMULATED_TOKENS, check_run_size
    from specsim.serving.workloads import Workload

    def w(n, out):
        return Workload(arrival_at_s=np.zeros(n), prompt_tokens=np.ones(n, dtype=np.int64),
                        output_tokens=np.full(n, out, dtype=np.int64))
    assert MAX_SIMULATED_TOKENS == 10 ** 9
    assert check_run_size(w(1000, 1_000_000), where="w") == 10 ** 9  # exactly at the limit: taken
    with pytest.raises(SpecError, match="1,000,001,000 output tokens"):
        check_run_size(w(1000, 1_000_001), where="w")


def test_policy_fields_are_one_set_of_rules():
    from specsim.serving.policies import DisableByBatchSize, KByBatchBand, policy_from_table

    spec = PolicyTable(name="gate", kind="disable_by_batch_size", params={"k": 3, "threshold": 8})
    p = policy_from_table(spec)
    assert p == DisableByBatchSize(name="gate", k=3, threshold=8) and spec.k_reserved == 3
    # the dataclass and the table refuse the same value with the same words
    with pytest.raises(SpecError, match=r"field 'threshold' = 0: expected at least 1"):
        DisableByBatchSize(k=3, threshold=0)
    with pytest.raises(SpecError, match=r"field 'threshold' = 0: expected at least 1"):
        PolicyTable(name="gate", kind="disable_by_batch_size", params={"k": 3, "threshold": 0})
    with pytest.raises(SpecError, match="bands"):
        KByBatchBand(bands=((1, 4), (1, 2)))


def test_a_calibration_must_be_of_this_target_and_method(tmp_path):
    cal = {"name": "t/prompt-lookup/chat", "target": "smollm2-135m-q4_1", "drafter": "prompt-lookup",
           "method": "prompt_lookup", "workload": "chat", "command": "test",
           "reference": {"context_len": 400.0, "temperature": 0.0, "k": 4},
           "iid": {"alpha": 0.7, "ci_low": 0.65, "ci_high": 0.75, "n_cycles": 100}}
    p = tmp_path / "cal.toml"
    p.write_text(to_toml(cal))
    base = {"hardware": "ddr5-5600-2ch", "method": "prompt_lookup", "k": 4, "context_len": 400,
            "acceptance": {"calibrated": str(p)}}
    # the same model in another weight format (same shape and tokenizer): taken
    assert scenario_from_dict(dict(base, target="smollm2-135m")).tables.acceptance.calibrated == str(p)
    with pytest.raises(SpecError, match=r"calibrated.*target 'smollm2-360m'.*measured on 'smollm2-135m-q4_1'"):
        scenario_from_dict(dict(base, target="smollm2-360m"))
    with pytest.raises(SpecError, match=r"method 'layer_skip'.*measured with 'prompt_lookup'"):
        scenario_from_dict(dict(base, target="smollm2-135m", method="layer_skip"))


def test_a_sparse_budget_fits_the_targets_context():
    raw = {"hardware": "h100-sxm", "target": "llama-3.1-8b", "method": "sparse_kv", "k": 3, "alpha": 0.8}
    # llama-3.1-8b holds 131072 tokens: a sink of 4 and a window of 131068 fill it exactly
    scenario_from_dict(dict(raw, drafter_options={"sparse_sink": 4, "sparse_window": 131068}))
    with pytest.raises(SpecError, match="this one is 131073"):
        scenario_from_dict(dict(raw, drafter_options={"sparse_sink": 4, "sparse_window": 131069}))


def test_shipped_scenarios_load_unchanged():
    s = load_scenario("llama-70b-h100-chat")
    w = s.tables.workload
    assert w.kind == "trace" and w.window_s == (0.0, 600.0) and w.rates == (1.0, 2.0, 4.0, 6.0, 7.0, 8.0, 10.0, 16.0)
    assert [p.name for p in s.tables.policies] == ["never", "static_k4", "gate_bs112"]
