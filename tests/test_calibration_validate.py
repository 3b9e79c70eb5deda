"""The closed loop on this machine: the machine profile (calibration.machine), the decoder's stack
(calibration.decoder_stack), the band a calibrated acceptance puts on a prediction (speculation.predict)
and `specsim validate` (calibration.validate). No timing is asserted: the structure, the arithmetic
(checked by hand) and the errors are."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from specsim.errors import InputError, SpecError


def test_the_q4_1_gguf_streams_its_tensor_bytes():
    """smollm2-135m-q4_1 per pass: 30 layers of Q4_1 matrices (5 bits) and the Q8_0 tied head (8.5 bits),
    the bytes `load_gguf` reports for SmolLM2-135M-Instruct.Q4_1.gguf's tensors."""
    from specsim.cost.roofline import step_cost
    from specsim.specs.hardware import load_hardware
    from specsim.specs.models import load_model

    m = load_model("smollm2-135m-q4_1")
    layer = 3 * 1536 * 576 + 2 * 576 * 576 + 2 * 192 * 576  # gate, up, down; q, o; k, v
    c = step_cost(m, load_hardware("ddr5-5600-2ch"), q_len=1, context_len=0)
    assert c.weights.bytes == pytest.approx(30 * layer * 20 / 32, rel=1e-12)  # the matrices (norms aside)
    assert c.lm_head.bytes == pytest.approx(49152 * 576 * 34 / 32 + 49152 * 4, rel=1e-12)  # + fp32 logits
    assert m.kv_bytes_per_token == 30 * 2 * 3 * 64 * 4
    assert m.with_weight_format("bf16").lm_head_bytes_per_param == 2.0  # re-quantised whole


# ---- the machine profile ---------------------------------------------------------------------------

def _synthetic_tables(bw=40e9, peak=1.0e12, f_bw=0.7, f_c=0.4, floor_s=5e-6):
    """Tables as measure_machine returns them, with GEMM times planted from the cost curve (p = 1:
    memory and compute add) so the fit must find f_bw, f_c, p and the floor again."""
    from specsim.calibration.machine import BITS, SHAPES

    rows = []
    for name, n, k, out_bytes, _ in SHAPES:
        for m in (1, 2, 4, 8, 16, 32, 64):
            mem = (k * n * BITS["Q4_1"] / 8 + m * (k * 2 + n * out_bytes)) / (bw * f_bw)
            comp = math.ceil(m * math.ceil(n / 16) / 2) * 2 * 16 * k * 2 / (peak * f_c)
            t = floor_s + mem + comp
            for fmt, scale in (("Q4_1", 1.0), ("Q8_0", 0.8)):
                rows.append(dict(format=fmt, shape=name, n=n, k=k, threads=2, m=m, out_bytes=out_bytes,
                                 bytes=n * k * BITS[fmt] / 8, flops=2.0 * m * n * k, time_s=t * scale,
                                 time_min_s=t * scale, time_max_s=t * scale))
    gemm = pd.DataFrame(rows)
    bandwidth = pd.DataFrame([dict(size_bytes=2 ** 27, threads=2, time_s=2 ** 27 / bw, time_min_s=1, time_max_s=1)])
    ew = []
    for kind, r in (("norm", 576), ("rope", 576), ("act", 1536), ("add", 576), ("embed", 576)):
        for m in (1, 8, 64):
            ew.append(dict(kind=kind, threads=2, m=m, row_elems=r, time_s=1e-6 + m * r * 1e-10, time_min_s=0, time_max_s=0))
    ew += [dict(kind="gemm_floor", threads=2, m=1, time_s=floor_s, time_min_s=0, time_max_s=0),
           dict(kind="parallel_floor", threads=2, m=1, time_s=3e-6, time_min_s=0, time_max_s=0)]
    att = pd.DataFrame([dict(threads=2, m=1, context_len=c, time_s=1e-6 * c / 128, time_min_s=0, time_max_s=0)
                        for c in (128, 512)])
    fma = pd.DataFrame([dict(threads=2, flops_per_s=2e11, flops_per_s_min=2e11, flops_per_s_max=2e11)])
    return dict(bandwidth=bandwidth, gemm=gemm, attention=att, elementwise=pd.DataFrame(ew), fma=fma)


