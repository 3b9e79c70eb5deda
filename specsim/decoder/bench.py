"""`specsim decoder bench`: time of one verify pass over M query tokens at context length L.

The cache is filled with random keys and values up to L (attention time does not depend on their
values), so long contexts need no prefill. Each point is the median of `repeats` passes after one untimed
pass (which compiles a new shape): a typical pass, as the decoder's runs meet it, not its best. A context
that does not fit with the largest M is refused, not skipped."""
from __future__ import annotations

import numpy as np

from ..errors import SpecError
from ..speculation.trees import ancestor_mask, chain


def verify_times(model, *, m_values=(1, 2, 4, 8, 16, 32, 64), contexts=(128, 512, 2048), repeats: int = 3,
                 seed: int = 0, clock: str = "wall") -> list[dict]:
    """clock: "wall" or "thread" (this thread's CPU time; see generate.clock)."""
    from .generate import CLOCKS

    timer = CLOCKS[clock]
    rng = np.random.default_rng(seed)
    rows = []
    cap = max(contexts) + max(m_values)
    if cap > model.config.n_ctx:
        raise SpecError(f"bench: context {max(contexts)} + M {max(m_values)} = {cap} tokens: expected at most the "
                        f"model's context of {model.config.n_ctx}")
    cache = model.new_cache(cap)
    cache.k[:] = rng.standard_normal(cache.k.shape, dtype=np.float32)
    cache.v[:] = rng.standard_normal(cache.v.shape, dtype=np.float32)
    for ctx in contexts:
        base = None
        for m in m_values:
            tree = chain(m - 1)
            toks = rng.integers(0, model.config.n_vocab, m)
            mask = ancestor_mask(tree)
            cache.length = ctx
            model.forward(cache, toks, ctx + tree.depths, mask)  # untimed: the first pass also compiles a new shape
            times = []
            for _ in range(repeats):
                cache.length = ctx
                t0 = timer()
                model.forward(cache, toks, ctx + tree.depths, mask)
                times.append(timer() - t0)
            best = float(np.median(times))  # the typical pass (the name is kept for the row layout)
            base = best if m == 1 else base
            rows.append(dict(context_len=ctx, m=m, verify_s=best, per_token_s=best / m,
                             ratio_to_m1=best / base if base else None))  # None: M = 1 not (yet) timed
    return rows
