"""An operating point wired into a serving run: workload, engine limits, KV capacity, cost, policies, SLO.

The operating point supplies the hardware, target, deployment, drafter family, K or tree and
acceptance (`speculation.operating_point.resolve`); its tables `[workload]`, `[engine]`,
`[policies]`, `[fleet]` and `[slo]` say what load, which scheduler limits, which gates, which
replicas and which latency targets. The tables were checked when the scenario loaded and are read
here as specs (`specs.serving_tables`, through `Scenario.tables`); what needs the resolved point is
checked here: n_blocks within the capacity the memory holds, max_model_len within the target's
context, prefix caching against the workload's prefix structure, policies against the method and
the tree, and the size of the whole run (`check_run_size`).

[workload]  kind = "trace" | "poisson" | "gamma" | "closed_loop"
            trace = "traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv"  (relative
                    paths resolve against the data folder: $SPECSIM_DATA, default the shipped data/)
            format = "azure" | "mooncake" | "plain"   (guessed when absent)
            window_s = [start, end]   time_scale = 2.0   rates = [1, 2, 4, 8]   jitter_s (Mooncake)
            n_requests, rate_per_s, cv (gamma), n_users, think_time_s (closed loop)
            prompt = {kind = "fixed", tokens = 512}, output = {...}  (synthetic lengths), or
            lengths_from = "<trace>" to fit lognormals to a trace's columns
            priority_fracs = [0.2, 0.8] (priority classes 0, 1, ... drawn with these fractions;
            class 0 is served first under scheduling = "priority"), hash_block_tokens (a plain CSV
            with a session_id column: tokens per hashed block of its conversation chains)
[engine]    max_num_seqs, max_num_batched_tokens, chunked_prefill, block_size,
            gpu_memory_utilization, watermark_frac, max_model_len, acceptance_window_steps,
            activation_reserve_gb, n_blocks (override the computed capacity),
            preemption_mode = "recompute" | "swap", swap_space_gib (host swap space per device,
            vLLM's swap_space, default 4), swap_bandwidth_gb_s (host link per device, default 63:
            PCIe 5.0 x16), scheduling = "fcfs" | "priority", prefix_caching (needs block chains:
            the Mooncake trace, or a plain CSV with session_id), drafter_catchup (default true)
[fleet]     n_replicas, layout = "colocated" | "disaggregated", n_prefill (prefill replicas of a
            disaggregated layout), router = "round_robin" | "least_outstanding" | "prefix_affinity",
            cache_threshold, balance_abs_threshold, balance_rel_threshold (prefix_affinity),
            kv_transfer_gb_s, kv_transfer_latency_us (default: the hardware's interconnect),
            prefill_runs_drafter (default true)
[policies]  <name> = {kind = "never" | "static" | "disable_by_batch_size" | "k_by_batch_band" |
            "acceptance_off_switch" | "goodput_optimal", ...}
[slo]       ttft_s, tpot_s
Acceptance (α, τ or `[acceptance] by_position`, and its dependence on context and temperature)
comes from the operating point; each sequence's rates follow its own context.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from ..cost.roofline import kv_bytes_per_device
from ..errors import EmptyResultError, SpecError, field_error
from ..specs import checks as C
from ..specs.data import data_path
from ..specs.serving_tables import (DEFAULT_SWAP_BANDWIDTH_GB_S, DEFAULT_SWAP_SPACE_GIB, ENGINE_KEYS, FLEET_KEYS,
                                    MAX_RATE_PER_S, MAX_SYNTHETIC_REQUESTS, MIN_RATE_PER_S, SLO_KEYS, WORKLOAD_KEYS,
                                    EngineTable, FleetTable, WorkloadTable)
from ..speculation.acceptance import shaped_conditional
from ..speculation.families import FAMILIES
from ..speculation.operating_point import OperatingPoint
from ..speculation.switch_off import WorkloadMix
from . import workloads as wl
from .config import EngineConfig
from .cost import ServingCost, regimes_for
from .fleet import FleetSpec
from .kv_cache import KVCapacity, kv_capacity_for
from .metrics import SLO
from .policies import Never, StaticK, policy_from_table
from .router import RouterConfig

# One run (a policy at a rate) past this many simulated output tokens cannot end in reasonable time:
# refused before it starts, naming its size. The simulator emitted 1.3-1.8 x 10^5 tokens a second
# on one core of this 2-core machine (a 20,000-request Poisson run of 100-token outputs, K = 4, an
# 8B target: 11-13 s), so this is about two hours a run.
MAX_SIMULATED_TOKENS = 10 ** 9
SIMULATED_TOKENS_PER_S = 1.5e5  # the rate above, for saying how long a run will take


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
    fleet: FleetSpec = field(default_factory=FleetSpec)
    drafter_cache: str = "none"
    plain_config: EngineConfig | None = None  # the launch without speculation (a policy that never drafts)
    notes: tuple = ()  # what the stack changed in the launch (running_limit)

    def config_for(self, policy) -> EngineConfig:
        """The engine a policy runs on: a policy that never drafts is the launch without speculation."""
        if self.plain_config is not None and not policy.k_reserved:
            return self.plain_config
        return self.config

    @property
    def tree_size(self) -> int:
        return self.point.tree_size if self.point.is_tree else 0

    @property
    def draft_frac(self) -> float:
        """The share of a sequence's cycles in which the proposer drafts (`DrafterConfig.draft_frac`)."""
        return float(self.point.drafter.draft_frac) if self.point.speculative else 1.0

    @property
    def acceptance(self) -> tuple:
        """The engine's rates: (α,) or per-position conditional rates, at the reference point."""
        acc = self.point.acceptance
        m = acc.model
        if m is None:
            return ()
        if m.alpha is not None and acc.position_ratios is not None and not self.point.is_tree:
            # a calibrated chain's measured shape, as the analytic model uses it; the engine repeats the last rate
            return tuple(float(c) for c in shaped_conditional(m.alpha, acc.position_ratios, len(acc.position_ratios)))
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
            return replace(self.workload, arrival_at_s=t, notes=())
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


