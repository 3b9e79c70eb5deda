"""How many replicas (and GPUs) serve a rate within an SLO, with and without speculation, and what a
million output tokens costs.

A fleet of N replicas is the serving simulator's fleet (`serving.fleet.FleetSpec`): N copies of the
scenario's engine (its KV capacity, scheduler and iteration costs as `serving.build_serving` wires
them), colocated, the router sending request i to replica i mod N (round robin), all fed the arrival
stream at the asked rate and judged together: the fleet meets the SLO when at least `attainment` of
all requests (0.9 by default, the attainment target of DistServe, Zhong et al. OSDI 2024, §6) have
TTFT <= slo_ttft_s and TPOT <= slo_tpot_s (a request rejected or unfinished counts as a miss). The
replicas needed is the smallest N that meets it, found by doubling then bisection, so N − 1 was
simulated and missed (N = 1 aside).

With speculation the replicas run the scenario's K with a `disable_by_batch_size` gate at the
analytic switch-off point under the workload (`threshold.recommended_switch_off`, the point
`specsim threshold` prints), or always on when that point says it pays at every batch; without,
they never speculate.

Cost per million output tokens = replicas × devices a replica × USD per device-hour / (rate × mean
output tokens a request × 3600) × 10⁶ — the fleet billed by the hour for the tokens the rate asks
for. The price is the --gpu-hour-usd flag, else DEFAULT_PRICES (cited), else not computed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ..errors import SpecError, field_error
from ..serving import SLO, ServingSetup, build_serving, simulate
from ..serving.fleet import FleetSpec
from ..serving.policies import DisableByBatchSize, Never, StaticK
from ..serving.router import RouterConfig
from ..speculation.operating_point import OperatingPoint
from .gates import truncated
from .progress import ProgressSink, progress_or_null
from .threshold import recommended_switch_off

DEFAULT_ATTAINMENT = 0.9
MAX_REPLICAS = 256
_PRICE_SOURCE = ("mercatus-ai.com/blog/cloud-gpu-pricing (May 2026), on-demand USD per GPU-hour at specialty GPU "
                 "clouds: {range}; the midpoint is taken")
DEFAULT_PRICES = {
    "h100-sxm": (3.00, _PRICE_SOURCE.format(range="H100 SXM5 $2.50–3.50")),
    "h200-sxm": (4.00, _PRICE_SOURCE.format(range="H200 SXM5 $3.50–4.50")),
    "a100-sxm-80gb": (1.30, _PRICE_SOURCE.format(range="A100 80GB $1.10–1.50")),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetRun:
    """N replicas at one rate: the fleet's SLO attainment and latency percentiles over all requests."""

    n_replicas: int
    rate_per_s: float
    n_requests: int
    attainment: float
    meets: bool
    tpot_p50_s: float
    tpot_p99_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    n_rejected: int
    requests: pd.DataFrame = field(repr=False)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("n_replicas", "rate_per_s", "n_requests", "attainment", "meets",
                                              "tpot_p50_s", "tpot_p99_s", "ttft_p50_s", "ttft_p99_s", "n_rejected")}


def fleet_of(setup: ServingSetup, n_replicas: int) -> FleetSpec:
    """N colocated replicas of the setup's engine behind a round-robin router."""
    if isinstance(n_replicas, bool) or not isinstance(n_replicas, (int, np.integer)) or n_replicas < 1:
        raise field_error("fleet", "n_replicas", n_replicas, "an integer >= 1")
    return replace(setup.fleet, layout="colocated", n_replicas=int(n_replicas), n_prefill=0,
                   router=RouterConfig(kind="round_robin"))


