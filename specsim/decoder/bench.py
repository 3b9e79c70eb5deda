"""`specsim decoder bench`: time of one verify pass over M query tokens at context length L.

The cache is filled with random keys and values up to L (attention time does not depend on their
values), so long contexts need no prefill. Each point is the median of `repeats` passes after one untimed
pass (which compiles a new shape): a typical pass, as the decoder's runs meet it, not its best, with the
fastest and slowest repeat beside it. A context that does not fit with the largest M is refused, not
skipped. `check_bench` says what in the rows contradicts itself (`specsim decoder bench` checks before it
writes, measures again, and refuses what still disagrees unless --force)."""
from __future__ import annotations

import numpy as np

from ..errors import SpecError
from ..speculation.trees import ancestor_mask, chain
from . import disturbance as D


def verify_times(model, *, m_values=(1, 2, 4, 8, 16, 32, 64), contexts=(128, 512, 2048), repeats: int = 3,
                 seed: int = 0, clock: str = "wall") -> list[dict]:
    """clock: "wall" or "thread" (this thread's CPU time; see generate.clock). The repeats are taken in
    rounds over every (context, M) point, not back to back: a burst of other work on a shared machine
    then lands on one repeat of many points, which their medians drop, instead of on every repeat of
    one point."""
    from .generate import CLOCKS

    timer = CLOCKS[clock]
    rng = np.random.default_rng(seed)
    cap = max(contexts) + max(m_values)
    if cap > model.config.n_ctx:
        raise SpecError(f"bench: context {max(contexts)} + M {max(m_values)} = {cap} tokens: expected at most the "
                        f"model's context of {model.config.n_ctx}")
    cache = model.new_cache(cap)
    cache.k[:] = rng.standard_normal(cache.k.shape, dtype=np.float32)
    cache.v[:] = rng.standard_normal(cache.v.shape, dtype=np.float32)
    points = []
    for ctx in contexts:
        for m in m_values:
            tree = chain(m - 1)
            points.append((ctx, m, rng.integers(0, model.config.n_vocab, m), ctx + tree.depths, ancestor_mask(tree)))
    times = {(ctx, m): [] for ctx, m, *_ in points}
    for i in range(repeats + 1):  # round 0 untimed: the first pass of a shape also compiles it
        for ctx, m, toks, pos, mask in points:
            cache.length = ctx
            t0 = timer()
            model.forward(cache, toks, pos, mask)
            if i:
                times[(ctx, m)].append(timer() - t0)
    rows = []
    for ctx in contexts:
        base = None
        for m in m_values:
            ts = times[(ctx, m)]
            typical = float(np.median(ts))  # the typical pass, as the decoder's runs meet it, not its best
            base = typical if m == 1 else base
            rows.append(dict(context_len=ctx, m=m, verify_s=typical, per_token_s=typical / m,
                             ratio_to_m1=typical / base if base else None,  # None: M = 1 not (yet) timed
                             verify_min_s=float(min(ts)), verify_max_s=float(max(ts))))
    return rows


def check_bench(rows) -> list[str]:
    """What in a bench's rows contradicts itself (see decoder.disturbance): repeats that spread too far,
    or a pass that does not grow with M at a context or with the context at an M."""
    out = []
    if rows and "verify_min_s" in rows[0]:
        out += D.spread_problems(rows, what="verify passes", label=lambda r: f"M = {r['m']} at context {r['context_len']}",
                                 time_key="verify_s", min_key="verify_min_s", max_key="verify_max_s")
    for ctx in sorted({r["context_len"] for r in rows}):
        pts = sorted((r["m"], r["verify_s"]) for r in rows if r["context_len"] == ctx)
        out += D.must_grow(pts, what=f"the verify pass at context {ctx}", along="M")
    for m in sorted({r["m"] for r in rows}):
        pts = sorted((r["context_len"], r["verify_s"]) for r in rows if r["m"] == m)
        out += D.must_grow(pts, what=f"the verify pass of M = {m}", along="context")
    out += [f"the verify pass of M = {r['m']} at context {r['context_len']} takes {r['verify_s']!r} s: expected a time > 0"
            for r in rows if not r["verify_s"] > 0]
    return out
