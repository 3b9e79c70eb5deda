"""Which batch-size gate to deploy: candidate gates simulated under the scenario's workload, and the
one closest to the best policy at every rate.

The analytic switch-off point (`threshold.recommended_switch_off`, under the workload) is where a
steady-state iteration stops paying; a real queue fluctuates around it, so the gate to deploy is
chosen by simulation. Candidates are vLLM-style `disable_by_batch_size` gates at 0.5, 0.75, 1, 1.25,
1.5 and 2 times the analytic point (clipped to 2..max_num_seqs), speculation never on, speculation
always on, and the scenario's own gates. They run beside every other policy of the scenario's
`[policies]` table, at every rate of the scenario (or the rates given), on the same arrivals.

Ranking. At one rate, let A* be the best SLO attainment any simulated policy reaches (the share of
requests meeting both the TTFT and the TPOT limit) and T* the lowest p50 TPOT among the policies
whose attainment is within TOL_ATTAINMENT of A*. A policy's regret there is

    max((A* − A) / TOL_ATTAINMENT, (T / T* − 1) / TOL_TPOT, 0)

so regret ≤ 1 means "no worse than the best policy the simulator found at this rate", within 2
points of attainment and 5 % of p50 TPOT. The chosen gate minimises the worst regret over the rates
(ties: the smaller total regret, then the lower mean p50 TPOT). The evaluation reports each
policy's regret at each rate, so whether the chosen gate is within tolerance everywhere is on the
page, not assumed.

A gate at G behaves exactly like speculation always on while the running batch stays below G, so
the always-on run records the largest running batch its policy was shown, and a gate above that
batch is not simulated again: its run is the always-on run (`tests/test_advise.py` checks the
identity on the engine).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ..errors import EmptyResultError, SpecError
from ..serving import ServingSetup
from ..serving.policies import DisableByBatchSize, Never, StaticK
from ..serving.rates import add_speedups, run_one
from .progress import ProgressSink, progress_or_null

TOL_ATTAINMENT = 0.02
TOL_TPOT = 0.05
GATE_FACTORS = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)


class WatchedStaticK:
    """Speculation always on with K drafts (StaticK), recording the largest running batch the
    policy was shown: a gate above it would never have tripped, so its run is this one."""

    sticky_off = False

    def __init__(self, *, k: int, name: str):
        self.k = int(k)
        self.name = name
        self.max_running = 0

    @property
    def k_reserved(self) -> int:
        return self.k

    def __call__(self, obs) -> int:
        if obs.n_running > self.max_running:
            self.max_running = obs.n_running
        return self.k


def gate_thresholds(batch_off: int | None, *, max_num_seqs: int, factors=GATE_FACTORS) -> list[int]:
    """Candidate gate thresholds around the analytic switch-off batch (see the module docstring).
    batch_off None (pays at every batch examined): gates at a quarter and half of max_num_seqs;
    batch_off <= 1 (never pays): small gates 2, 4, 8, in case a queue's mix pays where the steady
    state does not."""
    if batch_off is None:
        raw = [max_num_seqs // 4, max_num_seqs // 2]
    elif batch_off <= 1:
        raw = [2, 4, 8]
    else:
        raw = [int(round(batch_off * f)) for f in factors]
    return sorted({min(max(int(g), 2), max_num_seqs) for g in raw})


def _policy_kind(p, k: int) -> tuple[str, int | None] | None:
    """('never'|'static'|'gate', threshold) for policies of the gate family at the point's K."""
    if isinstance(p, Never):
        return "never", None
    if isinstance(p, StaticK) and p.k == k:
        return "static", None
    if isinstance(p, DisableByBatchSize) and p.k == k and not p.sticky:
        return "gate", int(p.threshold)
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class GateEvaluation:
    """The candidates and the scenario's policies simulated at every rate, ranked.

    table: one row per (policy, rate) with the run's summary numbers, speedups against 'never',
    `kind` (never / static / gate / other), `threshold`, `regret`, `within_tolerance`, `reused`
    (True: a gate above the always-on run's largest batch, whose run is the always-on run).
    results: SimulationResult by (policy, rate). chosen: the gate-family policy to deploy.
    analytic_batch_off: the analytic switch-off the candidates surround."""

    table: pd.DataFrame
    results: dict
    chosen: str
    chosen_kind: str
    chosen_threshold: int | None
    rates: tuple
    n_requests: int
    n_requests_total: int
    workload_source: str
    analytic_batch_off: int | None
    slo: object
    tol_attainment: float = TOL_ATTAINMENT
    tol_tpot: float = TOL_TPOT
    notes: tuple = field(default_factory=tuple)

    @property
    def worst_regret(self) -> float:
        return float(self.table.loc[self.table["policy"] == self.chosen, "regret"].max())

    def best_by_rate(self) -> pd.DataFrame:
        """At each rate the policy with the lowest regret (the best the simulator found)."""
        t = self.table.sort_values(["rate_per_s", "regret", "tpot_p50_s"])
        return t.groupby("rate_per_s", dropna=False, sort=True).head(1)

    def to_dict(self, *, runs: bool = True) -> dict:
        """The evaluation as JSON-ready values; runs=False leaves out the per-run rows (the report keeps
        them in serving_gates.csv)."""
        out = {"chosen": self.chosen, "chosen_kind": self.chosen_kind, "chosen_threshold": self.chosen_threshold,
                "rates": list(self.rates), "n_requests": self.n_requests, "n_requests_total": self.n_requests_total,
                "workload": self.workload_source, "analytic_batch_off": self.analytic_batch_off,
                "worst_regret": self.worst_regret, "tol_attainment": self.tol_attainment, "tol_tpot": self.tol_tpot,
                "slo": {"ttft_s": self.slo.ttft_s, "tpot_s": self.slo.tpot_s}, "notes": list(self.notes)}
        if runs:
            out["runs"] = self.table.drop(columns=[c for c in self.table.columns if c.startswith("_")]).to_dict("records")
        return out


