"""Acceptance calibration files with one fault each."""
from __future__ import annotations

import copy

from .cases import D, del_path, point_scenario, set_path, to_toml


def add_cases(g) -> None:
    good = {"name": "t/prompt-lookup/code-edit", "target": "llama-3.1-8b", "drafter": "prompt-lookup",
            "method": "prompt_lookup", "workload": "code-edit", "command": "fuzz", "level": 0.95,
            "reference": {"context_len": 1024.0, "temperature": 0.0, "k": 4},
            "iid": {"alpha": 0.7, "ci_low": 0.65, "ci_high": 0.75, "n_cycles": 200, "n_trials": 300},
            "conditional": {"rates": [0.7, 0.72], "ci_low": [0.6, 0.6], "ci_high": [0.8, 0.8]},
            "dependence": {"context_decay_per_token": 0.0, "context_decay_ci": [0.0, 0.0],
                           "temperature_slope": -0.1, "temperature_slope_ci": [-0.2, 0.0]},
            "coverage": {"context_len": [500.0, 1500.0], "temperatures": [0.0], "ks": [4], "workloads": ["code-edit"],
                         "drafters": ["prompt-lookup"]}}
    scen = {k: v for k, v in point_scenario(method="prompt_lookup").items() if k not in ("alpha", "drafter")}
    scen["acceptance"] = {"calibrated": f"{D}/cal.toml"}
    edits = [("valid", None, None, "either"), ("n_cycles = 0", "iid.n_cycles", 0, "refuse"),
             ("n_cycles = -5", "iid.n_cycles", -5, "refuse"), ("ks = []", "coverage.ks", [], "refuse"),
             ("ks = [0]", "coverage.ks", [0], "refuse"), ("ci_low above alpha", "iid.ci_low", 0.8, "refuse"),
             ("ci_high below alpha", "iid.ci_high", 0.6, "refuse"), ("alpha = nan", "iid.alpha", float("nan"), "refuse"),
             ("alpha = 1.5", "iid.alpha", 1.5, "refuse"),
             ("a conditional ci_low above its rate", "conditional.ci_low", [0.75, 0.6], "refuse"),
             ("conditional rates of another length", "conditional.ci_high", [0.8], "refuse"),
             ("a dependence outside its interval", "dependence.temperature_slope", 0.5, "refuse"),
             ("context coverage reversed", "coverage.context_len", [1500.0, 500.0], "refuse"),
             ("reference k = 0", "reference.k", 0, "refuse"), ("reference context -1", "reference.context_len", -1.0, "refuse"),
             ("level = 2", "level", 2.0, "refuse"), ("another target", "target", "qwen2.5-7b", "refuse"),
             ("another method", "method", "eagle", "refuse"), ("an unknown target", "target", "no-such-model", "refuse"),
             ("the same model in another format", "target", "llama-3.1-8b", "either"),
             ("target missing", "target", None, "refuse")]
    for title, key, value, exp in edits:
        cal = copy.deepcopy(good)
        if key is not None:
            if value is None:
                del_path(cal, key)
            else:
                set_path(cal, key, value)
        g.add("calibration-file", title, ["predict", f"{D}/s.toml", "--json"],
                 files={"s.toml": to_toml(scen), "cal.toml": to_toml(cal)}, expect=exp,
                 culprit=(key.split(".")[-1] if key else "cal.toml", "cal.toml", "calibrated"), check="predict",
                 meta={"k": 4})
