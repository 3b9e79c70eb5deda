"""When to switch speculation off: one answer per operating point, labelled with what it assumes.

As the running batch B grows, continuous batching fills the arithmetic units speculation relied on,
and a verify pass of B·(K + 1) tokens stops being nearly free. `switch_off_point` finds the smallest
batch from which speculation no longer pays at least 1 + margin, under stated assumptions:

- K: the operating point's K, or K re-tuned per batch (the best of 1..k_max at each B);
- view: decode only (B sequences decoding, nothing else in the iteration), or under a workload —
  with chunked prefill the prompts of arriving requests share the iterations. In a steady state the
  prompt tokens processed per output token emitted equal the workload's mean prompt / mean output
  length (flow balance), so an iteration that emits B·τ tokens also carries B·τ·p̄/ō prompt tokens
  (τ = 1 without speculation): speculation's bigger iterations carry more prefill, and the verify
  pass leaves the bandwidth plateau at a smaller B. A drafter that keeps its own cache (a draft
  model, an EAGLE or MTP head) also runs over those prompt tokens. Decoding sequences sit at the
  workload's output-weighted mean context, E[o·(p + o/2)] / E[o].
- memory: speculation needs its drafter and slots to fit; past the largest batch that fits with
  them it cannot run, whatever its speed (`memory_limited`).

The serving simulator's comparison of gates (`specsim simulate`) checks the workload view; the
threshold command, the sweep plot and the report all print this one function's answer.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cost.pricing import dense_time_s, device_cycle_overhead_s, masked_score_time_s, price_mix
from ..errors import field_error
from .families import pass_efficiency, pass_widths, verify_q_len
from .operating_point import OperatingPoint
from .predict import grid, tokens_per_cycle_at

DEFAULT_K_MAX = 8
DEFAULT_BATCH_LIMIT = 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadMix:
    """What a serving workload puts beside the decoding sequences of an iteration.

    mean_prompt_tokens p̄, mean_output_tokens ō: per request; decode_context_len: the context a
    decoding sequence sits at, averaged over decode steps (E[o·(p + o/2)] / E[o]); source: the
    workload's description."""

    mean_prompt_tokens: float
    mean_output_tokens: float
    decode_context_len: float
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("mean_prompt_tokens", "mean_output_tokens", "decode_context_len"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v >= (1.0 if name == "mean_output_tokens" else 0.0)):
                raise field_error("workload mix", name, v, "a finite token count (output >= 1)")

    @classmethod
    def from_lengths(cls, prompt_tokens, output_tokens, *, source: str = "") -> "WorkloadMix":
        p = np.asarray(prompt_tokens, dtype=float)
        o = np.asarray(output_tokens, dtype=float)
        if p.size == 0 or o.sum() <= 0:
            raise field_error("workload mix", "requests", p.size, "at least one request with output tokens")
        ctx = float((o * (p + o / 2.0)).sum() / o.sum())
        return cls(mean_prompt_tokens=float(p.mean()), mean_output_tokens=float(o.mean()), decode_context_len=ctx,
                   source=source)

    @property
    def prompt_per_output(self) -> float:
        return self.mean_prompt_tokens / self.mean_output_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class SwitchOff:
    """The switch-off point and everything it assumed.

    batch_off: speculation off for a running batch >= batch_off (None: it pays at every batch up to
    batch_limit); k_at_batch: the K it would run below batch_off (per batch when re-tuned);
    batch_sizes, speedup, best_k: the curve behind the answer (B = 1..limit, speedup with the K used);
    memory_limited: batch_off is where memory runs out, not where speed does."""

    batch_off: int | None
    margin: float
    retune_k: bool
    k: int
    view: str
    memory_limited: bool
    max_batch_speculative: int | None
    batch_limit: int
    batch_sizes: np.ndarray
    speedup: np.ndarray
    best_k: np.ndarray
    context_len: float
    workload: WorkloadMix | None = None

    @property
    def assumptions(self) -> str:
        k = "K re-tuned per batch" if self.retune_k else f"the scenario's K = {self.k}"
        mem = (f"memory: speculation fits up to batch {self.max_batch_speculative}"
               if self.max_batch_speculative is not None else "memory not limiting")
        return f"{self.view}, {k}, speedup ≥ {1 + self.margin:.2f}×, context {self.context_len:.0f}, {mem}"

    def label(self) -> str:
        if self.batch_off is None:
            what = f"pays at every batch to {self.batch_limit}"
        elif self.batch_off <= 1:
            what = "never pays (off at every batch)"
        else:
            what = f"off at batch ≥ {self.batch_off}" + (" (memory)" if self.memory_limited else "")
        return f"{what} [{self.assumptions}]"

    def to_dict(self) -> dict:
        return {"batch_off": self.batch_off, "margin": self.margin, "retune_k": self.retune_k, "k": self.k,
                "view": self.view, "memory_limited": self.memory_limited,
                "max_batch_speculative": self.max_batch_speculative, "context_len": self.context_len,
                "assumptions": self.assumptions, "label": self.label(),
                "workload": None if self.workload is None else {
                    "mean_prompt_tokens": self.workload.mean_prompt_tokens,
                    "mean_output_tokens": self.workload.mean_output_tokens,
                    "decode_context_len": self.workload.decode_context_len, "source": self.workload.source}}


