"""One operating point: target, drafter, hardware, K, acceptance, batch and context → a prediction.

The prediction keeps every input and every intermediate (each step's per-operator cost), so a
number in the output can be traced to the formula (see `roofline` and `speculation`) and the inputs.
"""
from __future__ import annotations

from dataclasses import dataclass


from . import families as drafters
from .families import check_tokenizers  # noqa: F401  (kept importable from here)
from ..errors import field_error
from ..specs.hardware import HardwareProfile, load_hardware
from ..specs.models import ModelSpec, load_model
from ..cost.roofline import StepCost, check_fits, kv_bytes_per_device, step_cost, weight_bytes_per_device
from ..specs.scenario import Scenario
from .cycle import CycleTimes, Deployment, alpha_from_tau, cycle_times, speculative_cycle, tokens_per_cycle
from ..specs.stacks import load_stack


@dataclass(frozen=True, slots=True, kw_only=True)
class Prediction:
    scenario: Scenario
    hardware: HardwareProfile
    target: ModelSpec
    drafter: ModelSpec | None
    alpha: float | None
    plain_step: StepCost
    draft_step: StepCost | None
    verify_step: StepCost
    cycle: CycleTimes
    memory_per_device_bytes: dict
    verify_q_len: int = 0

    def to_dict(self) -> dict:
        s = self.scenario
        c = self.cycle
        out = {
            "scenario": s.name, "hardware": self.hardware.id, "target": self.target.id,
            "drafter": self.drafter.id if self.drafter else None, "method": s.method, "k": s.k,
            "alpha": self.alpha, "tau_given": s.tau, "batch_size": s.batch_size, "context_len": s.context_len,
            "tp": s.tp, "drafter_tp": s.drafter_tp, "attention": s.attention,
            "target_step_time_s": float(c.target_step_time_s), "draft_step_time_s": float(c.draft_step_time_s),
            "draft_time_s": float(c.draft_time_s), "verify_time_s": float(c.verify_time_s),
            "cycle_overhead_s": float(c.overhead_s), "cycle_time_s": float(c.cycle_time_s),
            "tokens_per_cycle": float(c.tokens_per_cycle), "baseline_tokens_per_s": float(c.baseline_tokens_per_s),
            "tokens_per_s": float(c.tokens_per_s), "speedup": float(c.speedup),
            "ridge_flops_per_byte": self.hardware.ridge_flops_per_byte(self.target.compute_dtype),
            "verify_tokens_in_flight": s.batch_size * (self.verify_q_len or s.k + 1),
            "memory_per_device_bytes": self.memory_per_device_bytes,
            "plain_step": self.plain_step.breakdown(),
            "verify_step": self.verify_step.breakdown(),
        }
        if self.draft_step is not None:
            out["draft_step"] = self.draft_step.breakdown()
        return out


def deployment_for(scenario: Scenario, hw: HardwareProfile) -> Deployment:
    """The scenario's hardware × tp with its serving stack's efficiency (none named: the hardware's)."""
    stack = load_stack(scenario.stack) if scenario.stack else None
    return Deployment.from_stack(hw, stack, n_devices=scenario.tp, attention=scenario.attention)


def predict(scenario: Scenario) -> Prediction:
    """One operating point for any drafter family with a linear draft of K tokens (Lookahead: one
    step of window W, n-gram N, guesses G), or 'none'. Trees: `specsim sweep` with tree_size.
    Family knobs (Medusa heads, LayerSkip exit layer, Lookahead W/N/G, ...) come from the scenario's
    `[sweep.drafter_options]` table."""
    hw = load_hardware(scenario.hardware)
    target = load_model(scenario.target)
    if scenario.target_dtype:
        target = target.with_weight_format(scenario.target_dtype)
    dep = deployment_for(scenario, hw)
    b, l, k = scenario.batch_size, scenario.context_len, scenario.k
    split = dep.memory_split
    memory = {"target weights": weight_bytes_per_device(target, dep.tp) / (split // dep.tp),
              "target KV cache": float(kv_bytes_per_device(target, batch_size=b, ctx_len=l + k + 1, tp=dep.tp))
              / (split // dep.tp)}
    where = f"scenario {scenario.name!r}"
    common = dict(attention=scenario.attention, efficiency=dep.eff)
    plain = step_cost(target, hw, batch_size=b, q_len=1, ctx_len=l, tp=dep.tp, **common)
    if scenario.method == "none" or k == 0:
        check_fits(hw, dep.tp, memory, what=f"{target.id} on {scenario.tp}× {hw.id} at batch {b}, context {l}")
        cyc = cycle_times(target_step_time_s=plain.time_s, draft_time_s=0.0, verify_time_s=plain.time_s,
                          tokens_per_cycle=1.0, batch_size=b, draft_step_time_s=0.0)
        return Prediction(scenario=scenario, hardware=hw, target=target, drafter=None, alpha=None,
                          plain_step=plain, draft_step=None, verify_step=plain, cycle=cyc, memory_per_device_bytes=memory)
    if scenario.method == "draft_model" and scenario.drafter_tp > scenario.tp:
        raise field_error(where, "drafter_tp", scenario.drafter_tp,
                          f"<= tp = {scenario.tp} (the drafter runs on the target's devices)")
    options = scenario.section("sweep").get("drafter_options", {})
    cfg = drafters.make_config(scenario.method, target, drafter=scenario.drafter, drafter_tp=scenario.drafter_tp,
                               allow_cross_tokenizer=scenario.allow_cross_tokenizer, options=options, where=where)
    drafter = cfg.drafter
    extra = drafters.footprint(cfg, target, batch_size=b, ctx_len=l, k=k, tp=dep.tp)
    memory.update({key: float(v) for key, v in extra.items() if key != "speculative slots"})
    check_fits(hw, dep.tp, memory, what=f"{target.id}{' + ' + drafter.id if drafter else ''} on {scenario.tp}× {hw.id} "
               f"at batch {b}, context {l}")

    if scenario.tau is not None:
        if scenario.method == "lookahead":
            raise field_error(where, "tau", scenario.tau, "alpha (pool-guess acceptance) for method 'lookahead'")
        tau, alpha = float(scenario.tau), alpha_from_tau(float(scenario.tau), k)
    elif scenario.alpha is not None:
        alpha = float(scenario.alpha)
        tau = float(tokens_per_cycle(cfg, alpha=alpha, k=k))
    else:
        raise field_error(where, "alpha", None, "an acceptance rate alpha or a mean tokens per cycle tau")
    cyc = speculative_cycle(cfg, target, dep, batch_size=b, k=k, ctx_len=l, tokens_per_cycle=tau,
                            plain_step_time_s=plain.time_s)
    dc = drafters.draft_cost(cfg, target, hw, batch_size=b, k=k, ctx_len=l, tp=dep.tp, attention=scenario.attention,
                             efficiency=dep.eff)
    verify = step_cost(target, hw, batch_size=b, q_len=int(dc.verify_q_len), ctx_len=l, tp=dep.tp, **common)
    draft = (step_cost(drafter, hw, batch_size=b, q_len=1, ctx_len=l, tp=scenario.drafter_tp, **common)
             if drafter is not None else None)
    return Prediction(scenario=scenario, hardware=hw, target=target, drafter=drafter, alpha=alpha,
                      plain_step=plain, draft_step=draft, verify_step=verify, cycle=cyc,
                      memory_per_device_bytes=memory, verify_q_len=int(dc.verify_q_len))
