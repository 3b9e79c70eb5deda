"""Two scenarios side by side: verdict, speed, memory, and — at a rate — capacity and cost.

`compare(a, b)` runs `advise` on each (analytic, or with the serving simulation when asked and the
scenario has a workload), `predict` at each operating point, and, when a rate is given, `capacity`
for each scenario that has a workload. Rows are labelled with their units; a row that does not apply
to a scenario says why (no workload, no price).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import SpecError
from ..speculation.operating_point import OperatingPoint
from ..speculation.predict import predict
from .advise import advise
from .capacity import capacity
from .progress import ProgressSink, progress_or_null


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    points: tuple
    advice: tuple
    predictions: tuple
    plans: tuple
    rows: list  # [(label, value_a, value_b)]

    def to_dict(self) -> dict:
        return {"scenarios": [p.name for p in self.points],
                "rows": [{"quantity": r[0], self.points[0].name + " (A)": r[1], self.points[1].name + " (B)": r[2]}
                         for r in self.rows],
                "advice": [a.to_dict() for a in self.advice],
                "capacity": [None if p is None else p.to_dict() for p in self.plans]}


def _rows(points, advice, preds, plans, rate) -> list:
    def both(f):
        return [f(i) for i in range(2)]

    rows = [("scenario", *both(lambda i: points[i].name)),
            ("hardware", *both(lambda i: f"{points[i].deployment.n_devices}× {points[i].hardware.id}"
                               + (f", {points[i].stack.id}" if points[i].stack else ""))),
            ("target / drafter", *both(lambda i: f"{points[i].target.id} / "
                                       + (points[i].drafter.drafter.id if points[i].drafter is not None
                                          and points[i].drafter.drafter is not None else points[i].method))),
            ("verdict", *both(lambda i: advice[i].headline)),
            ("decided by", *both(lambda i: advice[i].decided_by)),
            ("speedup at batch 1 (scenario K)", *both(lambda i: f"{advice[i].speedup_b1:.2f}×")),
            ("at the operating point: batch, context", *both(lambda i: f"B = {points[i].batch_size}, "
                                                             f"L = {points[i].context_len}")),
            ("plain decoding, tokens/s a sequence", *both(lambda i: f"{preds[i].cycle.baseline_tokens_per_s:.1f}")),
            ("speculative, tokens/s a sequence", *both(lambda i: f"{preds[i].cycle.tokens_per_s:.1f}")),
            ("speedup at the operating point", *both(lambda i: f"{preds[i].cycle.speedup:.2f}×")),
            ("memory a device (GB)", *both(lambda i: f"{points[i].memory.total_bytes / 1e9:.1f} of "
                                           f"{points[i].memory.capacity_bytes / 1e9:.1f}"
                                           + ("" if points[i].memory.fits else " — does not fit"))),
            ("largest batch plain / speculating", *both(lambda i: f"{points[i].memory.max_batch_plain} / "
                                                        f"{points[i].memory.max_batch_speculative}")),
            ("acceptance band", *both(lambda i: ", ".join(f"α {r['alpha']:.2f}: {r['speedup_b1']:.2f}×"
                                                          for r in advice[i].band.rows)))]
    if rate is not None:
        def cap(i, f, what):
            p = plans[i]
            if p is None:
                return "n/a: no [workload]"
            return f(p)
        rows += [
            (f"replicas at {rate:g} req/s without / with speculation",
             *both(lambda i: cap(i, lambda p: f"{p.without.replicas or 'not met'} / "
                                 + (f"{p.with_speculation.replicas or 'not met'}" if p.with_speculation else "-"),
                                 "replicas"))),
            ("GPUs without / with", *both(lambda i: cap(i, lambda p: f"{p.without.gpus or '-'} / "
                                                          + (f"{p.with_speculation.gpus or '-'}" if p.with_speculation
                                                             else "-"), "gpus"))),
            ("$ per million output tokens without / with", *both(lambda i: cap(i, lambda p: (
                "no price" if p.price_usd_per_device_hour is None else
                f"{_usd(p.without.cost_per_million_usd)} / "
                + (_usd(p.with_speculation.cost_per_million_usd) if p.with_speculation else "-")), "cost"))),
            ("price source", *both(lambda i: cap(i, lambda p: p.price_source, "price"))),
        ]
    return rows


def _usd(x) -> str:
    return "-" if x is None else f"${x:.3f}"


def compare(a: OperatingPoint, b: OperatingPoint, *, rate_per_s: float | None = None, simulate: bool = False,
            n_requests: int | None = None, gpu_hour_usd: float | None = None, slo_tpot_s: float | None = None,
            slo_ttft_s: float | None = None, seed: int = 0, progress: ProgressSink | None = None) -> Comparison:
    """Side by side (see the module docstring). simulate: choose each verdict's gate with the serving
    simulator (slower); rate_per_s: add capacity and cost at that rate."""
    prog = progress_or_null(progress)
    points = (a, b)
    for op in points:
        if not op.speculative:
            raise SpecError(f"scenario {op.name!r}: method {op.method!r} drafts nothing; compare needs two "
                            f"speculating scenarios")
    prog.add(2)
    adv, preds, plans = [], [], []
    for op in points:
        prog.phase(f"advise {op.name}")
        adv.append(advise(op, simulate=simulate, n_requests=n_requests, seed=seed, progress=prog))
        preds.append(predict(op, check_memory=False))
        prog.step()
    for op in points:
        if rate_per_s is None or not op.section("workload"):
            plans.append(None)
            continue
        plans.append(capacity(op, rate_per_s=rate_per_s, n_requests=n_requests, gpu_hour_usd=gpu_hour_usd,
                              slo_tpot_s=slo_tpot_s, slo_ttft_s=slo_ttft_s, seed=seed, progress=prog))
    return Comparison(points=points, advice=tuple(adv), predictions=tuple(preds), plans=tuple(plans),
                      rows=_rows(points, adv, preds, plans, rate_per_s))


__all__ = ["Comparison", "compare"]
