"""Calibrate a deployment from its own load sweep, then predict the rest of the curve.

For each sweep (`calibration.load`) the stack's figures are fitted on the sweep's `fit` rows:
1. the plain rows fix the fixed and per-sequence costs: every iteration's device time scales by s
   (in [0.1, 20]) and gains p ≥ 0 seconds per sequence (s alone when the plain fit rows hold one
   load), by robust least squares on log(predicted / measured) of every metric the rows give. The
   terms are device-side because host work that hides behind the device (an overlap scheduler)
   could not move a plain curve at all. A plain sequence emits one token an iteration, so the plain
   curve cannot say whether p is paid per sequence or per emitted token; the stack's
   `per_token_share` load regime (`specs.regimes`; `load_share` fits it across sweeps, leave one
   sweep out) splits it: (1 − share)·p per sequence (`device_per_seq_us`) and share·p per emitted
   token (`device_per_token_us`, τ of them a speculating sequence a cycle);
2. the speculative fit rows fix the speculation terms: the per-cycle overhead (`cycle_overhead_us`)
   moves by Δcycle (and, with two or more speculative fit loads, the host work per speculating
   sequence, `spec_per_seq_us`, by Δspec), on the measured speedups (or, where no plain row shares
   the load, the metrics); a sweep whose speculative fit rows give no acceptance (τ, α) has its
   i.i.d. α fitted instead — with Δcycle when two or more loads are there to separate them, α
   alone from one row.
Every figure stays ≥ 0. The calibrated stack is the sweep's stack with those figures, its device
terms in a `calibration` load regime (`specs.regimes`) and its other load regimes at the sweep's
`stack_version`; every row, fit and check, is then predicted with it. The deployment carries the
device terms (`cost.deployment.Deployment.calibrated_device_s`), so the serving simulator, the
analytical cycle (predict) and the switch-off (advise, threshold) price the same iteration.

How a row is predicted: concurrency rows by the serving simulator, a closed loop of `load` users
(`n_users` when the row gives it) with think time 0, fixed prompt and output lengths, `n_requests`
requests (default 4 a user);
rate rows by the simulator with Poisson arrivals at `load` requests/s (default 100 requests);
batch rows by one iteration of `load` sequences decoding after `context_len` cached tokens
(`ServingCost` on the uniform mix: the analytical cycle plus the load regimes). Speculative rows
run the family's drafter at K (or the tree) under the static-K policy, plain rows without a
drafter; a row's speedup is its metric against the simulated plain run at the same load
(throughput speculative / plain, latencies plain / speculative).

Fitting by re-timing. In a closed loop without think time the sequence of iterations — which
requests run, prefill and draft in each — does not depend on how long the iterations take, so one
simulation per row records each iteration's device and host seconds, batch, emitted tokens and mode,
and any other value of the terms re-times the same iterations exactly (device' = s·device + p_seq·n +
p_tok·emitted, host' = host + Δcycle + Δspec·n_spec when speculating; the iteration lasts device' +
host', or max(device', host') where the stack overlaps them). Rate rows are simulated again for every
trial (their queueing depends on time), with finite-difference steps of 2 % of each term's scale
(a machine-precision step can move one request to another iteration).
The acceptance changes the iterations themselves, so a fitted α re-simulates its rows per trial.

relative_error = predicted / measured − 1: of the speedup on a speculative row, of the row's
metric on a plain one (of its first metric: throughput, TPOT, end-to-end latency).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import SpecError
from ..serving import build_serving, simulate
from ..serving.mix import IterationMix
from ..serving.policies import Never, StaticK
from ..cost.deployment import calibration_priced_by
from ..specs.catalog import to_toml
from ..specs.scenario import Scenario
from ..specs.serving_tables import DEFAULT_MAX_NUM_SEQS
from ..specs.stacks import HostCost, StackProfile, load_stack, stack_from_dict
from ..speculation.operating_point import resolve
from ..speculation.predict import tokens_per_cycle_at
from .load import (DEFAULT_RATE_REQUESTS, DEFAULT_REQUESTS_PER_USER, METRICS, LoadRow, LoadSweep)

ROLE_MODES = ("table", "plain", "plain+lowest", "plain+2lowest")
SLOWDOWN = 0.95  # a measured speedup below this is a slowdown (issue 25)
SLOWDOWN_BAR = 1.05  # ... and counts as predicted when the prediction is below this
MAX_TERM_S = 1.0  # no term fitted past a second an iteration (a unit or load mistake)
MIN_SCALE, MAX_SCALE = 0.1, 20.0  # the device's fitted scale stays within these


@dataclass(frozen=True, slots=True, kw_only=True)
class Terms:
    """The fitted figures: the device's scale and per-sequence seconds (the plain curve's fixed and
    per-sequence costs), and the changes of the stack's per-cycle and per-speculating-sequence host
    work (the speculation terms)."""

    device_scale: float = 1.0
    device_per_seq_s: float = 0.0
    device_per_token_s: float = 0.0
    cycle_s: float = 0.0
    spec_per_seq_s: float = 0.0

    def to_dict(self) -> dict:
        return {"device_scale": self.device_scale, "device_per_seq_us": self.device_per_seq_s * 1e6,
                "device_per_token_us": self.device_per_token_s * 1e6,
                "delta_cycle_overhead_us": self.cycle_s * 1e6, "delta_spec_per_seq_us": self.spec_per_seq_s * 1e6}


def calibrated_stack(base: StackProfile, terms: Terms, *, name: str | None = None, provenance: dict | None = None,
                     priced_by: str = "roofline") -> StackProfile:
    """The base stack with the fitted figures: its per-cycle and per-speculating-sequence host work
    moved, and a `calibration` regime (specs.regimes) carrying the device terms, where they came from
    and what priced the target's passes they were fitted through (`sweep_priced_by`): the terms hold on
    that source only (`speculation.operating_point.calibration_for_source`)."""
    from ..specs.regimes import entry_from_dict

    h = base.host
    host = replace(h, spec_per_seq_s=max(h.spec_per_seq_s + terms.spec_per_seq_s, 0.0))
    prov = {"sweep": "(fitting)", "file": "(fitting)", "load_kind": "concurrency", "load_min": 1.0, "load_max": 1.0,
            "n_fit_rows": 0, "fit_error_frac": 0.0, "command": "(fitting)"}
    prov.update(provenance or {})
    entry = entry_from_dict({"property": "calibration", "versions": "*", "status": "fitted",
                             "source": "specsim calibrate load", **prov, "device_scale": terms.device_scale,
                             "device_per_seq_us": terms.device_per_seq_s * 1e6,
                             "device_per_token_us": terms.device_per_token_s * 1e6, "priced_by": priced_by},
                            where=f"stack {base.id!r}")
    regimes = tuple(e for e in base.regimes if e.property != "calibration") + (entry,)
    return replace(base, host=host, cycle_overhead_s=max(base.cycle_overhead_s + terms.cycle_s, 0.0),
                   name=name or base.name, regimes=regimes)


# ---- one row, simulated -------------------------------------------------------------------------

@dataclass(slots=True)
class RowRun:
    """One simulated row: its metrics and, for re-timing, every iteration's parts."""

    metrics: dict
    device_s: np.ndarray = None
    host_s: np.ndarray = None
    n_seqs: np.ndarray = None
    spec: np.ndarray = None
    n_spec: np.ndarray = None
    n_emit: np.ndarray = None
    overlapped: np.ndarray = None
    first_idx: np.ndarray = None
    finish_idx: np.ndarray = None
    arrival_idx: np.ndarray = None
    out_tokens: np.ndarray = None
    emitted: float = 0.0
    retimable: bool = False
    tau: float | None = None  # batch rows: tokens per cycle

    def retime(self, terms: Terms, base: Terms) -> dict:
        """The metrics with the figures `terms` instead of the `base` the run was simulated with."""
        if not self.retimable:
            raise SpecError("internal: a rate row cannot be re-timed")
        d_cyc, d_sps = terms.cycle_s - base.cycle_s, terms.spec_per_seq_s - base.spec_per_seq_s
        host = np.maximum(self.host_s + d_cyc * self.spec + d_sps * self.n_spec, 0.0)
        emit = self.n_emit if self.n_emit is not None else self.n_seqs
        device = ((self.device_s - base.device_per_seq_s * self.n_seqs - base.device_per_token_s * emit)
                  * (terms.device_scale / base.device_scale)
                  + terms.device_per_seq_s * self.n_seqs + terms.device_per_token_s * emit)
        dur = np.where(self.overlapped, np.maximum(device, host), device + host)
        if self.tau is not None:  # a batch row: one iteration
            it = float(dur[0])
            tpot = it / self.tau
            n = float(self.n_seqs[0])
            return {"tpot_s": tpot, "output_tokens_per_s": n / tpot, "e2e_latency_s": float("nan")}
        cum = np.concatenate([[0.0], np.cumsum(dur)])
        first, fin, arr = cum[self.first_idx + 1], cum[self.finish_idx + 1], cum[self.arrival_idx + 1]
        out = self.out_tokens
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(out > 1, (fin - first) / (out - 1), np.nan)
        makespan = float(cum[-1])
        return {"tpot_s": float(np.nanmean(tpot)), "e2e_latency_s": float(np.mean(fin - arr)),
                "output_tokens_per_s": self.emitted / makespan if makespan > 0 else float("nan")}


