"""When to switch speculation off: one answer per operating point, labelled with what it assumes.

As the running batch B grows, continuous batching fills the arithmetic units speculation relied on,
and a verify pass of B·(K + 1) tokens stops being nearly free. `switch_off_point` finds the smallest
batch from which speculation no longer pays at least 1 + margin, under stated assumptions:

- K: the operating point's K, or K re-tuned per batch (the best of 1..k_max at each B);
- view: decode only (B sequences decoding, nothing else in the iteration: the analytical grid,
  `speculation.predict.grid`), or under a workload — with chunked prefill the prompts of arriving
  requests share the iterations. In a steady state the prompt tokens processed per output token
  emitted equal the workload's mean prompt / mean output length (flow balance), so an iteration that
  emits B·τ tokens also carries B·τ·p̄/ō prompt tokens (τ = 1 without speculation): speculation's
  bigger iterations carry more prefill, and the verify pass leaves the bandwidth plateau at a smaller
  B. Each such iteration is priced by the serving simulator's own cost (`serving.cost.ServingCost`:
  the same passes, the drafter over the prompt tokens where it keeps a cache, the stack's load
  regimes, host work and calibration), so the view and the simulator price one iteration alike.
  Decoding sequences sit at the workload's output-weighted mean context, E[o·(p + o/2)] / E[o].
- memory: speculation needs its drafter and slots to fit; past the largest batch that fits with
  them it cannot run, whatever its speed (`memory_limited`).

The serving simulator's comparison of gates (`specsim simulate`) checks the workload view; the
threshold command, the sweep plot and the report all print this one function's answer.
"""
from __future__ import annotations

import numpy as np

from ..errors import field_error
from ..serving.cost import ServingCost
from ..serving.mix import IterationMix
from ..speculation.families import verify_q_len
from ..speculation.operating_point import OperatingPoint
from ..speculation.predict import grid, tokens_per_cycle_at
from ..speculation.switch_off import DEFAULT_BATCH_LIMIT, DEFAULT_K_MAX, SwitchOff, WorkloadMix


def _decode_only_speedup(op: OperatingPoint, ks, bs, ctx) -> np.ndarray:
    g = grid(op, k=list(ks), batch_size=list(bs), context_len=[ctx])
    return g.speedup[:, 0, :, 0, 0]  # (nK, nB)


def iteration_mix(op: OperatingPoint, *, b: int, q: int, ctx: float, prefill_tokens: float, prompt_len: float,
                  k: int, draft: bool, n_draft: int | None = None) -> IterationMix:
    """One serving iteration of the workload view: b decoding rows with q query tokens at context ctx
    (drafting K when `draft`: all b rows, or the first n_draft, the rest verifying their one token),
    beside prefill_tokens of prompts of mean length prompt_len (chunked prefill). P prompt tokens
    become n_p = ceil(P / p̄) chunks of q_p = P / n_p tokens, each at context (p̄ − q_p)/2: a prompt of
    p̄ tokens prefilled in chunks has p̄(p̄ + 1)/2 query-key pairs whatever the chunking, (p̄ + 1)/2 per
    token, and this placement gives each chunk exactly that."""
    ctx_i = int(round(ctx))
    n_p = int(np.ceil(prefill_tokens / max(prompt_len, 1.0))) if prefill_tokens >= 1 else 0
    chunk = int(round(prefill_tokens / n_p)) if n_p else 0
    chunk_ctx = int(round(max(prompt_len - chunk, 0.0) / 2.0))
    nd = b if (draft and n_draft is None) else (int(n_draft) if draft else 0)
    rows_q = np.where(np.arange(b) < nd, q, 1) if draft and nd < b else np.full(b, q)
    q_lens = np.concatenate([rows_q, np.full(n_p, chunk)]).astype(np.int64)
    context_lens = np.concatenate([np.full(b, ctx_i), np.full(n_p, chunk_ctx)]).astype(np.int64)
    logits = np.concatenate([rows_q, np.ones(n_p)]).astype(np.int64)
    row_k = np.where(np.arange(b) < nd, k, 0) if draft else np.zeros(b)
    draft_k = np.concatenate([row_k, np.zeros(n_p)]).astype(np.int64)
    prefill = np.concatenate([np.zeros(b, dtype=bool), np.ones(n_p, dtype=bool)])
    tree = op.tree_size if (draft and op.is_tree) else 0
    return IterationMix(q_lens, context_lens, logits, draft_k, prefill, tree, drafter_on=draft,
                        speculating=True if draft and n_draft is not None else None)


def workload_speedup(op: OperatingPoint, mix: WorkloadMix, *, b: int, k: int, cost: ServingCost | None = None) -> float:
    """Per-sequence token rate speculating with K over plain decoding at running batch b, each mode
    carrying the prefill its own steady state implies (see the module docstring), each iteration priced
    by the serving simulator's cost (`cost`: the point's ServingCost, built once by the caller)."""
    if not op.drafter.family.serving:
        raise field_error(f"scenario {op.name!r}", "method", op.method,
                          "a family the serving simulator models, for the workload view (decode only otherwise)")
    cost = ServingCost(op) if cost is None else cost
    ctx = mix.decode_context_len
    tau = tokens_per_cycle_at(op, k=k, context_len=ctx)
    q = int(verify_q_len(op.drafter, op.work, k, op.tree_size if op.is_tree else None))
    r = mix.prompt_per_output
    plain = cost(iteration_mix(op, b=b, q=1, ctx=ctx, prefill_tokens=b * r, prompt_len=mix.mean_prompt_tokens, k=0,
                               draft=False))
    f = float(op.drafter.draft_frac)
    if f == 1.0:
        spec = cost(iteration_mix(op, b=b, q=q, ctx=ctx, prefill_tokens=b * tau * r, prompt_len=mix.mean_prompt_tokens,
                                  k=k, draft=True))
        return (tau / spec) / (1.0 / plain)
    # a share f of the rows drafts (prompt lookup's matches): f·b rows, between the whole counts around it
    tau = 1.0 + f * (float(tau) - 1.0)
    lo = int(np.floor(f * b))
    w = f * b - lo

    def at(nd):
        return cost(iteration_mix(op, b=b, q=q, ctx=ctx, prefill_tokens=b * tau * r, prompt_len=mix.mean_prompt_tokens,
                                  k=k, draft=True, n_draft=nd))
    spec = at(lo) if w == 0.0 else (1.0 - w) * at(lo) + w * at(lo + 1)
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
        cost = ServingCost(op)

        def best_at(b: int) -> tuple[float, int]:
            if b not in cache:
                vals = [workload_speedup(op, workload, b=b, k=int(k), cost=cost) for k in ks]
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


__all__ = ["switch_off_point", "workload_speedup", "iteration_mix", "SwitchOff", "WorkloadMix"]
