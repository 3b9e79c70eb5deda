"""What one serving iteration costs: the operating point's cost model applied to the iteration's mix.

`ServingCost(op)(mix) -> seconds` prices an `engine.IterationMix` (every scheduled sequence with its
query tokens and cached context) from the same pieces the analytical cycle uses, read from the
operating point:
- the target's forward pass over the whole mix (`cost.roofline.mixed_step_cost`) plus the
  deployment's layer-split hops;
- the family's drafting passes (`speculation.families.DrafterWork`): pass j runs the sequences
  drafting more than j tokens, w tokens each at min(context + j·w, cap), through the drafting model
  at its tensor-parallel degree, plus the input projection of EAGLE/MTP; a drafter with its own cache
  also runs the iteration's prefill chunks in its first pass; prompt lookup's host search per
  drafting sequence at its own context; Medusa's heads on every verified position;
- the device's per-cycle work when anybody speculates (`speculation.cycle.device_cycle_overhead_s`:
  reading the extra logits for rejection, a tree's KV compaction);
- the engine's host work for the iteration (`cost.deployment.Deployment.host_time_s`: per step, per
  sequence, per token, per speculating sequence and drafted token, and the stack's cycle overhead),
  added to the device's or overlapped with it as the stack does.
On a batch of B sequences decoding at one context this equals the analytical cycle to rounding
(tests/test_operating_point.py checks 1e-9).

Speed: a step's time splits into parts that depend on one sum over the mix each (tokens, logit
tokens) and an attention term in two more (KV-read tokens, query–key pairs), so `FastStep` tabulates
the first two once per model (the measured GEMM curves included) and prices attention in closed
form, checked against `mixed_step_cost` on a set of mixes; when the check fails the exact function
is called instead.
"""
from __future__ import annotations

import numpy as np

from ..cost.roofline import (LOGIT_BYTES, attention_time_s, kv_shard_frac, logits_time_s, mixed_step_cost,
                             overhead_time_s, token_time_s)
from ..specs.hardware import Efficiency, HardwareProfile
from ..specs.models import ModelSpec
from ..speculation.families import dense_time_s, tree_level_width
from ..speculation.operating_point import OperatingPoint
from ..speculation.predict import tokens_per_cycle_at
from .engine import IterationMix

_CLASSES = ("weights", "attention", "kv_write", "lm_head", "activations")


def mix_features(q: np.ndarray, l: np.ndarray, g: np.ndarray) -> tuple[float, float, float, float]:
    """(tokens, logit tokens, fused KV-read tokens, causal query-key pairs) of a mix."""
    sq, sl, sg = int(q.sum()), int(l.sum()), int(g.sum())
    return (float(sq), float(sg), float(sl + sq), float(int(q @ l) + (int(q @ q) + sq) / 2.0))


