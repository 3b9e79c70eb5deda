"""Every field of every scenario table set to every kind of bad value (issue 28 item 3)."""
from __future__ import annotations

from .cases import _toml_value, analysis_scenario, point_scenario, serving_scenario, set_path


# -- every scenario table and field (issue 28 item 3) ---------------------------------------------
# field -> (type, lowest possible, highest possible, lowest open): what the README and the
# system being modelled allow; a value outside is impossible and must be refused. None: no
# bound the system sets (the simulator may still refuse a value as past its own limits).
TABLE_FIELDS = {
    "workload": ("poisson", {"n_requests": ("int", 1, None, False), "rate_per_s": ("float", 0.0, None, True),
                             "kind": ("choice:trace,poisson,gamma,closed_loop", None, None, False)}),
    "workload@gamma": ("gamma", {"cv": ("float", 0.0, None, True)}),
    "workload@closed": ("closed_loop", {"n_users": ("int", 1, 30, False), "think_time_s": ("float", 0.0, None, False)}),
    "workload.prompt": ("poisson", {"tokens": ("int", 1, None, False)}),
    "workload.output": ("poisson", {"tokens": ("int", 1, None, False)}),
    "workload.prompt@uniform": ("uniform", {"min": ("int", 1, 64, False), "max": ("int", 1, None, False)}),
    "workload.prompt@lognormal": ("lognormal", {"mu": ("float", None, None, False), "sigma": ("float", 0.0, None, False)}),
    "workload.prompt@lognormal-mean": ("lognormal-mean", {"mean_tokens": ("float", 0.0, None, True)}),
    "workload@trace": ("trace", {"time_scale": ("float", 0.0, None, True), "trace": ("path", None, None, False),
                                 "format": ("choice:azure,mooncake,plain", None, None, False)}),
    "workload@mooncake": ("mooncake", {"jitter_s": ("float", 0.0, None, False)}),
    "engine": (None, {"max_num_seqs": ("int", 1, None, False), "max_num_batched_tokens": ("int", 1, None, False),
                      "chunked_prefill": ("bool", None, None, False), "block_size": ("int", 1, None, False),
                      "gpu_memory_utilization": ("float", 0.0, 1.0, True), "watermark_frac": ("float", 0.0, 0.999, False),
                      "max_model_len": ("int", 1, 131072, False), "acceptance_window_steps": ("int", 1, None, False),
                      "activation_reserve_gb": ("float", 0.0, 80.0, False), "n_blocks": ("int", 1, None, False),
                      "preemption_mode": ("choice:recompute,swap", None, None, False),
                      "scheduling": ("choice:fcfs,priority", None, None, False),
                      "prefix_caching": ("bool", None, None, False), "drafter_catchup": ("bool", None, None, False)}),
    "engine@swap": ("swap", {"swap_space_gib": ("float", 0.0, None, False),
                             "swap_bandwidth_gb_s": ("float", 0.0, None, True)}),
    "fleet": (None, {"n_replicas": ("int", 1, None, False),
                     "layout": ("choice:colocated,disaggregated", None, None, False),
                     "router": ("choice:round_robin,least_outstanding,prefix_affinity", None, None, False)}),
    "fleet@affinity": ("affinity", {"cache_threshold": ("float", 0.0, 1.0, False),
                                    "balance_abs_threshold": ("int", 0, None, False),
                                    "balance_rel_threshold": ("float", 1.0, None, False)}),
    "fleet@disagg": ("disagg", {"n_prefill": ("int", 1, 1, False), "kv_transfer_gb_s": ("float", 0.0, None, True),
                                "kv_transfer_latency_us": ("float", 0.0, None, False),
                                "prefill_runs_drafter": ("bool", None, None, False)}),
    "slo": (None, {"ttft_s": ("float+inf", 0.0, None, True), "tpot_s": ("float+inf", 0.0, None, True)}),
    "policies.static_k4": ("static", {"k": ("int", 0, 64, False)}),
    "policies.gate_bs16": ("disable_by_batch_size", {"threshold": ("int", 1, 64, False), "sticky": ("bool", None, None, False)}),
    "policies.off": ("acceptance_off_switch", {"min_acceptance_frac": ("float", 0.0, 1.0, False),
                                               "min_window_tokens": ("int", 1, None, False),
                                               "probe_every_steps": ("int", 1, None, False)}),
    "policies.gp": ("goodput_optimal", {"k_max": ("int", 0, 64, False)}),
    "sweep": (None, {"tau_k": ("int", 1, 64, False)}),
    "sweep[]": (None, {"k": ("int", 0, 64, False), "batch_size": ("int", 1, None, False),
                       "context_len": ("int", 0, 131000, False), "alpha": ("float", 0.0, 1.0, False),
                       "tree_size": ("int", 1, None, False), "tp": ("int", 1, 8, False),
                       "temperature": ("float", 0.0, None, False), "attention": ("choice:fused,naive", None, None, False),
                       "hardware": ("id", None, None, False), "target": ("id", None, None, False),
                       "method": ("choice:draft_model,prompt_lookup,medusa,eagle,lookahead,layer_skip,mtp,sparse_kv",
                                  None, None, False),
                       "plots": ("id", None, None, False)}),
    "threshold": (None, {"margin": ("float", 0.0, None, False), "k_max": ("int", 1, 64, False),
                         "batch_limit": ("int", 1, None, False), "drafter_model": ("str", None, None, False)}),
    "threshold[]": (None, {"batch_sizes": ("int", 1, None, False), "alphas": ("float", 0.0, 1.0, False)}),
    "acceptance": (None, {"context_decay_per_token": ("float", 0.0, None, False),
                          "reference_context_len": ("float", 0.0, None, False),
                          "temperature_slope": ("float", None, None, False),
                          "reference_temperature": ("float", 0.0, None, False), "n_ranks": ("int", 1, None, False),
                          "rank_decay": ("float", 0.0, 1.0, False)}),
    "acceptance@by_position[]": ("by_position", {"by_position": ("float", 0.0, 1.0, False)}),
    "drafter_options@medusa": ("medusa", {"n_heads_medusa": ("int", 1, None, False),
                                          "medusa_layers_per_head": ("int", 1, None, False)}),
    "drafter_options@layer_skip": ("layer_skip", {"skip_layers": ("int", 1, 31, False)}),
    "drafter_options@lookahead": ("lookahead", {"lookahead_window": ("int", 1, None, False),
                                                "lookahead_ngram": ("int", 2, None, False),
                                                "lookahead_guesses": ("int", 1, None, False)}),
    "drafter_options@sparse_kv": ("sparse_kv", {"sparse_sink": ("int", 0, 131072, False),
                                                "sparse_window": ("int", 1, 131072, False)}),
    "drafter_options@prompt_lookup": ("prompt_lookup", {"prompt_lookup_s_per_seq_per_ktoken": ("float", 0.0, 1.0, False)}),
    "drafter_options@eagle": ("eagle", {"eagle_version": ("int", 1, 3, False)}),
}
# one sample per kind of fault, and an edge that is possible
FIELD_VALUES = [("abc", "type"), (True, "type"), ([1, 2], "type"), (float("nan"), "nan"), (float("inf"), "inf"),
                (-1, -1), (0, 0), (0.5, 0.5), (1e30, 1e30), (2 ** 63 - 1, 2 ** 63 - 1)]