class _Recorder:
    """A ServingCost that records every iteration's parts the engine runs (breakdown), in order."""

    def __init__(self, cost):
        self.cost = cost
        self.rows: list = []

    def __call__(self, mix):
        return self.cost(mix)

    def breakdown(self, mix):
        dev, host, c, ov = self.cost.parts(mix)
        ns = mix.n_spec if mix.n_spec is not None else int(np.count_nonzero(mix.draft_k))
        # a cycle pays the per-cycle figure even where the proposer found nothing for any row
        cycle = ns > 0 or bool(mix.speculating)
        self.rows.append((dev, host, mix.q_lens.size, cycle, ns, ov, self.cost.emitted_tokens(mix)))
        return ((dev if dev > host else host) if ov else dev + host), c


def _acceptance_kwargs(acc: dict) -> dict:
    if acc.get("tau") is not None:
        return {"tau": float(acc["tau"])}
    if acc.get("alpha") is not None:
        return {"alpha": float(acc["alpha"])}
    return {}


def row_scenario(sweep: LoadSweep, row: LoadRow, *, speculative: bool, acceptance: dict | None = None,
                 stack: str | None = None) -> Scenario:
    """The scenario one row runs: the sweep's configuration at the row's load."""
    kw = dict(name=f"{sweep.name}@{row.load:g}", hardware=sweep.hardware, target=sweep.target, tp=sweep.n_devices,
              stack=stack or sweep.stack, temperature=sweep.temperature)
    given = set(kw)
    if sweep.stack_version:
        kw["stack_version"] = sweep.stack_version
    if sweep.target_dtype:
        kw["target_dtype"] = sweep.target_dtype
    if sweep.kv_cache_dtype:
        kw["kv_cache_dtype"] = sweep.kv_cache_dtype
    kw["cost_source"] = sweep.cost_source
    sections: dict = {}
    if speculative:
        kw.update(method=sweep.method, k=sweep.k)
        if sweep.drafter:
            kw["drafter"] = sweep.drafter
        if sweep.tree_size is not None:
            kw["tree_size"] = sweep.tree_size
        kw.update(_acceptance_kwargs(acceptance or {}))
        if sweep.drafter_options:
            sections["drafter_options"] = dict(sweep.drafter_options)
        if row.draft_frac is not None:  # measured at this load, like its tau
            sections["drafter_options"] = {**sections.get("drafter_options", {}), "draft_frac": float(row.draft_frac)}
    else:
        kw.update(method="none", k=0)
    if sweep.load_kind == "batch":
        kw.update(batch_size=int(row.load), context_len=int(row.context_len))
    else:
        kw["context_len"] = int(row.prompt_tokens + row.output_tokens)
        lengths = {"prompt": {"kind": "fixed", "tokens": int(row.prompt_tokens)},
                   "output": {"kind": "fixed", "tokens": int(row.output_tokens)}}
        if sweep.load_kind == "concurrency":
            users = int(row.n_users or row.load)
            n = row.n_requests or DEFAULT_REQUESTS_PER_USER * users
            sections["workload"] = {"kind": "closed_loop", "n_users": users, "n_requests": int(n), **lengths}
            if row.max_num_seqs is not None:  # the launch set the limit
                sections["engine"] = {"max_num_seqs": int(row.max_num_seqs)}
            elif row.load > DEFAULT_MAX_NUM_SEQS:
                # a launch whose load passes the engine's default is read as one that raised the limit to it
                sections["engine"] = {"max_num_seqs": int(row.load)}
            # else the engine's default, which a stack's spec_max_running regime lowers for a speculative row
        else:
            n = row.n_requests or DEFAULT_RATE_REQUESTS
            sections["workload"] = {"kind": "poisson", "rate_per_s": float(row.load), "n_requests": int(n), **lengths}
    given |= set(kw)
    return Scenario(**kw, sections=sections, path=f"{sweep.file} sweep {sweep.name!r} line {row.line}",
                    given=frozenset(given))


