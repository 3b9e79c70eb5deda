"""The batch-size gate's best threshold with and without the drafter's own work.

For scenarios/llama-70b-h100-chat.toml (its 10-minute window of the Azure conversation trace, at each
of its [workload] rates), simulate vLLM's disable_by_batch_size gate with K = 4 at a range of
thresholds, twice: with the drafter's catch-up charged (the draft model runs again over the last
accepted draft when all K were accepted, and after the gate kept it off it first runs over every
prompt chunk and token it missed: `[engine] drafter_catchup = true`, the default) and without it (the
drafter never falls behind: the serving cost before these terms). Speedup = p50 TPOT of
speculation never on / p50 TPOT of the gate, at the same rate. The best threshold is printed two
ways: the largest geometric-mean speedup over the rates, and the largest worst-rate speedup.

    python benchmarks/study_gate_catchup.py [--workers 2] [--requests N] [--thresholds 8,16,...]
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _point(shared, point):
    """(catch-up on?, threshold or None for never, rate) -> the run's summary numbers."""
    setups, = shared
    catchup, threshold, rate = point
    from specsim.serving.policies import DisableByBatchSize, Never
    from specsim.serving.run import simulate

    setup = setups[catchup]
    policy = Never() if threshold is None else DisableByBatchSize(k=4, threshold=threshold, name=f"gate_{threshold}")
    r = simulate(setup.workload_at(rate), config=setup.config, cost=setup.cost, policy=policy,
                 acceptance=setup.acceptance, seed=setup.seed, slo=setup.slo, rate_per_s=rate,
                 tree_size=setup.tree_size, acceptance_factor=setup.acceptance_factor, fleet=setup.fleet,
                 drafter_cache=setup.drafter_cache)
    s = r.summary
    return {"catchup": catchup, "threshold": threshold, "rate_per_s": rate, "tpot_p50_s": s["tpot_p50_s"],
            "tpot_p99_s": s["tpot_p99_s"], "ttft_p50_s": s["ttft_p50_s"], "slo_attainment_frac": s["slo_attainment_frac"],
            "drafter_catchup_tokens": s["drafter_catchup_tokens"],
            "drafter_catchup_time_frac": s["drafter_catchup_time_frac"], "batch_size_mean": s["batch_size_mean"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--requests", type=int, default=0)
    ap.add_argument("--thresholds", default="8,16,24,32,48,64,96,128,256")
    ap.add_argument("--rates", default="", help="default: the scenario's [workload] rates")
    args = ap.parse_args()

    from dataclasses import replace

    import numpy as np
    import pandas as pd

    from specsim.presentation.parallel import run_points
    from specsim.serving import build_serving
    from specsim.specs.scenario import load_scenario
    from specsim.speculation.operating_point import resolve

    base = load_scenario("llama-70b-h100-chat")
    setups = {}
    for on in (True, False):
        sc = base.with_overrides(sections={"engine": {**dict(base.section("engine")), "drafter_catchup": on}})
        s = build_serving(resolve(sc))
        if args.requests:
            s = replace(s, workload=s.workload.head(args.requests))
        setups[on] = s
    rates = [float(r) for r in args.rates.split(",")] if args.rates else list(setups[True].rates)
    thresholds = [int(t) for t in args.thresholds.split(",")]
    points = [(True, None, r) for r in rates]  # never speculating: the drafter's costs do not apply
    points += [(on, t, r) for on in (True, False) for t in thresholds for r in rates]
    t0 = time.perf_counter()
    rows = run_points(_point, (setups,), points, workers=args.workers)
    wall = time.perf_counter() - t0
    df = pd.DataFrame(rows)
    base_tpot = df[df["threshold"].isna()].set_index("rate_per_s")["tpot_p50_s"]
    g = df[df["threshold"].notna()].copy()
    g["threshold"] = g["threshold"].astype(int)
    g["speedup"] = g["rate_per_s"].map(base_tpot) / g["tpot_p50_s"]
    print(f"{len(points)} runs in {wall:.0f} s on {args.workers} workers; {setups[True].workload.n_requests} requests "
          f"each; rates {rates}\n")
    for on in (True, False):
        t = g[g["catchup"] == on].pivot(index="threshold", columns="rate_per_s", values="speedup")
        print(f"p50 TPOT speedup over never, drafter catch-up {'charged' if on else 'not charged'}:")
        print(t.round(3).to_string())
        gm = np.exp(np.log(t).mean(axis=1))
        worst = t.min(axis=1)
        print(f"  best by geometric mean over rates: threshold {int(gm.idxmax())} ({gm.max():.3f}x); "
              f"by worst rate: threshold {int(worst.idxmax())} ({worst.max():.3f}x)")
        cu = g[g["catchup"] == on]
        print(f"  drafter catch-up: {int(cu['drafter_catchup_tokens'].sum())} tokens over all runs, "
              f"{100 * cu['drafter_catchup_time_frac'].mean():.2f} % of busy time on average\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