def test_machine_fit_recovers_a_planted_curve(tmp_path):
    from specsim.calibration.machine import fit_profile
    from specsim.specs.hardware import load_hardware

    prof = fit_profile(**_synthetic_tables(), threads=2, repeats=3)
    # the Q8_0 rows take 0.8 x the Q4_1 rows' time: the peak, the best block-quantized rate, is Q8_0's (M = 64, head)
    assert prof.peak_int8_ops_per_s == pytest.approx(float((prof.gemm["flops"] / prof.gemm["time_s"])[
        prof.gemm["format"] == "Q8_0"].max()), rel=1e-12)
    # the bandwidth is the faster of the stream (40 GB/s) and the best matrix-vector read
    assert prof.mem_bandwidth_bytes_per_s >= 40e9
    q41 = prof.gemm_fit_errors[prof.gemm_fit_errors["format"] == "Q4_1"]
    assert q41["relative_error"].abs().max() < 0.05  # the planted curve is in the model's family
    path = tmp_path / "local.toml"
    path.write_text(prof.toml(command="test"))
    hw = load_hardware(path)  # every figure has a source, the [kernels] table is complete
    assert hw.kernels is not None and hw.kernels.n_sm == 2 and hw.kind == "cpu"
    assert "test" in hw.sources["mem_bandwidth_gb_s"]


def test_a_block_format_s_own_compute_rate_is_fitted_and_prices_the_lm_head(tmp_path):
    """Issue 37: on an AVX2 CPU the decoder's Q8_0 products (SmolLM2's tied LM head) multiply at a third of
    the Q4_1 products' rate, where the memory side carries by bytes. Planted: Q8_0 rows from the same curve
    with 8.5 bits a weight and the compute term three times slower (f_c / 3). The fit finds Q8_0's own
    compute fraction again (its ratio to Q4_1's 1/3 within 10 %), the file carries it, and the roofline's LM
    head of a model whose head is Q8_0 is priced with it: at M = 64, the head's compute-bound product costs
    about 3x what the Q4_1 fraction would give."""
    from specsim.calibration.machine import BITS, SHAPES, fit_profile
    from specsim.cost import kernels as CK
    from specsim.specs.hardware import load_hardware
    from specsim.specs.models import load_model

    tables = _synthetic_tables()
    bw, peak, f_bw, f_c, floor_s = 40e9, 1.0e12, 0.7, 0.4, 5e-6
    rows = [r for r in tables["gemm"].to_dict(orient="records") if r["format"] == "Q4_1"]
    for name, n, k, out_bytes, _ in SHAPES:
        for m in (1, 2, 4, 8, 16, 32, 64):
            mem = (k * n * BITS["Q8_0"] / 8 + m * (k * 2 + n * out_bytes)) / (bw * f_bw)
            comp = math.ceil(m * math.ceil(n / 16) / 2) * 2 * 16 * k * 2 / (peak * f_c / 3)
            t = floor_s + mem + comp
            rows.append(dict(format="Q8_0", shape=name, n=n, k=k, threads=2, m=m, out_bytes=out_bytes,
                             bytes=n * k * BITS["Q8_0"] / 8, flops=2.0 * m * n * k, time_s=t, time_min_s=t, time_max_s=t))
    prof = fit_profile(**dict(tables, gemm=pd.DataFrame(rows)), threads=2, repeats=3)
    kp = prof.kernels
    ratio = kp.gemm_compute_frac_by_format["gguf-q8_0"] / kp.gemm_compute_frac
    assert ratio == pytest.approx(1 / 3, rel=0.10)
    path = tmp_path / "local.toml"
    path.write_text(prof.toml(command="test"))
    hw = load_hardware(path)
    assert hw.kernels.compute_frac_for("gguf-q8_0") == pytest.approx(kp.gemm_compute_frac_by_format["gguf-q8_0"], rel=1e-5)
    assert hw.kernels.compute_frac_for("gguf-q4_1") == pytest.approx(kp.gemm_compute_frac, rel=1e-5)
    q8 = hw.kernels.for_format("gguf-q8_0")  # the curve as Q8_0's products follow it: its own fraction and tiles
    assert q8.gemm_compute_frac == hw.kernels.gemm_compute_frac_by_format["gguf-q8_0"]
    assert q8.gemm_tile_pass_cost == hw.kernels.gemm_tile_pass_cost_by_format["gguf-q8_0"]
    assert hw.kernels.for_format("gguf-q4_1") is hw.kernels
    text = path.read_text()
    bad = tmp_path / "bad.toml"
    for old_, new_, field in (('"gguf-q8_0" = [', '"gguf-q9_9" = [', "gemm_tile_pass_cost_by_format"),
                              ('{ "gguf-q8_0" = 0', '{ "gguf-q8_0" = 1', "gemm_compute_frac_by_format.gguf-q8_0"),
                              ('"gguf-q8_0" = [8.000000, ', '"gguf-q8_0" = [', "gemm_tile_pass_cost_by_format.gguf-q8_0")):
        assert old_ in text, old_
        bad.write_text(text.replace(old_, new_, 1))
        with pytest.raises(SpecError, match=f"'{field}'") as exc:
            load_hardware(bad)
        assert "\n" not in str(exc.value)
    model = load_model("smollm2-135m-q4_1")  # lm_head_weight_format gguf-q8_0
    eff = hw.efficiency
    own = float(CK.lm_head_time_s(model, hw, eff, 64, 1))
    from dataclasses import replace
    as_q41 = float(CK.lm_head_time_s(model, replace(hw, kernels=replace(hw.kernels, gemm_compute_frac_by_format={})),
                                     eff, 64, 1))
    assert 2.0 < own / as_q41 < 3.2  # compute-bound at M = 64 with p ~ 1: the compute term is the larger part