def truncated(setup: ServingSetup, n_requests: int | None) -> ServingSetup:
    """The setup with only the first n requests of its workload (None: all of them)."""
    if n_requests is None or n_requests >= setup.workload.n_requests:
        return setup
    if isinstance(n_requests, bool) or not isinstance(n_requests, int) or n_requests < 1:
        raise SpecError(f"--requests {n_requests!r}: expected an integer >= 1")
    w = setup.workload.head(n_requests)
    w = replace(w, source=f"{w.source}, first {n_requests} requests")
    return replace(setup, workload=w)


def regrets(table: pd.DataFrame, *, tol_attainment: float = TOL_ATTAINMENT, tol_tpot: float = TOL_TPOT) -> pd.DataFrame:
    """The table with `regret` and `within_tolerance` per row (see the module docstring)."""
    out = table.copy()
    out["_rate_key"] = out["rate_per_s"].astype(float).fillna(-1.0)
    att = out["slo_attainment_frac"].astype(float).fillna(0.0)
    tpot = out["tpot_p50_s"].astype(float).fillna(np.inf)
    regret = np.zeros(len(out))
    for key, idx in out.groupby("_rate_key").groups.items():
        a, t = att.loc[idx].to_numpy(), tpot.loc[idx].to_numpy()
        best_a = a.max()
        eligible = a >= best_a - tol_attainment - 1e-12
        best_t = t[eligible].min()
        with np.errstate(invalid="ignore", divide="ignore"):
            r_t = np.where(np.isfinite(t), t / best_t - 1.0, np.inf) / tol_tpot if np.isfinite(best_t) else np.zeros(a.size)
        r = np.maximum(np.maximum((best_a - a) / tol_attainment, r_t), 0.0)
        regret[out.index.get_indexer(idx)] = r
    out["regret"] = regret
    out["within_tolerance"] = out["regret"] <= 1.0 + 1e-9
    return out.drop(columns=["_rate_key"])


