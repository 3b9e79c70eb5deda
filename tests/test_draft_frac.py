"""A proposer that drafts in only a share f of a sequence's cycles (`DrafterConfig.draft_frac`): vLLM's
n-gram lookup that finds no match leaves the request without spec tokens, and it verifies its one token.

Expected values are worked by hand from the definition: a share f of the B verifying sequences verifies
K + 1 tokens and the rest one, so the verify pass's sums are the expectation over rows, the cycle emits
1 + f·(τ − 1) tokens a sequence, and f·B sequences pay the speculating host work. The serving simulator
draws which rows drafted, per row and iteration; its averages are checked against the closed form (a
Monte Carlo twin)."""
import numpy as np
import pytest

from specsim.calibration.load import read_load_sweeps
from specsim.calibration.load_fit import row_scenario
from specsim.cost.pricing import price_pass
from specsim.cost.shape import PassShape
from specsim.errors import SpecError
from specsim.serving.cost import ServingCost
from specsim.serving.mix import IterationMix
from specsim.serving.rates import run_one
from specsim.serving.setup import build_serving
from specsim.specs.models import load_model
from specsim.specs.scenario import Scenario
from specsim.specs.stacks import load_stack
from specsim.speculation.families import DrafterConfig
from specsim.speculation.operating_point import resolve
from specsim.speculation.predict import predict

F, TAU, K = 0.354, 2.031, 3  # yuqiz7's vLLM 0.28 n-gram counters at concurrency 1 (data/published/load_sweeps.csv)


def _op(f=F, b=16, ctx=300, **sections):
    base = dict(name="t", hardware="h100-sxm", target="qwen3-8b", stack="vllm", stack_version="0.28.0",
                method="prompt_lookup", k=K, tau=TAU, batch_size=b, context_len=ctx, cost_source="roofline")
    opts = {} if f is None else {"drafter_options": {"draft_frac": f}}
    return resolve(Scenario(**base, sections={**opts, **sections}, given=frozenset(base)))


def test_the_verify_pass_is_priced_at_the_expected_sums_by_hand():
    m = load_model("qwen3-8b")
    b, q, l = 16, K + 1, 300
    s = PassShape.drafting_share(m, batch_size=b, q_len=q, context_len=l, draft_frac=F)
    assert float(s.seqs) == b
    assert float(s.tokens) == pytest.approx(b * (F * q + (1 - F) * 1), rel=1e-12)
    assert float(s.logit_tokens) == pytest.approx(float(s.tokens), rel=1e-12)
    assert float(s.kv_read) == pytest.approx(b * (l + F * q + (1 - F)), rel=1e-12)
    assert float(s.pairs) == pytest.approx(b * (F * (q * l + q * (q + 1) / 2) + (1 - F) * (l + 1)), rel=1e-12)
    # f = 1 is the uniform pass
    one = PassShape.drafting_share(m, batch_size=b, q_len=q, context_len=l, draft_frac=1.0)
    uni = PassShape.uniform(m, batch_size=b, q_len=q, context_len=l)
    for field in ("seqs", "tokens", "logit_tokens", "kv_read", "pairs"):
        assert float(getattr(one, field)) == float(getattr(uni, field))


def test_the_cycle_emits_and_pays_for_the_share_that_drafted_by_hand():
    op = _op()
    vl = load_stack("vllm")
    c = predict(op).cycle
    b = op.batch_size
    assert float(c.tokens_per_cycle) == pytest.approx(1 + F * (TAU - 1), rel=1e-12)
    # host work of a cycle: the step, every sequence, the cycle's overhead, and the f·B that drafted K each
    h = vl.host
    host = (h.step_s + h.per_seq_s * b + vl.cycle_overhead_s + h.spec_per_seq_s * b * F
            + h.spec_per_draft_token_s * b * F * K)
    assert float(c.host_s) == pytest.approx(host, rel=1e-12)
    # vLLM 0.28 runs the n-gram proposer without its async scheduler: the cycle is device + host
    assert float(c.cycle_time_s) == pytest.approx(float(c.device_s) + float(c.host_s), rel=1e-12)
    # the verify pass: the target priced at the expected shape by the point's source
    dep = op.deployment
    verify = price_pass(op.target, dep, batch_size=b, q_len=K + 1, context_len=op.context_len, target=True,
                        draft_frac=F).time_s
    assert float(predict(op).verify_step.time_s) == pytest.approx(float(verify), rel=1e-12)


def test_draft_frac_one_is_the_proposer_that_always_drafts():
    a, b = predict(_op(f=1.0)).cycle, predict(_op(f=None)).cycle
    for field in ("cycle_time_s", "tokens_per_cycle", "speedup", "host_s", "device_s"):
        assert float(getattr(a, field)) == float(getattr(b, field))


