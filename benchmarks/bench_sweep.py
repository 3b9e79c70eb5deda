"""Benchmark: a 10^6-point sweep, trees included, on one core (target: under 5 s).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_sweep.py

Grid: 2 parts × 2 attention kernels × {draft model, EAGLE} × (chain + 16 tree sizes) × 8 K × 16 B × 8 L
× 16 α ≈ 2.2 × 10^6 points (twice the 10^6 target). Prints points per second for the evaluation (the DataFrame included) and,
separately, the time of the first call's tree dynamic programs.
"""
from __future__ import annotations

import os
import time
from dataclasses import replace

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from specsim.specs.scenario import load_scenario  # noqa: E402
from specsim.speculation.operating_point import resolve  # noqa: E402
from specsim.presentation.sweep import n_points, run_sweep, sweep_axes  # noqa: E402


def main() -> None:
    base = load_scenario("seed-70b-hbm")
    grid = {
        "hardware": ["seed-hbm-2tbs", "seed-ddr5-90gbs"],
        "attention": ["fused", "naive"],
        "method": ["draft_model", "eagle"],
        "k": list(range(1, 9)),
        "tree_size": [2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 56, 64],
        "batch_size": [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512],
        "context_len": [0, 256, 1024, 4096, 16384, 32768, 65536, 120000],  # the seed model holds 131072
        "alpha": [float(a) for a in np.round(np.linspace(0.2, 0.95, 16), 4)],
    }
    op = resolve(replace(base, sections={"sweep": grid}))  # every command's one operating point
    n = n_points(sweep_axes(op))
    t0 = time.perf_counter()
    df = run_sweep(op)
    wall = time.perf_counter() - t0
    assert len(df) == n
    print(f"{n:,} points (trees included: {int(df['is_tree'].sum()):,}) in {wall:.2f} s "
          f"→ {n / wall:,.0f} points/s on one core (target < 5 s: {'ok' if wall < 5 else 'MISSED'})")
    t0 = time.perf_counter()
    run_sweep(op)
    wall2 = time.perf_counter() - t0
    print(f"second run (tree values cached): {wall2:.2f} s → {n / wall2:,.0f} points/s")


if __name__ == "__main__":
    main()
