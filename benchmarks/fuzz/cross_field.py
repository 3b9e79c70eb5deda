"""One joining rule between fields broken per case; runs that cannot end soon."""
from __future__ import annotations

import copy

from .cases import analysis_scenario, D, point_scenario, serving_scenario, to_toml, WORKLOAD


def add_cases(g) -> None:
    """Rules that join fields and tables: each case breaks one."""
    def serve(**over):
        s = serving_scenario()
        for k, v in over.items():
            if isinstance(v, dict) and isinstance(s.get(k), dict) and k not in ("policies", "workload"):
                s[k].update(v)
            else:
                s[k] = v
        return s
    wl = copy.deepcopy(WORKLOAD)
    azure = "traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv"
    cases = [
        ("a band above max_num_seqs", serve(policies={"b": {"kind": "k_by_batch_band", "bands": [[1, 4], [128, 2]]}}),
         "simulate", "refuse", ("bands", "max_num_seqs")),
        ("a band of one end", serve(policies={"b": {"kind": "k_by_batch_band", "bands": [[1], [8, 2]]}}), "simulate",
         "refuse", ("bands",)),
        ("a band of three ends", serve(policies={"b": {"kind": "k_by_batch_band", "bands": [[1, 4, 2]]}}), "simulate",
         "refuse", ("bands",)),
        ("bands with non-integer ends", serve(policies={"b": {"kind": "k_by_batch_band", "bands": [[1.5, 4]]}}),
         "simulate", "refuse", ("bands",)),
        ("bands descending", serve(policies={"b": {"kind": "k_by_batch_band", "bands": [[8, 4], [2, 1]]}}), "simulate",
         "refuse", ("bands",)),
        ("a gate above max_num_seqs", serve(policies={"g": {"kind": "disable_by_batch_size", "k": 4, "threshold": 1000}}),
         "simulate", "refuse", ("threshold", "max_num_seqs")),
        ("a policy name that is no file name", serve(policies={"a/b": {"kind": "never"}}), "simulate-out", "refuse",
         ("name", "a/b")),
        ("lognormal without parameters", serve(workload=dict(wl, prompt={"kind": "lognormal"})), "simulate", "refuse",
         ("sigma", "mu", "prompt")),
        ("lognormal with tokens", serve(workload=dict(wl, prompt={"kind": "lognormal", "mu": 5, "sigma": 1, "tokens": 3})),
         "simulate", "refuse", ("tokens",)),
        ("uniform min above max", serve(workload=dict(wl, prompt={"kind": "uniform", "min": 50, "max": 5})), "simulate",
         "refuse", ("min", "max")),
        ("fixed without tokens", serve(workload=dict(wl, prompt={"kind": "fixed"})), "simulate", "refuse", ("tokens",)),
        ("lengths_from beside prompt", serve(workload=dict(wl, lengths_from=azure)), "simulate", "refuse",
         ("lengths_from", "prompt")),
        ("a key of another kind (cv on poisson)", serve(workload=dict(wl, cv=2.0)), "simulate", "refuse", ("cv",)),
        ("more users than requests", serve(workload={"kind": "closed_loop", "n_requests": 5, "n_users": 50,
                                                     "prompt": {"kind": "fixed", "tokens": 16},
                                                     "output": {"kind": "fixed", "tokens": 4}}),
         "simulate", "refuse", ("n_users",)),
        ("rates on a closed loop", serve(workload={"kind": "closed_loop", "n_requests": 5, "n_users": 2, "rates": [1, 2],
                                                   "prompt": {"kind": "fixed", "tokens": 16},
                                                   "output": {"kind": "fixed", "tokens": 4}}),
         "simulate", "refuse", ("rates",)),
        ("jitter_s on an Azure trace", serve(workload={"kind": "trace", "trace": azure, "jitter_s": 1.0}), "simulate",
         "refuse", ("jitter_s",)),
        ("hash_block_tokens on an Azure trace", serve(workload={"kind": "trace", "trace": azure, "hash_block_tokens": 16}),
         "simulate", "refuse", ("hash_block_tokens",)),
        ("window_s reversed", serve(workload={"kind": "trace", "trace": azure, "window_s": [60, 0]}), "simulate",
         "refuse", ("window_s",)),
        ("window_s of one end", serve(workload={"kind": "trace", "trace": azure, "window_s": [60]}), "simulate",
         "refuse", ("window_s",)),
        ("a trace path as a number", serve(workload={"kind": "trace", "trace": 5}), "simulate", "refuse", ("trace",)),
        ("priority fractions not summing to 1", serve(workload=dict(wl, priority_fracs=[0.2, 0.2])), "simulate", "refuse",
         ("priority_fracs",)),
        ("swap space with recompute", serve(engine={"swap_space_gib": 8.0}), "simulate", "refuse", ("swap_space_gib",)),
        ("n_blocks above the memory", serve(engine={"n_blocks": 10 ** 8}), "simulate", "refuse", ("n_blocks",)),
        ("max_model_len above the context", serve(engine={"max_model_len": 10 ** 7}), "simulate", "refuse",
         ("max_model_len",)),
        ("prefix caching without prefixes", serve(engine={"prefix_caching": True}), "simulate", "refuse",
         ("prefix_caching",)),
        ("router keys without prefix_affinity", serve(fleet={"n_replicas": 2, "cache_threshold": 0.5}), "simulate",
         "refuse", ("cache_threshold",)),
        ("n_prefill on a colocated fleet", serve(fleet={"n_replicas": 2, "n_prefill": 1}), "simulate", "refuse",
         ("n_prefill",)),
        ("a disaggregated fleet of one", serve(fleet={"n_replicas": 1, "layout": "disaggregated", "n_prefill": 1}),
         "simulate", "refuse", ("n_replicas", "n_prefill")),
        ("every replica prefilling", serve(fleet={"n_replicas": 2, "layout": "disaggregated", "n_prefill": 2}),
         "simulate", "refuse", ("n_prefill",)),
        ("alpha and by_position", point_scenario(acceptance={"by_position": [0.8]}), "predict", "refuse",
         ("by_position", "alpha")),
        ("workload without calibrated", point_scenario(acceptance={"workload": "chat"}), "predict", "refuse",
         ("workload",)),
        ("calibrated and alpha", point_scenario(acceptance={"calibrated": "smollm2-135m/prompt-lookup/prose"}),
         "predict", "refuse", ("alpha", "calibrated")),
        ("a calibration of another target", dict({k: v for k, v in point_scenario(method="prompt_lookup").items()
                                                   if k not in ("alpha", "drafter")},
                                                  acceptance={"calibrated": "smollm2-135m/prompt-lookup/prose"}),
         "predict", "refuse", ("calibrated", "target")),
        ("a calibration of another method", dict({k: v for k, v in point_scenario(
            hardware="ddr5-5600-2ch", target="smollm2-135m-q4_1", method="layer_skip").items()
            if k not in ("alpha", "drafter")}, context_len=300, acceptance={"calibrated": "smollm2-135m/prompt-lookup/prose"}),
         "predict", "refuse", ("calibrated", "method")),
        ("a sparse window past the context", point_scenario(method="sparse_kv", drafter_options={"sparse_window": 10 ** 7}),
         "predict", "refuse", ("sparse_window",)),
        ("a sparse sink past the context", point_scenario(method="sparse_kv", drafter_options={"sparse_sink": 10 ** 30 // 10 ** 12}),
         "predict", "refuse", ("sparse_sink",)),
        ("a prompt-lookup cost of 1e30", point_scenario(method="prompt_lookup",
                                                        drafter_options={"prompt_lookup_s_per_seq_per_ktoken": 1e30}),
         "predict", "refuse", ("prompt_lookup_s_per_seq_per_ktoken",)),
        ("the drafter is the target", point_scenario(drafter="llama-3.1-8b"), "predict", "refuse", ("drafter",)),
        ("a tree of 10^5 nodes", point_scenario(method="eagle", tree_size=100000), "predict", "refuse", ("tree_size",)),
        ("a [sweep] tree of 10^5 nodes", dict(analysis_scenario(), sweep={"k": [4], "tree_size": [100000]}), "sweep",
         "refuse", ("tree_size",)),
        ("a [sweep] grid of 10^10 points", dict(analysis_scenario(), sweep={"k": list(range(1, 65)),
                                                                           "batch_size": list(range(1, 1001)),
                                                                           "context_len": list(range(0, 100000, 100)),
                                                                           "alpha": [i / 200 for i in range(200)]}),
         "sweep", "refuse", ("grid", "points", "batch_size")),
        ("alpha and tau in [sweep]", dict(analysis_scenario(), sweep={"alpha": [0.5], "tau": [2.0]}), "sweep", "refuse",
         ("tau", "alpha")),
        ("tau above tau_k + 1 in [sweep]", dict(analysis_scenario(), sweep={"tau": [9.0], "tau_k": 4}), "sweep", "refuse",
         ("tau",)),
        ("an unknown plot in [sweep]", dict(analysis_scenario(), sweep={"k": [2], "plots": ["nope"]}), "sweep", "refuse",
         ("plots", "nope")),
        ("a moved [threshold] key", dict(analysis_scenario(), threshold={"k": [1, 2]}), "threshold", "refuse",
         ("k_max", "k")),
    ]
    for key in ("engine", "fleet", "workload", "slo", "policies", "sweep", "threshold"):  # issue 27: every command
        scen = point_scenario(**{key: {"bogus_key": 1}})
        cases.append((f"a typo in [{key}] on predict", scen, "predict", "refuse", ("bogus_key",)))
    for key, value in (("engine", {"max_num_seqs": 0}), ("fleet", {"n_replicas": -1}), ("slo", {"ttft_s": -1}),
                       ("workload", {"kind": "nope"}), ("policies", {"x": {"kind": "static", "k": -1}}),
                       ("sweep", {"k": [-1]}), ("threshold", {"k_max": 0})):
        cases.append((f"an impossible [{key}] value on predict", point_scenario(**{key: value}), "predict", "refuse",
                      tuple(k for k in value) + ("k",)))
    for title, scen, cmd, exp, culprit in cases:
        if cmd == "simulate-out":
            g.add("cross-field", f"simulate: {title}", ["simulate", f"{D}/s.toml", "--quiet", "--no-plots", "--out",
                     f"{D}/out"], files={"s.toml": to_toml(scen)}, expect=exp, culprit=culprit, check="none",
                     out="out", timeout_s=180)
            continue
        g._scenario_case("cross-field", title, scen, cmd, exp, culprit)
    # a run that cannot end soon: said before it starts, and a SIGINT ends it cleanly
    big = serving_scenario({"kind": "poisson", "n_requests": 10 ** 7, "rate_per_s": 1e6,
                            "prompt": {"kind": "fixed", "tokens": 16}, "output": {"kind": "fixed", "tokens": 8}})
    g.add("cross-field", "simulate: 10^7 requests at 10^6 req/s, SIGINT after 20 s",
             ["simulate", f"{D}/s.toml", "--quiet", "--json"], files={"s.toml": to_toml(big)}, interrupt_s=20,
             expect="either", culprit=("interrupted",), check="simulate", timeout_s=400,
             meta={"notice": True})
    huge = serving_scenario({"kind": "poisson", "n_requests": 10 ** 7, "rate_per_s": 1e9,
                             "prompt": {"kind": "fixed", "tokens": 16}, "output": {"kind": "fixed", "tokens": 8}})
    g.add("cross-field", "simulate: 10^7 requests at 10^9 req/s", ["simulate", f"{D}/s.toml", "--quiet", "--json"],
             files={"s.toml": to_toml(huge)}, interrupt_s=20, expect="either", culprit=("rate_per_s", "interrupted"),
             check="simulate", timeout_s=400, meta={"notice": True})
    forever = serving_scenario({"kind": "poisson", "n_requests": 10 ** 7, "rate_per_s": 10.0,
                                "prompt": {"kind": "fixed", "tokens": 16}, "output": {"kind": "fixed", "tokens": 4000}})
    g.add("cross-field", "simulate: 4 x 10^10 output tokens", ["simulate", f"{D}/s.toml", "--quiet", "--json"],
             files={"s.toml": to_toml(forever)}, interrupt_s=20, expect="refuse", culprit=("tokens", "hours"),
             check="simulate", timeout_s=400)
