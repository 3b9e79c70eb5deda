"""`specsim compare A B`: two scenarios side by side — verdict, speed, memory, and at a rate capacity
and cost."""
from __future__ import annotations

from .common import add_cost_source_flag


def register(sub) -> None:
    p = sub.add_parser(
        "compare", help="two scenarios side by side: verdict, speed, memory, capacity and cost",
        description="Put two scenarios side by side: the verdict (specsim advise), the speed at batch 1 and at "
        "the operating point, the memory, and with --rate the replicas, GPUs and cost per million output tokens "
        "with and without speculation (specsim capacity; scenarios with a [workload]).",
    )
    p.add_argument("a", help="first scenario (name or TOML path)")
    p.add_argument("b", help="second scenario (name or TOML path)")
    add_cost_source_flag(p)
    p.add_argument("--rate", type=float, help="arrival rate in requests/s for capacity and cost")
    p.add_argument("--simulate", action="store_true", help="choose each verdict's gate with the serving simulator")
    p.add_argument("--requests", type=int, help="simulate only the first N requests of each workload (faster)")
    p.add_argument("--slo-tpot", help="TPOT limit for capacity, e.g. 50ms (default: each scenario's [slo])")
    p.add_argument("--slo-ttft", help="TTFT limit for capacity, e.g. 2s (default: each scenario's [slo])")
    p.add_argument("--gpu-hour-usd", type=float, help="price of one device-hour in USD (default: a cited price "
                   "where one is known)")
    p.add_argument("--seed", type=int, default=0, help="seed (default: 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from ..errors import SpecError
    from ..analyses.compare import compare
    from ..presentation.progress import Progress
    from ..presentation.text import format_comparison
    from .capacity import parse_duration_s
    from ..speculation.operating_point import resolve_id
    from .common import print_json

    if args.requests is not None and args.requests < 1:
        raise SpecError(f"--requests {args.requests}: expected an integer >= 1")
    if args.rate is not None and not args.rate > 0:
        raise SpecError(f"--rate {args.rate}: expected a positive arrival rate in requests/s")
    tpot = None if args.slo_tpot is None else parse_duration_s(args.slo_tpot, "--slo-tpot")
    ttft = None if args.slo_ttft is None else parse_duration_s(args.slo_ttft, "--slo-ttft")
    a = resolve_id(args.a, cost_source=args.cost_source)
    b = resolve_id(args.b, cost_source=args.cost_source)
    with Progress("compare", quiet=args.quiet) as prog:
        c = compare(a, b, rate_per_s=args.rate, simulate=args.simulate, n_requests=args.requests,
                    gpu_hour_usd=args.gpu_hour_usd, slo_tpot_s=tpot, slo_ttft_s=ttft, seed=args.seed, progress=prog)
    if args.json:
        print_json(c.to_dict())
    else:
        print(format_comparison(c))
    return 0