def tables(op: OperatingPoint):
    """The point's scenario tables, as checked specs (`specs.scenario.ScenarioTables`)."""
    return op.scenario.tables


def build_workload(op: OperatingPoint, table: WorkloadTable | Mapping, *, seed: int) -> tuple[wl.Workload, str, dict]:
    """The [workload] table (a WorkloadTable, or a raw table checked here) as a Workload, with its
    priority classes when it gives them."""
    t = table if isinstance(table, WorkloadTable) else \
        WorkloadTable.from_table(table, where=f"scenario {op.name!r} [workload]")
    w, extra = _build_workload(t, seed=seed)
    if t.priority_fracs is not None:
        rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(4)[3])  # its own stream
        w = w.with_priorities(t.priority_fracs, rng)
    return w, t.kind, extra


def _build_workload(t: WorkloadTable, *, seed: int) -> tuple[wl.Workload, dict]:
    where = t.where
    arrivals_ss, lengths_ss, _ = np.random.SeedSequence(seed).spawn(3)
    rng_a, rng_l = np.random.default_rng(arrivals_ss), np.random.default_rng(lengths_ss)
    extra: dict = {}
    if t.is_trace:
        path = resolve_data_path(t.trace)
        fmt = t.format
        if fmt == "mooncake" or (fmt is None and path.suffix in (".jsonl", ".json")):
            w = wl.read_mooncake(path, rng=rng_a, quantum_s=t.jitter_s)
        elif fmt == "plain" and t.hash_block_tokens is not None:
            w = wl.read_plain(path, hash_block_tokens=t.hash_block_tokens)
        else:
            w = wl.read_trace(path, format=fmt, rng=rng_a)
        w = replace(w, source=t.trace)  # as the scenario names it (the full path says little)
        if t.window_s is not None:
            start_s, end_s = t.window_s
            w = w.window(start_s, end_s)
            w = replace(w, source=f"{w.source}, seconds {start_s:g} to {end_s:g}")
        if w.n_requests == 0:
            raise EmptyResultError(f"{where}: the trace {t.trace!r} has no requests"
                                   + (f" in window_s = {list(t.window_s)}" if t.window_s is not None else ""))
        if t.time_scale is not None:
            try:
                w = w.scaled(t.time_scale)
            except SpecError as exc:
                raise field_error(where, "time_scale", t.time_scale, f"a replay speed the trace takes ({exc})") from None
        return w, extra
    if t.lengths_from is not None:
        src = wl.read_trace(resolve_data_path(t.lengths_from), rng=rng_a)
        if src.n_requests < 2:
            raise field_error(where, "lengths_from", t.lengths_from, f"a trace of two or more requests to fit "
                              f"lengths to (it has {src.n_requests})")
        prompt, output = wl.fit_lognormal(src.prompt_tokens), wl.fit_lognormal(src.output_tokens)
    else:
        prompt, output = wl.lengths_from_table(t.prompt), wl.lengths_from_table(t.output)
    if t.kind == "closed_loop":
        w = wl.closed_loop(n_users=t.n_users, n_requests=t.n_requests, prompt=prompt, output=output,
                           rng_lengths=rng_l, think_time_s=t.think_time_s)
        return w, extra
    cv = t.cv if t.kind == "gamma" else 1.0
    extra["cv"] = cv
    arrivals = wl.gamma_arrivals(rng_a, rate_per_s=t.rate_per_s, cv=cv, n_requests=t.n_requests)
    return (wl.synthetic(arrivals=arrivals, prompt=prompt, output=output, rng_lengths=rng_l,
                         source=f"{t.kind} at {t.rate_per_s:g} req/s"), extra)


