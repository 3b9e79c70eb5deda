"""A serving rate sweep three ways: 16 arrival rates x 3 policies (never, static K = 4, the
batch-size gate) of scenarios/llama-70b-h100-chat.toml (its 10-minute window of the Azure
conversation trace, about 3,300 requests per run) run serially in this process, on a local process
pool of --workers processes, and on a --workers-worker Dask LocalCluster; wall times side by side,
and a check that the three tables are identical. Each mode runs --repeat times (medians printed);
the load average is printed before and after (the machine may be shared).

    python benchmarks/bench_serving_sweep.py [--workers 2] [--repeat 1] [--requests N]
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--requests", type=int, default=0, help="only the first N requests of the window (0: all)")
    args = ap.parse_args()

    import numpy as np
    import pandas as pd
    from distributed import Client, LocalCluster

    from specsim.presentation.parallel import run_points
    from specsim.serving import build_serving
    from specsim.serving.rates import run_point, sweep
    from specsim.speculation.operating_point import resolve_id

    print(f"before: {_load()}")
    setup = build_serving(resolve_id("llama-70b-h100-chat"))
    if args.requests:
        from dataclasses import replace

        setup = replace(setup, workload=setup.workload.head(args.requests))
    rates = [float(r) for r in np.round(np.geomspace(1.0, 16.0, 16), 3)]
    policies = list(setup.policies)  # never, static K = 4 and the scenario's batch-size gate
    print(f"{len(rates)} rates x {len(policies)} policies = {len(rates) * len(policies)} runs of "
          f"{setup.workload.n_requests} requests each")

    def timed(mapper):
        walls, table = [], None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            table, _ = sweep(setup, rates=rates, policies=policies, mapper=mapper)
            walls.append(time.perf_counter() - t0)
        return statistics.median(walls), table

    serial_s, serial = timed(None)
    pool_s, pool = timed(lambda fn, shared, pts, prog: run_points(fn, shared, pts, workers=args.workers))
    t0 = time.perf_counter()
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.CRITICAL) as cl, \
            Client(cl) as client:
        start_s = time.perf_counter() - t0
        dask_s, dask = timed(lambda fn, shared, pts, prog: run_points(fn, shared, pts, cluster=client))
    for name, t in (("pool", pool), ("LocalCluster", dask)):
        pd.testing.assert_frame_equal(serial, t)
        print(f"{name}: table identical to the serial run")
    print(f"\n{'mode':<28} {'wall (s)':>9} {'speedup':>8}")
    print(f"{'serial, this process':<28} {serial_s:>9.1f} {1.0:>7.2f}x")
    print(f"{f'process pool, {args.workers} workers':<28} {pool_s:>9.1f} {serial_s / pool_s:>7.2f}x")
    print(f"{f'Dask LocalCluster, {args.workers} workers':<28} {dask_s:>9.1f} {serial_s / dask_s:>7.2f}x"
          f"   (cluster start {start_s:.1f} s, not included)")
    print(f"after: {_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
