"""The serving simulator's entry point: `simulate(...) -> SimulationResult`, plus the wiring from a
scenario file (workload, engine limits, KV capacity, roofline cost, policies, SLO) and a rate sweep.

Scenario sections read here (unknown keys are refused):

[workload]  kind = "trace" | "poisson" | "gamma" | "closed_loop"
            trace = "traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv"  (relative
                    paths resolve against the data folder: $SPECSIM_DATA, default the shipped data/)
            format = "azure" | "mooncake" | "plain"   (guessed when absent)
            window_s = [start, end]   time_scale = 2.0   rates = [1, 2, 4, 8]
            n_requests, rate_per_s, cv (gamma), n_users, think_time_s (closed loop)
            prompt = {kind = "fixed", tokens = 512}, output = {...}  (synthetic lengths), or
            lengths_from = "<trace>" to fit lognormals to a trace's columns
            acceptance_by_position = [a1, a2, ...]  (conditional per-position rates; else alpha/tau)
            acceptance_context_decay_per_token, acceptance_reference_context_len,
            acceptance_temperature_slope, acceptance_reference_temperature: an AcceptanceModel
            (rates fall with each sequence's context; the scenario's temperature applies)
[engine]    max_num_seqs, max_num_batched_tokens, chunked_prefill, block_size,
            gpu_memory_utilization, watermark_frac, max_model_len, acceptance_window_steps,
            activation_reserve_gb, n_blocks (override the computed capacity)
[policies]  <name> = {kind = "never" | "static" | "disable_by_batch_size" | "k_by_batch_band" |
            "acceptance_off_switch" | "goodput_optimal", ...}
[slo]       ttft_s, tpot_s
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from ..errors import SpecError, reject_unknown_keys
from ..specs.data import data_dir, data_path  # noqa: F401 (data_dir re-used by tests)
from ..specs.hardware import Efficiency, HardwareProfile, load_hardware
from ..specs.models import ModelSpec, load_model
from ..cost.roofline import mixed_step_cost
from ..specs.scenario import Scenario
from ..speculation.cycle import alpha_from_tau
from . import workloads as wl
from .engine import EngineConfig, EngineRun, IterationMix, run_engine
from .kv_cache import KVCapacity, kv_capacity
from .metrics import SLO, batch_size_distribution, requests_frame, steps_frame, summarize
from .policies import Never, StaticK, policy_from_dict

# Every chain family of specsim.drafters except lookahead (whose verify width is not a K).
SERVING_METHODS = ("none", "draft_model", "prompt_lookup", "medusa", "eagle", "layer_skip", "mtp", "sparse_kv")
_CTX_QUANTUM = 16  # other families: drafting cost looked up at the mean context rounded to this


# ---- the cost callable ----------------------------------------------------------------------------

_CLASSES = ("weights", "attention", "kv_write", "lm_head", "activations")


def _features(q: np.ndarray, l: np.ndarray, g: np.ndarray) -> tuple[float, float, float, float]:
    """(tokens, logit tokens, fused KV-read tokens, causal query-key pairs) of a mix."""
    sq, sl, sg = int(q.sum()), int(l.sum()), int(g.sum())
    return (float(sq), float(sg), float(sl + sq), float(int(q @ l) + (int(q @ q) + sq) / 2.0))


class _AffineStep:
    """A fast twin of `roofline.mixed_step_cost` for one model: per operator class, bytes and FLOPs
    are affine in four batch sums (tokens, logit tokens, KV-read tokens, query-key pairs) for a
    dense model without a sliding window, so they are fitted once from mixed_step_cost itself and
    each step is then `Σ max(bytes / bandwidth, FLOPs / peak) + communication + overhead` in plain
    floats. The fit is checked against mixed_step_cost on large and small mixes; `ok` is False (and
    the caller falls back to the exact function) if any differs by more than 1e-9 relative."""

    PROBES = [([1], [0], [1]), ([1, 1, 1], [100, 50, 7], [1, 1, 1]), ([5], [1000], [0]), ([17, 3], [0, 4000], [1, 3]),
              ([256], [2048], [256]), ([2000], [0], [1]), ([1] * 8, [300] * 8, [1] * 8)]
    CHECKS = [([5] * 256, list(range(0, 256 * 40, 40)), [5] * 256), ([8192], [0], [1]), ([1, 3, 900], [77, 6000, 123], [1, 3, 0]),
              ([1], [131000], [1])]

    def __init__(self, model: ModelSpec, hw: HardwareProfile, *, tp: int, attention: str, efficiency: Efficiency | None):
        self.kw = dict(tp=tp, attention=attention, efficiency=efficiency)
        self.model, self.hw = model, hw
        self.ok = model.moe is None and not model.sliding_window
        if not self.ok:
            return
        rows, ys = [], []
        for q, l, g in self.PROBES:
            q, l, g = (np.asarray(v, dtype=np.int64) for v in (q, l, g))
            sc = mixed_step_cost(model, hw, q_lens=q, ctx_lens=l, logit_lens=g, **self.kw)
            rows.append((1.0, *_features(q, l, g)))
            ys.append([float(getattr(sc, c).bytes) for c in _CLASSES] + [float(getattr(sc, c).flops) for c in _CLASSES]
                      + [float(sc.communication_s), float(sc.overhead_s)])
        X, Y = np.asarray(rows), np.asarray(ys)
        scale = np.abs(X).max(axis=0)
        coef, *_ = np.linalg.lstsq(X / scale, Y, rcond=None)
        coef = coef / scale[:, None]
        eff = efficiency or hw.efficiency
        bw = hw.mem_bandwidth_bytes_per_s * eff.bandwidth_frac
        gemm = hw.peak_flops_per_s[sc.compute_dtype] * eff.compute_frac
        attn = hw.peak_flops_per_s[sc.attention_dtype] * eff.compute_frac
        fps = {"weights": gemm, "attention": attn, "kv_write": gemm, "lm_head": gemm, "activations": gemm}
        n = len(_CLASSES)
        # per class: bytes coefficients / bandwidth and FLOP coefficients / peak, so time = max(two dot products)
        self.classes = [(tuple(float(v) / bw for v in coef[:, j]), tuple(float(v) / fps[c] for v in coef[:, n + j]))
                        for j, c in enumerate(_CLASSES)]
        self.fixed = tuple(float(v) for v in coef[:, 2 * n] + coef[:, 2 * n + 1])  # communication + overhead
        for q, l, g in self.CHECKS + self.PROBES:
            q, l, g = (np.asarray(v, dtype=np.int64) for v in (q, l, g))
            exact = float(mixed_step_cost(model, hw, q_lens=q, ctx_lens=l, logit_lens=g, **self.kw).time_s)
            if abs(self.time(*_features(q, l, g)) - exact) > 1e-9 * exact:
                self.ok = False
                return

    def time(self, t: float, g: float, r: float, p: float) -> float:
        c0, c1, c2, c3, c4 = self.fixed
        total = c0 + c1 * t + c2 * g + c3 * r + c4 * p
        for (b0, b1, b2, b3, b4), (f0, f1, f2, f3, f4) in self.classes:
            mem = b0 + b1 * t + b2 * g + b3 * r + b4 * p
            comp = f0 + f1 * t + f2 * g + f3 * r + f4 * p
            total += mem if mem > comp else comp
        return total

    def exact(self, q, l, g) -> float:
        return float(mixed_step_cost(self.model, self.hw, q_lens=q, ctx_lens=l, logit_lens=g, **self.kw).time_s)


class RooflineCost:
    """Iteration time from the roofline model for the iteration's actual mix.

    target: one `mixed_step_cost` pass over every scheduled sequence (prefill chunks, plain decodes
    with 1 token, verifies with 1 + K tokens). Drafting, by family:
    - draft_model: K sequential drafter passes; pass j runs the sequences drafting more than j
      tokens, one token each at context ctx + j, and pass 0 also runs the prefill chunks through
      the drafter (it needs their cache). The drafter is skipped in an iteration where nobody drafts
      (vLLM v0 skips the proposer then).
    - prompt_lookup: the CPU n-gram search of specsim.drafters, per drafting sequence at its own
      context (`prompt_lookup_s_per_seq_per_ktoken`).
    - medusa, eagle, layer_skip, mtp, sparse_kv: `specsim.drafters.draft_cost` for the drafting
      sequences as a uniform batch (B = their number, K = the largest K, L = their mean context
      rounded to 16 tokens, memoised): its draft_time_s plus verify_extra_s (Medusa's heads).
    - none: nothing.
    exact=True calls mixed_step_cost every time instead of its fitted twin."""

    def __init__(self, target: ModelSpec, hw: HardwareProfile, *, tp: int = 1, drafter: ModelSpec | None = None,
                 drafter_tp: int = 1, method: str = "draft_model", attention: str = "fused",
                 efficiency: Efficiency | None = None, exact: bool = False, drafter_options: dict | None = None,
                 allow_cross_tokenizer: bool = False):
        if method not in SERVING_METHODS:
            raise SpecError(f"serving simulator: method {method!r} is not modelled; expected one of "
                            f"{', '.join(SERVING_METHODS)}")
        if method == "draft_model" and drafter is None:
            raise SpecError("serving simulator: method 'draft_model' needs a drafter model")
        self.method = method
        self.hw, self.model, self.tp, self.attention, self.efficiency = hw, target, tp, attention, efficiency
        self.family = None
        if method != "none":
            from ..speculation import families as drafters
            self.family = drafters.make_config(method, target, drafter=drafter, drafter_tp=drafter_tp,
                                               allow_cross_tokenizer=allow_cross_tokenizer, options=drafter_options)
        self.target = _AffineStep(target, hw, tp=tp, attention=attention, efficiency=efficiency)
        self.drafter = (_AffineStep(drafter, hw, tp=drafter_tp, attention=attention, efficiency=efficiency)
                        if method == "draft_model" else None)
        self.exact = exact or not self.target.ok or (self.drafter is not None and not self.drafter.ok)
        self._family_cache: dict = {}

    def _family_time_s(self, mix: IterationMix) -> float:
        dk = mix.draft_k
        spec = dk > 0
        if not spec.any():
            return 0.0
        ls = mix.ctx_lens[spec]
        if self.method == "prompt_lookup":
            return self.family.prompt_lookup_s_per_seq_per_ktoken * float(np.maximum(ls, 1).sum()) / 1000.0
        n, k = int(spec.sum()), int(dk.max())
        ctx = int(round(float(ls.mean()) / _CTX_QUANTUM)) * _CTX_QUANTUM
        key = (n, k, ctx, mix.tree_size)
        t = self._family_cache.get(key)
        if t is None:
            from ..speculation.families import draft_cost
            dc = draft_cost(self.family, self.model, self.hw, batch_size=n, k=k, ctx_len=ctx, tp=self.tp,
                            tree_size=mix.tree_size or None, attention=self.attention, efficiency=self.efficiency)
            t = self._family_cache[key] = float(dc.draft_time_s) + float(dc.verify_extra_s)
        return t

    def target_time_s(self, mix: IterationMix) -> float:
        if self.exact:
            return self.target.exact(mix.q_lens, mix.ctx_lens, mix.logit_lens)
        return self.target.time(*_features(mix.q_lens, mix.ctx_lens, mix.logit_lens))

    def draft_time_s(self, mix: IterationMix) -> float:
        dk = mix.draft_k
        if self.method not in ("draft_model", "none"):
            return self._family_time_s(mix)
        if self.drafter is None or not dk.size:
            return 0.0
        kmax = int(dk.max())
        if kmax == 0:
            return 0.0
        pf = mix.is_prefill
        qp, lp = mix.q_lens[pf], mix.ctx_lens[pf]
        gp = mix.logit_lens[pf]
        # a tree of M nodes and depth K is drafted one level per pass, w = ceil((M - 1) / K) nodes a
        # level (specsim.drafters.tree_level_width); a chain is w = 1
        w = -(-(mix.tree_size - 1) // kmax) if mix.tree_size else 1
        total = 0.0
        if self.exact:
            for j in range(kmax):
                m = dk > j
                q = np.full(int(m.sum()), w, dtype=np.int64)
                l, g = mix.ctx_lens[m] + j * w, q
                if j == 0 and qp.size:
                    q, l, g = np.concatenate([q, qp]), np.concatenate([l, lp]), np.concatenate([g, gp])
                total += self.drafter.exact(q, l, g)
            return total
        pre = _features(qp, lp, gp) if qp.size else (0.0, 0.0, 0.0, 0.0)
        spec = dk > 0
        ls = mix.ctx_lens[spec]
        ks = dk[spec]
        uniform = bool((ks == kmax).all())
        n, L = float(ks.size), float(ls.sum())
        for j in range(kmax):
            if not uniform and j:
                m = ks > j
                n, L = float(m.sum()), float(ls[m].sum())
            lj = L + n * j * w  # Σ (ctx + j·w) over the n sequences still drafting
            t = g = n * w
            r = lj + n * w
            p = w * lj + n * w * (w + 1) / 2.0
            if j == 0:
                t, g, r, p = t + pre[0], g + pre[1], r + pre[2], p + pre[3]
            total += self.drafter.time(t, g, r, p)
        return total

    def __call__(self, mix: IterationMix) -> float:
        return self.target_time_s(mix) + self.draft_time_s(mix)


# ---- results --------------------------------------------------------------------------------------

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

    def tokens(self) -> pd.DataFrame:
        """Token emissions (request, token_index, at_s), one row per token; needs record_tokens=True."""
        if self.run.token_log is None:
            raise SpecError("simulate(..., record_tokens=True) is needed for the per-token log")
        req, first, count, at = self.run.token_log
        reps = np.repeat(np.arange(req.size), count)
        offset = np.arange(reps.size) - np.repeat(np.cumsum(count) - count, count)
        return pd.DataFrame({"request": req[reps], "token_index": first[reps] + offset, "at_s": at[reps]})


def simulate(workload: wl.Workload, *, config: EngineConfig, cost: Callable[[IterationMix], float], policy=None,
             acceptance=(), seed: int = 0, slo: SLO | None = None, record_tokens: bool = False,
             until_s: float | None = None, rate_per_s: float | None = None, tree_size: int = 0,
             acceptance_model=None) -> SimulationResult:
    """Run `workload` through the continuous-batching engine under one gating policy.

    cost(mix) -> seconds is any callable (RooflineCost for the roofline model; tests pass
    `lambda mix: 0.01`). acceptance: α (i.i.d.) or per-position conditional rates; the acceptance
    stream is SeedSequence(seed).spawn(3)[2] (arrivals and lengths use [0] and [1], see
    `build_workload`), so changing the policy or K leaves the arrivals unchanged. tree_size: M > 0
    verifies a draft tree of M nodes and depth K (see engine.run_engine). acceptance_model: a
    specsim.acceptance.AcceptanceModel; its rates replace `acceptance` and fall with each sequence's
    context (and the model's temperature term at its reference temperature)."""
    policy = policy if policy is not None else Never()
    factor = None
    if acceptance_model is not None:
        acceptance = (acceptance_model.alpha,) if acceptance_model.alpha is not None else acceptance_model.conditional
        factor = acceptance_model.factor
    streams = np.random.SeedSequence(seed).spawn(3)
    acc = np.atleast_1d(np.asarray(acceptance, dtype=float))
    if acc.size and (np.any(acc < 0) or np.any(acc > 1) or not np.all(np.isfinite(acc))):
        raise SpecError(f"simulate: acceptance rates {acc.tolist()} must lie in [0, 1]")
    run = run_engine(workload, config, cost, policy=policy, acceptance=acc, speculative=policy.k_reserved > 0,
                     seed_seq=streams[2], record_tokens=record_tokens, until_s=until_s, tree_size=tree_size,
                     acceptance_factor=factor)
    slo = slo or SLO()
    req = requests_frame(run, slo)
    steps = steps_frame(run)
    summary = summarize(run, req, steps)
    summary.update(policy=getattr(policy, "name", str(policy)), rate_per_s=rate_per_s, seed=seed)
    return SimulationResult(policy=summary["policy"], rate_per_s=rate_per_s, seed=seed, requests=req, steps=steps,
                            summary=summary, run=run)


# ---- scenario wiring ------------------------------------------------------------------------------

WORKLOAD_KEYS = {"kind", "trace", "format", "window_s", "time_scale", "rates", "n_requests", "rate_per_s", "cv",
                 "n_users", "think_time_s", "prompt", "output", "lengths_from", "acceptance_by_position", "jitter_s",
                 "acceptance_context_decay_per_token", "acceptance_reference_context_len",
                 "acceptance_temperature_slope", "acceptance_reference_temperature"}
ENGINE_KEYS = {"max_num_seqs", "max_num_batched_tokens", "chunked_prefill", "block_size", "gpu_memory_utilization",
               "watermark_frac", "max_model_len", "acceptance_window_steps", "activation_reserve_gb", "n_blocks",
               "drafter_options", "tree_size"}


def _family_memory(method: str, target: ModelSpec, tp: int, k: int, options) -> tuple[dict, float]:
    """Per-device weights and per-token cache bytes of a drafting family other than draft_model,
    from specsim.drafters.footprint (a draft model's own are counted by kv_capacity directly)."""
    if method in ("none", "draft_model", "prompt_lookup"):
        return {}, 0.0
    from ..speculation import families as drafters
    cfg = drafters.make_config(method, target, options=options)
    one = drafters.footprint(cfg, target, batch_size=1, ctx_len=1, k=k, tp=tp)
    two = drafters.footprint(cfg, target, batch_size=1, ctx_len=2, k=k, tp=tp)
    weights = {label: float(v) for label, v in one.items() if "KV" not in label and label != "speculative slots"}
    kv = sum(float(two[label]) - float(one[label]) for label in one if "KV" in label)
    return weights, kv
SLO_KEYS = {"ttft_s", "tpot_s"}


def resolve_data_path(path: str) -> Path:
    return data_path(path, what="trace")


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingSetup:
    """Everything a scenario's [workload]/[engine]/[policies]/[slo] sections resolve to."""

    scenario: Scenario
    workload: wl.Workload
    workload_kind: str
    config: EngineConfig
    capacity: KVCapacity
    cost: RooflineCost
    policies: dict
    acceptance: tuple
    slo: SLO
    rates: tuple
    seed: int
    tree_size: int = 0
    acceptance_model: object = None
    synthetic: dict = field(default_factory=dict)

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
        raise SpecError(f"scenario {self.scenario.name!r}: a closed-loop workload has no arrival rate to sweep")


def _acceptance(s: Scenario, raw: dict) -> tuple:
    if "acceptance_by_position" in raw:
        acc = raw["acceptance_by_position"]
        if not isinstance(acc, list) or not acc or not all(isinstance(a, (int, float)) and 0 <= a <= 1 for a in acc):
            raise SpecError(f"scenario {s.name!r} [workload]: field 'acceptance_by_position' = {acc!r}: "
                            f"expected a list of rates in [0, 1]")
        return tuple(float(a) for a in acc)
    if s.alpha is not None:
        return (float(s.alpha),)
    if s.tau is not None:
        return (alpha_from_tau(float(s.tau), s.k),)
    return ()


def _acceptance_model(s: Scenario, raw: dict, acceptance: tuple):
    """An AcceptanceModel when the [workload] gives a context or temperature dependence, else None.
    The scenario's temperature is folded into the factor by moving the reference temperature."""
    keys = ("acceptance_context_decay_per_token", "acceptance_reference_context_len",
            "acceptance_temperature_slope", "acceptance_reference_temperature")
    if not any(k in raw for k in keys) or not acceptance:
        return None
    from dataclasses import replace as _replace

    from ..speculation.acceptance import AcceptanceModel
    kw = {k[len("acceptance_"):]: raw[k] for k in keys if k in raw}
    base = {"alpha": acceptance[0]} if len(acceptance) == 1 else {"conditional": acceptance}
    try:
        model = AcceptanceModel(**base, **kw)
    except SpecError as exc:
        raise SpecError(f"scenario {s.name!r} [workload]: {exc}") from None
    # factor(L) at the scenario's temperature: exp(−λ (L − L_ref) − s (T − T_ref)); fold the constant
    # temperature term into the base rates so the engine only passes contexts
    t_factor = float(model.factor(model.reference_context_len, s.temperature))
    if model.alpha is not None:
        return _replace(model, alpha=min(1.0, model.alpha * t_factor), temperature_slope=0.0)
    return _replace(model, conditional=tuple(min(1.0, c * t_factor) for c in model.conditional), temperature_slope=0.0)


def build_workload(s: Scenario, raw: dict, *, seed: int) -> tuple[wl.Workload, str, dict]:
    where = f"scenario {s.name!r} [workload]"
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
        if "window_s" in raw:
            win = raw["window_s"]
            if not (isinstance(win, list) and len(win) == 2):
                raise SpecError(f"{where}: field 'window_s' = {win!r}: expected [start, end] in seconds")
            w = w.window(float(win[0]), float(win[1]))
        if "time_scale" in raw:
            w = w.scaled(float(raw["time_scale"]))
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
    cv = float(raw.get("cv", 1.0)) if kind == "gamma" else 1.0
    extra["cv"] = cv
    t = wl.gamma_arrivals(rng_a, rate_per_s=float(rate), cv=cv, n_requests=n)
    return wl.synthetic(arrivals=t, prompt=prompt, output=output, rng_lengths=rng_l, source=f"{kind} at {rate} req/s"), kind, extra


def build_serving(s: Scenario, *, seed: int = 0, exact_cost: bool = False) -> ServingSetup:
    """Resolve a scenario into a ServingSetup (models, capacity, cost, workload, policies, SLO)."""
    from ..speculation.predict import check_tokenizers

    where = f"scenario {s.name!r}"
    hw = load_hardware(s.hardware)
    target = load_model(s.target)
    if s.target_dtype:
        target = target.with_weight_format(s.target_dtype)
    method = s.method
    if method not in SERVING_METHODS:
        raise SpecError(f"{where}: field 'method' = {method!r}: the serving simulator models "
                        f"{', '.join(SERVING_METHODS)} (other drafter families need specsim.drafters)")
    drafter = None
    if method == "draft_model":
        if not s.drafter:
            raise SpecError(f"{where}: field 'drafter' missing: expected a drafter model id for method 'draft_model'")
        drafter = load_model(s.drafter)
        check_tokenizers(target, drafter, allow_cross_tokenizer=s.allow_cross_tokenizer)
    if s.drafter_tp > s.tp:
        raise SpecError(f"{where}: field 'drafter_tp' = {s.drafter_tp}: expected <= tp = {s.tp} (the drafter runs on "
                        f"the target's devices)")
    eng = dict(s.section("engine"))
    reject_unknown_keys(f"{where} [engine]", eng, ENGINE_KEYS)
    drafter_options = eng.pop("drafter_options", None)
    tree_size = eng.pop("tree_size", 0)
    if isinstance(tree_size, bool) or not isinstance(tree_size, int) or (tree_size and tree_size < s.k + 1):
        raise SpecError(f"{where} [engine]: field 'tree_size' = {tree_size!r}: expected 0 (a chain) or a tree of "
                        f">= K + 1 = {s.k + 1} nodes")
    extra_weights, extra_kv = _family_memory(method, target, s.tp, s.k, drafter_options)
    cap = kv_capacity(target, hw, tp=s.tp, drafter=drafter, drafter_tp=s.drafter_tp,
                      gpu_memory_utilization=float(eng.get("gpu_memory_utilization", 0.9)),
                      block_size_tokens=eng.get("block_size", 16),
                      activation_reserve_bytes=float(eng.get("activation_reserve_gb", 0.0)) * 1e9,
                      extra_weight_bytes=extra_weights, extra_kv_bytes_per_token=extra_kv)
    kwargs = {k: eng[k] for k in ("max_num_seqs", "max_num_batched_tokens", "chunked_prefill", "watermark_frac",
                                  "max_model_len", "acceptance_window_steps") if k in eng}
    n_blocks = eng.get("n_blocks", cap.n_blocks)
    config = EngineConfig(n_blocks=n_blocks, block_size_tokens=cap.block_size_tokens,
                          max_model_len=kwargs.pop("max_model_len", target.max_context or 0), **kwargs)
    cost = RooflineCost(target, hw, tp=s.tp, drafter=drafter, drafter_tp=s.drafter_tp, method=method,
                        attention=s.attention, exact=exact_cost, drafter_options=drafter_options,
                        allow_cross_tokenizer=s.allow_cross_tokenizer)
    raw_w = dict(s.section("workload"))
    workload, kind, extra = build_workload(s, raw_w, seed=seed)
    acceptance = _acceptance(s, raw_w)
    pol_raw = dict(s.section("policies"))
    if pol_raw:
        policies = {name: policy_from_dict(name, v, where=f"{where} [policies]") for name, v in pol_raw.items()}
    else:
        policies = {"never": Never()}
        if method != "none":
            policies["static"] = StaticK(k=s.k)
    if method == "none" and any(p.k_reserved for p in policies.values()):
        raise SpecError(f"{where}: method 'none' cannot run speculative policies "
                        f"{[n for n, p in policies.items() if p.k_reserved]}")
    if any(p.k_reserved for p in policies.values()) and not acceptance:
        raise SpecError(f"{where}: speculative policies need an acceptance rate: give alpha, tau or "
                        f"[workload] acceptance_by_position")
    slo_raw = dict(s.section("slo"))
    reject_unknown_keys(f"{where} [slo]", slo_raw, SLO_KEYS)
    slo = SLO(**{k: float(v) for k, v in slo_raw.items()})
    rates = raw_w.get("rates", [])
    if not isinstance(rates, list) or not all(isinstance(r, (int, float)) and r > 0 for r in rates):
        raise SpecError(f"{where} [workload]: field 'rates' = {rates!r}: expected a list of positive rates (req/s)")
    return ServingSetup(scenario=s, workload=workload, workload_kind=kind, config=config, capacity=cap, cost=cost,
                        policies=policies, acceptance=acceptance, slo=slo, rates=tuple(float(r) for r in rates),
                        seed=seed, synthetic=extra, tree_size=tree_size,
                        acceptance_model=_acceptance_model(s, raw_w, acceptance))


# ---- rate sweeps ----------------------------------------------------------------------------------

TABLE_COLUMNS = ("policy", "rate_per_s", "n_done", "n_rejected", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s",
                 "e2e_p50_s", "throughput_tokens_per_s", "goodput_requests_per_s", "slo_attainment_frac",
                 "batch_size_mean", "kv_used_frac_mean", "n_preemptions", "mean_acceptance_length",
                 "draft_acceptance_rate")


def sweep(setup: ServingSetup, *, rates=None, policies=None, progress=None) -> tuple[pd.DataFrame, dict]:
    """Every policy at every rate (None = the workload as given). Returns a long-form table (one row
    per policy and rate, every summary number plus the speedups against the 'never'-kind baseline)
    and the SimulationResults keyed by (policy, rate)."""
    rates = list(rates) if rates else (list(setup.rates) or [None])
    names = list(policies) if policies else list(setup.policies)
    for n in names:
        if n not in setup.policies:
            raise SpecError(f"policy {n!r} is not in the scenario's [policies]: {', '.join(setup.policies)}")
    results: dict = {}
    rows = []
    for rate in rates:
        w = setup.workload_at(rate)
        for name in names:
            r = simulate(w, config=setup.config, cost=setup.cost, policy=setup.policies[name],
                         acceptance=setup.acceptance, seed=setup.seed, slo=setup.slo, rate_per_s=rate,
                         tree_size=setup.tree_size, acceptance_model=setup.acceptance_model)
            results[(name, rate)] = r
            row = {k: v for k, v in r.summary.items() if not isinstance(v, list)}
            row["policy"] = name
            rows.append(row)
            if progress is not None:
                progress(name, rate)
    table = pd.DataFrame(rows)
    return add_speedups(table, setup.policies), results


def add_speedups(table: pd.DataFrame, policies: dict) -> pd.DataFrame:
    """speedup_tpot_p50 = p50 TPOT of the baseline (the first 'never' policy) / the policy's, at
    the same rate; likewise for p99 TPOT and throughput (policy / baseline)."""
    base = next((n for n, p in policies.items() if p.k_reserved == 0), None)
    table = table.copy()
    if base is None or table.empty:
        return table
    key = table["rate_per_s"].fillna(-1.0)
    b = table[table["policy"] == base].assign(_k=key[table["policy"] == base]).set_index("_k")
    ref_p50 = key.map(b["tpot_p50_s"])
    ref_p99 = key.map(b["tpot_p99_s"])
    ref_thr = key.map(b["throughput_tokens_per_s"])
    table["speedup_tpot_p50"] = ref_p50 / table["tpot_p50_s"]
    table["speedup_tpot_p99"] = ref_p99 / table["tpot_p99_s"]
    table["throughput_ratio"] = table["throughput_tokens_per_s"] / ref_thr
    table.attrs["baseline_policy"] = base
    return table


def crossover_rate(table: pd.DataFrame, policy: str, column: str = "speedup_tpot_p50") -> float | None:
    """The arrival rate where the policy's speedup first falls through 1, interpolated linearly in
    log(rate) between the two sweep points around it; None if it never does."""
    t = table[table["policy"] == policy].dropna(subset=["rate_per_s"]).sort_values("rate_per_s")
    r, s = t["rate_per_s"].to_numpy(float), t[column].to_numpy(float)
    for i in range(1, len(r)):
        if s[i - 1] >= 1.0 > s[i]:
            x0, x1 = math.log(r[i - 1]), math.log(r[i])
            f = (s[i - 1] - 1.0) / (s[i - 1] - s[i])
            return float(math.exp(x0 + f * (x1 - x0)))
    return None