def test_machine_quick_run_writes_a_loadable_profile(tmp_path):
    from specsim.calibration.machine import MachineConfig, measure_machine
    from specsim.specs.hardware import load_hardware

    prof = measure_machine(MachineConfig(repeats=1, threads=(1,), formats=("Q4_1", "Q8_0"), m_values=(1, 8),
                                         contexts=(32,), quick=True))
    path = tmp_path / "q.toml"
    path.write_text(prof.toml(command="specsim calibrate machine --out q.toml"))
    hw = load_hardware(path)
    assert hw.mem_bandwidth_bytes_per_s > 0 and hw.peak_flops_per_s["int8"] > 0
    assert set(prof.gemm["format"]) == {"Q4_1", "Q8_0"} and set(prof.gemm["m"]) == {1, 8}
    with pytest.raises(SpecError, match="Q4_1"):
        MachineConfig(formats=("Q8_0",))


# ---- the decoder's stack ---------------------------------------------------------------------------

def test_bench_rows_read_the_bench_json(tmp_path):
    from specsim.calibration.decoder_stack import bench_rows
    from specsim.calibration.fit import ROW_COLUMNS

    data = {"model": "/x/SmolLM2-135M-Instruct.Q4_1.gguf", "config": {},
            "rows": [{"context_len": 128, "m": 1, "verify_s": 0.008, "per_token_s": 0.008, "ratio_to_m1": 1.0},
                     {"context_len": 128, "m": 8, "verify_s": 0.017, "per_token_s": 0.002, "ratio_to_m1": 2.1}]}
    (tmp_path / "bench.json").write_text(json.dumps(data))
    rows = bench_rows(tmp_path)
    assert tuple(rows.columns) == ROW_COLUMNS
    assert rows.to_dict(orient="records")[1] == dict(hardware="local", target="smollm2-135m-q4_1", tp=1, batch_size=1,
                                                      q_len=8, context_len=128, logit_len=8, measured_time_s=0.017)
    data["model"] = "/x/other.gguf"
    (tmp_path / "b2.json").write_text(json.dumps(data))
    with pytest.raises(SpecError, match="--target"):
        bench_rows(tmp_path / "b2.json")
    (tmp_path / "b3.json").write_text("{not json")
    with pytest.raises(InputError):
        bench_rows(tmp_path / "b3.json")


def test_stack_toml_loads_with_every_source(tmp_path):
    from specsim.calibration.decoder_stack import stack_toml
    from specsim.calibration.fit import fit_efficiency
    from specsim.specs.stacks import load_stack

    rows = pd.DataFrame([dict(hardware="ddr5-5600-2ch", target="smollm2-135m-q4_1", tp=1, batch_size=1, q_len=m,
                              context_len=c, logit_len=m, measured_time_s=0.004 + 0.0004 * m + 1e-6 * c)
                         for m in (1, 4, 16) for c in (128, 1024)])
    cal = fit_efficiency(rows, fit=("bandwidth_frac", "compute_frac", "step_overhead_s", "per_layer_overhead_s"))
    host = {"step_s": 1.5e-4, "cycle_s": 6e-4, "draft_token_s": 2e-4, "k": 4, "accepted": 2, "repeats": 3}
    path = tmp_path / "specsim-numba.toml"
    path.write_text(stack_toml(cal, host, stack_id="specsim-numba", command="test", bench_path="b.json",
                               hardware="ddr5-5600-2ch", lookup={"s_per_ktoken": 2e-5}))
    st = load_stack(path)
    assert st.host.step_s == pytest.approx(1.5e-4) and st.cycle_overhead_s == pytest.approx(4.5e-4)  # cycle − step
    assert st.host.spec_per_draft_pass_s == pytest.approx(2e-4)
    assert st.efficiency.bandwidth_frac == pytest.approx(cal.efficiency.bandwidth_frac, rel=1e-5)
    assert "prompt_lookup" in st.methods and st.tree_verification == "static"


# ---- the band of a calibrated prediction ----------------------------------------------------------

