"""One operating point: target, drafter, hardware, K, acceptance, batch and context → a prediction.

The prediction keeps every input and every intermediate (each step's per-operator cost), so a
number in the output can be traced to the formula (see `roofline` and `speculation`) and the inputs.
"""
from __future__ import annotations

from dataclasses import dataclass


from .errors import SpecError, field_error
from .hardware import HardwareProfile, load_hardware
from .models import ModelSpec, load_model
from .roofline import StepCost, check_fits, kv_bytes_per_device, step_cost, weight_bytes_per_device
from .scenario import Scenario
from .speculation import CycleTimes, alpha_from_tau, cycle_times, tokens_per_cycle_iid


def check_tokenizers(target: ModelSpec, drafter: ModelSpec, *, allow_cross_tokenizer: bool = False) -> None:
    """The seed's tokenizer trap: verification compares p and q position by position over the same
    token ids, so a drafter must share the target's tokenizer unless the user says otherwise."""
    if target.tokenizer != drafter.tokenizer and not allow_cross_tokenizer:
        raise SpecError(
            f"drafter {drafter.id!r} uses tokenizer {drafter.tokenizer!r} but target {target.id!r} uses "
            f"{target.tokenizer!r}: their token ids do not line up, so draft tokens cannot be verified "
            f"position by position. Pick a drafter of the same family, or pass --allow-cross-tokenizer "
            f"(allow_cross_tokenizer = true) to model a cross-tokenizer scheme anyway."
        )


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
            "verify_tokens_in_flight": s.batch_size * (s.k + 1),
            "memory_per_device_bytes": self.memory_per_device_bytes,
            "plain_step": self.plain_step.breakdown(),
            "verify_step": self.verify_step.breakdown(),
        }
        if self.draft_step is not None:
            out["draft_step"] = self.draft_step.breakdown()
        return out


def predict(scenario: Scenario) -> Prediction:
    """Linear speculation with a separate draft model (the seed's worked example), or 'none'."""
    hw = load_hardware(scenario.hardware)
    target = load_model(scenario.target)
    if scenario.target_dtype:
        target = target.with_weight_format(scenario.target_dtype)
    if scenario.method not in ("draft_model", "none"):
        raise field_error(f"scenario {scenario.name!r}", "method", scenario.method,
                          "'draft_model' or 'none' for predict (other drafter families: specsim sweep)")
    b, l, k = scenario.batch_size, scenario.context_len, scenario.k
    memory = {"target weights": weight_bytes_per_device(target, scenario.tp),
              "target KV cache": float(kv_bytes_per_device(target, batch_size=b, ctx_len=l + k + 1, tp=scenario.tp))}
    drafter = None
    if scenario.method == "draft_model":
        if not scenario.drafter:
            raise field_error(f"scenario {scenario.name!r}", "drafter", None, "a drafter model id for method 'draft_model'")
        drafter = load_model(scenario.drafter)
        check_tokenizers(target, drafter, allow_cross_tokenizer=scenario.allow_cross_tokenizer)
        if scenario.drafter_tp > scenario.tp:
            raise field_error(f"scenario {scenario.name!r}", "drafter_tp", scenario.drafter_tp,
                              f"<= tp = {scenario.tp} (the drafter runs on the target's devices)")
        # the drafter's weights are replicated on every device of the target's group that runs it
        memory["drafter weights"] = weight_bytes_per_device(drafter, scenario.drafter_tp)
        memory["drafter KV cache"] = float(kv_bytes_per_device(drafter, batch_size=b, ctx_len=l + k, tp=scenario.drafter_tp))
    check_fits(hw, scenario.tp, memory, what=f"{target.id}{' + ' + drafter.id if drafter else ''} on {scenario.tp}× {hw.id} "
               f"at batch {b}, context {l}")

    common = dict(attention=scenario.attention)
    plain = step_cost(target, hw, batch_size=b, q_len=1, ctx_len=l, tp=scenario.tp, **common)
    if drafter is None or k == 0:
        verify = plain
        cyc = cycle_times(target_step_time_s=plain.time_s, draft_time_s=0.0, verify_time_s=plain.time_s,
                          tokens_per_cycle=1.0, batch_size=b, draft_step_time_s=0.0)
        return Prediction(scenario=scenario, hardware=hw, target=target, drafter=drafter, alpha=None,
                          plain_step=plain, draft_step=None, verify_step=verify, cycle=cyc, memory_per_device_bytes=memory)
    if scenario.tau is not None:
        tau, alpha = float(scenario.tau), alpha_from_tau(float(scenario.tau), k)
    elif scenario.alpha is not None:
        alpha = float(scenario.alpha)
        tau = float(tokens_per_cycle_iid(alpha, k))
    else:
        raise field_error(f"scenario {scenario.name!r}", "alpha", None, "an acceptance rate alpha or a mean tokens per cycle tau")
    draft = step_cost(drafter, hw, batch_size=b, q_len=1, ctx_len=l, tp=scenario.drafter_tp, **common)
    verify = step_cost(target, hw, batch_size=b, q_len=k + 1, ctx_len=l, tp=scenario.tp, **common)
    cyc = cycle_times(target_step_time_s=plain.time_s, draft_time_s=k * draft.time_s, verify_time_s=verify.time_s,
                      tokens_per_cycle=tau, batch_size=b, draft_step_time_s=draft.time_s)
    return Prediction(scenario=scenario, hardware=hw, target=target, drafter=drafter, alpha=alpha,
                      plain_step=plain, draft_step=draft, verify_step=verify, cycle=cyc,
                      memory_per_device_bytes=memory)