def evaluate_gates(setup: ServingSetup, *, analytic_batch_off: int | None, rates=None, n_requests: int | None = None,
                   extra_thresholds=(), progress: ProgressSink | None = None) -> GateEvaluation:
    """Simulate the gate candidates and the scenario's policies at every rate and rank them (see the
    module docstring). rates: requests/s (default: the scenario's [workload] rates, else the workload
    as given); n_requests: simulate only the first n requests of the workload."""
    op = setup.point
    if not op.speculative:
        raise SpecError(f"scenario {op.name!r}: method {op.method!r} drafts nothing; no gate to choose")
    prog = progress_or_null(progress)
    total = setup.workload.n_requests
    setup = truncated(setup, n_requests)
    rates = tuple(rates) if rates else (tuple(setup.rates) or (None,))
    k = op.k
    max_seqs = setup.config.max_num_seqs
    thresholds = set(gate_thresholds(analytic_batch_off, max_num_seqs=max_seqs))
    thresholds |= {int(g) for g in extra_thresholds}
    kinds: dict[str, tuple[str, int | None]] = {}
    policies: dict = {}
    others: dict = {}
    for name, p in setup.policies.items():
        kind = _policy_kind(p, k)
        if kind is None:
            others[name] = p
        elif kind[0] == "gate":
            thresholds.discard(kind[1])
            kinds[name] = kind
            policies[name] = p
        elif kind[0] not in [v[0] for v in kinds.values()]:
            kinds[name] = kind
            policies[name] = p
        else:  # a second never / always-on policy: simulated, not a candidate
            others[name] = p
    never = next((n for n, v in kinds.items() if v[0] == "never"), None)
    if never is None:
        never = "never"
        kinds[never], policies[never] = ("never", None), Never(name=never)
    static = next((n for n, v in kinds.items() if v[0] == "static"), None)
    if static is None:
        static = f"static_k{k}"
        kinds[static], policies[static] = ("static", None), StaticK(k=k, name=static)
    for g in sorted(thresholds):
        name = f"gate_bs{g}"
        if name in policies or name in others:
            continue
        kinds[name], policies[name] = ("gate", g), DisableByBatchSize(k=k, threshold=g, name=name)
    order = [never, static] + sorted((n for n in kinds if kinds[n][0] == "gate"), key=lambda n: kinds[n][1]) \
        + list(others)
    all_policies = {**policies, **others}
    run_setup = replace(setup, policies=all_policies)
    prog.add(len(rates) * len(order))
    results: dict = {}
    rows = []
    for rate in rates:
        label = "as given" if rate is None else f"{rate:g} req/s"
        watched = WatchedStaticK(k=k, name=static)
        prog.phase(f"{static} @ {label}")
        res_static = _run(run_setup, static, rate, policy=watched)
        for name in order:
            kind, thr = kinds.get(name, ("other", None))
            reused = False
            if name == static:
                res = res_static
            elif kind == "gate" and thr > watched.max_running:
                res, reused = res_static, True
            else:
                prog.phase(f"{name} @ {label}")
                res = _run(run_setup, name, rate)
            results[(name, rate)] = res
            row = {key: v for key, v in res.summary.items() if not isinstance(v, list)}
            row.update(policy=name, rate_per_s=rate, kind=kind, threshold=thr, reused=reused)
            rows.append(row)
            prog.step(text=f"{name} @ {label}")
    table = add_speedups(pd.DataFrame(rows), {n: all_policies[n] for n in order})
    if int(table["n_done"].sum()) == 0:
        raise EmptyResultError(f"scenario {op.name!r}: no request of workload {setup.workload.source!r} completed in any simulated run")
    table = regrets(table)
    chosen = _choose(table, [n for n in order if n in kinds])
    notes = []
    if n_requests is not None and n_requests < total:
        notes.append(f"simulated the first {n_requests} of the workload's {total} requests (--requests)")
    return GateEvaluation(table=table, results=results, chosen=chosen, chosen_kind=kinds[chosen][0],
                          chosen_threshold=kinds[chosen][1], rates=rates, n_requests=setup.workload.n_requests,
                          n_requests_total=total, workload_source=setup.workload.source,
                          analytic_batch_off=analytic_batch_off, slo=setup.slo, notes=tuple(notes))


def _run(setup: ServingSetup, name: str, rate, *, policy=None):
    if policy is None:
        return run_one(setup, name, rate)
    return run_one(replace(setup, policies={**setup.policies, name: policy}), name, rate)


def _choose(table: pd.DataFrame, names: list[str]) -> str:
    """The gate-family policy with the smallest worst regret over the rates (ties: total regret,
    then mean p50 TPOT, then the order given)."""
    best, best_key = names[0], None
    for i, n in enumerate(names):
        t = table[table["policy"] == n]
        key = (round(float(t["regret"].max()), 9), round(float(t["regret"].sum()), 9),
               float(t["tpot_p50_s"].astype(float).fillna(np.inf).mean()), i)
        if best_key is None or key < best_key:
            best, best_key = n, key
    return best


__all__ = ["GateEvaluation", "evaluate_gates", "gate_thresholds", "regrets", "truncated", "WatchedStaticK",
           "TOL_ATTAINMENT", "TOL_TPOT"]