def running_limit(op: OperatingPoint, eng: EngineTable) -> tuple[int, str]:
    """The most sequences the point's launch runs at once, and a note when its stack lowers the limit:
    [engine] max_num_seqs where the scenario gives it (the launch set the limit); else its default, or,
    where the launch speculates and the stack's `spec_max_running` load regime names the method
    (specs.regimes: SGLang resets max_running_requests to 48 for EAGLE and NGRAM unless the launch sets
    it), that cap when it is lower."""
    if not op.speculative or "max_num_seqs" in eng.given:
        return eng.max_num_seqs, ""
    rg = regimes_for(op)
    cap = rg.spec_max_running.get(op.method)
    if cap is None or cap >= eng.max_num_seqs:
        return eng.max_num_seqs, ""
    src = next(e for e in rg.applied if e.property == "spec_max_running" and e.fields["method"] == op.method)
    return cap, (f"stack {op.stack.id!r} runs at most {cap} sequences at once when it speculates with {op.method} and "
                 f"the launch does not set the limit (versions {src.versions.text}; {src.status}: {src.source}); "
                 f"[engine] max_num_seqs sets it. A policy that never drafts runs as a launch without speculation, "
                 f"at max_num_seqs = {eng.max_num_seqs}")


def prefill_mixing(op: OperatingPoint, eng: EngineTable) -> tuple[bool, str]:
    """Whether a prefill chunk shares an iteration with the running decodes, and a note when the stack
    decides it: [engine] mixed_prefill where the scenario gives it; else the stack's `prefill_batches`
    load regime (specs.regimes: SGLang runs a new prefill batch first, alone, and the decodes wait);
    else mixed, vLLM's chunked prefill."""
    if "mixed_prefill" in eng.given:
        return eng.mixed_prefill, ""
    rg = regimes_for(op)
    if rg.mixed_prefill is None or rg.mixed_prefill == eng.mixed_prefill:
        return eng.mixed_prefill, ""
    src = next(e for e in rg.applied if e.property == "prefill_batches")
    how = ("prefill chunks share iterations with the decodes" if rg.mixed_prefill else
           "a prefill runs first, in an iteration of its own, while the running decodes wait")
    return rg.mixed_prefill, (f"stack {op.stack.id!r}: {how} (versions {src.versions.text}; {src.status}: "
                              f"{src.source}); [engine] mixed_prefill sets it")