def _calibrated_scenario(tmp_path, **over):
    from specsim.specs.catalog import to_toml
    from specsim.specs.scenario import scenario_from_dict

    cal = {"name": "t/prompt-lookup/code-edit", "target": "smollm2-135m-q4_1", "drafter": "prompt-lookup",
           "method": "prompt_lookup", "workload": "code-edit", "command": "test", "level": 0.95,
           "reference": {"context_len": 400.0, "temperature": 0.0, "k": 4},
           "iid": {"alpha": 0.7, "ci_low": 0.65, "ci_high": 0.75, "n_cycles": 200, "n_trials": 300},
           "coverage": {"context_len": [300.0, 500.0], "temperatures": [0.0, 0.7, 1.0], "ks": [4],
                        "workloads": ["code-edit"], "drafters": ["prompt-lookup"]}}
    p = tmp_path / "cal.toml"
    p.write_text(to_toml(cal))
    raw = {"hardware": "ddr5-5600-2ch", "target": "smollm2-135m-q4_1", "method": "prompt_lookup", "k": 4,
           "context_len": 400, "acceptance": {"calibrated": str(p)}, **over}
    return scenario_from_dict(raw, where="t")


def test_calibrated_prediction_carries_its_band(tmp_path):
    from specsim.speculation.operating_point import resolve
    from specsim.speculation.predict import format_band, grid, band_grid, predict, with_alpha

    op = resolve(_calibrated_scenario(tmp_path))
    p = predict(op)
    b = p.band
    assert b["calibration"] == "t/prompt-lookup/code-edit" and b["calibration_warnings"] == []
    assert b["speedup_low"] < float(p.cycle.speedup) < b["speedup_high"]
    # the ends are the same prediction at α = 0.65 and 0.75 (a second path: the scenario with alpha given)
    from specsim.specs.scenario import scenario_from_dict

    for a, key in ((0.65, "speedup_low"), (0.75, "speedup_high")):
        plain = resolve(scenario_from_dict({"hardware": "ddr5-5600-2ch", "target": "smollm2-135m-q4_1",
                                            "method": "prompt_lookup", "k": 4, "context_len": 400, "alpha": a}))
        assert b[key] == pytest.approx(float(predict(plain).cycle.speedup), rel=1e-12)
    assert format_band(1.5449, {"speedup_low": 1.4912, "speedup_high": 1.6031}) == "1.54× [1.49, 1.60]"
    lo, hi = band_grid(op, k=[1, 2, 4])
    mid = grid(op, k=[1, 2, 4])
    assert np.all(lo.speedup <= mid.speedup) and np.all(mid.speedup <= hi.speedup)
    assert with_alpha(op, 0.6).acceptance.calibration is None
    far = predict(resolve(_calibrated_scenario(tmp_path, context_len=2048, temperature=0.5, k=8)))
    w = far.band["calibration_warnings"]
    assert any("2048" in x for x in w) and any("temperature 0.5" in x for x in w) and any("K = 8" in x for x in w)
    assert "speedup_low" in far.to_dict()


# ---- validate -----------------------------------------------------------------------------------

