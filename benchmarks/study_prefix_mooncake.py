"""Prefix caching on the Mooncake FAST'25 conversation trace: the hit rate its hash ids imply, the
simulator's, and what caching does to a speculating fleet.

1. Implied: for every request in arrival order, the tokens of its longest leading run of 512-token
   blocks whose ids an earlier request carried (full 16-token KV blocks of a short last block, at
   least one prompt token left to compute) over all prompt tokens — read from the JSON lines here,
   independently of the simulator.
2. Simulated, unbounded: one replica with room for every block, requests one at a time (each done
   before the next arrives): must equal (1) exactly.
3. Simulated, real capacity: Llama-3.1-70B on 4x H100 (scenarios/llama-70b-h100-chat.toml's KV
   capacity, K = 4 draft model) serving the trace's first --minutes at its own arrival times on
   --replicas replicas, round robin against prefix affinity, prefix caching off and on, speculation
   never and static K = 4: hit rate, TTFT and TPOT percentiles, preemptions.

    python benchmarks/study_prefix_mooncake.py [--minutes 20] [--replicas 8] [--workers 2]
"""
from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

TRACE = "traces/mooncake_fast25/conversation_trace.jsonl"


def implied(path) -> tuple[int, int]:
    seen: set = set()
    hit = total = 0
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            ids, p = row["hash_ids"], row["input_length"]
            run = []
            for j, u in enumerate(ids):
                if u not in seen:
                    break
                tokens = min(512, p - 512 * j)
                run.append(tokens // 16 * 16)
                if tokens < 512:
                    break
            while run and sum(run) > p - 1:
                run.pop()
            hit += sum(run)
            total += p
            seen.update(ids)
    return hit, total


def _fleet_point(shared, point):
    setups, = shared
    caching, router, policy = point
    from specsim.serving.rates import run_one

    r = run_one(setups[(caching, router)], policy, None)
    s = r.summary
    return {"prefix_caching": caching, "router": router, "policy": policy, "prefix_hit_rate": s["prefix_hit_rate"],
            "ttft_p50_s": s["ttft_p50_s"], "ttft_p99_s": s["ttft_p99_s"], "tpot_p50_s": s["tpot_p50_s"],
            "tpot_p99_s": s["tpot_p99_s"], "n_done": s["n_done"], "n_rejected": s["n_rejected"],
            "n_preemptions": s["n_preemptions"], "batch_size_mean": s["batch_size_mean"],
            "prefix_evicted_units": s["prefix_evicted_units"], "throughput_tokens_per_s": s["throughput_tokens_per_s"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()

    from dataclasses import replace

    import numpy as np
    import pandas as pd

    from specsim.presentation.parallel import run_points
    from specsim.serving import EngineConfig, build_serving, simulate
    from specsim.serving.policies import Never
    from specsim.serving.workloads import read_mooncake
    from specsim.specs.data import data_path
    from specsim.specs.scenario import load_scenario
    from specsim.speculation.operating_point import resolve

    path = data_path(TRACE, what="trace")
    t0 = time.perf_counter()
    hit, total = implied(path)
    print(f"1. implied by the hash ids (all 12,031 requests): {hit:,} of {total:,} prompt tokens = {hit / total:.4f}"
          f"  [{time.perf_counter() - t0:.1f} s]")
    w = read_mooncake(path)
    one_at_a_time = replace(w, arrival_at_s=np.arange(w.n_requests) * 1000.0, output_tokens=np.full(w.n_requests, 1))
    big = int(w.prompt_tokens.sum()) // 16 + 10 * w.n_requests
    t0 = time.perf_counter()
    r = simulate(one_at_a_time, config=EngineConfig(n_blocks=big, prefix_caching=True), cost=lambda m: 0.01,
                 policy=Never())
    print(f"2. simulated, unbounded cache: {int(r.run.prefix_hit_tokens.sum()):,} tokens = "
          f"{r.summary['prefix_hit_rate']:.4f} (equal: {int(r.run.prefix_hit_tokens.sum()) == hit})"
          f"  [{time.perf_counter() - t0:.1f} s]")

    base = load_scenario("llama-70b-h100-chat")
    setups = {}
    for caching in (False, True):
        for router in ("round_robin", "prefix_affinity"):
            sc = base.with_overrides(sections={
                "workload": {"kind": "trace", "trace": TRACE, "format": "mooncake", "window_s": [0, 60 * args.minutes]},
                "engine": {**dict(base.section("engine")), "prefix_caching": caching},
                "fleet": {"n_replicas": args.replicas, "router": router}})
            setups[(caching, router)] = build_serving(resolve(sc))
    n_req = setups[(True, "round_robin")].workload.n_requests
    points = [(c, rt, p) for c in (False, True) for rt in ("round_robin", "prefix_affinity")
              for p in ("never", "static_k4")]
    t0 = time.perf_counter()
    rows = run_points(_fleet_point, (setups,), points, workers=args.workers)
    df = pd.DataFrame(rows)
    print(f"3. {args.replicas} replicas of {base.name}'s deployment, the trace's first {args.minutes:g} minutes "
          f"({n_req} requests, KV capacity {setups[(True, 'round_robin')].capacity.n_blocks} blocks of 16 per replica)"
          f"  [{time.perf_counter() - t0:.0f} s on {args.workers} workers]")
    show = df.copy()
    for c in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s"):
        show[c.replace("_s", "_ms")] = (show.pop(c) * 1e3).round(1)
    print(show.to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
