"""Hardware catalog and loader: every shipped profile loads, its derived numbers match figures read
off datasheets by hand, and bad files are refused with messages that say what is wrong."""
from __future__ import annotations

import math
from dataclasses import replace
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.specs.catalog import catalog_dir, catalog_ids
from specsim.errors import SpecError
from specsim.specs.hardware import _SCALARS, DTYPES, hardware_from_dict, list_hardware, load_hardware

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REQUIRED_IDS = (
    "a100-sxm-80gb", "a100-sxm-40gb", "a100-pcie-40gb", "h100-sxm", "h100-pcie", "h200-sxm",
    "b200", "gb200", "gb300", "l40s", "l4", "rtx-3090", "rtx-4090", "rtx-a6000", "mi300x",
    "mi355x", "tpu-v4", "ddr5-5600-2ch", "ddr4-3200-2ch", "epyc-genoa-12ch", "apple-m2-ultra",
    "seed-hbm-2tbs", "seed-ddr5-90gbs",
)
CATALOG_FILES = sorted(catalog_dir("hardware").glob("*.toml"))


# --- the catalog as shipped ---------------------------------------------------------------------

def test_every_required_id_is_in_the_catalog():
    missing = sorted(set(REQUIRED_IDS) - set(catalog_ids("hardware")))
    assert missing == []


@pytest.mark.parametrize("path", CATALOG_FILES, ids=lambda p: p.stem)
def test_every_catalog_file_loads_and_its_id_is_its_file_stem(path: Path):
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    assert raw["id"] == path.stem
    by_path = load_hardware(path)
    by_id = load_hardware(path.stem)
    assert by_path == by_id
    assert by_id.id == path.stem


@pytest.mark.parametrize("path", CATALOG_FILES, ids=lambda p: p.stem)
def test_every_figure_in_a_catalog_file_has_its_own_source(path: Path):
    # The loader accepts a group key ("peak_tflops") for a whole table; the shipped catalog is held
    # to the stricter rule that each figure names its own source (the seed parts excepted: their
    # whole tables are one hypothetical choice, said once).
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    sources = raw["sources"]
    needed = [k for k in raw if k in _SCALARS]
    for table in ("peak_tflops", "efficiency"):
        for key in raw.get(table, {}):
            needed.append(f"{table}.{key}" if not path.stem.startswith("seed-") else table)
    assert [k for k in needed if not str(sources.get(k, "")).strip()] == []


@pytest.mark.parametrize("path", [p for p in CATALOG_FILES if not p.stem.startswith("seed-")], ids=lambda p: p.stem)
def test_every_efficiency_figure_is_marked_as_an_estimate_or_cites_a_measurement(path: Path):
    # Achievable fractions and overheads are judgements unless someone measured them; the catalog
    # must say which. A source either starts with "estimate" or names the measurement it used.
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    for key in raw.get("efficiency", {}):
        text = raw["sources"][f"efficiency.{key}"].lower()
        assert text.startswith("estimate") or any(w in text for w in ("measur", "benchmark", "discussion #", "tok/s")), key


def test_list_hardware_returns_every_catalog_entry():
    assert sorted(h.id for h in list_hardware()) == catalog_ids("hardware")


# --- derived figures against datasheet numbers read off by hand ----------------------------------
# (id, dtype, datasheet peak FLOP/s (dense), datasheet peak bytes/s, where the two numbers come from)
RIDGE_CASES = [
    ("h100-sxm", "bf16", 989.4e12, 3.35e12, "NVIDIA H100 whitepaper dense BF16; H100 SXM datasheet 3.35 TB/s"),
    ("h100-sxm", "fp8", 1978.9e12, 3.35e12, "NVIDIA H100 whitepaper dense FP8; 3.35 TB/s"),
    ("a100-sxm-80gb", "bf16", 312e12, 2.039e12, "NVIDIA A100 datasheet dense BF16 312 TFLOPS; 2,039 GB/s"),
    ("a100-sxm-40gb", "fp16", 312e12, 1.555e12, "NVIDIA A100 datasheet dense FP16; 1,555 GB/s"),
    ("h200-sxm", "bf16", 989.4e12, 4.8e12, "same GH100 die as H100 SXM; H200 datasheet 4.8 TB/s"),
    ("mi300x", "bf16", 1307.4e12, 5.3e12, "AMD MI300X datasheet dense BF16 1307.4; 5.3 TB/s"),
    ("l4", "fp8", 242.5e12, 300e9, "NVIDIA L4 datasheet 485 TFLOPS FP8 with sparsity, halved; 300 GB/s"),
    ("tpu-v4", "bf16", 275e12, 1.2e12, "Google Cloud TPU v4 docs: 275 TFLOPS bf16, 1200 GBps"),
    ("ddr5-5600-2ch", "bf16", 16 * 64 * 4.5e9, 2 * 5600e6 * 8, "Ryzen 9 7950X: 16 cores x 64 bf16 FLOP/clk x 4.5 GHz; 2 ch x 5600 MT/s x 8 B"),
]


