"""`specsim calibrate`: fit a stack's efficiency to measured forward-pass times."""
from __future__ import annotations

import argparse

import pandas as pd

from ..calibration.fit import PARAMETERS, check_rows, fit_efficiency, splitwise_rows
from ..errors import SpecError
from .common import print_json


def register(sub) -> None:
    p = sub.add_parser(
        "calibrate", help="fit bandwidth/compute fractions and overheads to measured step times",
        description="Fit how close to the roofline a serving stack gets (bandwidth and compute fractions, "
        "per-step and per-layer overhead, all-reduce latency) from measured forward-pass times, and report "
        "the roofline's error before and after. FILE is a CSV of rows (hardware, target, tp, batch_size, q_len, "
        "ctx_len, logit_len, measured_time_s) or, with --format splitwise, the Splitwise simulator's perf_model.csv.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("file", help="CSV of measured forward passes")
    p.add_argument("--format", choices=["rows", "splitwise"], default="rows", help="input format")
    p.add_argument("--hardware", help="fit only the rows on this hardware id (one stack per fit)")
    p.add_argument("--phase", choices=["decode", "prefill"], help="fit only decode or only prefill rows (splitwise)")
    p.add_argument("--fit", default=",".join(PARAMETERS), help="comma-separated parameters to fit")
    p.add_argument("--json", action="store_true", help="print one JSON object (summary and rows)")
    p.add_argument("--out", help="write the per-row table (measured, before, after) to this CSV")
    p.set_defaults(func=_run)


def _run(args) -> int:
    skipped: list[str] = []
    if args.format == "splitwise":
        rows, skipped = splitwise_rows(args.file, hardware=args.hardware)
    else:
        try:
            rows = check_rows(pd.read_csv(args.file), where=args.file)
        except FileNotFoundError:
            raise SpecError(f"{args.file}: file not found") from None
        if args.hardware:
            rows = rows[rows["hardware"] == args.hardware]
    if args.phase:
        if "phase" not in rows.columns:
            raise SpecError(f"{args.file}: --phase needs a 'phase' column")
        rows = rows[rows["phase"] == args.phase]
    if len(rows) and rows["hardware"].nunique() > 1:
        raise SpecError(f"{args.file}: rows on {sorted(rows['hardware'].unique())}; fit one hardware at a time "
                        f"(--hardware ID), since a stack's efficiency is per part")
    cal = fit_efficiency(rows, fit=tuple(s.strip() for s in args.fit.split(",") if s.strip()))
    summary = cal.summary()
    if args.out:
        cal.rows.to_csv(args.out, index=False)
    if args.json:
        print_json({"summary": summary, "skipped": skipped, "rows": cal.rows.to_dict(orient="records")})
        return 0
    print(f"specsim calibrate: {args.file} ({cal.n_rows} rows on {rows['hardware'].iloc[0]})")
    for line in skipped:
        print(f"  skipped: {line}")
    print(f"  bandwidth_frac {summary['bandwidth_frac']:.3f}   compute_frac {summary['compute_frac']:.3f}")
    print(f"  step overhead {summary['step_overhead_s'] * 1e6:.1f} µs   per layer {summary['per_layer_overhead_s'] * 1e6:.2f} µs"
          f"   all-reduce latency {summary['interconnect_latency_s'] * 1e6:.2f} µs")
    print(f"  |relative error| median: {summary['median_relative_error_before']:.1%} with the catalog's defaults -> "
          f"{summary['median_relative_error_after']:.1%} fitted (p90 {summary['p90_relative_error_after']:.1%}, "
          f"worst {summary['worst_relative_error_after']:.1%})")
    if not cal.success:
        print(f"  warning: the solver did not converge: {cal.message}")
    return 0