def test_fewer_drafts_cost_less_and_emit_less():
    hi, lo = predict(_op(f=0.8)).cycle, predict(_op(f=0.3)).cycle
    assert float(lo.device_s) < float(hi.device_s) and float(lo.host_s) < float(hi.host_s)
    assert float(lo.tokens_per_cycle) < float(hi.tokens_per_cycle)


def test_the_serving_cost_averages_to_the_closed_form():
    """Monte Carlo twin: iterations whose rows drafted with probability f, priced by the serving cost,
    average to the analytical cycle. The closed form prices the expected pass, so it is the average
    only where the pass is linear over the token counts the draws reach: 16 rows verify 16..64 tokens,
    inside one GEMM tile of 64 rows (at 32 rows the counts straddle the tile's edge at 64, and the
    average of the realised passes is 3 % below the expected pass's price)."""
    op = _op(b=16)
    cost = ServingCost(op)
    rng = np.random.default_rng(7)
    b, ctx, n = op.batch_size, op.context_len, 3000
    times = []
    for _ in range(n):
        drafted = rng.random(b) < F
        q = np.where(drafted, K + 1, 1).astype(np.int64)
        dk = np.where(drafted, K, 0).astype(np.int64)
        mix = IterationMix(q, np.full(b, ctx, dtype=np.int64), q, dk, np.zeros(b, dtype=bool), 0,
                           speculating=True)
        times.append(cost(mix))
    c = predict(op).cycle
    assert np.mean(times) == pytest.approx(float(c.cycle_time_s), rel=0.002)


def test_a_cycle_where_nobody_drafted_is_still_a_cycle():
    """Batch 1, the proposer found nothing: the one token is verified, and the iteration still pays the
    cycle's overhead after the device (vLLM 0.28 runs n-gram launches without the async scheduler),
    where a plain iteration hides its host work behind the device."""
    op = _op(b=1)
    cost = ServingCost(op)
    one = lambda spec: IterationMix(np.ones(1, dtype=np.int64), np.full(1, 300, dtype=np.int64),  # noqa: E731
                                    np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64), np.zeros(1, dtype=bool), 0,
                                    speculating=spec)
    dev_c, host_c, _, ov_c = cost.parts(one(True))
    dev_p, host_p, _, ov_p = cost.parts(one(None))
    assert dev_c == dev_p and (ov_c, ov_p) == (False, True)
    assert host_c - host_p == pytest.approx(op.deployment.cycle_overhead_s, rel=1e-12)
    assert cost(one(True)) == pytest.approx(dev_c + host_c, rel=1e-12)
    assert cost(one(None)) == pytest.approx(max(dev_p, host_p), rel=1e-12)


def test_the_simulated_engine_drafts_for_the_share_and_emits_the_closed_form():
    wl = {"kind": "closed_loop", "n_users": 16, "n_requests": 32, "prompt": {"kind": "fixed", "tokens": 64},
          "output": {"kind": "fixed", "tokens": 400}}
    op = _op(b=16, workload=wl)
    run = run_one(build_serving(op), f"static_k{K}", None)
    dec = run.steps[(run.steps.n_prefill == 0) & (run.steps.n_running > 0)]
    rows = float(dec.n_running.sum())
    drafted = float(dec.n_spec.sum()) / rows
    se = np.sqrt(F * (1 - F) / rows)
    assert abs(drafted - F) < 4 * se, (drafted, F, se)
    # tokens a row emits a step: 1 + f·(τ − 1) on average (τ from the drawn acceptance of the rows that drafted)
    emitted = float(dec.n_emitted_tokens.sum()) / rows
    assert emitted == pytest.approx(1 + F * (TAU - 1), rel=0.03)
    # no row drafts past its match: drafts are K for the rows that drafted, none for the rest
    assert np.all(dec.n_draft_tokens.to_numpy() == K * dec.n_spec.to_numpy())


def test_the_same_seed_draws_the_same_rows():
    wl = {"kind": "closed_loop", "n_users": 8, "n_requests": 8, "prompt": {"kind": "fixed", "tokens": 32},
          "output": {"kind": "fixed", "tokens": 64}}
    setup = build_serving(_op(b=8, workload=wl))
    a, b = run_one(setup, f"static_k{K}", None), run_one(setup, f"static_k{K}", None)
    assert a.steps.n_spec.tolist() == b.steps.n_spec.tolist()


