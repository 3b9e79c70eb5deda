"""One operating point: a scenario resolved once, into everything an analysis needs, with sources.

`resolve(scenario, **overrides) -> OperatingPoint` loads the hardware, the target (in the weight
format asked for), the serving stack and the deployment it implies (efficiency, fixed costs,
tensor-parallel or layer-split, attention kernel, tree support), the drafter family with its model
and options, the acceptance model (α, τ or per-position rates, with its dependence on context and
temperature), and the memory fit. It checks them against each other (a stack that does not ship the
family, a tree on a chain-only stack, a drafter with another tokenizer, a context past the model's
maximum, a drafter group larger than the target's). Every analysis — predict, sweep, threshold,
replay, the serving simulator, a report — takes the OperatingPoint; none reads the scenario, so two
commands never disagree about the same configuration. `OperatingPoint.describe()` prints the
configuration and where each value came from.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Mapping

import numpy as np

from ..cost.deployment import Deployment
from ..cost.deployment import calibration_priced_by
from ..cost.pricing import pricing_source, source_for
from ..cost.roofline import kv_bytes_per_device, weight_bytes_per_device
from ..errors import DoesNotFitError, SpecError, field_error, reject_unknown_keys
from ..specs.catalog import resolve as catalog_path
from ..specs.hardware import HardwareProfile, load_hardware
from ..specs.machine import warn_if_other_machine
from ..specs.models import ModelSpec, load_model
from ..specs.scenario import DEFAULTS, Scenario
from ..specs.stacks import StackProfile, load_stack
from .acceptance import AcceptanceModel, alpha_from_tau
from .cycle import DEFAULT_N_RANKS, DEFAULT_RANK_DECAY
from .families import (FAMILIES, METHODS, DrafterConfig, DrafterWork, drafting_deployment, footprint, make_config,
                       verify_q_len)

ACCEPTANCE_KEYS = ("by_position", "context_decay_per_token", "reference_context_len", "temperature_slope",
                   "reference_temperature", "n_ranks", "rank_decay")
ALL_METHODS = METHODS + ("none",)


@dataclass(frozen=True, slots=True, kw_only=True)
class Acceptance:
    """How many drafted tokens the target accepts, as the analyses need it.

    model: α (i.i.d.) or per-position conditional rates, with the (by default absent) dependence on
    context length and temperature (`acceptance.AcceptanceModel`); None when nothing was given.
    tau_given: a measured τ (tokens per cycle, bonus included), used as is at the point it was
    measured, tau_point = (K, tree size, context, temperature) of the scenario that gave it (the
    model holds the i.i.d. α that gives it at K, which stands in everywhere else).
    n_ranks, rank_decay: how α becomes a per-rank vector for trees. source: where it came from.
    calibration: the `specs.calibrations.AcceptanceCalibration` the model came from (its intervals
    and coverage), when the scenario named one; workload: what the scenario says it is for.
    position_ratios: for a chain whose calibration measured per-position rates, r_j = c_j / α of those
    runs: a chain of K then emits τ from the rates clip(α·r_j, 0, 1) at whatever α the point has
    (`acceptance.shaped_conditional`), so the measured shape survives moving α along its dependence
    or to the ends of its interval. Set only for a family that drafts a chain of K; None: τ from α alone."""

    model: AcceptanceModel | None
    tau_given: float | None = None
    tau_point: tuple | None = None
    n_ranks: int = DEFAULT_N_RANKS
    rank_decay: float = DEFAULT_RANK_DECAY
    source: str = ""
    calibration: object = None
    workload: str | None = None
    position_ratios: tuple | None = None

    def alpha_at(self, context_len, temperature) -> np.ndarray | None:
        """The i.i.d. α at context L and temperature T (for per-position rates: the first one's)."""
        if self.model is None:
            return None
        if self.model.alpha is not None:
            return self.model.alpha_at(context_len, temperature)
        return np.clip(self.model.conditional[0] * self.model.factor(context_len, temperature), 0.0, 1.0)

    def factor(self, context_len, temperature) -> np.ndarray:
        """Multiplier of the reference rates at context L and temperature T (1 when independent)."""
        if self.model is None:
            return np.ones(np.shape(context_len))
        return self.model.factor(context_len, temperature)


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryFit:
    """Per-device memory at the operating point, and the largest batch that fits.

    parts_bytes: label → bytes on the fullest device at the point's batch and context (target
    weights and cache, the drafter's weights and cache, the speculative slots). max_batch_plain /
    max_batch_speculative: the largest batch that fits at the point's context without / with
    speculation (0: the weights alone do not fit)."""

    parts_bytes: Mapping[str, float]
    capacity_bytes: float
    max_batch_plain: int
    max_batch_speculative: int | None
    what: str

    @property
    def total_bytes(self) -> float:
        return float(sum(self.parts_bytes.values()))

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    def check(self) -> None:
        """Raise DoesNotFitError, naming each part and how much is missing, unless it fits."""
        if self.fits:
            return
        detail = ", ".join(f"{k} {_gb(v)}" for k, v in self.parts_bytes.items())
        raise DoesNotFitError(
            f"{self.what} does not fit: needs {_gb(self.total_bytes)} per device ({detail}) but the device has "
            f"{_gb(self.capacity_bytes)}; short by {_gb(self.total_bytes - self.capacity_bytes)}. "
            f"Largest batch that fits at this context: {self.max_batch_plain} without speculation"
            + (f", {self.max_batch_speculative} with it" if self.max_batch_speculative is not None else "")
            + ". Use a larger tensor-parallel group, a smaller batch or context, or a quantised format.")


def _gb(n_bytes: float) -> str:
    return f"{n_bytes / 1e9:.2f} GB" if n_bytes >= 1e8 else f"{n_bytes / 1e6:.3f} MB"


@dataclass(frozen=True, slots=True, kw_only=True)
class OperatingPoint:
    """A scenario resolved: every input of every analysis, immutable, with where each came from.

    work: what the drafter family does at this deployment (`families.DrafterWork`: its passes, their
    model and width rules, its memory), resolved once; None when nothing drafts. verify_q_len: query
    tokens per sequence of the verify pass (K + 1, the tree's M, or the family's fixed width; 1 when
    nothing drafts). Every consumer reads these two instead of asking the family again."""

    name: str
    description: str
    hardware: HardwareProfile
    target: ModelSpec
    stack: StackProfile | None
    deployment: Deployment
    method: str
    drafter: DrafterConfig | None
    k: int
    tree_size: int | None
    batch_size: int
    context_len: int
    temperature: float
    acceptance: Acceptance
    memory: MemoryFit
    work: DrafterWork | None = None
    verify_q_len: int = 1
    allow_cross_tokenizer: bool = False
    anchor: Mapping | None = None
    sources: Mapping[str, str] = field(default_factory=dict)
    sections: Mapping[str, Mapping] = field(default_factory=dict)
    scenario: Scenario = field(repr=False, default=None)

    @property
    def speculative(self) -> bool:
        return self.method != "none" and self.drafter is not None and (self.k > 0 or not self.drafter.family.uses_k)

    @property
    def is_tree(self) -> bool:
        return self.tree_size is not None and self.drafter is not None and self.drafter.supports_tree

    @property
    def alpha(self) -> float | None:
        """The i.i.d. acceptance at the point's context and temperature."""
        a = self.acceptance.alpha_at(self.context_len, self.temperature)
        return None if a is None else float(a)

    @property
    def reserved_slots(self) -> int:
        """Speculative positions per sequence beyond its real token (K, M − 1, or Lookahead's)."""
        return self.verify_q_len - 1 if self.speculative else 0

    def section(self, name: str) -> Mapping:
        return self.sections.get(name, MappingProxyType({}))

    def with_overrides(self, **overrides) -> "OperatingPoint":
        """The same scenario resolved again with some fields replaced (None keeps a field)."""
        return resolve(self.scenario, **overrides)

    def require_acceptance(self, where: str = "") -> Acceptance:
        if self.acceptance.model is None:
            raise field_error(where or f"scenario {self.name!r}", "alpha", None,
                              "an acceptance rate alpha, a mean tokens per cycle tau, or [acceptance] by_position")
        return self.acceptance

    def to_dict(self) -> dict:
        d = self.drafter
        return {
            "scenario": self.name, "hardware": self.hardware.id, "target": self.target.id,
            "target_weight_format": self.target.weight_format, "stack": self.stack.id if self.stack else None,
            "stack_version": self.scenario.stack_version if self.scenario is not None else None,
            "n_devices": self.deployment.n_devices, "tp": self.deployment.tp, "multi_gpu": self.deployment.multi_gpu,
            "attention": self.deployment.attention, "method": self.method,
            "drafter": d.drafter.id if d is not None and d.drafter is not None else None,
            "drafter_tp": d.drafter_tp if d is not None else None,
            "drafter_options": d.options() if d is not None else {}, "k": self.k, "tree_size": self.tree_size,
            "batch_size": self.batch_size, "context_len": self.context_len, "temperature": self.temperature,
            "alpha": self.alpha, "tau_given": self.acceptance.tau_given,
            "acceptance_by_position": (list(self.acceptance.model.conditional)
                                       if self.acceptance.model is not None and self.acceptance.model.conditional
                                       else None),
            "acceptance_position_ratios": (list(self.acceptance.position_ratios)
                                           if self.acceptance.position_ratios is not None else None),
            "memory_per_device_bytes": dict(self.memory.parts_bytes), "memory_capacity_bytes": self.memory.capacity_bytes,
            "fits": self.memory.fits, "max_batch_plain": self.memory.max_batch_plain,
            "max_batch_speculative": self.memory.max_batch_speculative, "sources": dict(self.sources),
            "anchor": None if self.anchor is None else dict(self.anchor),
        }

    def pricing_label(self) -> str:
        """What prices each kind of pass at this point (cost.pricing.source_for), in words."""
        dep = self.deployment
        out = f"target: {pricing_source(self.target, dep)}"
        w = self.work if self.speculative else None
        if w is not None and w.pass_model is not None:
            label = source_for(w.pass_model, dep, tp=w.pass_tp).label
            out += f"; drafting passes ({w.pass_model.id}): {label}"
        return out

    def describe(self) -> str:
        """The configuration and its sources, as a user reads it."""
        s = self.sources
        dep = self.deployment
        rows = [
            ("hardware", f"{self.hardware.name} ({self.hardware.id}) × {dep.n_devices}", s.get("hardware", "")),
            ("target", f"{self.target.id}, {self.target.weight_format}",
             s.get("target_weight_format") or s.get("target", "")),
            ("stack", (f"{self.stack.name} ({self.stack.id})" if self.stack else
                       "none: the hardware's own efficiency (an idealised roofline)")
             + (f", release {self.scenario.stack_version}" if self.scenario is not None and self.scenario.stack_version
                else ""), s.get("stack", "")),
            ("deployment", f"{dep.multi_gpu.replace('_', ' ')}, tp {dep.tp}, {dep.attention} attention, bandwidth "
                           f"{dep.eff.bandwidth_frac:.2f} and compute {dep.eff.compute_frac:.2f} of peak, "
                           f"{dep.eff.step_overhead_s * 1e6:.0f} µs a step + {dep.eff.per_layer_overhead_s * 1e6:.1f} µs "
                           f"a layer, {dep.cycle_overhead_s * 1e6:.0f} µs a cycle",
             "; ".join(x for x in (s.get("stack", ""), s.get("fitted figures", ""), s.get("calibration", ""),
                                   s.get("method host work", "")) if x)),
            ("priced by", self.pricing_label(),
             self.hardware.sources.get("operator_tables", "") if dep.operator_tables is not None else ""),
            ("method", self.method, s.get("method", "")),
        ]
        if self.drafter is not None:
            if self.drafter.drafter is not None:
                rows.append(("drafter", f"{self.drafter.drafter.id} at tp {self.drafter.drafter_tp}", s.get("drafter", "")))
            if self.drafter.options():
                rows.append(("drafter options", ", ".join(f"{k} = {v}" for k, v in self.drafter.options().items()),
                             s.get("drafter_options", "defaults of the family")))
            shape = (f"tree of {self.tree_size} nodes, depth {self.k}" if self.is_tree else
                     f"chain of K = {self.k}" if self.drafter.family.uses_k else f"{self.verify_q_len} tokens a step")
            rows.append(("draft", shape, s.get("k", "")))
        rows += [("batch, context", f"B = {self.batch_size}, L = {self.context_len} tokens", s.get("batch_size", "")),
                 ("temperature", f"{self.temperature:g}", s.get("temperature", ""))]
        a = self.acceptance
        if a.model is not None:
            if a.tau_given is not None:
                text = f"τ = {a.tau_given:g} tokens a cycle at K = {self.k} (i.i.d. α = {self.alpha:.4f})"
            elif a.model.conditional is not None:
                text = "per position " + ", ".join(f"{c:.3f}" for c in a.model.conditional)
            else:
                text = f"α = {self.alpha:.4f}"
            if a.model.context_decay_per_token or a.model.temperature_slope:
                text += (f", × exp(−{a.model.context_decay_per_token:g}·(L − {a.model.reference_context_len:g}) − "
                         f"{a.model.temperature_slope:g}·(T − {a.model.reference_temperature:g}))")
            rows.append(("acceptance", text, a.source))
        elif self.speculative:
            rows.append(("acceptance", "not given", "set alpha, tau or [acceptance] by_position"))
        if self.anchor is not None:
            a = self.anchor
            rows.append(("anchored to", f"a measured plain step of {a['measured_step_time_s'] * 1e3:.3f} ms at B = "
                         f"{self.batch_size} (was {a['predicted_step_time_s'] * 1e3:.3f} ms): {a['how']}",
                         s.get("baseline_tokens_per_s") or s.get("baseline_step_time_s", "")))
        mem = self.memory
        rows.append(("memory per device", ", ".join(f"{k} {_gb(v)}" for k, v in mem.parts_bytes.items())
                     + f" = {_gb(mem.total_bytes)} of {_gb(mem.capacity_bytes)}" + ("" if mem.fits else " (DOES NOT FIT)"),
                     "weights and KV cache from the model shape; capacity from the hardware file"))
        rows.append(("largest batch that fits", f"{mem.max_batch_plain} plain"
                     + (f", {mem.max_batch_speculative} speculating" if mem.max_batch_speculative is not None else "")
                     + f" at L = {self.context_len}", ""))
        width = max(len(r[0]) for r in rows)
        lines = [f"operating point: {self.name}" + (f" — {self.description}" if self.description else "")]
        for key, value, src in rows:
            lines.append(f"  {key:<{width}}  {value}" + (f"   [{src}]" if src else ""))
        return "\n".join(lines)


# ---- resolving ------------------------------------------------------------------------------------

def _sources(scenario: Scenario, overrides: dict) -> dict:
    where = scenario.path or "the command line"
    out = {}
    for key in DEFAULTS:
        if key in overrides:
            out[key] = "flag / override"
        elif key in scenario.given:
            out[key] = where
        else:
            out[key] = f"default ({DEFAULTS[key]!r})"
    for key in ("hardware", "target", "stack"):
        value = getattr(scenario, key) if key not in overrides else overrides[key]
        if value:
            try:
                kind = {"hardware": "hardware", "target": "models", "stack": "stacks"}[key]
                if kind == "models":
                    out[key] += f"; {load_model(value).sources.get('shape', 'catalog file')}"
                else:
                    out[key] += f"; {catalog_path(kind, value)}"
            except SpecError:
                pass
    if scenario.section("drafter_options"):
        out["drafter_options"] = f"{where} [drafter_options]; the rest the family's defaults"
    return out


def _lookahead_alpha(tau: float, cfg: DrafterConfig, where: str) -> float:
    """The pool-guess acceptance α whose Lookahead step emits τ tokens (inverting
    cycle.lookahead_tokens_per_step, which rises from 1 at α = 0 to N at α = 1)."""
    from scipy.optimize import brentq

    from .cycle import lookahead_tokens_per_step

    top = float(cfg.lookahead_ngram)
    if not 1.0 <= tau <= top:
        raise field_error(where, "tau", tau, f"tokens per Lookahead step in [1, N] = [1, {top:g}]")
    if tau >= top:
        return 1.0
    if tau <= 1.0:
        return 0.0
    f = lambda a: float(lookahead_tokens_per_step(a, ngram=cfg.lookahead_ngram, guesses=cfg.lookahead_guesses)) - tau  # noqa: E731
    return float(brentq(f, 0.0, 1.0, xtol=1e-14))


def _acceptance(scenario: Scenario, cfg: DrafterConfig | None, k: int, *, reference: Scenario) -> Acceptance:
    """`reference`: the scenario before overrides, whose context and temperature are the default
    reference point of the acceptance model (so overriding the context moves along the model)."""
    raw = dict(scenario.section("acceptance"))
    where = f"scenario {scenario.path or scenario.name!r} [acceptance]"
    reject_unknown_keys(where, raw, ACCEPTANCE_KEYS + ("calibrated", "workload"))
    if "workload" in raw and "calibrated" not in raw:
        raise field_error(where, "workload", raw["workload"], "absent unless [acceptance] calibrated names a calibration")
    for key in ("context_decay_per_token", "reference_context_len", "temperature_slope", "reference_temperature",
                "rank_decay"):
        if key in raw and (isinstance(raw[key], bool) or not isinstance(raw[key], (int, float))
                           or not np.isfinite(raw[key])):
            raise field_error(where, key, raw[key], "a finite number")
    n_ranks = raw.get("n_ranks", DEFAULT_N_RANKS)
    if isinstance(n_ranks, bool) or not isinstance(n_ranks, int) or n_ranks < 1:
        raise field_error(where, "n_ranks", n_ranks, "an integer >= 1 (ranks of a tree's per-rank vector)")
    rank_decay = float(raw.get("rank_decay", DEFAULT_RANK_DECAY))
    if not 0.0 <= rank_decay <= 1.0:
        raise field_error(where, "rank_decay", rank_decay, "a fraction in [0, 1]")
    if "calibrated" in raw:
        return _calibrated(scenario, raw, where, n_ranks, rank_decay, cfg)
    dependence = dict(context_decay_per_token=raw.get("context_decay_per_token", 0.0),
                      temperature_slope=raw.get("temperature_slope", 0.0),
                      reference_context_len=raw.get("reference_context_len", reference.context_len),
                      reference_temperature=raw.get("reference_temperature", reference.temperature))
    tau_given, source = None, ""
    by_position = raw.get("by_position")
    given = sum(x is not None for x in (scenario.alpha, scenario.tau, by_position))
    if given > 1:
        raise field_error(where, "by_position", by_position, "one acceptance input: alpha, tau or [acceptance] by_position")
    try:
        if by_position is not None:
            if not (isinstance(by_position, list) and by_position
                    and all(not isinstance(a, bool) and isinstance(a, (int, float)) for a in by_position)):
                raise field_error(where, "by_position", by_position, "a list of conditional rates in [0, 1]")
            model = AcceptanceModel(conditional=tuple(float(a) for a in by_position), **dependence)
            source = f"{scenario.path or 'scenario'} [acceptance] by_position"
        elif scenario.tau is not None:
            tau_given = float(scenario.tau)
            if cfg is not None and not cfg.family.uses_k:
                model = AcceptanceModel(alpha=_lookahead_alpha(tau_given, cfg, where), **dependence)
                source = f"tau from {scenario.path or 'the command line'}; α by inverting Lookahead's tokens per step"
            elif cfg is not None and cfg.k_schedule == "hf-heuristic":
                from .schedule import alpha_from_hf_heuristic_tau

                model = AcceptanceModel(alpha=alpha_from_hf_heuristic_tau(tau_given, where=where), **dependence)
                source = (f"tau from {scenario.path or 'the command line'}; α by inverting the mean tokens per cycle "
                          f"of Hugging Face's heuristic draft-length schedule")
            else:
                if tau_given > k + 1:
                    raise field_error(where, "tau", tau_given, f"mean tokens per cycle in [1, K + 1] = [1, {k + 1}]")
                model = AcceptanceModel(alpha=alpha_from_tau(tau_given, max(k, 1)), **dependence)
                source = f"tau from {scenario.path or 'the command line'}; α by inverting (1 − α^(K+1))/(1 − α) = τ"
        elif scenario.alpha is not None:
            model = AcceptanceModel(alpha=float(scenario.alpha), **dependence)
            source = f"alpha from {scenario.path or 'the command line'}"
        else:
            model = None
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None
    return Acceptance(model=model, tau_given=tau_given, n_ranks=n_ranks, rank_decay=rank_decay, source=source)


def _calibrated(scenario: Scenario, raw: dict, where: str, n_ranks: int, rank_decay: float,
                cfg: DrafterConfig | None = None) -> Acceptance:
    """The i.i.d. α of a calibration (`specs.calibrations`) at its reference context and temperature,
    with its fitted dependence on both; the calibration rides along for its intervals and coverage.
    A chain (a family that drafts K tokens in a row, no tree) whose calibration measured per-position
    rates keeps their shape relative to α (`Acceptance.position_ratios`): the i.i.d. α alone
    overstates τ when the first position is the weakest (prompt lookup: whether a match continues)."""
    from ..specs.calibrations import load_calibration
    from .acceptance import position_ratios_from_conditional

    clash = [k for k in raw if k not in ("calibrated", "workload", "n_ranks", "rank_decay")]
    clash += [k for k in ("alpha", "tau") if getattr(scenario, k) is not None]
    if clash:
        raise field_error(where, clash[0], raw.get(clash[0], getattr(scenario, clash[0], None)),
                          "absent: [acceptance] calibrated gives the acceptance and its dependence")
    try:
        cal = load_calibration(raw["calibrated"])
        model = AcceptanceModel(alpha=cal.alpha, context_decay_per_token=cal.context_decay_per_token,
                                temperature_slope=cal.temperature_slope,
                                reference_context_len=cal.reference_context_len,
                                reference_temperature=cal.reference_temperature)
        chain = (cfg is not None and cfg.family.uses_k and cal.conditional is not None and cal.alpha > 0
                 and not (scenario.tree_size is not None and cfg.supports_tree))
        ratios = position_ratios_from_conditional(cal.conditional, cal.alpha) if chain else None
        source = f"calibration {cal.name} ({cal.path}; {cal.command})"
        if ratios is not None:
            source += (f"; τ from its per-position rates {', '.join(f'{c:.3f}' for c in cal.conditional)} as ratios "
                       f"to α (positions past {len(ratios)} hold the last ratio)")
        acc = Acceptance(model=model, n_ranks=n_ranks, rank_decay=rank_decay, calibration=cal,
                         workload=raw.get("workload"), source=source, position_ratios=ratios)
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None
    return acc


def memory_parts(target: ModelSpec, dep: Deployment, drafter: DrafterConfig | None, *, batch_size, context_len, k,
                 tree_size=None, work: DrafterWork | None = None) -> dict:
    """Per-device bytes on the fullest device, by part (arrays broadcast over B, L, K, M).

    It holds 1/tp of the target's weights and of its cache of L + 1 tokens per sequence (1/n under a
    layer split) plus, when `drafter` is given, the drafter's weights and cache and the speculative
    slots (a separate draft model runs whole on the group's first device unless drafter_tp says
    otherwise)."""
    split = dep.memory_split // dep.tp
    b = np.asarray(batch_size, dtype=float)
    l = np.asarray(context_len, dtype=float)
    out = {"target weights": weight_bytes_per_device(target, dep.tp) / split,
           "target KV cache": kv_bytes_per_device(target, batch_size=b, context_len=l + 1.0, tp=dep.tp) / split}
    if drafter is not None:
        extra = footprint(drafter, target, batch_size=b, context_len=l, k=k,
                          tree_size=tree_size if drafter.supports_tree else None, tp=dep.tp, work=work)
        out.update({label: np.asarray(v, dtype=float) / split for label, v in extra.items()})
    return out


def memory_fit(target: ModelSpec, dep: Deployment, drafter: DrafterConfig | None, *, batch_size: int, context_len: int,
               k: int, tree_size: int | None, what: str, work: DrafterWork | None = None) -> MemoryFit:
    """Per-device bytes at (B, L) (`memory_parts`) and the largest batch that fits, from the model
    shapes: the parts are affine in B, so the largest batch is (capacity − fixed) // per-sequence."""
    capacity = dep.hardware.memory_bytes

    def total(b: float, speculative: bool) -> float:
        parts = memory_parts(target, dep, drafter if speculative else None, batch_size=b, context_len=context_len, k=k,
                             tree_size=tree_size, work=work)
        return float(sum(float(v) for v in parts.values()))

    def max_batch(speculative: bool) -> int:
        per_seq = total(2.0, speculative) - total(1.0, speculative)
        fixed = total(1.0, speculative) - per_seq
        if fixed > capacity:
            return 0
        return int((capacity - fixed) // per_seq) if per_seq > 0 else 2 ** 31

    parts = memory_parts(target, dep, drafter, batch_size=batch_size, context_len=context_len, k=k, tree_size=tree_size,
                         work=work)
    return MemoryFit(parts_bytes={key: float(v) for key, v in parts.items()}, capacity_bytes=capacity,
                     max_batch_plain=max_batch(False),
                     max_batch_speculative=max_batch(True) if drafter is not None else None, what=what)


def run_as_loaded(model: ModelSpec, hw: HardwareProfile) -> tuple[ModelSpec, str]:
    """The model as `hw`'s usual software loads it: a checkpoint's dtype is what is stored; what runs is
    what the device runs (`HardwareProfile.runs_checkpoint_as`: a TPU v4 restores fp32 checkpoints as
    bf16, weights and cache). Returns the model (unchanged when the part runs it as stored) and a note
    saying what was assumed and why ("" when nothing was)."""
    runs = hw.runs_checkpoint_as(model.weight_format)
    if runs is None or runs == model.weight_format:
        return model, ""
    stored = model.weight_format
    out = model.with_weight_format(runs)
    if model.kv_cache_dtype == stored:
        out = replace(out, kv_cache_dtype=runs)
    what = "weights and cache" if out.kv_cache_dtype == runs and model.kv_cache_dtype != runs else "weights"
    return out, (f"{model.id}: its {stored} checkpoint runs as {runs} on {hw.id} ({what}; the hardware file's "
                 f"[loads_as] {stored} = \"{runs}\", sourced there)")


def check_context(op_or_models, context_len: int, q_len: int, *, where: str, q_field: str | None = None,
                  q_value=None) -> None:
    """Refuse a context whose step would run past a model's maximum context: L + q ≤ max_context
    for the target and for a separate draft model. A step longer than the whole context is refused
    naming `q_field` = `q_value` (the draft length or tree size that makes it) when given."""
    for model, label in op_or_models:
        if model is not None and model.max_context and q_field and q_len >= model.max_context:
            raise field_error(where, q_field, q_value,
                              f"a step of fewer than {model.max_context} tokens: the {label} {model.id!r} holds at "
                              f"most {model.max_context} tokens and this step verifies {q_len}")
        if model is not None and model.max_context and context_len + q_len > model.max_context:
            raise field_error(where, "context_len", context_len,
                              f"<= {model.max_context - q_len}: the {label} {model.id!r} holds at most "
                              f"{model.max_context} tokens and a step adds {q_len}")


def measured_figures(target: ModelSpec, dep: Deployment, stack) -> tuple[Deployment, str]:
    """The deployment with the stack's [measured] figures (fitted with the target priced by the tables)
    in place of its top-level ones where the tables price the target here; and which were used."""
    if stack is None or not stack.measured or source_for(target, dep, target=True).kind != "measured":
        return dep, ""
    m = stack.measured
    eff = replace(dep.eff, **{k: v for k, v in m.items() if k in ("step_overhead_s", "per_layer_overhead_s")})
    dep = replace(dep, efficiency=eff, cycle_overhead_s=m.get("cycle_overhead_s", dep.cycle_overhead_s))
    used = ", ".join(f"{k[:-2]}_us = {v * 1e6:g}" for k, v in m.items())
    return dep, f"stack {stack.id!r} [measured]: {used} (fitted with the target's passes priced by the tables)"


def calibration_for_source(target: ModelSpec, dep: Deployment, stack) -> tuple[Deployment, str]:
    """The deployment with a load calibration's device terms where they were fitted through the source
    that prices the target here, else without them and a note saying why (`calibration_priced_by`)."""
    fitted = calibration_priced_by(stack)
    if fitted is None or not dep.calibrated:
        return dep, ""
    kind = source_for(target, dep, target=True).kind
    if kind == fitted:
        return dep, ""
    return (replace(dep, device_scale=1.0, device_per_seq_s=0.0, device_per_token_s=0.0),
            f"stack {dep.stack_id!r}'s load calibration was fitted with the target's passes priced by the {fitted} "
            f"source, and this deployment prices them by the {kind} one: its device terms are left out (pass "
            f"--cost-source {fitted} to use them, or fit them again under this source with `specsim calibrate load`)")


METHOD_REGIMES = ("spec_seq_host_us", "spec_max_running", "overlap")  # load regimes that (can) name a drafter family


def check_regime_methods(stack) -> None:
    """Refuse a stack's method-keyed load regime (specs.regimes) naming no drafter family: it would never
    apply, and the figure would be lost without a word."""
    for i, e in enumerate(getattr(stack, "regimes", ())):
        if e.property in METHOD_REGIMES and "method" in e.fields and e.fields["method"] not in FAMILIES:
            raise field_error(f"stack {stack.id!r} [[load_regime]] #{i + 1} ({e.property})", "method",
                              e.fields["method"], f"one of {', '.join(FAMILIES)}")


def stack_regimes(stack, *, version: str | None, n_devices: int, hardware: HardwareProfile, target: ModelSpec):
    """The stack's load regimes (specs.regimes) at `version` on this deployment: n_devices of `hardware`
    (entries can hold only for some tp or memory) serving `target` (its attention kind picks the entries)."""
    from ..specs.regimes import NO_REGIMES, resolve_regimes

    if stack is None or not stack.regimes:
        return NO_REGIMES
    return resolve_regimes(stack.regimes, version=version, tp=n_devices, memory_gb=hardware.memory_bytes / 1e9,
                           attention="mla" if target.mla else "mha", where=f"stack {stack.id!r}")


def regime_host(dep: Deployment, stack, method: str, *, version: str | None, hardware: HardwareProfile,
                target: ModelSpec) -> tuple[Deployment, dict]:
    """The deployment's host model as the stack's load regimes at `version` set it, and notes naming each
    change and its source (empty where nothing changes):

    - whether host work hides behind the device (`overlap` regimes; for a speculating `method`, its own
      entry where the stack has one: vLLM's async scheduler turns itself off for its n-gram proposer);
    - the host work a speculating sequence of `method` pays a cycle beyond [host] spec_per_seq_us
      (a `spec_seq_host_us` regime).

    Folded in once here, so every path (the analytical cycle, the serving simulator, calibration) reads
    one answer. `method` "none": only the plain iterations' overlap applies."""
    if stack is None or not stack.regimes:
        return dep, {}
    check_regime_methods(stack)
    rg = stack_regimes(stack, version=version, n_devices=dep.n_devices, hardware=hardware, target=target)
    host, notes = dep.host, {}
    plain_ov, spec_ov = host.overlaps(False), host.overlaps(True)
    srcs = [e for e in rg.applied if e.property == "overlap" and "method" not in e.fields]
    if rg.overlap is not None:
        plain_ov, spec_ov = rg.overlap
    own = rg.spec_overlap.get(method) if method != "none" else None
    if own is not None:
        spec_ov = own
        srcs += [e for e in rg.applied if e.property == "overlap" and e.fields.get("method") == method]
    mode = host.overlap_mode(plain_ov, spec_ov)
    if mode != host.overlap:
        host = replace(host, overlap=mode)
        said = {False: "after the device", True: "behind the device"}
        what = (f"plain iterations' host work runs {said[plain_ov]}"
                + (f", {method}'s speculating iterations' {said[spec_ov]}" if method != "none" else ""))
        notes["host overlap"] = (f"stack {stack.id!r}: {what} ([host] overlap {dep.host.overlap!r} -> {mode!r}"
                                 + "".join(f"; versions {e.versions.text}, {e.status}: {e.source}" for e in srcs) + ")")
    extra_s = rg.spec_seq_host_s.get(method) if method != "none" else None
    if extra_s:
        src = next(e for e in rg.applied if e.property == "spec_seq_host_us" and e.fields["method"] == method)
        host = replace(host, spec_per_seq_s=host.spec_per_seq_s + extra_s)
        notes["method host work"] = (f"stack {stack.id!r}: {method} adds {extra_s * 1e6:g} µs a speculating sequence a "
                                     f"cycle to [host] spec_per_seq_us{_CITATION}{src.versions.text}; {src.status}: "
                                     f"{src.source})")
    return (replace(dep, host=host) if host is not dep.host else dep), notes


_CITATION = " (versions "  # where regime_host's "method host work" note turns from what it adds to where that comes from


def method_host_label(note: str) -> str:
    """What a `regime_host` "method host work" note adds, without its citation (for a one-line figure)."""
    return note.split(_CITATION, 1)[0]


def resolve(scenario: Scenario, *, stack_profile: StackProfile | None = None, **overrides) -> OperatingPoint:
    """The scenario (with `overrides` of its top-level fields; None keeps a field) as an
    OperatingPoint. Raises SpecError naming the field when the pieces do not fit together.
    stack_profile: a StackProfile object to use instead of loading the scenario's stack id (for
    calibration, which varies a stack's figures)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    s = scenario.with_overrides(**given) if given else scenario
    where = f"scenario {s.path or s.name!r}"
    if s.method not in ALL_METHODS:
        raise field_error(where, "method", s.method, f"one of {', '.join(ALL_METHODS)}")
    hw = load_hardware(s.hardware)
    warn_if_other_machine(hw)  # a measured profile of another CPU, thread count or clock: said before any figure
    target = load_model(s.target)
    loaded_as = {}
    if s.target_dtype:
        target = target.with_weight_format(s.target_dtype)
    else:
        target, note = run_as_loaded(target, hw)
        if note:
            loaded_as["target_weight_format"] = note
    stack = stack_profile if stack_profile is not None else (load_stack(s.stack) if s.stack else None)
    if s.kv_cache_dtype:
        target = replace(target, kv_cache_dtype=s.kv_cache_dtype)
    dep = Deployment.from_stack(hw, stack, n_devices=s.tp, attention=s.attention, stack_version=s.stack_version,
                                cost_source=s.cost_source)
    dep, note = measured_figures(target, dep, stack)
    if note:
        loaded_as["fitted figures"] = note
    dep, note = calibration_for_source(target, dep, stack)
    if note:
        loaded_as["calibration"] = note
    if s.method == "draft_model" and s.drafter_tp > s.tp:  # refused with K = 0 too: nothing given goes unread
        raise field_error(where, "drafter_tp", s.drafter_tp, f"<= tp = {s.tp} (the drafter runs on the target's devices)")
    method = s.method if (s.method == "none" or s.k > 0 or not FAMILIES[s.method].uses_k) else "none"
    cfg = None
    tree_size = s.tree_size
    if method != "none":
        fam = FAMILIES[method]
        if stack is not None:
            unknown = [m for m in stack.methods if m not in FAMILIES]
            if unknown:
                raise field_error(f"stack {stack.id!r}", "methods", unknown, f"drafter families among {', '.join(METHODS)}")
            if stack.id not in fam.stacks and method not in stack.methods:
                shipped = [m for m, f in FAMILIES.items() if stack.id in f.stacks] + list(stack.methods)
                raise field_error(where, "method", method,
                                  f"a family the stack {stack.id!r} ships: {', '.join(shipped) or 'none listed'}")
        if method == "draft_model" and s.drafter_tp > s.tp:
            raise field_error(where, "drafter_tp", s.drafter_tp, f"<= tp = {s.tp} (the drafter runs on the target's devices)")
        options = dict(s.section("drafter_options"))
        cfg = make_config(method, target, drafter=s.drafter, drafter_tp=s.drafter_tp,
                          allow_cross_tokenizer=s.allow_cross_tokenizer, options=options, where=where)
        if cfg.drafter is not None:
            d, note = run_as_loaded(cfg.drafter, hw)
            if note:
                cfg = replace(cfg, drafter=d)
                loaded_as["drafter_weight_format"] = note
        if tree_size is not None and tree_size != s.k + 1:
            if not fam.tree:
                raise field_error(where, "tree_size", tree_size,
                                  f"absent: method {method!r} drafts chains (trees: {', '.join(f for f in FAMILIES if FAMILIES[f].tree)})")
            if not dep.supports_tree:
                raise field_error(where, "tree_size", tree_size, f"absent: stack {dep.stack_id!r} verifies chains only")
        elif tree_size == s.k + 1:
            tree_size = None  # a tree of K + 1 nodes and depth K is the chain
    elif s.drafter is not None and s.method == "none":
        pass  # a drafter id without a method is harmless: nothing drafts
    acceptance = _acceptance(s, cfg, s.k, reference=scenario)
    if acceptance.tau_given is not None:
        # τ applies where it was measured: the file's point, or the overridden one when τ itself was given
        src = s if "tau" in given else scenario
        src_tree = src.tree_size if (src.tree_size is not None and src.tree_size != src.k + 1) else None
        acceptance = replace(acceptance, tau_point=(src.k, src_tree, src.context_len, float(src.temperature)))
    q, work = 1, None
    if cfg is not None:  # the drafter's work and the verify width, resolved once for every consumer
        work = cfg.family.work(cfg, target, dep.tp)
        q = int(verify_q_len(cfg, work, s.k, tree_size))
        dep = drafting_deployment(dep, work)  # the family's tree building on this stack's host, if any
    dep, notes = regime_host(dep, stack, method if cfg is not None else "none", version=s.stack_version, hardware=hw,
                             target=target)
    loaded_as.update(notes)
    check_context(((target, "target"), (cfg.drafter if cfg is not None else None, "drafter")), s.context_len, q,
                  where=where, q_field="tree_size" if tree_size is not None else "k",
                  q_value=tree_size if tree_size is not None else s.k)
    anchor = None
    if s.baseline_tokens_per_s is not None or s.baseline_step_time_s is not None:
        given_as = "baseline_step_time_s" if s.baseline_step_time_s is not None else "baseline_tokens_per_s"
        measured = s.baseline_step_time_s if s.baseline_step_time_s is not None else s.batch_size / s.baseline_tokens_per_s
        dep, anchor = anchor_deployment(target, dep, batch_size=s.batch_size, context_len=s.context_len,
                                        measured_step_time_s=float(measured), where=where, given_as=given_as,
                                        given_value=getattr(s, given_as))
    drafter_id = cfg.drafter.id if cfg is not None and cfg.drafter is not None else None
    what = (f"{target.id}{' + ' + drafter_id if drafter_id else ''} on {s.tp}× {hw.id} at batch {s.batch_size}, "
            f"context {s.context_len}")
    mem = memory_fit(target, dep, cfg, batch_size=s.batch_size, context_len=s.context_len, k=s.k, tree_size=tree_size,
                     what=what, work=work)
    sections = {k: v for k, v in s.sections.items() if k not in ("drafter_options", "acceptance")}
    return OperatingPoint(name=s.name, description=s.description, hardware=hw, target=target, stack=stack,
                          deployment=dep, method=method, drafter=cfg, k=s.k, tree_size=tree_size,
                          batch_size=s.batch_size, context_len=s.context_len, temperature=float(s.temperature),
                          acceptance=acceptance, memory=mem, work=work if method != "none" else None,
                          verify_q_len=q if method != "none" else 1, allow_cross_tokenizer=s.allow_cross_tokenizer,
                          anchor=None if anchor is None else MappingProxyType(anchor),
                          sources=MappingProxyType({**_sources(scenario, given), **loaded_as}),
                          sections=MappingProxyType(dict(sections)), scenario=s)


def _scaled_deployment(dep: Deployment, scale: float, add_step_s: float = 0.0) -> Deployment:
    """The deployment with every fixed cost of its stack (per-pass overheads, host work per
    iteration, the per-cycle overhead) times `scale`, plus `add_step_s` of host work per iteration."""
    from dataclasses import replace as _replace

    eff = dep.eff
    h = dep.host
    return _replace(dep, efficiency=_replace(eff, step_overhead_s=eff.step_overhead_s * scale,
                                             per_layer_overhead_s=eff.per_layer_overhead_s * scale),
                    host=_replace(h, step_s=h.step_s * scale + add_step_s, per_seq_s=h.per_seq_s * scale,
                                  per_token_s=h.per_token_s * scale, multi_gpu_step_s=h.multi_gpu_step_s * scale,
                                  spec_per_seq_s=h.spec_per_seq_s * scale,
                                  spec_per_draft_token_s=h.spec_per_draft_token_s * scale,
                                  spec_per_draft_pass_s=h.spec_per_draft_pass_s * scale),
                    cycle_overhead_s=dep.cycle_overhead_s * scale)


MAX_FIXED_COST_SCALE = 1e6  # a measured baseline may scale a stack's fixed costs by at most this


def anchor_deployment(target: ModelSpec, dep: Deployment, *, batch_size: int, context_len: int,
                      measured_step_time_s: float, where: str,
                      given_as: str = "baseline_tokens_per_s",
                      given_value: float | None = None) -> tuple[Deployment, dict]:
    """Fit the stack's fixed costs so the plain step at (B, L) takes what was measured.

    All of the stack's fixed costs (per-pass overheads, host work, the cycle overhead) scale by one
    factor s ≥ 0 chosen so that the predicted plain iteration equals the measurement (it is monotone
    in s). When the stack has no fixed costs to scale, a fixed host step per iteration is added
    instead. A measurement faster than the device alone allows is refused: it means other inputs
    (hardware, weight format, tensor parallelism) do not describe the run; so is one slower than
    fixed costs MAX_FIXED_COST_SCALE times the stack's could explain (a unit or batch mistake).
    `given_as` names the input the measurement came from (baseline_tokens_per_s or
    baseline_step_time_s) in the refusal, in its own unit, with `given_value` as given."""
    from scipy.optimize import brentq

    from .cycle import plain_iteration_s

    def step(d: Deployment) -> float:
        return float(plain_iteration_s(target, d, batch_size=batch_size, context_len=context_len))

    def refuse(bound_step_s: float, relation: str, why: str):
        if given_as == "baseline_step_time_s":
            value, bound = measured_step_time_s, f"{'at least' if relation == 'min' else 'at most'} {bound_step_s:.4g} s"
        else:
            value = given_value if given_value is not None else batch_size / measured_step_time_s
            bound = f"{'at most' if relation == 'min' else 'at least'} {batch_size / bound_step_s:.4g} tokens/s"
        return field_error(where, given_as, value, f"{bound}: {why}")

    before = step(dep)
    floor = step(_scaled_deployment(dep, 0.0))
    if measured_step_time_s < floor * (1 - 1e-9):
        raise refuse(floor, "min", f"the device time alone is {floor * 1e3:.3f} ms a step at batch {batch_size}; "
                         f"check the hardware, weight format and tensor parallelism")
    fixed_at_one = before - floor
    # the slowest step fixed costs can explain: the stack's scaled MAX_FIXED_COST_SCALE times, or (a
    # stack without fixed costs) host work of MAX_FIXED_COST_SCALE predicted steps
    ceiling = step(_scaled_deployment(dep, MAX_FIXED_COST_SCALE)) if fixed_at_one > 0 else before * MAX_FIXED_COST_SCALE
    if not math.isfinite(measured_step_time_s) or measured_step_time_s > ceiling:
        raise refuse(ceiling, "max", f"slower than fixed costs {MAX_FIXED_COST_SCALE:g} times the stack's explain "
                     f"(predicted {before * 1e3:.3f} ms a step); check the unit and the batch size")
    if fixed_at_one <= 0:
        add = measured_step_time_s - floor
        new = _scaled_deployment(dep, 1.0, add_step_s=add)
        how = f"the stack has no fixed costs: {add * 1e6:.0f} µs of host work per iteration added"
        scale = 1.0
    else:
        hi = 2.0
        while step(_scaled_deployment(dep, hi)) < measured_step_time_s and hi < MAX_FIXED_COST_SCALE:
            hi = min(2.0 * hi, MAX_FIXED_COST_SCALE)
        scale = float(brentq(lambda x: step(_scaled_deployment(dep, x)) - measured_step_time_s, 0.0, hi, xtol=1e-12))
        new = _scaled_deployment(dep, scale)
        how = f"the stack's fixed costs scaled by {scale:.3f}"
    return new, {"measured_step_time_s": measured_step_time_s, "predicted_step_time_s": before,
                 "device_only_step_time_s": floor, "fixed_cost_scale": scale, "how": how}


def resolve_id(id_or_path: str, **overrides) -> OperatingPoint:
    """resolve(load_scenario(id_or_path), **overrides)."""
    from ..specs.scenario import load_scenario

    return resolve(load_scenario(id_or_path), **overrides)


__all__ = ["OperatingPoint", "Acceptance", "MemoryFit", "resolve", "resolve_id", "memory_fit", "memory_parts",
           "check_context", "run_as_loaded", "ALL_METHODS",
           "ACCEPTANCE_KEYS", "DEFAULT_N_RANKS", "DEFAULT_RANK_DECAY"]
