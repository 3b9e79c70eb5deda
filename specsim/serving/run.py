"""One serving run: a workload through the engine under one gating policy → a SimulationResult."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from ..errors import SpecError
from .config import EngineConfig
from .engine import run_engine
from .fleet import FleetSpec
from .metrics import SLO, batch_size_distribution, replica_frame, requests_frame, steps_frame, summarize
from .mix import IterationMix
from .policies import Never
from .record import EngineRun
from .workloads import Workload


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationResult:
    """One run: `requests` (one row per request), `steps` (one row per iteration), `summary`
    (headline numbers, see metrics.summarize), and the inputs that identify it."""

    policy: str
    rate_per_s: float | None
    seed: int
    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: dict
    run: EngineRun = field(repr=False)

    def batch_size_distribution(self) -> pd.DataFrame:
        return batch_size_distribution(self.steps)

    def replicas(self) -> pd.DataFrame:
        """One row per replica (metrics.replica_frame)."""
        return replica_frame(self.run, self.requests, self.steps)

    def tokens(self) -> pd.DataFrame:
        """Token emissions (request, token_index, at_s), one row per token; needs record_tokens=True."""
        if self.run.token_log is None:
            raise SpecError("simulate(..., record_tokens=True) is needed for the per-token log")
        req, first, count, at = self.run.token_log
        reps = np.repeat(np.arange(req.size), count)
        offset = np.arange(reps.size) - np.repeat(np.cumsum(count) - count, count)
        return pd.DataFrame({"request": req[reps], "token_index": first[reps] + offset, "at_s": at[reps]})


def simulate(workload: Workload, *, config: EngineConfig, cost: Callable[[IterationMix], float], policy=None,
             acceptance=(), seed: int = 0, slo: SLO | None = None, record_tokens: bool = False,
             until_s: float | None = None, rate_per_s: float | None = None, tree_size: int = 0,
             acceptance_factor: Callable[[np.ndarray], np.ndarray] | None = None,
             acceptance_model=None, fleet: FleetSpec | None = None, drafter_cache: str = "none",
             fast_path: bool = True, draft_frac: float = 1.0) -> SimulationResult:
    """Run `workload` through the continuous-batching engine under one gating policy.

    cost(mix) -> seconds is any callable (serving.cost.ServingCost for an operating point; tests
    pass `lambda mix: 0.01`). acceptance: α (i.i.d.) or per-position conditional rates;
    acceptance_factor(ctx) -> (n,) multiplies them per sequence at its own context (acceptance
    falling with context). The acceptance stream is SeedSequence(seed).spawn(3)[2] (arrivals and
    lengths use [0] and [1], see setup.build_workload), so changing the policy or K leaves the
    arrivals unchanged. tree_size: M > 0 verifies a draft tree of M nodes and depth K.
    acceptance_model: a speculation.acceptance.AcceptanceModel instead of acceptance and
    acceptance_factor (its rates, moving with each sequence's context at its reference temperature).
    fleet: replicas, layout and router (fleet.FleetSpec; None: one replica). drafter_cache: what the
    drafter keeps of its own ("none", "keep": a draft model, "refeed": EAGLE/MTP; see engine).
    fast_path: the engine's shortcuts for the common iteration (False: the general path only, the
    same run; see engine.run_engine). draft_frac: the share of a sequence's cycles in which the proposer
    drafts (prompt lookup finding a match; `DrafterConfig.draft_frac`)."""
    policy = policy if policy is not None else Never()
    if acceptance_model is not None:
        m = acceptance_model
        acceptance = (m.alpha,) if m.alpha is not None else m.conditional
        acceptance_factor = m.factor if m.context_decay_per_token else None
    streams = np.random.SeedSequence(seed).spawn(3)
    acc = np.atleast_1d(np.asarray(acceptance, dtype=float))
    if acc.size and (np.any(acc < 0) or np.any(acc > 1) or not np.all(np.isfinite(acc))):
        raise SpecError(f"simulate: acceptance rates {acc.tolist()} must lie in [0, 1]")
    run = run_engine(workload, config, cost, policy=policy, acceptance=acc, speculative=policy.k_reserved > 0,
                     seed_seq=streams[2], record_tokens=record_tokens, until_s=until_s, tree_size=tree_size,
                     acceptance_factor=acceptance_factor, fleet=fleet, drafter_cache=drafter_cache, fast_path=fast_path,
                     draft_frac=draft_frac)
    slo = slo or SLO()
    req = requests_frame(run, slo)
    steps = steps_frame(run)
    summary = summarize(run, req, steps)
    summary.update(policy=getattr(policy, "name", str(policy)), rate_per_s=rate_per_s, seed=seed)
    return SimulationResult(policy=summary["policy"], rate_per_s=rate_per_s, seed=seed, requests=req, steps=steps,
                            summary=summary, run=run)


__all__ = ["SimulationResult", "simulate"]
