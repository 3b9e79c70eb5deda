"""Cost-model throughput: evaluate plain step, draft step, verify pass and cycle analytics over a
grid of (B, M, L, K) points and print points per second on one core.

Target (issue 2): more than 10^6 points per second.

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
from specsim.cost.roofline import step_cost  # noqa: E402
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
    plain = step_cost(target, hw, batch_size=B, q_len=1, ctx_len=L).time_s
    verify_m = step_cost(target, hw, batch_size=B, q_len=M, ctx_len=L).time_s  # tree/verify of M tokens
    draft = step_cost(drafter, hw, batch_size=B, q_len=1, ctx_len=L).time_s
    verify_k = step_cost(target, hw, batch_size=B, q_len=K + 1, ctx_len=L).time_s
    tau = tokens_per_cycle_iid(alpha, K)
    c = cycle_times(target_step_time_s=plain, draft_time_s=K * draft, verify_time_s=verify_k, tokens_per_cycle=tau,
                    batch_size=B)
    return c.speedup, verify_m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    target, drafter, hw = load_model("seed-70b"), load_model("seed-1b"), load_hardware("seed-hbm-2tbs")
    B, M, L, K = grid(args.points)
    n = B.size
    evaluate(target, drafter, hw, B[:1000], M[:1000], L[:1000], K[:1000])  # warm-up
    best = np.inf
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        speedup, _ = evaluate(target, drafter, hw, B, M, L, K)
        best = min(best, time.perf_counter() - t0)
    print(f"grid points (B, M, L, K): {n:,}")
    print(f"best of {args.repeats}: {best:.3f} s  ->  {n / best:,.0f} points/s  (target > 1,000,000)")
    print(f"each point = plain step + draft step + verify(M) + verify(K+1) + cycle analytics; "
          f"speedup range {speedup.min():.3f} .. {speedup.max():.3f}")


if __name__ == "__main__":
    main()
