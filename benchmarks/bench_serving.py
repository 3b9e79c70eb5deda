"""Serving-simulator speed: the whole Azure LLM inference 2023 conversation trace (19,366 requests,
about one hour of traffic) with speculation on (static K = 4, Llama-3.1-70B on 4x H100 with a
Llama-3.2-1B drafter: scenarios/llama-70b-h100-chat.toml), on one core:

- one replica at the trace's own rate (target: the full hour in at most 5 s of wall time);
- a fleet of 8 replicas behind a least-outstanding router serving the same hour (target: at most 8x
  the one-replica time); each replica then runs at an eighth of the load, with smaller batches and
  more, cheaper iterations, so the ratio is printed with the iteration counts beside it;
- 8 replicas serving eight hours of the trace's traffic compressed into one (the trace replayed 8x
  faster, eight times over: 154,928 requests in the hour), so each replica carries the one-replica
  load for the whole hour: the fleet's cost against 8x one replica, at equal load per replica.

Each case runs --repeat times (default 3); the medians are printed with the spread, the CPU time
of the process beside the wall time (the machine may be shared), and the load average before and
after. The first run of a case is not discarded: setup (trace read, cost tables) is timed apart.

--vs REV runs every case side by side with the package as it was at git revision REV (exported to a
temporary folder): each run is a fresh process, this tree's and REV's in turn (A B A B ...), so a
drift of the machine's speed reaches both; the ratio is taken pair by pair and its median printed.
--at REV2 puts revision REV2 in this tree's place (both sides exported). --vs-source SOURCE runs every case
side by side on this tree with the passes priced by --cost-source (A, default auto) and by SOURCE (B), e.g.
the measured operator tables against the roofline on a stack that has tables (--stack vllm).

    OMP_NUM_THREADS=1 python benchmarks/bench_serving.py [--repeat 3] [--requests N] [--profile]
    OMP_NUM_THREADS=1 python benchmarks/bench_serving.py --vs REV [--repeat 5] [--cases 1,8]
    OMP_NUM_THREADS=1 python benchmarks/bench_serving.py --stack vllm --vs-source roofline [--cases 1]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="llama-70b-h100-chat")
    ap.add_argument("--policy", default="static_k4", help="policy name from the scenario's [policies]")
    ap.add_argument("--requests", type=int, default=0, help="replay only the first N requests (0: all)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case (medians are printed)")
    ap.add_argument("--cases", default="1,8,8x8", help="which cases: 1 (one replica), 8 (8 replicas, same "
                    "hour), 8x8 (8 replicas, 8 hours' traffic in one)")
    ap.add_argument("--profile", action="store_true", help="print the top of a cProfile of one replica")
    ap.add_argument("--vs", metavar="REV", help="run every case side by side with the package at git revision REV")
    ap.add_argument("--at", metavar="REV", help="with --vs: this side is revision REV too, not the working tree")
    ap.add_argument("--stack", default=None, help="serving stack instead of the scenario's (e.g. vllm: measured tables)")
    ap.add_argument("--cost-source", default=None, choices=["auto", "measured", "roofline"],
                    help="what prices the passes (default: the scenario's, auto)")
    ap.add_argument("--vs-source", default=None, choices=["auto", "measured", "roofline"],
                    help="run every case side by side on this tree: --cost-source (A) against this source (B)")
    ap.add_argument("--json-one", action="store_true", help=argparse.SUPPRESS)  # one run of one case, as JSON
    args = ap.parse_args()
    if args.vs or args.vs_source:
        return side_by_side(args)

    from dataclasses import replace

    from specsim.cost.pricing import pricing_source
    from specsim.errors import SpecError
    from specsim.serving import build_serving, simulate
    from specsim.serving.fleet import FleetSpec
    from specsim.serving.router import RouterConfig
    from specsim.specs.scenario import load_scenario
    from specsim.speculation.operating_point import resolve

    print(f"before: {_load()}")
    scenario = load_scenario(args.scenario)
    workload_section = {k: v for k, v in scenario.section("workload").items() if k not in ("window_s", "rates")}
    scenario = replace(scenario, sections={**scenario.sections, "workload": workload_section})
    t0 = time.perf_counter()
    try:
        op = resolve(scenario, stack=args.stack, cost_source=args.cost_source)
        setup = build_serving(op)
    except SpecError as exc:
        print(f"bench_serving: {exc}")
        return 2
    w = setup.workload if not args.requests else setup.workload.head(args.requests)
    t_setup = time.perf_counter() - t0
    policy = setup.policies[args.policy]
    if not args.json_one:
        print(f"scenario {scenario.name}, policy {args.policy} (K reserved {policy.k_reserved}), {w.n_requests} requests, "
              f"setup {t_setup:.2f} s (trace read, capacity, cost tables); target priced by {pricing_source(op.target, op.deployment)}")

    def run(workload, n_replicas: int):
        fleet = FleetSpec(n_replicas=n_replicas, router=RouterConfig(kind="least_outstanding"))
        return simulate(workload, config=setup.config, cost=setup.cost, policy=policy, acceptance=setup.acceptance,
                        seed=0, slo=setup.slo, acceptance_factor=setup.acceptance_factor, fleet=fleet,
                        drafter_cache=setup.drafter_cache)

    if args.profile:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        prof.enable()
        run(w, 1)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)

    def tiled(workload, copies: int):
        """The trace replayed `copies` times faster, `copies` times over, in its own span."""
        import numpy as np

        t = workload.arrival_at_s / copies
        span = float(t[-1]) if t.size else 0.0
        arrivals = np.concatenate([t + j * span for j in range(copies)])
        return workload.select(np.tile(np.arange(workload.n_requests), copies), arrival_at_s=arrivals,
                               note=f"{copies} copies at {copies}x the rate")

    cases = {"1": ("one replica", w, 1), "8": ("8 replicas, same hour", w, 8),
             "8x8": ("8 replicas, 8 hours' traffic in one", tiled(w, 8), 8)}
    if args.json_one:
        label, workload, n_rep = cases[args.cases]
        c0, w0 = time.process_time(), time.perf_counter()
        r = run(workload, n_rep)
        print(json.dumps({"wall_s": time.perf_counter() - w0, "cpu_s": time.process_time() - c0,
                          "n_steps": int(r.summary["n_steps"]), "n_done": int(r.summary["n_done"]),
                          "tpot_p50_s": float(r.summary["tpot_p50_s"])}))
        return 0
    rows = {}
    for key in args.cases.split(","):
        label, workload, n_rep = cases[key]
        walls, cpus = [], []
        for _ in range(args.repeat):
            c0, w0 = time.process_time(), time.perf_counter()
            r = run(workload, n_rep)
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
        s = r.summary
        rows[key] = (label, statistics.median(walls), min(walls), max(walls), statistics.median(cpus), s)
        print(f"{label}: wall median {rows[key][1]:.2f} s (min {min(walls):.2f}, max {max(walls):.2f}; "
              f"{args.repeat} runs), CPU median {rows[key][4]:.2f} s; {s['n_steps']} iterations "
              f"({rows[key][4] / max(s['n_steps'], 1) * 1e6:.0f} us CPU each); simulated {s['makespan_s']:.0f} s; "
              f"done {s['n_done']}, p50 TPOT {s['tpot_p50_s'] * 1e3:.1f} ms, mean batch {s['batch_size_mean']:.1f}")
    if "1" in rows:
        one = rows["1"]
        print(f"\none replica, full hour: {one[1]:.2f} s wall, {one[4]:.2f} s CPU (target <= 5 s wall on one core: "
              f"{'met' if one[1] <= 5 or args.requests else 'NOT met'}; CPU {'within' if one[4] <= 5 else 'over'})")
        for key in ("8", "8x8"):
            if key in rows:
                r = rows[key]
                it = r[5]["n_steps"] / max(one[5]["n_steps"], 1)
                print(f"{r[0]}: {r[1] / one[1]:.2f}x the one-replica wall time, {r[4] / one[4]:.2f}x its CPU time, "
                      f"with {it:.2f}x its iterations (target <= 8x: {'met' if r[4] / one[4] <= 8 else 'NOT met'} on CPU)")
    print(f"after: {_load()}")
    return 0


def side_by_side(args) -> int:
    """Every case, this tree (A) against the package at args.vs (B), in alternating fresh processes."""
    repo = Path(__file__).resolve().parents[1]
    revs = {}
    for flag, name in (("--vs", args.vs), ("--at", args.at)):
        if name is None:
            continue
        try:
            revs[flag] = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", name], check=True,
                                        capture_output=True, text=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError) as exc:
            print(f"bench_serving: {flag} {name}: not a git revision of {repo} ({exc})")
            return 2
    print(f"before: {_load()}")
    with tempfile.TemporaryDirectory(prefix="specsim-bench-") as tmp:
        trees = {"A": (f"this tree ({repo})", str(repo))}
        for side, flag in (("B", "--vs"), ("A", "--at")):
            if flag in revs:
                folder = Path(tmp) / revs[flag]
                folder.mkdir(exist_ok=True)
                archive = subprocess.run(["git", "-C", str(repo), "archive", revs[flag]], check=True,
                                         capture_output=True).stdout
                subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
                trees[side] = (f"{revs[flag]}", str(folder))
        extra = {"A": [], "B": []}
        if args.vs_source:  # one tree, two cost sources
            trees["B"] = trees["A"]
            extra = {"A": ["--cost-source", args.cost_source or "auto"], "B": ["--cost-source", args.vs_source]}
            trees = {side: (f"{trees[side][0]}, --cost-source {extra[side][1]}", trees[side][1]) for side in ("A", "B")}
        print(f"A: {trees['A'][0]}; B: {trees['B'][0]}")
        base = [sys.executable, str(Path(__file__).resolve()), "--json-one", "--scenario", args.scenario, "--policy",
                args.policy, "--requests", str(args.requests)] + (["--stack", args.stack] if args.stack else [])
        for case in args.cases.split(","):
            got = {"A": [], "B": []}
            for _ in range(args.repeat):
                for side in ("A", "B"):
                    env = dict(os.environ, PYTHONPATH=trees[side][1])
                    out = subprocess.run(base + ["--cases", case] + extra[side], env=env, capture_output=True, text=True)
                    if out.returncode:
                        print(f"bench_serving: case {case} failed on {trees[side][0]}:\n{out.stdout}{out.stderr}")
                        return 1
                    got[side].append(json.loads(out.stdout.strip().splitlines()[-1]))
            a, b = got["A"], got["B"]
            same = all(x["n_steps"] == y["n_steps"] and x["n_done"] == y["n_done"] for x, y in zip(a, b))
            print(f"case {case}: {a[0]['n_steps']} iterations in A, {b[0]['n_steps']} in B"
                  f"{'' if same else ' (the runs differ)'}; {args.repeat} pairs")
            for key, unit in (("wall_s", "wall"), ("cpu_s", "CPU")):
                ra = [x[key] for x in a]
                rb = [x[key] for x in b]
                ratio = [x / y for x, y in zip(ra, rb)]
                print(f"  {unit:>4}: A median {statistics.median(ra):.2f} s [{min(ra):.2f}-{max(ra):.2f}], "
                      f"B {statistics.median(rb):.2f} s [{min(rb):.2f}-{max(rb):.2f}]; "
                      f"ratio A/B median {statistics.median(ratio):.3f} [{min(ratio):.3f}-{max(ratio):.3f}]")
    print(f"after: {_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
