"""`specsim advise SCENARIO`: the verdict first — on or off, K per batch band, the gate and the
configs to paste — decided under the scenario's workload with the serving simulator when it has one."""
from __future__ import annotations

from .common import add_cost_source_flag, parse_list


def add_serving_flags(p) -> None:
    """Flags shared by the commands that simulate a scenario's workload (advise, report, compare)."""
    p.add_argument("--rates", help="comma-separated arrival rates in requests/s for the serving check (default: the "
                   "scenario's [workload] rates)")
    p.add_argument("--requests", type=int, help="simulate only the first N requests of the workload (faster; default: "
                   "all of the scenario's window)")
    p.add_argument("--alpha-delta", type=float, default=0.05, help="acceptance band when no calibrated one exists: "
                   "α ± this (absolute; default: 0.05)")
    p.add_argument("--no-simulate", action="store_true", help="decide analytically even when the scenario has a workload")
    p.add_argument("--seed", type=int, default=0, help="seed for arrivals, lengths and acceptance (default: 0)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def serving_kwargs(args) -> dict:
    from ..errors import SpecError

    if args.requests is not None and args.requests < 1:
        raise SpecError(f"--requests {args.requests}: expected an integer >= 1")
    if args.seed < 0:
        raise SpecError(f"--seed {args.seed}: expected an integer >= 0")
    return dict(rates=parse_list(args.rates, "--rates", float, minimum=0.0, exclusive=True), n_requests=args.requests,
                alpha_delta=args.alpha_delta, simulate=not args.no_simulate, seed=args.seed)


def register(sub) -> None:
    p = sub.add_parser(
        "advise", help="the verdict: speculation on or off, K per batch band, the gate, configs to paste",
        description="Decide whether to speculate for a scenario: on or off, K (or the tree) per batch band, the "
        "batch size from which to switch it off, and the configuration to paste into vLLM, SGLang and "
        "TensorRT-LLM. With a [workload], candidate gates around the analytic switch-off point are simulated "
        "at every rate of the scenario beside its own policies and the one closest to the best at every rate "
        "is chosen; memory is included; the acceptance is varied by ± --alpha-delta when no calibrated band "
        "exists; the assumptions that would change the answer are listed.",
    )
    p.add_argument("scenario", help="scenario name (e.g. llama-70b-h100-chat) or path to a TOML file")
    add_cost_source_flag(p)
    p.add_argument("--margin", type=float, help="require speedup >= 1 + margin (default: the scenario's [threshold] "
                   "margin, else 0.05)")
    add_serving_flags(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from ..analyses.advise import advise
    from ..presentation.progress import Progress
    from ..presentation.text import format_advice
    from ..speculation.operating_point import resolve_id
    from .common import print_json

    kw = serving_kwargs(args)
    op = resolve_id(args.scenario, cost_source=getattr(args, "cost_source", None))
    with Progress("advise", quiet=args.quiet) as prog:
        a = advise(op, margin=args.margin, progress=prog, **kw)
    if args.json:
        print_json(a.to_dict())
    else:
        print(format_advice(a))
    return 0
