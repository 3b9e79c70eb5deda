"""A serving comparison, as the `simulate` command and the report present it: every policy at every
rate, the crossover rates, the analytic switch-off point beside them, and the files written."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..errors import EmptyResultError
from ..serving import ServingSetup, build_serving, crossover_rate, sweep
from ..speculation.operating_point import OperatingPoint
from ..speculation.switch_off import SwitchOff
from ..analyses.threshold import recommended_switch_off


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingComparison:
    """table: one row per policy and rate (serving.rates.sweep); results: SimulationResults by
    (policy, rate); crossovers: rate where each speculative policy stops beating the baseline;
    switch_off: the analytic switch-off point under the same workload (None without speculation)."""

    point: OperatingPoint
    setup: ServingSetup
    table: pd.DataFrame
    results: dict
    crossovers: dict
    switch_off: SwitchOff | None
    store: object = None

    @property
    def baseline(self) -> str | None:
        return self.table.attrs.get("baseline_policy")


def compare_policies(op: OperatingPoint, *, rates=None, policies=None, seed: int = 0, progress=None,
                     workers: int | None = 1, cluster=None, resume_in=None) -> ServingComparison:
    """Run the point's serving scenario under each policy at each rate (see serving.rates.sweep).
    Raises EmptyResultError when no request completes in any run, naming the rejection reasons.

    workers / cluster: run the (policy, rate) points on a local process pool of that many workers
    (None: every CPU; 1: here, one after another) or on a Dask cluster (an address or a Client), as
    presentation.parallel does; the results are the same. resume_in: an output folder in which
    finished points are kept until the outputs are written (an interrupted run resumes from them;
    `finish_resume` removes them)."""
    from .parallel import PointStore, run_points

    setup = build_serving(op, seed=seed)
    store = None
    if resume_in is not None:
        store = PointStore(resume_in, {"command": "simulate", "scenario": op.scenario.to_dict() if op.scenario else op.name,
                                       "rates": rates, "policies": policies, "seed": seed})

    def mapper(fn, shared, points, prog):
        return run_points(fn, shared, points, workers=workers, cluster=cluster, store=store, progress=prog)

    table, results = sweep(setup, rates=rates, policies=policies, progress=progress, mapper=mapper)
    if int(table["n_done"].sum()) == 0:
        reasons = pd.concat([r.requests["reject_reason"] for r in results.values()])
        top = reasons[reasons != ""].value_counts().head(3)
        raise EmptyResultError(f"scenario {op.name!r}: no request of workload {setup.workload.source!r} completed in any run"
                               + (": rejected as " + "; ".join(f"{k} ({v})" for k, v in top.items()) if len(top) else ""))
    base = table.attrs.get("baseline_policy")
    crossovers = {}
    if base is not None and table["rate_per_s"].notna().sum() > 1:
        crossovers = {p: crossover_rate(table, p) for p in dict.fromkeys(table["policy"]) if p != base}
    switch_off = recommended_switch_off(op) if op.speculative and op.acceptance.model is not None else None
    return ServingComparison(point=op, setup=setup, table=table, results=results, crossovers=crossovers,
                             switch_off=switch_off, store=store)


def finish_resume(c: "ServingComparison") -> None:
    """The outputs are written: drop the finished points kept for resuming."""
    if c.store is not None:
        c.store.clear()


def write_comparison(c: ServingComparison, out, *, plots: bool = True) -> None:
    """summary.csv, batch_sizes.csv, one requests_<policy>_rate<r>.csv per run and the serving plots
    into `out` (a presentation.output.OutputDir)."""
    c.table.to_csv(out.file("summary.csv"), index=False)
    sizes = []
    for (name, rate), res in c.results.items():
        tag = "trace" if rate is None else f"{rate:g}"
        res.requests.to_csv(out.file(f"requests_{name}_rate{tag}.csv"), index=False)
        if len(res.run.roles) > 1:  # a fleet: one row per replica
            res.replicas().to_csv(out.file(f"replicas_{name}_rate{tag}.csv"), index=False)
        sizes.append(res.batch_size_distribution().assign(policy=name, rate_per_s=rate))
    pd.concat(sizes, ignore_index=True).to_csv(out.file("batch_sizes.csv"), index=False)
    if plots and c.table["rate_per_s"].notna().sum() > 1:
        from .figures import serving_figures

        serving_figures(c.table, out, crossovers=c.crossovers, title=c.point.name, slo=c.setup.slo)


__all__ = ["ServingComparison", "compare_policies", "write_comparison", "finish_resume"]
