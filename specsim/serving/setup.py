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
from typing import Callable

import numpy as np

from ..errors import EmptyResultError, SpecError, reject_unknown_keys
from ..specs.data import data_path
from ..speculation.acceptance import shaped_conditional
from ..speculation.families import FAMILIES
from ..speculation.operating_point import OperatingPoint
from ..speculation.switch_off import WorkloadMix
from . import workloads as wl
from ..cost.roofline import kv_bytes_per_device
from .cost import ServingCost
from .config import EngineConfig
from .fleet import FleetSpec
from .kv_cache import KVCapacity, kv_capacity_for
from .router import RouterConfig
from .metrics import SLO
from .policies import Never, StaticK, policy_from_dict

WORKLOAD_KEYS = {"kind", "trace", "format", "window_s", "time_scale", "rates", "n_requests", "rate_per_s", "cv",
                 "n_users", "think_time_s", "prompt", "output", "lengths_from", "jitter_s", "priority_fracs",
                 "hash_block_tokens"}
ENGINE_KEYS = {"max_num_seqs", "max_num_batched_tokens", "chunked_prefill", "block_size", "gpu_memory_utilization",
               "watermark_frac", "max_model_len", "acceptance_window_steps", "activation_reserve_gb", "n_blocks",
               "preemption_mode", "swap_space_gib", "swap_bandwidth_gb_s", "scheduling", "prefix_caching",
               "drafter_catchup"}
FLEET_KEYS = {"n_replicas", "layout", "n_prefill", "router", "cache_threshold", "balance_abs_threshold",
              "balance_rel_threshold", "kv_transfer_gb_s", "kv_transfer_latency_us", "prefill_runs_drafter"}
SLO_KEYS = {"ttft_s", "tpot_s"}
# which [workload] keys each kind reads ("kind" lists the kinds)
_KIND_KEYS = {"kind": ("trace", "poisson", "gamma", "closed_loop"),
              "trace": ("trace",), "format": ("trace",), "window_s": ("trace",), "time_scale": ("trace",),
              "jitter_s": ("trace",), "hash_block_tokens": ("trace",),
              "n_requests": ("poisson", "gamma", "closed_loop"), "prompt": ("poisson", "gamma", "closed_loop"),
              "output": ("poisson", "gamma", "closed_loop"), "lengths_from": ("poisson", "gamma", "closed_loop"),
              "rate_per_s": ("poisson", "gamma"), "cv": ("gamma",), "n_users": ("closed_loop",),
              "think_time_s": ("closed_loop",)}
_BOOL_ENGINE = ("chunked_prefill", "prefix_caching", "drafter_catchup")
_INT_ENGINE = ("max_num_seqs", "max_num_batched_tokens", "block_size", "max_model_len", "acceptance_window_steps",
               "n_blocks")
_FLOAT_ENGINE = ("gpu_memory_utilization", "watermark_frac", "activation_reserve_gb", "swap_space_gib",
                 "swap_bandwidth_gb_s")
# Bounds that keep the engine's per-sequence arrays and the synthetic workload's arrays allocatable;
# values past them are input mistakes, not deployments (vLLM defaults max_num_seqs to 256 or 1024)
# (vLLM's KV blocks hold 1 to 256 tokens: CacheConfig block_size choices; 4096 leaves room for any paging)
_MAX_ENGINE = {"max_num_seqs": 65536, "block_size": 4096}
MAX_SYNTHETIC_REQUESTS = 10_000_000
# The slowest arrival rate a run takes (one request per ~12 days): far slower rates put arrival times
# where float seconds cannot resolve a millisecond, and every latency reads 0
MIN_RATE_PER_S = 1e-6
# vLLM's default CPU swap space per GPU (EngineArgs swap_space = 4, in GiB)
DEFAULT_SWAP_SPACE_GIB = 4.0
# Host link of one device: PCIe 5.0 x16, 32 GT/s per lane with 128b/130b encoding = 63.0 GB/s per
# direction (PCI-SIG, PCI Express Base Specification 5.0). ESTIMATE of what a swap copy attains: the
# hardware profiles carry no host-link figure; set swap_bandwidth_gb_s for a measured one.
DEFAULT_SWAP_BANDWIDTH_GB_S = 32 * 16 * 128 / 130 / 8


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

    @property
    def tree_size(self) -> int:
        return self.point.tree_size if self.point.is_tree else 0

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


