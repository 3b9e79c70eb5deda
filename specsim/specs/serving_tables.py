"""A scenario's serving tables as frozen specs: `[workload]`, `[engine]`, `[fleet]`, `[policies]`, `[slo]`.

Each table is checked when the scenario loads (`specs.scenario`), key by key with `specs.checks`,
whatever command reads it: a typo in `[engine]` is refused by `predict` as it is by `simulate`. The
serving simulator (`serving.setup`) reads these specs, never the raw tables. What needs the
catalogs (the target's maximum context, the KV capacity the memory holds, the tree the point
resolves to) is checked where the point is wired into a serving run. Bounds below that are not a
rule of the system being modelled are the simulator's: each says why.

Units as the tables write them (GB/s, GiB, µs, seconds); `serving.setup` converts them once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields as dc_fields
from functools import partial
from pathlib import PurePath
from types import MappingProxyType
from typing import Mapping

from ..errors import SpecError, field_error
from . import checks as C

# ---- [workload] -----------------------------------------------------------------------------------

WORKLOAD_KINDS = ("trace", "poisson", "gamma", "closed_loop")
TRACE_FORMATS = ("azure", "mooncake", "plain")
LENGTH_KINDS = ("fixed", "uniform", "lognormal")
MAX_SYNTHETIC_REQUESTS = 10_000_000
# The slowest arrival rate a run takes (one request per ~12 days): far slower rates put arrival times
# where float seconds cannot resolve a millisecond, and every latency reads 0
MIN_RATE_PER_S = 1e-6
# The fastest: arrivals less than a microsecond apart are one burst to an engine whose iterations
# take microseconds to milliseconds; no fleet serves a million requests a second
MAX_RATE_PER_S = 1e6
# Gamma inter-arrivals: shape 1/cv² from 10^-6 to 10^6 (numpy draws both; past them the shape
# under- or overflows a double and the gaps are 0 or NaN)
CV_RANGE = (1e-3, 1e3)
# Replay speed: a trace replayed a million times faster or slower is no longer the trace
TIME_SCALE_RANGE = (1e-6, 1e6)
MAX_ARRIVAL_S = 1e10  # about 317 years: Unix times in seconds fit; a double still resolves microseconds there
MAX_JITTER_S = 3600.0  # Mooncake's timestamps are quantised to about 3 s; an hour is no quantum
MAX_THINK_TIME_S = 1e6
MAX_SIGMA = 10.0  # a lognormal σ of 10 spreads lengths over e^±20: no trace is that wide
MAX_LOG_TOKENS = math.log(C.INT32_MAX)  # μ past it puts the median length past 2^31 tokens
MAX_PRIORITY_CLASSES = 16

# which [workload] keys each kind reads ("kind" lists the kinds)
KIND_KEYS = {"trace": ("trace",), "format": ("trace",), "window_s": ("trace",), "time_scale": ("trace",),
             "jitter_s": ("trace",), "hash_block_tokens": ("trace",),
             "n_requests": ("poisson", "gamma", "closed_loop"), "prompt": ("poisson", "gamma", "closed_loop"),
             "output": ("poisson", "gamma", "closed_loop"), "lengths_from": ("poisson", "gamma", "closed_loop"),
             "rate_per_s": ("poisson", "gamma"), "cv": ("gamma",), "n_users": ("closed_loop",),
             "think_time_s": ("closed_loop",), "rates": ("trace", "poisson", "gamma")}
WORKLOAD_KEYS = ("kind", *KIND_KEYS, "priority_fracs")


@dataclass(frozen=True, slots=True, kw_only=True)
class LengthsTable:
    """A token-length distribution as `prompt = {...}` / `output = {...}` write it: `fixed` (tokens),
    `uniform` (min..max inclusive) or `lognormal` (mu and sigma of log tokens, or mean_tokens and
    sigma; draws rounded and clipped to [min, max], default 1..2^30)."""

    kind: str
    tokens: int | None = None
    min: int | None = None
    max: int | None = None
    mu: float | None = None
    sigma: float | None = None
    mean_tokens: float | None = None
    where: str = field(default="lengths", repr=False, compare=False)

    KEYS = {"fixed": ("tokens",), "uniform": ("min", "max"), "lognormal": ("mu", "sigma", "mean_tokens", "min", "max")}

    def __post_init__(self) -> None:
        w = self.where
        C.choice(w, "kind", self.kind, LENGTH_KINDS)
        given = {f.name for f in dc_fields(self) if f.name not in ("kind", "where") and getattr(self, f.name) is not None}
        for key in sorted(given - set(self.KEYS[self.kind])):
            raise field_error(w, key, getattr(self, key), f"absent for kind = {self.kind!r} (it reads "
                              f"{', '.join(self.KEYS[self.kind])})")
        tokens = partial(C.integer, w, lo=1, unit="tokens")
        if self.kind == "fixed":
            if self.tokens is None:
                raise field_error(w, "tokens", None, "a number of tokens for kind = 'fixed' (tokens = 128)")
            tokens("tokens", self.tokens)
        for key in ("min", "max"):
            if getattr(self, key) is not None:
                tokens(key, getattr(self, key))
        if self.kind == "uniform" and (self.min is None or self.max is None):
            raise field_error(w, "min" if self.min is None else "max", None,
                              "both ends for kind = 'uniform' (min = 10, max = 500)")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise field_error(w, "max", self.max, f"at least min = {self.min}")
        if self.kind == "lognormal":
            if self.sigma is None or (self.mu is None) == (self.mean_tokens is None):
                raise field_error(w, "sigma" if self.sigma is None else "mu", self.sigma if self.sigma is None else self.mu,
                                  "sigma and one of mu (mean of log tokens) or mean_tokens for kind = 'lognormal'")
            C.number(w, "sigma", self.sigma, lo=0.0, hi=MAX_SIGMA, unit="standard deviation of log tokens")
            if self.mu is not None:
                C.number(w, "mu", self.mu, lo=0.0, hi=MAX_LOG_TOKENS, unit="mean of log tokens")
            else:
                C.number(w, "mean_tokens", self.mean_tokens, lo=1.0, hi=float(C.INT32_MAX), unit="tokens")

    @property
    def expected_tokens(self) -> float:
        """The mean length drawn (a lognormal's exp(μ + σ²/2), capped at its max): for sizing a run."""
        if self.kind == "fixed":
            return float(self.tokens)
        if self.kind == "uniform":
            return (self.min + self.max) / 2.0
        mean = math.exp(min(self.log_mean + self.sigma ** 2 / 2.0, 700.0))
        return min(mean, float(self.max if self.max is not None else 1 << 30))

    @property
    def log_mean(self) -> float | None:
        """μ: given, or from mean_tokens = exp(μ + σ²/2)."""
        if self.kind != "lognormal":
            return None
        return self.mu if self.mu is not None else math.log(self.mean_tokens) - self.sigma ** 2 / 2.0

    @classmethod
    def from_table(cls, raw, *, where: str) -> "LengthsTable":
        raw = C.fields(where, raw, ("kind", "tokens", "min", "max", "mu", "sigma", "mean_tokens"),
                       what='length distribution like {kind = "fixed", tokens = 128}')
        if "kind" not in raw:
            raise field_error(where, "kind", None, f"one of {', '.join(LENGTH_KINDS)}")
        return cls(**raw, where=where)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadTable:
    """`[workload]`: who arrives when (see scenarios/README.md). `given` names the keys the table set."""

    kind: str = "poisson"
    trace: str | None = None
    format: str | None = None
    window_s: tuple | None = None
    time_scale: float | None = None
    jitter_s: float = 3.0
    hash_block_tokens: int | None = None
    n_requests: int = 1000
    rate_per_s: float = 1.0
    cv: float = 1.0
    n_users: int = 1
    think_time_s: float = 0.0
    prompt: LengthsTable | None = None
    output: LengthsTable | None = None
    lengths_from: str | None = None
    rates: tuple = ()
    priority_fracs: tuple | None = None
    given: frozenset = frozenset()
    where: str = field(default="[workload]", repr=False, compare=False)

    def __post_init__(self) -> None:
        w = self.where
        C.choice(w, "kind", self.kind, WORKLOAD_KINDS)
        for key, kinds in KIND_KEYS.items():  # a key of another kind of workload would silently not apply
            if key in self.given and self.kind not in kinds:
                raise SpecError(f"{w}: field {key!r} applies to kind = {' or '.join(repr(k) for k in kinds)}, "
                                f"not to kind = {self.kind!r}")
        if self.kind == "trace":
            self._check_trace()
        else:
            self._check_synthetic()
        rates = C.floats(w, "rates", list(self.rates), lo=MIN_RATE_PER_S, hi=MAX_RATE_PER_S, unit="requests/s",
                         min_len=0, distinct=True)
        object.__setattr__(self, "rates", rates)
        if self.priority_fracs is not None:
            fr = C.floats(w, "priority_fracs", list(self.priority_fracs), lo=0.0, hi=1.0, max_len=MAX_PRIORITY_CLASSES,
                          unit="fractions of the requests in classes 0, 1, ...")
            if abs(sum(fr) - 1.0) > 1e-9:
                raise field_error(w, "priority_fracs", list(fr), "fractions summing to 1, one per priority class "
                                  "(class 0 served first)")
            object.__setattr__(self, "priority_fracs", fr)

    def _check_trace(self) -> None:
        w = self.where
        if self.trace is None:
            raise field_error(w, "trace", None, "a trace path for kind = 'trace'")
        C.text(w, "trace", self.trace, what="a trace path (relative to the data folder, or absolute)")
        if self.format is not None:
            C.choice(w, "format", self.format, TRACE_FORMATS)
        if self.window_s is not None:
            win = self.window_s
            if not (isinstance(win, (list, tuple)) and len(win) == 2 and all(C.is_number(x) for x in win)
                    and 0 <= win[0] < win[1] <= MAX_ARRIVAL_S):
                raise field_error(w, "window_s", list(win) if isinstance(win, tuple) else win,
                                  f"[start, end] in seconds, 0 <= start < end <= {MAX_ARRIVAL_S:g}")
            object.__setattr__(self, "window_s", (float(win[0]), float(win[1])))
        if self.time_scale is not None:
            C.number(w, "time_scale", self.time_scale, lo=TIME_SCALE_RANGE[0], hi=TIME_SCALE_RANGE[1],
                     unit="replay speed: 2 replays twice as fast")
        mooncake = self.format == "mooncake" or (self.format is None and PurePath(self.trace).suffix in (".jsonl", ".json"))
        if "jitter_s" in self.given:
            if not mooncake:
                raise field_error(w, "jitter_s", self.jitter_s, "absent: only a Mooncake trace (format = 'mooncake', "
                                  "a .jsonl file) has quantised arrivals to spread")
            C.number(w, "jitter_s", self.jitter_s, lo=0.0, hi=MAX_JITTER_S, unit="seconds")
        if self.hash_block_tokens is not None:
            if self.format != "plain":
                raise field_error(w, "hash_block_tokens", self.hash_block_tokens, "absent unless format = 'plain' (a "
                                  "plain CSV with a session_id column: tokens per hashed block)")
            C.integer(w, "hash_block_tokens", self.hash_block_tokens, lo=1, hi=1 << 20, unit="tokens per hashed block")

    def _check_synthetic(self) -> None:
        w = self.where
        C.integer(w, "n_requests", self.n_requests, lo=1, hi=MAX_SYNTHETIC_REQUESTS, unit="requests")
        C.number(w, "rate_per_s", self.rate_per_s, lo=MIN_RATE_PER_S, hi=MAX_RATE_PER_S, unit="requests/s")
        C.number(w, "cv", self.cv, lo=CV_RANGE[0], hi=CV_RANGE[1], unit="coefficient of variation of the gaps")
        C.integer(w, "n_users", self.n_users, lo=1, hi=self.n_requests if C.is_int(self.n_requests) else None,
                  unit="users, at most n_requests")
        C.number(w, "think_time_s", self.think_time_s, lo=0.0, hi=MAX_THINK_TIME_S, unit="seconds")
        if self.lengths_from is not None:
            C.text(w, "lengths_from", self.lengths_from, what="a trace path whose lengths are fitted")
            for key in ("prompt", "output"):
                if getattr(self, key) is not None:
                    raise field_error(w, key, {"kind": getattr(self, key).kind}, "absent beside lengths_from (the "
                                      "lengths come from the trace)")
        else:
            for key in ("prompt", "output"):
                if getattr(self, key) is None:
                    raise SpecError(f"{w}: field {key!r} missing: expected a length distribution like "
                                    f"{{kind = \"fixed\", tokens = 128}} (or lengths_from = a trace)")

    @property
    def is_trace(self) -> bool:
        return self.kind == "trace"

    def expected_output_tokens(self) -> float | None:
        """Output tokens one run of a synthetic workload generates on average (None for a trace, or
        lengths fitted to a trace: known once it is read)."""
        if self.is_trace or self.output is None:
            return None
        return self.n_requests * self.output.expected_tokens

    @classmethod
    def from_table(cls, raw, *, where: str) -> "WorkloadTable":
        raw = C.fields(where, raw, WORKLOAD_KEYS)
        kw = dict(raw)
        kw.setdefault("kind", "trace" if "trace" in raw else "poisson")
        for key in ("prompt", "output"):
            if key in kw:
                kw[key] = LengthsTable.from_table(kw[key], where=f"{where} {key}")
        if "rates" in kw and not isinstance(kw["rates"], list):
            raise field_error(where, "rates", kw["rates"], "a list of arrival rates (requests/s)")
        if "priority_fracs" in kw and not isinstance(kw["priority_fracs"], list):
            raise field_error(where, "priority_fracs", kw["priority_fracs"], "a list of fractions summing to 1")
        for key in ("rates", "priority_fracs", "window_s"):
            if isinstance(kw.get(key), list):
                kw[key] = tuple(kw[key])
        return cls(**kw, given=frozenset(raw), where=where)


# ---- [engine] -------------------------------------------------------------------------------------

PREEMPTION_MODES = ("recompute", "swap")
SCHEDULING = ("fcfs", "priority")
# vLLM's default CPU swap space per GPU (EngineArgs swap_space = 4, in GiB)
DEFAULT_SWAP_SPACE_GIB = 4.0
# Host link of one device: PCIe 5.0 x16, 32 GT/s per lane with 128b/130b encoding = 63.0 GB/s per
# direction (PCI-SIG, PCI Express Base Specification 5.0). ESTIMATE of what a swap copy attains: the
# hardware profiles carry no host-link figure; set swap_bandwidth_gb_s for a measured one.
DEFAULT_SWAP_BANDWIDTH_GB_S = 32 * 16 * 128 / 130 / 8
# Bounds that keep the engine's per-sequence arrays allocatable; values past them are input
# mistakes, not deployments (vLLM defaults max_num_seqs to 256 or 1024; its KV blocks hold 1 to
# 256 tokens, CacheConfig's block_size choices: 4096 leaves room for any paging)
MAX_NUM_SEQS = 65536
DEFAULT_MAX_NUM_SEQS = 256  # vLLM's default max_num_seqs (the V1 engine's, without a usage context that raises it)
MAX_BLOCK_SIZE = 4096
MAX_WINDOW_STEPS = 1_000_000  # iterations the acceptance window holds
MAX_MEMORY_GB = 1e6  # a petabyte: more memory than any device or host has
MAX_LINK_GB_S = 1e5  # 100 TB/s: faster than any host or device link (NVLink 5 is 1.8 TB/s)
ENGINE_SWAP_KEYS = ("swap_space_gib", "swap_bandwidth_gb_s")


def _with_given(cls, raw, where: str, keys):
    """A table spec from its raw TOML table, remembering which keys the file gave (a key that applies
    only under a condition is refused when given outside it)."""
    raw = C.fields(where, raw, keys)
    return cls(**raw, given=frozenset(raw), where=where)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineTable:
    """`[engine]`: the scheduler's limits with vLLM's names (see scenarios/README.md). max_model_len
    and n_blocks None: the target's maximum context and the capacity the memory holds."""

    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    mixed_prefill: bool = True
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    watermark_frac: float = 0.01
    max_model_len: int | None = None
    acceptance_window_steps: int = 64
    activation_reserve_gb: float = 0.0
    n_blocks: int | None = None
    preemption_mode: str = "recompute"
    swap_space_gib: float = DEFAULT_SWAP_SPACE_GIB
    swap_bandwidth_gb_s: float = DEFAULT_SWAP_BANDWIDTH_GB_S
    scheduling: str = "fcfs"
    prefix_caching: bool = False
    drafter_catchup: bool = True
    given: frozenset = frozenset()
    where: str = field(default="[engine]", repr=False, compare=False)

    def __post_init__(self) -> None:
        w = self.where
        C.integer(w, "max_num_seqs", self.max_num_seqs, lo=1, hi=MAX_NUM_SEQS, unit="running sequences at most")
        C.integer(w, "max_num_batched_tokens", self.max_num_batched_tokens, lo=1, unit="tokens per iteration")
        C.integer(w, "block_size", self.block_size, lo=1, hi=MAX_BLOCK_SIZE, unit="tokens a KV block holds")
        C.integer(w, "acceptance_window_steps", self.acceptance_window_steps, lo=1, hi=MAX_WINDOW_STEPS,
                  unit="iterations")
        if self.max_model_len is not None:
            C.integer(w, "max_model_len", self.max_model_len, lo=1, unit="tokens of prompt + output")
        if self.n_blocks is not None:
            C.integer(w, "n_blocks", self.n_blocks, lo=1, unit="KV blocks")
        for name in ("chunked_prefill", "mixed_prefill", "prefix_caching", "drafter_catchup"):
            C.boolean(w, name, getattr(self, name))
        C.fraction(w, "gpu_memory_utilization", self.gpu_memory_utilization, lo_open=True)
        C.fraction(w, "watermark_frac", self.watermark_frac, hi_open=True)
        C.number(w, "activation_reserve_gb", self.activation_reserve_gb, lo=0.0, hi=MAX_MEMORY_GB, unit="GB per device")
        C.choice(w, "preemption_mode", self.preemption_mode, PREEMPTION_MODES)
        C.choice(w, "scheduling", self.scheduling, SCHEDULING)
        C.number(w, "swap_space_gib", self.swap_space_gib, lo=0.0, hi=MAX_MEMORY_GB, unit="GiB of host memory per device")
        C.number(w, "swap_bandwidth_gb_s", self.swap_bandwidth_gb_s, lo=0.0, hi=MAX_LINK_GB_S, lo_open=True,
                 unit="GB/s per device")
        if self.preemption_mode != "swap":
            C.absent_unless(w, self, ENGINE_SWAP_KEYS, self.given, "preemption_mode = 'swap' (a recomputed sequence "
                            "swaps nothing)")

    @classmethod
    def from_table(cls, raw, *, where: str) -> "EngineTable":
        return _with_given(cls, raw, where, ENGINE_KEYS)


ENGINE_KEYS = tuple(f.name for f in dc_fields(EngineTable) if f.name not in ("given", "where"))


# ---- [fleet] --------------------------------------------------------------------------------------

LAYOUTS = ("colocated", "disaggregated")
ROUTERS = ("round_robin", "least_outstanding", "prefix_affinity")
# prefix_affinity's defaults: vllm-router v0.1.15 and sglang-gateway v0.3.1 (see serving.router)
DEFAULT_CACHE_THRESHOLD = 0.3
DEFAULT_BALANCE_ABS_THRESHOLD = 64
DEFAULT_BALANCE_REL_THRESHOLD = 1.5
MAX_REPLICAS = 1024  # each replica is an engine of its own in one process
MAX_LATENCY_US = 1e7  # ten seconds per handoff
ROUTER_KEYS = ("cache_threshold", "balance_abs_threshold", "balance_rel_threshold")
HANDOFF_KEYS = ("n_prefill", "kv_transfer_gb_s", "kv_transfer_latency_us", "prefill_runs_drafter")


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetTable:
    """`[fleet]`: replicas, their layout, the router and the KV handoff of a disaggregated layout.
    kv_transfer_gb_s / kv_transfer_latency_us None: the hardware's interconnect."""

    n_replicas: int = 1
    layout: str = "colocated"
    n_prefill: int = 0
    router: str = "least_outstanding"
    cache_threshold: float = DEFAULT_CACHE_THRESHOLD
    balance_abs_threshold: int = DEFAULT_BALANCE_ABS_THRESHOLD
    balance_rel_threshold: float = DEFAULT_BALANCE_REL_THRESHOLD
    kv_transfer_gb_s: float | None = None
    kv_transfer_latency_us: float | None = None
    prefill_runs_drafter: bool = True
    given: frozenset = frozenset()
    where: str = field(default="[fleet]", repr=False, compare=False)

    def __post_init__(self) -> None:
        w = self.where
        C.integer(w, "n_replicas", self.n_replicas, lo=1, hi=MAX_REPLICAS, unit="replicas")
        C.choice(w, "layout", self.layout, LAYOUTS)
        C.choice(w, "router", self.router, ROUTERS)
        C.fraction(w, "cache_threshold", self.cache_threshold)
        C.integer(w, "balance_abs_threshold", self.balance_abs_threshold, lo=0, unit="requests")
        C.number(w, "balance_rel_threshold", self.balance_rel_threshold, lo=1.0, hi=1e6, unit="a ratio")
        C.boolean(w, "prefill_runs_drafter", self.prefill_runs_drafter)
        if self.kv_transfer_gb_s is not None:
            C.number(w, "kv_transfer_gb_s", self.kv_transfer_gb_s, lo=0.0, lo_open=True, hi=MAX_LINK_GB_S,
                     unit="GB/s per device")
        if self.kv_transfer_latency_us is not None:
            C.number(w, "kv_transfer_latency_us", self.kv_transfer_latency_us, lo=0.0, hi=MAX_LATENCY_US, unit="µs")
        if self.layout == "disaggregated":
            C.integer(w, "n_prefill", self.n_prefill, lo=1, hi=max(self.n_replicas - 1, 1),
                      unit="prefill replicas: at least one, and one replica left to decode")
            if self.n_replicas < 2:
                raise field_error(w, "n_replicas", self.n_replicas, "at least 2 for a disaggregated layout (a prefill "
                                  "and a decode replica)")
        else:
            C.absent_unless(w, self, HANDOFF_KEYS, self.given, "layout = 'disaggregated' (only a prefill pool hands "
                            "caches over)")
        if self.router != "prefix_affinity":
            C.absent_unless(w, self, ROUTER_KEYS, self.given, "router = 'prefix_affinity' (the cache-aware router "
                            "reads it)")

    @classmethod
    def from_table(cls, raw, *, where: str) -> "FleetTable":
        return _with_given(cls, raw, where, FLEET_KEYS)


FLEET_KEYS = tuple(f.name for f in dc_fields(FleetTable) if f.name not in ("given", "where"))


# ---- [slo] ----------------------------------------------------------------------------------------

SLO_KEYS = ("ttft_s", "tpot_s")


@dataclass(frozen=True, slots=True, kw_only=True)
class SloTable:
    """`[slo]`: latency targets in seconds for goodput (None: no target; inf says the same)."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    where: str = field(default="[slo]", repr=False, compare=False)

    def __post_init__(self) -> None:
        for key in SLO_KEYS:
            v = getattr(self, key)
            if v is not None:
                object.__setattr__(self, key, C.number(self.where, key, v, lo=0.0, lo_open=True, unit="seconds",
                                                       infinite=True))

    def given(self) -> dict:
        return {k: getattr(self, k) for k in SLO_KEYS if getattr(self, k) is not None}

    @classmethod
    def from_table(cls, raw, *, where: str) -> "SloTable":
        return cls(**C.fields(where, raw, SLO_KEYS), where=where)


# ---- [policies] -----------------------------------------------------------------------------------

MAX_K = 64  # longer drafts than any published method uses; a bound keeps per-iteration work finite
MAX_K_SEARCHED = 16  # goodput_optimal prices every K up to k_max each iteration


def check_bands(where: str, name: str, value, *, max_batch: int | None = None) -> tuple:
    """k_by_batch_band's bands: [[min_batch, k], ...], each end an integer, min_batch >= 1 strictly
    ascending (and at most `max_batch`, the batch limit, when given), k in 0..MAX_K."""
    what = (f"[[min_batch, k], ...]: pairs of integers, min_batch >= 1 strictly ascending"
            + (f" and at most max_num_seqs = {max_batch}" if max_batch is not None else "") + f", k in 0..{MAX_K}")
    if not isinstance(value, (list, tuple)) or not value:
        raise field_error(where, name, value, what)
    bands = []
    for band in value:
        if not (isinstance(band, (list, tuple)) and len(band) == 2 and all(C.is_int(x) for x in band)
                and band[0] >= 1 and 0 <= band[1] <= MAX_K and (max_batch is None or band[0] <= max_batch)):
            raise field_error(where, name, list(band) if isinstance(band, tuple) else band, what)
        bands.append((int(band[0]), int(band[1])))
    if any(b2 <= b1 for (b1, _), (b2, _) in zip(bands, bands[1:])):
        raise field_error(where, name, [list(b) for b in bands], what)
    return tuple(bands)


_K = partial(C.integer, lo=0, hi=MAX_K, unit="draft tokens")
# kind -> {field: (check(where, name, value) -> value, required)}; serving.policies builds the policy
POLICY_FIELDS = {
    "never": {},
    "static": {"k": (_K, True)},
    "disable_by_batch_size": {"k": (_K, True),
                              "threshold": (partial(C.integer, lo=1, unit="running sequences"), True),
                              "sticky": (C.boolean, False)},
    "k_by_batch_band": {"bands": (check_bands, True)},
    "acceptance_off_switch": {"k": (_K, True), "min_acceptance_frac": (C.fraction, True),
                              "min_window_tokens": (partial(C.integer, lo=1, unit="drafted tokens"), False),
                              "probe_every_steps": (partial(C.integer, lo=1, unit="iterations"), False)},
    "goodput_optimal": {"k_max": (partial(C.integer, lo=0, hi=MAX_K_SEARCHED, unit="draft tokens"), True)},
}
POLICY_KINDS = tuple(POLICY_FIELDS)


def check_policy_fields(where: str, kind: str, values: Mapping) -> dict:
    """A policy's fields checked against POLICY_FIELDS (values None are left to the policy's defaults)."""
    rules = POLICY_FIELDS[kind]
    out = {}
    for key, (check, required) in rules.items():
        v = values.get(key)
        if v is None:
            if required:
                raise field_error(where, key, None, f"a value: kind = {kind!r} needs {', '.join(k for k, (_, r) in rules.items() if r)}")
            continue
        out[key] = check(where, key, v)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyTable:
    """One entry of `[policies]`: `<name> = {kind = ..., ...}`. params: the fields given, checked."""

    name: str
    kind: str
    params: Mapping = field(default_factory=dict)
    where: str = field(default="[policies]", repr=False, compare=False)

    def __post_init__(self) -> None:
        C.file_name(self.where, "name", self.name, what="a policy name")
        w = f"{self.where} {self.name}"
        C.choice(w, "kind", self.kind, POLICY_KINDS)
        object.__setattr__(self, "params", MappingProxyType(check_policy_fields(w, self.kind, self.params)))

    @property
    def k_reserved(self) -> int:
        """The speculative slots the policy reserves (its largest K)."""
        p = self.params
        if self.kind == "k_by_batch_band":
            return max(k for _, k in p["bands"])
        return int(p.get("k", p.get("k_max", 0)))

    @classmethod
    def from_table(cls, name: str, raw, *, where: str) -> "PolicyTable":
        if not isinstance(raw, Mapping) or "kind" not in raw:
            raise SpecError(f"{where}: policy {name!r} = {raw!r}: expected a table with a 'kind' "
                            f"(one of {', '.join(POLICY_KINDS)})")
        kind = raw["kind"]
        if kind not in POLICY_FIELDS:
            raise SpecError(f"{where}: policy {name!r}: field 'kind' = {kind!r}: expected one of {', '.join(POLICY_KINDS)}")
        params = {k: v for k, v in raw.items() if k != "kind"}
        for key in params:
            if key not in POLICY_FIELDS[kind]:
                raise SpecError(f"{where}: policy {name!r} ({kind}): unknown key {key!r}; allowed keys: "
                                f"{', '.join(sorted(POLICY_FIELDS[kind])) or 'none but kind'}")
        return cls(name=name, kind=kind, params=params, where=where)


def policies_from_table(raw, *, where: str) -> tuple[PolicyTable, ...]:
    raw = C.table(where, "policies", raw)
    return tuple(PolicyTable.from_table(str(name), v, where=where) for name, v in raw.items())


__all__ = ["WorkloadTable", "LengthsTable", "EngineTable", "FleetTable", "SloTable", "PolicyTable", "POLICY_FIELDS",
           "POLICY_KINDS", "check_policy_fields", "check_bands", "policies_from_table", "WORKLOAD_KEYS", "ENGINE_KEYS",
           "FLEET_KEYS", "SLO_KEYS", "KIND_KEYS", "WORKLOAD_KINDS", "TRACE_FORMATS", "LAYOUTS", "ROUTERS",
           "PREEMPTION_MODES", "SCHEDULING", "MAX_K", "MAX_K_SEARCHED", "MIN_RATE_PER_S", "MAX_RATE_PER_S",
           "MAX_SYNTHETIC_REQUESTS", "DEFAULT_SWAP_SPACE_GIB", "DEFAULT_SWAP_BANDWIDTH_GB_S"]
