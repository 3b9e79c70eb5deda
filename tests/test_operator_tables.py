"""Measured operator tables (specs.operator_tables, cost.measured): columns, version pick, held-out
interpolation against the tables' own rows, a step priced by hand from table rows, and the fallback."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specsim.errors import SpecError
from specsim.specs import operator_tables as ot
from specsim.specs.hardware import load_hardware
from specsim.specs.models import load_model
from specsim.specs.stacks import load_stack

from naive_isotonic import pool_adjacent_violators

ROOT = ot.package_root()
needs_tables = pytest.mark.skipif(ROOT is None, reason="aiconfigurator-core is not installed (no wheel here)")


@needs_tables
@pytest.mark.parametrize("system,framework", [("h100_sxm", "sglang"), ("h100_sxm", "vllm"), ("h100_sxm", "trtllm"),
                                              ("h200_sxm", "sglang")])
def test_tables_have_the_columns_specsim_reads(system, framework):
    t = ot.load_tables(system, framework)
    assert t is not None and "gemm_perf" in t.frames and "generation_attention_perf" in t.frames
    for name, frame in t.frames.items():
        assert set(ot.TABLES[name][1]) <= set(frame.columns), name


def test_a_table_missing_a_column_is_refused(tmp_path):
    d = tmp_path / "x_sys" / "gemm" / "sglang" / "0.5.14"
    d.mkdir(parents=True)
    pd.DataFrame({"m": [1], "n": [32], "k": [32], "latency": [0.01]}).to_parquet(d / "gemm_perf.parquet")
    with pytest.raises(SpecError, match="missing column.*kernel_source.*gemm_dtype"):
        ot.load_tables("x_sys", "sglang", root=tmp_path)


def test_version_pick():
    v = ("0.5.6.post2", "0.5.9", "0.5.14")
    assert ot.nearest_version(v, None) == "0.5.14"
    assert ot.nearest_version(v, "0.5.10") == "0.5.9"  # the nearest collected at or below
    assert ot.nearest_version(v, "0.6.0") == "0.5.14"
    assert ot.nearest_version(v, "0.4.0") == "0.5.6.post2"  # nothing below: the oldest above
    with pytest.raises(SpecError):
        ot.nearest_version(v, "latest")
    assert ot.framework_for_stack("sglang-specforge") == "sglang" and ot.framework_for_stack("hf-eager") is None


@needs_tables
def test_version_pick_on_the_installed_tables():
    assert ot.collected_versions(ROOT, "h100_sxm", "gemm", "sglang", "gemm_perf") == ("0.5.6.post2", "0.5.14")
    old = ot.load_tables("h100_sxm", "sglang", "0.5.7")
    assert old.versions["gemm_perf"] == "0.5.6.post2"
    assert "sglang 0.5.6.post2" in old.label()


def _gemm_cube():
    from specsim.cost.measured import GemmGrid
    return GemmGrid.from_frame(ot.load_tables("h100_sxm", "sglang", "0.5.14").frames["gemm_perf"], "bfloat16")


@needs_tables
def test_gemm_interpolation_on_rows_left_out():
    """Leave one measured grid point out along each axis and interpolate it from its neighbours the way
    cost.measured does (linear in m; linear in n and in k, so bilinear off the grid)."""
    g = _gemm_cube()
    c = g.latency_s
    errs = {}
    for axis, grid in ((0, g.m), (1, g.n), (2, g.k)):
        e = []
        for i in range(1, grid.size - 1):
            lo, mid, hi = (np.take(c, j, axis=axis) for j in (i - 1, i, i + 1))
            w = (grid[i] - grid[i - 1]) / (grid[i + 1] - grid[i - 1])
            pred = (1 - w) * lo + w * hi
            ok = ~np.isnan(pred) & ~np.isnan(mid) & (mid > 20e-6)  # above the launch-floor noise
            e.append(np.abs(pred[ok] / mid[ok] - 1))
        errs[axis] = np.concatenate(e)
    med = {a: float(np.median(v)) for a, v in errs.items()}
    print("held-out |error| median by axis m, n, k:", med,
          "p90:", {a: float(np.quantile(v, 0.9)) for a, v in errs.items()})
    assert med[0] < 0.05 and med[1] < 0.15 and med[2] < 0.15


def _pass(system, framework, model, tp=1, version=None, **kw):
    from specsim.cost import measured
    return measured.build(ot.load_tables(system, framework, version), model, tp, **kw)


@needs_tables
def test_a_step_priced_by_hand_from_table_rows():
    """Llama-3.1-8B, one sequence, L = 1022 (kv 1023, a measured step) on H100 SGLang 0.5.14: each GEMM
    from the table's own rows (bilinear by hand where the shape is off the grid, then fitted non-decreasing
    in m by the plain twin, tests/naive_isotonic.py), attention the row."""
    model = load_model("llama-3.1-8b")
    tab = ot.load_tables("h100_sxm", "sglang", "0.5.14").frames
    mp = _pass("h100_sxm", "sglang", model, version="0.5.14")
    g = tab["gemm_perf"]
    g = g[g.gemm_dtype == "bfloat16"].set_index(["n", "k", "m"])["latency"].sort_index()  # ms

    def lat(n, k):  # bilinear over the 22-point grid at every m, written out, then fitted non-decreasing in m
        ns, ks = sorted(set(g.index.get_level_values(0))), sorted(set(g.index.get_level_values(1)))
        n0 = max(x for x in ns if x <= n); n1 = min(x for x in ns if x >= n)
        k0 = max(x for x in ks if x <= k); k1 = min(x for x in ks if x >= k)
        u = 0.0 if n1 == n0 else (n - n0) / (n1 - n0)
        v = 0.0 if k1 == k0 else (k - k0) / (k1 - k0)
        by_m = ((1 - u) * (1 - v) * g[(n0, k0)] + u * (1 - v) * g[(n1, k0)] + (1 - u) * v * g[(n0, k1)]
                + u * v * g[(n1, k1)])
        assert not by_m.isna().any()  # every corner measured at every m: nothing filled
        return pool_adjacent_violators(by_m.to_numpy())[0]  # m = 1

    layer_ms = lat(6144, 4096) + lat(4096, 4096) + lat(28672, 4096) + lat(4096, 14336)
    head_ms = 2 * lat(128256 / 2, 4096)  # the 128256-wide head as two column blocks the grid holds
    a = tab["generation_attention_perf"]
    rows = a[(a.kernel_source == "fa3") & (a.step == 1023) & (a.num_heads == 32) & (a.num_key_value_heads == 8)
             & (a.head_dim == 128) & (a.window_size == 0) & (a.kv_cache_dtype == "bfloat16")]
    attn_ms = float(rows[rows.batch_size == 1]["latency"].median())
    assert float(mp.layers_time_s(1)) == pytest.approx(32 * layer_ms * 1e-3, rel=1e-9)
    assert float(mp.head_time_s(1)) == pytest.approx(head_ms * 1e-3, rel=1e-9)
    assert float(mp.attention_time_s(1, 1023)) == pytest.approx(32 * attn_ms * 1e-3, rel=1e-9)
    assert float(mp.allreduce_time_s(1)) == 0.0  # tp 1
    assert "h100_sxm sglang 0.5.14" in mp.label and "generation_attention fa3" in mp.label
    assert any("lm_head" in n for n in mp.notes)
    # four decode queries read the table's batch-4 row (an expanding scorer's verify of 4 tokens reads it so)
    row4 = float(rows[rows.batch_size == 4]["latency"].median())
    assert float(mp.attention_time_s(4, 1023)) == pytest.approx(32 * row4 * 1e-3, rel=1e-9)
    assert float(mp.attention_time_s(0, 1023)) == 0.0  # no decode queries, no decode attention


@needs_tables
def test_outside_the_measured_range_is_noted():
    mp = _pass("h100_sxm", "sglang", load_model("llama-3.1-8b"))
    notes = mp.range_notes(n_tokens=64, n_queries=64, kv_len=100_001)
    assert any("generation_attention" in n and "64" in n for n in notes)
    assert mp.range_notes(n_tokens=64, n_queries=64, kv_len=1023) == ()  # measured: nothing to say


def test_fallback_when_the_tables_are_absent(monkeypatch, capsys):
    """No package: no tables for any system (every pass then takes the roofline, cost.pricing) and one
    line on stderr, once per process."""
    monkeypatch.setattr(ot, "package_root", lambda: None)
    monkeypatch.setattr(ot, "_WARNED", [])
    assert ot.load_tables("h100_sxm", "sglang") is None
    assert ot.load_tables("h100_sxm", "vllm") is None
    err = capsys.readouterr().err
    assert err.count("is not installed") == 1 and "roofline" in err


@needs_tables
def test_all_reduce_at_tp2_from_the_table_row():
    """tp 2, 32 tokens: 32 × 4096 = 131072 bf16 elements, a measured message size; two all-reduces a layer."""
    tables = ot.load_tables("h100_sxm", "sglang")
    mp = _pass("h100_sxm", "sglang", load_model("llama-3.1-8b"), tp=2)
    ar = tables.frames["custom_allreduce_perf"]
    row_ms = float(ar[(ar.num_gpus == 2) & (ar.message_size == 131072) & (ar.backend == "sglang_graph")]["latency"].median())
    assert float(mp.allreduce_time_s(32)) == pytest.approx(2 * 32 * row_ms * 1e-3, rel=1e-9)
    assert "custom_allreduce graph tp 2" in mp.label


def test_another_installed_version_is_named(monkeypatch):
    t = ot.OperatorTables(system="h100_sxm", framework="sglang", versions={"gemm_perf": "0.5.14"}, frames={},
                          package_version="0.13.0")
    assert "0.13.0 is installed" in t.version_note and ot.DATA_VERSION in t.version_note


def test_pre_releases_sort_in_their_own_order(tmp_path):
    """parse_version reads 1.3.0rc10 and 1.3.0rc20 as the release 1.3.0; the folder order must not
    decide which is newer."""
    for v in ("1.3.0rc20", "1.3.0", "1.3.0rc10", "1.2.0"):
        d = tmp_path / "sys" / "comm" / "trtllm" / v
        d.mkdir(parents=True)
        (d / "custom_allreduce_perf.parquet").write_bytes(b"")
    assert ot.collected_versions(tmp_path, "sys", "comm", "trtllm", "custom_allreduce_perf") == (
        "1.2.0", "1.3.0rc10", "1.3.0rc20", "1.3.0")
    assert ot.nearest_version(("1.3.0rc10", "1.3.0rc20"), "1.3.0rc10") == "1.3.0rc10"  # collected exactly


@needs_tables
def test_one_release_per_deployment_without_a_stack_version():
    """b200_sxm trtllm: the newest GEMM collection is 1.3.0rc20; moe_perf also has 1.3.0rc23, which holds
    one MoE dtype only (checked here), so every table is read at 1.3.0rc20."""
    t = ot.load_tables("b200_sxm", "trtllm")
    assert set(t.versions.values()) == {"1.3.0rc20"}
    rc23 = pd.read_parquet(ROOT / "b200_sxm" / "moe" / "trtllm" / "1.3.0rc23" / "moe_perf.parquet", columns=["moe_dtype"])
    assert set(rc23.moe_dtype) == {"w4a8_mxfp4_mxfp8"}
