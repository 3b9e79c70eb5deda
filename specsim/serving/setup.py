"""An operating point wired into a serving run: workload, engine limits, KV capacity, cost, policies, SLO.

The operating point supplies the hardware, target, deployment, drafter family, K or tree and
acceptance (`speculation.operating_point.resolve`); its tables `[workload]`, `[engine]`,
`[policies]` and `[slo]` say what load, which scheduler limits, which gates and which latency
targets. Unknown keys are refused.

[workload]  kind = "trace" | "poisson" | "gamma" | "closed_loop"
            trace = "traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv"  (relative
                    paths resolve against the data folder: $SPECSIM_DATA, default the shipped data/)
            format = "azure" | "mooncake" | "plain"   (guessed when absent)
            window_s = [start, end]   time_scale = 2.0   rates = [1, 2, 4, 8]   jitter_s (Mooncake)
            n_requests, rate_per_s, cv (gamma), n_users, think_time_s (closed loop)
            prompt = {kind = "fixed", tokens = 512}, output = {...}  (synthetic lengths), or
            lengths_from = "<trace>" to fit lognormals to a trace's columns
[engine]    max_num_seqs, max_num_batched_tokens, chunked_prefill, block_size,
            gpu_memory_utilization, watermark_frac, max_model_len, acceptance_window_steps,
            activation_reserve_gb, n_blocks (override the computed capacity)
[policies]  <name> = {kind = "never" | "static" | "disable_by_batch_size" | "k_by_batch_band" |
            "acceptance_off_switch" | "goodput_optimal", ...}
[slo]       ttft_s, tpot_s
Acceptance (α, τ or `[acceptance] by_position`, and its dependence on context and temperature)
comes from the operating point; each sequence's rates follow its own context.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import EmptyResultError, SpecError, reject_unknown_keys
from ..specs.data import data_path
from ..speculation.families import FAMILIES
from ..speculation.operating_point import OperatingPoint
from ..speculation.switch_off import WorkloadMix
from . import workloads as wl
from .cost import ServingCost
from .engine import EngineConfig
from .kv_cache import KVCapacity, kv_capacity_for
from .metrics import SLO
from .policies import Never, StaticK, policy_from_dict

WORKLOAD_KEYS = {"kind", "trace", "format", "window_s", "time_scale", "rates", "n_requests", "rate_per_s", "cv",
                 "n_users", "think_time_s", "prompt", "output", "lengths_from", "jitter_s"}
ENGINE_KEYS = {"max_num_seqs", "max_num_batched_tokens", "chunked_prefill", "block_size", "gpu_memory_utilization",
               "watermark_frac", "max_model_len", "acceptance_window_steps", "activation_reserve_gb", "n_blocks"}
SLO_KEYS = {"ttft_s", "tpot_s"}
_BOOL_ENGINE = ("chunked_prefill",)
_INT_ENGINE = ("max_num_seqs", "max_num_batched_tokens", "block_size", "max_model_len", "acceptance_window_steps",
               "n_blocks")
_FLOAT_ENGINE = ("gpu_memory_utilization", "watermark_frac", "activation_reserve_gb")


def resolve_data_path(path: str) -> Path:
    return data_path(path, what="trace")


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingSetup:
    """Everything an operating point's serving tables resolve to."""

    point: OperatingPoint
    workload: wl.Workload
    workload_kind: str
    config: EngineConfig
    capacity: KVCapacity
    cost: ServingCost
    policies: dict
    slo: SLO
    rates: tuple
    seed: int
    synthetic: dict = field(default_factory=dict)

    @property
    def tree_size(self) -> int:
        return self.point.tree_size if self.point.is_tree else 0

    @property
    def acceptance(self) -> tuple:
        """The engine's rates: (α,) or per-position conditional rates, at the reference point."""
        m = self.point.acceptance.model
        if m is None:
            return ()
        return (m.alpha,) if m.alpha is not None else tuple(m.conditional)

    @property
    def acceptance_factor(self) -> Callable[[np.ndarray], np.ndarray] | None:
        """factor(context) at the point's temperature, or None when acceptance does not move."""
        acc = self.point.acceptance
        m = acc.model
        if m is None or (m.context_decay_per_token == 0 and m.temperature_slope == 0):
            return None
        t = self.point.temperature
        return lambda ctx: acc.factor(ctx, t)

    def workload_at(self, rate_per_s: float | None) -> wl.Workload:
        """The workload at a mean arrival rate: a trace rescaled in time, synthetic arrivals redrawn
        from the arrivals stream (the lengths stay the same)."""
        if rate_per_s is None:
            return self.workload
        if self.workload_kind == "trace":
            return self.workload.at_rate(rate_per_s)
        if self.workload_kind in ("poisson", "gamma"):
            rng = np.random.default_rng(np.random.SeedSequence(self.seed).spawn(3)[0])
            t = wl.gamma_arrivals(rng, rate_per_s=rate_per_s, cv=self.synthetic.get("cv", 1.0),
                                  n_requests=self.workload.n_requests)
            return wl.Workload(arrival_at_s=t, prompt_tokens=self.workload.prompt_tokens,
                               output_tokens=self.workload.output_tokens, source=self.workload.source)
        raise SpecError(f"scenario {self.point.name!r}: a closed-loop workload has no arrival rate to sweep")

    def mix(self) -> WorkloadMix:
        """The workload's prompt/output mix (for the serving view of the switch-off point)."""
        return WorkloadMix.from_lengths(self.workload.prompt_tokens, self.workload.output_tokens,
                                        source=self.workload.source)

    @property
    def max_batch_speculative(self) -> int:
        """The most sequences the KV cache holds at the workload's decode context while speculating."""
        per_seq = self.mix().decode_context_len + 1 + self.point.reserved_slots
        return int(self.capacity.capacity_tokens // per_seq)


def build_workload(op: OperatingPoint, raw: dict, *, seed: int) -> tuple[wl.Workload, str, dict]:
    where = f"scenario {op.name!r} [workload]"
    reject_unknown_keys(where, raw, WORKLOAD_KEYS)
    kind = raw.get("kind", "trace" if "trace" in raw else "poisson")
    arrivals_ss, lengths_ss, _ = np.random.SeedSequence(seed).spawn(3)
    rng_a, rng_l = np.random.default_rng(arrivals_ss), np.random.default_rng(lengths_ss)
    extra: dict = {}
    if kind == "trace":
        if "trace" not in raw:
            raise SpecError(f"{where}: field 'trace' missing: expected a trace path for kind = 'trace'")
        jitter = raw.get("jitter_s", 3.0)
        path = resolve_data_path(raw["trace"])
        fmt = raw.get("format")
        if fmt == "mooncake" or (fmt is None and path.suffix == ".jsonl"):
            w = wl.read_mooncake(path, rng=rng_a, quantum_s=float(jitter))
        else:
            w = wl.read_trace(path, format=fmt, rng=rng_a)
        w = replace(w, source=str(raw["trace"]))  # as the scenario names it (the full path says little)
        if "window_s" in raw:
            win = raw["window_s"]
            if not (isinstance(win, list) and len(win) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                                    for x in win) and win[0] < win[1]):
                raise SpecError(f"{where}: field 'window_s' = {win!r}: expected [start, end] in seconds, start < end")
            w = w.window(float(win[0]), float(win[1]))
            w = replace(w, source=f"{w.source}, seconds {win[0]:g} to {win[1]:g}")
        if "time_scale" in raw:
            ts = raw["time_scale"]
            if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not (np.isfinite(ts) and ts > 0):
                raise SpecError(f"{where}: field 'time_scale' = {ts!r}: expected a positive number")
            w = w.scaled(float(ts))
        if w.n_requests == 0:
            raise EmptyResultError(f"{where}: the trace {raw['trace']!r} has no requests"
                                   + (f" in window_s = {raw['window_s']}" if "window_s" in raw else ""))
        return w, kind, extra
    if kind not in ("poisson", "gamma", "closed_loop"):
        raise SpecError(f"{where}: field 'kind' = {kind!r}: expected trace, poisson, gamma or closed_loop")
    n = raw.get("n_requests", 1000)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SpecError(f"{where}: field 'n_requests' = {n!r}: expected an integer >= 1")
    if "lengths_from" in raw:
        src = wl.read_trace(resolve_data_path(raw["lengths_from"]), rng=rng_a)
        prompt, output = wl.fit_lognormal(src.prompt_tokens), wl.fit_lognormal(src.output_tokens)
    else:
        for key in ("prompt", "output"):
            if key not in raw:
                raise SpecError(f"{where}: field {key!r} missing: expected a length distribution "
                                f"like {{kind = \"fixed\", tokens = 128}} (or lengths_from = a trace)")
        prompt = wl.lengths_from_dict(raw["prompt"], where=f"{where} prompt")
        output = wl.lengths_from_dict(raw["output"], where=f"{where} output")
    if kind == "closed_loop":
        w = wl.closed_loop(n_users=raw.get("n_users", 1), n_requests=n, prompt=prompt, output=output,
                           rng_lengths=rng_l, think_time_s=float(raw.get("think_time_s", 0.0)))
        return w, kind, extra
    rate = raw.get("rate_per_s", 1.0)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not (np.isfinite(rate) and rate > 0):
        raise SpecError(f"{where}: field 'rate_per_s' = {rate!r}: expected a positive arrival rate (requests/s)")
    cv = raw.get("cv", 1.0) if kind == "gamma" else 1.0
    if isinstance(cv, bool) or not isinstance(cv, (int, float)) or not (np.isfinite(cv) and cv > 0):
        raise SpecError(f"{where}: field 'cv' = {cv!r}: expected a positive coefficient of variation")
    extra["cv"] = float(cv)
    t = wl.gamma_arrivals(rng_a, rate_per_s=float(rate), cv=float(cv), n_requests=n)
    return (wl.synthetic(arrivals=t, prompt=prompt, output=output, rng_lengths=rng_l, source=f"{kind} at {rate} req/s"),
            kind, extra)