def run_row(sweep: LoadSweep, row: LoadRow, *, stack: StackProfile, speculative: bool, acceptance: dict | None = None,
            seed: int = 0) -> RowRun:
    """Simulate (or, a batch row, price) one row with `stack`; record what re-timing needs."""
    sc = row_scenario(sweep, row, speculative=speculative, acceptance=acceptance)
    op = resolve(sc, stack_profile=stack)
    if sweep.load_kind == "batch":
        from ..serving.cost import ServingCost

        cost = ServingCost(op)
        b, ctx = int(row.load), int(row.context_len)
        if speculative:
            k = op.k
            q = op.verify_q_len
            tau = float(tokens_per_cycle_at(op))
            tree = op.tree_size if op.is_tree else 0
            mix = IterationMix(np.full(b, q, dtype=np.int64), np.full(b, ctx, dtype=np.int64),
                               np.full(b, q, dtype=np.int64), np.full(b, k, dtype=np.int64), np.zeros(b, dtype=bool),
                               tree, n_spec=b, uniform_q=q)
        else:
            tau = 1.0
            mix = IterationMix(np.ones(b, dtype=np.int64), np.full(b, ctx, dtype=np.int64), np.ones(b, dtype=np.int64),
                               np.zeros(b, dtype=np.int64), np.zeros(b, dtype=bool), 0, n_spec=0, uniform_q=1)
        dev, host, _c, ov = cost.parts(mix)
        run = RowRun(metrics={}, device_s=np.array([dev]), host_s=np.array([host]), n_seqs=np.array([float(b)]),
                     spec=np.array([1.0 if speculative else 0.0]), n_spec=np.array([float(b) if speculative else 0.0]),
                     n_emit=np.array([float(b) * tau]), overlapped=np.array([ov]), retimable=True, tau=tau)
        run.metrics = run.retime(Terms(), Terms())
        return run
    setup = build_serving(op, seed=seed)
    rec = _Recorder(setup.cost)
    policy = StaticK(k=op.k) if speculative else Never()
    res = simulate(setup.workload, config=setup.config_for(policy), cost=rec, policy=policy,
                   acceptance=setup.acceptance, seed=seed, tree_size=setup.tree_size, acceptance_factor=setup.acceptance_factor, fleet=setup.fleet,
                   drafter_cache=setup.drafter_cache, draft_frac=setup.draft_frac)
    s = res.summary
    if s["n_done"] < s["n_requests"]:
        raise SpecError(f"{sweep.file}: line {row.line}: sweep {sweep.name!r} at load {row.load:g}: only "
                        f"{s['n_done']} of {s['n_requests']} simulated requests completed (rejected "
                        f"{s['n_rejected']}): the configuration does not hold this load")
    metrics = {"tpot_s": s["tpot_mean_s"], "e2e_latency_s": s["e2e_mean_s"],
               "output_tokens_per_s": s["throughput_tokens_per_s"]}
    run = RowRun(metrics=metrics)
    if sweep.load_kind != "concurrency" or not rec.rows:
        return run
    parts = np.array([r[:5] for r in rec.rows], dtype=float)
    run.device_s, run.host_s, run.n_seqs, run.spec, run.n_spec = (parts[:, 0], parts[:, 1], parts[:, 2], parts[:, 3],
                                                                   parts[:, 4])
    run.overlapped = np.array([r[5] for r in rec.rows], dtype=bool)
    run.n_emit = np.array([r[6] for r in rec.rows], dtype=float)
    cum = np.cumsum(np.where(run.overlapped, np.maximum(run.device_s, run.host_s), run.device_s + run.host_s))
    req = res.requests
    done = req["status"].astype(str).to_numpy() == "done"
    if not done.all() or res.steps["swap_s"].sum() > 0 or len(cum) != len(res.steps):
        return run  # the run does not re-time exactly: left to full simulation

    def index(t):
        i = np.searchsorted(cum, np.asarray(t, dtype=float) - 1e-12 * max(cum[-1], 1.0))
        ok = np.isclose(cum[np.clip(i, 0, len(cum) - 1)], t, rtol=1e-9, atol=1e-12)
        return np.where(np.asarray(t) <= 1e-15, -1, i), ok | (np.asarray(t) <= 1e-15)

    fi, ok1 = index(req["first_token_at_s"].to_numpy())
    ff, ok2 = index(req["finish_at_s"].to_numpy())
    fa, ok3 = index(req["arrival_at_s"].to_numpy())
    if not (ok1.all() and ok2.all() and ok3.all()):
        return run
    run.first_idx, run.finish_idx, run.arrival_idx = fi, ff, fa
    run.out_tokens = req["output_tokens"].to_numpy().astype(float)
    run.emitted = float(res.summary["output_tokens"])
    run.retimable = True
    return run


# ---- the fit ------------------------------------------------------------------------------------

def _metric_residuals(pred: dict, row: LoadRow) -> list[float]:
    out = []
    for m, v in row.metrics.items():
        p = pred.get(m)
        if p is not None and math.isfinite(p) and p > 0:
            out.append(math.log(p / v))
    return out


def _speedup(plain: dict, spec: dict, metric: str) -> float:
    if metric == "output_tokens_per_s":
        return spec[metric] / plain[metric]
    return plain[metric] / spec[metric]


def _first_metric(row: LoadRow) -> str | None:
    for m in METRICS:
        if row.metric(m) is not None:
            return m
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepFit:
    """One sweep's calibration and its rows predicted."""

    sweep: LoadSweep
    stack: StackProfile
    terms: Terms
    alpha: float | None
    fitted: tuple
    rows: pd.DataFrame
    fit_error: float | None
    check_error: float | None
    notes: tuple = ()
    token_share: float = 0.0
    spec_seq_extra_us: float = 0.0

    def to_dict(self) -> dict:
        sw = self.sweep
        fit_rows = [r for r in sw.rows if r.role == "fit"]
        lo, hi = sw.load_range(fit_rows) if fit_rows else sw.load_range()
        return {"sweep": sw.name, "file": sw.file, "stack": sw.stack, "stack_version": sw.stack_version,
                "hardware": sw.hardware, "n_devices": sw.n_devices, "target": sw.target, "method": sw.method,
                "k": sw.k, "tree_size": sw.tree_size, "load_kind": sw.load_kind, "fitted": list(self.fitted),
                **self.terms.to_dict(), "token_share": self.token_share,
                "spec_seq_extra_us": self.spec_seq_extra_us, "alpha": self.alpha, "fit_load_min": lo, "fit_load_max": hi,
                "n_rows": len(sw.rows), "n_fit_rows": len(fit_rows),
                "fit_median_relative_error": self.fit_error, "check_median_relative_error": self.check_error,
                "regimes": list(self.stack_regime_lines), "notes": list(self.notes)}

    @property
    def stack_regime_lines(self) -> list[str]:
        from ..specs.regimes import resolve_regimes

        return resolve_regimes(self.stack.regimes, version=self.sweep.stack_version).lines()


