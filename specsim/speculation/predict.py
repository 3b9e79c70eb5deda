"""An operating point → a prediction, and the same point evaluated over grids.

`predict(op)` keeps every input and every intermediate (each step's per-operator cost), so a number
in the output can be traced to the formula (see `cost.roofline`, `speculation.families` and
`speculation.cycle`) and the inputs. `grid(op, ...)` evaluates the point's family on grids of K,
tree size, batch, context and acceptance (sweeps, thresholds); `tokens_per_cycle_at(op, ...)` is the
expected tokens per cycle the point's acceptance gives. All three read the point only.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..cost.pricing import price_pass, target_step_cost
from ..cost.roofline import StepCost
from .acceptance import shaped_conditional, tau_from_conditional
from .cycle import (CycleTimes, GridResult, cycle_times, evaluate_grid, expected_verify_width, plain_parts,
                    speculative_cycle, tokens_per_cycle)
from .families import draft_cost
from ..errors import SpecError
from .operating_point import OperatingPoint


@dataclass(frozen=True, slots=True, kw_only=True)
class Prediction:
    point: OperatingPoint
    alpha: float | None
    plain_step: StepCost
    draft_step: StepCost | None
    verify_step: StepCost
    cycle: CycleTimes
    verify_q_len: int = 1
    verify_extra_s: float = 0.0  # work a family adds inside the verify pass (Medusa's heads)
    band: dict | None = None  # from a calibrated acceptance's interval: see `acceptance_band`

    def to_dict(self) -> dict:
        op, c = self.point, self.cycle
        out = {
            **op.to_dict(), "alpha": self.alpha,
            "target_step_time_s": float(c.target_step_time_s), "draft_step_time_s": float(c.draft_step_time_s),
            "draft_time_s": float(c.draft_time_s), "verify_time_s": float(c.verify_time_s),
            "cycle_overhead_s": float(c.overhead_s), "cycle_time_s": float(c.cycle_time_s),
            "tokens_per_cycle": float(c.tokens_per_cycle), "baseline_tokens_per_s": float(c.baseline_tokens_per_s),
            "tokens_per_s": float(c.tokens_per_s), "speedup": float(c.speedup),
            "ridge_flops_per_byte": op.hardware.ridge_flops_per_byte(op.target.compute_dtype),
            "verify_q_len": self.verify_q_len,
            # the tokens one verify pass carries: B·q, or its expectation where a share of cycles drafts nothing
            "verify_tokens_in_flight": (op.batch_size * float(expected_verify_width(op.drafter, self.verify_q_len))
                                        if op.speculative and op.drafter.draft_frac != 1.0
                                        else op.batch_size * self.verify_q_len),
            "draft_frac": float(op.drafter.draft_frac) if op.speculative else None,
            "layer_split_hop_s": op.deployment.hop_s,
            "plain_step": self.plain_step.breakdown(), "verify_step": self.verify_step.breakdown(),
            "priced_by": {"target": self.plain_step.source,
                          **({"drafter": self.draft_step.source} if self.draft_step is not None else {})},
        }
        # every iteration on one basis: device work and host work apart, and whether the stack overlaps them
        for key in ("plain_device_s", "plain_host_s", "device_s", "host_s"):
            v = getattr(c, key)
            if v is not None:
                out["cycle_" + key if key in ("device_s", "host_s") else key] = float(v)
        out["host_overlaps_device"] = {"plain": bool(op.deployment.host.overlaps(False)),
                                       "speculative": bool(op.deployment.host.overlaps(True))}
        if self.draft_step is not None:
            out["draft_step"] = self.draft_step.breakdown()
        if self.band is not None:
            out.update(self.band)
        return out


def tokens_per_cycle_at(op: OperatingPoint, *, k=None, tree_size=None, context_len=None, temperature=None):
    """E[tokens per cycle] (bonus included) the point's acceptance gives at depth K, tree size M,
    context L and temperature T (each defaulting to the point's). A τ the scenario gave is used as
    is at the point it was measured (`Acceptance.tau_point`: K, tree, context, temperature);
    elsewhere the i.i.d. α that gives it at K stands in (for a tree, the chain-equivalent α). Per-position rates give
    τ = 1 + Σ_j Π_{i≤j} c_i; a calibrated chain's measured shape, rates clip(α·r_j, 0, 1)
    (`Acceptance.position_ratios`)."""
    k = op.k if k is None else k
    tree_size = op.tree_size if tree_size is None else tree_size
    context_len = op.context_len if context_len is None else context_len
    temperature = op.temperature if temperature is None else temperature
    acc = op.require_acceptance()
    tree = tree_size is not None and op.drafter.supports_tree
    here = (k, tree_size if tree else None, context_len, float(temperature))
    if acc.tau_given is not None and here == acc.tau_point:
        return float(acc.tau_given)  # measured at this very point (a tree's mean accepted length too)
    if acc.model.conditional is not None and not tree and op.drafter.family.uses_k:
        return float(tau_from_conditional(acc.model.conditional_at(k, context_len, temperature)))
    alpha = acc.alpha_at(context_len, temperature)
    if acc.position_ratios is not None and not tree:  # set only for a family drafting a chain of K
        return float(tau_from_conditional(shaped_conditional(alpha, acc.position_ratios, k)))
    return float(tokens_per_cycle(op.drafter, alpha=alpha, k=k, tree_size=tree_size if tree else None,
                                  n_ranks=acc.n_ranks, rank_decay=acc.rank_decay))


def predict(op: OperatingPoint, *, check_memory: bool = True) -> Prediction:
    """Plain against speculative decoding at the operating point. Raises DoesNotFitError (naming
    each part) when it does not fit, unless check_memory is False.

    Each distinct pass is priced once: the plain step, the verify pass, and each drafting pass of
    the cycle (`families.draft_cost`); the cycle is built from those same figures, so
    `verify_step.time_s + verify_extra_s == cycle.verify_time_s` (layer-split hops included in both)."""
    if check_memory:
        op.memory.check()
    dep, target = op.deployment, op.target
    b, l = op.batch_size, op.context_len
    plain = target_step_cost(target, dep, batch_size=b, q_len=1, context_len=l)
    if not op.speculative:
        dev, host = plain_parts(target, dep, batch_size=b, context_len=l, device_time_s=plain.time_s)
        t = dep.iteration_time_s(dev, host, speculative=False)
        cyc = cycle_times(target_step_time_s=t, draft_time_s=0.0, verify_time_s=t, tokens_per_cycle=1.0, batch_size=b,
                          draft_step_time_s=0.0,
                          parts=dict(plain_device_s=dev, plain_host_s=host, device_s=dev, host_s=host))
        _check_finite(op, cyc)
        return Prediction(point=op, alpha=None, plain_step=plain, draft_step=None, verify_step=plain, cycle=cyc)
    tree = op.tree_size if op.is_tree else None
    if op.drafter.k_schedule == "hf-heuristic":
        cyc = _scheduled_cycle(op, plain_step_time_s=plain.time_s)
        q, first, extra = op.k + 1, None, 0.0
        verify = target_step_cost(target, dep, batch_size=b, q_len=q, context_len=l)
    else:
        tau = tokens_per_cycle_at(op)
        q = op.verify_q_len
        dc = draft_cost(op.drafter, target, dep, batch_size=b, k=op.k, tree_size=tree, context_len=l, work=op.work)
        verify = target_step_cost(target, dep, batch_size=b, q_len=q, context_len=l, draft_frac=op.drafter.draft_frac)
        cyc = speculative_cycle(op.drafter, target, dep, batch_size=b, k=op.k, context_len=l, tokens_per_cycle=tau,
                                tree_size=tree, plain_step_time_s=plain.time_s, verify_step_time_s=verify.time_s,
                                work=op.work, draft=dc)
        first, extra = dc.first_pass, float(dc.verify_extra_s)
    if first is None and op.work.pass_model is not None:  # the scheduled cycle: its first pass at one token
        first = price_pass(op.work.pass_model, dep, batch_size=b, q_len=1, context_len=l, tp=op.work.pass_tp)
    _check_finite(op, cyc)
    return Prediction(point=op, alpha=op.alpha, plain_step=plain, draft_step=first, verify_step=verify, cycle=cyc,
                      verify_q_len=q, verify_extra_s=extra, band=acceptance_band(op))


def with_alpha(op: OperatingPoint, alpha: float) -> OperatingPoint:
    """The point with its i.i.d. α at the acceptance model's reference replaced (its dependence on
    context and temperature kept), and no calibration attached."""
    acc = op.require_acceptance()
    return replace(op, acceptance=replace(acc, model=replace(acc.model, alpha=float(alpha)), calibration=None))


def acceptance_band(op: OperatingPoint) -> dict | None:
    """For a point whose acceptance comes from a calibration (`[acceptance] calibrated`): speedup and
    tokens/s at the ends of the calibration's interval for α (the same dependence on context and
    temperature applies), and the ways the point lies outside what the calibration covered. None
    otherwise."""
    cal = op.acceptance.calibration if op.speculative else None
    if cal is None or op.acceptance.model is None or op.acceptance.model.alpha is None:
        return None
    ends = {}
    for end, a in (("low", cal.alpha_low), ("high", cal.alpha_high)):
        at = with_alpha(op, a)
        c = predict(at, check_memory=False).cycle
        ends[end] = (at.alpha, float(c.speedup), float(c.tokens_per_s))
    warn = cal.coverage_warnings(context_len=op.context_len, temperature=op.temperature, method=op.method,
                                 workload=op.acceptance.workload, k=op.k if op.drafter.family.uses_k else None,
                                 target=op.target.id)
    return {"calibration": cal.name, "level": cal.level, "alpha_low": ends["low"][0], "alpha_high": ends["high"][0],
            "speedup_low": ends["low"][1], "speedup_high": ends["high"][1], "tokens_per_s_low": ends["low"][2],
            "tokens_per_s_high": ends["high"][2], "calibration_warnings": warn}


def format_band(value: float, band: dict | None, key: str = "speedup", unit: str = "×") -> str:
    """'1.54× [1.49, 1.60]': a predicted figure with the calibration's band (just the figure without one)."""
    if band is None:
        return f"{value:.2f}{unit}"
    return f"{value:.2f}{unit} [{band[key + '_low']:.2f}, {band[key + '_high']:.2f}]"