def test_break_even_interpolates_between_runs():
    from specsim.calibration.validate import break_even

    spec = pd.DataFrame([dict(drafter="prompt-lookup", layers=None, k=4, alpha_measured=a, measured_speedup=s)
                         for a, s in ((0.2, 0.8), (0.5, 1.2), (0.8, 2.0))])
    be = break_even(spec, {("prompt-lookup", None, 4): 0.33})
    r = be.to_dict(orient="records")[0]
    # between (0.2, 0.8) and (0.5, 1.2): 0.2 + (1 − 0.8) · 0.3 / 0.4 = 0.35
    assert r["measured_break_even_alpha"] == pytest.approx(0.35, abs=1e-12)
    assert r["model_break_even_alpha"] == 0.33 and r["n_points"] == 3


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny GGUF, a catalog-shaped model file for it, a handmade CPU profile and stack."""
    from tiny_loop import write_tiny_loop

    d = tmp_path_factory.mktemp("loop")
    gguf = write_tiny_loop(d, n_ctx=4096)
    return d, gguf


def test_validate_on_the_tiny_model(tiny, tmp_path):
    from specsim.calibration.validate import ValidateConfig, format_report, validate

    d, gguf = tiny
    cfg = ValidateConfig(model=gguf, hardware=str(d / "cpu.toml"), stack=str(d / "stack.toml"),
                         target=str(d / "tiny-model.toml"), m_values=(1, 4), contexts=(32, 64), repeats=2,
                         drafters=("prompt-lookup", "layer-skip"), ks=(2,), layers=2, n_prompts=1, tokens=10,
                         calibration_prefix="no-such-prefix", force=True)  # structure, not timing: a busy machine too
    res = validate(cfg)
    v = res.verify
    assert len(v) == 4 and set(v["m"]) == {1, 4}
    assert np.all(v["measured_min_s"] <= v["measured_s"]) and np.all(v["measured_s"] <= v["measured_max_s"])
    assert np.allclose(v["relative_error"], v["predicted_s"] / v["measured_s"] - 1)
    assert {"measured_matrix_products_s", "measured_attention_s", "predicted_attention_s"} <= set(v.columns)
    s = res.spec
    assert len(s) == 2 and s["calibration"].str.startswith("no-such-prefix").all()  # no calibration: measured only
    assert "predicted_tokens_per_s" not in s.columns or s["predicted_tokens_per_s"].isna().all()
    text = format_report(res)
    assert "verify step time" in text and "no calibration" in text
    # the reference pass, before and after each part, against the calibrated model's time for the same step
    ref = res.summary["reference_pass"]
    assert [r["when"] for r in ref] == ["start", "after the verify passes", "after the speculative runs"]
    from specsim.calibration.validate import REFERENCE_CTX
    from specsim.cost.roofline import step_cost
    from specsim.specs.hardware import load_hardware
    from specsim.specs.models import load_model
    from specsim.specs.stacks import load_stack
    pred = float(step_cost(load_model(str(d / "tiny-model.toml")), load_hardware(str(d / "cpu.toml")), batch_size=1,
                           q_len=1, context_len=REFERENCE_CTX, efficiency=load_stack(str(d / "stack.toml")).efficiency).time_s)
    for r in ref:
        assert r["measured_s"] > 0 and r["predicted_s"] == pytest.approx(pred, rel=1e-9)
        assert r["drift"] == pytest.approx(r["measured_s"] / pred - 1, rel=1e-12)
    assert "this machine against its calibration" in text
    # each pass against the reference step timed beside it: the ratio's error, from its parts
    assert np.allclose(v["predicted_ratio_to_reference"], v["predicted_s"] / pred, rtol=1e-9)
    assert np.allclose(v["ratio_error"], v["predicted_ratio_to_reference"] / v["measured_ratio_to_reference"] - 1)
    assert np.all(v["measured_ratio_to_reference"] > 0) and np.allclose(v["reference_drift"],
                                                                         v["reference_measured_s"] / pred - 1)
    assert json.dumps(res.to_dict(), default=str)
    with pytest.raises(SpecError, match="--parts"):
        ValidateConfig(parts=("nope",))
    with pytest.raises(SpecError, match="--drafters"):
        ValidateConfig(drafters=("tree",))


def test_band_reaches_sweep_and_threshold(tmp_path):
    from specsim.presentation.sweep import run_sweep
    from specsim.analyses.threshold import threshold_policy
    from specsim.presentation.text import format_policy
    from specsim.speculation.operating_point import resolve
    from specsim.speculation.predict import grid, with_alpha

    op = resolve(_calibrated_scenario(tmp_path))
    df = run_sweep(op)
    assert df["speedup_low"].notna().all()
    # the band columns are the grid at the interval's ends (a second path: grid at α = 0.65 and 0.75)
    lo = grid(with_alpha(op, 0.65)).speedup.ravel()
    assert np.allclose(df["speedup_low"].to_numpy(), lo, rtol=1e-12)
    assert np.all(df["speedup_low"] <= df["speedup"]) and np.all(df["speedup"] <= df["speedup_high"])
    pol = threshold_policy(op)
    assert pol.band["batch_off_low"] is not None or pol.band["batch_off_high"] is None
    assert "across the calibration's α 0.650–0.750" in format_policy(pol)
    from specsim.specs.scenario import scenario_from_dict

    plain = resolve(scenario_from_dict({"hardware": "ddr5-5600-2ch", "target": "smollm2-135m-q4_1",
                                        "method": "prompt_lookup", "k": 4, "context_len": 400, "alpha": 0.7}))
    assert run_sweep(plain)["speedup_low"].isna().all() and threshold_policy(plain).band is None


def test_attention_overlap_fit_recovers_a_known_exponent():
    # a table made from the formula itself, (t_mem^q + t_comp^q)^(1/q) with q = 2.5, a read rate of
    # 12 GB/s and a compute rate 0.8 of the table's best: the fit gives q back
    import pandas as pd

    from specsim.calibration.machine import attention_bytes, fit_attention_overlap

    rows = [dict(threads=1, m=m, context_len=c, flops=4.0 * m * 9 * (c + m) * 64) for m in (1, 2, 3, 4, 5, 8, 16, 64)
            for c in (128, 512, 2048)]
    att = pd.DataFrame(rows)
    mem = np.array([attention_bytes(r) for r in att.itertuples()]) / 12e9
    rate = 60e9
    comp = att["flops"].to_numpy(float) / rate
    att["time_s"] = (mem ** 2.5 + comp ** 2.5) ** (1 / 2.5)
    q = fit_attention_overlap(att, bandwidth_bytes_per_s=40e9)
    assert q == pytest.approx(2.5, rel=0.02)
    assert fit_attention_overlap(att.iloc[:3], bandwidth_bytes_per_s=40e9) == float("inf")  # too few points to tell


# ---- which machine a profile describes ---------------------------------------------------------------

def _identity(**kw):
    from specsim.specs.machine import MachineIdentity

    base = dict(cpu="AMD EPYC 7B13 64-Core Processor", instruction_sets=("avx2", "fma"), block_matmul="avx2",
                attention="vector", threads=1, clock="thread", threads_measured=(1,), logical_cpus=2)
    return MachineIdentity(**{**base, **kw})


def test_kernel_paths_by_hand():
    """The decoder's rule (decoder/kernels/host.py takes it from here): VNNI tiles need AVX512-VNNI and -BW,
    AVX2 tiles AVX2; attention's vectors AVX512-F, or AVX2 with FMA; the switches cap what the kernels use."""
    from specsim.specs.machine import capped, kernel_paths

    sapphire = ("avx2", "fma", "avx512f", "avx512bw", "avx512vnni", "avxvnni", "amx-int8")
    assert kernel_paths(sapphire) == {"block_matmul": "vnni", "attention": "vector"}
    assert kernel_paths(("avx2", "fma")) == {"block_matmul": "avx2", "attention": "vector"}  # Zen 3
    assert kernel_paths(("avx2",)) == {"block_matmul": "avx2", "attention": "plain"}
    assert kernel_paths(("avx512f", "avx512vnni")) == {"block_matmul": "plain", "attention": "vector"}  # no BW, no AVX2
    assert kernel_paths(capped(sapphire, isa="avx2")) == {"block_matmul": "avx2", "attention": "vector"}
    assert capped(sapphire, plain=True) == () and capped(sapphire, isa="plain") == ()


