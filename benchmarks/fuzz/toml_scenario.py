"""Scenario TOML files broken at the file level, by typos and by values outside each top-level field's range."""
from __future__ import annotations

import copy

from .cases import _check_for, _toml_value, analysis_scenario, D, del_path, ENGINE_SPECS, file_level_bad, judge, NUM_BAD, serving_scenario, set_path, SLO_SPECS, THRESHOLD_SPECS, to_toml, TOP_SPECS, typo, WORKLOAD_SPECS


def add_cases(g, n: int) -> None:
    rng = g.rng
    sections = [("", TOP_SPECS, "predict"), ("threshold", THRESHOLD_SPECS, "threshold"),
                ("workload", WORKLOAD_SPECS, "simulate"), ("engine", ENGINE_SPECS, "simulate"),
                ("slo", SLO_SPECS, "simulate")]
    for i in range(n):
        sec, specs, cmd = sections[0] if i < n * 0.4 else rng.choice(sections)
        scen = serving_scenario() if cmd == "simulate" else analysis_scenario()
        op = rng.random()
        key = rng.choice(sorted(specs))
        dotted = f"{sec}.{key}" if sec else key
        if op < 0.72:
            value, kind = rng.choice(NUM_BAD if specs[key][0] != "str" else
                                     [("", "type"), (5, "type"), ([1], "type"), ("nope-x", "type"),
                                      (True, "type"), ({"a": 1}, "type")])
            set_path(scen, dotted, value)
            exp = judge(specs[key], value, kind)
            if specs[key][0] == "str" and isinstance(value, str):
                exp = "refuse"
            if key == "context_len" and kind not in ("type", "nan", "inf") and exp == "either":
                exp = "either"
            title = f"[{sec or 'top'}] {key} = {_toml_value(value)[:30]}"
            culprit = (key, key.split("_")[0] if len(key.split("_")[0]) > 3 else key) + \
                ((value,) if isinstance(value, str) and len(value) > 2 else ()) + \
                (("model",) if key in ("target", "drafter") else ())
        elif op < 0.84:
            bad = typo(dotted, rng)
            v = copy.deepcopy(scen)
            del_path(v, dotted)
            set_path(v, bad, 1)
            scen = v
            exp, title, culprit = "refuse", f"unknown key {bad}", (bad.split(".")[-1],)
        elif op < 0.92 and sec:
            scen.pop(sec, None)
            exp = "either" if sec in ("threshold", "slo", "engine") else "refuse"
            title, culprit = f"section [{sec}] missing", (sec,)
        else:
            set_path(scen, f"{sec}.bogus_table" if sec else "bogus_table", {"x": 1})
            exp, title, culprit = "refuse", f"unknown table in [{sec or 'top'}]", ("bogus_table",)
        g._scenario_case("toml-scenario", title, scen, cmd, exp, culprit)
    # list-valued keys and policy tables
    lists = [("threshold.batch_sizes", [[], [0, 1], [-4], [1, "a"], [1, 1, 2], "4", [1.5], [10**7]]),
             ("threshold.alphas", [[], [1.5], [-0.1], [float("nan")], [0.5, 0.5], ["x"], [0.0]]),
             ("sweep.batch_size", [[], [-1], [0], ["a"], [10**8], 4]),
             ("sweep.k", [[0], [-1], [1000], ["x"]]), ("sweep.alpha", [[1.5], [-0.2], [float("nan")]]),
             ("sweep.context_len", [[-1], [10**8]]), ("sweep.hardware", [["nope"], [1], []]),
             ("workload.prompt", [{"kind": "fixed", "tokens": 0}, {"kind": "fixed", "tokens": -5},
                                  {"kind": "fixed", "tokens": 10**7}, {"kind": "fixed"}, {"kind": "nope", "tokens": 5},
                                  {"kind": "uniform", "low": 10, "high": 5}, {"kind": "lognormal", "mean": -1},
                                  {"kind": "fixed", "tokens": "256"}, "256"]),
             ("workload.output", [{"kind": "fixed", "tokens": 0}, {"kind": "fixed", "tokens": -1},
                                  {"kind": "fixed", "tokens": 2.5}, {"kind": "fixed", "tokens": 10**7}]),
             ("workload.rates", [[], [0], [-1], ["a"], [1, 1], [float("inf")]]),
             ("workload.kind", ["nope", 5, ""]), ("workload.cv", [0, -1, float("nan")]),
             ("workload.window_s", [[600, 0], [1e9, 2e9], [0], ["a", "b"], [-5, -1]]),
             ("policies.static_k4", [{"kind": "static", "k": 0}, {"kind": "static", "k": -1},
                                     {"kind": "static", "k": 1000}, {"kind": "nope"}, {"kind": "static"},
                                     {"kind": "static", "k": "4"}, {"kind": "static", "k": 4, "sticky": "no"}]),
             ("policies.gate_bs16", [{"kind": "disable_by_batch_size", "k": 4, "threshold": 0},
                                     {"kind": "disable_by_batch_size", "k": 4, "threshold": -3},
                                     {"kind": "disable_by_batch_size", "k": 4, "threshold": "16"},
                                     {"kind": "disable_by_batch_size", "k": 4}]),
             ("policies", [{}, {"never": {"kind": "never"}, "never2": {"kind": "never"}}]),
             ("engine.chunked_prefill", ["false", "no", 0]),
             ]
    for dotted, vals in lists:
        for v in vals:
            sec = dotted.split(".")[0]
            cmd = {"threshold": "threshold", "sweep": "sweep"}.get(sec, "simulate")
            scen = serving_scenario() if cmd == "simulate" else analysis_scenario()
            set_path(scen, dotted, v)
            exp = "refuse"
            if (dotted, repr(v)) in {("threshold.batch_sizes", "[1, 1, 2]"), ("sweep.batch_size", "4"),
                                     ("threshold.batch_sizes", "[10000000]"), ("sweep.batch_size", "[100000000]"),
                                     ("sweep.k", "[0]"), ("workload.rates", "[]"), ("policies", "{}"),
                                     ("policies.static_k4", "{'kind': 'static', 'k': 0}"),
                                     ("workload.output", "{'kind': 'fixed', 'tokens': 10000000}"),
                                     ("policies.static_k4", "{'kind': 'static', 'k': 1000}"),
                                     ("sweep.k", "[1000]"), ("threshold.alphas", "[0.0]"),
                                     ("policies", "{'never': {'kind': 'never'}, 'never2': {'kind': 'never'}}"),
                                     ("workload.rates", "[1, 1]"), ("threshold.alphas", "[0.5, 0.5]")}:
                exp = "either"
            g._scenario_case("toml-scenario", f"{dotted} = {_toml_value(v)[:40]}", scen, cmd, exp,
                                (dotted.split(".")[-1], sec))
    # whole-file damage
    good = to_toml(analysis_scenario()).encode()
    for title, content, exp in file_level_bad(rng, good) + [
            ("duplicate key", good + b"k = 5\n", "refuse"), ("unclosed table", b"[threshold\nmargin = 1\n", "refuse"),
            ("a folder as the scenario", None, "refuse")]:
        for cmd in ("predict", "threshold", "sweep"):
            if content is None:
                argv = g._argv_for(cmd, f"{D}/dir.toml")
                g.add("toml-scenario", f"{cmd}: {title}", argv, files={"dir.toml/x": "a = 1\n"}, expect="refuse",
                         culprit=("dir.toml",), check=_check_for(cmd), meta={"k": 4},
                         out="out" if cmd == "sweep" else None)
                continue
            argv = g._argv_for(cmd, f"{D}/s.toml")
            g.add("toml-scenario", f"{cmd}: {title}", argv, files={"s.toml": content}, expect=exp,
                     culprit=("s.toml",), check=_check_for(cmd), meta={"k": 4},
                     out="out" if cmd == "sweep" else None)
