"""Every drafter on the real target (SmolLM2-135M-Instruct, Q4_1), side by side on held-out prompts.

  python benchmarks/bench_drafters.py [--repeats 3] [--tokens 128] [--n-prompts 3]
      [--drafters prompt-lookup-earliest,prompt-lookup,layer-skip,draft-model,medusa,eagle] [--workloads code-edit,prose-heldout]
      [--temperatures 0,1] [--threads N] [--json out.json]

For each drafter, workload and temperature: `measure` (plain and speculative decoding of the same
prompts, same per-request seeds) repeated --repeats times; the table gives the median and the range
(min-max) over the repeats of tokens per cycle, the share of drafted tokens accepted (vLLM's draft
acceptance rate, llama.cpp lookup's 'accept'), per-position acceptance (vLLM's unconditional rate:
cycles accepting >= i / cycles that drafted), draft time per cycle, speculative tokens per second and
the speedup over plain decoding measured in the same repeat. Repeat r uses request seed r (at
temperature 0 the tokens are the same each time and only the timings vary).

Held-out: code-edit draws from the standard-library modules the training leaves out; prose-heldout
from the last tenth of each book, which the training never reads (see specsim/decoder/train/corpus.py).
Verification: greedy at temperature 0 (exact); at temperature 1 `rejection` for the drafters that
give their distribution q (layer skip, draft model), `onehot` for one-hot drafts (prompt lookup,
Medusa, EAGLE) — both exact.
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

DEFAULT_DRAFTERS = "prompt-lookup-earliest,prompt-lookup,layer-skip,draft-model,medusa,eagle"


def make_drafter(name: str, model):
    """A decoder drafter by its `decoder run` name (specsim.decoder.registry), built as `decoder run` builds it
    with its defaults, except layer skip at half the target's layers and the earliest-match lookup at k = 4,
    max_n = 3 (this benchmark's settings)."""
    from specsim.decoder.registry import DRAFTERS
    from specsim.decoder.run import RunConfig

    if name not in DRAFTERS:
        raise SystemExit(f"unknown drafter {name!r}: expected one of {', '.join(DRAFTERS)}")
    cfg = RunConfig(drafter=name, k=4, layers=model.config.n_layer // 2 if name == "layer-skip" else None)
    return DRAFTERS[name].build(model, cfg, model.config.n_ctx)


def spread(xs) -> dict:
    xs = np.asarray(xs, dtype=float)
    return dict(median=float(np.nanmedian(xs)), lo=float(np.nanmin(xs)), hi=float(np.nanmax(xs)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--n-prompts", type=int, default=3)
    ap.add_argument("--drafters", default=DEFAULT_DRAFTERS)
    ap.add_argument("--workloads", default="code-edit,prose-heldout")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    from specsim.decoder.fetch import default_model_path
    from specsim.decoder.gguf_model import load_gguf
    from specsim.decoder.measure import measure
    from specsim.decoder.model import Transformer
    from specsim.decoder.sampling import SamplingParams
    from specsim.decoder.workloads import chat_prompt, load_workload

    if a.threads:
        from specsim.decoder.kernels import set_threads

        set_threads(a.threads)
    model = Transformer(load_gguf(a.model or default_model_path()))
    rows = []
    for wl in a.workloads.split(","):
        w = load_workload(wl, a.n_prompts, seed=0)
        prompts = [chat_prompt(model.tokenizer, t, w.response_prefix) for t in w.prompts]
        for temp in (float(t) for t in a.temperatures.split(",")):
            for name in a.drafters.split(","):
                drafter = make_drafter(name, model)
                mode = "greedy" if temp == 0 else ("rejection" if getattr(drafter, "gives_q", False) else "onehot")
                runs = [measure(model, drafter, prompts, a.tokens, mode=mode,
                                sampling=SamplingParams(temperature=temp), seed=r, warmup=(r == 0))
                        for r in range(a.repeats)]
                depth = max(len(m.acceptance_unconditional) for m in runs)
                acc = [[m.acceptance_unconditional[i] if i < len(m.acceptance_unconditional) else 0.0 for m in runs]
                       for i in range(min(depth, 6))]
                row = dict(workload=wl, temperature=temp, drafter=name, label=runs[0].drafter, mode=mode,
                           tokens_per_cycle=spread([m.tokens_per_cycle for m in runs]),
                           draft_acceptance=spread([np.nan if m.draft_acceptance_rate is None
                                                    else m.draft_acceptance_rate for m in runs]),
                           acceptance=[spread(x) for x in acc],
                           draft_ms_per_cycle=spread([m.draft_s_per_cycle * 1e3 for m in runs]),
                           verify_ms_per_cycle=spread([m.verify_s_per_cycle * 1e3 for m in runs]),
                           spec_tokens_per_s=spread([m.spec_tokens_per_s for m in runs]),
                           plain_tokens_per_s=spread([m.plain_tokens_per_s for m in runs]),
                           speedup=spread([m.speedup for m in runs]),
                           greedy_match=[m.greedy_match for m in runs])
                rows.append(row)
                f = lambda s, p=2: f"{s['median']:.{p}f} [{s['lo']:.{p}f}-{s['hi']:.{p}f}]"  # noqa: E731
                print(f"{wl:14s} T={temp:g} {name:13s} tok/cycle {f(row['tokens_per_cycle'])}  "
                      f"accepted/drafted {f(row['draft_acceptance'])}  acc "
                      + " ".join(f"{s['median']:.2f}" for s in row["acceptance"])
                      + f"  draft ms {f(row['draft_ms_per_cycle'])}  spec tok/s {f(row['spec_tokens_per_s'], 1)}"
                      f"  speedup {f(row['speedup'])}  exact {row['greedy_match']}", flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(dict(argv=sys.argv, repeats=a.repeats, rows=rows), fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
