"""`specsim calibrate SUBCOMMAND`: fit parts of the cost model to measurements.

Each subcommand is one `_register_<name>(subparsers)` function listed in SUBCOMMANDS that adds its
parser and sets `func(args) -> int`; adding one (`machine`, `acceptance`) is a function and a line.

- `steps FILE`: a stack's efficiency (bandwidth and compute fractions, overheads, all-reduce
  latency) fitted to measured forward-pass times.
- `operators`: a part's kernel curve and all-reduce figures fitted to Vidur's published operator and
  collective profiles, with every model's error before and after, a CSV and a plot.
"""
from __future__ import annotations

import argparse

import pandas as pd

from ..errors import SpecError
from .common import print_json


def register(sub) -> None:
    p = sub.add_parser(
        "calibrate", help="fit the cost model to measurements (subcommands: " + ", ".join(SUBCOMMANDS) + ")",
        description="Fit parts of the cost model to measured times. Subcommands: "
        + "; ".join(f"{name}: {desc}" for name, (desc, _) in SUBCOMMANDS.items()) + ".")
    cal = p.add_subparsers(dest="calibrate_command", metavar="SUBCOMMAND")
    for _desc, reg in SUBCOMMANDS.values():
        reg(cal)

    def no_subcommand(args) -> int:
        p.print_help()
        return 2

    p.set_defaults(func=no_subcommand)


# ---- steps --------------------------------------------------------------------------------------------