def assign_roles(sweep: LoadSweep, mode: str) -> LoadSweep:
    """The sweep with its roles as `mode` says: "table" as written; "plain": plain rows fit, speculative
    rows check; "plain+lowest": the plain rows and the lowest-load speculative row fit, the rest check;
    "plain+2lowest": the two lowest-load speculative rows fit with the plain ones."""
    if mode == "table":
        return sweep
    if mode not in ROLE_MODES:
        raise SpecError(f"--roles {mode!r}: expected one of {', '.join(ROLE_MODES)}")
    spec_loads = sorted({r.load for r in sweep.speculative()})
    lowest = set(spec_loads[: {"plain": 0, "plain+lowest": 1, "plain+2lowest": 2}[mode]])
    rows = []
    for r in sweep.rows:
        role = "fit" if (not r.speculative or r.load in lowest) else "check"
        rows.append(replace(r, role=role))
    return replace(sweep, rows=tuple(rows))


ROBUST_SCALE = 0.1  # residuals (log ratios) beyond about 10 % weigh as their absolute value, not its square


NOISY_STEP = 0.02  # finite-difference step, in units of each term's scale, where rows are re-simulated


def _least_squares(fun, x0, lo, hi, scale=None, noisy: bool = False, *, what: str = "fit", names=()):
    """Bounded robust least squares (soft L1 on the log ratios, as `calibrate steps` fits).

    noisy: the residuals come from re-simulating rows whose queueing depends on time (rate rows),
    where a change of one part in 10^8 can move a request to another iteration: the terms are then
    searched in units of their scale with central differences of NOISY_STEP of it (20 µs for a
    seconds term, 0.2 % for the log scale) instead of the default machine-precision steps.

    Returns (x, notes): notes say where it did not converge or ended on a bound (`_convergence`).
    Residuals that are not finite at the start are refused (`what` names the fit), not fitted."""
    from scipy.optimize import least_squares

    x0 = np.clip(np.asarray(x0, dtype=float), lo, hi)
    xs = np.asarray(scale if scale is not None else np.full(len(x0), 1e-3), dtype=float)
    r0 = np.asarray(fun(x0), dtype=float)
    if r0.size == 0 or not np.all(np.isfinite(r0)):
        raise SpecError(f"{what}: the rows give no finite residual at the start of the fit "
                        f"({'none' if r0.size == 0 else f'{int(np.count_nonzero(~np.isfinite(r0)))} of {r0.size} not finite'}): "
                        f"expected metrics the simulation can predict (a TPOT needs two or more output tokens)")
    if not noisy:
        res = least_squares(fun, x0, bounds=(lo, hi), x_scale=xs, diff_step=None, loss="soft_l1",
                            f_scale=ROBUST_SCALE, xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=200)
        return res.x, _convergence(res, what, names, lo, hi)
    lo_a, hi_a = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    steps = NOISY_STEP * xs
    # a term starting on its bound starts one scale inside it: the trust region starts at |x0 / scale|,
    # and a start on the bound (nudged by 1e-10) would leave it too small to step past the noise
    x0 = np.minimum(np.where(x0 <= lo_a, lo_a + xs, x0), hi_a)

    def jac(x):
        cols = []
        for i, h in enumerate(steps):
            up, down = x.copy(), x.copy()
            up[i], down[i] = min(x[i] + h, hi_a[i]), max(x[i] - h, lo_a[i])
            cols.append((np.asarray(fun(up)) - np.asarray(fun(down))) / (up[i] - down[i]))
        return np.stack(cols, axis=1)

    res = least_squares(fun, x0, jac=jac, bounds=(lo_a, hi_a), x_scale=xs, loss="soft_l1", f_scale=ROBUST_SCALE,
                        xtol=1e-4, ftol=1e-5, gtol=1e-8, max_nfev=25)
    return res.x, _convergence(res, what, names, lo, hi)


def _convergence(res, what: str, names, lo, hi) -> list[str]:
    """What a least-squares result says beyond its x (scipy's OptimizeResult): a note when it stopped
    before its tolerances (status 0: the evaluation cap; -1: bad input) and for each term that ended on
    a bound (the data asked for more than the bound allows: a unit mistake or the wrong hardware)."""
    notes = []
    if res.status <= 0 or not np.all(np.isfinite(res.x)):
        notes.append(f"{what}: the fit did not converge (scipy status {res.status}: {res.message}); its figures are "
                     f"where it stopped after {res.nfev} evaluations")
    for name, v, a, b in zip(names, res.x, np.broadcast_to(lo, res.x.shape), np.broadcast_to(hi, res.x.shape)):
        span = max(abs(b - a), 1e-30)
        if abs(v - b) <= 1e-6 * span:
            notes.append(f"{what}: {name} ended on its upper bound ({_bound_text(name, b)}): the rows ask for more; "
                         f"check their units, the hardware and the target")
        elif abs(v - a) <= 1e-6 * span and a != 0.0:
            notes.append(f"{what}: {name} ended on its lower bound ({_bound_text(name, a)}"
                         + ("" if name == "device_scale" else ": the stack's figure down to 0")
                         + "): the rows are faster than the model allows; check their units, the hardware, the "
                           "target and the acceptance")
    return notes


def _bound_text(name: str, v: float) -> str:
    return f"x{math.exp(v):g}" if name == "device_scale" else f"{v * 1e6:+g} us"


def stack_token_share(stack: StackProfile, version: str | None) -> float:
    """The stack's `per_token_share` load regime at `version` (specs.regimes), 0 without one."""
    from ..specs.regimes import resolve_regimes

    v = resolve_regimes(stack.regimes, version=version, where=f"stack {stack.id!r}").per_token_share
    return 0.0 if v is None else float(v)


def _lines(rows) -> str:
    return ", ".join(str(r.line) for r in rows)


def _located(sweep: LoadSweep, row: LoadRow, column: str | None, exc: SpecError) -> SpecError:
    """`exc` with the file, sweep, line (and column) in front, unless its message names them already."""
    msg = str(exc)
    where = f"{sweep.file}: sweep {sweep.name!r} line {row.line}"
    if f"{sweep.file} sweep {sweep.name!r} line" in msg or msg.startswith(sweep.file):
        return exc
    if column is not None:
        value = getattr(sweep, column) if column != "target_dtype" else sweep.target_dtype
        msg = msg.split(" Known ")[0]  # keep the did-you-mean; the whole catalog is `specsim models list`
        return type(exc)(f"{where}: column {column!r} = {value!r}: {msg}")
    return type(exc)(f"{where}: {msg}")


def check_sweep(sweep: LoadSweep) -> StackProfile:
    """The sweep's stack, once its configuration is known to resolve: the hardware, the target and its
    dtype, and for speculative rows the family, the drafter and K. Checked before any fit, so that a sweep
    whose rows are all `check` rows is refused as a whole rather than every row left unpredicted."""
    from ..specs.hardware import load_hardware
    from ..specs.models import load_model

    first = sweep.rows[0]
    spec = sweep.speculative()
    for column, loader, value, row in (("stack", load_stack, sweep.stack, first),
                                       ("hardware", load_hardware, sweep.hardware, first),
                                       ("target", load_model, sweep.target, first),
                                       ("drafter", load_model, sweep.drafter, spec[0] if spec else first)):
        if value is None:
            continue
        try:
            loaded = loader(value)
        except SpecError as exc:
            raise _located(sweep, row, column, exc) from None
        if column == "stack":
            stack = loaded
    base = calibrated_stack(stack, Terms())
    checks = [(sweep.plain()[0] if sweep.plain() else first, False)] + ([(spec[0], True)] if spec else [])
    for row, speculative in checks:
        acc = row_acceptance(sweep, row, None) if speculative else None
        try:  # an acceptance is needed to resolve; where the fit will find α, any stands in for the check
            resolve(row_scenario(sweep, row, speculative=speculative, acceptance=acc or {"alpha": 0.5}),
                    stack_profile=base)
        except SpecError as exc:
            raise _located(sweep, row, None, exc) from None
    return stack