def test_mismatches_name_cpu_instruction_sets_paths_threads_and_clock():
    from specsim.specs.machine import mismatches

    there = _identity()
    here = _identity(cpu="Intel(R) Xeon(R) Processor", instruction_sets=("avx2", "fma", "avx512f", "avx512bw",
                                                                         "avx512vnni"), block_matmul="vnni",
                     threads=2, clock="wall", threads_measured=())  # a run: it measured no profile
    assert mismatches(there, there) == []
    assert mismatches(there, here) == [
        "CPU: 'AMD EPYC 7B13 64-Core Processor' there, 'Intel(R) Xeon(R) Processor' here",
        "instruction sets: avx512f, avx512bw, avx512vnni here, not there",
        "block matmuls: AVX2 tiles there, AVX512-VNNI tiles here",
        "threads: the [kernels] curve was fitted at 1, this run uses 2",
        "clock: one thread's CPU time there, wall time here"]
    assert mismatches(there, _identity(threads=2, threads_measured=())) == ["threads: the [kernels] curve was fitted at 1, this run uses 2"]


def test_a_machine_table_is_checked_on_load(tmp_path):
    from specsim.specs.hardware import hardware_from_dict
    from specsim.specs.machine import MachineIdentity

    raw = {"id": "cpu", "name": "test cpu", "kind": "cpu", "memory_gb": 16, "mem_bandwidth_gb_s": 20,
           "peak_tflops": {"int8": 1.0}, "sources": {"memory_gb": "t", "mem_bandwidth_gb_s": "t", "peak_tflops": "t"},
           "machine": {"cpu": "X", "block_matmul": "vnni", "attention": "vector", "threads": 2}}
    assert hardware_from_dict(dict(raw)).machine == MachineIdentity(cpu="X", instruction_sets=None, block_matmul="vnni",
                                                                    attention="vector", threads=2)
    for bad, message in ((dict(threads=0), r"\[machine\]: field 'threads' = 0: expected an integer in 1..4096"),
                         (dict(block_matmul="sse"), r"field 'block_matmul' = 'sse': expected one of vnni, avx2, plain"),
                         (dict(instruction_sets=["avx9"]), r"field 'instruction_sets' = 'avx9': expected names among"),
                         (dict(clock="cpu"), r"field 'clock' = 'cpu': expected wall or thread"),
                         (dict(cores=2), r"unknown key"),):
        with pytest.raises(SpecError, match=message):
            hardware_from_dict({**raw, "machine": {**raw["machine"], **bad}}, where="x.toml")


def _profile_of(d, tmp_path, identity):
    """The tiny loop's CPU profile with a [machine] table."""
    text = (d / "cpu.toml").read_text() + "\n" + identity.toml()
    path = tmp_path / "cpu.toml"
    path.write_text(text)
    return path


