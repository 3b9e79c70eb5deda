"""The project's own replay set under both cost sources, side by side (issue 36).

Every row of data/published/speculative_decoding.csv is predicted with every figure fitted on the set
(calibration.replay.REPLAY_FITS) refitted without the row's source (`replay --leave-source-out`), once
with every pass on the roofline (`--cost-source roofline`) and once with the default (`auto`: the
measured operator tables where the part, stack and model are covered). Printed: median |error| and
the measured slowdowns predicted at or above 1.05, by stack, method and weight format, over all rows and
over the rows the tables cover (where auto priced the target from the tables).

    .venv/bin/python benchmarks/sources_side_by_side.py [--csv FILE] [--out DIR]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specsim.calibration.replay import SLOWDOWN_BAR, leave_one_source_out, read_replay_table  # noqa: E402
from specsim.specs.data import data_path  # noqa: E402
from specsim.specs.models import load_model  # noqa: E402

SOURCES = ("roofline", "auto")


def weight_format(row) -> str:
    dtype = row.get("target_dtype")
    if isinstance(dtype, str) and dtype.strip():
        return dtype.strip()
    try:
        return load_model(str(row["target"])).weight_format
    except Exception:  # noqa: BLE001 - a row whose target does not load is reported by replay itself
        return "?"


def summary(t: pd.DataFrame) -> dict:
    ok = t[t["relative_error"].notna()]
    meas = pd.to_numeric(ok["measured_speedup"], errors="coerce")
    slow = ok[meas < 1.0]
    missed = slow[slow["predicted_speedup"] >= SLOWDOWN_BAR]
    return {"rows": len(ok), "median": float(ok["relative_error"].abs().median()) if len(ok) else float("nan"),
            "signed": float(ok["relative_error"].median()) if len(ok) else float("nan"),
            "slowdowns": len(slow), "missed": len(missed)}


def line(label: str, a: dict, b: dict) -> str:
    def cell(s):
        return f"{s['rows']:>4} {s['median']:>7.1%} {s['signed']:>+7.1%} {s['missed']:>2}/{s['slowdowns']:<2}"
    return f"  {label:<34} {cell(a)}   {cell(b)}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default=None, help="replay table (default: the shipped published/speculative_decoding.csv)")
    ap.add_argument("--out", default=None, help="write each source's table as DIR/replay_<source>.csv")
    args = ap.parse_args(argv)
    path = Path(args.csv) if args.csv else data_path("published/speculative_decoding.csv")
    table = read_replay_table(path)
    tables = {}
    for source in SOURCES:
        t0 = time.perf_counter()
        r = leave_one_source_out(table, where=str(path), cost_source=source)
        t = r.table.copy()
        t["weight_format"] = [weight_format(row) for row in t.to_dict(orient="records")]
        tables[source] = t
        print(f"{source}: {r.n_predicted} of {r.n_rows} rows predicted, left out by source, in "
              f"{time.perf_counter() - t0:.1f} s")
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            t.to_csv(Path(args.out) / f"replay_{source}.csv", index=False)
    a, b = tables["roofline"], tables["auto"]
    covered = b["priced_by"].fillna("").astype(str).str.startswith("aiconfigurator").to_numpy()
    head = "rows  median  signed missed"
    print(f"\n  {'scope':<34} {'roofline: ' + head:<33}   {'auto (measured where covered): ' + head}")
    print(line("all rows", summary(a), summary(b)))
    print(line("rows the tables cover", summary(a[covered]), summary(b[covered])))
    for column in ("stack", "method", "weight_format"):
        print(f"  by {column}")
        keys = a[column].fillna("(none)").astype(str)
        for value in sorted(set(keys)):
            m = (keys == value).to_numpy()
            print(line(f"  {value}", summary(a[m]), summary(b[m])))
    print(f"\nmissed: a measured slowdown (speedup < 1) predicted at or above {SLOWDOWN_BAR}; signed: median of "
          "predicted / measured - 1 (positive: optimistic)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
