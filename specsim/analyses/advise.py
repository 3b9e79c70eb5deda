"""The planner's answer for one scenario: speculation on or off, K per batch band, the gate, the
config lines to paste, how sure we are, and what would change the answer.

`advise(op)` decides in this order, and says which step decided:
1. memory: the target must fit (else DoesNotFitError); speculation needs its drafter, the drafter's
   cache and the speculative slots to fit as well (else OFF);
2. batch 1: if speculation does not pay 1 + margin at a running batch of one (under the scenario's
   workload when it has one, else decode only), it is OFF;
3. the gate: with a serving workload, candidate `disable_by_batch_size` gates around the analytic
   switch-off point are simulated beside never-on, always-on and the scenario's own policies at every
   rate of the scenario, and the gate closest to the best policy at every rate is chosen
   (`gates.evaluate_gates`); if that is "never on", speculation is OFF. Without a workload the gate is
   the analytic switch-off point (decode only).
K per batch band is the threshold policy's (K re-tuned per band, TensorRT-LLM's schedule); vLLM and
SGLang run one K (the scenario's). The configs are `threshold.stack_configs` with the chosen gate.

Uncertainty: when the acceptance has no calibrated band (no measurement in this version), α is moved
by ± `alpha_delta` (absolute; default 0.05) and the batch-1 speedup and the analytic switch-off are
recomputed at both ends, so the answer's sensitivity is on the page, stated as an assumption.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import DoesNotFitError, SpecError, field_error
from ..speculation.operating_point import OperatingPoint
from ..speculation.switch_off import SwitchOff
from .gates import GateEvaluation, evaluate_gates
from .progress import ProgressSink, progress_or_null
from .threshold import (ThresholdPolicy, bands_from_rows, batch_rows, off_words, recommended_switch_off, stack_configs,
                        threshold_policy, threshold_settings)

DEFAULT_ALPHA_DELTA = 0.05


@dataclass(frozen=True, slots=True, kw_only=True)
class AlphaBand:
    """The answer at α − δ and α + δ. rows: [{alpha, speedup_b1, batch_off, on}] (analytic); curves:
    the analytic speedup curve at each end, (batch sizes, speedup) as the switch-off search evaluated
    it (the report's first figure shades between them; not part of to_dict)."""

    alpha: float
    delta: float
    calibrated: bool
    source: str
    rows: tuple
    curves: tuple = ()

    @property
    def verdict_holds(self) -> bool:
        return len({r["on"] for r in self.rows}) == 1

    def text(self) -> str:
        ends = "; ".join(f"α = {r['alpha']:.3f}: {r['speedup_b1']:.2f}× at batch 1, {r['pays']}" for r in self.rows)
        kind = (f"the calibrated acceptance interval ({self.source})" if self.calibrated else
                f"no calibrated band exists for this acceptance: α varied by ±{self.delta:g} (an assumption)")
        return f"{kind} — {ends}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Advice:
    """The verdict and everything behind it (see the module docstring).

    on: speculate or not; gate_batch: speculation off while the running batch is >= gate_batch
    (None: no gate); decided_by: which step decided; bands: K per batch band (K re-tuned, 0 = off,
    clipped at the gate); configs: vLLM / SGLang / TensorRT-LLM lines; speedup_b1: the analytic
    speedup at batch 1 with the scenario's K; gates: the serving evaluation (None without a workload)."""

    point: OperatingPoint
    on: bool
    reason: str
    decided_by: str
    k: int
    tree_size: int | None
    gate_batch: int | None
    min_batch: int | None
    speedup_b1: float
    margin: float
    analytic: SwitchOff
    policy: ThresholdPolicy
    bands: list
    configs: dict
    gates: GateEvaluation | None
    band: AlphaBand
    memory: dict
    assumptions: list
    notes: list = field(default_factory=list)

    @property
    def k_note(self) -> str | None:
        """One line when the K-per-band schedule runs another K than the verdict's somewhere (None: they
        agree, or speculation is off)."""
        ranges, prev = [], 0
        for b in self.bands:  # contiguous, as the band table shows them
            ranges.append((prev + 1 if prev else b["batch_min"], b["batch_max"], b["k"]))
            prev = b["batch_max"]
        other = [(lo, hi, k) for lo, hi, k in ranges if k > 0 and k != self.k]
        if not self.on or not other:
            return None
        rows = ", ".join(f"K = {k} at batch {lo}–{hi}" if lo != hi else f"K = {k} at batch {lo}" for lo, hi, k in other)
        return (f"the verdict's K = {self.k} is what vLLM and SGLang run at every batch; a stack with a per-batch "
                f"schedule (TensorRT-LLM's draft_len_schedule) runs the band's best K instead: {rows}")

    @property
    def headline(self) -> str:
        op = self.point
        what = op.method + (f" ({op.drafter.drafter.id})" if op.drafter is not None and op.drafter.drafter else "")
        if not self.on:
            return f"OFF — leave {what} off: {self.reason}"
        shape = f"tree of {self.tree_size} nodes, depth {self.k}" if self.tree_size else f"K = {self.k}"
        gate = (f"switch it off while the running batch is ≥ {self.gate_batch}" if self.gate_batch is not None
                else "no batch gate needed")
        if self.min_batch is not None:
            gate = f"only while the running batch is ≥ {self.min_batch}; " + gate
        return f"ON — {what}, {shape}; {gate}"

    def to_dict(self, *, runs: bool = True) -> dict:
        return {"scenario": self.point.name, "on": self.on, "headline": self.headline, "reason": self.reason,
                "decided_by": self.decided_by, "k": self.k, "k_note": self.k_note,
                "k_observed": self.policy.k_observed, "tree_size": self.tree_size, "gate_batch": self.gate_batch,
                "min_batch": self.min_batch,
                "speedup_batch_1": self.speedup_b1, "margin": self.margin, "bands": self.bands,
                "configs": self.configs, "analytic_switch_off": self.analytic.to_dict(),
                "uncertainty": {"alpha": self.band.alpha, "delta": self.band.delta, "calibrated": self.band.calibrated,
                                "source": self.band.source, "rows": list(self.band.rows),
                                "verdict_holds": self.band.verdict_holds},
                "memory": self.memory, "assumptions": self.assumptions, "notes": self.notes,
                "serving": None if self.gates is None else self.gates.to_dict(runs=runs)}


def _alpha_variant(op: OperatingPoint, alpha: float) -> OperatingPoint:
    """The point with acceptance α (per-position rates: each moved by the same amount)."""
    m = op.acceptance.model
    if m.conditional is not None:
        shift = alpha - float(op.acceptance.alpha_at(op.context_len, op.temperature))
        acc = dict(op.scenario.section("acceptance"))
        acc["by_position"] = [float(np.clip(c + shift, 0.0, 1.0)) for c in m.conditional]
        return op.with_overrides(sections={"acceptance": acc})
    return op.with_overrides(alpha=float(alpha))


def _speedup_b1(so: SwitchOff) -> float:
    i = int(np.searchsorted(so.batch_sizes, 1))
    return float(so.speedup[i])


def alpha_band(op: OperatingPoint, *, delta: float = DEFAULT_ALPHA_DELTA, margin: float) -> AlphaBand:
    """The batch-1 speedup and the analytic switch-off at α ± delta (see the module docstring)."""
    if not (np.isfinite(delta) and 0.0 < delta < 0.5):
        raise field_error("advise", "alpha_delta", delta, "an acceptance offset in (0, 0.5), e.g. 0.05")
    alpha = float(op.alpha)
    cal = getattr(op.acceptance, "calibration", None)  # a calibrated acceptance carries its interval
    lo, hi = getattr(cal, "alpha_low", None), getattr(cal, "alpha_high", None)
    calibrated = lo is not None and hi is not None and op.acceptance.model.alpha is not None
    ends = (float(lo), float(hi)) if calibrated else (alpha - delta, alpha + delta)
    rows, curves = [], []
    for a in ends:
        a = float(np.clip(a, 0.01, 0.99))
        so = recommended_switch_off(_alpha_variant(op, a), margin=margin)
        s1 = _speedup_b1(so)
        rows.append({"alpha": a, "speedup_b1": s1, "batch_off": so.batch_off, "pays": describe_pays(so, margin),
                     "on": paying_batches(so, margin) is not None})
        curves.append((np.asarray(so.batch_sizes), np.asarray(so.speedup, dtype=float)))
    return AlphaBand(alpha=alpha, delta=float(delta), calibrated=bool(calibrated),
                     source=(str(getattr(cal, "source", "")) or "calibration") if calibrated else
                     (op.acceptance.source or "the scenario"), rows=tuple(rows), curves=tuple(curves))


def paying_batches(so: SwitchOff, margin: float) -> tuple[int, int | None] | None:
    """(first batch where the scenario's K pays 1 + margin, first batch after it where it stops, or
    None) on the analytic curve, memory included; None when it pays nowhere. The curve is every
    batch (decode only) or the switch-off search's sample of batches (under a workload)."""
    b = np.asarray(so.batch_sizes)
    ok = np.asarray(so.speedup) >= 1.0 + margin
    if so.max_batch_speculative is not None:
        ok &= b <= so.max_batch_speculative
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return None
    first = int(idx[0])
    after = np.flatnonzero(~ok[first:])
    if after.size:
        return int(b[first]), int(b[first + after[0]])
    limit = so.max_batch_speculative
    off = limit + 1 if limit is not None and limit < so.batch_limit else None
    return int(b[first]), off


def describe_pays(so: SwitchOff, margin: float) -> str:
    """Where the scenario's K pays on the analytic curve, in words."""
    r = paying_batches(so, margin)
    if r is None:
        return f"never pays up to batch {so.batch_limit}"
    on, off = r
    mem = so.max_batch_speculative
    tail = ("" if off is None else
            f" (memory holds {mem} sequences)" if mem is not None and off == mem + 1 else "")
    if on <= 1:
        return f"pays at every batch to {so.batch_limit}" if off is None else f"off at batch ≥ {off}{tail}"
    return f"pays from batch {on}" + ("" if off is None else f", off at batch ≥ {off}{tail}")


def largest_simulated_batch(gates: GateEvaluation) -> int:
    """The largest running batch any always-on run of the evaluation reached (over every rate): the
    simulation has nothing to say about a gate above it, which never trips."""
    t = gates.table
    static = t[t["kind"] == "static"]
    return int(static["batch_size_max"].max()) if len(static) and "batch_size_max" in static else 0


def _unmet_rates(gates: GateEvaluation) -> list:
    """The rates at which no simulated policy meets the SLO for a single request."""
    t = gates.table
    out = []
    for r, g in t.groupby(t["rate_per_s"].astype(float).fillna(-1.0), sort=True):
        if float(g["slo_attainment_frac"].astype(float).fillna(0.0).max()) <= 0.0:
            out.append(None if r < 0 else float(r))
    return out


def deployed_bands(op: OperatingPoint, policy: ThresholdPolicy, st, *, workload, gate: int | None,
                   min_batch: int | None) -> tuple[list, list]:
    """The K-per-band schedule under the deployed gate: the [threshold] batch grid and the batches on
    each side of the gate and of `min_batch`, each evaluated (`threshold.batch_rows`), K re-tuned to
    st.k_max; on below the gate where it does not slow decoding, off from the gate, below min_batch and
    wherever it is slower than plain decoding (`threshold.bands_from_rows`). Returns (bands, the
    batches below the gate that are off because every K is slower than plain decoding)."""
    last = policy.bands[-1]["batch_max"] if policy.bands else 1
    on_to = gate if gate is not None else last + 1
    extra = {on_to - 1, on_to} | ({min_batch - 1, min_batch} if min_batch is not None else set())
    grid_b = sorted({int(b) for b in st.batch_sizes} | {int(b) for b in extra if 1 <= b <= last})
    ks = range(1, st.k_max + 1) if op.drafter.family.uses_k else [op.k]
    rows = batch_rows(op, grid_b, ks=ks, workload=workload, max_batch=policy.recommended.max_batch_speculative)
    bands = bands_from_rows(rows, margin=policy.margin, gate=on_to, min_batch=min_batch, k_observed=st.k_observed)
    slow = [r for r in rows if r["fits"] and r["best_speedup"] < 1.0 and r["batch_size"] < on_to
            and (min_batch is None or r["batch_size"] >= min_batch)]
    return bands, slow


def _min_batch_advice(op: OperatingPoint, configs: dict, min_batch: int) -> str:
    """Where speculation only pays above a batch: which stack lines can say so, each stack that cannot
    warned in its own entry; the note names the same stacks (never one whose method is not shipped)."""
    titles = {"vllm": "vLLM V1", "vllm-v0": "vLLM V0", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
    shipped = {key: c for key, c in configs.items() if c.get("config") is not None or c.get("flags")}
    can = [titles.get(k, k) for k, c in shipped.items() if c.get("expresses_min_batch")]
    cannot = [titles.get(k, k) for k, c in shipped.items() if not c.get("expresses_min_batch")]
    warn = (f"speculation slows running batches below about {min_batch} here and this stack can only switch it off "
            f"above a batch size: enable it where the running batch stays at or above {min_batch}")
    for key, c in shipped.items():
        if not c.get("expresses_min_batch"):
            c["warning"] = f"{c['warning']}; {warn}" if c.get("warning") else warn
    head = f"speculation slows running batches below about {min_batch} here"
    if not shipped:
        return f"{head}; none of vLLM, SGLang and TensorRT-LLM ships {op.method!r} in the versions assumed"
    parts = []
    if can:
        parts.append(f"{' and '.join(can)}'s per-batch schedule starts it at {min_batch}")
    if cannot:
        parts.append(f"{', '.join(cannot)} can only switch it off above a batch size")
    return f"{head}: " + "; ".join(parts)


def _memory_summary(op: OperatingPoint) -> dict:
    mem = op.memory
    return {"parts_bytes": dict(mem.parts_bytes), "total_bytes": mem.total_bytes, "capacity_bytes": mem.capacity_bytes,
            "fits": mem.fits, "max_batch_plain": mem.max_batch_plain,
            "max_batch_speculative": mem.max_batch_speculative, "context_len": op.context_len}


def _assumptions(op: OperatingPoint, policy: ThresholdPolicy, analytic: SwitchOff, gates: GateEvaluation | None,
                 margin: float) -> list[str]:
    out = []
    a = op.acceptance
    if policy.alpha_off_deployed_k is not None:
        ratio = f" (accepted/drafted {policy.alpha_off_ratio:.2f})" if policy.alpha_off_ratio is not None else ""
        out.append(f"acceptance: α = {op.alpha:.3f} from {a.source or 'the scenario'}; below α = "
                   f"{policy.alpha_off_deployed_k:.3f}{ratio} speculation with K = {op.k} stops paying even at "
                   f"batch 1 (decode only)")
    else:
        out.append(f"acceptance: α = {op.alpha:.3f} from {a.source or 'the scenario'}; with K = {op.k} it never "
                   f"pays at batch 1 on the acceptance grid")
    d = policy.answers["decode-only, scenario K"]
    if analytic.workload is not None:
        w = analytic.workload
        out.append(f"workload: {w.mean_prompt_tokens:.0f} prompt and {w.mean_output_tokens:.0f} output tokens a "
                   f"request on average (prompt/output {w.prompt_per_output:.2f}, decode context ≈ "
                   f"{w.decode_context_len:.0f}; {w.source}); prompts share the iterations, so on the analytic "
                   f"speedup curve: {describe_pays(analytic, margin)}, where decode-only analytics say: "
                   f"{describe_pays(d, margin)}")
    else:
        out.append(f"load: decode only (no [workload] in the scenario): no prefill shares the iterations; a "
                   f"serving workload moves the switch-off earlier")
    ctx = op.context_len
    long_ctx = min(4 * max(ctx, 256), (op.target.max_context or 4 * max(ctx, 256)) - op.verify_q_len - 1)
    if long_ctx > ctx:
        try:
            so_long = recommended_switch_off(op.with_overrides(context_len=int(long_ctx)), decode_only=True, margin=margin)
            out.append(f"context: at {int(long_ctx)} tokens of context (decode only): {describe_pays(so_long, margin)}; "
                       f"at {ctx}: {describe_pays(d, margin)}")
        except SpecError as exc:
            out.append(f"context: a longer context could not be evaluated ({exc})")
    mem = op.memory
    extra = sum(v for k, v in mem.parts_bytes.items() if not k.startswith("target"))
    out.append(f"memory: at context {ctx} plain decoding fits {mem.max_batch_plain} sequences a device group, "
               f"speculating {mem.max_batch_speculative} (the drafter, its cache and the slots take "
               f"{extra / 1e9:.2f} GB a device at batch {op.batch_size})")
    rt = policy.answers["decode-only, K re-tuned"]
    if rt.batch_off != d.batch_off:
        out.append(f"K: re-tuning K per batch band (TensorRT-LLM's draft_len_schedule), decode only: {off_words(rt)}")
    stack = (f"the {op.stack.name} stack profile" if op.stack is not None else
             "the hardware file's own efficiency (an idealised roofline: no serving stack's overheads)")
    out.append(f"step costs: {stack}; a stack that adds per-step host time shrinks the win at small batches")
    if gates is not None:
        att = gates.table[gates.table["policy"] == gates.chosen][["rate_per_s", "slo_attainment_frac"]]
        bad = att[att["slo_attainment_frac"] < 0.9]
        if len(bad):
            # a workload run at its own arrival rate has no rate in the table (NaN): say so, not "from nan"
            rates = bad["rate_per_s"].dropna()
            where = ("at every rate simulated" if len(bad) == len(att) and len(rates) else
                     f"from {rates.min():g} req/s" if len(rates) else "at the workload's own arrival rate")
            share = ("no request" if (bad["slo_attainment_frac"] == 0).all() else "fewer than 90 % of requests")
            out.append(f"rate: {where} the chosen policy meets the SLO for {share} on one replica; the gate matters "
                       f"less there than capacity (specsim capacity)")
    return out


def advise(op: OperatingPoint, *, rates=None, n_requests: int | None = None, alpha_delta: float = DEFAULT_ALPHA_DELTA,
           simulate: bool = True, seed: int = 0, margin: float | None = None,
           progress: ProgressSink | None = None) -> Advice:
    """The verdict for the operating point (see the module docstring). rates and n_requests limit the
    serving evaluation (the scenario's rates and whole workload by default); simulate=False decides
    analytically even when the scenario has a workload."""
    prog = progress_or_null(progress)
    where = f"scenario {op.name!r}"
    if not op.speculative:
        raise field_error(where, "method", op.method, "a drafter family (advise decides whether to speculate)")
    op.require_acceptance(where)
    if op.memory.max_batch_plain == 0:
        raise DoesNotFitError(f"{where}: the target's weights alone do not fit: "
                              + ", ".join(f"{k} {v / 1e9:.2f} GB" for k, v in op.memory.parts_bytes.items())
                              + f" against {op.memory.capacity_bytes / 1e9:.2f} GB a device; nothing to advise "
                              f"(use a larger tensor-parallel group or a quantised format)")
    st = threshold_settings(op, margin=margin)
    m = st.margin
    prog.add(3)
    prog.phase("analytic switch-off")
    setup = None
    notes: list = []
    if op.section("workload"):
        from ..serving import build_serving

        try:
            setup = build_serving(op, seed=seed)
        except SpecError as exc:
            if not op.drafter.family.serving:
                notes.append(f"the serving simulator does not model {op.method!r}: decided decode only ({exc})")
            else:
                raise
    mix = setup.mix() if setup is not None else None
    policy = threshold_policy(op, workload=mix, max_batch_serving=setup.max_batch_speculative if setup else None,
                              margin=m)
    analytic = policy.recommended
    prog.step(text="analytic switch-off")
    prog.phase(f"acceptance band ±{alpha_delta:g}")
    band = alpha_band(op, delta=alpha_delta, margin=m)
    prog.step(text="acceptance band")
    s1 = _speedup_b1(analytic)
    gates = None
    tree = op.tree_size if op.is_tree else None
    pays = paying_batches(analytic, m)
    min_batch = None
    if op.memory.max_batch_speculative == 0:
        on, gate, decided = False, None, "memory"
        reason = "the drafter, its cache and the speculative slots do not fit beside the target"
    elif not pays:
        on, gate, decided = False, None, "the analytic speedup curve (" + analytic.view + ")"
        reason = (f"it does not pay at any batch up to {analytic.batch_limit}: {s1:.2f}× at batch 1 "
                  f"< {1 + m:.2f}× ({analytic.view})")
    else:
        b_on, b_off = pays
        min_batch = None if b_on <= 1 else b_on
        lead = (f"{s1:.2f}× at batch 1" if min_batch is None else
                f"{s1:.2f}× at batch 1, but it pays from a running batch of about {b_on} (the KV cache, not the "
                f"weights, dominates the step: a draft that reads little of it gains with the batch)")
        if setup is not None and simulate:
            prog.phase("simulating gates")
            gates = evaluate_gates(setup, analytic_batch_off=b_off, rates=rates, n_requests=n_requests,
                                   progress=prog)
            rates_text = ", ".join("as given" if r is None else f"{r:g}" for r in gates.rates)
            decided = (f"serving simulation ({gates.workload_source}; rates {rates_text} req/s; "
                       f"{gates.table['policy'].nunique()} policies)")
            if gates.chosen_kind == "never":
                on, gate = False, None
                reason = "the serving simulator finds no gate that beats never speculating at the scenario's rates"
            else:
                on, gate = True, gates.chosen_threshold
                reason = (f"{lead}; the simulated best gate is "
                          + (f"batch ≥ {gate}" if gate is not None else "none (speculation on at every batch)")
                          + f" (analytic switch-off: {analytic.label()})")
                seen = largest_simulated_batch(gates)
                if (gate is None or gate > seen) and b_off is not None and b_off > seen:
                    # a gate above every simulated running batch never tripped: the runs cannot tell it from
                    # always-on, so past the batches they reached the analytic switch-off decides
                    gate = b_off
                    reason += (f"; the simulated running batch never exceeded {seen}, so above it the analytic "
                               f"switch-off decides: off at batch ≥ {b_off}")
                    notes.append(f"no simulated run reached a running batch above {seen} (at any rate), where the "
                                 f"gates differ; the gate is the analytic switch-off, off at batch ≥ {b_off}")
            unmet = _unmet_rates(gates)
            if unmet:
                shown = ", ".join("as given" if r is None else f"{r:g}" for r in unmet)
                notes.append(f"no simulated policy meets the SLO for any request at {shown} req/s: the gate is ranked "
                             f"on p50 TPOT alone there (check the [slo] limits)")
            notes += list(gates.notes)
        else:
            on, gate, decided = True, b_off, "analytic speedup curve (" + analytic.view + ")"
            reason = f"{lead}; {describe_pays(analytic, m)} [{analytic.assumptions}]"
            if setup is not None:
                notes.append("serving simulation skipped (--no-simulate): the gate is the analytic switch-off point")
    prog.step(text="verdict")
    if gate is not None and gate <= 1:
        on, gate = False, None
    if not on:
        min_batch = None
    view = decided if gates is not None else analytic.view
    rec = replace(analytic, batch_off=(gate if on else 1), view=view)
    last = policy.bands[-1]["batch_max"] if policy.bands else 1
    if not on:
        bands = [{"batch_min": 1, "batch_max": last, "k": 0, "speedup_min": float("nan"), "extrapolated": False}]
    else:
        bands, slow = deployed_bands(op, policy, st, workload=mix, gate=gate, min_batch=min_batch)
        if slow:
            worst = min(r["best_speedup"] for r in slow)
            notes.append(f"the deployed gate keeps speculation on below batch {gate if gate is not None else last + 1}, "
                         f"but at batch {slow[0]['batch_size']}–{slow[-1]['batch_size']} it is slower than plain "
                         f"decoding with every K (at worst {worst:.2f}×, analytic): the K-per-band schedule is off "
                         f"there; a stack with one K and one gate (vLLM, SGLang) follows the gate")
    configs = stack_configs(replace(policy, recommended=rec, bands=bands), drafter_model=st.drafter_model,
                            min_batch=min_batch)
    if min_batch is not None:
        notes.append(_min_batch_advice(op, configs, min_batch))
    assumptions = _assumptions(op, policy, analytic, gates, m)
    if not band.verdict_holds:
        notes.append("the verdict changes within the acceptance band: measure α before deploying (specsim decoder "
                     "run, or your stack's acceptance counters)")
    from ..serving.cost import regime_advice  # the stack's load regimes: unmeasured or version-dependent; a calibration
    changes, cal_notes = regime_advice(op, batch=gate if on else None)
    assumptions, notes = assumptions + changes, cal_notes + notes
    return Advice(point=op, on=on, reason=reason, decided_by=decided, k=op.k, tree_size=tree, gate_batch=gate if on else None,
                  min_batch=min_batch, speedup_b1=s1, margin=m, analytic=analytic, policy=policy, bands=bands, configs=configs, gates=gates,
                  band=band, memory=_memory_summary(op), assumptions=assumptions, notes=notes + list(policy.notes))


__all__ = ["Advice", "AlphaBand", "advise", "alpha_band", "describe_pays", "paying_batches", "DEFAULT_ALPHA_DELTA"]