@pytest.mark.parametrize("kw, field", [
    (dict(method="eagle", draft_frac=0.5), "draft_frac"),
    (dict(method="prompt_lookup", draft_frac=0.0), "draft_frac"),
    (dict(method="prompt_lookup", draft_frac=1.5), "draft_frac"),
    (dict(method="prompt_lookup", draft_frac="half"), "draft_frac"),
])
def test_a_bad_draft_frac_is_refused_naming_the_field(kw, field):
    with pytest.raises(SpecError, match=f"'{field}'"):
        DrafterConfig(**kw)


HEADER = ("sweep,stack,stack_version,hardware,n_devices,target,target_dtype,method,drafter,k,tree_size,drafter_options,"
          "load_kind,load,prompt_tokens,output_tokens,draft_frac,context_len,speculative,tpot_s,e2e_latency_s,"
          "output_tokens_per_s,measured_speedup,tau,alpha,role,source\n")


def _sweep(tmp_path, cells, kind="concurrency"):
    rows = "".join(f"s,vllm,0.28.0,h100-sxm,1,smollm2-135m,,{'prompt_lookup' if spec else 'none'},,{3 if spec else ''},,,"
                   f"{kind},{load},16,6,{frac},{'100' if kind == 'batch' else ''},{spec},,,{1000 + load},,"
                   f"{'2.0' if spec else ''},,fit,a test\n" for load, spec, frac in cells)
    path = tmp_path / "sweep.csv"
    path.write_text(HEADER + rows, encoding="utf-8")
    return path


def test_a_load_sweep_row_gives_its_measured_draft_frac(tmp_path):
    sweep = read_load_sweeps(_sweep(tmp_path, [(8, 0, ""), (8, 1, "0.35"), (16, 0, ""), (16, 1, "")]))[0]
    by = {(r.load, r.speculative): r for r in sweep.rows}
    assert by[(8, True)].draft_frac == 0.35 and by[(16, True)].draft_frac is None
    sc = row_scenario(sweep, by[(8, True)], speculative=True, acceptance={"tau": 2.0})
    assert sc.sections["drafter_options"]["draft_frac"] == 0.35
    assert resolve(sc).drafter.draft_frac == 0.35
    assert "drafter_options" not in row_scenario(sweep, by[(16, True)], speculative=True).sections


@pytest.mark.parametrize("cells, kind, needle", [
    ([(8, 0, "0.5"), (8, 1, "")], "concurrency", "empty on a plain row"),
    ([(8, 0, ""), (8, 1, "0")], "concurrency", "in (0, 1]"),
    ([(8, 0, ""), (8, 1, "1.2")], "concurrency", "in (0, 1]"),
    ([(8, 0, ""), (8, 1, "x")], "concurrency", "in (0, 1]"),
    ([(8, 0, ""), (8, 1, "0.5")], "batch", "load_kind = batch"),
])
def test_a_bad_draft_frac_cell_is_refused_naming_line_and_column(tmp_path, cells, kind, needle):
    with pytest.raises(SpecError, match=r"line \d: column 'draft_frac'") as exc:
        read_load_sweeps(_sweep(tmp_path, cells, kind=kind))
    assert needle in str(exc.value)


def test_the_switch_off_workload_view_drafts_for_the_share_by_hand():
    """The workload view's speculating iteration with f·b of b rows drafting: between the iterations of
    the whole counts around f·b, weighted by the fraction, and emitting 1 + f·(τ − 1) tokens a row."""
    from specsim.analyses.switch_off import iteration_mix, workload_speedup
    from specsim.speculation.switch_off import WorkloadMix

    op = _op(b=10)
    cost = ServingCost(op)
    wm = WorkloadMix(mean_prompt_tokens=0.0, mean_output_tokens=200.0, decode_context_len=300.0)
    b, q = 10, K + 1
    plain = cost(iteration_mix(op, b=b, q=1, ctx=300, prefill_tokens=0, prompt_len=1, k=0, draft=False))
    lo, w = 3, F * b - 3  # 3.54 rows of 10 draft

    def spec(nd):
        return cost(iteration_mix(op, b=b, q=q, ctx=300, prefill_tokens=0, prompt_len=1, k=K, draft=True, n_draft=nd))
    want = (1 + F * (TAU - 1)) / ((1 - w) * spec(lo) + w * spec(lo + 1)) * plain
    assert workload_speedup(op, wm, b=b, k=K, cost=cost) == pytest.approx(want, rel=1e-12)
    # three of ten drafting: 3 rows of K + 1 and 7 of one, and still a cycle
    m = iteration_mix(op, b=b, q=q, ctx=300, prefill_tokens=0, prompt_len=1, k=K, draft=True, n_draft=3)
    assert m.q_lens.tolist() == [4, 4, 4] + [1] * 7 and m.draft_k.tolist() == [3, 3, 3] + [0] * 7 and m.speculating
