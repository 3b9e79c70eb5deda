"""`specsim replay FILE.csv`: predict each measured row and report prediction against measurement."""
from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser(
        "replay", help="predict every row of a table of measured speedups and report the errors",
        description="Predict each row of a CSV of measured speculative-decoding results (columns: id, hardware, "
        "n_devices, stack, target, drafter, method, k, tree_size, batch_size, context_len, temperature, alpha, "
        "tau, measured_speedup; optional target_dtype, drafter_options, source) and report predicted against "
        "measured speedup. Rows that cannot be predicted are reported with the reason.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("file", help="CSV of measured results (e.g. tests/data/published_examples.csv)")
    p.add_argument("--out", help="write the table with predicted_speedup and relative_error to this CSV")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from ..calibration.replay import format_replay, replay_file
    from .common import print_json

    result = replay_file(args.file)
    if args.out:
        result.table.to_csv(args.out, index=False)
    if args.json:
        print_json(result.to_dict())
    else:
        print(format_replay(result))
        if args.out:
            print(f"wrote {args.out}")
    return 0
