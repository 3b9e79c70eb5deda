"""Every gating policy at every arrival rate, side by side, and where speculation stops paying."""
from __future__ import annotations

import math

import pandas as pd

from ..errors import SpecError
from .run import simulate
from .setup import ServingSetup

TABLE_COLUMNS = ("policy", "rate_per_s", "n_done", "n_rejected", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s",
                 "e2e_p50_s", "throughput_tokens_per_s", "goodput_requests_per_s", "slo_attainment_frac",
                 "batch_size_mean", "kv_used_frac_mean", "n_preemptions", "mean_acceptance_length",
                 "draft_acceptance_rate")


def run_one(setup: ServingSetup, name: str, rate: float | None, **kw):
    """One policy at one rate (None: the workload as given)."""
    policy = setup.policies[name]
    return simulate(setup.workload_at(rate), config=setup.config_for(policy), cost=setup.cost, policy=policy,
                    acceptance=setup.acceptance, seed=setup.seed, slo=setup.slo, rate_per_s=rate,
                    tree_size=setup.tree_size, acceptance_factor=setup.acceptance_factor, fleet=setup.fleet,
                    drafter_cache=setup.drafter_cache, draft_frac=setup.draft_frac, **kw)


def run_point(setup: ServingSetup, point: tuple):
    """One (policy name, rate) point of a sweep: what a worker process runs (module level, so it
    travels by reference)."""
    name, rate = point
    return run_one(setup, name, rate)


def sweep(setup: ServingSetup, *, rates=None, policies=None, progress=None, mapper=None) -> tuple[pd.DataFrame, dict]:
    """Every policy at every rate (None = the workload as given). Returns a long-form table (one row
    per policy and rate, every summary number plus the speedups against the 'never'-kind baseline)
    and the SimulationResults keyed by (policy, rate).

    mapper(fn, setup, points, progress) -> [fn(setup, p) for p in points] runs the independent points
    elsewhere (presentation.parallel: a process pool or a Dask cluster); each point is seeded from the
    setup alone, so the table is the same however they ran. progress(name, rate) after each point."""
    rates = list(rates) if rates else (list(setup.rates) or [None])
    names = list(policies) if policies else list(setup.policies)
    for n in names:
        if n not in setup.policies:
            raise SpecError(f"policy {n!r} is not in the scenario's [policies]: {', '.join(setup.policies)}")
    if len(set(names)) != len(names):
        raise SpecError(f"--policies {','.join(names)}: each policy once")
    if len({r for r in rates if r is not None}) != len([r for r in rates if r is not None]):
        raise SpecError(f"--rates {','.join(str(r) for r in rates)}: each rate once")
    results: dict = {}
    rows = []
    points = [(name, rate) for rate in rates for name in names]
    if mapper is None:
        done = []
        for pt in points:
            done.append(run_point(setup, pt))
            if progress is not None:
                progress(*pt)
    else:
        done = mapper(run_point, setup, points, None if progress is None else (lambda i, n, pt: progress(*pt)))
    for (name, rate), r in zip(points, done):
        results[(name, rate)] = r
        row = {k: v for k, v in r.summary.items() if not isinstance(v, list)}
        row["policy"] = name
        rows.append(row)
    table = pd.DataFrame(rows)
    return add_speedups(table, {n: setup.policies[n] for n in names}), results


def add_speedups(table: pd.DataFrame, policies: dict) -> pd.DataFrame:
    """speedup_tpot_p50 = p50 TPOT of the baseline (the first 'never' policy) / the policy's, at
    the same rate; likewise for p99 TPOT and throughput (policy / baseline)."""
    base = next((n for n, p in policies.items() if p.k_reserved == 0), None)
    table = table.copy()
    if base is None or table.empty:
        return table
    key = table["rate_per_s"].fillna(-1.0)
    b = table[table["policy"] == base].assign(_k=key[table["policy"] == base]).set_index("_k")
    ref_p50 = key.map(b["tpot_p50_s"])
    ref_p99 = key.map(b["tpot_p99_s"])
    ref_thr = key.map(b["throughput_tokens_per_s"])
    table["speedup_tpot_p50"] = ref_p50 / table["tpot_p50_s"]
    table["speedup_tpot_p99"] = ref_p99 / table["tpot_p99_s"]
    table["throughput_ratio"] = table["throughput_tokens_per_s"] / ref_thr
    table.attrs["baseline_policy"] = base
    return table


def crossover_rate(table: pd.DataFrame, policy: str, column: str = "speedup_tpot_p50") -> float | None:
    """The arrival rate where the policy's speedup first falls through 1, interpolated linearly in
    log(rate) between the two sweep points around it; None if it never does."""
    t = table[table["policy"] == policy].dropna(subset=["rate_per_s"]).sort_values("rate_per_s")
    r, s = t["rate_per_s"].to_numpy(float), t[column].to_numpy(float)
    for i in range(1, len(r)):
        if s[i - 1] >= 1.0 > s[i]:
            x0, x1 = math.log(r[i - 1]), math.log(r[i])
            f = (s[i - 1] - 1.0) / (s[i - 1] - s[i])
            return float(math.exp(x0 + f * (x1 - x0)))
    return None


__all__ = ["sweep", "run_one", "run_point", "add_speedups", "crossover_rate", "TABLE_COLUMNS"]
