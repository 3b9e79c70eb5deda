"""The one price list (`cost.pricing`): every pass on every path goes through one seam, the source is
chosen once per model and deployment and named, and each source's fast twin (the serving simulator's
hot path) agrees with its exact price."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import specsim
from specsim.cost.deployment import Deployment
from specsim.cost.pricing import MeasuredSource, RooflineSource, price_pass, source_for
from specsim.cost.shape import PassShape
from specsim.errors import SpecError
from specsim.serving.cost import FastStep
from specsim.specs.hardware import load_hardware
from specsim.specs.models import load_model
from specsim.specs.operator_tables import package_root
from specsim.specs.stacks import load_stack

PACKAGE = Path(specsim.__file__).parent
# what computes a pass's time (cost.roofline, cost.kernels): only cost/ itself and the fitters may call them
PASS_TIME_NAMES = {"step_cost", "mixed_step_cost", "token_time_s", "logits_time_s", "attention_time_s",
                   "overhead_time_s", "pass_cost", "weights_time_s", "lm_head_time_s", "activations_time_s",
                   "gemm_time_s", "grouped_gemm_time_s", "operator_time_s"}
# the fitters fit the roofline's own parameters (stack efficiencies, [kernels] curves, the machine's GEMM
# floors), so they price through the roofline by design, never through a source chosen for a deployment
FITTERS = {"calibration/fit.py", "calibration/profiles.py", "calibration/machine.py"}
needs_tables = pytest.mark.skipif(package_root() is None, reason="aiconfigurator-core's tables are not installed")


def _pass_time_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every import of a pass-time function from cost.roofline / cost.kernels and every
    attribute access like roofline.step_cost."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[-1] in ("roofline", "kernels"):
            out += [(node.lineno, a.name) for a in node.names if a.name in PASS_TIME_NAMES]
        elif isinstance(node, ast.Attribute) and node.attr in PASS_TIME_NAMES and isinstance(node.value, ast.Name) \
                and node.value.id in ("roofline", "rf", "kernels"):
            out.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return out


def test_no_module_outside_the_seam_computes_a_pass_time():
    """Outside specsim/cost/ (and the named fitters) nothing imports or calls the roofline's or the kernel
    curves' pass-time functions: a pass is priced through cost.pricing, whatever its source."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("cost/") or rel in FITTERS:
            continue
        for line, name in _pass_time_uses(ast.parse(path.read_text(), filename=str(path))):
            offenders.append(f"{rel}:{line} {name}")
    assert offenders == [], "priced outside cost.pricing: " + "; ".join(offenders)


def test_the_seam_check_catches_a_direct_call():
    """The scan above is not vacuous: code that imports step_cost and calls roofline.mixed_step_cost is caught."""
    code = "from ..cost.roofline import step_cost, kv_shard_frac\nfrom ..cost import roofline\nroofline.mixed_step_cost(m)\n"
    assert [n for _, n in _pass_time_uses(ast.parse(code))] == ["step_cost", "roofline.mixed_step_cost"]


@settings(max_examples=60, deadline=None)
@given(b=st.integers(1, 64), m=st.integers(1, 16), l=st.integers(0, 5000))
def test_a_uniform_shape_is_a_mix_of_equal_rows(b, m, l):
    """PassShape.uniform(B, M, L) and PassShape.of_mix of B rows of (M, L) give the same sums (two
    ways of writing S, T, G, R and P; by hand: T = B·M, R = B(L + M), P = B(M·L + M(M + 1)/2))."""
    model = load_model("llama-3.1-8b")
    u = PassShape.uniform(model, batch_size=b, q_len=m, context_len=l)
    x = PassShape.of_mix(model, q_lens=np.full(b, m), context_lens=np.full(b, l))
    for f in ("seqs", "tokens", "logit_tokens", "kv_read", "pairs"):
        assert float(getattr(u, f)) == float(getattr(x, f)), f
    assert float(u.tokens) == b * m and float(u.kv_read) == b * (l + m) and float(u.pairs) == b * (m * l + m * (m + 1) / 2)