def engine_config(op: OperatingPoint, eng: EngineTable, cap: KVCapacity, *,
                  max_num_seqs: int | None = None, mixed_prefill: bool | None = None) -> EngineConfig:
    """The [engine] table with the point's capacity as the scheduler's limits. n_blocks may lower the
    capacity the memory holds, never raise it; max_model_len is at most the target's maximum context.
    max_num_seqs: the running limit when the launch's differs from the table's (`running_limit`);
    mixed_prefill: the stack's prefill batching where the table does not give it (`prefill_mixing`)."""
    where = eng.where
    if eng.n_blocks is not None and eng.n_blocks > cap.n_blocks:
        raise field_error(where, "n_blocks", eng.n_blocks, f"at most {cap.n_blocks}: the KV blocks of "
                          f"{cap.block_size_tokens} tokens the memory holds at gpu_memory_utilization = "
                          f"{eng.gpu_memory_utilization:g} (n_blocks lowers the computed capacity)")
    limit = op.target.max_context or 0
    if eng.max_model_len is not None and limit and eng.max_model_len > limit:
        raise field_error(where, "max_model_len", eng.max_model_len, f"at most {limit}: the context the target "
                          f"{op.target.id!r} holds")
    swap_blocks = int(eng.swap_space_gib * 2**30 // cap.bytes_per_block)
    swap_s = cap.bytes_per_block / (eng.swap_bandwidth_gb_s * 1e9)
    try:
        return EngineConfig(n_blocks=eng.n_blocks if eng.n_blocks is not None else cap.n_blocks,
                            block_size_tokens=cap.block_size_tokens,
                            max_num_seqs=eng.max_num_seqs if max_num_seqs is None else max_num_seqs,
                            max_num_batched_tokens=eng.max_num_batched_tokens, chunked_prefill=eng.chunked_prefill,
                            mixed_prefill=eng.mixed_prefill if mixed_prefill is None else mixed_prefill,
                            watermark_frac=eng.watermark_frac,
                            max_model_len=eng.max_model_len if eng.max_model_len is not None else limit,
                            acceptance_window_steps=eng.acceptance_window_steps, preemption_mode=eng.preemption_mode,
                            swap_space_blocks=swap_blocks, swap_s_per_block=swap_s, scheduling=eng.scheduling,
                            prefix_caching=eng.prefix_caching, drafter_catchup=eng.drafter_catchup)
    except SpecError as exc:
        raise SpecError(f"scenario {op.name!r} {exc}") from None


def build_fleet(op: OperatingPoint, cap: KVCapacity, fl: FleetTable | None = None) -> FleetSpec:
    """The [fleet] table: replicas, layout, router, and the KV handoff of a disaggregated layout
    (each device's shard of the prompt's cache over the hardware's interconnect unless given)."""
    fl = fl if fl is not None else tables(op).fleet
    router = RouterConfig(kind=fl.router, cache_threshold=fl.cache_threshold,
                          balance_abs_threshold=fl.balance_abs_threshold, balance_rel_threshold=fl.balance_rel_threshold)
    per_token = latency = 0.0
    if fl.layout == "disaggregated":
        bw = fl.kv_transfer_gb_s * 1e9 if fl.kv_transfer_gb_s is not None else op.hardware.interconnect_bandwidth_bytes_per_s
        if not bw > 0:
            raise SpecError(f"{fl.where}: hardware {op.hardware.id!r} gives no interconnect bandwidth for the KV handoff: "
                            f"set kv_transfer_gb_s")
        latency = fl.kv_transfer_latency_us * 1e-6 if fl.kv_transfer_latency_us is not None else \
            op.hardware.interconnect_latency_s
        # bytes per token on one device: the block's bytes (target and, when it has one, the drafter's
        # cache) or the target's alone when the prefill pool does not run the drafter
        dep = op.deployment
        target_only = float(kv_bytes_per_device(op.target, batch_size=1, context_len=1, tp=dep.tp)) / (dep.memory_split // dep.tp)
        per_tok_bytes = cap.bytes_per_block / cap.block_size_tokens if fl.prefill_runs_drafter else target_only
        per_token = per_tok_bytes / bw
    return FleetSpec(layout=fl.layout, n_replicas=fl.n_replicas, n_prefill=fl.n_prefill, router=router,
                     kv_transfer_s_per_token=per_token, kv_transfer_latency_s=latency,
                     prefill_runs_drafter=fl.prefill_runs_drafter)


def build_serving(op: OperatingPoint, *, seed: int = 0, exact_cost: bool = False) -> ServingSetup:
    """The operating point's serving run: capacity, cost, workload, policies, SLO."""
    where = f"scenario {op.name!r}"
    if not C.is_int(seed) or seed < 0:
        raise SpecError(f"--seed {seed!r}: expected an integer >= 0")
    if op.speculative and not op.drafter.family.serving:
        modelled = [m for m, f in FAMILIES.items() if f.serving]
        raise SpecError(f"{where}: field 'method' = {op.method!r}: the serving simulator models none, "
                        f"{', '.join(modelled)} (Lookahead's verify width is not a K)")
    t = tables(op)
    eng = t.engine
    cap = kv_capacity_for(op, gpu_memory_utilization=eng.gpu_memory_utilization, block_size_tokens=eng.block_size,
                          activation_reserve_bytes=eng.activation_reserve_gb * 1e9)
    limit, limit_note = running_limit(op, eng)
    mixed, mixed_note = prefill_mixing(op, eng)
    config = engine_config(op, eng, cap, max_num_seqs=limit, mixed_prefill=mixed)
    plain_config = config if limit == eng.max_num_seqs else engine_config(op, eng, cap, mixed_prefill=mixed)
    cost = ServingCost(op, exact=exact_cost)
    wt = t.workload if t.workload is not None else WorkloadTable.from_table({}, where=f"{where} [workload]")
    workload, kind, extra = build_workload(op, wt, seed=seed)
    check_run_size(workload, where=wt.where)
    if config.prefix_caching and not workload.has_prefixes:
        raise SpecError(f"{where} [engine]: prefix_caching = true needs a workload with prefix structure (the "
                        f"Mooncake trace's hash_ids, or a plain CSV with a session_id column); "
                        f"{workload.source!r} has none")
    if config.prefix_caching and workload.hash_block_tokens % config.block_size_tokens:
        raise SpecError(f"{where} [engine]: prefix_caching: the workload's hashed blocks of {workload.hash_block_tokens} "
                        f"tokens must be a whole number of KV blocks (block_size = {config.block_size_tokens})")
    fleet = build_fleet(op, cap, t.fleet)
    drafter_cache = "none"
    if op.speculative:
        work = op.work
        if work.cache_model is not None and work.drafts_prompt:
            drafter_cache = "refeed" if work.refeeds_accepted else "keep"
    if t.policies is not None:
        policies = {p.name: policy_from_table(p) for p in t.policies}
    else:
        policies = {"never": Never()}
        if op.speculative:
            policies[f"static_k{op.k}"] = StaticK(k=op.k)
    if not policies:
        raise SpecError(f"{where} [policies]: an empty table: expected at least one policy, or no [policies] table "
                        f"(then never and static_k{op.k})")
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
    slo = SLO(**t.slo.given())
    rates = wt.rates
    return ServingSetup(point=op, workload=workload, workload_kind=kind, config=config, capacity=cap, cost=cost,
                        policies=policies, slo=slo, rates=rates, seed=seed, synthetic=extra, fleet=fleet,
                        drafter_cache=drafter_cache, plain_config=plain_config,
                        notes=tuple(n for n in (limit_note, mixed_note) if n))


def check_run_size(workload: wl.Workload, *, where: str) -> int:
    """The output tokens one run of `workload` simulates; refused past MAX_SIMULATED_TOKENS (a run that
    cannot end in reasonable time)."""
    tokens = int(workload.output_tokens.sum())
    if tokens > MAX_SIMULATED_TOKENS:
        raise SpecError(f"{where}: {workload.n_requests:,} requests of {tokens:,} output tokens in all: a run would take "
                        f"about {tokens / SIMULATED_TOKENS_PER_S / 3600:.3g} hours (at {SIMULATED_TOKENS_PER_S:.2g} "
                        f"simulated tokens/s); expected at most {MAX_SIMULATED_TOKENS:.0e} output tokens a run: fewer "
                        f"requests or shorter outputs")
    return tokens


def workload_mix(op: OperatingPoint, *, seed: int = 0) -> tuple[WorkloadMix, int] | None:
    """The point's workload mix and the largest batch its KV cache holds while speculating, or None
    when the scenario has no [workload] (the serving view of the switch-off point)."""
    if tables(op).workload is None:
        return None
    setup = build_serving(op, seed=seed)
    return setup.mix(), setup.max_batch_speculative


__all__ = ["ServingSetup", "build_serving", "build_workload", "build_fleet", "engine_config", "running_limit",
           "check_run_size", "workload_mix", "resolve_data_path", "tables", "WORKLOAD_KEYS", "ENGINE_KEYS", "FLEET_KEYS", "SLO_KEYS",
           "MIN_RATE_PER_S", "MAX_RATE_PER_S", "MAX_SYNTHETIC_REQUESTS", "DEFAULT_SWAP_SPACE_GIB",
           "DEFAULT_SWAP_BANDWIDTH_GB_S", "MAX_SIMULATED_TOKENS", "SIMULATED_TOKENS_PER_S"]