def simulate_fleet(setup: ServingSetup, policy, *, rate_per_s: float, n_replicas: int, slo: SLO,
                   attainment: float = DEFAULT_ATTAINMENT) -> FleetRun:
    """N replicas of the setup's engine (round robin) fed the whole stream at the rate."""
    fleet = fleet_of(setup, n_replicas)
    res = simulate(setup.workload_at(rate_per_s), config=setup.config_for(policy), cost=setup.cost, policy=policy,
                   acceptance=setup.acceptance, seed=setup.seed, slo=slo, rate_per_s=rate_per_s,
                   tree_size=setup.tree_size, acceptance_factor=setup.acceptance_factor, fleet=fleet,
                   drafter_cache=setup.drafter_cache, draft_frac=setup.draft_frac)
    req = res.requests
    n = len(req)
    att = float(req["meets_slo"].sum() / n) if n else 0.0

    def pct(col, q):
        x = req[col].to_numpy(dtype=float)
        x = x[np.isfinite(x)]
        return float(np.percentile(x, q)) if x.size else float("nan")

    return FleetRun(n_replicas=int(n_replicas), rate_per_s=float(rate_per_s), n_requests=n, attainment=att,
                    meets=bool(att >= attainment), tpot_p50_s=pct("tpot_s", 50), tpot_p99_s=pct("tpot_s", 99),
                    ttft_p50_s=pct("ttft_s", 50), ttft_p99_s=pct("ttft_s", 99),
                    n_rejected=int((req["status"] == "rejected").sum()), requests=req)


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityAnswer:
    """Replicas needed for one policy: `replicas` (None: not met within max_replicas) and every fleet
    simulated on the way (by replica count)."""

    speculative: bool
    policy: str
    replicas: int | None
    devices_per_replica: int
    runs: dict
    cost_per_million_usd: float | None

    @property
    def gpus(self) -> int | None:
        return None if self.replicas is None else self.replicas * self.devices_per_replica

    @property
    def below(self) -> FleetRun | None:
        """The fleet with one replica fewer (simulated, and missing the SLO), if any."""
        return None if not self.replicas or self.replicas <= 1 else self.runs.get(self.replicas - 1)

    def to_dict(self) -> dict:
        return {"speculative": self.speculative, "policy": self.policy, "replicas": self.replicas, "gpus": self.gpus,
                "devices_per_replica": self.devices_per_replica, "cost_per_million_output_tokens_usd":
                self.cost_per_million_usd, "runs": [r.to_dict() for _, r in sorted(self.runs.items())]}


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityPlan:
    point: OperatingPoint
    rate_per_s: float
    slo: SLO
    attainment: float
    without: CapacityAnswer
    with_speculation: CapacityAnswer | None
    price_usd_per_device_hour: float | None
    price_source: str
    mean_output_tokens: float
    n_requests: int
    n_requests_total: int
    gate: int | None
    notes: tuple = ()

    @property
    def offered_tokens_per_s(self) -> float:
        return self.rate_per_s * self.mean_output_tokens

    def to_dict(self) -> dict:
        return {"scenario": self.point.name, "rate_per_s": self.rate_per_s,
                "slo": {"ttft_s": self.slo.ttft_s, "tpot_s": self.slo.tpot_s}, "attainment_target": self.attainment,
                "hardware": self.point.hardware.id, "price_usd_per_device_hour": self.price_usd_per_device_hour,
                "price_source": self.price_source, "mean_output_tokens": self.mean_output_tokens,
                "offered_output_tokens_per_s": self.offered_tokens_per_s, "n_requests": self.n_requests,
                "n_requests_total": self.n_requests_total, "speculation_gate": self.gate,
                "without_speculation": self.without.to_dict(),
                "with_speculation": None if self.with_speculation is None else self.with_speculation.to_dict(),
                "notes": list(self.notes)}


def cost_per_million(replicas: int | None, devices: int, price: float | None, tokens_per_s: float) -> float | None:
    if replicas is None or price is None or tokens_per_s <= 0:
        return None
    return replicas * devices * price / (tokens_per_s * 3600.0) * 1e6


def replicas_needed(setup: ServingSetup, policy, *, rate_per_s: float, slo: SLO, attainment: float = DEFAULT_ATTAINMENT,
                    max_replicas: int = MAX_REPLICAS, progress: ProgressSink | None = None, label: str = "") -> tuple:
    """(smallest N meeting the SLO or None, {N: FleetRun}) by doubling from 1 then bisection."""
    prog = progress_or_null(progress)
    runs: dict = {}

    def met(n: int) -> bool:
        if n not in runs:
            prog.add(1)
            prog.phase(f"{label}{n} replica{'s' if n > 1 else ''}")
            runs[n] = simulate_fleet(setup, policy, rate_per_s=rate_per_s, n_replicas=n, slo=slo, attainment=attainment)
            prog.step()
        return runs[n].meets

    n = 1
    while not met(n):
        if n >= max_replicas:
            return None, runs
        n = min(2 * n, max_replicas)
    lo, hi = n // 2, n  # lo missed (or is 0), hi met
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if met(mid):
            hi = mid
        else:
            lo = mid
    return hi, runs