def test_a_mix_keeps_its_prompt_chunks_apart():
    """Two decode rows and one prompt chunk of 512 after 256 cached: the prefill sums are the chunk's alone
    (by hand: T_p = 512, R_p = 256 + 512, P_p = 512·256 + 512·513/2)."""
    model = load_model("llama-3.1-8b")
    x = PassShape.of_mix(model, q_lens=[1, 1, 512], context_lens=[100, 200, 256], is_prefill=[False, False, True])
    assert (float(x.prefill_seqs), float(x.prefill_tokens), float(x.prefill_kv_read), float(x.prefill_pairs)) == \
        (1.0, 512.0, 768.0, 512 * 256 + 512 * 513 / 2)
    assert float(x.tokens) == 514 and float(x.seqs) == 3


def test_the_roofline_source_is_the_roofline():
    """On a part without tables the source is the roofline and says so; the seed's idealised part has no
    fitted curves, so its label is the plain roofline."""
    dep = Deployment.from_stack(load_hardware("seed-hbm-2tbs"), None, cost_source="auto")
    src = source_for(load_model("seed-70b"), dep, target=True)
    assert isinstance(src, RooflineSource) and src.label == "roofline"


def test_measured_is_refused_where_no_tables_exist():
    """--cost-source measured on a CPU part, or without a stack, is refused in one line naming why."""
    with pytest.raises(SpecError, match="cost_source.*names no measured operator tables"):
        Deployment.from_stack(load_hardware("ddr5-5600-2ch"), load_stack("llama.cpp"), cost_source="measured")
    with pytest.raises(SpecError, match="cost_source.*no serving stack"):
        Deployment.from_stack(load_hardware("h100-sxm"), None, cost_source="measured")
    with pytest.raises(SpecError, match="cost_source"):
        Deployment.from_stack(load_hardware("h100-sxm"), None, cost_source="tables")


@needs_tables
def test_auto_picks_the_tables_on_a_covered_part_and_stack_and_names_them():
    dep = Deployment.from_stack(load_hardware("h100-sxm"), load_stack("vllm"), cost_source="auto")
    target = load_model("llama-3.1-8b")
    src = source_for(target, dep, target=True)
    assert isinstance(src, MeasuredSource) and src.label.startswith("aiconfigurator-core")
    c = price_pass(target, dep, batch_size=4, q_len=5, context_len=1000, target=True)
    assert c.source == src.label
    off = Deployment.from_stack(load_hardware("h100-sxm"), load_stack("vllm"), cost_source="roofline")
    assert isinstance(source_for(target, off, target=True), RooflineSource)


@needs_tables
@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(1, 9), st.integers(0, 40_000), st.booleans()), min_size=1, max_size=12))
def test_the_measured_fast_twin_agrees_with_its_exact_price(rows):
    """The simulator's hot path (FastStep over a MeasuredSource: tabulated token and logit times, the
    decode attention grid read in plain floats) gives the source's own vectorised price on random mixes
    of decode rows and prompt chunks, to 1e-9."""
    dep = Deployment.from_stack(load_hardware("h100-sxm"), load_stack("sglang"), cost_source="measured")
    fast = FastStep(source_for(load_model("llama-3.1-8b"), dep, target=True))
    assert fast.ok
    q = [r[0] if not r[2] else 64 * r[0] for r in rows]
    ctx = [r[1] for r in rows]
    pf = [r[2] for r in rows]
    exact = fast.exact(q, ctx, q, pf)
    assert fast(q, ctx, q, pf) == pytest.approx(exact, rel=1e-9)