@pytest.mark.parametrize("hw_id,dtype,peak_flops,bw_bytes,where", RIDGE_CASES, ids=[f"{c[0]}-{c[1]}" for c in RIDGE_CASES])
def test_ridge_point_equals_datasheet_peak_over_datasheet_bandwidth(hw_id, dtype, peak_flops, bw_bytes, where):
    hw = load_hardware(hw_id)
    expected = peak_flops / bw_bytes
    # Tolerance 0.5 %: datasheet figures are rounded (e.g. 756 vs 756.05 TFLOP/s); a dense/sparse
    # mix-up is a factor of 2 and a unit slip a factor of 1000, far outside it.
    assert hw.ridge_flops_per_byte(dtype) == pytest.approx(expected, rel=5e-3), where
    assert hw.ridge_points[dtype] == pytest.approx(expected, rel=5e-3), where


def test_worked_ridge_values_from_the_brief():
    # By hand: 989.4e12 / 3.35e12 = 295.3 FLOP/byte; 312e12 / 2.039e12 = 153.0 FLOP/byte (±0.5).
    assert load_hardware("h100-sxm").ridge_flops_per_byte("bf16") == pytest.approx(295.3, abs=0.5)
    assert load_hardware("a100-sxm-80gb").ridge_flops_per_byte("bf16") == pytest.approx(153.0, abs=0.5)


def test_tensor_peaks_are_dense_not_sparse():
    # The datasheet headline with 2:4 sparsity is twice the dense figure; the catalog holds dense.
    assert load_hardware("h100-sxm").peak_flops_per_s["bf16"] == pytest.approx(989.4e12, rel=1e-6)
    assert load_hardware("h100-pcie").peak_flops_per_s["bf16"] == pytest.approx(1513e12 / 2, rel=1e-3)
    assert load_hardware("b200").peak_flops_per_s["fp4"] == pytest.approx(18e15 / 2, rel=1e-6)


def test_memory_quoted_in_gib_is_converted_with_powers_of_two():
    # The A100 80GB's five 16 GiB HBM2e stacks: 80 x 2^30 bytes, not 80e9.
    assert load_hardware("a100-sxm-80gb").memory_bytes == 80 * 2**30
    assert load_hardware("l40s").memory_bytes == 48e9


def test_compute_dtype_falls_back_where_a_part_lacks_the_dtype():
    assert load_hardware("h100-sxm").compute_dtype_for("fp4") == "fp8"      # Hopper has no fp4
    assert load_hardware("a100-sxm-80gb").compute_dtype_for("fp8") == "bf16"  # Ampere has no fp8
    assert load_hardware("tpu-v4").compute_dtype_for("fp16") == "bf16"
    assert load_hardware("ddr4-3200-2ch").compute_dtype_for("bf16") == "fp32"  # Zen 3: no bf16


# --- order of magnitude (catches a slipped 1e3) --------------------------------------------------
BANDWIDTH_RANGE_BYTES_PER_S = {
    "gpu": (2e11, 1e13), "tpu": (2e11, 1e13), "accelerator": (2e11, 1e13),
    "cpu": (2e10, 1e12), "soc": (5e10, 2e12),
}