class FastStep:
    """A fast twin of `roofline.mixed_step_cost` for one model on one deployment.

    A step's time is token_time(T) + logits_time(G) + attention(R, P) + overhead (roofline's split:
    T tokens, G logit positions, R KV-read tokens, P query–key pairs). The first two depend on one
    count each, so they are tabulated once over 0..T_max (the table grows on demand); attention is
    max(R·a, P·b) per the roofline. The twin is checked against mixed_step_cost on a set of mixes
    and `ok` is False (every call goes to the exact function) if any differs by more than 1e-9."""

    CHECKS = [([1], [0], [1]), ([1, 1, 1], [100, 50, 7], [1, 1, 1]), ([5], [1000], [0]), ([17, 3], [0, 4000], [1, 3]),
              ([256], [2048], [256]), ([2000], [0], [1]), ([1] * 8, [300] * 8, [1] * 8),
              ([5] * 256, list(range(0, 256 * 40, 40)), [5] * 256), ([8192], [0], [1]),
              ([1, 3, 900], [77, 6000, 123], [1, 3, 0]), ([1], [131000], [1])]

    def __init__(self, model: ModelSpec, hw: HardwareProfile, *, tp: int, attention: str, efficiency: Efficiency | None,
                 exact: bool = False, max_tokens: int = 8192):
        self.kw = dict(tp=tp, attention=attention, efficiency=efficiency)
        self.model, self.hw = model, hw
        self.window = model.sliding_window or 0
        self._tokens = np.zeros(0)
        self._logits = np.zeros(0)
        self.ok = not exact
        if not self.ok:
            return
        self._grow(max_tokens)
        kw = dict(tp=tp, efficiency=efficiency)
        self.r_coef = float(attention_time_s(model, hw, kv_read_tokens=1.0, attn_pairs=0.0, **kw))
        self.p_coef = float(attention_time_s(model, hw, kv_read_tokens=0.0, attn_pairs=1.0, **kw))
        self.fixed = overhead_time_s(model, hw, efficiency=efficiency)
        for q, l, g in self.CHECKS:
            exact_t = self.exact(q, l, g)
            if abs(self(q, l, g) - exact_t) > 1e-9 * exact_t:
                self.ok = False
                return

    def _grow(self, n: int) -> None:
        """Tables of token_time_s and logits_time_s over 0..n (at least doubling)."""
        size = max(n + 1, 2 * self._tokens.size)
        counts = np.arange(size, dtype=np.float64)
        kw = dict(tp=self.kw["tp"], efficiency=self.kw["efficiency"])
        self._tokens = np.asarray(token_time_s(self.model, self.hw, counts, **kw), dtype=np.float64)
        self._logits = np.asarray(logits_time_s(self.model, self.hw, counts, **kw), dtype=np.float64)

    def time(self, t: float, g: float, r: float, p: float) -> float:
        """Step time from the mix sums (tokens t, logit tokens g, KV-read tokens r, pairs p)."""
        ti, gi = int(t), int(g)
        if ti >= self._tokens.size or gi >= self._tokens.size:
            self._grow(max(ti, gi))
        a, b = r * self.r_coef, p * self.p_coef
        return float(self._tokens[ti]) + float(self._logits[gi]) + (a if a > b else b) + self.fixed

    def exact(self, q, l, g) -> float:
        return float(mixed_step_cost(self.model, self.hw, q_lens=np.asarray(q, dtype=np.int64),
                                     ctx_lens=np.asarray(l, dtype=np.int64), logit_lens=np.asarray(g, dtype=np.int64),
                                     **self.kw).time_s)

    def __call__(self, q, l, g) -> float:
        """Step time of the mix given as arrays (query tokens, cached context, logit tokens)."""
        if not self.ok:
            return self.exact(q, l, g)
        q, l, g = np.asarray(q, dtype=np.int64), np.asarray(l, dtype=np.int64), np.asarray(g, dtype=np.int64)
        if self.window:
            l = np.minimum(l, self.window)
        if self.kw["attention"] == "fused":
            return self.time(*mix_features(q, l, g))
        t, gg, _, p = mix_features(q, l, g)
        return self.time(t, gg, p, p)  # a naive kernel re-reads a key per query: R = P


