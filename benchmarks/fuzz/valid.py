"""Random valid configurations: each must run and give figures that keep their invariants."""
from __future__ import annotations

import copy

from .cases import analysis_scenario, D, REPO, serving_scenario, to_toml


def add_cases(g, n_predict: int, catalog: dict) -> None:
    rng = g.rng
    hws = ["h100-sxm", "a100-sxm-80gb", "h200-sxm", "l40s", "rtx-4090", "mi300x", "b200", "a100-sxm-40gb",
           "ddr5-5600-2ch", "apple-m2-ultra"]
    pairs = [("llama-3.1-8b", "llama-3.2-1b"), ("llama-3.1-70b", "llama-3.2-1b"), ("llama-3.1-8b", "llama-3.2-3b"),
             ("qwen2.5-7b", "qwen2.5-0.5b"), ("qwen2.5-72b", "qwen2.5-1.5b"), ("llama-2-7b", "llama-68m"),
             ("codellama-34b", "codellama-7b"), ("mistral-7b", None), ("llama-2-13b", None), ("qwen3-8b", None)]
    methods = ["draft_model", "prompt_lookup", "medusa", "eagle", "layer_skip"]
    for i in range(n_predict):
        target, drafter = rng.choice(pairs)
        method = "draft_model" if drafter and rng.random() < 0.6 else rng.choice(methods[1:])
        k = rng.randint(1, 8)
        maxctx, heads = catalog.get(target, (4096, 32))
        if method == "draft_model":
            maxctx = min(maxctx, catalog.get(drafter, (maxctx, 0))[0])
        ctx = rng.choice([0, 1, 128, 1024, 4096, rng.randrange(0, max(1, maxctx - k - 1))])
        ctx = min(ctx, maxctx - k - 1)
        hw = rng.choice(hws)
        tps = [t for t in (1, 1, 1, 2, 4, 8) if heads % t == 0] if hw not in ("ddr5-5600-2ch", "apple-m2-ultra") else [1]
        argv = ["predict", "--hardware", hw, "--target", target, "--method", method, "--k", k,
                "--batch", rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 256, rng.randint(1, 512)]), "--context", ctx,
                "--tp", rng.choice(tps)]
        if method == "draft_model":
            argv += ["--drafter", drafter]
        if rng.random() < 0.5:
            argv += ["--alpha", round(rng.random(), 4)]
        else:
            argv += ["--tau", round(1 + rng.random() * k, 3)]
        if rng.random() < 0.2:
            argv += ["--attention", "naive"]
        argv += ["--json"]
        g.add("valid-predict", " ".join(str(a) for a in argv[1:-1]), argv, expect="valid", check="predict",
                 meta={"k": k, "context": ctx, "max_context": maxctx}, twin=argv if i % 4 == 0 else None)
    for i in range(30):
        wl = {"kind": rng.choice(["poisson", "gamma"]), "n_requests": rng.randint(5, 60),
              "rate_per_s": round(rng.uniform(0.5, 30), 2),
              "prompt": {"kind": "fixed", "tokens": rng.choice([16, 128, 512, 2048])},
              "output": {"kind": "fixed", "tokens": rng.choice([1, 2, 8, 64, 200])}}
        if wl["kind"] == "gamma":
            wl["cv"] = round(rng.uniform(0.3, 4), 2)
        scen = serving_scenario(wl)
        scen["alpha"] = round(rng.uniform(0.1, 0.95), 3)
        scen["batch_size"] = 1
        argv = ["simulate", f"{D}/s.toml", "--json", "--quiet", "--seed", rng.randrange(1000)]
        g.add("valid-simulate", f"{wl}", argv, files={"s.toml": to_toml(scen)}, expect="valid", check="simulate",
                 meta={"k": 4, "out_tokens": wl["output"]["tokens"]}, timeout_s=240,
                 twin=argv if i % 5 == 0 else None)
    for i in range(24):
        scen = analysis_scenario()
        target, drafter = rng.choice([p for p in pairs if p[1]])
        scen.update(target=target, drafter=drafter, hardware=rng.choice(hws[:6]), alpha=round(rng.uniform(0.3, 0.95), 3),
                    context_len=rng.choice([256, 1024, 4096]))
        shuffled = copy.deepcopy(scen)
        rng.shuffle(shuffled["threshold"]["alphas"])
        rng.shuffle(shuffled["threshold"]["batch_sizes"])
        g.add("valid-threshold", f"{target}/{drafter} on {scen['hardware']}, grid reordered in the twin",
                 ["threshold", f"{D}/s.toml", "--json"], files={"s.toml": to_toml(scen), "t.toml": to_toml(shuffled)},
                 expect="valid", check="threshold", twin=["threshold", f"{D}/t.toml", "--json"], meta={"metamorphic": True})
    for i in range(8):
        scen = analysis_scenario()
        scen["sweep"] = {"k": sorted(rng.sample([1, 2, 3, 4, 6, 8], 2)), "batch_size": [1, rng.choice([8, 64, 256])],
                         "alpha": [round(rng.uniform(0.3, 0.95), 2)], "context_len": [rng.choice([128, 4096])],
                         "hardware": [rng.choice(hws[:6])]}
        g.add("valid-sweep", f"{scen['sweep']}", ["sweep", f"{D}/s.toml", "--out", f"{D}/out", "--quiet",
                 "--no-plots"], files={"s.toml": to_toml(scen)}, expect="valid", check="sweep", out="out",
                 timeout_s=240)
    g.add("valid-replay", "the shipped example rows", ["replay", str(REPO / "tests/data/published_examples.csv"),
             "--json"], expect="valid", check="replay", meta={})
    g.add("valid-decoder", "tiny model, prompt lookup", ["decoder", "run", "--model", f"{D}/m.gguf",
             "--prompt-file", f"{D}/p.txt", "--raw", "--tokens", "6", "--json", f"{D}/r.json"],
             files={"m.gguf": ("tiny_gguf", {}), "p.txt": "hello world, hello world, hello\n"}, expect="valid",
             check="decoder-json", timeout_s=400)
