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

Load regimes (`specs.regimes`, the stack's `[[load_regime]]` entries at the scenario's
`stack_version`; none apply without a stack, and without a version only the "*" entries do):
- a pass past its kind's CUDA-graph capture size runs eagerly, and lasts at least its launches:
  max(its device work, layers × eager_layer_s) — the target pass as target_decode, verify or mixed
  (a batch with prefill tokens), the drafting passes as draft, the drafter's catch-up as
  draft_extend;
- the regimes' overlap replaces the stack's [host] overlap, plain and speculating (folded into the
  deployment's host model by `operating_point.regime_host`, as the analytical cycle reads it);
- an MLA target whose verification takes the prefill path pays, per verifying sequence and cached
  token, the latent's up-projection to keys and values (2·kv_lora_rank·heads·(qk_nope + v_head) FLOP
  per layer, heads split over the group) and the expanded keys and values written and read back
  ((qk_nope + qk_rope + v_head)·heads 16-bit values, twice), at the deployment's fractions of the
  part's peaks; the score FLOPs of the unabsorbed form are not added (at most K + 1 queries a row,
  against a 512-wide expansion of every cached token);
- with dynamic_k=True (a per-batch-size K schedule enabled), the device time grows by the
  regimes' dynamic-K tax at the iteration's batch;
- a stack calibrated on a load sweep (`calibrate load`) scales every iteration's device time by its
  `device_scale`, adds `device_per_seq_us` per sequence and `device_per_token_us` per token the
  iteration is expected to emit (`emitted_tokens`: one a row that does not speculate, τ at its K a
  speculating one).
`regimes_for(op)` resolves them; `ServingCost.regimes` holds them, and with none in force the
cost is exactly the analytical one.

