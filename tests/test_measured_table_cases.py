"""Issue 37's measured-table cases, each refused in one line naming the field, the value and the rule,
or handled, within 10 s: the A100 attention layout without window_size, operator_tables naming no
system, and shapes past the measured grid (a large all-reduce message, tp 16/32, hidden 65,536, a count
whose product overflowed). Expected values are read from the parquet rows with pandas/pyarrow here and
worked by hand; none is copied from specsim's output."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import pytest

from specsim.cost import measured
from specsim.errors import SpecError
from specsim.specs import operator_tables as ot
from specsim.specs.hardware import list_hardware, load_hardware
from specsim.specs.models import load_model

ROOT = ot.package_root()
needs_tables = pytest.mark.skipif(ROOT is None, reason="aiconfigurator-core is not installed (no wheel here)")
HARDWARE = Path(__file__).resolve().parents[1] / "hardware"


def _one_line(exc: SpecError, *words: str) -> None:
    msg = str(exc)
    assert "\n" not in msg, msg
    for w in words:
        assert w in msg, (w, msg)


# ---- the A100 attention layout, and every layout the pinned data ships --------------------------------

@needs_tables
@pytest.mark.parametrize("framework", ["vllm", "sglang"])
def test_a100_attention_without_window_size_reads_as_full_attention(framework):
    """a100_sxm's vllm 0.14.0 and sglang 0.5.10 attention tables have no window_size column (checked
    here from the file's schema); they measured full attention, so the column reads as 0 and
    Llama-3.1-8B (32 heads, 8 KV heads) is priced from them."""
    import pyarrow.parquet as pq
    t0 = time.perf_counter()
    tables = ot.load_tables("a100_sxm", framework)
    path = ROOT / "a100_sxm" / "attention" / framework / tables.versions["generation_attention_perf"]
    assert "window_size" not in pq.read_schema(path / "generation_attention_perf.parquet").names
    gen = tables.frames["generation_attention_perf"]
    assert (gen["window_size"] == 0).all()
    mp = measured.build(tables, load_model("llama-3.1-8b"), 1)
    assert mp is not None and f"a100_sxm {framework}" in mp.label
    assert np.isfinite(mp.attention_time_s(8, 1023)) and float(mp.attention_time_s(8, 1023)) > 0
    assert time.perf_counter() - t0 < 10.0


@needs_tables
def test_every_collected_layout_has_what_specsim_reads():
    """Every gemm, attention, all-reduce and moe table of every system in the installed data: the
    columns specsim reads are there, or have a documented default (OPTIONAL)."""
    import pyarrow.parquet as pq
    seen = 0
    for table, (op, cols) in ot.TABLES.items():
        for path in ROOT.glob(f"*/{op}/*/*/{table}.parquet"):
            names = set(pq.read_schema(path).names)
            missing = set(cols) - names - set(ot.OPTIONAL.get(table, {}))
            assert not missing, f"{path}: {missing}"
            seen += 1
    assert seen > 150  # 0.12.0 ships 196 of these files; a glob that matched nothing must not pass


@needs_tables
def test_systems_are_the_folders_with_tables():
    with_tables = {p.name for p in ROOT.iterdir() if p.is_dir() and any(p.glob("*/*/*/*.parquet"))}
    empty = {p.name for p in ROOT.iterdir() if p.is_dir()} - with_tables
    assert set(ot.SYSTEMS) == with_tables
    assert set(ot.EMPTY_SYSTEMS) == empty


# ---- operator_tables in a hardware file ---------------------------------------------------------------

def _write(tmp_path, src: str, old: str, new: str) -> Path:
    text = (HARDWARE / src).read_text()
    assert old in text
    p = tmp_path / src
    p.write_text(text.replace(old, new, 1))
    return p


@pytest.mark.parametrize("value", ["nope", "", "../h100_sxm", "/usr/share/h100_sxm", "H100_SXM", "h100_pcie"])
def test_operator_tables_must_name_a_system_with_tables(tmp_path, value):
    p = _write(tmp_path, "h100-sxm.toml", 'operator_tables = "h100_sxm"', f'operator_tables = "{value}"')
    with pytest.raises(SpecError) as e:
        load_hardware(p)
    _one_line(e.value, "operator_tables", repr(value), "h100_sxm", ot.DATA_VERSION)


def test_operator_tables_must_be_a_string(tmp_path):
    p = _write(tmp_path, "h100-sxm.toml", 'operator_tables = "h100_sxm"', "operator_tables = 3")
    with pytest.raises(SpecError) as e:
        load_hardware(p)
    _one_line(e.value, "operator_tables", "3")


def test_a_cpu_part_naming_a_gpu_system_is_refused(tmp_path):
    p = _write(tmp_path, "ddr5-5600-2ch.toml", 'kind = "cpu"\n',
               'kind = "cpu"\noperator_tables = "h100_sxm"\n')
    with pytest.raises(SpecError) as e:
        load_hardware(p)
    _one_line(e.value, "operator_tables", "'h100_sxm'", "kind = 'cpu'", "gpu")


def test_the_shipped_profiles_still_load():
    named = {hw.id: hw.operator_tables for hw in list_hardware() if hw.operator_tables}
    assert named and set(named.values()) <= set(ot.SYSTEMS)


# ---- past the measured grid ---------------------------------------------------------------------------

@needs_tables
def test_an_all_reduce_past_the_largest_message_is_continued_and_noted():
    """tp 2, 200,000 tokens × 4096 = 819,200,000 bf16 elements, past the largest measured message
    (2**29 = 536,870,912): continued along the line through the last two rows, and noted."""
    tables = ot.load_tables("h100_sxm", "sglang")
    mp = measured.build(tables, load_model("llama-3.1-8b"), 2)
    ar = tables.frames["custom_allreduce_perf"]
    g = ar[(ar.num_gpus == 2) & (ar.backend == "sglang_graph")].groupby("message_size")["latency"].median()
    (x0, y0), (x1, y1) = (g.index[-2], g.iloc[-2]), (g.index[-1], g.iloc[-1])
    assert x1 == 2 ** 29
    e = 200_000 * 4096
    by_hand_ms = y1 + (y1 - y0) / (x1 - x0) * (e - x1)
    assert float(mp.allreduce_time_s(200_000)) == pytest.approx(2 * 32 * by_hand_ms * 1e-3, rel=1e-9)
    notes = mp.range_notes(n_tokens=200_000, n_queries=1, kv_len=100)
    assert any("custom_allreduce" in n and "past the measured" in n for n in notes)


@needs_tables
@pytest.mark.parametrize("tp", [16, 32])
def test_tp_beyond_the_measured_groups_names_the_all_reduce(tp):
    """Llama-2-70B has 64 heads, so tp 16 and 32 divide them; H100's sglang all-reduce table measured
    groups of 2, 4, 8 only: the reason names that table and the groups, not heads or head_dim."""
    tables = ot.load_tables("h100_sxm", "sglang")
    model = load_model("llama-2-70b")
    assert measured.build(tables, model, tp) is None
    why = measured.covered(model, tables, tp=tp)
    assert f"no tp {tp} group" in why and "2, 4, 8" in why and "custom_allreduce_perf" in why
    assert "head_dim" not in why
    assert measured.covered(model, tables, tp=8) == ""


@needs_tables
def test_hidden_65536_is_priced_with_the_skipped_corner_filled():
    """Hidden 65,536 puts the LM head (n = 128256 / 2 = 64128 per column block, k = 65536) next to
    the one (n, k) = (65536, 65536) cell the collector skipped. The cell is filled from its three
    measured neighbours at the same m in proportion to n·k, then bilinear, worked here at m = 1."""
    t0 = time.perf_counter()
    tables = ot.load_tables("h100_sxm", "sglang")
    model = dataclasses.replace(load_model("llama-3.1-8b"), hidden_size=65536)
    mp = measured.build(tables, model, 1)
    assert mp is not None
    assert any("(65536, 65536) not measured" in n for n in mp.notes)
    g = tables.frames["gemm_perf"]
    src = g[g.gemm_dtype == "bfloat16"]["kernel_source"].mode().iloc[0]
    g = g[(g.gemm_dtype == "bfloat16") & (g.kernel_source == src) & (g.m == 1)].set_index(["n", "k"])["latency"]
    assert (65536, 65536) not in g.index
    lo, hi = 51200, 65536
    per_nk = np.mean([g[(lo, lo)] / (lo * lo), g[(hi, lo)] / (hi * lo), g[(lo, hi)] / (lo * hi)])
    corner = per_nk * hi * hi
    u = (128256 / 2 - lo) / (hi - lo)
    head_ms = 2 * ((1 - u) * g[(lo, hi)] + u * corner)  # k = 65536 is the grid's last k: v = 1
    assert float(mp.head_time_s(1)) == pytest.approx(head_ms * 1e-3, rel=1e-9)
    assert np.all(np.isfinite(mp.layers_time_s(np.array([1, 64, 4096]))))
    assert time.perf_counter() - t0 < 10.0


@needs_tables
@pytest.mark.parametrize("field,value", [("n_tokens", np.inf), ("n_tokens", 1e300 * 1e300), ("kv_len", 2.0 ** 60),
                                         ("n_queries", float(2 ** 53 + 2))])
def test_an_overflowed_count_is_refused_in_one_line(field, value):
    """B × M of two finite but huge numbers is inf (or past 2**53, where float64 stops counting
    exactly); refused naming the count, not priced as inf."""
    mp = measured.build(ot.load_tables("h100_sxm", "sglang"), load_model("llama-3.1-8b"), 1)
    kw = {"n_tokens": 1, "n_queries": 1, "kv_len": 100, field: value}
    with pytest.raises(SpecError) as e:
        mp.range_notes(**kw)
    _one_line(e.value, field, "2**53")
    assert mp.range_notes(n_tokens=2.0 ** 53, n_queries=1, kv_len=100)  # the bound itself: priced, and noted


def test_the_cli_refuses_a_bad_operator_tables_in_one_line_with_status_2(tmp_path, capsys):
    """Through the CLI boundary: one line on stderr naming the file, the field and the value; exit 2."""
    from specsim.cli import main
    p = _write(tmp_path, "h100-sxm.toml", 'operator_tables = "h100_sxm"', 'operator_tables = "../nope"')
    status = main(["predict", "--hardware", str(p), "--target", "llama-3.1-8b", "--drafter", "llama-3.2-1b"])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1 and str(p) in err and "operator_tables" in err and "'../nope'" in err


# ---- the same cases at the pricing seam (cost.pricing.source_for, Deployment.from_stack) ---------------

@needs_tables
@pytest.mark.parametrize("stack", ["vllm", "sglang"])
def test_the_a100_profile_deploys_on_its_own_tables(stack):
    """Issue 37's first case as a planner meets it: the shipped A100 profile with vLLM or SGLang and the
    measured source required; it deploys, and Llama-3.1-8B's passes come from the A100 tables."""
    from specsim.cost.deployment import Deployment
    from specsim.cost.pricing import source_for
    from specsim.specs.stacks import load_stack
    t0 = time.perf_counter()
    dep = Deployment.from_stack(load_hardware("a100-sxm-80gb"), load_stack(stack), cost_source="measured")
    assert dep.operator_tables is not None and dep.operator_tables.system == "a100_sxm"
    assert source_for(load_model("llama-3.1-8b"), dep).label.startswith("aiconfigurator-core")
    assert time.perf_counter() - t0 < 10.0


@needs_tables
@pytest.mark.parametrize("n_devices", [16, 32])
def test_the_roofline_fallback_at_tp_16_names_the_all_reduce(n_devices):
    from specsim.cost.deployment import Deployment
    from specsim.cost.pricing import source_for
    from specsim.specs.stacks import load_stack
    dep = Deployment.from_stack(load_hardware("h100-sxm"), load_stack("sglang"), n_devices=n_devices)
    label = source_for(load_model("llama-2-70b"), dep).label
    assert label.startswith("roofline") and f"no tp {n_devices} group" in label and "2, 4, 8" in label
    assert "head_dim" not in label
