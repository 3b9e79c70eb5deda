"""How far prompt lookup can go on this machine: the real drafters against two oracles, on one cost scale.

  python benchmarks/bound_prompt_lookup.py BENCH_JSON [--workload code-edit] [--n-prompts 3]
      [--tokens 128] [--cap 64] [--threads 1] [--json out.json]

BENCH_JSON is `specsim decoder bench --out DIR`'s DIR/bench.json: this machine's measured verify time
for M query tokens at context L. Every drafter is charged those measured times, so the figures are free
of the run-to-run timing noise of a speculative run (about ±5 % here) and comparable across drafters.

The target's greedy answer to each prompt is computed once. Then, at every cycle, with the context
holding the prompt and the answer so far:

- the old drafter (earliest match, K = 4) and the n-gram lookup (the default `prompt-lookup`) propose
  as they do in the decoder, learn from what was accepted, and are charged verify(drafted + 1, L);
- "oracle, own chain": the n-gram lookup's candidate chain (up to --cap tokens, no confidence cut),
  cut exactly where the target stops agreeing, charged verify(accepted + 1, L);
- "oracle, any copy": the longest continuation, copied from any earlier point of the context that
  follows the same token as the context's last one (overlapping copies allowed), that the target will
  produce; this bounds every prompt lookup whose matches are at least one token long.

Drafting time is charged as zero everywhere (it is about 0.5 ms of a 15-20 ms cycle here), which
favours the oracles and the longer drafts. The speedup is plain time / speculative time at the same
measured costs (the plain step is verify(1, L) at each position).
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def verify_time(rows):
    """verify_s(m, L): the bench's times, linear in M (extrapolated past the largest M from the last
    two points) and linear in log L between the measured contexts (clamped at their ends)."""
    ls = sorted({r["context_len"] for r in rows})
    ms = sorted({r["m"] for r in rows})
    table = {(r["context_len"], r["m"]): r["verify_s"] for r in rows}

    def at(ctx, m):
        ys = [table[(ctx, mm)] for mm in ms]
        if m <= ms[-1]:
            return float(np.interp(m, ms, ys))
        return ys[-1] + (m - ms[-1]) * (ys[-1] - ys[-2]) / (ms[-1] - ms[-2])

    def verify_s(m, ctx):
        x = np.log(min(max(ctx, ls[0]), ls[-1]))
        return float(np.interp(x, np.log(ls), [at(c, m) for c in ls]))

    return verify_s


def agreement(draft, future) -> int:
    a = 0
    while a < len(draft) and a < len(future) and draft[a] == future[a]:
        a += 1
    return a


def longest_copy(seq, n_ctx, cap) -> int:
    """The longest run of seq[n_ctx:] (the future) that a copy from an earlier point of seq[:n_ctx]
    following the same token as seq[n_ctx - 1] reproduces; overlapping copies may read the future
    they produce, as a drafter re-matching its own draft does."""
    last, best = seq[n_ctx - 1], 0
    for p in range(1, n_ctx):
        if seq[p - 1] == last:
            a = 0
            while a < cap and n_ctx + a < len(seq) and seq[p + a] == seq[n_ctx + a]:
                a += 1
            best = max(best, a)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench_json")
    ap.add_argument("--workload", default="code-edit")
    ap.add_argument("--n-prompts", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--cap", type=int, default=64, help="longest draft the oracles may make")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    from specsim.decoder.drafters import NgramLookupDrafter, PromptLookupDrafter
    from specsim.decoder.fetch import default_model_path
    from specsim.decoder.generate import generate_plain
    from specsim.decoder.gguf_model import load_gguf
    from specsim.decoder.kernels import set_threads
    from specsim.decoder.model import Transformer
    from specsim.decoder.workloads import chat_prompt, load_workload

    set_threads(a.threads)
    with open(a.bench_json) as fh:
        verify_s = verify_time(json.load(fh)["rows"])
    model = Transformer(load_gguf(default_model_path()))
    w = load_workload(a.workload, a.n_prompts, seed=0)
    answers = []
    for text in w.prompts:
        prompt = list(chat_prompt(model.tokenizer, text, w.response_prefix))
        answers.append((prompt, generate_plain(model, prompt, a.tokens, seed=0).tokens.tolist()))

    drafters = {
        "old lookup (earliest match, K = 4)": lambda: PromptLookupDrafter(k=4, min_n=1, max_n=3),
        "n-gram lookup (default)": lambda: NgramLookupDrafter(),
        "oracle, own chain": lambda: NgramLookupDrafter(k=a.cap, verify_cost_slope=0.0, prior_accept=0.999,
                                                        prior_weight=1e6),
        "oracle, any copy": None,
    }
    rows = []
    for name, make in drafters.items():
        plain_s = spec_s = 0.0
        tokens = cycles = drafted = accepted = 0
        for prompt, out in answers:
            seq = prompt + out
            n0 = len(prompt)
            drafter = make() if make else None
            t = 1  # out[0] comes from the prefill in both runs
            while t < len(out):
                ctx = n0 + t
                left = len(out) - t - 1  # the cycle's own token is always the target's
                if drafter is None:
                    a_ = min(longest_copy(seq, ctx, a.cap), left)
                    n_draft = a_
                else:
                    draft = drafter.propose(np.array(seq[:ctx]), None, None).tokens[1:].tolist()
                    a_ = min(agreement(draft, seq[ctx:]), left)
                    n_draft = a_ if name.startswith("oracle") else len(draft)
                spec_s += verify_s(n_draft + 1, ctx)
                cycles += 1
                drafted += n_draft
                accepted += a_
                t += a_ + 1
            plain_s += sum(verify_s(1, n0 + t) for t in range(1, len(out)))
            tokens += len(out) - 1
        rows.append(dict(drafter=name, tokens=tokens, cycles=cycles, tokens_per_cycle=tokens / cycles,
                         drafted=drafted, accepted=accepted,
                         accepted_per_drafted=accepted / drafted if drafted else None,
                         speedup_at_measured_costs=plain_s / spec_s))
        r = rows[-1]
        share = "—" if r["accepted_per_drafted"] is None else f"{r['accepted_per_drafted']:.3f}"
        print(f"{name:36s} tokens/cycle {r['tokens_per_cycle']:5.2f}   accepted/drafted {share:>5s}"
              f"   speedup at the measured verify costs {r['speedup_at_measured_costs']:.2f}x", flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(dict(argv=sys.argv, rows=rows), fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