def test_validate_names_another_cpu_first(tiny, tmp_path, capsys):
    """A profile edited to another CPU (a Zen 3 with AVX2, one thread, CPU-time clock): validate says so on
    stderr before it runs anything, and its report's first line names each difference and the command."""
    from specsim.calibration.validate import ValidateConfig, format_report, validate

    d, gguf = tiny
    hw = _profile_of(d, tmp_path, _identity())
    cfg = ValidateConfig(model=gguf, hardware=str(hw), stack=str(d / "stack.toml"), target=str(d / "tiny-model.toml"),
                         m_values=(1,), contexts=(32,), repeats=1, parts=("verify",), split=False, threads=2,
                         other_machine=True, force=True)  # what is said, not the timing: a busy machine too
    res = validate(cfg, progress=lambda m: print(f"  {m}", file=__import__("sys").stderr))
    err = capsys.readouterr().err
    assert err.startswith("warning: hardware 'cpu' was measured on another machine or for another run: CPU: 'AMD EPYC")
    assert "threads: the [kernels] curve was fitted at 1, this run uses 2" in err.splitlines()[0]
    assert "clock: one thread's CPU time there, wall time here" in err.splitlines()[0]
    assert "specsim calibrate machine --out hardware/local.toml --force --threads 1,2" in err.splitlines()[0]
    first = format_report(res).splitlines()[0]
    assert first.startswith("NOTE, before any figure: hardware 'cpu' was measured on another machine or for another run: "
                            "CPU: 'AMD EPYC 7B13 64-Core Processor' there")
    assert res.summary["machine"]["mismatches"][0].startswith("CPU: 'AMD EPYC")


def test_validate_names_another_thread_count_only(tiny, tmp_path, capsys):
    """This very machine, but the profile fitted at 1 thread and validate run at 2: only the threads differ."""
    from dataclasses import replace

    from specsim.calibration.validate import ValidateConfig, format_report, validate
    from specsim.specs.machine import this_machine

    d, gguf = tiny
    here = this_machine(threads=2)
    hw = _profile_of(d, tmp_path, replace(here, threads=1, threads_measured=(1,)))
    cfg = ValidateConfig(model=gguf, hardware=str(hw), stack=str(d / "stack.toml"), target=str(d / "tiny-model.toml"),
                         m_values=(1,), contexts=(32,), repeats=1, parts=("verify",), split=False, threads=2,
                         other_machine=True, force=True)  # what is said, not the timing: a busy machine too
    res = validate(cfg)
    assert res.summary["machine"]["mismatches"] == ["threads: the [kernels] curve was fitted at 1, this run uses 2"]
    assert format_report(res).startswith("NOTE, before any figure: hardware 'cpu' was measured on another machine or "
                                         "for another run: threads: the [kernels] curve was fitted at 1")
    capsys.readouterr()
    res = validate(replace(cfg, threads=1))  # the run the profile describes: nothing to say
    assert res.summary["machine"]["mismatches"] == [] and not format_report(res).startswith("NOTE")
    assert "warning" not in capsys.readouterr().err


def test_a_prediction_from_another_machine_says_so_once(tiny, tmp_path, capsys):
    """Every prediction resolves its hardware: a measured profile of another CPU is named on stderr before
    predict prints a figure, once per process however many points resolve it; a catalog part says nothing."""
    from specsim.cli import main
    from specsim.specs import machine

    d, _ = tiny
    hw = _profile_of(d, tmp_path, _identity())
    machine._SAID.clear()
    argv = ["predict", "--hardware", str(hw), "--target", "smollm2-135m-q4_1", "--method", "prompt_lookup", "--k", "2",
            "--alpha", "0.5", "--batch", "1", "--context", "128", "--stack", "none"]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert out.err.startswith("warning: hardware 'cpu' was measured on another machine or for another run (against "
                              "the decoder's default run here:")
    assert "CPU: 'AMD EPYC 7B13 64-Core Processor' there" in out.err and "speedup" in out.out
    assert main(argv) == 0
    assert "warning" not in capsys.readouterr().err  # once per process
    assert main(argv[:2] + ["ddr5-5600-2ch"] + argv[3:]) == 0
    assert "warning" not in capsys.readouterr().err


def test_calibrate_machine_records_this_machine(tmp_path):
    """The quick profile's [machine] is this machine and the run it measured: checked against this machine
    and that run, nothing differs; against another thread count, that is named."""
    from specsim.calibration.machine import MachineConfig, measure_machine
    from specsim.decoder.kernels import kernel_paths
    from specsim.specs.hardware import load_hardware
    from specsim.specs.machine import check_machine, this_machine

    prof = measure_machine(MachineConfig(repeats=1, threads=(1,), formats=("Q4_1",), m_values=(1,), contexts=(32,),
                                         quick=True))
    path = tmp_path / "q.toml"
    path.write_text(prof.toml(command="specsim calibrate machine --out q.toml"))
    hw = load_hardware(path)
    m = hw.machine
    assert m.cpu == this_machine().cpu and m.threads == 1 and m.threads_measured == (1,) and m.clock == "wall"
    assert (m.block_matmul, m.attention) == (kernel_paths()["block_matmul"], kernel_paths()["attention"])
    assert check_machine(hw, threads=1, clock="wall") == []
    assert check_machine(hw, threads=3, clock="wall") == ["threads: the [kernels] curve was fitted at 1, this run uses 3"]