@pytest.mark.parametrize("hw", list_hardware(), ids=lambda h: h.id)
def test_figures_are_within_an_order_of_magnitude_of_their_kind(hw):
    # the ranges are a datasheet's; a machine `specsim calibrate machine` measured (one thread of a
    # shared VM, say) reaches a fraction of its socket's datasheet figure, so it gets a floor 20x lower
    measured = hw.notes.lower().startswith("measured")
    lo, hi = BANDWIDTH_RANGE_BYTES_PER_S[hw.kind]
    assert (lo / 20 if measured else lo) <= hw.mem_bandwidth_bytes_per_s <= hi
    assert 4e9 <= hw.memory_bytes <= 2e12              # 4 GB .. 2 TB per device
    best = max(hw.peak_flops_per_s.values())
    if measured:
        assert 2.5e10 <= best <= 1e14
    elif hw.kind in ("cpu", "soc"):
        assert 5e11 <= best <= 1e14                     # 0.5 .. 100 TFLOP/s
    else:
        assert 1e13 <= best <= 3e16                     # 10 TFLOP/s .. 30 PFLOP/s
    assert 0 <= hw.interconnect_bandwidth_bytes_per_s <= 2e12
    assert 0 <= hw.interconnect_latency_s <= 1e-4
    assert 0 <= hw.efficiency.step_overhead_s <= 5e-3
    assert 0 <= hw.efficiency.per_layer_overhead_s <= 1e-4
    assert 1e6 <= hw.llc_bytes <= 1e9                   # 1 MB .. 1 GB of last-level cache


def test_data_centre_gpus_have_a_tensor_parallel_link():
    for hw in list_hardware():
        if hw.kind in ("gpu", "tpu"):
            assert hw.interconnect_bandwidth_bytes_per_s >= 30e9, hw.id  # at least PCIe Gen4 x16


# --- the seed's idealised parts --------------------------------------------------------------------

def test_seed_hbm_part_is_exactly_the_articles_idealised_accelerator():
    hw = load_hardware("seed-hbm-2tbs")
    assert hw.mem_bandwidth_bytes_per_s == 2.0e12
    assert hw.efficiency.bandwidth_frac == 1.0
    assert hw.efficiency.compute_frac == 1.0
    assert hw.efficiency.step_overhead_s == 0.0
    assert hw.efficiency.per_layer_overhead_s == 0.0
    # Seed: 140 GB of weights / 2.0 TB/s = 70 ms.
    assert 140e9 / hw.mem_bandwidth_bytes_per_s == pytest.approx(0.070, rel=1e-12)


def test_seed_ddr5_part_is_90_gb_s_with_no_overhead():
    hw = load_hardware("seed-ddr5-90gbs")
    assert hw.mem_bandwidth_bytes_per_s == 90e9
    assert hw.efficiency.bandwidth_frac == 1.0
    assert hw.efficiency.step_overhead_s == 0.0


def test_realistic_ddr5_part_matches_the_seeds_figure_at_its_jedec_peak():
    # Seed: "dual-channel DDR5-5600 delivers roughly 90 GB/s"; JEDEC: 2 x 5600 MT/s x 8 B = 89.6 GB/s.
    assert load_hardware("ddr5-5600-2ch").mem_bandwidth_bytes_per_s == pytest.approx(89.6e9, rel=1e-12)


# --- bad input -------------------------------------------------------------------------------------

def _good_profile() -> dict:
    return {
        "id": "test-part",
        "name": "Test part",
        "kind": "gpu",
        "memory_gb": 80,
        "mem_bandwidth_gb_s": 3350,
        "peak_tflops": {"bf16": 989.4},
        "efficiency": {"bandwidth_frac": 0.85},
        "sources": {
            "memory_gb": "test",
            "mem_bandwidth_gb_s": "test",
            "peak_tflops.bf16": "test",
            "efficiency.bandwidth_frac": "test",
        },
    }


def _toml_value(v) -> str:
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v)


