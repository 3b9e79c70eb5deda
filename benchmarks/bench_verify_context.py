"""Verify pass at long context (issue 10, item 8): one forward pass of M = 8 query tokens against a
single-token step, at context 128 and 2048, median of repeats, with the machine's load.

  python benchmarks/bench_verify_context.py [--repeats 9] [--threads N] [--json out.json]

Target: verify(M = 8) <= 2 x step(M = 1) at context 2048. The attention of the M queries reads the
cache once per kv head and thread, in tiles of 64 keys, with register blocks of 4 query rows for the
scores (16-lane partial products and one fixed tree) and the values (4 output rows held across a
tile); see specsim/decoder/kernels/attention.py. Also prints each pass's attention alone (the kernel over the
30 layers), so the ratio can be read apart from the matrix products.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--contexts", default="128,2048")
    ap.add_argument("--json")
    args = ap.parse_args()
    from specsim.decoder import kernels as K
    from specsim.decoder.run import load_target
    from specsim.speculation.trees import ancestor_mask, chain

    model = load_target(None, args.threads)
    c = model.config
    contexts = [int(x) for x in args.contexts.split(",")]
    rng = np.random.default_rng(0)
    cache = model.new_cache(max(contexts) + 8)
    cache.k[:] = rng.standard_normal(cache.k.shape, dtype=np.float32)
    cache.v[:] = rng.standard_normal(cache.v.shape, dtype=np.float32)
    load_before = os.getloadavg()[0]
    out = {}
    for ctx in contexts:
        for m in (1, 8):
            tree, toks = chain(m - 1), rng.integers(0, c.n_vocab, m)
            mask = ancestor_mask(tree)
            ts = []
            for i in range(args.repeats + 1):
                cache.length = ctx
                t0 = time.perf_counter()
                model.forward(cache, toks, ctx + tree.depths, mask)
                if i:
                    ts.append(time.perf_counter() - t0)
            q = rng.standard_normal((m, c.n_head, c.head_dim)).astype(np.float32)
            o = np.zeros_like(q)
            ws = model._workspace(m, cache.capacity)
            cache.length = ctx + m
            att = []
            for i in range(args.repeats + 1):
                t0 = time.perf_counter()
                for li in range(c.n_layer):
                    K.attention(o, ws["scores"], q, cache.k[li], cache.v[li], ctx, np.tril(np.ones((m, m), np.bool_)))
                if i:
                    att.append(time.perf_counter() - t0)
            out[(ctx, m)] = {"pass_s": float(np.median(ts)), "pass_min_s": min(ts), "pass_max_s": max(ts),
                             "attention_s": float(np.median(att))}
    load_after = os.getloadavg()[0]
    print(f"load (1 min) {load_before:.2f} before, {load_after:.2f} after; median of {args.repeats}")
    for ctx in contexts:
        one, eight = out[(ctx, 1)], out[(ctx, 8)]
        print(f"context {ctx:5d}: step M=1 {one['pass_s'] * 1e3:7.2f} ms (attention {one['attention_s'] * 1e3:.2f}), "
              f"verify M=8 {eight['pass_s'] * 1e3:7.2f} ms (attention {eight['attention_s'] * 1e3:.2f}): "
              f"{eight['pass_s'] / one['pass_s']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"load_before": load_before, "load_after": load_after,
                       "rows": [{"context_len": k[0], "m": k[1], **v} for k, v in out.items()]}, f, indent=2)


if __name__ == "__main__":
    main()