def capacity(op: OperatingPoint, *, rate_per_s: float, slo_tpot_s: float | None = None, slo_ttft_s: float | None = None,
             gpu_hour_usd: float | None = None, attainment: float = DEFAULT_ATTAINMENT, n_requests: int | None = None,
             seed: int = 0, max_replicas: int = MAX_REPLICAS, speculation: bool = True,
             progress: ProgressSink | None = None) -> CapacityPlan:
    """Replicas, GPUs and cost per million output tokens at `rate_per_s` (see the module docstring).
    The SLO limits default to the scenario's [slo]; n_requests simulates only the first n requests of
    the workload."""
    where = f"scenario {op.name!r}"
    if not op.section("workload"):
        raise field_error(where, "workload", None, "a [workload] table (capacity simulates the scenario's traffic)")
    if not (isinstance(rate_per_s, (int, float)) and math.isfinite(rate_per_s) and rate_per_s > 0):
        raise SpecError(f"--rate {rate_per_s!r}: expected a positive arrival rate in requests/s")
    if not 0.0 < attainment <= 1.0:
        raise SpecError(f"--attainment {attainment!r}: expected a fraction in (0, 1]")
    if gpu_hour_usd is not None and not (math.isfinite(gpu_hour_usd) and gpu_hour_usd > 0):
        raise SpecError(f"--gpu-hour-usd {gpu_hour_usd!r}: expected a positive price in USD per device-hour")
    prog = progress_or_null(progress)
    setup = build_serving(op, seed=seed)
    total = setup.workload.n_requests
    setup = truncated(setup, n_requests)
    slo = SLO(ttft_s=slo_ttft_s if slo_ttft_s is not None else setup.slo.ttft_s,
              tpot_s=slo_tpot_s if slo_tpot_s is not None else setup.slo.tpot_s)
    if not (math.isfinite(slo.ttft_s) and math.isfinite(slo.tpot_s)):
        raise SpecError(f"{where}: give --slo-tpot and --slo-ttft (the scenario's [slo] does not set both)")
    if setup.workload_kind == "closed_loop":
        raise SpecError(f"{where}: a closed-loop workload has no arrival rate; capacity needs an open workload")
    if gpu_hour_usd is not None:
        price, source = float(gpu_hour_usd), "--gpu-hour-usd"
    elif op.hardware.id in DEFAULT_PRICES:
        price, source = DEFAULT_PRICES[op.hardware.id]
    else:
        price, source = None, f"no default price for {op.hardware.id}: pass --gpu-hour-usd"
    w = setup.workload_at(rate_per_s)
    mean_out = float(np.mean(w.output_tokens))
    devices = op.deployment.n_devices
    tokens_per_s = rate_per_s * mean_out
    notes = []
    if n_requests is not None and n_requests < total:
        notes.append(f"simulated the first {n_requests} of the workload's {total} requests (--requests)")
    n, runs = replicas_needed(setup, Never(name="never"), rate_per_s=rate_per_s, slo=slo, attainment=attainment,
                              max_replicas=max_replicas, progress=prog, label="without speculation: ")
    without = CapacityAnswer(speculative=False, policy="never", replicas=n, devices_per_replica=devices, runs=runs,
                             cost_per_million_usd=cost_per_million(n, devices, price, tokens_per_s))
    with_spec, gate = None, None
    if speculation and op.speculative:
        so = recommended_switch_off(op)
        gate = so.batch_off
        if gate is not None and gate <= 1:
            notes.append("speculation never pays here (analytic switch-off at batch 1): the fleet with speculation is "
                         "the fleet without")
            with_spec = replace(without, speculative=True, policy="never (speculation does not pay)")
        else:
            policy = (DisableByBatchSize(k=op.k, threshold=int(gate), name=f"gate_bs{gate}") if gate is not None
                      else StaticK(k=op.k, name=f"static_k{op.k}"))
            n, runs = replicas_needed(setup, policy, rate_per_s=rate_per_s, slo=slo, attainment=attainment,
                                      max_replicas=max_replicas, progress=prog, label="with speculation: ")
            with_spec = CapacityAnswer(speculative=True, policy=policy.name, replicas=n, devices_per_replica=devices,
                                       runs=runs, cost_per_million_usd=cost_per_million(n, devices, price, tokens_per_s))
    from ..serving.cost import regime_advice  # a stack calibrated on a load sweep says so, with its load range

    notes = regime_advice(op, rate_per_s=rate_per_s)[1] + notes
    return CapacityPlan(point=op, rate_per_s=float(rate_per_s), slo=slo, attainment=float(attainment), without=without,
                        with_speculation=with_spec, price_usd_per_device_hour=price, price_source=source,
                        mean_output_tokens=mean_out, n_requests=setup.workload.n_requests, n_requests_total=total,
                        gate=gate, notes=tuple(notes))


__all__ = ["CapacityPlan", "CapacityAnswer", "FleetRun", "capacity", "simulate_fleet", "replicas_needed", "fleet_of",
           "cost_per_million", "DEFAULT_PRICES", "DEFAULT_ATTAINMENT"]
