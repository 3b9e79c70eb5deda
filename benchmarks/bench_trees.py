"""Sequoia-style dynamic program: time to get the best tree value for every size up to 128 nodes.

Budget (for sweeps that call it per distinct acceptance vector): under 50 ms on one core.

    .venv/bin/python benchmarks/bench_trees.py
"""
from __future__ import annotations

import time

from specsim.speculation.trees import optimal_tree_values

P = [0.5, 0.2, 0.1, 0.05, 0.03, 0.02, 0.01, 0.01]


def best_of(fn, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    optimal_tree_values(16, P)  # warm-up
    free = best_of(lambda: optimal_tree_values(128, P))
    limited = best_of(lambda: optimal_tree_values(128, P, max_depth=8))
    print(f"optimal_tree_values(128 nodes, 8 ranks): {free * 1e3:.2f} ms unlimited depth, "
          f"{limited * 1e3:.2f} ms with max_depth = 8 (budget 50 ms)")


if __name__ == "__main__":
    main()
