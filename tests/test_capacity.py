"""`specsim capacity` and `specsim compare`: replicas, GPUs and cost, checked by simulating the fleet
the answer names and one replica fewer.

The check re-simulates N and N − 1 replicas through the serving API directly (a round-robin fleet)
and recomputes the share of requests within the SLO from the per-request rows, independently of the
capacity search's own bookkeeping. A shortened window (the first 300 requests) keeps CI fast;
benchmarks/check_capacity.py runs the same check on the scenario's whole window.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from specsim.cli import main
from specsim.errors import SpecError
from specsim.analyses.capacity import capacity, cost_per_million
from specsim.analyses.gates import truncated
from specsim.cli.capacity import parse_duration_s
from specsim.serving import SLO, build_serving, simulate
from specsim.serving.fleet import FleetSpec
from specsim.serving.policies import DisableByBatchSize, Never, StaticK
from specsim.serving.router import RouterConfig
from specsim.speculation.operating_point import resolve_id


def test_durations_parse_with_their_units():
    assert parse_duration_s("50ms", "--slo-tpot") == pytest.approx(0.05)
    assert parse_duration_s("2s", "--slo-ttft") == pytest.approx(2.0)
    assert parse_duration_s("0.05", "--slo-tpot") == pytest.approx(0.05)
    for bad in ("fast", "-1", "0", "5 min"):
        with pytest.raises(SpecError, match="--slo-tpot"):
            parse_duration_s(bad, "--slo-tpot")


def test_cost_per_million_tokens_by_hand():
    # 2 replicas × 4 GPUs × $3/h = $24/h for 8 req/s × 260 tokens = 2080 tokens/s = 7.488 M tokens/h
    assert cost_per_million(2, 4, 3.0, 2080.0) == pytest.approx(24.0 / 7.488)
    assert cost_per_million(None, 4, 3.0, 2080.0) is None and cost_per_million(2, 4, None, 2080.0) is None


def attainment(op, setup, policy, rate, n, slo):
    """The share of requests within the SLO on n round-robin replicas, from the request rows."""
    fleet = FleetSpec(n_replicas=n, router=RouterConfig(kind="round_robin"))
    res = simulate(setup.workload_at(rate), config=setup.config, cost=setup.cost, policy=policy,
                   acceptance=setup.acceptance, seed=setup.seed, slo=slo, tree_size=setup.tree_size,
                   acceptance_factor=setup.acceptance_factor, fleet=fleet, drafter_cache=setup.drafter_cache)
    r = res.requests
    assert len(r) == setup.workload.n_requests  # every request went to some replica
    done = (r["status"] == "done").to_numpy()
    ok = done & (r["ttft_s"].to_numpy() <= slo.ttft_s) & (
        (r["output_tokens"].to_numpy() == 1) | (r["tpot_s"].to_numpy() <= slo.tpot_s))
    return float(np.mean(ok))


@pytest.mark.slow
@pytest.mark.parametrize("rate", [8.0, 16.0, 32.0])
def test_capacity_names_the_fewest_replicas_that_meet_the_slo(rate):
    op = resolve_id("llama-70b-h100-chat")
    plan = capacity(op, rate_per_s=rate, n_requests=300, slo_tpot_s=0.05, slo_ttft_s=2.0)
    setup = truncated(build_serving(op), 300)
    slo = SLO(ttft_s=2.0, tpot_s=0.05)
    for answer in (plan.without, plan.with_speculation):
        n = answer.replicas
        assert n is not None and n >= 2, (rate, answer.to_dict())
        policy = (Never() if not answer.speculative else
                  DisableByBatchSize(k=op.k, threshold=plan.gate) if plan.gate is not None else StaticK(k=op.k))
        at_n = attainment(op, setup, policy, rate, n, slo)
        below = attainment(op, setup, policy, rate, n - 1, slo)
        assert at_n >= 0.9 > below, (rate, answer.speculative, n, at_n, below)
        assert answer.gpus == n * 4
        # the price: the cited default for h100-sxm, $3.00 a GPU-hour
        assert plan.price_usd_per_device_hour == 3.0 and "mercatus" in plan.price_source
        tokens_per_s = rate * float(np.mean(setup.workload_at(rate).output_tokens))
        assert answer.cost_per_million_usd == pytest.approx(n * 4 * 3.0 / (tokens_per_s * 3600) * 1e6)


def test_capacity_cli_refuses_what_it_cannot_answer(capsys):
    assert main(["capacity", "seed-70b-hbm", "--rate", "1"]) == 2
    assert "[workload]" in capsys.readouterr().err
    assert main(["capacity", "llama-70b-h100-chat", "--rate", "0"]) == 2
    assert main(["capacity", "llama-70b-h100-chat", "--rate", "4", "--slo-tpot", "soon"]) == 2
    assert "--slo-tpot" in capsys.readouterr().err


def test_capacity_cli_with_a_given_price(capsys):
    assert main(["capacity", "llama-70b-h100-chat", "--rate", "2", "--requests", "60", "--gpu-hour-usd", "2",
                 "--json", "--quiet"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["price_source"] == "--gpu-hour-usd" and d["price_usd_per_device_hour"] == 2.0
    w = d["without_speculation"]
    assert w["replicas"] >= 1 and w["gpus"] == 4 * w["replicas"]


def test_compare_puts_two_scenarios_side_by_side(capsys):
    assert main(["compare", "seed-70b-hbm", "seed-7b-ddr5", "--quiet"]) == 0
    text = capsys.readouterr().out
    for row in ("verdict", "speedup at batch 1", "memory a device (GB)", "largest batch plain / speculating"):
        assert row in text
    assert main(["compare", "seed-70b-hbm", "llama-70b-h100-chat", "--rate", "2", "--requests", "60", "--json",
                 "--quiet"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["capacity"][0] is None and d["capacity"][1]["without_speculation"]["replicas"] >= 1
    rows = {r["quantity"]: r for r in d["rows"]}
    assert rows["replicas at 2 req/s without / with speculation"]["seed-70b-hbm (A)"].startswith("n/a")
