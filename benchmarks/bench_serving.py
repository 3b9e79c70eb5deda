"""Serving-simulator speed: replay the whole Azure LLM inference 2023 conversation trace (19,366
requests, about one hour of traffic, at its own rate) with speculation on (static K = 4,
Llama-3.1-70B on 4x H100 with a Llama-3.2-1B drafter: scenarios/llama-70b-h100-chat.toml) on one
core, and print simulated seconds per wall second and requests per wall second.
Target: the full hour in under 20 s of wall time.

    python benchmarks/bench_serving.py [--requests N] [--policy static_k4] [--profile]

The trace ships with the package (the data folder; $SPECSIM_DATA points elsewhere).
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="llama-70b-h100-chat")
    ap.add_argument("--policy", default="static_k4", help="policy name from the scenario's [policies]")
    ap.add_argument("--requests", type=int, default=0, help="replay only the first N requests (0: all)")
    ap.add_argument("--profile", action="store_true", help="print the top of a cProfile")
    args = ap.parse_args()

    from dataclasses import replace

    from specsim.errors import SpecError
    from specsim.serving import build_serving, simulate
    from specsim.specs.scenario import load_scenario
    from specsim.speculation.operating_point import resolve

    scenario = load_scenario(args.scenario)
    workload_section = {k: v for k, v in scenario.section("workload").items() if k not in ("window_s", "rates")}
    scenario = replace(scenario, sections={**scenario.sections, "workload": workload_section})
    t0 = time.perf_counter()
    try:
        setup = build_serving(resolve(scenario))
    except SpecError as exc:
        print(f"bench_serving: {exc}")
        return 2
    w = setup.workload if not args.requests else setup.workload.head(args.requests)
    t_setup = time.perf_counter() - t0
    policy = setup.policies[args.policy]

    def run():
        return simulate(w, config=setup.config, cost=setup.cost, policy=policy, acceptance=setup.acceptance,
                        seed=0, slo=setup.slo, acceptance_factor=setup.acceptance_factor)

    if args.profile:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        prof.enable()
        r = run()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)
    t1 = time.perf_counter()
    r = run()
    wall = time.perf_counter() - t1
    s = r.summary
    print(f"scenario {scenario.name}, policy {args.policy} (K reserved {policy.k_reserved}), "
          f"{w.n_requests} requests, setup {t_setup:.2f} s (trace read, capacity, cost fit)")
    print(f"simulated {s['makespan_s']:.1f} s of traffic, {s['n_steps']} iterations, in {wall:.2f} s wall "
          f"({wall / max(s['n_steps'], 1) * 1e6:.0f} us per iteration)")
    print(f"simulated seconds per wall second: {s['makespan_s'] / wall:.1f}")
    print(f"requests per wall second: {w.n_requests / wall:.0f}")
    print(f"done {s['n_done']}, p50 TPOT {s['tpot_p50_s'] * 1e3:.1f} ms, p50 TTFT {s['ttft_p50_s'] * 1e3:.0f} ms, "
          f"mean batch {s['batch_size_mean']:.1f}, mean acceptance length {s['mean_acceptance_length']:.2f}")
    print(f"target (full hour under 20 s): {'met' if wall < 20 or args.requests else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