def _write_toml(path: Path, raw: dict) -> Path:
    lines = [f"{k} = {_toml_value(v)}" for k, v in raw.items() if not isinstance(v, dict)]
    for table, body in raw.items():
        if isinstance(body, dict):
            lines.append(f"\n[{table}]")
            lines += [f'"{k}" = {_toml_value(v)}' for k, v in body.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_good_profile_used_below_is_valid(tmp_path):
    hw = load_hardware(_write_toml(tmp_path / "test-part.toml", _good_profile()))
    assert hw.mem_bandwidth_bytes_per_s == 3.35e12
    assert hw.ridge_flops_per_byte() == pytest.approx(989.4e12 / 3.35e12, rel=1e-12)


@pytest.mark.parametrize("bandwidth", [-3350, 0])
def test_non_positive_bandwidth_is_refused(tmp_path, bandwidth):
    raw = _good_profile()
    raw["mem_bandwidth_gb_s"] = bandwidth
    path = _write_toml(tmp_path / "test-part.toml", raw)
    # The message names the file, the key as written, the value as written and the rule.
    with pytest.raises(SpecError, match=rf"test-part\.toml: field 'mem_bandwidth_gb_s' = {bandwidth!r}: "
                                        r"expected a positive number"):
        load_hardware(path)


def test_non_numeric_bandwidth_is_refused(tmp_path):
    raw = _good_profile()
    raw["mem_bandwidth_gb_s"] = "3350"
    with pytest.raises(SpecError, match=r"field 'mem_bandwidth_gb_s' = '3350': expected a number"):
        load_hardware(_write_toml(tmp_path / "test-part.toml", raw))


def test_unknown_key_is_refused_with_the_close_match(tmp_path):
    raw = _good_profile()
    raw["mem_bandwith_gb_s"] = raw.pop("mem_bandwidth_gb_s")
    path = _write_toml(tmp_path / "test-part.toml", raw)
    with pytest.raises(SpecError, match=r"unknown key 'mem_bandwith_gb_s' \(did you mean 'mem_bandwidth_gb_s'"):
        load_hardware(path)


def test_unknown_dtype_is_refused_with_the_close_match(tmp_path):
    raw = _good_profile()
    raw["peak_tflops"] = {"bf61": 989.4}
    raw["sources"]["peak_tflops.bf61"] = "test"
    with pytest.raises(SpecError, match=r"unknown key 'bf61' \(did you mean 'bf16'"):
        load_hardware(_write_toml(tmp_path / "test-part.toml", raw))


def test_unknown_efficiency_key_is_refused(tmp_path):
    raw = _good_profile()
    raw["efficiency"] = {"bandwidth_fraction": 0.8}
    raw["sources"]["efficiency"] = "test"
    with pytest.raises(SpecError, match=r"\[efficiency\]: unknown key 'bandwidth_fraction' \(did you mean 'bandwidth_frac'"):
        load_hardware(_write_toml(tmp_path / "test-part.toml", raw))


@pytest.mark.parametrize("missing", ["mem_bandwidth_gb_s", "peak_tflops.bf16", "efficiency.bandwidth_frac"])
def test_a_figure_without_a_source_is_refused(tmp_path, missing):
    raw = _good_profile()
    del raw["sources"][missing]
    path = _write_toml(tmp_path / "test-part.toml", raw)
    with pytest.raises(SpecError, match=rf"test-part\.toml: field 'sources\.{missing}'.*a source"):
        load_hardware(path)


def test_a_group_source_covers_its_whole_table(tmp_path):
    raw = _good_profile()
    del raw["sources"]["peak_tflops.bf16"]
    raw["sources"]["peak_tflops"] = "one datasheet for every dtype"
    assert load_hardware(_write_toml(tmp_path / "test-part.toml", raw)).peak_flops_per_s["bf16"] == 989.4e12


def test_an_empty_source_string_is_refused(tmp_path):
    raw = _good_profile()
    raw["sources"]["memory_gb"] = "  "
    with pytest.raises(SpecError, match=r"field 'sources\.memory_gb' = '  ': expected a non-empty citation"):
        load_hardware(_write_toml(tmp_path / "test-part.toml", raw))


@pytest.mark.parametrize("key,value", [("bandwidth_frac", 1.2), ("compute_frac", 1.5), ("bandwidth_frac", 0.0)])
def test_efficiency_fraction_outside_0_1_is_refused(tmp_path, key, value):
    raw = _good_profile()
    raw["efficiency"] = {key: value}
    raw["sources"][f"efficiency.{key}"] = "test"
    path = _write_toml(tmp_path / "test-part.toml", raw)
    with pytest.raises(SpecError, match=rf"test-part\.toml: .*field '{key}' = {value}: expected a fraction in \(0, 1\]"):
        load_hardware(path)


def test_negative_overhead_is_refused(tmp_path):
    raw = _good_profile()
    raw["efficiency"] = {"step_overhead_us": -5}
    raw["sources"]["efficiency"] = "test"
    with pytest.raises(SpecError, match=r"test-part\.toml: .*field 'step_overhead_s' = -4\.9+\d*e-06: expected a finite duration"):
        load_hardware(_write_toml(tmp_path / "test-part.toml", raw))


def test_memory_in_both_gb_and_gib_is_refused(tmp_path):
    raw = _good_profile()
    raw["memory_gib"] = 80
    raw["sources"]["memory_gib"] = "test"
    with pytest.raises(SpecError, match=r"exactly one of memory_gb or memory_gib"):
        load_hardware(_write_toml(tmp_path / "test-part.toml", raw))


def test_unknown_kind_is_refused(tmp_path):
    raw = _good_profile()
    raw["kind"] = "fpga"
    with pytest.raises(SpecError, match=r"field 'kind' = 'fpga': expected one of gpu, cpu, tpu"):
        load_hardware(_write_toml(tmp_path / "test-part.toml", raw))


def test_unknown_id_lists_close_matches():
    with pytest.raises(SpecError, match=r"unknown hardware id 'h100-sxn'\. Did you mean: .*h100-sxm"):
        load_hardware("h100-sxn")


def test_missing_path_is_refused(tmp_path):
    with pytest.raises(SpecError, match=r"not found"):
        load_hardware(tmp_path / "no-such-part.toml")


def test_invalid_toml_is_refused(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text('id = "broken\n')
    with pytest.raises(SpecError, match=r"broken\.toml: not valid TOML"):
        load_hardware(path)


# --- properties ------------------------------------------------------------------------------------
_positive = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(bandwidth_gb_s=_positive, scale=st.floats(min_value=1e-3, max_value=1e3), tflops=_positive,
       dtype=st.sampled_from(DTYPES))
def test_ridge_point_scales_inversely_with_bandwidth(bandwidth_gb_s, scale, tflops, dtype):
    def profile(bw):
        raw = _good_profile()
        raw["mem_bandwidth_gb_s"] = bw
        raw["peak_tflops"] = {dtype: tflops}
        raw["sources"] = {"memory_gb": "t", "mem_bandwidth_gb_s": "t", "peak_tflops": "t", "efficiency": "t"}
        return hardware_from_dict(raw)

    slow, fast = profile(bandwidth_gb_s), profile(bandwidth_gb_s * scale)
    # By hand: ridge = peak / bandwidth, so ridge(bw) * bw is the peak and ridge(bw) / ridge(s*bw) = s.
    assert slow.ridge_flops_per_byte(dtype) * slow.mem_bandwidth_bytes_per_s == pytest.approx(tflops * 1e12, rel=1e-12)
    assert slow.ridge_flops_per_byte(dtype) / fast.ridge_flops_per_byte(dtype) == pytest.approx(scale, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(values=st.dictionaries(st.sampled_from(DTYPES), _positive, min_size=1))
def test_ridge_points_cover_every_listed_dtype_and_are_positive(values):
    raw = _good_profile()
    raw["peak_tflops"] = values
    raw["sources"]["peak_tflops"] = "t"
    hw = hardware_from_dict(raw)
    assert set(hw.ridge_points) == set(values)
    assert all(r > 0 and math.isfinite(r) for r in hw.ridge_points.values())


# --- measured kernel curves and all-reduce tables --------------------------------------------------
FITTED = {"h100-sxm": ("h100", "h100_dgx"), "a100-sxm-80gb": ("a100", "a100_dgx")}
TRANSFERS = {"h100-pcie": ("h100-sxm", 114, False), "h200-sxm": ("h100-sxm", 132, True),
             "a100-sxm-40gb": ("a100-sxm-80gb", 108, True), "a100-pcie-40gb": ("a100-sxm-80gb", 108, False)}


@pytest.mark.parametrize("hw_id", sorted(FITTED))
def test_fitted_tables_cite_the_data_and_the_command(hw_id):
    with open(catalog_dir("hardware") / f"{hw_id}.toml", "rb") as f:
        raw = tomllib.load(f)
    gpu, network = FITTED[hw_id]
    src = raw["sources"]
    assert "vidur" in src["kernels"].lower() and f"compute/{gpu}" in src["kernels"]
    assert f"specsim calibrate operators --hardware {hw_id}" in src["kernels"]
    assert f"network/{network}/all_reduce.csv" in src["all_reduce"]
    assert "whitepaper" in src["kernels.n_sm"].lower()  # the SM count is a datasheet figure, not fitted


@pytest.mark.parametrize("hw_id", sorted(TRANSFERS))
def test_related_parts_borrow_a_fit_and_say_so(hw_id):
    source_id, n_sm, with_all_reduce = TRANSFERS[hw_id]
    hw, source = load_hardware(hw_id), load_hardware(source_id)
    with open(catalog_dir("hardware") / f"{hw_id}.toml", "rb") as f:
        raw = tomllib.load(f)
    assert raw["sources"]["kernels"].startswith(f"transferred from {source_id}")
    # everything but the SM count (this part's own datasheet figure) is the source's fit
    assert hw.kernels.n_sm == n_sm
    assert replace(hw.kernels, n_sm=source.kernels.n_sm, transferred_from="") == source.kernels
    assert (hw.all_reduce is not None) == with_all_reduce
    if with_all_reduce:
        assert raw["sources"]["all_reduce"].startswith(f"transferred from {source_id}")
        assert hw.all_reduce_cost(8) == source.all_reduce_cost(8)


def _kernel_table() -> dict:
    with open(catalog_dir("hardware") / "h100-sxm.toml", "rb") as f:
        return dict(tomllib.load(f)["kernels"])


def _with_kernels(kernels: dict, **extra) -> dict:
    raw = _good_profile()
    raw["kernels"] = kernels
    raw["sources"]["kernels"] = "test"
    raw.update(extra)
    return raw


def test_a_kernel_table_loads_in_si_units():
    hw = hardware_from_dict(_with_kernels(_kernel_table()))
    k = _kernel_table()
    assert hw.kernels.gemm_floor_s == pytest.approx(k["gemm_floor_us"] * 1e-6, rel=1e-12)
    assert hw.kernels.elementwise_row_s_per_elem["norm"] == pytest.approx(k["norm_row_ns_per_elem"] * 1e-9, rel=1e-12)
    assert hw.kernels.gemm_tile == tuple(k["gemm_tile"])


@pytest.mark.parametrize("key,value,message", [
    ("gemm_bandwidth_frac", 1.2, r"gemm_bandwidth_frac' = 1\.2: expected a fraction in \(0, 1\]"),
    ("gemm_overlap_exponent", 0.5, r"gemm_overlap_exponent' = 0\.5: expected a number >= 1"),
    ("gemm_tile", [64], r"gemm_tile' = \(64,\): expected \[rows, columns\]"),
    ("norm_bandwidth_frac", 0.0, r"norm_bandwidth_frac' = 0\.0: expected a fraction"),
    ("n_sm", 13.5, r"n_sm' = 13\.5: expected an integer > 0"),
    ("gemm_floor_ms", 3.0, r"unknown key 'gemm_floor_ms' \(did you mean 'gemm_floor_us'"),
    ("gemm_row_tiles", 8, r"gemm_row_tiles' = 8: expected a list of tile sizes"),
    ("gemm_row_tiles", [4, 8, 1], r"gemm_row_tiles' = \[4, 8, 1\]: expected tile sizes in query rows, strictly decreasing"),
    ("gemm_tile_pass_rows", 2.0, r"gemm_tile_pass_rows' = 2\.0: expected 0 unless gemm_row_tiles is given"),
])
def test_bad_kernel_tables_are_refused(key, value, message):
    k = _kernel_table()
    k[key] = value
    with pytest.raises(SpecError, match=message):
        hardware_from_dict(_with_kernels(k))


def test_row_tiles_are_optional_and_read():
    k = _kernel_table()
    k.update(gemm_row_tiles=[8, 4, 1], gemm_tile_pass_rows=2.5)
    kp = hardware_from_dict(_with_kernels(k)).kernels
    assert kp.gemm_row_tiles == (8, 4, 1) and kp.gemm_tile_pass_rows == 2.5
    assert hardware_from_dict(_with_kernels(_kernel_table())).kernels.gemm_row_tiles == ()


def test_a_kernel_table_missing_a_key_is_refused():
    k = _kernel_table()
    del k["act_row_ns_per_elem"]
    with pytest.raises(SpecError, match=r"kernels\.act_row_ns_per_elem.*a fitted \[kernels\] table needs every key"):
        hardware_from_dict(_with_kernels(k))


def test_a_kernel_table_needs_a_source():
    raw = _with_kernels(_kernel_table())
    del raw["sources"]["kernels"]
    with pytest.raises(SpecError, match=r"sources\.kernels\.n_sm"):
        hardware_from_dict(raw)


@pytest.mark.parametrize("table,message", [
    ({"transfer_from": "h100-sxn", "n_sm": 100}, r"unknown hardware id 'h100-sxn'"),
    ({"transfer_from": "l4", "n_sm": 58}, r"kernels\.transfer_from' = 'l4': expected a part with its own fitted"),
    ({"transfer_from": "h200-sxm", "n_sm": 132}, r"expected a part with its own fitted"),  # no chains
    ({"transfer_from": "h100-sxm"}, r"kernels\.n_sm.*own SM count"),
    ({"transfer_from": "h100-sxm", "n_sm": 114, "gemm_floor_us": 2}, r"only the part's own n_sm"),
])
def test_bad_transfers_are_refused(table, message):
    with pytest.raises(SpecError, match=message):
        hardware_from_dict(_with_kernels(table))


@pytest.mark.parametrize("table,message", [
    ({"group_sizes": [2, 4], "latency_us": [30.0], "bus_gb_s": [300.0, 300.0]}, r"as long as latency_us"),
    ({"group_sizes": [1], "latency_us": [30.0], "bus_gb_s": [300.0]}, r"group_sizes' = 1: expected integers >= 2"),
    ({"group_sizes": [2], "latency_us": [30.0], "bus_gb_s": [0.0]}, r"bus_bandwidth_bytes_per_s' = 0\.0"),
])
def test_bad_all_reduce_tables_are_refused(table, message):
    raw = _good_profile()
    raw["all_reduce"] = table
    raw["sources"]["all_reduce"] = "test"
    with pytest.raises(SpecError, match=message):
        hardware_from_dict(raw)


def test_all_reduce_cost_uses_the_measured_group_sizes_and_falls_back_otherwise():
    hw = load_hardware("a100-sxm-80gb")
    # a100-sxm-80gb.toml: [all_reduce] n = 4 → 31.5 µs, 151.3 GB/s; interconnect_latency_us 10, interconnect_gb_s 300
    assert hw.all_reduce_cost(4) == pytest.approx((31.5e-6, 151.3e9), rel=1e-12)
    assert hw.all_reduce_cost(16) == pytest.approx((10e-6, 300e9), rel=1e-12)
    assert load_hardware("l40s").all_reduce_cost(2) == pytest.approx((20e-6, 32e9), rel=1e-12)


def test_tile_pass_costs_and_attention_overlap_are_read():
    k = _kernel_table()
    k.update(gemm_row_tiles=[8, 4, 1], gemm_tile_pass_cost=[8, 4.9, 1.3], attention_overlap_exponent=1.8)
    kp = hardware_from_dict(_with_kernels(k)).kernels
    assert kp.gemm_tile_pass_cost == (8.0, 4.9, 1.3) and kp.attention_overlap_exponent == 1.8
    assert hardware_from_dict(_with_kernels(_kernel_table())).kernels.attention_overlap_exponent == float("inf")
    k["gemm_tile_pass_cost"] = 4.9
    with pytest.raises(SpecError, match=r"gemm_tile_pass_cost' = 4\.9: expected a list of rows' worth"):
        hardware_from_dict(_with_kernels(k))


def test_a_tpu_v4_loads_fp32_checkpoints_as_bf16_and_the_table_is_checked():
    from specsim.specs.hardware import hardware_from_dict

    tpu = load_hardware("tpu-v4")
    assert tpu.runs_checkpoint_as("fp32") == "bf16" and tpu.runs_checkpoint_as("bf16") is None
    assert "infer.gin" in tpu.sources["loads_as.fp32"]
    raw = {"id": "x", "name": "x", "kind": "tpu", "memory_gb": 32, "mem_bandwidth_gb_s": 1000,
           "peak_tflops": {"bf16": 100}, "sources": {"memory_gb": "d", "mem_bandwidth_gb_s": "d", "peak_tflops.bf16": "d"}}
    with pytest.raises(SpecError, match="sources.loads_as.fp32"):
        hardware_from_dict({**raw, "loads_as": {"fp32": "bf16"}})
    with pytest.raises(SpecError, match="loads_as.fp32"):
        hardware_from_dict({**raw, "loads_as": {"fp32": "fp8"}, "sources": {**raw["sources"], "loads_as.fp32": "d"}})