def _decode_only_speedup(op: OperatingPoint, ks, bs, ctx) -> np.ndarray:
    g = grid(op, k=list(ks), batch_size=list(bs), context_len=[ctx])
    return g.speedup[:, 0, :, 0, 0]  # (nK, nB)


def _mixed_iteration_s(op: OperatingPoint, *, b: int, q: int, ctx: float, prefill_tokens: float, prompt_len: float,
                       k: int, draft: bool) -> float:
    """One serving iteration: b decoding sequences with q query tokens at context ctx, plus
    prefill_tokens of prompts of length prompt_len (chunked prefill), plus, when `draft`, the
    family's drafting passes (a drafter with its own cache also covers the prompt tokens)."""
    dep, target = op.deployment, op.target
    ctx_i = int(round(ctx))
    # P prompt tokens as n_p = ceil(P / p̄) chunks of q_p = P / n_p tokens, each at context
    # (p̄ − q_p) / 2: a prompt of p̄ tokens prefilled in chunks has p̄(p̄ + 1)/2 query-key pairs whatever
    # the chunking, i.e. (p̄ + 1)/2 per token, and this placement gives each chunk exactly that
    n_p = int(np.ceil(prefill_tokens / max(prompt_len, 1.0))) if prefill_tokens >= 1 else 0
    chunk = int(round(prefill_tokens / n_p)) if n_p else 0
    chunk_ctx = int(round(max(prompt_len - chunk, 0.0) / 2.0))
    q_lens = np.concatenate([np.full(b, q), np.full(n_p, chunk)]).astype(np.int64)
    context_lens = np.concatenate([np.full(b, ctx_i), np.full(n_p, chunk_ctx)]).astype(np.int64)
    logit = np.concatenate([np.full(b, q), np.ones(n_p)]).astype(np.int64)
    chunks = np.concatenate([np.zeros(b, dtype=bool), np.ones(n_p, dtype=bool)])
    t = float(price_mix(target, dep, q_lens=q_lens, context_lens=context_lens, logit_lens=logit, is_prefill=chunks,
                        target=True).time_s)
    n_tokens = int(q_lens.sum())
    if not draft:
        t = float(dep.calibrated_device_s(t, n_seqs=b + n_p, n_emitted=b + n_p))
        return float(dep.iteration_time_s(t, dep.host_time_s(n_seqs=b + n_p, n_tokens=n_tokens), speculative=False))
    cfg = op.drafter
    work = op.work
    tree = op.tree_size if op.is_tree else None
    w0, wl = (int(x) for x in pass_widths(work, k, tree))
    peff = pass_efficiency(work, dep)
    if work.has_passes:
        for j in range(k):
            w = w0 if j == 0 else wl
            c = ctx_i if j == 0 else ctx_i + w0 + (j - 1) * wl
            if work.context_cap is not None:
                c = min(c, work.context_cap)
            if work.pass_model is None:  # dense heads (Hydra)
                t += float(dense_time_s(target, dep, work.dense_pass_params, b * w, tp=work.pass_tp,
                                        extra_bytes=b * w * work.dense_pass_logit_vocab * 4.0)) + peff.step_overhead_s
                continue
            ql, cl, gl, pl = np.full(b, w), np.full(b, c), np.full(b, w), np.zeros(b, dtype=bool)
            if j == 0 and work.drafts_prompt and n_p:
                ql, cl, gl, pl = (np.concatenate([ql, np.full(n_p, chunk)]), np.concatenate([cl, np.full(n_p, chunk_ctx)]),
                                  np.concatenate([gl, np.ones(n_p)]), chunks)
            t += float(price_mix(work.pass_model, dep, q_lens=ql.astype(np.int64), context_lens=cl.astype(np.int64),
                                 logit_lens=gl.astype(np.int64), is_prefill=pl, tp=work.pass_tp,
                                 efficiency=peff).time_s)
            if work.projection_params:  # EAGLE/MTP's input projection over every token the pass runs
                t += float(dense_time_s(target, dep, work.projection_params, float(ql.sum()), tp=work.pass_tp))
    if work.host_s_per_seq_per_ktoken:
        t += b * work.host_s_per_seq_per_ktoken * max(ctx, 1.0) / 1000.0
    if work.verify_head_params:
        t += float(dense_time_s(target, dep, work.verify_head_params, b * q,
                                extra_bytes=b * q * work.verify_head_logit_rows * target.vocab_size * 4.0))
    if work.masked_verify and dep.drafting.masked_score_bytes:  # a masked eager verify (as draft_cost prices it)
        t += float(masked_score_time_s(target, dep, batch_size=b, q_len=q, context_len=ctx))
    tau = tokens_per_cycle_at(op, k=k, context_len=ctx)
    t += float(device_cycle_overhead_s(target, dep, batch_size=b, verify_q_len=q, tokens_per_cycle=tau,
                                       tree=tree is not None))
    t = float(dep.calibrated_device_s(t, n_seqs=b + n_p, n_emitted=b * tau + n_p))  # a load calibration's terms
    passes = k if work.has_passes else 0
    host = dep.host_time_s(n_seqs=b + n_p, n_tokens=n_tokens, n_spec_seqs=b, n_draft_tokens=b * (q - 1),
                           n_draft_passes=passes)
    return float(dep.iteration_time_s(t, host, speculative=True))