class ServingCost:
    """Seconds per iteration for an operating point (see the module docstring).

    exact=True calls mixed_step_cost every time instead of the fitted twins (tests compare both)."""

    def __init__(self, op: OperatingPoint, *, exact: bool = False):
        self.op = op
        dep = op.deployment
        self.hw, self.target_model, self.dep = op.hardware, op.target, dep
        self.target = FastStep(op.target, op.hardware, tp=dep.tp, attention=dep.attention, efficiency=dep.eff,
                               exact=exact)
        self.work = op.drafter.family.work(op.drafter, op.target, dep.tp) if op.speculative else None
        w = self.work
        self.drafter = (FastStep(w.pass_model, op.hardware, tp=w.pass_tp, attention=dep.attention, efficiency=dep.eff,
                                 exact=exact) if w is not None and w.pass_model is not None else None)
        self.hop_s = dep.hop_s
        bw = op.hardware.mem_bandwidth_bytes_per_s * dep.eff.bandwidth_frac
        # per-cycle overhead terms (speculation.cycle.cycle_overhead_s): the host work, reading the
        # extra fp32 logits per verified position, a tree's compaction per accepted token
        self._logit_s_per_extra_position = 2.0 * op.target.vocab_size * LOGIT_BYTES / dep.tp / bw
        self._compact_s_per_token = 2.0 * op.target.kv_bytes_per_token * kv_shard_frac(op.target, dep.tp) / bw
        self._context_dependent = (op.acceptance.model is not None and
                                   op.acceptance.model.context_decay_per_token != 0.0)
        self._tau_cache: dict = {}

    # -- parts
    def target_time_s(self, mix: IterationMix) -> float:
        return self.target(mix.q_lens, mix.ctx_lens, mix.logit_lens) + self.hop_s

    def draft_time_s(self, mix: IterationMix) -> float:
        """Drafting outside the verify pass: the family's passes and host search."""
        w = self.work
        if w is None:
            return 0.0
        dk = mix.draft_k
        spec = dk > 0
        if not spec.any():
            return 0.0
        total = 0.0
        ctx = mix.ctx_lens[spec]
        if w.host_s_per_seq_per_ktoken:
            total += w.host_s_per_seq_per_ktoken * float(np.maximum(ctx, 1).sum()) / 1000.0
        if self.drafter is None or w.n_passes != "k":
            return total
        ks = dk[spec]
        kmax = int(ks.max())
        width = int(tree_level_width(kmax, mix.tree_size)) if (mix.tree_size and w.by_level) else 1
        pf = mix.is_prefill & w.drafts_prompt
        model = self.drafter
        for j in range(kmax):
            active = ks > j
            c = ctx[active] + j * width
            if w.context_cap is not None:
                c = np.minimum(c, w.context_cap)
            n = int(active.sum())
            q = np.full(n, width, dtype=np.int64)
            if j == 0 and pf.any():
                q = np.concatenate([q, mix.q_lens[pf]])
                c = np.concatenate([c, mix.ctx_lens[pf]])
                g = np.concatenate([np.full(n, width, dtype=np.int64), mix.logit_lens[pf]])
            else:
                g = q
            total += model(q, c, g)
            if w.projection_params:
                total += float(dense_time_s(w.projection_params, n * width,
                                            weight_bytes_per_param=self.target_model.weight_bytes_per_param,
                                            hw=self.hw, eff=self.dep.eff, dtype=self.target_model.compute_dtype,
                                            tp=w.pass_tp))
        return total

    def verify_extra_s(self, mix: IterationMix) -> float:
        """Work the family adds inside the verify pass (Medusa's heads on every verified position)."""
        w = self.work
        if w is None or not w.verify_head_params:
            return 0.0
        spec = mix.draft_k > 0
        if not spec.any():
            return 0.0
        positions = float(mix.q_lens[spec].sum())
        return float(dense_time_s(w.verify_head_params, positions,
                                  weight_bytes_per_param=self.target_model.weight_bytes_per_param, hw=self.hw,
                                  eff=self.dep.eff, dtype=self.target_model.compute_dtype, tp=self.dep.tp,
                                  extra_bytes=positions * w.verify_head_logit_rows * self.target_model.vocab_size * 4.0))

    def device_overhead_s(self, mix: IterationMix) -> float:
        """Device work of a speculative cycle beyond drafting and verifying: reading the extra
        logits, and a tree's KV compaction (speculation.cycle.device_cycle_overhead_s)."""
        spec = mix.draft_k > 0
        if self.work is None or not spec.any():
            return 0.0
        n = int(spec.sum())
        extra_positions = float(mix.q_lens[spec].sum()) - n
        over = extra_positions * self._logit_s_per_extra_position
        if mix.tree_size:
            over += n * self.expected_tokens(int(mix.draft_k[spec].max()), mix) * self._compact_s_per_token
        return over

    def host_s(self, mix: IterationMix) -> float:
        """The engine's host work for the iteration (the stack's [host] model and cycle overhead)."""
        spec = mix.draft_k > 0
        n_spec = int(spec.sum()) if self.work is not None else 0
        drafted = float(mix.q_lens[spec].sum()) - n_spec if n_spec else 0.0
        passes = int(mix.draft_k.max()) if (n_spec and self.work.pass_model is not None and self.work.n_passes == "k") else 0
        return float(self.dep.host_time_s(n_seqs=mix.n_seqs, n_tokens=float(mix.q_lens.sum()), n_spec_seqs=n_spec,
                                          n_draft_tokens=drafted, n_draft_passes=passes))

    def device_s(self, mix: IterationMix) -> float:
        return self.target_time_s(mix) + self.draft_time_s(mix) + self.verify_extra_s(mix) + self.device_overhead_s(mix)

    def overhead_s(self, mix: IterationMix) -> float:
        """Everything of the iteration beyond the target's pass and the drafting (as the analytical
        cycle's overhead_s counts it)."""
        return self(mix) - self.target_time_s(mix) - self.draft_time_s(mix) - self.verify_extra_s(mix)

    def expected_tokens(self, k: int, mix: IterationMix) -> float:
        """E[tokens per cycle] at depth K (a tree's compaction moves that many rows)."""
        ctx = self.op.context_len
        if self._context_dependent:
            ctx = int(round(float(mix.ctx_lens[mix.draft_k > 0].mean())))
        key = (k, ctx)
        if key not in self._tau_cache:
            self._tau_cache[key] = tokens_per_cycle_at(self.op, k=k, tree_size=mix.tree_size or None, context_len=ctx)
        return self._tau_cache[key]

    def __call__(self, mix: IterationMix) -> float:
        speculative = self.work is not None and bool((mix.draft_k > 0).any())
        return float(self.dep.iteration_time_s(self.device_s(mix), self.host_s(mix), speculative=speculative))


__all__ = ["ServingCost", "FastStep", "mix_features"]