def _scheduled_cycle(op: OperatingPoint, *, plain_step_time_s=None) -> CycleTimes:
    """The long-run cycle under Hugging Face's heuristic draft-length schedule: each quantity the
    stationary-probability-weighted mean over the draft lengths K the schedule visits, so that
    tokens/s = Σ π_K τ_K / Σ π_K cycle_K (speculation.schedule)."""
    from .acceptance import tokens_per_cycle_iid
    from .schedule import hf_heuristic_stationary

    alpha = float(op.acceptance.alpha_at(op.context_len, op.temperature))
    ks, pi = hf_heuristic_stationary(alpha)
    keep = pi > 1e-12
    ks, pi = ks[keep], pi[keep] / pi[keep].sum()
    tau = tokens_per_cycle_iid(alpha, ks)
    c = speculative_cycle(op.drafter, op.target, op.deployment, batch_size=op.batch_size, k=ks, context_len=op.context_len,
                          tokens_per_cycle=tau, plain_step_time_s=plain_step_time_s, work=op.work)
    mean = lambda x: float(pi @ np.broadcast_to(np.asarray(x, dtype=float), ks.shape))  # noqa: E731
    return cycle_times(target_step_time_s=mean(c.target_step_time_s), draft_time_s=mean(c.draft_time_s),
                       verify_time_s=mean(c.verify_time_s), tokens_per_cycle=mean(tau), batch_size=op.batch_size,
                       draft_step_time_s=mean(c.draft_step_time_s), overhead_s=mean(c.overhead_s),
                       verify_q_len=mean(c.verify_q_len))


