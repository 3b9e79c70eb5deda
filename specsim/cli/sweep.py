"""`specsim sweep SCENARIO --out DIR`: the scenario's grid → DIR/sweep.csv, DIR/sweep.parquet, plots."""
from __future__ import annotations

import argparse

from ..specs.scenario import load_scenario
from ..presentation.sweep import n_points, run_sweep, sweep_axes, verify_roofline_points, write_sweep


def register(sub) -> None:
    p = sub.add_parser(
        "sweep", help="evaluate a scenario's [sweep] grid into a tidy table and plots",
        description="Evaluate the grid in a scenario's [sweep] table (hardware, target, drafter, method, K, "
        "tree size, batch, context, acceptance, ...) into one row per point, written as DIR/sweep.csv and "
        "DIR/sweep.parquet, with PNG and SVG plots beside them.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("scenario", help="scenario name (e.g. seed-70b-hbm) or path to a TOML file")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--no-plots", action="store_true", help="write the tables only")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_run)


def _run(args) -> int:
    scenario = load_scenario(args.scenario)
    axes = sweep_axes(scenario)
    skipped: list = []
    df = run_sweep(scenario, progress=not args.quiet, skipped=skipped)
    paths = write_sweep(df, args.out)
    print(f"{len(df)} points ({n_points(axes)} in the grid) → {paths['csv']}, {paths['parquet']}")
    for s in skipped:
        print(f"skipped {s['method']} on {s['target']} / {s['hardware']} ({s['drafter']}): {s['reason']}")
    if args.no_plots or df.empty:
        return 0
    from ..presentation import plots  # matplotlib only when plotting

    ref = {"hardware": axes["hardware"][0], "target": axes["target"][0], "method": axes["method"][0],
           "stack": (axes["stack"][0] or ""), "attention": scenario.attention, "batch_size": scenario.batch_size,
           "context_len": scenario.context_len,
           "alpha": scenario.alpha if scenario.alpha is not None else axes["alpha"][0]}
    if scenario.alpha is None and scenario.tau is not None:
        from ..speculation.acceptance import alpha_from_tau
        ref["alpha"] = alpha_from_tau(float(scenario.tau), scenario.k)
    roof = verify_roofline_points(ref["target"], ref["hardware"], batch_sizes=(1, 4, 16, 64),
                                  context_len=scenario.context_len, tp=int(axes["tp"][0]),
                                  stack=ref["stack"] or None, attention=scenario.attention)
    for path in plots.sweep_figures(df, args.out, reference=ref, roofline=roof, which=axes["plots"]):
        print(f"wrote {path}")
    return 0
