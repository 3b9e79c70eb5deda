"""Cost-model throughput: evaluate plain step, draft step, verify pass and cycle analytics over a
grid of (B, M, L, K) points and print points per second on one core.

Target (issue 2): more than 10^6 points per second. The same grid is timed on a part with a
measured kernel curve (issue 9: h100-sxm, llama-2-70b with llama-3.2-1b drafting), and so is the
one-off tabulation of `token_time_s` over T = 0..8192 that the serving simulator can look up.

    .venv/bin/python benchmarks/bench_roofline.py [--points 2000000]
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core, as the target says
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from specsim.specs.hardware import load_hardware  # noqa: E402
from specsim.specs.models import load_model  # noqa: E402
from specsim.cost.deployment import Deployment  # noqa: E402
from specsim.cost.pricing import price_pass, pricing_source, target_step_cost  # noqa: E402
from specsim.cost.roofline import step_cost, token_time_s  # noqa: E402
from specsim.specs.stacks import load_stack  # noqa: E402
from specsim.speculation.cycle import cycle_times, tokens_per_cycle_iid  # noqa: E402


def grid(n_points: int):
    """A (B, M, L, K) grid of about n_points points, flattened."""
    side = int(round(n_points ** 0.25))
    b = np.unique(np.geomspace(1, 512, side).round())
    m = np.arange(1, side + 1)
    l = np.linspace(0, 131072, side).round()
    k = np.arange(0, side)
    B, M, L, K = (a.ravel() for a in np.meshgrid(b, m, l, k, indexing="ij"))
    return B, M, L, K


def evaluate(target, drafter, hw, B, M, L, K, alpha=0.8):
    plain = step_cost(target, hw, batch_size=B, q_len=1, context_len=L).time_s
    verify_m = step_cost(target, hw, batch_size=B, q_len=M, context_len=L).time_s  # tree/verify of M tokens
    draft = step_cost(drafter, hw, batch_size=B, q_len=1, context_len=L).time_s
    verify_k = step_cost(target, hw, batch_size=B, q_len=K + 1, context_len=L).time_s
    tau = tokens_per_cycle_iid(alpha, K)
    c = cycle_times(target_step_time_s=plain, draft_time_s=K * draft, verify_time_s=verify_k, tokens_per_cycle=tau,
                    batch_size=B)
    return c.speedup, verify_m


def evaluate_dep(target, drafter, dep, B, M, L, K, alpha=0.8):
    """As evaluate, every pass priced through the deployment's sources (`cost.pricing`: measured tables
    where it has them and they cover the model, else the roofline)."""
    plain = target_step_cost(target, dep, batch_size=B, q_len=1, context_len=L).time_s
    verify_m = target_step_cost(target, dep, batch_size=B, q_len=M, context_len=L).time_s
    draft = price_pass(drafter, dep, batch_size=B, q_len=1, context_len=L).time_s
    verify_k = target_step_cost(target, dep, batch_size=B, q_len=K + 1, context_len=L).time_s
    tau = tokens_per_cycle_iid(alpha, K)
    c = cycle_times(target_step_time_s=plain, draft_time_s=K * draft, verify_time_s=verify_k, tokens_per_cycle=tau,
                    batch_size=B)
    return c.speedup, verify_m


def _time(fn, repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    B, M, L, K = grid(args.points)
    n = B.size
    print(f"grid points (B, M, L, K): {n:,}")
    cases = [("seed-70b / seed-1b on seed-hbm-2tbs (pure roofline)", "seed-70b", "seed-1b", "seed-hbm-2tbs"),
             ("llama-2-70b / llama-3.2-1b on h100-sxm (measured kernel curve)", "llama-2-70b", "llama-3.2-1b", "h100-sxm")]
    for label, t_id, d_id, hw_id in cases:
        target, drafter, hw = load_model(t_id), load_model(d_id), load_hardware(hw_id)
        evaluate(target, drafter, hw, B[:1000], M[:1000], L[:1000], K[:1000])  # warm-up
        out = {}
        best = _time(lambda: out.update(r=evaluate(target, drafter, hw, B, M, L, K)), args.repeats)
        speedup = out["r"][0]
        print(f"{label}: best of {args.repeats}: {best:.3f} s  ->  {n / best:,.0f} points/s  (target > 1,000,000); "
              f"speedup range {speedup.min():.3f} .. {speedup.max():.3f}")
    # measured operator tables on and off, side by side: llama-3.1-8b / llama-3.2-1b on h100-sxm, sglang
    hw, stack = load_hardware("h100-sxm"), load_stack("sglang")
    target, drafter = load_model("llama-3.1-8b"), load_model("llama-3.2-1b")
    on = Deployment.from_stack(hw, stack, cost_source="measured")
    off = Deployment.from_stack(hw, stack, cost_source="roofline")  # no tables: roofline + fitted curves
    for dep in (on, off):
        evaluate_dep(target, drafter, dep, B[:1000], M[:1000], L[:1000], K[:1000])  # warm-up (tabulates once)
        out = {}
        best = _time(lambda: out.update(r=evaluate_dep(target, drafter, dep, B, M, L, K)), args.repeats)
        print(f"llama-3.1-8b / llama-3.2-1b on h100-sxm sglang, tables {'on ' if dep is on else 'off'} "
              f"[{pricing_source(target, dep)}]: best of {args.repeats}: {best:.3f} s  ->  {n / best:,.0f} points/s")
    hw, target = load_hardware("h100-sxm"), load_model("llama-2-70b")
    tokens = np.arange(0, 8193)
    best = _time(lambda: token_time_s(target, hw, tokens, tp=4), args.repeats)
    print(f"token_time_s table, llama-2-70b on h100-sxm tp 4, T = 0..8192 ({tokens.size:,} entries): {best * 1e3:.2f} ms")
    print("each point = plain step + draft step + verify(M) + verify(K+1) + cycle analytics")


if __name__ == "__main__":
    main()