def sweep_priced_by(sweep: LoadSweep, stack: StackProfile) -> str:
    """The kind of source ("roofline" or "measured", `cost.pricing.source_for`) that prices the sweep's
    target on its deployment with `stack`: what a calibration fitted on the sweep is fitted through."""
    from ..cost.pricing import source_for

    row = (sweep.plain() or sweep.rows)[0]
    op = resolve(row_scenario(sweep, row, speculative=False), stack_profile=stack)
    return source_for(op.target, op.deployment, target=True).kind


def fit_sweep(sweep: LoadSweep, *, seed: int = 0, token_share: float | None = None,
              spec_seq_extra_us: float = 0.0) -> SweepFit:
    """Fit the sweep's stack on its fit rows and predict every row (see the module docstring).
    token_share: the share of the plain curve's per-sequence seconds paid per emitted token (None:
    the stack's `per_token_share` regime at the sweep's version, else 0). spec_seq_extra_us: host
    microseconds a speculating sequence costs a cycle beyond the stack's `spec_per_seq_us`, before
    anything is fitted (`load_share` chooses it leaving the sweep's source out)."""
    where = f"{sweep.file}: sweep {sweep.name!r}"
    base0 = with_spec_seq_extra(check_sweep(sweep), spec_seq_extra_us)
    priced = sweep_priced_by(sweep, base0)
    if token_share is None:
        token_share = stack_token_share(base0, sweep.stack_version)
    if not (0.0 <= token_share <= 1.0):
        raise SpecError(f"token share {token_share!r}: expected a share in [0, 1]")
    token_frac = float(token_share)
    notes: list[str] = []
    fitted: list[str] = []
    plain_fit = [r for r in sweep.plain("fit")]
    spec_fit = [r for r in sweep.speculative("fit")]

    # 1. the plain curve: the device's scale (and per-sequence seconds with two or more loads)
    terms = Terms()
    base = calibrated_stack(base0, terms, priced_by=priced)
    if plain_fit:
        runs = {r.line: run_row(sweep, r, stack=base, speculative=False, seed=seed) for r in plain_fit}
        two = len({r.load for r in plain_fit}) >= 2

        def at(x):
            p = float(x[1]) if two else 0.0
            return Terms(device_scale=float(math.exp(x[0])), device_per_seq_s=(1.0 - token_frac) * p,
                         device_per_token_s=token_frac * p)

        def plain_res(x):
            t = at(x)
            out = []
            for r in plain_fit:
                run = runs[r.line]
                pred = run.retime(t, Terms()) if run.retimable else \
                    run_row(sweep, r, stack=calibrated_stack(base0, t, priced_by=priced), speculative=False, seed=seed).metrics
                out += _metric_residuals(pred, r)
            return np.asarray(out)

        lo = [math.log(MIN_SCALE)] + ([0.0] if two else [])
        hi = [math.log(MAX_SCALE)] + ([MAX_TERM_S] if two else [])
        x, conv = _least_squares(plain_res, [0.0] * len(lo), lo, hi, scale=[0.1] + ([1e-3] if two else []),
                                 noisy=any(not runs[r.line].retimable for r in plain_fit),
                                 what=f"{where}: the plain fit (lines {_lines(plain_fit)})",
                                 names=["device_scale"] + (["device_per_seq_us"] if two else []))
        notes += conv
        terms = at(x)
        fitted += ["device_scale"] + (["device_per_seq_us"] if two else [])
        if not two:
            notes.append("the plain fit rows hold one load: only the device's scale is fitted")
    h = base0.host

    # 2. the speculative points: Δcycle, and α where no acceptance is given
    alpha = None
    if spec_fit:
        known = all(r.tau is not None or r.alpha is not None for r in spec_fit)
        stack1 = calibrated_stack(base0, terms, priced_by=priced)
        plains = {r.load: run_row(sweep, r, stack=stack1, speculative=False, seed=seed).metrics for r in spec_fit}

        def spec_targets(r: LoadRow):
            s, metric = sweep.measured_speedup(r)
            return s, (metric if metric != "measured_speedup" else _first_metric(sweep.plain_at(r.load) or r) or
                       "output_tokens_per_s")

        def spec_res_for(acc_of, runs, t: Terms):
            out = []
            for r in spec_fit:
                run = runs[r.line]
                pred = run.retime(t, terms) if run.retimable else run_row(
                    sweep, r, stack=calibrated_stack(base0, t, priced_by=priced), speculative=True, acceptance=acc_of(r), seed=seed).metrics
                s, metric = spec_targets(r)
                if s is not None:
                    ps = _speedup(plains[r.load], pred, metric)
                    # a metric the simulation leaves undefined (NaN) gives no residual, as in _metric_residuals
                    out.append(math.log(ps / s) if math.isfinite(ps) and ps > 0 else math.nan)
                else:
                    out += _metric_residuals(pred, r)
            return np.asarray(out)

        spec_loads = len({r.load for r in spec_fit})

        def fit_cycle(acc_of, both: bool):
            runs = {r.line: run_row(sweep, r, stack=stack1, speculative=True, acceptance=acc_of(r), seed=seed)
                    for r in spec_fit}

            def at(x):
                return replace(terms, cycle_s=float(x[0]), spec_per_seq_s=float(x[1]) if both else 0.0)

            lo = [-base0.cycle_overhead_s] + ([-h.spec_per_seq_s] if both else [])
            x, conv = _least_squares(lambda x: spec_res_for(acc_of, runs, at(x)), [0.0] * len(lo), lo,
                                     [MAX_TERM_S] * len(lo), noisy=any(not run.retimable for run in runs.values()),
                                     what=f"{where}: the speculative fit (lines {_lines(spec_fit)})",
                                     names=["delta_cycle_overhead"] + (["delta_spec_per_seq"] if both else []))
            t = at(x)
            return t, float(np.sum(spec_res_for(acc_of, runs, t) ** 2)), conv

        if known:
            both = spec_loads >= 2
            terms, _, conv = fit_cycle(lambda r: {"tau": r.tau, "alpha": r.alpha}, both)
            notes += conv
            fitted += ["cycle_overhead_us"] + (["spec_per_seq_us"] if both else [])
            if not both:
                notes.append("one speculative fit load: its cost beyond the model goes to the per-cycle overhead "
                             "(fixed a cycle); the per-speculating-sequence cost keeps the stack's figure")
        else:
            from scipy.optimize import minimize_scalar

            two = spec_loads >= 2
            if two:
                def obj(a):
                    return fit_cycle(lambda r: {"alpha": a}, False)[1]
            else:
                def obj(a):
                    runs = {r.line: run_row(sweep, r, stack=stack1, speculative=True, acceptance={"alpha": a},
                                            seed=seed) for r in spec_fit}
                    return float(np.sum(spec_res_for(lambda r: {"alpha": a}, runs, terms) ** 2))
            res = minimize_scalar(obj, bounds=(0.01, 0.99), method="bounded", options={"xatol": 1e-3})
            alpha = float(res.x)
            if not res.success or not math.isfinite(alpha):
                notes.append(f"{where}: the α fit did not converge (scipy status {res.status}: {res.message}); α is "
                             f"where it stopped")
            elif min(alpha - 0.01, 0.99 - alpha) <= 2e-3:
                notes.append(f"{where}: α ended on its bound ({alpha:.3f} of 0.01..0.99): the rows ask for an "
                             f"acceptance outside it")
            fitted.append("alpha")
            if two:
                terms, _, conv = fit_cycle(lambda r: {"alpha": alpha}, False)
                notes += conv
                fitted.append("cycle_overhead_us")
            else:
                notes.append("the speculative fit rows give no acceptance and hold one load: α is fitted to them and "
                             "the per-cycle cost keeps the stack's figure")
    stack = calibrated_stack(base0, terms, name=f"{base0.name}, calibrated on load sweep {sweep.name!r}",
                             priced_by=priced)
    table = predict_sweep(sweep, stack=stack, alpha=alpha, seed=seed)
    err = pd.to_numeric(table["relative_error"], errors="coerce")  # None (a row not predicted) -> NaN
    fit_err = err[table["role"] == "fit"].abs()
    chk_err = err[table["role"] == "check"].abs()
    return SweepFit(sweep=sweep, stack=stack, terms=terms, alpha=alpha, fitted=tuple(fitted), rows=table,
                    fit_error=float(fit_err.median()) if fit_err.notna().any() else None,
                    check_error=float(chk_err.median()) if chk_err.notna().any() else None, notes=tuple(notes),
                    token_share=token_frac, spec_seq_extra_us=float(spec_seq_extra_us))