def _engine_settings(op: OperatingPoint) -> dict:
    eng = dict(op.section("engine"))
    where = f"scenario {op.name!r} [engine]"
    reject_unknown_keys(where, eng, ENGINE_KEYS)
    for key in _BOOL_ENGINE:
        if key in eng and not isinstance(eng[key], bool):
            raise SpecError(f"{where}: field {key!r} = {eng[key]!r}: expected true or false (a boolean, not a string)")
    for key in _INT_ENGINE:
        if key in eng and (isinstance(eng[key], bool) or not isinstance(eng[key], int)):
            raise SpecError(f"{where}: field {key!r} = {eng[key]!r}: expected an integer")
    for key in _FLOAT_ENGINE:
        if key in eng and (isinstance(eng[key], bool) or not isinstance(eng[key], (int, float))
                           or not np.isfinite(eng[key])):
            raise SpecError(f"{where}: field {key!r} = {eng[key]!r}: expected a number")
    if "activation_reserve_gb" in eng and eng["activation_reserve_gb"] < 0:
        raise SpecError(f"{where}: field 'activation_reserve_gb' = {eng['activation_reserve_gb']!r}: expected >= 0")
    return eng


def build_serving(op: OperatingPoint, *, seed: int = 0, exact_cost: bool = False) -> ServingSetup:
    """The operating point's serving run: capacity, cost, workload, policies, SLO."""
    where = f"scenario {op.name!r}"
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SpecError(f"--seed {seed!r}: expected an integer >= 0")
    if op.speculative and not op.drafter.family.serving:
        modelled = [m for m, f in FAMILIES.items() if f.serving]
        raise SpecError(f"{where}: field 'method' = {op.method!r}: the serving simulator models none, "
                        f"{', '.join(modelled)} (Lookahead's verify width is not a K)")
    eng = _engine_settings(op)
    cap = kv_capacity_for(op, gpu_memory_utilization=float(eng.get("gpu_memory_utilization", 0.9)),
                          block_size_tokens=eng.get("block_size", 16),
                          activation_reserve_bytes=float(eng.get("activation_reserve_gb", 0.0)) * 1e9)
    kwargs = {k: eng[k] for k in ("max_num_seqs", "max_num_batched_tokens", "chunked_prefill", "watermark_frac",
                                  "max_model_len", "acceptance_window_steps") if k in eng}
    n_blocks = eng.get("n_blocks", cap.n_blocks)
    config = EngineConfig(n_blocks=n_blocks, block_size_tokens=cap.block_size_tokens,
                          max_model_len=kwargs.pop("max_model_len", op.target.max_context or 0), **kwargs)
    cost = ServingCost(op, exact=exact_cost)
    raw_w = dict(op.section("workload"))
    workload, kind, extra = build_workload(op, raw_w, seed=seed)
    pol_raw = dict(op.section("policies"))
    if pol_raw:
        policies = {name: policy_from_dict(name, v, where=f"{where} [policies]") for name, v in pol_raw.items()}
    else:
        policies = {"never": Never()}
        if op.speculative:
            policies[f"static_k{op.k}"] = StaticK(k=op.k)
    if not op.speculative and any(p.k_reserved for p in policies.values()):
        raise SpecError(f"{where}: method {op.method!r} (K = {op.k}) cannot run speculative policies "
                        f"{[n for n, p in policies.items() if p.k_reserved]}")
    if any(p.k_reserved for p in policies.values()) and op.acceptance.model is None:
        raise SpecError(f"{where}: speculative policies need an acceptance rate: give alpha, tau or "
                        f"[acceptance] by_position")
    if op.is_tree:
        for name, p in policies.items():
            if p.k_reserved and op.tree_size < p.k_reserved + 1:
                raise SpecError(f"{where} [policies]: policy {name!r} drafts K = {p.k_reserved}, deeper than the "
                                f"tree of {op.tree_size} nodes allows (needs >= K + 1 nodes)")
    slo_raw = dict(op.section("slo"))
    reject_unknown_keys(f"{where} [slo]", slo_raw, SLO_KEYS)
    for key, v in slo_raw.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise SpecError(f"{where} [slo]: field {key!r} = {v!r}: expected a positive number of seconds")
    slo = SLO(**{k: float(v) for k, v in slo_raw.items()})
    rates = raw_w.get("rates", [])
    if not isinstance(rates, list) or not all(not isinstance(r, bool) and isinstance(r, (int, float))
                                              and np.isfinite(r) and r > 0 for r in rates):
        raise SpecError(f"{where} [workload]: field 'rates' = {rates!r}: expected a list of positive rates (req/s)")
    return ServingSetup(point=op, workload=workload, workload_kind=kind, config=config, capacity=cap, cost=cost,
                        policies=policies, slo=slo, rates=tuple(float(r) for r in rates), seed=seed, synthetic=extra)


def workload_mix(op: OperatingPoint, *, seed: int = 0) -> tuple[WorkloadMix, int] | None:
    """The point's workload mix and the largest batch its KV cache holds while speculating, or None
    when the scenario has no [workload] (the serving view of the switch-off point)."""
    if not op.section("workload"):
        return None
    setup = build_serving(op, seed=seed)
    return setup.mix(), setup.max_batch_speculative


__all__ = ["ServingSetup", "build_serving", "build_workload", "workload_mix", "resolve_data_path", "WORKLOAD_KEYS",
           "ENGINE_KEYS", "SLO_KEYS"]
