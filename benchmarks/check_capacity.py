"""Check `specsim capacity` on a scenario's whole window: at each rate, with and without speculation,
simulate the replica count it names and one fewer, and print whether each meets the SLO.

The re-simulation goes through the serving API directly (a round-robin fleet of N replicas) and the
share of requests within the SLO is recomputed from the per-request rows, so the table checks the
capacity search rather than repeating its numbers. tests/test_capacity.py runs the same check on the
first 300 requests in CI; this script is the full-window version (about a minute on two cores).

    python benchmarks/check_capacity.py [--scenario llama-70b-h100-chat] [--rates 8,16,32] [--requests N]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from specsim.analyses.capacity import capacity
from specsim.analyses.gates import truncated
from specsim.serving import SLO, build_serving, simulate
from specsim.serving.fleet import FleetSpec
from specsim.serving.policies import DisableByBatchSize, Never, StaticK
from specsim.serving.router import RouterConfig
from specsim.speculation.operating_point import resolve_id


def share_within_slo(setup, policy, rate, n, slo) -> float:
    fleet = FleetSpec(n_replicas=n, router=RouterConfig(kind="round_robin"))
    res = simulate(setup.workload_at(rate), config=setup.config, cost=setup.cost, policy=policy,
                   acceptance=setup.acceptance, seed=setup.seed, slo=slo, tree_size=setup.tree_size,
                   acceptance_factor=setup.acceptance_factor, fleet=fleet, drafter_cache=setup.drafter_cache)
    r = res.requests
    ok = (r["status"] == "done").to_numpy() & (r["ttft_s"].to_numpy() <= slo.ttft_s) & (
        (r["output_tokens"].to_numpy() == 1) | (r["tpot_s"].to_numpy() <= slo.tpot_s))
    return float(np.mean(ok))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="llama-70b-h100-chat")
    ap.add_argument("--rates", default="8,16,32")
    ap.add_argument("--requests", type=int, default=None, help="first N requests only (default: the whole window)")
    args = ap.parse_args()
    op = resolve_id(args.scenario)
    setup = truncated(build_serving(op), args.requests)
    slo = setup.slo
    print(f"{op.name}: {setup.workload.n_requests} requests ({setup.workload.source}); SLO TTFT ≤ {slo.ttft_s:g} s, "
          f"TPOT ≤ {slo.tpot_s * 1e3:g} ms for ≥ 90 % of requests; replicas of {op.deployment.n_devices}× "
          f"{op.hardware.id}, round robin")
    print(f"{'rate/s':>6}  {'speculation':<24} {'N':>3} {'GPUs':>4} {'$/M tok':>8} {'within SLO at N':>16} "
          f"{'at N-1':>8}  {'check':<6} {'s':>5}")
    failures = 0
    for rate in [float(r) for r in args.rates.split(",")]:
        t0 = time.perf_counter()
        plan = capacity(op, rate_per_s=rate, n_requests=args.requests)
        for a in (plan.without, plan.with_speculation):
            if a is None:
                continue
            n = a.replicas
            policy = (Never() if not a.speculative else
                      DisableByBatchSize(k=op.k, threshold=plan.gate) if plan.gate is not None else StaticK(k=op.k))
            at_n = share_within_slo(setup, policy, rate, n, slo) if n else float("nan")
            below = share_within_slo(setup, policy, rate, n - 1, slo) if n and n > 1 else float("nan")
            ok = n is not None and at_n >= 0.9 and (n == 1 or below < 0.9)
            failures += not ok
            name = "with (" + a.policy + ")" if a.speculative else "without"
            cost = "-" if a.cost_per_million_usd is None else f"{a.cost_per_million_usd:.3f}"
            print(f"{rate:>6g}  {name:<24} {n or '-':>3} {a.gpus or '-':>4} {cost:>8} {100 * at_n:>15.1f}% "
                  f"{'-' if n == 1 else f'{100 * below:.1f}%':>8}  {'ok' if ok else 'FAIL':<6} "
                  f"{time.perf_counter() - t0:>5.1f}")
    print(f"price: {plan.price_source}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