def with_spec_seq_extra(stack: StackProfile, extra_us: float) -> StackProfile:
    """`stack` whose host pays `extra_us` more a speculating sequence a cycle (the stack unchanged at 0)."""
    if not (math.isfinite(extra_us) and 0.0 <= extra_us <= MAX_TERM_S * 1e6):
        raise SpecError(f"extra host cost a speculating sequence {extra_us!r} us: expected a finite figure in "
                        f"[0, {MAX_TERM_S * 1e6:g}] us")
    if extra_us == 0.0:
        return stack
    return replace(stack, host=replace(stack.host, spec_per_seq_s=stack.host.spec_per_seq_s + extra_us * 1e-6))


def row_acceptance(sweep: LoadSweep, row: LoadRow, alpha: float | None) -> dict | None:
    """A speculative row's acceptance: its own τ or α, else the fitted α, else the τ of the
    lowest-load speculative row that gives one; None when nothing gives one."""
    if row.tau is not None or row.alpha is not None:
        return {"tau": row.tau, "alpha": row.alpha}
    if alpha is not None:
        return {"alpha": alpha}
    for r in sorted(sweep.speculative(), key=lambda r: r.load):
        if r.tau is not None or r.alpha is not None:
            return {"tau": r.tau, "alpha": r.alpha}
    return None


def predict_sweep(sweep: LoadSweep, *, stack: StackProfile, alpha: float | None = None, seed: int = 0) -> pd.DataFrame:
    """Every row of the sweep predicted with `stack` (one row a measured point)."""
    out = []
    plain_pred: dict = {}

    def plain_at(row):
        if row.load not in plain_pred:
            plain_pred[row.load] = run_row(sweep, row, stack=stack, speculative=False, seed=seed).metrics
        return plain_pred[row.load]

    for r in sweep.rows:
        rec = {"sweep": sweep.name, "line": r.line, "load_kind": sweep.load_kind, "load": r.load, "role": r.role,
               "speculative": int(r.speculative), "stack": sweep.stack, "method": sweep.method if r.speculative else "none",
               "measured_speedup": None, "predicted_speedup": None, "metric": None, "measured": None,
               "predicted": None, "relative_error": None, "reason": ""}
        try:
            if not r.speculative:
                p = plain_at(r)
                m = _first_metric(r)
                rec.update(metric=m, measured=r.metric(m), predicted=p[m], relative_error=p[m] / r.metric(m) - 1.0)
                for k, v in p.items():
                    rec[f"predicted_{k}"] = v
            else:
                acc = row_acceptance(sweep, r, alpha)
                if acc is None:
                    rec["reason"] = "no acceptance: the row gives no τ or α and none was fitted"
                    out.append(rec)
                    continue
                p = run_row(sweep, r, stack=stack, speculative=True, acceptance=acc, seed=seed).metrics
                s, metric = sweep.measured_speedup(r)
                if metric == "measured_speedup":
                    base = sweep.plain_at(r.load)
                    metric = (_first_metric(base) if base is not None else None) or "output_tokens_per_s"
                for k, v in p.items():
                    rec[f"predicted_{k}"] = v
                rec["acceptance"] = acc.get("tau") if acc.get("tau") is not None else acc.get("alpha")
                rec["acceptance_kind"] = "tau" if acc.get("tau") is not None else "alpha"
                if s is not None:
                    ps = _speedup(plain_at(r), p, metric)
                    rec.update(measured_speedup=s, predicted_speedup=ps, metric=f"speedup ({metric})",
                               measured=s, predicted=ps, relative_error=ps / s - 1.0)
                else:
                    m = _first_metric(r)
                    rec.update(metric=m, measured=r.metric(m), predicted=p[m], relative_error=p[m] / r.metric(m) - 1.0,
                               reason="no plain row at this load: the metric is compared, not the speedup")
        except SpecError as exc:
            rec["reason"] = str(exc)
        out.append(rec)
    return pd.DataFrame(out)


