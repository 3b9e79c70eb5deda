"""Speculation under prefill-heavy traffic: the drafter's share of every prompt.

An EAGLE head (like an MTP module or a draft model) keeps its own KV cache, so it also runs over every
prompt token: in traffic of long prompts and short outputs that work is paid on every request while
the decode steps it speeds up are few. A decode-only view (`specsim predict`) sees none of it.

Llama-3.1-8B on one H100 SXM under vLLM with an EAGLE head (K = 4, 3.2 tokens a cycle), Poisson
arrivals, two synthetic workloads of about the same tokens per request:
  decode-heavy:  256-token prompts, 512-token outputs
  prefill-heavy: 8192-token prompts, 32-token outputs
each simulated with speculation never on and with static K = 4, at a light and a moderate load.
Printed per workload and rate: the decode-only prediction, the simulated p50 TPOT and p50 TTFT of
static K = 4 over never, requests completed per second over never, and what the drafter adds to a
prompt's prefill (the serving cost of one prompt-sized chunk with the drafter on over the same chunk
with it off; the engine charges exactly this on every prefill iteration while speculation is on).

    python benchmarks/study_prefill_heavy.py [--requests 400]
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")


def _workload(prompt: int, output: int, n: int, rate: float) -> dict:
    return {"kind": "poisson", "n_requests": n, "rate_per_s": rate,
            "prompt": {"kind": "fixed", "tokens": prompt}, "output": {"kind": "fixed", "tokens": output}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=400, help="requests per run (default 400)")
    args = ap.parse_args()

    import numpy as np

    from specsim.serving import build_serving
    from specsim.serving.engine import IterationMix
    from specsim.serving.policies import Never, StaticK
    from specsim.serving.run import simulate
    from specsim.specs.scenario import load_scenario
    from specsim.speculation.operating_point import resolve
    from specsim.speculation.predict import predict

    base = load_scenario("llama-8b-h100-code-pld")
    cases = {"decode-heavy": (256, 512, (1.0, 6.0, 12.0)), "prefill-heavy": (8192, 32, (1.0, 6.0, 8.0))}

    def prompt_share(cost, prompt: int) -> float:
        one = lambda v: np.array([v], dtype=np.int64)  # noqa: E731
        mix = lambda on: IterationMix(one(prompt), one(0), one(1), one(0), np.array([True]),  # noqa: E731
                                      drafter_on=on, n_spec=0)
        return float(cost(mix(True))) / float(cost(mix(False))) - 1.0

    print(f"{'workload':14s} {'rate/s':>6s} {'decode-only':>11s} {'TPOT p50':>9s} {'TTFT p50':>9s} "
          f"{'req/s':>6s} {'prefill + drafter':>19s}   (static K = 4 over never; > 1 is better, TTFT < 1)")
    t0 = time.perf_counter()
    for name, (prompt, output, rates) in cases.items():
        for rate in rates:
            sc = base.with_overrides(method="eagle", k=4, context_len=prompt + output // 2,
                                     sections={"workload": _workload(prompt, output, args.requests, rate),
                                               "policies": {"never": {"kind": "never"},
                                                            "static_k4": {"kind": "static", "k": 4}},
                                               "acceptance": {}}, tau=3.2)
            op = resolve(sc)
            s = build_serving(op)
            runs = {}
            for policy in (Never(), StaticK(k=4, name="static_k4")):
                r = simulate(s.workload, config=s.config, cost=s.cost, policy=policy, acceptance=s.acceptance,
                             seed=s.seed, slo=s.slo, rate_per_s=rate, tree_size=s.tree_size,
                             acceptance_factor=s.acceptance_factor, fleet=s.fleet, drafter_cache=s.drafter_cache)
                runs[policy.name] = r.summary
            never, spec = runs["never"], runs["static_k4"]
            decode_only = float(predict(op).cycle.speedup)
            share = prompt_share(s.cost, prompt)
            print(f"{name:14s} {rate:6.1f} {decode_only:11.2f} {never['tpot_p50_s'] / spec['tpot_p50_s']:9.2f} "
                  f"{spec['ttft_p50_s'] / never['ttft_p50_s']:9.2f} "
                  f"{spec['throughput_requests_per_s'] / never['throughput_requests_per_s']:6.2f} "
                  f"{100 * share:+18.1f}%")
    print(f"\n{time.perf_counter() - t0:.0f} s wall")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
