"""`specsim sweep SCENARIO --out DIR`: the scenario's grid → DIR/sweep.csv, DIR/sweep.parquet, plots."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser(
        "sweep", help="evaluate a scenario's [sweep] grid into a tidy table and plots",
        description="Evaluate the grid in a scenario's [sweep] table (hardware, target, drafter, method, K, "
        "tree size, batch, context, acceptance, ...) into one row per point, written as DIR/sweep.csv and "
        "DIR/sweep.parquet, with PNG and SVG plots beside them. The batch plot marks the scenario's "
        "switch-off point (the one `specsim threshold` recommends) with what it assumes.",
    )
    p.add_argument("scenario", help="scenario name (e.g. seed-70b-hbm) or path to a TOML file")
    p.add_argument("--out", required=True, help="output folder (refused if it holds files, unless --force)")
    p.add_argument("--force", action="store_true", help="replace an earlier run's files in --out")
    p.add_argument("--no-plots", action="store_true", help="write the tables only")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from tqdm.auto import tqdm

    from ..presentation.output import OutputDir
    from ..presentation.sweep import n_points, run_sweep, sweep_axes, verify_roofline_points, write_sweep
    from ..speculation.operating_point import resolve_id

    out = OutputDir(args.out, force=args.force)
    op = resolve_id(args.scenario)
    axes = sweep_axes(op)
    skipped: list = []
    with out:
        df = run_sweep(op, progress=not args.quiet, skipped=skipped)
        paths = write_sweep(df, out)
        figures = []
        if not args.no_plots and not df.empty:
            from ..presentation import plots  # matplotlib only when plotting
            from ..presentation.threshold import recommended_switch_off

            switch_off = recommended_switch_off(op) if op.speculative and op.acceptance.model is not None else None
            ref = {"hardware": axes["hardware"][0], "target": axes["target"][0], "method": axes["method"][0],
                   "stack": axes["stack"][0] or "", "attention": op.deployment.attention,
                   "batch_size": op.batch_size, "context_len": op.context_len,
                   "alpha": op.alpha if op.alpha is not None else axes["alpha"][0]}
            roof = verify_roofline_points(op, batch_sizes=(1, 4, 16, 64))
            with tqdm(total=7, desc="plots", unit="figure", disable=True if args.quiet else None, leave=False) as bar:
                figures = plots.sweep_figures(df, out, reference=ref, roofline=roof, which=axes["plots"],
                                              switch_off=switch_off, progress=lambda name: bar.update(1))
    print(f"{len(df)} points ({n_points(axes)} in the grid) → {paths['csv']}, {paths['parquet']}")
    for s in skipped:
        print(f"skipped {s['method']} on {s['target']} / {s['hardware']} ({s['drafter']}): {s['reason']}")
    for path in figures:
        print(f"wrote {path}")
    return 0