def add_cases(g) -> None:
    for key, (variant, fields) in TABLE_FIELDS.items():
        table, _, _ = key.partition("@")
        listed = table.endswith("[]")
        table = table.rstrip("[]")
        for name, spec in fields.items():
            typ, lo, hi, lo_open = spec
            values = list(FIELD_VALUES)
            if typ.startswith("choice:"):
                values = [("nope", "type"), (5, "type"), ("", "type"), (True, "type")] + \
                    [(c, "valid") for c in typ.split(":")[1].split(",")[:2]]
            elif typ in ("path", "id"):
                values = [(5, "type"), ("", "type"), ([1], "type"), ("no/such/file-or-id", "type")]
            elif typ == "str":  # any non-empty string: a name printed as given
                values = [(5, "type"), ("", "type"), ([1], "type"), ("meta-llama/Llama-3.2-1B", "valid")]
            for value, kind in values:
                scen, cmd = _table_base(g, table, variant)
                v = [value] if listed else value
                if table.startswith("drafter_options"):
                    scen["drafter_options"][name] = v
                else:
                    set_path(scen, f"{table}.{name}", v)
                exp = _field_judge(spec, value, kind)
                if table == "workload" and name == "kind" and value in ("trace", "poisson"):
                    exp = "refuse" if value == "trace" else "either"  # trace without a trace path
                culprit = (name, name.split("_")[0] if len(name.split("_")[0]) > 3 else name, "interrupted")
                if isinstance(value, str) and len(value) > 3:
                    culprit += (value,)
                if table == "workload":
                    culprit += ("trace",)  # a format that is not the file's: the reader names the file
                if table == "fleet":
                    culprit += ("n_prefill",)  # a disaggregated layout needs its prefill pool
                c = g._scenario_case("tables", f"[{key}] {name} = {_toml_value(v)[:40]}", scen, cmd, exp,
                                        culprit, interrupt_s=60 if cmd == "simulate" else None)
                if variant in ("trace", "mooncake"):
                    c.meta.pop("out_tokens", None)  # a trace's own lengths


