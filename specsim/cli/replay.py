"""`specsim replay FILE.csv`: predict each measured row and report prediction against measurement."""
from __future__ import annotations

from .common import add_cost_source_flag


def register(sub) -> None:
    p = sub.add_parser(
        "replay", help="predict every row of a table of measured speedups and report the errors",
        description="Predict each row of a CSV of measured speculative-decoding results (columns: id, hardware, "
        "n_devices, stack, target, drafter, method, k, tree_size, batch_size, context_len, temperature, alpha, "
        "tau, measured_speedup; optional target_dtype, drafter_options, source, notes; x_* carried through) and "
        "report predicted against measured speedup, then the median and worst |error| by method and by stack and "
        "how many measured slowdowns (speedup < 1) are predicted below 1.05. Rows that cannot be predicted are "
        "reported with the reason.",
    )
    p.add_argument("file", help="CSV of measured results (e.g. the shipped published_examples.csv)")
    p.add_argument("--out", help="write the table with predicted_speedup and relative_error to this CSV file")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--leave-source-out", action="store_true",
                   help="predict each row with every catalog figure fitted on rows of the shipped set "
                        "(calibration.replay.REPLAY_FITS) refitted without the row's source, or at its prior where "
                        "every fit row is of that source: the errors of rows no fit saw the source of")
    add_cost_source_flag(p)
    p.set_defaults(func=_run)


def _run(args) -> int:
    from ..calibration.replay import (format_replay, format_scopes, leave_one_source_out, read_replay_table,
                                      replay_file, scope_summary)
    from ..presentation.output import write_file_atomically
    from .common import print_json

    if args.leave_source_out:
        result = leave_one_source_out(read_replay_table(args.file), where=str(args.file), cost_source=args.cost_source)
    else:
        result = replay_file(args.file, cost_source=args.cost_source)
    if args.out is not None:
        write_file_atomically(args.out, result.table.to_csv(index=False), flag="--out")
    if args.json:
        print_json({**result.to_dict(), "scopes": scope_summary(result), "leave_source_out": args.leave_source_out})
    else:
        print(format_replay(result))
        print(("\nleft out by source (every row's source out of every fit):" if args.leave_source_out else "\nby scope:")
              + "\n" + format_scopes(result))
        if args.out:
            print(f"wrote {args.out}")
    return 0
