"""Acceptance calibrated on the reference decoder: run each drafter over each workload at several
temperatures, record every cycle, and fit the acceptance models with `speculation.acceptance`'s
estimators (`specsim calibrate acceptance`).

What is recorded per cycle: the tokens drafted (a chain's length, a tree's depth; 0 when a prompt
lookup found no match), the drafts accepted, the context length the cycle ran at, and for trees the
rank of each accepted node and the ranks examined before it. What is fitted, per drafter and
workload (the reference is temperature 0 and the median context of its cycles):

- i.i.d. α: under the i.i.d. model every drafted position the verifier examines is one Bernoulli(α)
  trial (a cycle with A accepted of K drafted is A successes and, when A < K, one failure), so the
  truncated-geometric MLE with per-cycle draft lengths is `fit_iid_alpha` over those trials (K = 1),
  with its likelihood-ratio interval;
- per-position conditional rates c_i: position i is tried when the cycle drafted at least i tokens
  and accepted the first i − 1; each c_i is the same binomial fit over its trials;
- a tree's per-rank vector: `fit_rank_acceptance` over the counts of each rank examined / accepted;
- dependence on context length and temperature: α(L, T) = α_ref·exp(−λ (L − L_ref) − s (T − T_ref))
  (`AcceptanceModel`'s form) fitted by maximum likelihood over every trial of every temperature, with
  profile-likelihood intervals for λ and s.

The result is one calibration file per (drafter, workload) in the layout `specs.calibrations` reads.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.optimize import brentq, minimize
from scipy.special import chdtri, expit, logit

from ..decoder.registry import family_of
from ..errors import SpecError
from ..speculation.acceptance import fit_iid_alpha, fit_rank_acceptance

TEMPERATURES = (0.0, 0.7, 1.0)
WORKLOADS = ("code-edit", "prose")


@dataclass(frozen=True, slots=True, kw_only=True)
class CycleRecord:
    """Every cycle of one (drafter, workload, temperature) run, as arrays of length n_cycles, and a
    tree's rank counts (accepted[r], tried[r]) when the drafter drafts trees."""

    drafter: str
    workload: str
    temperature: float
    verify: str
    k: int
    drafted: np.ndarray
    accepted: np.ndarray
    context_len: np.ndarray
    rank_accepted: np.ndarray | None = None
    rank_tried: np.ndarray | None = None
    seconds: float = 0.0
    prompt: np.ndarray | None = None  # (n_cycles,) index of the prompt each cycle decoded


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptanceRunConfig:
    """drafters: decoder drafters to run (None: every one this install has, `available_drafters`);
    k: drafts per cycle of the chain drafters; layers: the layer-skip drafter's layers (None: 4/5 of the
    target's); n_prompts and tokens: per workload and temperature; level: of every interval."""

    model: object = None
    drafters: tuple | None = None
    workloads: tuple = WORKLOADS
    temperatures: tuple = TEMPERATURES
    k: int = 4
    layers: int | None = None
    # prompts differ far more than cycles within one (a prompt-lookup rate of 0.64 on three prose prompts
    # was 0.22 on three others): eight prompts, each shorter, for the between-prompt interval to read
    n_prompts: int = 8
    tokens: int = 64
    seed: int = 0
    level: float = 0.95
    threads: int | None = None

    def __post_init__(self) -> None:
        for name in ("k", "n_prompts", "tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise SpecError(f"--{name.replace('_', '-')} {v!r}: expected an integer >= 1")
        if not self.temperatures or any(not isinstance(t, (int, float)) or isinstance(t, bool) or not t >= 0
                                        or not math.isfinite(t) for t in self.temperatures):
            raise SpecError(f"--temperatures {self.temperatures!r}: expected finite numbers >= 0")
        if not 0 < self.level < 1:
            raise SpecError(f"--level {self.level!r}: expected a number in (0, 1)")
        if self.drafters is not None:
            from ..decoder.registry import calibrated

            bad = [d for d in self.drafters if d not in calibrated()]
            if bad:
                raise SpecError(f"--drafters {bad[0]!r}: expected among {', '.join(calibrated())}")
        from ..decoder.workloads import WORKLOADS as KNOWN

        bad = [w for w in self.workloads if w not in KNOWN]
        if bad or not self.workloads:
            raise SpecError(f"--workloads {','.join(self.workloads)}: expected among {', '.join(KNOWN)}")


def available_drafters(target, *, k: int, layers: int | None = None) -> dict:
    """name -> (build(capacity) -> drafter, note): the decoder's calibrated drafters (`decoder.registry`, each
    at the fixed K), those with trained weights only where this install holds them (specsim/decoder/weights)."""
    from ..decoder.registry import DRAFTERS, calibrated

    n = max(1, (4 * target.config.n_layer) // 5) if layers is None else layers
    if not 1 <= n <= target.config.n_layer:
        raise SpecError(f"--layers {layers}: expected 1..{target.config.n_layer}")
    out = {}
    for name in calibrated():
        d = DRAFTERS[name]
        if d.available():
            out[name] = ((lambda cap, d=d: d.fixed_k(target, k, n, cap)), d.fixed_k_note(target, k, n))
    return out


class _Recorder:
    """Wraps a drafter, keeping each draft (to find a tree's accepted ranks afterwards)."""

    def __init__(self, inner):
        self.inner, self.drafts = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def propose(self, context, sampling, rng):
        d = self.inner.propose(context, sampling, rng)
        self.drafts.append(d)
        return d


def _rank_counts(drafts, cycles, tokens, n_ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """(accepted[r], tried[r]) of a tree drafter's cycles: the accepted path is found by walking the
    tree along the emitted tokens; at each node of the path, the children of rank below the accepted
    one were examined and rejected, the accepted one examined and accepted; at the path's last node
    every child was examined and rejected."""
    acc, tried = np.zeros(n_ranks), np.zeros(n_ranks)
    pos = 1  # tokens[0] came from the prefill
    for d, c in zip(drafts, cycles):
        tree, toks = d.tree, d.tokens
        if pos + c.n_accepted >= len(tokens):  # the last cycle, cut at the requested length: its path is not all kept
            break
        node = 0
        for j in range(c.n_accepted + 1):
            kids = tree.children(node)
            taken = None
            if j < c.n_accepted:
                match = [int(ch) for ch in kids if toks[ch] == tokens[pos + j]]
                taken = match[0] if match else None
            for ch in kids:
                r = int(tree.ranks[ch])
                if taken is None or r <= int(tree.ranks[taken]):
                    tried[r] += 1
                    acc[r] += ch == taken
            if taken is None:
                break
            node = taken
        pos += c.n_accepted + 1
    return acc, tried


def run_drafter(target, build, *, name: str, workload: str, temperature: float, k: int, prompts, tokens: int,
                seed: int) -> CycleRecord:
    """Speculative decoding of `prompts` (token-id lists) with a fresh drafter from `build(capacity)`;
    every cycle recorded."""
    from ..decoder import generate as gen
    from ..decoder import sampling as samp

    sampling = samp.SamplingParams(temperature=float(temperature))
    drafted, accepted, ctx, which = [], [], [], []
    ranks_a, ranks_t = None, None
    t0 = time.perf_counter()
    verify = "greedy"
    for i, prompt in enumerate(prompts):
        drafter = _Recorder(build(len(prompt) + tokens + 64))
        if temperature > 0:
            verify = "rejection" if getattr(drafter.inner, "gives_q", False) else "onehot"
        g = gen.generate_speculative(target, drafter, prompt, tokens, mode=verify, sampling=sampling, seed=seed, index=i)
        length = len(prompt) + 1
        for c in g.cycles:
            drafted.append(c.n_drafted)
            accepted.append(c.n_accepted)
            ctx.append(length)
            which.append(i)
            length += c.n_accepted + 1
        if any(d.tree.n_nodes - 1 > d.tree.max_depth for d in drafter.drafts):  # a tree: count ranks
            n_r = 1 + max(int(d.tree.ranks.max()) for d in drafter.drafts)
            a, t = _rank_counts(drafter.drafts, g.cycles, g.tokens, n_r)
            if ranks_a is None:
                ranks_a, ranks_t = a, t
            else:
                m = max(ranks_a.size, a.size)
                ranks_a = np.pad(ranks_a, (0, m - ranks_a.size)) + np.pad(a, (0, m - a.size))
                ranks_t = np.pad(ranks_t, (0, m - ranks_t.size)) + np.pad(t, (0, m - t.size))
    return CycleRecord(drafter=name, workload=workload, temperature=float(temperature), verify=verify, k=k,
                       drafted=np.array(drafted, np.int64), accepted=np.array(accepted, np.int64),
                       context_len=np.array(ctx, np.int64), rank_accepted=ranks_a, rank_tried=ranks_t,
                       seconds=time.perf_counter() - t0, prompt=np.array(which, np.int64))


# ---- fits -------------------------------------------------------------------------------------------

def bernoulli_trials(drafted, accepted) -> tuple[np.ndarray, np.ndarray]:
    """Each cycle as the Bernoulli trials the verifier ran: A successes, and one failure when A < the
    drafted length. Returns (outcome (n_trials,) 0/1, cycle index of each trial)."""
    d = np.asarray(drafted, np.int64)
    a = np.asarray(accepted, np.int64)
    if np.any(a > d) or np.any(a < 0):
        raise SpecError("cycle records: accepted drafts must lie in [0, drafted]")
    fail = (a < d).astype(np.int64)
    n = a + fail
    idx = np.repeat(np.arange(d.size), n)
    # within a cycle: A ones then (when it failed) a zero
    offs = np.arange(idx.size) - np.repeat(np.cumsum(n) - n, n)
    outcome = (offs < np.repeat(a, n)).astype(np.int64)
    return outcome, idx


def fit_iid(drafted, accepted, *, level: float):
    """i.i.d. α over per-cycle draft lengths: `fit_iid_alpha` over the cycles' Bernoulli trials."""
    outcome, _ = bernoulli_trials(drafted, accepted)
    if outcome.size == 0:
        return None
    return fit_iid_alpha(outcome, 1, level=level)


def fit_positions(drafted, accepted, *, k: int, level: float) -> list:
    """Per-position conditional rates: position i is tried in the cycles that drafted >= i tokens and
    accepted the first i − 1; each rate is `fit_iid_alpha` over its trials (a binomial)."""
    d, a = np.asarray(drafted), np.asarray(accepted)
    out = []
    for i in range(1, k + 1):
        tried = (d >= i) & (a >= i - 1)
        out.append(fit_iid_alpha((a[tried] >= i).astype(np.int64), 1, level=level) if tried.any() else None)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class DependenceFit:
    """α(L, T) = α_g·exp(−λ (L − L_ref) − s (T − T_ref)) by maximum likelihood over Bernoulli trials, with
    one α_g per group (a prompt) when groups are given; intervals by profile likelihood at `level`.
    alpha_ref: α at the reference with one group, else the trial-weighted mean of the groups' α_g.
    fixed_*: a term not identifiable from the data (one context, one temperature) is held at 0 with a
    zero-width interval."""

    alpha_ref: float
    context_decay_per_token: float
    context_decay_ci: tuple
    temperature_slope: float
    temperature_slope_ci: tuple
    reference_context_len: float
    reference_temperature: float
    level: float
    n_trials: int
    n_groups: int = 1
    notes: tuple = field(default=())


def fit_dependence(outcome, context_len, temperature, *, reference_context_len: float, reference_temperature: float,
                   level: float = 0.95, group=None) -> DependenceFit:
    """group: an id per trial (the prompt it came from). Prompts differ in how predictable they are and
    in their length, so across prompts a long context and a low acceptance can go together without one
    causing the other; with groups the context slope is read within each prompt (a fixed effect per
    prompt), as the context grows while its tokens are generated."""
    y = np.asarray(outcome, float)
    dl = np.asarray(context_len, float) - reference_context_len
    dt = np.asarray(temperature, float) - reference_temperature
    if y.size == 0:
        raise SpecError("dependence fit: no trials")
    gid = np.zeros(y.size, np.int64) if group is None else np.unique(np.asarray(group), return_inverse=True)[1]
    n_g = int(gid.max()) + 1
    free_l = any(np.ptp(dl[gid == g]) > 0 for g in range(n_g))
    free_t = np.ptp(dt) > 0
    scale_l = max(float(np.ptp(dl)), 1.0)  # λ in units of 1/range for the optimiser
    notes = []

    def unpack(theta, lam=None, s=None):
        i = n_g
        if lam is None:
            lam = theta[i] / scale_l if free_l else 0.0
            i += free_l
        if s is None:
            s = theta[i] if free_t else 0.0
        return theta[:n_g], lam, s

    def nll_grad(theta, lam=None, s=None):
        # the negative log-likelihood and its gradient in theta: with p = exp(eta),
        # eta = log expit(a_g) - lam dl - s dt, d nll / d eta = (p - y) / (1 - p), d eta / d a_g = expit(-a_g)
        a_logit, lam_, s_ = unpack(theta, lam, s)
        p = np.clip(expit(a_logit)[gid] * np.exp(-lam_ * dl - s_ * dt), 1e-12, 1 - 1e-12)
        f = -float(np.sum(y * np.log(p) + (1 - y) * np.log1p(-p)))
        d_eta = (p - y) / (1 - p)
        grad = [np.bincount(gid, weights=d_eta, minlength=n_g) * expit(-np.asarray(a_logit))]
        if lam is None and free_l:
            grad.append([-float(np.sum(d_eta * dl)) / scale_l])
        if s is None and free_t:
            grad.append([-float(np.sum(d_eta * dt))])
        return f, np.concatenate(grad)

    def fit(f, z0):
        # quasi-Newton on the exact gradient: one acceptance level per prompt makes tens of parameters,
        # where a simplex search takes minutes and may stop short
        return minimize(f, z0, jac=True, method="L-BFGS-B", options=dict(ftol=1e-15, gtol=1e-9, maxiter=10000))

    a0 = [logit(min(max(y[gid == g].mean(), 1e-3), 1 - 1e-3)) for g in range(n_g)]
    x0 = np.array(a0 + [0.0] * (int(free_l) + int(free_t)))
    best = fit(nll_grad, x0)
    lam_hat = best.x[n_g] / scale_l if free_l else 0.0
    s_hat = best.x[n_g + int(free_l)] if free_t else 0.0
    half = 0.5 * float(chdtri(1, 1.0 - level))

    def profile(which: str, value: float) -> float:
        # the other parameters re-optimised with `which` held at `value`
        if which == "lam":
            z0 = np.concatenate([best.x[:n_g], [s_hat] if free_t else []])
            f = lambda z: nll_grad(np.concatenate([z[:n_g], [z[n_g]] if free_t else []]), lam=value)  # noqa: E731
        else:
            z0 = np.concatenate([best.x[:n_g], [lam_hat * scale_l] if free_l else []])
            f = lambda z: nll_grad(np.concatenate([z[:n_g], [z[n_g]] if free_l else []]), s=value)  # noqa: E731
        return fit(f, z0).fun

    def interval(which: str, hat: float, step: float) -> tuple:
        target = best.fun + half
        g = lambda v: profile(which, v) - target  # noqa: E731
        ends = []
        for sign in (-1.0, 1.0):
            d = step
            while g(hat + sign * d) < 0 and d < step * 2 ** 20:
                d *= 2.0
            if g(hat + sign * d) < 0:
                ends.append(sign * math.inf)
                continue
            ends.append(brentq(g, *sorted((hat, hat + sign * d)), xtol=abs(step) * 1e-6))
        return tuple(float(e) for e in ends)

    lam_ci = interval("lam", lam_hat, 1e-3 / scale_l) if free_l else (0.0, 0.0)
    s_ci = interval("s", s_hat, 1e-2) if free_t else (0.0, 0.0)
    if not free_l:
        notes.append("one context length only: no context dependence fitted")
    if not free_t:
        notes.append("one temperature only: no temperature dependence fitted")
    if n_g > 1:
        notes.append(f"context and temperature dependence read within each of {n_g} prompts (one acceptance level "
                     f"per prompt)")
    weights = np.bincount(gid, minlength=n_g)
    alpha_ref = float(np.sum(expit(best.x[:n_g]) * weights) / weights.sum())
    return DependenceFit(alpha_ref=alpha_ref, context_decay_per_token=float(lam_hat),
                         context_decay_ci=lam_ci, temperature_slope=float(s_hat), temperature_slope_ci=s_ci,
                         reference_context_len=float(reference_context_len),
                         reference_temperature=float(reference_temperature), level=level, n_trials=int(y.size),
                         n_groups=n_g, notes=tuple(notes))


def prompt_index(record: "CycleRecord") -> np.ndarray:
    """The prompt each cycle belongs to: recorded by `run_drafter`; for records written before it was,
    read off the context lengths (within a prompt a cycle adds 1..K + 1 tokens, so any other step
    starts the next prompt)."""
    if record.prompt is not None:
        return np.asarray(record.prompt, np.int64)
    ctx = np.asarray(record.context_len, np.int64)
    if ctx.size == 0:
        return np.zeros(0, np.int64)
    step = np.diff(ctx)
    return np.concatenate([[0], np.cumsum((step < 1) | (step > record.k + 1))]).astype(np.int64)


def between_prompt_interval(successes, failures, *, level: float) -> dict | None:
    """The acceptance across prompts as a random-effects estimate (DerSimonian & Laird 1986, Controlled
    Clinical Trials 7:177; on the logit scale, each prompt's rate with a half-count correction), with a
    t interval on C − 1 degrees of freedom (Hartung & Knapp 2001): what another set of prompts of the same
    workload is expected to accept, where the binomial interval over the pooled trials describes only
    the prompts that were run. successes, failures: (C,) Bernoulli counts per prompt. None when fewer
    than two prompts drafted."""
    from scipy.special import stdtrit

    sc, fc = np.asarray(successes, float), np.asarray(failures, float)
    keep = (sc + fc) > 0
    sc, fc = sc[keep], fc[keep]
    c = sc.size
    if c < 2:
        return None
    y = np.log((sc + 0.5) / (fc + 0.5))
    v = 1.0 / (sc + 0.5) + 1.0 / (fc + 0.5)
    w = 1.0 / v
    ybar = float(np.sum(w * y) / np.sum(w))
    q = float(np.sum(w * (y - ybar) ** 2))
    tau2 = max(0.0, (q - (c - 1)) / (float(np.sum(w)) - float(np.sum(w ** 2)) / float(np.sum(w))))
    ws = 1.0 / (v + tau2)
    mu = float(np.sum(ws * y) / np.sum(ws))
    # Hartung-Knapp: the variance of mu scaled by the weighted residual spread, a t quantile on C - 1
    hk = float(np.sum(ws * (y - mu) ** 2) / ((c - 1) * np.sum(ws)))
    half = float(stdtrit(c - 1, 0.5 + level / 2)) * math.sqrt(max(hk, 1.0 / float(np.sum(ws)) / c))
    return {"alpha": float(expit(mu)), "ci_low": float(expit(mu - half)), "ci_high": float(expit(mu + half)),
            "n_prompts": int(c), "between_prompt_sd_logit": math.sqrt(tau2)}


# ---- one calibration --------------------------------------------------------------------------------

def calibration_table(records: list[CycleRecord], *, target_id: str, name: str, command: str, level: float,
                      k: int, note: str = "") -> dict:
    """The calibration file's content (a dict `specs.calibrations` reads) from one drafter's records on
    one workload, at every temperature."""
    if not records:
        raise SpecError("calibration: no runs")
    ref_t = min(r.temperature for r in records)
    ref = [r for r in records if r.temperature == ref_t]
    drafted = np.concatenate([r.drafted for r in ref])
    accepted = np.concatenate([r.accepted for r in ref])
    ctx = np.concatenate([r.context_len for r in ref])
    if not np.any(drafted > 0):
        raise SpecError(f"calibration {name}: no cycle drafted a token at temperature {ref_t:g}")
    iid = fit_iid(drafted, accepted, level=level)
    ref_l = float(np.median(ctx[drafted > 0]))
    # per prompt at the reference temperature: S accepted drafts, F cycles that stopped short
    pr = np.concatenate([prompt_index(r) for r in ref])
    acc_per = np.bincount(pr, weights=accepted, minlength=int(pr.max()) + 1)
    fail_per = np.bincount(pr, weights=(accepted < drafted).astype(float), minlength=int(pr.max()) + 1)
    spread = between_prompt_interval(acc_per, fail_per, level=level)
    rows, all_y, all_l, all_t, all_p = [], [], [], [], []
    for r in records:
        y, idx = bernoulli_trials(r.drafted, r.accepted)
        all_y.append(y)
        all_l.append(r.context_len[idx])
        all_t.append(np.full(y.size, r.temperature))
        all_p.append(prompt_index(r)[idx])  # the same prompts at every temperature (one seeded workload)
        f = fit_iid(r.drafted, r.accepted, level=level)
        pos = fit_positions(r.drafted, r.accepted, k=k, level=level)
        n = r.drafted.size
        rows.append({"temperature": r.temperature, "verify": r.verify, "k": r.k, "n_cycles": int(n),
                     "alpha": None if f is None else float(f.estimate),
                     "ci_low": None if f is None else float(f.ci_low), "ci_high": None if f is None else float(f.ci_high),
                     "n_trials": 0 if f is None else int(f.n_obs),
                     "tau": float(np.mean(r.accepted + 1)) if n else None,
                     "draft_frac": float(np.mean(r.drafted > 0)) if n else None,
                     "mean_drafted": float(np.mean(r.drafted)) if n else None,
                     "conditional": [float("nan") if p is None else float(p.estimate) for p in pos],  # nan: never tried
                     "context_len_min": int(r.context_len.min()) if n else None,
                     "context_len_max": int(r.context_len.max()) if n else None,
                     "seconds": round(r.seconds, 2)})
    dep = fit_dependence(np.concatenate(all_y), np.concatenate(all_l), np.concatenate(all_t),
                         reference_context_len=ref_l, reference_temperature=ref_t, level=level,
                         group=np.concatenate(all_p))
    pos = fit_positions(drafted, accepted, k=k, level=level)
    table = {
        "name": name, "target": target_id, "drafter": records[0].drafter, "method": family_of(records[0].drafter),
        "workload": records[0].workload, "command": command, "level": level,
        "notes": "; ".join(x for x in (note, *dep.notes,
                                      "i.i.d. alpha and per-position rates at the reference temperature; the "
                                      "dependence fitted over every temperature") if x),
        "reference": {"context_len": ref_l, "temperature": ref_t, "k": k},
        "iid": {"alpha": float(iid.estimate), "ci_low": float(iid.ci_low), "ci_high": float(iid.ci_high),
                "n_cycles": int(drafted.size), "n_trials": int(iid.n_obs)},
    }
    if spread is not None:
        # the band every prediction carries: never narrower than the pooled binomial interval, as wide as
        # the prompts disagree (a new prompt set of the workload is what a scenario asks about)
        table["iid"].update(ci_low=min(float(iid.ci_low), spread["ci_low"]), ci_high=max(float(iid.ci_high),
                                                                                        spread["ci_high"]),
                            binomial_ci=[float(iid.ci_low), float(iid.ci_high)], n_prompts=spread["n_prompts"],
                            between_prompt_sd_logit=spread["between_prompt_sd_logit"])
        table["notes"] += (f"; the i.i.d. interval is the wider of the pooled binomial one and the between-prompt "
                           f"(random-effects, {spread['n_prompts']} prompts) one")
    if all(p is not None for p in pos):
        table["conditional"] = {"rates": [float(p.estimate) for p in pos], "ci_low": [float(p.ci_low) for p in pos],
                                "ci_high": [float(p.ci_high) for p in pos]}
    ra = [r for r in ref if r.rank_accepted is not None]
    if ra:
        m = max(r.rank_accepted.size for r in ra)
        acc = sum(np.pad(r.rank_accepted, (0, m - r.rank_accepted.size)) for r in ra)
        tri = sum(np.pad(r.rank_tried, (0, m - r.rank_tried.size)) for r in ra)
        keep = int(np.max(np.flatnonzero(tri > 0))) + 1 if np.any(tri > 0) else 0
        if keep:
            rf = fit_rank_acceptance(acc[:keep], tri[:keep], level=level)
            table["rank"] = {"rank_acceptance": [float(x) for x in np.nan_to_num(rf.estimate)],
                             "ci_low": [float(x) for x in rf.ci_low], "ci_high": [float(x) for x in rf.ci_high]}
    # The runs vary the temperature over the same prompts, which identifies its slope; they do not vary a
    # prompt's length apart from what it asks for. Within a response the rate moves with what is being
    # written (the code copied first, then the edit), not because the context grew, so that slope is
    # reported and not applied: predictions hold the rate at every context (and warn outside coverage).
    table["dependence"] = {"context_decay_per_token": 0.0, "context_decay_ci": [0.0, 0.0],
                           "temperature_slope": dep.temperature_slope,
                           "temperature_slope_ci": [_finite(x) for x in dep.temperature_slope_ci],
                           "within_prompt_context_slope": dep.context_decay_per_token,
                           "within_prompt_context_slope_ci": [_finite(x) for x in dep.context_decay_ci]}
    table["notes"] += ("; context dependence not identified by these runs: the acceptance held at every context, the "
                       "slope within each response reported as within_prompt_context_slope")
    all_ctx = np.concatenate([r.context_len for r in records])
    table["coverage"] = {"context_len": [float(all_ctx.min()), float(all_ctx.max())],
                         "temperatures": sorted({r.temperature for r in records}), "ks": [k],
                         "workloads": [records[0].workload], "drafters": [records[0].drafter]}
    table["runs"] = [{k2: v for k2, v in row.items() if v is not None} for row in rows]
    return table


def _finite(x: float) -> float:
    """An unbounded interval end written as a large finite number (TOML has inf, but the reader wants
    finite figures)."""
    return float(x) if math.isfinite(x) else math.copysign(1e9, x)


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptanceCalibrationResult:
    tables: dict  # name -> calibration table (dict)
    records: tuple
    skipped: tuple  # drafters asked for but not available, with why


def _record_key(config: AcceptanceRunConfig, drafter: str, workload: str, temperature: float) -> str:
    return json.dumps([str(config.model), config.k, config.layers, config.n_prompts, config.tokens, config.seed, drafter,
                       workload, float(temperature)])


def _load_records(path) -> dict:
    out = {}
    if path is not None and Path(path).is_file():
        for line in Path(path).read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                out[r["key"]] = CycleRecord(
                    drafter=r["drafter"], workload=r["workload"], temperature=r["temperature"], verify=r["verify"],
                    k=r["k"], drafted=np.array(r["drafted"], np.int64), accepted=np.array(r["accepted"], np.int64),
                    context_len=np.array(r["context_len"], np.int64), seconds=r["seconds"],
                    rank_accepted=None if r["rank_accepted"] is None else np.array(r["rank_accepted"]),
                    rank_tried=None if r["rank_tried"] is None else np.array(r["rank_tried"]),
                    prompt=None if r.get("prompt") is None else np.array(r["prompt"], np.int64))
    return out


def _save_record(path, key: str, r: CycleRecord) -> None:
    if path is None:
        return
    with open(path, "a") as f:
        f.write(json.dumps({"key": key, "drafter": r.drafter, "workload": r.workload, "temperature": r.temperature,
                            "verify": r.verify, "k": r.k, "drafted": r.drafted.tolist(), "accepted": r.accepted.tolist(),
                            "context_len": r.context_len.tolist(), "seconds": r.seconds,
                            "rank_accepted": None if r.rank_accepted is None else r.rank_accepted.tolist(),
                            "rank_tried": None if r.rank_tried is None else r.rank_tried.tolist(),
                            "prompt": None if r.prompt is None else r.prompt.tolist()}) + "\n")


def calibrate_acceptance(config: AcceptanceRunConfig, *, command: str, target_id: str = "smollm2-135m-q4_1",
                         name_prefix: str = "smollm2-135m", progress=None, records=None) -> AcceptanceCalibrationResult:
    """Run every (drafter, workload, temperature) and fit one calibration per (drafter, workload).
    records: a JSON-lines file each finished run is appended to, and runs already in it (the same
    configuration) are read back instead of run again (an interrupted calibration resumes)."""
    from ..decoder import run
    from ..decoder import workloads as wl

    target = run.load_target(config.model, config.threads)
    tok = target.tokenizer
    avail = available_drafters(target, k=config.k, layers=config.layers)
    names = list(config.drafters) if config.drafters is not None else list(avail)
    skipped = tuple(f"{n}: no weights in specsim/decoder/weights (run `specsim decoder train`)" for n in names
                    if n not in avail)
    names = [n for n in names if n in avail]
    if not names:
        raise SpecError("calibrate acceptance: none of the drafters asked for is available here: " + "; ".join(skipped))
    done = _load_records(records)
    tables, all_records = {}, []
    for w in config.workloads:
        work = wl.load_workload(w, config.n_prompts, seed=config.seed)
        prompts = [wl.chat_prompt(tok, t, work.response_prefix) for t in work.prompts]
        for n in names:
            build, note = avail[n]
            recs = []
            for t in config.temperatures:
                key = _record_key(config, n, w, t)
                if key in done:
                    recs.append(done[key])
                    continue
                if progress:
                    progress(f"{n} on {w} at temperature {t:g}")
                recs.append(run_drafter(target, build, name=n, workload=w, temperature=t, k=config.k,
                                        prompts=prompts, tokens=config.tokens, seed=config.seed))
                _save_record(records, key, recs[-1])
            all_records += recs
            name = f"{name_prefix}/{n}/{w}"
            tables[name] = calibration_table(recs, target_id=target_id, name=name, command=command,
                                             level=config.level, k=config.k,
                                             note=f"{note}; {config.n_prompts} prompts x {config.tokens} tokens per "
                                                  f"temperature, seed {config.seed}")
    return AcceptanceCalibrationResult(tables=tables, records=tuple(all_records), skipped=skipped)


__all__ = ["AcceptanceRunConfig", "CycleRecord", "DependenceFit", "calibrate_acceptance", "calibration_table",
           "fit_dependence", "fit_iid", "fit_positions", "bernoulli_trials", "available_drafters", "run_drafter",
           "prompt_index", "between_prompt_interval",
           "TEMPERATURES", "WORKLOADS"]
