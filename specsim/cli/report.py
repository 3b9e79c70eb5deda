"""`specsim report SCENARIO --out DIR`: a self-contained HTML page, its Markdown twin and the CSV
behind every figure, for a design review."""
from __future__ import annotations

from .advise import add_serving_flags, serving_kwargs

from .common import add_cost_source_flag


def register(sub) -> None:
    p = sub.add_parser(
        "report", help="a self-contained HTML report (and Markdown twin, and CSVs) for a scenario",
        description="Write DIR/report.html (one self-contained page: figures embedded, no network), DIR/report.md "
        "(the same text, figures as the PNG files beside it), a CSV behind every figure, serving_gates.csv and "
        "verdict.json. Sections: the verdict (specsim advise), the configuration and its sources, the roofline of "
        "target and drafter, speedup against K, tree size, batch and context with the regression region, the "
        "serving comparison of gating policies (when the scenario has a [workload]) and the calibration status.",
    )
    p.add_argument("scenario", help="scenario name (e.g. seed-70b-hbm) or path to a TOML file")
    add_cost_source_flag(p)
    p.add_argument("--out", required=True, help="output folder (refused if it holds files, unless --force)")
    p.add_argument("--force", action="store_true", help="replace an earlier run's files in --out")
    p.add_argument("--margin", type=float, help="require speedup >= 1 + margin (default: the scenario's [threshold] "
                   "margin, else 0.05)")
    add_serving_flags(p)
    p.set_defaults(func=_run)


def command_line(args) -> str:
    """The command as given, rebuilt from the parsed flags (recorded in the report and its manifest, so
    the report can be regenerated with it)."""
    import shlex

    parts = ["specsim", "report", args.scenario, "--out", args.out]
    for flag, value, default in (("--rates", args.rates, None), ("--requests", args.requests, None),
                                 ("--alpha-delta", args.alpha_delta, 0.05), ("--seed", args.seed, 0),
                                 ("--margin", args.margin, None)):
        if value != default:
            parts += [flag, str(value)]
    parts += [flag for flag, on in (("--no-simulate", args.no_simulate), ("--force", args.force)) if on]
    return " ".join(shlex.quote(p) for p in parts)


def _run(args) -> int:
    from ..presentation.output import OutputDir
    from ..presentation.progress import Progress
    from ..presentation.report import build_report, write_report
    from ..speculation.operating_point import resolve_id

    kw = serving_kwargs(args)
    command = command_line(args)
    out = OutputDir(args.out, force=args.force, command=command)  # refuse a bad --out before any work
    op = resolve_id(args.scenario, cost_source=getattr(args, "cost_source", None))
    with Progress("report", quiet=args.quiet) as prog:
        data = build_report(op, margin=args.margin, command=command, progress=prog, **kw)
        prog.add(1)
        prog.phase("writing")
        with out:
            names = write_report(data, out)
        prog.step(text="written")
    a = data.advice
    print(f"VERDICT: {a.headline}")
    print(f"wrote {out.path / 'report.html'} (self-contained), report.md and {len([n for n in names if n.endswith('.csv')])} "
          f"CSV files into {out.path}")
    return 0