@needs_tables
def test_a_verify_reads_the_tables_as_decode_queries_at_the_scorer_s_kv_length():
    """Llama-3.1-8B on the H100 SXM tables (32 query heads on 8 KV heads: g = 4), a verify of M = 4 tokens for
    B = 2 sequences after L = 1020 cached. The tables measure one query a sequence. A multi-query scorer
    (vLLM V1) packs a sequence's M·g = 16 query rows into one 128-row tile that reads its cache once, as a
    decode query does: the table at B = 2 queries, at the KV length a sequence holds, L + M = 1024. A tree
    of M = 64 nodes fills 64·4 = 256 rows, two tiles, each reading the cache: 2·2 = 4 queries at
    L + M = 1084. vLLM V0's batch-expansion scorer runs B·M = 8 one-token sequences at their mean own
    length, by hand P/T = 2·(4·1020 + 10)/8 = 1022.5. The table is read through
    MeasuredPass.attention_time_s, which tests/test_operator_tables.py checks against the parquet rows."""
    from specsim.cost.pricing import measured_pass

    hw = load_hardware("h100-sxm")
    target = load_model("llama-3.1-8b")
    for m, stack, queries, kv in ((4, "vllm", 2.0, 1024.0), (64, "vllm", 4.0, 1084.0), (4, "vllm-v0", 8.0, 1022.5)):
        shape = PassShape.uniform(target, batch_size=2, q_len=m, context_len=1020)
        dep = Deployment.from_stack(hw, load_stack(stack), cost_source="measured")
        mp = measured_pass(target, dep)
        src = source_for(target, dep, target=True)
        got = float(src.price(shape).attention.time_s)
        assert got == pytest.approx(float(mp.attention_time_s(queries, kv)), rel=1e-12), (m, stack)
        # the serving simulator's scalar lookup reads the same cell
        s, t, r, p = (float(x) for x in (shape.seqs, shape.tokens, shape.kv_read, shape.pairs))
        assert src.attention_s(s, t, r, p) == pytest.approx(got, rel=1e-9), (m, stack)
    # a plain step (M = 1) is one query a sequence under every scorer
    plain = PassShape.uniform(target, batch_size=2, q_len=1, context_len=1020)
    dep = Deployment.from_stack(hw, load_stack("vllm"), cost_source="measured")
    assert float(source_for(target, dep, target=True).price(plain).attention.time_s) == pytest.approx(
        float(measured_pass(target, dep).attention_time_s(2.0, 1021.0)), rel=1e-12)


def test_an_expanded_verify_on_the_roofline_reads_every_query_s_cache():
    """On the roofline an expanded verify's decode rows read their pairs: B = 2, M = 4, L = 1020 reads
    P = 2·(4·1020 + 10) = 8,180 KV tokens instead of the shared kernel's R = 2·1024 (by hand); the plain
    step (M = 1: P = R) is the same either way."""
    hw = load_hardware("a100-sxm-80gb")
    target = load_model("llama-3.1-8b")
    shared = Deployment.from_stack(hw, load_stack("vllm"), cost_source="roofline")
    expanded = Deployment.from_stack(hw, load_stack("vllm-v0"), cost_source="roofline")
    v_shared = price_pass(target, shared, batch_size=2, q_len=4, context_len=1020, target=True)
    v_exp = price_pass(target, expanded, batch_size=2, q_len=4, context_len=1020, target=True)
    per_token = float(v_shared.attention.bytes) / 2048
    assert float(v_exp.attention.bytes) == pytest.approx(8180 * per_token, rel=1e-12)
    p_shared = price_pass(target, shared, batch_size=2, q_len=1, context_len=1020, target=True)
    p_exp = price_pass(target, expanded, batch_size=2, q_len=1, context_len=1020, target=True)
    assert float(p_exp.attention.time_s) == pytest.approx(float(p_shared.attention.time_s), rel=1e-12)


def _vllm_raw() -> dict:
    from specsim.specs.catalog import read_toml, resolve

    return read_toml(resolve("stacks", "vllm"))


def _stack_with_measured(cycle_us: float):
    from specsim.specs.stacks import stack_from_dict

    raw = _vllm_raw()
    raw["measured"] = {"cycle_overhead_us": cycle_us}
    raw["sources"]["measured"] = {"cycle_overhead_us": "a test: fitted with the tables pricing the target"}
    return stack_from_dict(raw, where="test stack")


