"""Speculation gating policies: pure functions of what the scheduler sees at one iteration.

A policy is a frozen dataclass called with an `Observation` and returning the number of draft tokens
K every speculating sequence proposes this iteration (0 = plain decoding). `k_reserved` is the
number of speculative slots the scheduler reserves per running sequence (memory and token budget),
whatever the policy then decides: vLLM's scheduler reserves `num_lookahead_slots` for every decode
without knowing whether the worker will speculate. No policy touches simpy or the engine's state;
the tests call them directly.

- `Never`: plain decoding, no slots reserved.
- `StaticK(k)`: always K.
- `DisableByBatchSize(k, threshold)`: vLLM's `speculative_disable_by_batch_size`, modelled on
  vLLM v0 (0.5.x–0.6.x) `SpecDecodeWorker._should_disable_all_speculation`: when the running queue
  holds `threshold` or more sequences (`>=`), speculation is off for the whole batch of that step,
  including requests that were already speculating; it comes back for everyone when the queue drops
  below the threshold. The scheduler still reserves the K lookahead slots while it is off.
  `sticky=True` models the reading of that code's comment ("Once num_speculative_tokens is set to
  0, the spec decode of this request will be disabled forever"): the requests running when it trips
  never speculate again, while requests admitted later may.
- `KByBatchBand(bands)`: a K schedule by running batch size, e.g. ((1, 5), (8, 3), (32, 1), (64, 0)).
- `AcceptanceOffSwitch(k, min_acceptance_frac)`: off while the acceptance rate measured over the
  engine's window (accepted / drafted, vLLM's `draft_acceptance_rate`) is below the threshold; it
  drafts once every `probe_every_steps` iterations while off so the window can recover.
- `GoodputOptimalK(k_max)`: per iteration, the K in 0..k_max that maximises expected tokens per
  second of the batch, E[tokens] / predicted iteration time, with E[tokens] from the i.i.d.
  closed form at the windowed acceptance estimate (SmartSpec: Liu et al. 2024, "Optimizing
  Speculative Decoding for Serving Large Language Models Using Goodput", §4: goodput-maximising
  proposal length from a moving-average acceptance rate and a batch cost model).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from ..specs.serving_tables import MAX_K, MAX_K_SEARCHED, POLICY_FIELDS, PolicyTable, check_policy_fields


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """What a policy may look at when the scheduler has chosen this iteration's batch.

    n_running: the running queue size (vLLM's running_queue_size), prefills included.
    n_decoding: running sequences past their prefill that could speculate this iteration.
    n_waiting: requests queued for admission.
    window_draft_tokens / window_accepted_tokens / window_rejections: totals over the engine's
    acceptance window, the last `acceptance_window_steps` iterations that drafted (rejections:
    cycles that stopped at a rejected draft).
    steps_since_draft: iterations since the last one that drafted (0 if the last one did).
    alpha_prior: the acceptance rate the scenario states, used until the window has data.
    step_time_s: predicted duration of this iteration if every decoding sequence drafts k.
    """

    n_running: int
    n_decoding: int = 0
    n_waiting: int = 0
    window_draft_tokens: int = 0
    window_accepted_tokens: int = 0
    window_rejections: int = 0
    steps_since_draft: int = 0
    alpha_prior: float | None = None
    step_time_s: Callable[[int], float] | None = field(default=None, repr=False, compare=False)

    @property
    def acceptance_frac(self) -> float | None:
        """Accepted / drafted over the window (vLLM's draft_acceptance_rate); None without data."""
        if self.window_draft_tokens == 0:
            return None
        return self.window_accepted_tokens / self.window_draft_tokens

    @property
    def alpha_estimate(self) -> float | None:
        """Per-token i.i.d. acceptance α from the window: accepted / (accepted + rejections), the
        maximum-likelihood estimate for a truncated geometric; the prior when the window is empty."""
        tried = self.window_accepted_tokens + self.window_rejections
        if tried == 0:
            return self.alpha_prior
        return self.window_accepted_tokens / tried


def _check(policy) -> None:
    """A policy's fields by the rules of its kind (specs.serving_tables.POLICY_FIELDS), with the
    converted values (bands as tuples) put back."""
    kind = KIND_OF[type(policy)]
    values = {name: getattr(policy, name) for name in POLICY_FIELDS[kind]}
    for name, v in check_policy_fields(f"policy {policy.name}", kind, values).items():
        object.__setattr__(policy, name, v)


@dataclass(frozen=True, slots=True, kw_only=True)
class Never:
    name: str = "never"
    sticky_off: bool = False

    @property
    def k_reserved(self) -> int:
        return 0

    def __call__(self, obs: Observation) -> int:
        return 0


@dataclass(frozen=True, slots=True, kw_only=True)
class StaticK:
    k: int
    name: str = "static"
    sticky_off: bool = False

    def __post_init__(self) -> None:
        _check(self)

    @property
    def k_reserved(self) -> int:
        return self.k

    def __call__(self, obs: Observation) -> int:
        return self.k


@dataclass(frozen=True, slots=True, kw_only=True)
class DisableByBatchSize:
    k: int
    threshold: int
    sticky: bool = False
    name: str = "disable_by_batch_size"

    def __post_init__(self) -> None:
        _check(self)

    @property
    def sticky_off(self) -> bool:
        return self.sticky

    @property
    def k_reserved(self) -> int:
        return self.k

    def __call__(self, obs: Observation) -> int:
        return 0 if obs.n_running >= self.threshold else self.k


@dataclass(frozen=True, slots=True, kw_only=True)
class KByBatchBand:
    """bands: ((min_batch, k), ...) ascending in min_batch; the last band whose min_batch <=
    n_running applies; below the first band, the first band's K."""

    bands: tuple[tuple[int, int], ...]
    name: str = "k_by_batch_band"
    sticky_off: bool = False

    def __post_init__(self) -> None:
        _check(self)

    @property
    def k_reserved(self) -> int:
        return max(k for _, k in self.bands)

    def __call__(self, obs: Observation) -> int:
        k = self.bands[0][1]
        for b, kk in self.bands:
            if obs.n_running >= b:
                k = kk
        return k


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptanceOffSwitch:
    k: int
    min_acceptance_frac: float
    min_window_tokens: int = 64
    probe_every_steps: int = 200
    name: str = "acceptance_off_switch"
    sticky_off: bool = False

    def __post_init__(self) -> None:
        _check(self)

    @property
    def k_reserved(self) -> int:
        return self.k

    def __call__(self, obs: Observation) -> int:
        rate = obs.acceptance_frac
        if rate is None or obs.window_draft_tokens < self.min_window_tokens or rate >= self.min_acceptance_frac:
            return self.k
        return self.k if obs.steps_since_draft >= self.probe_every_steps else 0


def expected_tokens_per_cycle(alpha: float, k: int) -> float:
    """(1 − α^(K+1)) / (1 − α), Leviathan et al. 2022 eq. 1, in plain floats for the hot loop
    (the vectorised, validated form is specsim.acceptance.tokens_per_cycle_iid)."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


@dataclass(frozen=True, slots=True, kw_only=True)
class GoodputOptimalK:
    k_max: int
    name: str = "goodput_optimal"
    sticky_off: bool = False

    def __post_init__(self) -> None:
        _check(self)

    @property
    def k_reserved(self) -> int:
        return self.k_max

    def __call__(self, obs: Observation) -> int:
        alpha = obs.alpha_estimate
        if obs.step_time_s is None or alpha is None or obs.n_decoding == 0:
            return 0 if alpha is None else self.k_max
        best_k, best = 0, -math.inf
        for k in range(self.k_max + 1):
            goodput = obs.n_decoding * expected_tokens_per_cycle(alpha, k) / obs.step_time_s(k)
            if goodput > best * (1.0 + 1e-12):
                best_k, best = k, goodput
        return best_k


POLICY_KINDS = {
    "never": Never, "static": StaticK, "disable_by_batch_size": DisableByBatchSize,
    "k_by_batch_band": KByBatchBand, "acceptance_off_switch": AcceptanceOffSwitch,
    "goodput_optimal": GoodputOptimalK,
}
KIND_OF = {cls: kind for kind, cls in POLICY_KINDS.items()}


def policy_from_table(spec: PolicyTable):
    """The policy a checked [policies] entry describes (fields it leaves out take the policy's defaults)."""
    return POLICY_KINDS[spec.kind](name=spec.name, **spec.params)


def policy_from_dict(name: str, raw: dict, *, where: str = "[policies]"):
    """One entry of a scenario's [policies] table: {kind = "...", ...the policy's fields}."""
    return policy_from_table(PolicyTable.from_table(name, raw, where=where))


__all__ = ["Observation", "Never", "StaticK", "DisableByBatchSize", "KByBatchBand", "AcceptanceOffSwitch",
           "GoodputOptimalK", "POLICY_KINDS", "policy_from_table", "policy_from_dict", "expected_tokens_per_cycle",
           "MAX_K", "MAX_K_SEARCHED"]