def _check_finite(op: OperatingPoint, cyc) -> None:
    """A time that overflows or vanishes means an input far outside any real part or model: say so
    rather than print a speedup of NaN."""
    values = [cyc.target_step_time_s, cyc.cycle_time_s, cyc.tokens_per_s, cyc.baseline_tokens_per_s]
    if not all(np.all(np.isfinite(v)) and np.all(np.asarray(v) > 0) for v in values):
        hw = op.hardware
        raise SpecError(f"scenario {op.name!r}: the step or cycle time is not a finite positive number on hardware "
                        f"{hw.id!r} (memory bandwidth {hw.mem_bandwidth_bytes_per_s / 1e9:g} GB/s, peak compute "
                        f"{max(hw.peak_flops_per_s.values()) / 1e12:g} TFLOP/s): expected figures of a real part")


def grid(op: OperatingPoint, *, k=None, tree_size=None, batch_size=None, context_len=None, alpha=None) -> GridResult:
    """The point's family evaluated on the outer product K × M × B × L × α (each axis defaulting
    to the point's value; `alpha` defaulting to the point's acceptance, moved along the acceptance
    model's dependence on context and temperature). See `cycle.evaluate_grid`."""
    acc = op.require_acceptance()
    if op.drafter.k_schedule != "fixed":
        raise SpecError(f"scenario {op.name!r}: k_schedule {op.drafter.k_schedule!r} is predicted at one point "
                        f"(predict, replay); grids (sweep, threshold) need a fixed K")
    ks = [op.k] if k is None else k
    ls = [op.context_len] if context_len is None else context_len
    bs = [op.batch_size] if batch_size is None else batch_size
    factor = acc.factor(np.asarray(ls, dtype=float), op.temperature)
    conditional = None
    if alpha is None:
        if acc.model.conditional is not None:
            conditional = acc.model.conditional
            alpha = [conditional[0]]
        else:
            alpha = [acc.model.alpha]
    trees = None
    if tree_size is not None and op.drafter.supports_tree:
        trees = tree_size
    elif tree_size is None and op.is_tree:
        trees = [op.tree_size]
    g = evaluate_grid(op.drafter, op.target, op.deployment, k=ks, tree_size=trees, batch_size=bs, context_len=ls,
                      alpha=alpha, n_ranks=acc.n_ranks, rank_decay=acc.rank_decay, alpha_factor=factor,
                      conditional=conditional, position_ratios=acc.position_ratios, work=op.work)
    _check_finite(op, g)
    return g


__all__ = ["Prediction", "predict", "grid", "tokens_per_cycle_at", "acceptance_band", "with_alpha", "format_band",
           "band_grid"]


def band_grid(op: OperatingPoint, **axes) -> tuple[GridResult, GridResult] | None:
    """`grid(op, **axes)` at the low and the high end of a calibrated acceptance's interval (None when
    the acceptance is not calibrated, or when the grid sets α itself)."""
    cal = op.acceptance.calibration
    if cal is None or axes.get("alpha") is not None or op.acceptance.model is None or op.acceptance.model.alpha is None:
        return None
    return grid(with_alpha(op, cal.alpha_low), **axes), grid(with_alpha(op, cal.alpha_high), **axes)