def _register_steps(sub) -> None:
    from ..calibration.fit import PARAMETERS

    p = sub.add_parser(
        "steps", help="fit bandwidth/compute fractions and overheads to measured step times",
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
    p.set_defaults(func=_run_steps)


def _run_steps(args) -> int:
    from ..calibration.fit import check_rows, fit_efficiency, splitwise_rows
    from ..presentation.output import write_file_atomically

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
        write_file_atomically(args.out, cal.rows.to_csv(index=False), flag="--out")
    if args.json:
        print_json({"summary": summary, "skipped": skipped, "rows": cal.rows.to_dict(orient="records")})
        return 0
    print(f"specsim calibrate steps: {args.file} ({cal.n_rows} rows on {rows['hardware'].iloc[0]})")
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


# ---- operators ----------------------------------------------------------------------------------------

def _register_operators(sub) -> None:
    from ..calibration.profiles import DEFAULT_TRAIN_MODELS, VIDUR_GPUS

    p = sub.add_parser(
        "operators", help="fit a part's kernel curve and all-reduce figures to Vidur's operator profiles",
        description="Refit the [kernels] table (GEMM and element-wise time against tokens) and the [all_reduce] "
        "table of a part from Vidur's published operator and all-reduce profiles (data/perf/vidur), fitting on "
        "the --train models and checking on the others. Prints every model's median |error| of the layer "
        "operator sum before (pure roofline) and after (fitted curve), the TOML to paste into the hardware "
        "file, and Splitwise's measured Llama-2-70B decode steps beside the device-time model. With --out, "
        "writes the per-configuration table (CSV), the errors, the TOML and a plot of measured against "
        "predicted per GPU.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--hardware", action="append", choices=sorted(VIDUR_GPUS.values()),
                   help="part to fit (repeatable; default: every part the profiles cover)")
    p.add_argument("--train", default=",".join(DEFAULT_TRAIN_MODELS),
                   help="comma-separated Vidur model names to fit on; the others are held out")
    p.add_argument("--n-sm", type=int, help="the part's SM count when its file has no [kernels] table yet")
    p.add_argument("--data", help="a folder with Vidur's layout (compute/, network/) instead of the shipped data")
    p.add_argument("--out", help="folder for operator_fit.csv, errors.csv, all_reduce.csv, splitwise_decode.csv, "
                                 "kernels-<part>.toml and operator_fit.png")
    p.add_argument("--force", action="store_true", help="replace an earlier run's files in --out")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.set_defaults(func=_run_operators)


def _run_operators(args) -> int:
    from ..calibration.fit import SPLITWISE_HARDWARE
    from ..calibration.profiles import (VIDUR_COMMIT, VIDUR_NETWORKS, fit_all_reduce, fit_operator_profiles,
                                        load_all_reduce, load_operator_profiles, splitwise_decode_breakdown)
    from ..presentation.output import OutputDir
    from ..specs.data import data_path
    from ..specs.hardware import load_hardware
    from ..specs.models import load_model

    train = tuple(s.strip() for s in args.train.split(",") if s.strip())
    out = OutputDir(args.out, force=args.force) if args.out else None  # refuse a non-empty folder up front
    profiles = load_operator_profiles(args.data)
    parts = args.hardware or sorted(profiles["hardware"].unique())
    fits, reduces, splitwise, report = [], [], [], {}
    for hw_id in parts:
        hw = load_hardware(hw_id)
        if args.n_sm is not None and args.n_sm < 1:
            raise SpecError(f"--n-sm {args.n_sm}: expected the part's SM count, an integer >= 1")
        fit = fit_operator_profiles(profiles, hw, train_models=train, n_sm=args.n_sm)
        fits.append(fit)
        source = (f"fitted from Vidur profiling data (microsoft/vidur, commit {VIDUR_COMMIT}, data/profiling/compute/"
                  f"{fit.operators['gpu'].iloc[0]}) on {', '.join(train)} by `specsim calibrate operators --hardware {hw_id}`")
        ar = None
        if hw_id in VIDUR_NETWORKS:
            net = VIDUR_NETWORKS[hw_id]
            ar = fit_all_reduce(load_all_reduce(net, args.data), net)
            reduces.append(ar.table.assign(hardware=hw_id, network=net))
        sw = None
        if hw_id in SPLITWISE_HARDWARE.values():
            sw = splitwise_decode_breakdown(data_path("perf/splitwise_sim/perf_model.csv"), hw, load_model("llama-2-70b"))
            splitwise.append(sw)
        ar_source = (f"fitted from Vidur's network/{VIDUR_NETWORKS.get(hw_id)}/all_reduce.csv (microsoft/vidur, commit "
                     f"{VIDUR_COMMIT}) by `specsim calibrate operators --hardware {hw_id}`: latency + 2(n-1)/n bytes / bus "
                     f"bandwidth per group size, one median per half-octave of message size")
        report[hw_id] = {"fit": fit, "source": source, "all_reduce": ar, "all_reduce_source": ar_source, "splitwise": sw}
    if args.json:
        print_json({hw: {"errors": r["fit"].errors.to_dict(orient="records"), "toml": _toml(r),
                         "all_reduce": None if r["all_reduce"] is None else r["all_reduce"].table.to_dict(orient="records"),
                         "splitwise_decode": None if r["splitwise"] is None else r["splitwise"].to_dict(orient="records")}
                    for hw, r in report.items()})
    else:
        for hw_id, r in report.items():
            _print_operator_report(hw_id, r)
    if out is not None:
        from ..presentation.cost_plots import close, operator_fit_figure

        sums = pd.concat([f.sums.assign(hardware=f.hardware) for f in fits], ignore_index=True)
        with out:
            out.write_text("operator_fit.csv", sums.to_csv(index=False))
            out.write_text("errors.csv", pd.concat([f.errors.assign(hardware=f.hardware) for f in fits]).to_csv(index=False))
            if reduces:
                out.write_text("all_reduce.csv", pd.concat(reduces).to_csv(index=False))
            if splitwise:
                out.write_text("splitwise_decode.csv", pd.concat(splitwise).to_csv(index=False))
            for hw_id, r in report.items():
                out.write_text(f"kernels-{hw_id}.toml", _toml(r))
            fig = operator_fit_figure(sums)
            fig.savefig(out.file("operator_fit.png"), dpi=130, bbox_inches="tight")
            close(fig)
        if not args.json:
            print(f"wrote {out.path}/: operator_fit.csv, errors.csv, all_reduce.csv, splitwise_decode.csv, "
                  f"kernels-<part>.toml, operator_fit.png")
    return 0


def _print_operator_report(hw_id: str, r: dict) -> None:
    fit = r["fit"]
    print(f"specsim calibrate operators: {hw_id} (trained on {', '.join(fit.train_models)}; tile "
          f"{fit.kernels.gemm_tile[0]}x{fit.kernels.gemm_tile[1]}{'' if fit.success else '; solver did not converge: ' + fit.message})")
    print("  |relative error| of the layer operator sum (10 operators, every tp and 1..4096 tokens): median with the")
    print("  pure roofline, then with the fitted curve (median, p90, worst), the four GEMMs alone, and past 4096 tokens")
    print(f"  {'model':<28}{'split':<10}{'rows':>6}{'roofline':>10}{'fitted':>9}{'p90':>8}{'worst':>8}{'GEMMs':>8}"
          f"{'>4096':>8}")
    for e in fit.errors.itertuples(index=False):
        beyond = f"{e.median_after_beyond:>8.1%}" if e.n_rows_beyond else f"{'-':>8}"
        print(f"  {e.model:<28}{e.split:<10}{e.n_rows:>6}{e.median_before:>10.1%}{e.median_after:>9.1%}"
              f"{e.p90_after:>8.1%}{e.worst_after:>8.1%}{e.gemm_median_after:>8.1%}{beyond}")
    print(f"  largest held-out median: {fit.held_out_median():.1%}")
    shipped = load_shipped(hw_id)
    if shipped is not None:
        print(f"  the shipped [kernels] table differs from this refit by at most {_largest_difference(shipped, fit.kernels):.1%}")
    print("  TOML for the hardware file:")
    print("    " + _toml(r).replace("\n", "\n    ").rstrip())
    ar = r["all_reduce"]
    if ar is not None:
        print(f"  all-reduce ({ar.network}): latency + 2(n-1)/n bytes / bus bandwidth")
        for a in ar.table.itertuples(index=False):
            print(f"    n = {a.group_size}: latency {a.latency_s * 1e6:6.1f} µs, bus {a.bus_bandwidth_bytes_per_s / 1e9:6.1f} GB/s"
                  f"  (|error| median {a.median_abs_error:.1%}, p90 {a.p90_abs_error:.1%}, {a.n_rows} rows)")
    sw = r["splitwise"]
    if sw is not None:
        print("  Splitwise Llama-2-70B decode step (prompt 512, 128 output tokens) against the device-time model, "
              "no fixed overheads:")
        print(f"    {'tp':>3}{'batch':>6}{'measured':>10}{'GEMMs':>8}{'elemw':>7}{'attn':>7}{'allred':>8}{'device':>8}"
              f"{'explained':>10}{'left':>8}  (ms)")
        for s in sw.itertuples(index=False):
            print(f"    {s.tp:>3}{s.batch_size:>6}{s.measured_s * 1e3:>10.1f}{s.gemm_s * 1e3:>8.1f}{s.elementwise_s * 1e3:>7.1f}"
                  f"{s.attention_s * 1e3:>7.1f}{s.all_reduce_s * 1e3:>8.1f}{s.device_s * 1e3:>8.1f}{s.explained_frac:>10.0%}"
                  f"{s.unexplained_s * 1e3:>8.1f}")


def _toml(r: dict) -> str:
    """The [kernels] and [all_reduce] tables of one part and their [sources] lines."""
    text, sources = r["fit"].toml(), [f'kernels = "{r["source"]}"']
    if r["all_reduce"] is not None:
        text += "\n" + r["all_reduce"].toml()
        sources.append(f'all_reduce = "{r["all_reduce_source"]}"')
    return text + "\n[sources]\n" + "\n".join(sources) + "\n"


def load_shipped(hw_id: str):
    from ..specs.hardware import load_hardware

    k = load_hardware(hw_id).kernels
    return None if k is None or k.transferred_from else k


def _largest_difference(a, b) -> float:
    pairs = [(a.gemm_bandwidth_frac, b.gemm_bandwidth_frac), (a.gemm_compute_frac, b.gemm_compute_frac),
             (a.gemm_overlap_exponent, b.gemm_overlap_exponent), (a.gemm_floor_s, b.gemm_floor_s),
             (a.elementwise_floor_s, b.elementwise_floor_s)]
    pairs += [(a.elementwise_bandwidth_frac[k], b.elementwise_bandwidth_frac[k]) for k in a.elementwise_bandwidth_frac]
    pairs += [(a.elementwise_row_s_per_elem[k], b.elementwise_row_s_per_elem[k]) for k in a.elementwise_row_s_per_elem]
    diff = max(abs(x - y) / max(abs(x), abs(y), 1e-30) for x, y in pairs)
    if a.gemm_tile != b.gemm_tile or a.elementwise_rows_per_sm != b.elementwise_rows_per_sm:
        diff = max(diff, 1.0)
    return diff


# name -> (one-line description, registering function); `specsim calibrate NAME ...`
def _register_host(sub) -> None:
    p = sub.add_parser(
        "host", help="a serving engine's host work per iteration, fitted to Vidur's measured CPU overheads",
        description="Fit host = step + per_seq x batch (+ a multi-GPU term for tp > 1) to Vidur's published "
        "per-iteration CPU overheads of a vLLM-V0-style engine on an A100 server (the shipped "
        "perf/vidur/cpu_overheads/a100.csv, or --file), and print the figures a stack's [host] table takes.")
    p.add_argument("--file", help="a CSV in Vidur's cpu_overheads format (default: the shipped one)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run_host)


def _run_host(args) -> int:
    from ..calibration.host import fit_host_overheads

    f = fit_host_overheads(args.file)
    out = {"step_us": f.step_s * 1e6, "per_seq_us": f.per_seq_s * 1e6, "multi_gpu_step_us": f.multi_gpu_step_s * 1e6,
           "max_relative_error_by_model": f.max_relative_error, "n_rows": f.n_rows, "source": f.source}
    if args.json:
        print_json(out)
        return 0
    print(f"host work per iteration (fitted to {f.n_rows} rows: {f.source})")
    print(f"  step_us           = {out['step_us']:.0f}")
    print(f"  per_seq_us        = {out['per_seq_us']:.1f}")
    print(f"  multi_gpu_step_us = {out['multi_gpu_step_us']:.0f}   (tp > 1: Ray broadcast of each step and its setup)")
    for model, err in f.max_relative_error.items():
        print(f"  {model:<40} worst |error| {err:.1%}")
    return 0


def _register_stack_term(sub) -> None:
    from ..calibration.replay import HOST_TERMS

    p = sub.add_parser(
        "stack-term", help="fit one host figure of a stack to chosen rows of a replay table",
        description="Fit one of a serving stack's host figures (its [host] table or cycle_overhead_us) so that the "
        "chosen rows of a replay table (measured speedups, `specsim replay` format) are predicted as measured, "
        "by least squares on log(predicted / measured); print the value and every row of that stack before and "
        "after, so the rows the fit never saw check it. The stack file is not changed.")
    p.add_argument("file", help="replay CSV (e.g. the shipped data/published/speculative_decoding.csv)")
    p.add_argument("--stack", required=True, help="stack id")
    p.add_argument("--term", required=True, choices=HOST_TERMS, help="the figure to fit")
    p.add_argument("--rows", required=True, help="comma-separated row ids to fit on")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run_stack_term)


def _run_stack_term(args) -> int:
    from ..calibration.replay import fit_stack_term, read_replay_table
    from .common import parse_list

    table = read_replay_table(args.file)
    f = fit_stack_term(table, stack_id=args.stack, term=args.term, fit_ids=parse_list(args.rows, "--rows", str))
    t = f.table.assign(error_before=f.table["predicted_before"] / f.table["measured_speedup"] - 1,
                       error_after=f.table["predicted_after"] / f.table["measured_speedup"] - 1)
    held = t[~t["fitted_on"]]
    if args.json:
        print_json({"stack": f.stack, "term": f.term, "value_us": f.value_us, "before_us": f.before_us,
                    "fit_ids": list(f.fit_ids), "rows": t.to_dict(orient="records")})
        return 0
    print(f"{f.stack} {f.term}: {f.before_us:g} -> {f.value_us:.1f} (fitted on {len(f.fit_ids)} row(s))")
    for r in t.to_dict(orient="records"):
        mark = "fit" if r["fitted_on"] else "   "
        print(f"  {mark} {r['id']:<48} measured {r['measured_speedup']:.2f}  before {r['predicted_before']:.2f} "
              f"({r['error_before']:+.0%})  after {r['predicted_after']:.2f} ({r['error_after']:+.0%})")
    if len(held):
        print(f"rows the fit never saw: median |error| {held['error_before'].abs().median():.1%} -> "
              f"{held['error_after'].abs().median():.1%}")
    return 0


SUBCOMMANDS = {
    "steps": ("a stack's efficiency from measured forward-pass times", _register_steps),
    "operators": ("a part's kernel curve and all-reduce figures from Vidur's operator profiles", _register_operators),
    "host": ("a serving engine's host work per iteration from Vidur's CPU overheads", _register_host),
    "stack-term": ("one host figure of a stack fitted to chosen rows of a replay table", _register_stack_term),
}
