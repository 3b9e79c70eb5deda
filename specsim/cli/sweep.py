"""`specsim sweep SCENARIO --out DIR`: the scenario's grid → DIR/sweep.csv, DIR/sweep.parquet, plots."""
from __future__ import annotations

from .common import add_cost_source_flag


def register(sub) -> None:
    p = sub.add_parser(
        "sweep", help="evaluate a scenario's [sweep] grid into a tidy table and plots",
        description="Evaluate the grid in a scenario's [sweep] table (hardware, target, drafter, method, K, "
        "tree size, batch, context, acceptance, ...) into one row per point, written as DIR/sweep.csv and "
        "DIR/sweep.parquet, with PNG and SVG plots beside them. The batch plot marks the scenario's "
        "switch-off point (the one `specsim threshold` recommends; DIR/switch_off.json says what it assumes).",
    )
    p.add_argument("scenario", help="scenario name (e.g. seed-70b-hbm) or path to a TOML file")
    add_cost_source_flag(p)
    p.add_argument("--out", required=True, help="output folder (refused if it holds files, unless --force)")
    p.add_argument("--force", action="store_true", help="replace an earlier run's files in --out")
    p.add_argument("--no-plots", action="store_true", help="write the tables only")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--workers", type=int, default=None,
                   help="evaluate the grid's combinations on a local process pool of N workers (default: every CPU; "
                   "1: one after another in this process)")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="evaluate them on an existing Dask cluster instead, e.g. tcp://HOST:8786 (its workers need "
                   "specsim installed); an interrupted sweep resumes from the combinations already finished")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from tqdm.auto import tqdm

    from ..presentation.figures import SWEEP_PLOTS
    from ..presentation.output import OutputDir
    from ..presentation.parallel import check_workers
    from ..presentation.sweep import sweep_axes, write_sweep_outputs
    from ..speculation.operating_point import resolve_id

    out = OutputDir(args.out, force=args.force)
    op = resolve_id(args.scenario, cost_source=getattr(args, "cost_source", None))
    axes = sweep_axes(op)
    n_plots = 0 if args.no_plots else (len(SWEEP_PLOTS) if "all" in axes["plots"] else len(set(axes["plots"])))
    with out, tqdm(total=n_plots, desc="plots", unit="figure", disable=True if args.quiet or not n_plots else None,
                   leave=False) as bar:
        df, paths, figures, skipped = write_sweep_outputs(op, out, plots=not args.no_plots, progress=not args.quiet,
                                                          on_figure=lambda name: bar.update(1),
                                                          workers=check_workers(args.workers), cluster=args.cluster,
                                                          resume=True)
        if not len(df):  # raised inside the block: the staged files are discarded, --out is left as it was
            from ..errors import EmptyResultError

            why = (f"every combination was skipped ({len(skipped)}), e.g. {skipped[0]['reason']}" if skipped
                   else "an axis of its [sweep] table is empty")
            raise EmptyResultError(f"sweep of {op.name!r}: no point of the grid could be evaluated: {why}")
        # every line is worked out before the folder is committed: once it is, only printing is left, so
        # an interrupt either finds the folder as it was or whole
        lines = _summary(op, df, axes, paths, figures, skipped)
    print("\n".join(lines))
    return 0


def _summary(op, df, axes, paths, figures, skipped) -> list[str]:
    from ..presentation.sweep import n_points

    lines = [f"{len(df)} points ({n_points(axes)} in the grid) → {paths['csv']}, {paths['parquet']}"]
    lines += [f"skipped {s['method']} on {s['target']} / {s['hardware']} ({s['drafter']}): {s['reason']}"
              for s in skipped]
    lines += [f"wrote {path}" for path in figures]
    if len(df) and df["speedup_low"].notna().any():
        from ..speculation.predict import acceptance_band

        b = acceptance_band(op)
        lines.append(f"acceptance from calibration {b['calibration']}: speedup_low / speedup_high columns hold every "
                     f"point at the ends of its {b['level']:.0%} interval (α {b['alpha_low']:.3f}–{b['alpha_high']:.3f} "
                     f"at the scenario's point, where the speedup lies in "
                     f"{b['speedup_low']:.2f}–{b['speedup_high']:.2f}×)")
        lines += [f"warning: outside the calibration: {w}" for w in b["calibration_warnings"]]
    return lines