def workload_speedup(op: OperatingPoint, mix: WorkloadMix, *, b: int, k: int) -> float:
    """Per-sequence token rate speculating with K over plain decoding at running batch b, each mode
    carrying the prefill its own steady state implies (see the module docstring)."""
    ctx = mix.decode_context_len
    tau = tokens_per_cycle_at(op, k=k, context_len=ctx)
    cfg = op.drafter
    q = int(verify_q_len(cfg, op.work, k, op.tree_size if op.is_tree else None))
    r = mix.prompt_per_output
    plain = _mixed_iteration_s(op, b=b, q=1, ctx=ctx, prefill_tokens=b * r, prompt_len=mix.mean_prompt_tokens, k=0,
                               draft=False)
    spec = _mixed_iteration_s(op, b=b, q=q, ctx=ctx, prefill_tokens=b * tau * r, prompt_len=mix.mean_prompt_tokens,
                              k=k, draft=True)
    return (tau / spec) / (1.0 / plain)


def _first_below(bs: np.ndarray, s: np.ndarray, floor: float) -> int | None:
    idx = np.flatnonzero(s < floor)
    return None if idx.size == 0 else int(bs[idx[0]])


def switch_off_point(op: OperatingPoint, *, margin: float = 0.0, retune_k: bool = False, k_max: int = DEFAULT_K_MAX,
                     workload: WorkloadMix | None = None, max_batch_speculative: int | None = None,
                     batch_limit: int = DEFAULT_BATCH_LIMIT) -> SwitchOff:
    """The smallest running batch from which speculation should be off (see the module docstring).

    margin: require speedup >= 1 + margin to keep it on. retune_k: the best K of 1..k_max at each
    batch (else the point's K). workload: a WorkloadMix for the serving view (None: decode only).
    max_batch_speculative: the largest batch speculation fits at (default: the point's decode-only
    memory fit; the serving layer passes its KV capacity). batch_limit: the largest batch examined."""
    if not op.speculative:
        raise field_error(f"scenario {op.name!r}", "method", op.method, "a drafter family (nothing to switch off)")
    if not (np.isfinite(margin) and 0.0 <= margin < 10.0):
        raise field_error("switch-off", "margin", margin, "a safety margin in [0, 10) (0.1 = require 1.1×)")
    op.require_acceptance()
    ks = np.arange(1, k_max + 1) if (retune_k and op.drafter.family.uses_k) else np.array([op.k])
    mem_max = op.memory.max_batch_speculative if max_batch_speculative is None else max_batch_speculative
    limit = int(batch_limit)
    floor = 1.0 + margin
    if workload is None:
        ctx = float(op.context_len)
        bs = np.arange(1, limit + 1)
        s_all = _decode_only_speedup(op, ks, bs, op.context_len)
        best_i = np.argmax(s_all, axis=0)
        best = s_all[best_i, np.arange(bs.size)]
        view = "decode only"
    else:
        ctx = float(workload.decode_context_len)
        # coarse powers of two, then bisection inside the bracket where the best speedup crosses the floor
        coarse = np.unique(np.concatenate([2 ** np.arange(0, int(np.log2(limit)) + 1), [limit]])).astype(int)
        cache: dict = {}

        def best_at(b: int) -> tuple[float, int]:
            if b not in cache:
                vals = [workload_speedup(op, workload, b=b, k=int(k)) for k in ks]
                i = int(np.argmax(vals))
                cache[b] = (vals[i], int(ks[i]))
            return cache[b]

        for b in coarse:
            best_at(int(b))
        below = [b for b in coarse if best_at(int(b))[0] < floor]
        if below:
            hi = int(below[0])
            lo = int(coarse[np.searchsorted(coarse, hi) - 1]) if hi > 1 else 0
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if best_at(mid)[0] < floor:
                    hi = mid
                else:
                    lo = mid
        bs = np.array(sorted(cache))
        best = np.array([cache[b][0] for b in bs])
        best_k_vals = np.array([cache[b][1] for b in bs])
        best_i = np.searchsorted(ks, best_k_vals)
        view = f"under the workload ({workload.source or 'given'}: prompt/output {workload.prompt_per_output:.2f})"
    off = _first_below(bs, best, floor)
    memory_limited = False
    if mem_max is not None and mem_max < limit and (off is None or off > mem_max + 1):
        off, memory_limited = mem_max + 1, True
    return SwitchOff(batch_off=off, margin=margin, retune_k=bool(retune_k and op.drafter.family.uses_k), k=op.k,
                     view=view, memory_limited=memory_limited, max_batch_speculative=mem_max, batch_limit=limit,
                     batch_sizes=bs, speedup=best, best_k=ks[best_i], context_len=ctx, workload=workload)


__all__ = ["SwitchOff", "WorkloadMix", "switch_off_point", "workload_speedup"]
