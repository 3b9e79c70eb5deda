"""`specsim threshold SCENARIO [--json]`: the on/off policy and ready-to-paste serving configs."""
from __future__ import annotations

from .common import add_cost_source_flag


def register(sub) -> None:
    p = sub.add_parser(
        "threshold", help="when to switch speculation off (batch size and acceptance), with serving configs",
        description="The production policy for a scenario: the batch size from which to switch speculation off "
        "(under the scenario's workload when it has one, else decode only; with its K and with K re-tuned; "
        "memory included), the acceptance below which to switch it off, the best K per batch band, and "
        "ready-to-paste configuration for vLLM, SGLang and TensorRT-LLM. Settings come from the scenario's "
        "[threshold] table.",
    )
    p.add_argument("scenario", help="scenario name (e.g. seed-70b-hbm) or path to a TOML file")
    add_cost_source_flag(p)
    p.add_argument("--margin", type=float, help="safety margin: require speedup >= 1 + margin (default: the "
                   "scenario's [threshold] margin, else 0.05)")
    p.add_argument("--decode-only", action="store_true", help="ignore the scenario's [workload] (no serving view)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from ..analyses.threshold import threshold_policy
    from ..presentation.text import format_policy
    from ..serving import workload_mix
    from ..speculation.operating_point import resolve_id
    from .common import print_json

    op = resolve_id(args.scenario, cost_source=getattr(args, "cost_source", None))
    mix = None if args.decode_only else workload_mix(op)
    policy = threshold_policy(op, workload=mix[0] if mix else None, max_batch_serving=mix[1] if mix else None,
                              margin=args.margin)
    if args.json:
        print_json(policy.to_dict())
    else:
        print(format_policy(policy))
    return 0
