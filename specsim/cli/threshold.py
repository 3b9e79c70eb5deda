"""`specsim threshold SCENARIO [--json]`: the on/off policy and ready-to-paste serving configs."""
from __future__ import annotations

import argparse

from ..specs.scenario import load_scenario
from ..presentation.threshold import format_policy, threshold_policy
from .common import print_json


def register(sub) -> None:
    p = sub.add_parser(
        "threshold", help="batch-size and acceptance thresholds for switching speculation off, with configs",
        description="The production policy for a scenario: the batch size above which to switch speculation "
        "off, the acceptance below which to switch it off, the best K per batch-size band, and ready-to-paste "
        "configuration for vLLM, SGLang and TensorRT-LLM. Settings come from the scenario's [threshold] table.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("scenario", help="scenario name (e.g. seed-70b-hbm) or path to a TOML file")
    p.add_argument("--margin", type=float, help="safety margin: require speedup >= 1 + margin (overrides the file)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run)


def _run(args) -> int:
    scenario = load_scenario(args.scenario)
    if args.margin is not None:
        from dataclasses import replace

        sections = {k: dict(v) for k, v in scenario.sections.items()}
        sections.setdefault("threshold", {})["margin"] = args.margin
        scenario = replace(scenario, sections=sections)
    policy = threshold_policy(scenario)
    if args.json:
        print_json(policy.to_dict())
    else:
        print(format_policy(policy))
    return 0