# ---- all sweeps -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class LoadCalibration:
    fits: tuple
    roles: str = "table"

    @property
    def rows(self) -> pd.DataFrame:
        return pd.concat([f.rows for f in self.fits], ignore_index=True) if self.fits else pd.DataFrame()

    def summary(self) -> dict:
        t = self.rows
        chk = t[(t["role"] == "check") & t["relative_error"].notna()]
        spec = t[(t["speculative"] == 1) & t["measured_speedup"].notna() & t["predicted_speedup"].notna()]
        slow = spec[spec["measured_speedup"].astype(float) < SLOWDOWN]
        missed = slow[slow["predicted_speedup"].astype(float) >= SLOWDOWN_BAR]
        slow_chk = slow[slow["role"] == "check"]
        return {"roles": self.roles, "n_sweeps": len(self.fits), "n_rows": int(len(t)),
                "n_check_rows": int(len(chk)),
                "median_relative_error": float(chk["relative_error"].abs().median()) if len(chk) else None,
                "n_slowdowns": int(len(slow)), "n_slowdowns_missed": int(len(missed)),
                "n_check_slowdowns": int(len(slow_chk)),
                "n_check_slowdowns_missed": int((slow_chk["predicted_speedup"].astype(float) >= SLOWDOWN_BAR).sum()),
                "slowdowns_missed": [f"{r.sweep}@{r.load:g}" for r in missed.itertuples()],
                "slowdown_below": SLOWDOWN, "slowdown_bar": SLOWDOWN_BAR,
                "n_unpredicted": int(t["relative_error"].isna().sum())}

    def by(self, column: str) -> list[dict]:
        t = self.rows
        t = t[(t["role"] == "check") & t["relative_error"].notna()]
        out = []
        for v, g in t.groupby(column, sort=True):
            e = g["relative_error"].abs()
            out.append({column: v, "n_rows": int(len(g)), "median_abs_error": float(e.median()),
                        "worst_abs_error": float(e.max())})
        return out

    def to_dict(self) -> dict:
        rows = self.rows.replace({np.nan: None}).to_dict(orient="records")
        return {"sweeps": [f.to_dict() for f in self.fits], "rows": rows, **self.summary(),
                "by_stack": self.by("stack"), "by_method": self.by("method")}


def calibrate_load(sweeps, *, roles: str = "table", seed: int = 0, progress=None, token_share: float | None = None,
                   cost_source: str | None = None, spec_seq_extra_us: float = 0.0) -> LoadCalibration:
    """Fit and predict every sweep (see the module docstring). cost_source: what prices the passes
    (`cost.pricing`; None: the default, auto); spec_seq_extra_us: as `fit_sweep`."""
    fits = []
    for sw in sweeps:
        sw = assign_roles(sw, roles)
        if cost_source is not None:
            sw = replace(sw, cost_source=cost_source)
        if progress is not None:
            progress(sw.name)
        fits.append(fit_sweep(sw, seed=seed, token_share=token_share, spec_seq_extra_us=spec_seq_extra_us))
    return LoadCalibration(fits=tuple(fits), roles=roles)


# ---- the calibrated scenario ----------------------------------------------------------------------

def _stack_table(fit: SweepFit, *, command: str) -> dict:
    """The calibrated stack as a TOML table: the base file's content with the fitted figures, their
    sources, and a `calibration` regime naming the sweep, the fit's error and its load range."""
    from ..specs.catalog import read_toml, resolve as catalog_path

    sw = fit.sweep
    raw = read_toml(catalog_path("stacks", sw.stack))
    st = fit.stack
    # the id stays the base stack's: the drafter families it ships and its config lines key on it
    raw["name"] = st.name
    raw.setdefault("host", {})
    srcs = raw.setdefault("sources", {})
    srcs.setdefault("host", {})
    where = f"fitted: `{command}` on the fit rows of sweep {sw.name!r} ({sw.file})"
    if "spec_per_seq_us" in fit.fitted or fit.spec_seq_extra_us:
        raw["host"]["spec_per_seq_us"] = st.host.spec_per_seq_s * 1e6
        srcs["host"]["spec_per_seq_us"] = (
            f"{where}; the stack's figure moved by {fit.terms.spec_per_seq_s * 1e6 + fit.spec_seq_extra_us:+.2f} us"
            + (f" ({fit.spec_seq_extra_us:g} us of it chosen by the --spec-seq-loo scan on the other sources' "
               f"sweeps)" if fit.spec_seq_extra_us else ""))
    if "cycle_overhead_us" in fit.fitted:
        raw["cycle_overhead_us"] = st.cycle_overhead_s * 1e6
        srcs["cycle_overhead_us"] = f"{where}; the stack's figure moved by {fit.terms.cycle_s * 1e6:+.1f} us"
    fit_rows = [r for r in sw.rows if r.role == "fit"]
    lo, hi = sw.load_range(fit_rows) if fit_rows else sw.load_range()
    cal = {"property": "calibration", "versions": "*", "status": "fitted", "sweep": sw.name, "file": sw.file,
           "load_kind": sw.load_kind, "load_min": float(lo), "load_max": float(hi), "n_fit_rows": len(fit_rows),
           "fit_error_frac": float(fit.fit_error or 0.0), "command": command,
           "device_scale": float(fit.terms.device_scale), "device_per_seq_us": float(fit.terms.device_per_seq_s * 1e6),
           "device_per_token_us": float(fit.terms.device_per_token_s * 1e6),
           "priced_by": calibration_priced_by(fit.stack) or "roofline",  # the source the terms absorbed the error of
           "source": f"specsim calibrate load ({', '.join(fit.fitted) or 'nothing'} fitted)"}
    if fit.check_error is not None:
        cal["check_error_frac"] = float(fit.check_error)
    raw["load_regime"] = [r for r in raw.get("load_regime", []) if r.get("property") != "calibration"] + [cal]
    stack_from_dict(raw, where=f"calibrated stack of sweep {sw.name!r}")  # it must load back
    return raw


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name).strip("-") or "sweep"