def test_a_stack_s_measured_figures_apply_where_the_tables_price_the_target_only():
    """[measured] cycle_overhead_us = 123 replaces the top-level 991 where the tables price the target
    (Llama-3.1-8B on the H100 with auto) and nowhere else (the same point on the roofline, or a part
    without tables); the point says which figures it used."""
    from specsim.specs.scenario import Scenario
    from specsim.speculation.operating_point import resolve

    stack = _stack_with_measured(123.0)
    sc = Scenario(hardware="h100-sxm", target="llama-3.1-8b", drafter="llama-3.2-1b", stack="vllm", alpha=0.7)
    on = resolve(sc, stack_profile=stack)
    off = resolve(sc, stack_profile=stack, cost_source="roofline")
    if package_root() is not None:
        assert on.deployment.cycle_overhead_s == pytest.approx(123e-6) and "[measured]" in on.sources["fitted figures"]
    assert off.deployment.cycle_overhead_s == pytest.approx(991e-6) and "fitted figures" not in off.sources


def test_unknown_or_uncited_measured_figures_are_refused():
    from specsim.specs.stacks import stack_from_dict

    raw = _vllm_raw()
    raw["measured"] = {"cycle_overhead_us": 100.0}
    with pytest.raises(SpecError, match="sources.measured.cycle_overhead_us"):
        stack_from_dict(raw, where="t")
    raw["sources"]["measured"] = {"cycle_overhead_us": "x"}
    raw["measured"] = {"host_step_us": 1.0}
    with pytest.raises(SpecError, match="host_step_us"):
        stack_from_dict(raw, where="t")
    raw["measured"] = {"cycle_overhead_us": -1.0}
    with pytest.raises(SpecError, match="cycle_overhead_us"):
        stack_from_dict(raw, where="t")


@pytest.mark.parametrize("field, value, expected", [
    ("cost_source", "tables", "one of"), ("cost_source", "", "one of"),
    ("kv_cache_dtype", "fp7", "a KV-cache dtype"), ("kv_cache_dtype", 8, "a KV-cache dtype"),
])
def test_a_scenario_refuses_a_bad_cost_source_or_kv_dtype_naming_it(field, value, expected):
    from specsim.specs.scenario import Scenario

    with pytest.raises(SpecError, match=f"{field}.*{expected}"):
        Scenario(**{field: value})


def test_a_scenario_s_kv_cache_dtype_reaches_the_target_and_its_pass():
    """kv_cache_dtype = fp8 halves the KV bytes a token (by hand: 1 byte an element instead of 2) and, on the
    H100 tables, the attention is read from the fp8 rows (the source's label says so)."""
    from specsim.specs.scenario import Scenario
    from specsim.speculation.operating_point import resolve

    base = resolve(Scenario(hardware="h100-sxm", target="llama-3.1-8b", stack="sglang", method="none", k=0))
    fp8 = resolve(Scenario(hardware="h100-sxm", target="llama-3.1-8b", stack="sglang", method="none", k=0,
                           kv_cache_dtype="fp8"))
    assert fp8.target.kv_cache_dtype == "fp8"
    assert fp8.target.kv_bytes_per_token == pytest.approx(base.target.kv_bytes_per_token / 2, rel=1e-12)
    if package_root() is not None:
        assert "fp8" in source_for(fp8.target, fp8.deployment, target=True).label


def test_a_calibration_regime_refuses_an_unknown_priced_by():
    from specsim.specs.regimes import entry_from_dict

    fields = {"property": "calibration", "versions": "*", "status": "fitted", "source": "t", "sweep": "s", "file": "f",
              "command": "c", "load_kind": "concurrency", "load_min": 1, "load_max": 2, "n_fit_rows": 1,
              "fit_error_frac": 0.1, "device_scale": 1.0, "priced_by": "tables"}
    with pytest.raises(SpecError, match="priced_by.*roofline, measured"):
        entry_from_dict(fields, where="t")
