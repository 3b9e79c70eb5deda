"""`specsim capacity SCENARIO --rate R`: replicas and GPUs for a rate within an SLO, with and without
speculation, and the cost per million output tokens."""
from __future__ import annotations

import math
import re

from ..errors import SpecError


def parse_duration_s(text, flag: str) -> float:
    """'50ms', '0.05s', '2s', '2' (seconds) → seconds; refused with the flag's name otherwise."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s)?\s*", str(text))
    if not m:
        raise SpecError(f"{flag} {text!r}: expected a duration such as 50ms, 0.05s or 2 (seconds)")
    v = float(m.group(1)) * (1e-3 if m.group(2) == "ms" else 1.0)
    if not (math.isfinite(v) and v > 0):
        raise SpecError(f"{flag} {text!r}: expected a positive duration")
    return v

from .common import add_cost_source_flag


def register(sub) -> None:
    p = sub.add_parser(
        "capacity", help="replicas and GPUs for a rate within an SLO, with and without speculation, and the cost",
        description="Simulate the scenario's workload at --rate on N replicas (each gets every N-th request, "
        "round-robin) and find the smallest N for which at least --attainment of the requests meet both SLO "
        "limits, without speculation and with it (the scenario's K, off above the analytic switch-off batch). "
        "Prints replicas, GPUs, and the cost per million output tokens at --gpu-hour-usd (default: a cited "
        "on-demand price for the hardware, where one is known).",
    )
    p.add_argument("scenario", help="scenario name (e.g. llama-70b-h100-chat) or path to a TOML file")
    add_cost_source_flag(p)
    p.add_argument("--rate", type=float, required=True, help="arrival rate in requests/s")
    p.add_argument("--slo-tpot", help="TPOT limit, e.g. 50ms or 0.05 (seconds; default: the scenario's [slo] tpot_s)")
    p.add_argument("--slo-ttft", help="TTFT limit, e.g. 2s or 500ms (default: the scenario's [slo] ttft_s)")
    p.add_argument("--attainment", type=float, default=0.9, help="share of requests that must meet both limits "
                   "(default: 0.9)")
    p.add_argument("--gpu-hour-usd", type=float, help="price of one device-hour in USD (default: a cited on-demand "
                   "price for h100-sxm, h200-sxm, a100-sxm-80gb)")
    p.add_argument("--requests", type=int, help="simulate only the first N requests of the workload (faster)")
    p.add_argument("--max-replicas", type=int, default=256, help="give up above this many replicas (default: 256)")
    p.add_argument("--seed", type=int, default=0, help="seed for arrivals, lengths and acceptance (default: 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from ..analyses.capacity import capacity
    from ..presentation.progress import Progress
    from ..presentation.text import format_capacity
    from ..speculation.operating_point import resolve_id
    from .common import print_json

    if args.requests is not None and args.requests < 1:
        raise SpecError(f"--requests {args.requests}: expected an integer >= 1")
    if args.max_replicas < 1:
        raise SpecError(f"--max-replicas {args.max_replicas}: expected an integer >= 1")
    if args.seed < 0:
        raise SpecError(f"--seed {args.seed}: expected an integer >= 0")
    tpot = None if args.slo_tpot is None else parse_duration_s(args.slo_tpot, "--slo-tpot")
    ttft = None if args.slo_ttft is None else parse_duration_s(args.slo_ttft, "--slo-ttft")
    op = resolve_id(args.scenario, cost_source=getattr(args, "cost_source", None))
    with Progress("capacity", quiet=args.quiet) as prog:
        plan = capacity(op, rate_per_s=args.rate, slo_tpot_s=tpot, slo_ttft_s=ttft, gpu_hour_usd=args.gpu_hour_usd,
                        attainment=args.attainment, n_requests=args.requests, seed=args.seed,
                        max_replicas=args.max_replicas, progress=prog)
    if args.json:
        print_json(plan.to_dict())
    else:
        print(format_capacity(plan))
    return 0