def _table_base(g, table: str, variant: str | None) -> tuple[dict, str]:
    """A scenario whose `table` the command reads, in the variant a field needs."""
    sec = table.split(".")[0]
    if sec in ("workload", "engine", "fleet", "slo", "policies"):
        scen = serving_scenario()
        if variant == "gamma":
            scen["workload"].update(kind="gamma", cv=1.0)
        elif variant == "uniform":
            scen["workload"]["prompt"] = {"kind": "uniform", "min": 1, "max": 64}
        elif variant == "lognormal":
            scen["workload"]["prompt"] = {"kind": "lognormal", "mu": 5.0, "sigma": 0.5}
        elif variant == "lognormal-mean":
            scen["workload"]["prompt"] = {"kind": "lognormal", "mean_tokens": 200.0, "sigma": 0.5}
        elif variant == "closed_loop":
            scen["workload"] = {"kind": "closed_loop", "n_requests": 30, "n_users": 4,
                                "prompt": {"kind": "fixed", "tokens": 256}, "output": {"kind": "fixed", "tokens": 32}}
        elif variant in ("trace", "mooncake"):
            name = {"trace": "traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv",
                    "mooncake": "traces/mooncake_fast25/conversation_trace.jsonl"}[variant]
            scen["workload"] = {"kind": "trace", "trace": name, "window_s": [0, 30]}
        elif variant == "swap":
            scen["engine"]["preemption_mode"] = "swap"
        elif variant == "affinity":
            scen["fleet"] = {"n_replicas": 2, "router": "prefix_affinity"}
        elif variant == "disagg":
            scen["fleet"] = {"n_replicas": 2, "layout": "disaggregated", "n_prefill": 1}
        elif variant in ("static", "disable_by_batch_size", "acceptance_off_switch", "goodput_optimal"):
            base = {"static": {"kind": "static", "k": 4}, "disable_by_batch_size": {"kind": "disable_by_batch_size",
                    "k": 4, "threshold": 16}, "acceptance_off_switch": {"kind": "acceptance_off_switch", "k": 4,
                    "min_acceptance_frac": 0.5}, "goodput_optimal": {"kind": "goodput_optimal", "k_max": 4}}[variant]
            scen["policies"] = {"never": {"kind": "never"}, table.split(".")[1]: base}
        if table == "fleet" and "fleet" not in scen:
            scen["fleet"] = {"n_replicas": 1}
        return scen, "simulate"
    if sec in ("sweep", "threshold"):
        return analysis_scenario(), sec
    scen = point_scenario()
    if variant == "by_position":
        scen.pop("alpha")
        scen["acceptance"] = {"by_position": [0.8, 0.7]}
    elif variant is not None and sec == "drafter_options":
        scen.update(method=variant, drafter_options={})
        if variant != "draft_model":
            scen.pop("drafter")
    else:
        scen["tree_size"] = 8
        scen["method"] = "eagle"
        scen.pop("drafter")
        scen["acceptance"] = {}
    return scen, "predict"


def _field_judge(spec, value, kind) -> str:
    typ, lo, hi, lo_open = spec
    if typ.startswith("choice:"):
        return "either" if kind == "valid" else "refuse"
    if typ in ("path", "id"):
        return "refuse"
    if typ == "str":
        return "either" if kind == "valid" else "refuse"
    if typ == "bool":
        return "either" if isinstance(value, bool) else "refuse"
    if kind == "type":
        return "refuse"
    if kind == "inf" and typ == "float+inf" and value > 0:
        return "either"
    if kind in ("nan", "inf"):
        return "refuse"
    v = float(kind)
    if typ == "int" and isinstance(value, float):
        return "refuse"
    if (lo is not None and (v <= lo if lo_open else v < lo)) or (hi is not None and v > hi):
        return "refuse"
    return "either"