def scenario_table(fit: SweepFit, *, stack_path: str) -> dict:
    """The sweep's calibrated scenario: its configuration on the calibrated stack, the acceptance of
    its lowest-load speculative row (or the fitted α), and a workload that runs its load range."""
    sw = fit.sweep
    spec_rows = sorted(sw.speculative(), key=lambda r: r.load)
    ref = spec_rows[0] if spec_rows else sw.rows[0]
    out: dict = {"name": f"{_slug(sw.name)}-calibrated",
                 "description": f"{sw.target} on {sw.n_devices} x {sw.hardware} ({sw.stack}"
                                f"{' ' + sw.stack_version if sw.stack_version else ''}), calibrated from load sweep "
                                f"{sw.name!r} of {sw.file}",
                 "hardware": sw.hardware, "target": sw.target, "tp": sw.n_devices, "stack": stack_path,
                 "method": sw.method if sw.method != "none" else "none", "k": sw.k, "temperature": sw.temperature}
    if sw.stack_version:
        out["stack_version"] = sw.stack_version
    if sw.target_dtype:
        out["target_dtype"] = sw.target_dtype
    if sw.drafter:
        out["drafter"] = sw.drafter
    if sw.tree_size is not None:
        out["tree_size"] = sw.tree_size
    acc = row_acceptance(sw, ref, fit.alpha) if spec_rows else None
    if acc is not None and acc.get("tau") is not None and sw.tree_size is not None:
        acc = {"alpha": tree_alpha(fit, ref, float(acc["tau"]))}
    if acc is not None:
        out.update(_acceptance_kwargs(acc))
    if sw.load_kind == "batch":
        out["context_len"] = int(ref.context_len)
        out["batch_size"] = int(ref.load)
    else:
        out["context_len"] = int(ref.prompt_tokens + ref.output_tokens // 2)
        plain = sorted(sw.plain(), key=lambda r: r.load)
        rates = []
        for r in plain:
            if sw.load_kind == "rate":
                rates.append(float(r.load))
            elif r.output_tokens_per_s is not None:
                rates.append(round(r.output_tokens_per_s / r.output_tokens, 4))
        out["workload"] = {"kind": "poisson", "rate_per_s": rates[0] if rates else 1.0, "n_requests": 200,
                           "prompt": {"kind": "fixed", "tokens": int(ref.prompt_tokens)},
                           "output": {"kind": "fixed", "tokens": int(ref.output_tokens)}}
        if rates:
            out["workload"]["rates"] = sorted(set(rates))
    if sw.drafter_options:
        out["drafter_options"] = dict(sw.drafter_options)
    return out


def tree_alpha(fit: SweepFit, row: LoadRow, tau: float) -> float:
    """The α whose tree τ (the family's tree formula at the sweep's K and tree size) is the row's τ.

    A scenario giving τ for a tree holds it only at the point it was measured; at any other batch,
    context or K the chain α equivalent to it stands in, and the tree formula turns that α into more
    tokens than τ (`speculation.predict.tokens_per_cycle_at`). The switch-off reads a grid of batches, so
    a calibrated scenario of a tree sweep gives this α instead: every view then sees the row's τ."""
    from scipy.optimize import brentq

    from ..speculation.cycle import tokens_per_cycle

    sc = row_scenario(fit.sweep, row, speculative=True, acceptance={"tau": tau})
    op = resolve(sc, stack_profile=fit.stack)
    acc = op.require_acceptance()

    def gap(a):
        return float(tokens_per_cycle(op.drafter, alpha=a, k=op.k, tree_size=op.tree_size, n_ranks=acc.n_ranks,
                                      rank_decay=acc.rank_decay)) - tau

    lo, hi = 1e-6, 1.0 - 1e-9
    if not gap(lo) < 0.0 < gap(hi):
        raise SpecError(f"sweep {fit.sweep.name!r}: τ = {tau:g} at K = {op.k}, tree {op.tree_size} is outside what the "
                        f"tree can emit ({gap(lo) + tau:.3g} to {gap(hi) + tau:.3g} tokens a cycle)")
    return float(brentq(gap, lo, hi, xtol=1e-12))


def scenario_paths(sweeps, folder, *, force: bool = False) -> list[tuple[Path, Path]]:
    """Where `write_scenarios` puts each sweep's (stack, scenario) files in `folder`, refused before any
    fit runs: an empty path, a path that is a file, two sweeps whose names give one file name (the
    file name keeps letters, digits, - and _; compared without case, as a macOS or Windows disk
    does), a symbolic link where a file goes (with or without `force`), and, without `force`, a file
    already there (never replaced unasked).

    A link is refused rather than followed or replaced: following it would write outside the folder
    (over the file it points to, or creating one where a dangling link points), and replacing it would
    silently undo a link the user made; `force` replaces files specsim writes, not links."""
    import os

    from ..errors import OutputError

    text = str(folder)
    if not text.strip():
        raise OutputError(f"--write-scenario {text!r}: expected a folder path (--write-scenario . for the current "
                          f"folder)")
    d = Path(text).expanduser()
    for parent in [d, *d.parents]:
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(f"--write-scenario {text!r}: {parent} is a file, not a folder")
            break
    taken: dict[str, str] = {}
    out = []
    for sw in sweeps:
        name = sw.name if isinstance(sw, LoadSweep) else sw.sweep.name
        slug = _slug(name)
        if slug.casefold() in taken:
            raise OutputError(f"--write-scenario {text!r}: sweeps {taken[slug.casefold()]!r} and {name!r} would both "
                              f"write {slug}.toml (a file name keeps letters, digits, - and _): rename one of them")
        taken[slug.casefold()] = name
        out.append((d / f"{slug}.stack.toml", d / f"{slug}.toml"))
    for pair in out:
        for path in pair:
            if path.is_symlink():
                raise OutputError(f"--write-scenario {text!r}: {path.name} is a symbolic link (to "
                                  f"{os.readlink(path)}); files are written only inside the folder and no link is "
                                  f"replaced: remove the link or choose another folder")
            if path.is_dir():
                raise OutputError(f"--write-scenario {text!r}: {path.name} is a folder; expected a file name free for "
                                  f"the calibrated {'stack' if path.name.endswith('.stack.toml') else 'scenario'}")
            if path.exists() and not force:
                raise OutputError(f"--write-scenario {text!r}: {path.name} exists: pass --force to replace it, or "
                                  f"choose another folder")
    return out


def write_scenarios(cal: LoadCalibration, folder, *, command: str, force: bool = False) -> list[Path]:
    """Each sweep's calibrated stack and scenario into `folder`: every table built first, each file
    written under a hidden temporary name, and all renamed into place only once all are written, so a
    failure leaves the folder as it was; an existing file is replaced only with `force`
    (`scenario_paths`)."""
    import os
    import secrets

    from ..errors import OutputError

    plan = scenario_paths(cal.fits, folder, force=force)
    d = Path(str(folder)).expanduser()
    files = []
    for fit, (stack_path, scen_path) in zip(cal.fits, plan):
        stack_abs = d.resolve() / stack_path.name  # the folder resolved, never the file (a link's target)
        files.append((stack_abs, to_toml(_stack_table(fit, command=command))))
        files.append((scen_path, to_toml(scenario_table(fit, stack_path=str(stack_abs)))))
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"--write-scenario {folder}: cannot create the folder ({exc.strerror or exc})") from None
    temps: list[tuple[str, Path]] = []
    try:
        for path, text in files:
            # mode 0666 less the umask, as every other specsim output (mkstemp's 0600 hid them from a group);
            # O_EXCL and O_NOFOLLOW: a name that appeared meanwhile is never written through
            tmp = str(d / f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.partial")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
            temps.append((tmp, path))
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
        for tmp, path in temps:
            os.replace(tmp, path)  # a rename replaces the name in the folder; it never writes through a link
    except OSError as exc:
        raise OutputError(f"--write-scenario {folder}: cannot write ({exc.strerror or exc})") from None
    finally:
        for tmp, _ in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return [path for path, _ in files]


__all__ = ["Terms", "RowRun", "SweepFit", "LoadCalibration", "calibrate_load", "fit_sweep", "predict_sweep",
           "calibrated_stack", "assign_roles", "row_scenario", "run_row", "write_scenarios", "scenario_table",
           "scenario_paths", "check_sweep", "with_spec_seq_extra",
           "ROLE_MODES", "SLOWDOWN", "SLOWDOWN_BAR"]