Speed: a step's time splits into parts that depend on one sum over the mix each (tokens, logit
tokens) and an attention term in two more (KV-read tokens, query–key pairs), so `FastStep` tabulates
the first two once per model (the measured GEMM curves included) and prices attention in closed
form, checked against `mixed_step_cost` on a set of mixes; when the check fails the exact function
is called instead.
"""
from __future__ import annotations

import numpy as np

from ..cost.pricing import (cycle_overhead_rates, dense_time_s, masked_score_time_s, mla_prefill_verify_s,
                            source_for)
from ..cost.shape import PassShape
from ..specs.regimes import Regimes
from ..speculation.families import pass_efficiency, pass_widths
from ..speculation.operating_point import OperatingPoint, stack_regimes
from ..speculation.predict import tokens_per_cycle_at
from .mix import IterationMix

_CLASSES = ("weights", "attention", "kv_write", "lm_head", "activations")


def mix_features(q: np.ndarray, l: np.ndarray, g: np.ndarray) -> tuple[float, float, float, float, float]:
    """(sequences, tokens, logit tokens, fused KV-read tokens, causal query-key pairs) of a mix."""
    sq, sl, sg = int(q.sum()), int(l.sum()), int(g.sum())
    return (float(q.size), float(sq), float(sg), float(sl + sq), float(int(q @ l) + (int(q @ q) + sq) / 2.0))


class FastStep:
    """A fast twin of one pass source (`cost.pricing.source_for`) for the simulator's hot path.

    A pass's time is token_time(T) + logit_time(G) + attention(S, T, R, P and the prompt-chunk rows'
    share) + fixed (`cost.shape.PassShape`'s sums). The first two depend on one count each, so they are
    tabulated once over 0..T_max (the table grows on demand); attention is the source's own scalar
    function. The twin is checked against the source's exact price on a set of mixes and `ok` is False
    (every call goes to the exact price) if any differs by more than 1e-9."""

    CHECKS = [([1], [0], [1]), ([1, 1, 1], [100, 50, 7], [1, 1, 1]), ([5], [1000], [0]), ([17, 3], [0, 4000], [1, 3]),
              ([256], [2048], [256]), ([2000], [0], [1]), ([1] * 8, [300] * 8, [1] * 8),
              ([5] * 256, list(range(0, 256 * 40, 40)), [5] * 256), ([8192], [0], [1]),
              ([1, 3, 900], [77, 6000, 123], [1, 3, 0]), ([1], [131000], [1])]

    def __init__(self, source, *, exact: bool = False, max_tokens: int = 8192):
        self.source = source
        self.model = source.model
        self.attention = getattr(source, "attention", "fused")
        self.window = self.model.sliding_window or 0
        self._tokens = np.zeros(0)
        self._logits = np.zeros(0)
        self.fixed = float(source.fixed_s)
        self._attn = source.attention_s
        self.ok = not exact
        if not self.ok:
            return
        self._grow(max_tokens)
        for q, l, g in self.CHECKS:
            for pf in (None, [i == len(q) - 1 and len(q) > 1 for i in range(len(q))]):
                exact_t = self.exact(q, l, g, pf)
                if abs(self(q, l, g, pf) - exact_t) > 1e-9 * exact_t:
                    self.ok = False
                    return

    def _grow(self, n: int) -> None:
        """Tables of the source's token and logit times over 0..n (at least doubling)."""
        size = max(n + 1, 2 * self._tokens.size)
        counts = np.arange(size, dtype=np.float64)
        self._tokens = np.asarray(self.source.token_time_s(counts), dtype=np.float64)
        self._logits = np.asarray(self.source.logit_time_s(counts), dtype=np.float64)

    def time(self, s: float, t: float, g: float, r: float, p: float, ps: float = 0.0, pt: float = 0.0,
             pr: float = 0.0, pp: float = 0.0) -> float:
        """Pass time from the mix sums (sequences s, tokens t, logit tokens g, KV-read tokens r, pairs p;
        ps..pp: the prompt-chunk rows' share of each)."""
        ti, gi = int(t), int(g)
        if ti >= self._tokens.size or gi >= self._tokens.size:
            self._grow(max(ti, gi))
        return float(self._tokens[ti]) + float(self._logits[gi]) + self._attn(s, t, r, p, ps, pt, pr, pp) + self.fixed

    def passes(self, n: int, w: int, s: float, k: int) -> float:
        """K drafting passes of n rows, w tokens each, pass j at contexts summing to s + n·j·w (the
        sum of `time` over the passes, fused attention): the tables are read once."""
        t = n * w
        if t >= self._tokens.size:
            self._grow(t)
        per = float(self._tokens[t]) + float(self._logits[t]) + self.fixed
        half = n * (w * w + w) / 2.0
        attn = self._attn
        total = k * per
        for j in range(k):
            base = s + n * j * w
            total += attn(n, t, base + t, w * base + half)
        return total

    def exact(self, q, l, g, pf=None) -> float:
        return float(self.source.price(PassShape.of_mix(
            self.model, q_lens=np.asarray(q, dtype=np.int64), context_lens=np.asarray(l, dtype=np.int64),
            logit_lens=np.asarray(g, dtype=np.int64), is_prefill=pf, attention=self.attention)).time_s)

    def __call__(self, q, l, g, pf=None) -> float:
        """Pass time of the mix given as arrays (query tokens, cached context, logit tokens, and which
        rows are prompt chunks: None for none)."""
        if not self.ok:
            return self.exact(q, l, g, pf)
        q, l, g = np.asarray(q, dtype=np.int64), np.asarray(l, dtype=np.int64), np.asarray(g, dtype=np.int64)
        if self.window:
            l = np.minimum(l, self.window)
        fused = self.attention == "fused"
        s, t, gg, r, p = mix_features(q, l, g)
        if not fused:
            r = p  # a naive kernel re-reads a key per query: R = P
        if pf is None:
            return self.time(s, t, gg, r, p)
        pf = np.asarray(pf, dtype=bool)
        if not pf.any():
            return self.time(s, t, gg, r, p)
        ps_, pt_, _, pr_, pp_ = mix_features(q[pf], l[pf], g[pf])
        return self.time(s, t, gg, r, p, ps_, pt_, pr_ if fused else pp_, pp_)


class _DenseTable:
    """A dense block's time (`cost.pricing.dense_time_s`) tabulated over whole token counts."""

    def __init__(self, fn):
        self.fn = fn
        self.table = np.asarray(fn(np.arange(1024, dtype=np.float64)), dtype=np.float64)

    def __call__(self, n_tokens: float) -> float:
        i = int(n_tokens)
        if i >= self.table.size:
            self.table = np.asarray(self.fn(np.arange(max(i + 1, 2 * self.table.size), dtype=np.float64)))
        return float(self.table[i])


def _sum_ctx(mix: IterationMix) -> float:
    """Σ context over the mix, computed once per mix."""
    s = mix.sum_ctx
    if s is None:
        s = mix.sum_ctx = float(np.add.reduce(mix.context_lens))
    return s


def regimes_for(op: OperatingPoint) -> Regimes:
    """The load regimes of the point's stack at the scenario's stack_version (none without a stack)."""
    version = getattr(op.scenario, "stack_version", None) if op.scenario is not None else None
    return stack_regimes(op.stack, version=version, n_devices=op.deployment.n_devices, hardware=op.hardware,
                         target=op.target)


def regime_advice(op: OperatingPoint, *, batch: float | None = None, rate_per_s: float | None = None
                  ) -> tuple[list[str], list[str]]:
    """(what would change the answer, notes) from the point's load regimes: the unmeasured regimes in
    force and those that depend on a stack version the scenario does not name; and, for a stack
    calibrated on a load sweep, where it was calibrated and a warning when `batch` (or, for a rate
    sweep, `rate_per_s`) lies outside the loads it covered. For advise, report and capacity."""
    from ..specs.regimes import calibration_notes

    rg = regimes_for(op)
    return list(rg.open_questions), calibration_notes(rg, batch=batch, rate_per_s=rate_per_s)


class ServingCost:
    """Seconds per iteration for an operating point (see the module docstring).

    exact=True calls mixed_step_cost every time instead of the fitted twins (tests compare both).
    dynamic_k: a per-batch-size K schedule is enabled (its tax applies where the regimes give one)."""

    def __init__(self, op: OperatingPoint, *, exact: bool = False, dynamic_k: bool = False):
        self.op = op
        dep = op.deployment
        self.hw, self.target_model, self.dep = op.hardware, op.target, dep
        self.regimes = regimes_for(op)
        rg = self.regimes
        self.dynamic_k = bool(dynamic_k)
        self.target = FastStep(source_for(op.target, dep, target=True), exact=exact)  # hops in its fixed time
        self.work = op.work if op.speculative else None
        w = self.work
        # a drafting pass at the family's own efficiency: a head pass pays the stack's [drafting] head-pass
        # cost in place of a model step's overhead (speculation.families.pass_efficiency, as draft_cost)
        self.drafter = (FastStep(source_for(w.pass_model, dep, tp=w.pass_tp, efficiency=pass_efficiency(w, dep)),
                                 exact=exact)
                        if w is not None and w.pass_model is not None else None)
        # the reference repos' masked eager verify: device bytes per attention score (families.masked_score_time_s)
        self._masked = bool(w is not None and w.masked_verify and dep.drafting.masked_score_bytes)
        self._widths = {}  # (kmax, tree_size) -> the first pass's and the later passes' widths (families.pass_widths)
        # EAGLE/MTP's input projection, a dense block of the target's format, by the target's source at the pass's tp
        self._projection_s = (_DenseTable(lambda t: dense_time_s(op.target, dep, w.projection_params, t, tp=w.pass_tp))
                              if w is not None and w.projection_params else None)
        # per-cycle device terms (cost.pricing.device_cycle_overhead_s): reading the extra fp32 logits per
        # verified position, a tree's compaction per accepted token
        self._logit_s_per_extra_position, self._compact_s_per_token = cycle_overhead_rates(op.target, dep)
        self._context_dependent = (op.acceptance.model is not None and
                                   op.acceptance.model.context_decay_per_token != 0.0)
        self._tau_cache: dict = {}
        t = self.target
        self._target_closed = t.ok and not t.window and t.attention == "fused"
        # the regimes' overlap is already in the host model (operating_point.regime_host), one answer for every path
        self._overlaps = {True: bool(dep.host.overlaps(True)), False: bool(dep.host.overlaps(False))}
        self._host_memo: dict = {}
        self._passes = w is not None and w.pass_model is not None and w.n_passes == "k"
        # the common drafting iteration in closed form (_draft's first branch): chains of one K on every row,
        # a fused full-context drafter without an input projection
        d = self.drafter
        self._chain_closed = bool(self._passes and d is not None and d.attention == "fused" and not d.window
                                  and d.ok and w.context_cap is None and not w.projection_params)
        # regimes that change a pass's device time (None of them: the device time is the analytical one)
        self._eager_target_s = op.target.n_layers * rg.eager_layer_s
        self._eager_draft_s = (w.pass_model.n_layers * rg.eager_layer_s
                               if w is not None and w.pass_model is not None else 0.0)
        self._mla_prefill = (op.target.mla is not None and rg.verify_path.get("mla") == "prefill")
        self._device_regimes = bool(self._eager_target_s or self._eager_draft_s or self._mla_prefill
                                    or (self.dynamic_k and rg.dynamic_k_tax is not None))
        # a load calibration's device terms, as the deployment holds them (cost.deployment: the analytical
        # cycle and the switch-off apply the same ones)
        self._calibrated = ((dep.device_scale, dep.device_per_seq_s, dep.device_per_token_s) if dep.calibrated
                            else None)

    # -- parts
    def target_time_s(self, mix: IterationMix) -> float:
        uq = mix.uniform_q
        if uq and self._target_closed:
            # every row has q = uq query tokens and logits: T = G = n·uq, R = S + T,
            # P = uq·S + n·(uq² + uq)/2 (mix_features in closed form)
            n = mix.q_lens.size
            s = _sum_ctx(mix)
            t = n * uq
            return self.target.time(n, t, t, s + t, uq * s + n * (uq * uq + uq) / 2.0)
        return self.target(mix.q_lens, mix.context_lens, mix.logit_lens, mix.is_prefill if mix.n_prefill else None)

    def draft_time_s(self, mix: IterationMix) -> float:
        """Drafting outside the verify pass: the family's passes and host search."""
        return self._draft(mix)[0]

    def catchup_time_s(self, mix: IterationMix) -> float:
        """The part of draft_time_s spent on the drafter's catch-up tokens (`IterationMix.catchup`)."""
        return self._draft(mix)[1]

    def _draft(self, mix: IterationMix) -> tuple[float, float]:
        """(drafting time, of which catch-up). Pass j runs the rows drafting more than j tokens, w
        tokens each at context + j·w; pass 0 also runs the drafter over each drafting row's catch-up
        tokens (q = w + c at context − c) and over the prefill rows (catch-up + chunk from its cached
        tokens) when the drafter keeps a cache and runs this iteration."""
        w = self.work
        if w is None:
            return 0.0, 0.0
        dk = mix.draft_k
        n_pf = mix.n_prefill
        on = mix.drafter_on
        n = mix.n_spec
        if n is None:
            n = int(np.count_nonzero(dk))
        if on is None:
            on = n > 0
        if not on:
            return 0.0, 0.0
        if self._chain_closed and n and mix.uniform_q and not n_pf and n == dk.size:
            # the general path below, taken for every row drafting one K, one width a pass: the same terms
            # in the same order (the passes' closed form, then pass 0's catch-up increment)
            kmax = int(dk[0])
            widths = self._widths.get((kmax, mix.tree_size))
            if widths is not None and widths[0] == widths[1]:
                cu = mix.catchup
                cs = 0
                if cu is not None:
                    cs = int(np.add.reduce(cu))
                    mix.sum_catchup = cs
                total = 0.0
                if w.host_s_per_seq_per_ktoken:
                    total += w.host_s_per_seq_per_ktoken * float(np.maximum(mix.context_lens, 1).sum()) / 1000.0
                width = widths[0]
                s0 = _sum_ctx(mix)
                model = self.drafter
                total += model.passes(n, width, s0, kmax)
                catchup_s = 0.0
                if cs:
                    t0 = n * width
                    base = s0 + t0
                    p0 = width * s0 + n * ((width * width + width) / 2.0)
                    ctx = mix.context_lens
                    dp = float(np.dot(cu, ctx)) - float(np.dot(cu, cu)) / 2.0 + cs / 2.0
                    catchup_s += model.time(n, t0 + cs, t0, base, p0 + dp) - model.time(n, t0, t0, base, p0)
                return total + catchup_s, catchup_s
        total = 0.0
        every = n == dk.size
        spec = None if every else dk > 0
        ctx = mix.context_lens if every else mix.context_lens[spec]
        if n and w.host_s_per_seq_per_ktoken:
            total += w.host_s_per_seq_per_ktoken * float(np.maximum(ctx, 1).sum()) / 1000.0
        if self.drafter is None or w.n_passes != "k":
            return total, 0.0
        pf = mix.is_prefill if (n_pf and w.drafts_prompt) else None
        cu = mix.catchup
        c = None
        if cu is not None and n:
            c = cu if every else cu[spec]
            cs = int(np.add.reduce(c))
            if every and not n_pf:
                mix.sum_catchup = cs
            if not cs:
                c = None
        catchup_s = 0.0
        model = self.drafter
        fused = model.attention == "fused" and not model.window and model.ok
        if n:
            ks = dk if every else dk[spec]
            if every and mix.uniform_q:
                kmax, uniform = int(ks[0]), True
            else:
                kmax = int(ks.max())
                uniform = int(ks.min()) == kmax
            # the first pass's width and the later passes' (families.pass_widths: a dynamic tree with a top-k
            # drafts one token's children first, then top-k tokens a level); pass j sees context + off(j)
            widths = self._widths.get((kmax, mix.tree_size))
            if widths is None:
                widths = self._widths[(kmax, mix.tree_size)] = tuple(
                    int(x) for x in pass_widths(w, kmax, mix.tree_size or None))
            w0, wl = widths
            width = w0

            def offset(j: int) -> int:
                return 0 if j == 0 else w0 + (j - 1) * wl

            if fused and w.context_cap is None:
                # closed form: per pass, tokens T = n_j·w, KV reads R = S_j + n_j·j·w + T, pairs
                # P = w·(S_j + n_j·j·w) + n_j·(w² + w)/2, with n_j, S_j the count and context sum of
                # the rows drafting more than j tokens
                summed = False
                if uniform and not w.projection_params and w0 == wl:
                    s0 = _sum_ctx(mix) if every else float(np.add.reduce(ctx))
                    cnt, sums = [n], [s0]
                    total += model.passes(n, width, s0, kmax)
                    summed = True
                elif uniform:
                    cnt = [n] * kmax
                    sums = [_sum_ctx(mix) if every else float(np.add.reduce(ctx))] * kmax
                else:
                    cnt_k = np.bincount(ks, minlength=kmax + 1)
                    sum_k = np.bincount(ks, weights=ctx, minlength=kmax + 1)
                    cnt = np.cumsum(cnt_k[::-1])[::-1][1:].tolist()
                    sums = np.cumsum(sum_k[::-1])[::-1][1:].tolist()
                half = (w0 * w0 + w0) / 2.0
                for j in (() if summed else range(kmax)):
                    wj = w0 if j == 0 else wl
                    nj, sj = cnt[j], sums[j]
                    t = nj * wj
                    base = sj + nj * offset(j)
                    total += model.time(nj, t, t, base + t, wj * base + nj * (wj * wj + wj) / 2.0)
                    if w.projection_params:
                        total += self._projection_s(t)
            else:
                for j in range(kmax):
                    wj = w0 if j == 0 else wl
                    active = ks > j
                    cj = ctx[active] + offset(j)
                    if w.context_cap is not None:
                        cj = np.minimum(cj, w.context_cap)
                    q = np.full(cj.size, wj, dtype=np.int64)
                    total += model(q, cj, q)
                    if w.projection_params:
                        total += self._projection_s(cj.size * wj)
            if c is not None and fused and w.context_cap is None:
                # pass 0 over w + c tokens from context − c instead of w from context: T grows by Σc,
                # G and R stay, P grows by Σ[c·ctx − c²/2 + c/2] (the causal pairs of the longer query)
                n0, s0 = cnt[0], sums[0]
                t0 = n0 * width
                base = s0 + t0
                p0 = width * s0 + n0 * half
                dp = float(np.dot(c, ctx)) - float(np.dot(c, c)) / 2.0 + cs / 2.0
                catchup_s += model.time(n0, t0 + cs, t0, base, p0 + dp) - model.time(n0, t0, t0, base, p0)
            elif c is not None:  # pass 0 over w + c tokens from context − c, instead of w from context
                q0 = np.full(n, width, dtype=np.int64)
                c0 = ctx if w.context_cap is None else np.minimum(ctx, w.context_cap)
                with_c = model(q0 + c, c0 - c, q0)
                catchup_s += with_c - model(q0, c0, q0)
                if w.projection_params:
                    catchup_s += self._projection_s(n * width + float(c.sum())) - self._projection_s(n * width)
        if pf is not None:
            # the drafter runs over the prefill chunks (and what it missed of them) in its first pass;
            # priced as the increment over pass 0 alone
            q_pf = mix.q_lens[pf]
            l_pf = mix.context_lens[pf]
            g_pf = mix.logit_lens[pf]
            c_pf = cu[pf] if cu is not None else None
            if c_pf is not None:
                q_pf, l_pf = q_pf + c_pf, l_pf - c_pf
            if n:
                q0 = np.full(n, width, dtype=np.int64)
                c0 = ctx if w.context_cap is None else np.minimum(ctx, w.context_cap)
                if c is not None:
                    q0, c0 = q0 + c, c0 - c
                g0 = np.full(n, width, dtype=np.int64)
                alone = model(q0, c0, g0)
                both = model(np.concatenate([q0, q_pf]), np.concatenate([c0, l_pf]), np.concatenate([g0, g_pf]),
                             np.concatenate([np.zeros(n, dtype=bool), np.ones(q_pf.size, dtype=bool)]))
                extra = both - alone
            else:
                extra = model(q_pf, l_pf, g_pf, np.ones(q_pf.size, dtype=bool))
            if w.projection_params:
                if n:
                    base = n * width + (float(c.sum()) if c is not None else 0.0)
                    extra += self._projection_s(base + float(q_pf.sum())) - self._projection_s(base)
                else:
                    extra += self._projection_s(float(q_pf.sum()))
            part = 0.0
            if c_pf is not None and c_pf.any():  # the prefill tokens it had missed, at the same rate
                tok = float(q_pf.sum())
                part = extra * float(c_pf.sum()) / tok if tok else 0.0
            total += extra - part
            catchup_s += part
        return total + catchup_s, catchup_s

    def verify_extra_s(self, mix: IterationMix) -> float:
        """Work the family adds inside the verify pass: Medusa's heads on every verified position, and the
        scores a masked eager verify materialises (`families.masked_score_time_s`, per speculating row)."""
        w = self.work
        if w is None or not (w.verify_head_params or self._masked):
            return 0.0
        spec = mix.draft_k > 0
        if not spec.any():
            return 0.0
        masked = 0.0
        if self._masked:
            masked = float(np.sum(masked_score_time_s(self.target_model, self.dep, batch_size=1,
                                                      q_len=mix.q_lens[spec], context_len=mix.context_lens[spec])))
        if not w.verify_head_params:
            return masked
        positions = float(mix.q_lens[spec].sum())
        return masked + float(dense_time_s(self.target_model, self.dep, w.verify_head_params, positions,
                                           extra_bytes=positions * w.verify_head_logit_rows
                                           * self.target_model.vocab_size * 4.0))

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
        if self._device_regimes or self._calibrated is not None:
            return self.parts(mix)[0]
        return self.target_time_s(mix) + self.draft_time_s(mix) + self.verify_extra_s(mix) + self.device_overhead_s(mix)

    def overhead_s(self, mix: IterationMix) -> float:
        """Everything of the iteration beyond the target's pass and the drafting (as the analytical
        cycle's overhead_s counts it)."""
        return self(mix) - self.target_time_s(mix) - self.draft_time_s(mix) - self.verify_extra_s(mix)

    def expected_tokens(self, k: int, mix: IterationMix) -> float:
        """E[tokens per cycle] at depth K (a tree's compaction moves that many rows)."""
        ctx = self.op.context_len
        if self._context_dependent:
            ctx = int(round(float(mix.context_lens[mix.draft_k > 0].mean())))
        key = (k, ctx)
        if key not in self._tau_cache:
            self._tau_cache[key] = tokens_per_cycle_at(self.op, k=k, tree_size=mix.tree_size or None, context_len=ctx)
        return self._tau_cache[key]

    def emitted_tokens(self, mix: IterationMix, n_spec: int | None = None, kmax: int | None = None) -> float:
        """Tokens the iteration is expected to emit: one a row that does not speculate, the expected
        tokens per cycle (τ at the deepest K) a speculating one."""
        if n_spec is None:
            spec = mix.draft_k > 0
            n_spec = int(np.count_nonzero(spec)) if self.work is not None else 0
            kmax = int(mix.draft_k.max()) if n_spec else 0
        n = mix.q_lens.size
        if not n_spec:
            return float(n)
        return float(n - n_spec) + n_spec * self.expected_tokens(int(kmax), mix)

    def parts(self, mix: IterationMix) -> tuple[float, float, float, bool]:
        """(device seconds, host seconds, of the device the drafter's catch-up, whether the two overlap)
        of one iteration: the device's passes and per-cycle work (with the load regimes in force),
        the engine's host work, and whether the stack hides one behind the other."""
        ns = mix.n_spec
        if self.work is None:
            ns, pos, kmax = 0, 0.0, 0
        elif ns is None or (ns and not mix.uniform_q):
            spec = mix.draft_k > 0
            ns = int(np.count_nonzero(spec))
            pos = float(mix.q_lens[spec].sum()) if ns else 0.0
            kmax = int(mix.draft_k.max()) if ns else 0
        else:
            pos = float(ns * mix.uniform_q)
            kmax = int(mix.draft_k[0]) if ns else 0
        device = self.target_time_s(mix)
        c = d = 0.0
        if self.work is not None:
            d, c = self._draft(mix)
        if self._device_regimes:
            device, d, c = self._regime_passes(mix, ns, kmax, device, d, c)
        if self.work is not None:
            device += d
            if ns:
                if self.work.verify_head_params or self._masked:
                    device += self.verify_extra_s(mix)
                device += (pos - ns) * self._logit_s_per_extra_position
                if mix.tree_size:
                    device += ns * self.expected_tokens(kmax, mix) * self._compact_s_per_token
        if self._calibrated is not None:
            scale, per_seq, per_token = self._calibrated
            n = mix.q_lens.size
            device = device * scale + per_seq * n
            if per_token:
                device += per_token * self.emitted_tokens(mix, ns, kmax)
            c *= scale
        if self.dynamic_k and self.regimes.dynamic_k_tax is not None:
            device *= 1.0 + self.regimes.dynamic_k_frac(mix.q_lens.size)
        n_tok = float(mix.q_lens.size * mix.uniform_q) if mix.uniform_q else float(np.add.reduce(mix.q_lens))
        # a cycle in which the proposer found nothing for any row is still a cycle (its overhead, its overlap)
        cycle = ns > 0 or (self.work is not None and bool(mix.speculating))
        key = (mix.q_lens.size, n_tok, ns, pos - ns, kmax if (ns and self._passes) else 0, cycle)
        host = self._host_memo.get(key)
        if host is None:
            host = float(self.dep.host_time_s(n_seqs=key[0], n_tokens=key[1], n_spec_seqs=key[2],
                                              n_draft_tokens=key[3] if ns else 0.0, n_draft_passes=key[4],
                                              speculating=cycle))
            if len(self._host_memo) > 200_000:
                self._host_memo.clear()
            self._host_memo[key] = host
        return device, host, c, self._overlaps[cycle]

    def _regime_passes(self, mix: IterationMix, ns: int, kmax: int, target_s: float, draft_s: float,
                       catchup_s: float) -> tuple[float, float, float]:
        """(target pass, drafting with catch-up, catch-up) seconds under the load regimes: a pass past its
        kind's graph capture lasts at least its eager launches; an MLA verification on the prefill path
        pays the latent's up-projection (see the module docstring)."""
        rg = self.regimes
        n = mix.q_lens.size
        if self._eager_target_s:
            tokens = int(n * mix.uniform_q) if mix.uniform_q else int(np.add.reduce(mix.q_lens))
            kind = "mixed" if mix.n_prefill else ("verify" if ns else "target_decode")
            if not rg.graph_captured(kind, n_seqs=n, n_tokens=tokens) and target_s < self._eager_target_s:
                target_s = self._eager_target_s
        if ns and self._mla_prefill:
            spec = mix.draft_k > 0
            cached = float(mix.context_lens[spec].sum()) if ns < n else _sum_ctx(mix)
            target_s += mla_prefill_verify_s(self.target_model, self.hw, self.dep.eff, tp=self.dep.tp,
                                             cached_tokens=cached)
        if ns and self._eager_draft_s and draft_s > 0:
            passes_s = draft_s - catchup_s
            if not rg.graph_captured("draft", n_seqs=ns, n_tokens=ns) and passes_s < kmax * self._eager_draft_s:
                passes_s = kmax * self._eager_draft_s
            if catchup_s > 0 and not rg.graph_captured("draft_extend", n_seqs=ns, n_tokens=ns) \
                    and catchup_s < self._eager_draft_s:
                catchup_s = self._eager_draft_s
            draft_s = passes_s + catchup_s
        return target_s, draft_s, catchup_s

    def breakdown(self, mix: IterationMix) -> tuple[float, float]:
        """(iteration seconds, of which the drafter's catch-up on device): `parts` combined as
        Deployment.iteration_time_s does, the host work added or hidden behind the device's."""
        device, host, c, overlapped = self.parts(mix)
        if overlapped:
            return (device if device > host else host), c
        return device + host, c

    def __call__(self, mix: IterationMix) -> float:
        return self.breakdown(mix)[0]


__all__ = ["ServingCost", "FastStep", "mix_features", "regimes_for", "regime_advice"]