def _positive_int(where: str, key: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise SpecError(f"{where}: field {key!r} = {v!r}: expected an integer >= 1")
    return v


def build_workload(op: OperatingPoint, raw: dict, *, seed: int) -> tuple[wl.Workload, str, dict]:
    """The [workload] table as a Workload (with its priority classes when it gives them)."""
    w, kind, extra = _build_workload(op, raw, seed=seed)
    if "priority_fracs" in raw:
        fr = raw["priority_fracs"]
        where = f"scenario {op.name!r} [workload]"
        if not (isinstance(fr, list) and fr and all(not isinstance(x, bool) and isinstance(x, (int, float)) for x in fr)):
            raise SpecError(f"{where}: field 'priority_fracs' = {fr!r}: expected a list of fractions summing to 1")
        rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(4)[3])  # its own stream
        try:
            w = w.with_priorities(fr, rng)
        except SpecError as exc:
            raise SpecError(f"{where}: {exc}") from None
    return w, kind, extra


def _build_workload(op: OperatingPoint, raw: dict, *, seed: int) -> tuple[wl.Workload, str, dict]:
    where = f"scenario {op.name!r} [workload]"
    reject_unknown_keys(where, raw, WORKLOAD_KEYS)
    kind = raw.get("kind", "trace" if "trace" in raw else "poisson")
    # a key of another kind of workload would silently not apply: refused, naming the kinds it is for
    for key, kinds in _KIND_KEYS.items():
        if key in raw and kind in _KIND_KEYS["kind"] and kind not in kinds:
            raise SpecError(f"{where}: field {key!r} applies to kind = {' or '.join(repr(k) for k in kinds)}, "
                            f"not to kind = {kind!r}")
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
        elif fmt == "plain" and "hash_block_tokens" in raw:
            w = wl.read_plain(path, hash_block_tokens=_positive_int(where, "hash_block_tokens", raw["hash_block_tokens"]))
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
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SYNTHETIC_REQUESTS:
        raise SpecError(f"{where}: field 'n_requests' = {n!r}: expected an integer in [1, {MAX_SYNTHETIC_REQUESTS}]")
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
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not (np.isfinite(rate) and rate >= MIN_RATE_PER_S):
        raise SpecError(f"{where}: field 'rate_per_s' = {rate!r}: expected an arrival rate >= {MIN_RATE_PER_S:g} "
                        f"requests/s")
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
        if key in _MAX_ENGINE and key in eng and eng[key] > _MAX_ENGINE[key]:
            why = {"block_size": "tokens a KV block holds"}.get(key, "the engine holds per-sequence arrays of this length")
            raise SpecError(f"{where}: field {key!r} = {eng[key]!r}: expected at most {_MAX_ENGINE[key]} ({why})")
    for key in _FLOAT_ENGINE:
        if key in eng and (isinstance(eng[key], bool) or not isinstance(eng[key], (int, float))
                           or not np.isfinite(eng[key])):
            raise SpecError(f"{where}: field {key!r} = {eng[key]!r}: expected a number")
    if "activation_reserve_gb" in eng and eng["activation_reserve_gb"] < 0:
        raise SpecError(f"{where}: field 'activation_reserve_gb' = {eng['activation_reserve_gb']!r}: expected >= 0")
    if "swap_space_gib" in eng and eng["swap_space_gib"] < 0:
        raise SpecError(f"{where}: field 'swap_space_gib' = {eng['swap_space_gib']!r}: expected >= 0 (GiB per device)")
    if "swap_bandwidth_gb_s" in eng and not eng["swap_bandwidth_gb_s"] > 0:
        raise SpecError(f"{where}: field 'swap_bandwidth_gb_s' = {eng['swap_bandwidth_gb_s']!r}: expected > 0 (GB/s)")
    for key in ("preemption_mode", "scheduling"):
        if key in eng and not isinstance(eng[key], str):
            raise SpecError(f"{where}: field {key!r} = {eng[key]!r}: expected a string")
    return eng