@pytest.mark.parametrize("edit, field, value, rule", [
    ({"threads": 10 ** 30}, "threads", "1000000000000000000000000000000", "an integer in 1..4096"),
    ({"threads": 0}, "threads", "0", "an integer in 1..4096"),
    ({"threads": 2}, "threads", "2", "one of threads_measured [1]"),
    ({"threads": 4, "threads_measured": [1, 2]}, "threads", "4", "one of threads_measured [1, 2]"),
    ({"threads_measured": [1, 10 ** 30]}, "threads_measured", "1000000000000000000000000000000", "integers in 1..4096"),
    ({"logical_cpus": 10 ** 6}, "logical_cpus", "1000000", "an integer in 0..4096"),
])
def test_a_machine_table_that_no_run_had_is_refused_on_load(tiny, tmp_path, edit, field, value, rule):
    """Issue 33: [machine] threads 10^30, or a thread count the profile never measured, loaded without a word.
    Now refused when the file is read: one line naming the file, the field, the value and the rule."""
    from specsim.specs.catalog import read_toml, to_toml
    from specsim.specs.hardware import load_hardware

    d, _ = tiny
    path = _profile_of(d, tmp_path, _identity())
    raw = read_toml(path)
    raw["machine"] = {**raw["machine"], **edit}
    path.write_text(to_toml(raw))
    with pytest.raises(SpecError) as exc:
        load_hardware(str(path))
    msg = str(exc.value)
    assert "\n" not in msg and str(path) in msg
    assert f"[machine]: field '{field}' = {value}: expected {rule}" in msg


def test_the_machine_table_calibrate_machine_writes_loads_back(tiny, tmp_path):
    """The rule refuses nothing a measured run writes: threads the largest of threads_measured (1 and 2 here)."""
    from specsim.specs.hardware import load_hardware

    d, _ = tiny
    hw = load_hardware(str(_profile_of(d, tmp_path, _identity(threads=2, threads_measured=(1, 2), clock="wall"))))
    assert hw.machine.threads == 2 and hw.machine.threads_measured == (1, 2)


def test_validate_refuses_another_machine_unless_told(tiny, tmp_path, capsys):
    """A profile of another CPU would make validate's errors measure that CPU (issue 33's loop read a shipped
    Xeon profile on an EPYC): refused in one line naming the file, each difference and the commands, before the
    model loads; --other-machine runs it with the warning."""
    from specsim.calibration.validate import ValidateConfig, validate
    from specsim.cli import main

    from specsim.decoder.kernels import kernel_paths

    d, gguf = tiny
    # the other machine's tiles are the ones this machine does not take (VNNI here: AVX2 there, and back)
    there = "avx2" if kernel_paths()["block_matmul"] == "vnni" else "vnni"
    hw = _profile_of(d, tmp_path, _identity(cpu="Some Other CPU 9000", instruction_sets=("avx2", "fma", "avx512f",
                                                                                          "avx512bw", "avx512vnni"),
                                            block_matmul=there))
    cfg = ValidateConfig(model=gguf, hardware=str(hw), stack=str(d / "stack.toml"), target=str(d / "tiny-model.toml"),
                         m_values=(1,), contexts=(32,), repeats=1, parts=("verify",), split=False, threads=1,
                         clock="thread")
    with pytest.raises(SpecError) as exc:
        validate(cfg)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"--hardware {str(hw)!r} ({hw}): hardware 'cpu' was measured on another")
    assert "CPU: 'Some Other CPU 9000' there" in msg
    assert f"block matmuls: {'AVX2' if there == 'avx2' else 'AVX512-VNNI'} tiles there" in msg
    assert "--bench-hardware hardware/local.toml" in msg and "--other-machine" in msg
    argv = ["validate", "--model", str(gguf), "--hardware", str(hw), "--stack", str(d / "stack.toml"), "--target",
            str(d / "tiny-model.toml"), "--m", "1", "--contexts", "32", "--repeats", "1", "--parts", "verify",
            "--no-split", "--threads", "1", "--clock", "thread"]
    capsys.readouterr()
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "CPU: 'Some Other CPU 9000' there" in err
    # --force: the handmade profile does not describe the tiny model's passes (validate would name the drift)
    assert main(argv + ["--other-machine", "--json", "--force"]) == 0
    assert capsys.readouterr().err.startswith("warning: hardware 'cpu' was measured on another machine")