def build_fleet(op: OperatingPoint, cap: KVCapacity) -> FleetSpec:
    """The [fleet] table: replicas, layout, router, and the KV handoff of a disaggregated layout
    (each device's shard of the prompt's cache over the hardware's interconnect unless given)."""
    raw = dict(op.section("fleet"))
    where = f"scenario {op.name!r} [fleet]"
    reject_unknown_keys(where, raw, FLEET_KEYS)
    for key in ("cache_threshold", "balance_rel_threshold", "kv_transfer_gb_s", "kv_transfer_latency_us"):
        v = raw.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v < 0):
            raise SpecError(f"{where}: field {key!r} = {v!r}: expected a number >= 0")
    for key in ("n_replicas", "n_prefill", "balance_abs_threshold"):
        v = raw.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise SpecError(f"{where}: field {key!r} = {v!r}: expected an integer")
    if "prefill_runs_drafter" in raw and not isinstance(raw["prefill_runs_drafter"], bool):
        raise SpecError(f"{where}: field 'prefill_runs_drafter' = {raw['prefill_runs_drafter']!r}: expected true or false")
    router = RouterConfig(kind=raw.get("router", "least_outstanding"),
                          cache_threshold=float(raw.get("cache_threshold", 0.3)),
                          balance_abs_threshold=raw.get("balance_abs_threshold", 64),
                          balance_rel_threshold=float(raw.get("balance_rel_threshold", 1.5)))
    layout = raw.get("layout", "colocated")
    runs_drafter = raw.get("prefill_runs_drafter", True)
    per_token = 0.0
    latency = 0.0
    if layout == "disaggregated":
        bw = raw.get("kv_transfer_gb_s")
        bw = float(bw) * 1e9 if bw is not None else op.hardware.interconnect_bandwidth_bytes_per_s
        if not bw > 0:
            raise SpecError(f"{where}: hardware {op.hardware.id!r} gives no interconnect bandwidth for the KV handoff: "
                            f"set kv_transfer_gb_s")
        latency = (float(raw["kv_transfer_latency_us"]) * 1e-6 if "kv_transfer_latency_us" in raw
                   else op.hardware.interconnect_latency_s)
        # bytes per token on one device: the block's bytes (target and, when it has one, the drafter's
        # cache) or the target's alone when the prefill pool does not run the drafter
        dep = op.deployment
        target_only = float(kv_bytes_per_device(op.target, batch_size=1, context_len=1, tp=dep.tp)) / (dep.memory_split // dep.tp)
        per_tok_bytes = cap.bytes_per_block / cap.block_size_tokens if runs_drafter else target_only
        per_token = per_tok_bytes / bw
    return FleetSpec(layout=layout, n_replicas=raw.get("n_replicas", 1), n_prefill=raw.get("n_prefill", 0),
                     router=router, kv_transfer_s_per_token=per_token, kv_transfer_latency_s=latency,
                     prefill_runs_drafter=runs_drafter)


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
                                  "max_model_len", "acceptance_window_steps", "preemption_mode", "scheduling",
                                  "prefix_caching", "drafter_catchup") if k in eng}
    n_blocks = eng.get("n_blocks", cap.n_blocks)
    swap_blocks = int(float(eng.get("swap_space_gib", DEFAULT_SWAP_SPACE_GIB)) * 2**30 // cap.bytes_per_block)
    swap_s = cap.bytes_per_block / (float(eng.get("swap_bandwidth_gb_s", DEFAULT_SWAP_BANDWIDTH_GB_S)) * 1e9)
    try:
        config = EngineConfig(n_blocks=n_blocks, block_size_tokens=cap.block_size_tokens,
                              max_model_len=kwargs.pop("max_model_len", op.target.max_context or 0),
                              swap_space_blocks=swap_blocks, swap_s_per_block=swap_s, **kwargs)
    except SpecError as exc:
        raise SpecError(f"{where} {exc}") from None
    cost = ServingCost(op, exact=exact_cost)
    raw_w = dict(op.section("workload"))
    workload, kind, extra = build_workload(op, raw_w, seed=seed)
    if config.prefix_caching and not workload.has_prefixes:
        raise SpecError(f"{where} [engine]: prefix_caching = true needs a workload with prefix structure (the "
                        f"Mooncake trace's hash_ids, or a plain CSV with a session_id column); "
                        f"{workload.source!r} has none")
    if config.prefix_caching and workload.hash_block_tokens % config.block_size_tokens:
        raise SpecError(f"{where} [engine]: prefix_caching: the workload's hashed blocks of {workload.hash_block_tokens} "
                        f"tokens must be a whole number of KV blocks (block_size = {config.block_size_tokens})")
    fleet = build_fleet(op, cap)
    drafter_cache = "none"
    if op.speculative:
        work = op.work
        if work.cache_model is not None and work.drafts_prompt:
            drafter_cache = "refeed" if work.refeeds_accepted else "keep"
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
                                              and np.isfinite(r) and r >= MIN_RATE_PER_S for r in rates):
        raise SpecError(f"{where} [workload]: field 'rates' = {rates!r}: expected a list of arrival rates >= "
                        f"{MIN_RATE_PER_S:g} requests/s")
    return ServingSetup(point=op, workload=workload, workload_kind=kind, config=config, capacity=cap, cost=cost,
                        policies=policies, slo=slo, rates=tuple(float(r) for r in rates), seed=seed, synthetic=extra,
                        fleet=fleet, drafter_cache=drafter_cache)


def workload_mix(op: OperatingPoint, *, seed: int = 0) -> tuple[WorkloadMix, int] | None:
    """The point's workload mix and the largest batch its KV cache holds while speculating, or None
    when the scenario has no [workload] (the serving view of the switch-off point)."""
    if not op.section("workload"):
        return None
    setup = build_serving(op, seed=seed)
    return setup.mix(), setup.max_batch_speculative


__all__ = ["ServingSetup", "build_serving", "build_workload", "build_fleet", "workload_mix", "resolve_data_path",
           "WORKLOAD_KEYS", "ENGINE_KEYS", "FLEET_KEYS", "SLO_KEYS"]
