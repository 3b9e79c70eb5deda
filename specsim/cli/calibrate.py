"""`specsim calibrate SUBCOMMAND`: fit parts of the cost model to measurements.

Each subcommand is one `_register_<name>(subparsers)` function listed in SUBCOMMANDS that adds its
parser and sets `func(args) -> int`; adding one (`machine`, `acceptance`) is a function and a line.

- `steps FILE`: a stack's efficiency (bandwidth and compute fractions, overheads, all-reduce
  latency) fitted to measured forward-pass times.
- `operators`: a part's kernel curve and all-reduce figures fitted to Vidur's published operator and
  collective profiles, with every model's error before and after, a CSV and a plot.
- `load FILE...`: a deployment fitted to its own load sweep (calibration.load_fit), the rest of the
  curve predicted, each sweep's calibrated scenario written with --write-scenario.
"""
from __future__ import annotations

import argparse
import sys
import time

import pandas as pd

from ..errors import SpecError
from .common import add_cost_source_flag, print_json


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
        "context_len, logit_len, measured_time_s) or, with --format splitwise, the Splitwise simulator's perf_model.csv.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("file", help="CSV of measured forward passes (or, with --format bench, the folder or bench.json "
                                "that `specsim decoder bench --out/--json` wrote)")
    p.add_argument("--format", choices=["rows", "splitwise", "bench"], default="rows", help="input format")
    p.add_argument("--target", help="--format bench: the catalog model the bench ran (default: smollm2-135m-q4_1 "
                                    "for the fetched GGUF)")
    p.add_argument("--bench-hardware", default="local",
                   help="--format bench: the hardware id or file the bench ran on; pass the file `specsim calibrate "
                        "machine --out` wrote by path (an id reads the catalog's copy, which an installed package "
                        "ships inside itself)")
    p.add_argument("--other-machine", action="store_true",
                   help="--format bench: fit even when the bench and --bench-hardware describe different machines or "
                        "runs (refused otherwise: the fit would absorb the other machine's differences)")
    p.add_argument("--write-stack", metavar="PATH",
                   help="also write a stack TOML with the fitted efficiency and the decoder's measured host work "
                        "(e.g. stacks/specsim-numba.toml)")
    p.add_argument("--force", action="store_true",
                   help="--format bench: write even when the bench, the fit or the host timings disagree (a busy "
                        "machine: refused otherwise), marked as disturbed")
    p.add_argument("--stack-id", default="specsim-numba", help="id of the stack --write-stack writes")
    p.add_argument("--hardware", help="fit only the rows on this hardware id (one stack per fit)")
    p.add_argument("--phase", choices=["decode", "prefill"], help="fit only decode or only prefill rows (splitwise)")
    p.add_argument("--fit", default=",".join(PARAMETERS), help="comma-separated parameters to fit")
    p.add_argument("--json", action="store_true", help="print one JSON object (summary and rows)")
    p.add_argument("--out", help="write the per-row table (measured, before, after) to this CSV")
    p.set_defaults(func=_run_steps)


def _run_steps(args) -> int:
    from ..calibration.fit import PARAMETERS as PARAMETERS_DEFAULT
    from ..calibration.fit import check_rows, fit_efficiency, splitwise_rows
    from ..presentation.output import write_file_atomically

    from ..specs.tables import read_csv_table
    from .common import parse_list
    from .decoder import check_output_file

    skipped: list[str] = []
    if args.write_stack and args.format != "bench":
        raise SpecError("--write-stack: needs --format bench (the decoder's own verify passes)")
    for flag, given in (("--other-machine", args.other_machine), ("--force", args.force)):
        if given and args.format != "bench":
            raise SpecError(f"{flag}: applies to --format bench only (the decoder's passes on a measured machine); "
                            f"--format {args.format} has no machine to compare or measure")
    for flag, path in (("--write-stack", args.write_stack), ("--out", args.out)):
        if path is not None:
            check_output_file(path, flag)  # before the fit and the host timings, not after them
    if args.hardware is not None and not args.hardware.strip():
        raise SpecError("--hardware '': expected a hardware id (`specsim hardware list`)")
    fit = tuple(parse_list(args.fit, "--fit", str))
    unknown = [p for p in fit if p not in PARAMETERS_DEFAULT]
    if unknown:
        raise SpecError(f"--fit {args.fit!r}: {unknown[0]!r} is not a parameter; expected some of "
                        f"{', '.join(PARAMETERS_DEFAULT)}")
    if args.format == "bench":
        from ..calibration.decoder_stack import bench_machine_mismatches, bench_rows

        rows = check_rows(bench_rows(args.file, hardware=args.bench_hardware, target=args.target), where=args.file)
        differ = bench_machine_mismatches(args.file, args.bench_hardware)
        if differ:  # the fit would be against another machine's profile: refused, or said before any figure
            from ..specs.catalog import resolve as resolve_path

            what = (f"{args.file} and hardware {args.bench_hardware!r} ({resolve_path('hardware', args.bench_hardware)}) "
                    f"describe different machines or runs: {'; '.join(differ)}. Measure the machine for the bench's "
                    "run first (`specsim calibrate machine --out hardware/local.toml --force`, its --threads and --clock "
                    "as the bench's) and pass it by path (--bench-hardware hardware/local.toml)")
            if not args.other_machine:
                raise SpecError(what + "; or pass --other-machine to fit against it anyway")
            print(f"warning: {what}", file=sys.stderr)
    elif args.format == "splitwise":
        rows, skipped = splitwise_rows(args.file, hardware=args.hardware)
    else:
        rows = check_rows(read_csv_table(args.file, what="CSV of measured forward passes"), where=args.file)
        if args.hardware is not None:
            on = sorted(rows["hardware"].unique())
            rows = rows[rows["hardware"] == args.hardware]
            if rows.empty:
                raise SpecError(f"--hardware {args.hardware!r}: no rows of {args.file} are on it; its rows are on "
                                f"{', '.join(on)}")
    if args.format == "splitwise" and rows.empty:
        raise SpecError(f"{args.file}: no rows to fit" + (f" on --hardware {args.hardware!r}" if args.hardware else ""))
    if args.phase:
        if "phase" not in rows.columns:
            raise SpecError(f"{args.file}: --phase needs a 'phase' column")
        rows = rows[rows["phase"] == args.phase]
    if len(rows) and rows["hardware"].nunique() > 1:
        raise SpecError(f"{args.file}: rows on {sorted(rows['hardware'].unique())}; fit one hardware at a time "
                        f"(--hardware ID), since a stack's efficiency is per part")
    if args.format == "bench" and args.fit == ",".join(PARAMETERS_DEFAULT):
        fit = tuple(p for p in fit if p != "interconnect_latency_s")  # one CPU: no all-reduce to fit
    cal = fit_efficiency(rows, fit=fit)
    summary = cal.summary()
    problems: list[str] = []
    if args.format == "bench":  # checked before anything is written
        from ..calibration.decoder_stack import check_bench_file, check_step_fit
        from ..decoder.disturbance import refusal

        problems = check_bench_file(args.file) + check_step_fit(cal)
        if problems and not args.force:
            raise refusal("calibrate steps", problems, None, None,
                          remedy=f"run `specsim decoder bench` again when it is quieter (the bench {args.file} was "
                                 "measured beside other work)")
    if args.out is not None:
        write_file_atomically(args.out, cal.rows.to_csv(index=False), flag="--out")
    if args.write_stack:
        from ..calibration.decoder_stack import (measure_host, measure_host_in_loop, measure_prompt_lookup,
                                                 read_bench, stack_toml)

        config = read_bench(args.file).get("config", {})
        clock = config.get("clock", "wall")  # time the host work as the bench was
        command = (f"specsim calibrate steps {args.file} --format bench --bench-hardware {args.bench_hardware} "
                   f"--write-stack {args.write_stack}")
        from ..calibration.decoder_stack import check_host
        from ..decoder.disturbance import measure_checked

        pieces = measure_host(clock=clock)
        host, host_problems = measure_checked(lambda: measure_host_in_loop(clock=clock, threads=config.get("threads")),
                                              check_host, what="calibrate steps (host work)",
                                              threads=config.get("threads") or 1, clock=clock, force=args.force,
                                              say=lambda m: print(f"  {m}", file=sys.stderr))
        problems += host_problems
        # a model drafter's per-token work (its distribution, pick and stacked q) from the piecewise timing
        host.update(draft_token_s=pieces["draft_token_s"],
                    draft_source=f"measured by `{command}` ({time.strftime('%Y-%m-%d %H:%M')}): "
                                 f"calibration.decoder_stack.measure_host, median of "
                                 f"{pieces['repeats']}" + (", this thread's CPU time" if clock == "thread" else ""))
        lookup = measure_prompt_lookup(clock=clock)
        text = stack_toml(cal, host, stack_id=args.stack_id, command=command, bench_path=args.file,
                          hardware=args.bench_hardware, lookup=lookup, disturbed=tuple(problems),
                          machine=read_bench(args.file).get("machine"))
        write_file_atomically(args.write_stack, text, flag="--write-stack")
        summary = dict(summary, host=host, prompt_lookup=lookup, stack=args.write_stack)
    if args.json:
        print_json({"summary": summary, "skipped": skipped, "rows": cal.rows.to_dict(orient="records")})
        return 0
    if problems:
        print(f"warning: calibrate steps: written with --force although its figures disagree: {problems[0]}",
              file=sys.stderr)
    from ..presentation.calibration_text import format_steps

    print(format_steps(cal, summary, file=args.file, hardware=rows["hardware"].iloc[0], skipped=skipped,
                       wrote=args.write_stack))
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
    from ..presentation.calibration_text import format_operator_report, operator_toml
    from ..presentation.output import OutputDir
    from ..specs.data import data_path
    from ..specs.hardware import load_hardware
    from ..specs.models import load_model

    train = tuple(s.strip() for s in args.train.split(",") if s.strip())
    out = OutputDir(args.out, force=args.force) if args.out is not None else None  # refuse a non-empty folder up front
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
        print_json({hw: {"errors": r["fit"].errors.to_dict(orient="records"), "toml": operator_toml(r),
                         "all_reduce": None if r["all_reduce"] is None else r["all_reduce"].table.to_dict(orient="records"),
                         "splitwise_decode": None if r["splitwise"] is None else r["splitwise"].to_dict(orient="records")}
                    for hw, r in report.items()})
    else:
        for hw_id, r in report.items():
            print(format_operator_report(hw_id, r, shipped_difference=_shipped_difference(hw_id, r["fit"].kernels)))
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
                out.write_text(f"kernels-{hw_id}.toml", operator_toml(r))
            fig = operator_fit_figure(sums)
            fig.savefig(out.file("operator_fit.png"), dpi=130, bbox_inches="tight")
            close(fig)
        if not args.json:
            print(f"wrote {out.path}/: operator_fit.csv, errors.csv, all_reduce.csv, splitwise_decode.csv, "
                  f"kernels-<part>.toml, operator_fit.png")
    return 0


def _shipped_difference(hw_id: str, kernels) -> float | None:
    """How far the part's shipped [kernels] table is from a refit (None: none shipped, or transferred)."""
    shipped = load_shipped(hw_id)
    return None if shipped is None else _largest_difference(shipped, kernels)


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
    from ..presentation.calibration_text import format_host

    f = fit_host_overheads(args.file)
    out = {"step_us": f.step_s * 1e6, "per_seq_us": f.per_seq_s * 1e6, "multi_gpu_step_us": f.multi_gpu_step_s * 1e6,
           "max_relative_error_by_model": f.max_relative_error, "n_rows": f.n_rows, "source": f.source}
    if args.json:
        print_json(out)
        return 0
    print(format_host(f))
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
    add_cost_source_flag(p)
    p.set_defaults(func=_run_stack_term)


def _run_stack_term(args) -> int:
    from ..calibration.replay import fit_stack_term, read_replay_table
    from ..presentation.calibration_text import format_stack_term
    from .common import parse_list

    table = read_replay_table(args.file)
    f = fit_stack_term(table, stack_id=args.stack, term=args.term, fit_ids=parse_list(args.rows, "--rows", str),
                       cost_source=args.cost_source)
    if args.json:
        print_json({"stack": f.stack, "term": f.term, "value_us": f.value_us, "before_us": f.before_us,
                    "fit_ids": list(f.fit_ids), "rows": f.with_errors().to_dict(orient="records")})
        return 0
    print(format_stack_term(f))
    return 0


# ---- machine --------------------------------------------------------------------------------------

def _register_machine(sub) -> None:
    from ..calibration.machine import FORMATS, MachineConfig

    p = sub.add_parser(
        "machine", help="this machine as a hardware profile, measured with the reference decoder's kernels",
        description="Measure this machine with the reference decoder's own kernels: sustained read bandwidth, the "
        "quantized matrix-vector and matrix-matrix products per weight format and thread count, attention per cached "
        "token, the per-call floors and the element-wise kernels (median of --repeats, with the spread), and write a "
        "hardware profile whose every figure names this command. Takes a few minutes.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", required=True, help="the hardware TOML to write (e.g. hardware/local.toml)")
    p.add_argument("--id", default="local", help="the profile's id (its file name's stem in the catalog)")
    p.add_argument("--repeats", type=int, default=MachineConfig.__dataclass_fields__["repeats"].default,
                   help="timed repetitions per figure (the median is kept, min and max reported)")
    p.add_argument("--threads", help="comma-separated thread counts (default: 1 and all numba may use)")
    p.add_argument("--formats", default=",".join(FORMATS), help="weight formats of the matrix products")
    p.add_argument("--clock", choices=("wall", "thread"), default="wall",
                   help="what the timings read: wall time, or this thread's CPU time (a machine shared with other work; "
                        "needs --threads 1)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out file; and write the profile even when its figures disagree (a busy "
                        "machine: refused otherwise, after --attempts measurements), marked as disturbed")
    p.add_argument("--attempts", type=int, default=2, help="measurements before figures that disagree are refused")
    p.add_argument("--json", action="store_true", help="print every measured table as one JSON object")
    p.set_defaults(func=_run_machine)


def _run_machine(args) -> int:
    from pathlib import Path

    from ..calibration.machine import MachineConfig, measure_machine_checked
    from ..errors import OutputError
    from .decoder import check_output_file
    from ..presentation.output import write_file_atomically
    from .common import parse_list

    out = Path(args.out)
    check_output_file(args.out, "--out")  # before the minutes of measurement, not after them
    if out.exists() and not args.force:
        raise OutputError(f"--out {args.out!r} exists; pass --force to replace it")
    if isinstance(args.attempts, bool) or args.attempts < 1:
        raise SpecError(f"--attempts {args.attempts!r}: expected an integer >= 1")
    threads = parse_list(args.threads, "--threads", int, minimum=1)
    cfg = MachineConfig(repeats=args.repeats, threads=tuple(threads) if threads else None,
                        formats=tuple(parse_list(args.formats, "--formats", str)), clock=args.clock)

    say = None if args.json else (lambda m: print(f"  {m}", file=sys.stderr))
    prof = measure_machine_checked(cfg, attempts=args.attempts, force=args.force, progress=say)
    if prof.disturbed:
        print(f"warning: {args.out}: written with --force although its figures disagree: {prof.disturbed[0]}",
              file=sys.stderr)
    command = (f"specsim calibrate machine --out {args.out}" + (f" --repeats {args.repeats}" if args.repeats != 5 else "")
               + (f" --threads {args.threads}" if args.threads else "") + (f" --clock {args.clock}" if args.clock != "wall" else ""))
    write_file_atomically(args.out, prof.toml(hw_id=args.id, command=command), flag="--out")
    if args.json:
        print_json(prof.to_dict())
        return 0
    from ..presentation.calibration_text import format_machine

    print(format_machine(prof, repeats=cfg.repeats))
    print(f"wrote {args.out}")
    return 0


# ---- acceptance -------------------------------------------------------------------------------------

def _register_acceptance(sub) -> None:
    from ..calibration.acceptance_runs import AcceptanceRunConfig
    from ..calibration.imports import FORMATS

    d = AcceptanceRunConfig.__dataclass_fields__
    p = sub.add_parser(
        "acceptance", help="acceptance measured on the reference decoder, or imported from a stack's logs/metrics",
        description="Without --import: run the reference decoder over the workloads with each of its drafters (the "
        "trained ones when their weights are installed) at each temperature, and fit the acceptance models (i.i.d. "
        "alpha, per-position rates, a tree's per-rank vector, the dependence on context and temperature) with "
        "confidence intervals; --out writes one calibration file per drafter and workload, which a scenario names as "
        "[acceptance] calibrated = \"<target>/<drafter>/<workload>\". With --import FILE: the same fits from vLLM log "
        "lines (V0 or V1), a vLLM Prometheus scrape, SGLang's decode log or llama.cpp's speculative summary.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--import", dest="import_file", metavar="FILE", help="a stack's log or metrics file to fit instead")
    p.add_argument("--format", choices=FORMATS, help="--import: the file's format (default: recognised from its content)")
    p.add_argument("--model-name", help="--import vllm-prometheus: the model_name label to keep")
    p.add_argument("--drafters", help="comma-separated decoder drafters (default: every one installed)")
    p.add_argument("--workloads", default=",".join(d["workloads"].default), help="comma-separated workloads")
    p.add_argument("--temperatures", default=",".join(f"{t:g}" for t in d["temperatures"].default),
                   help="comma-separated sampling temperatures")
    p.add_argument("-k", type=int, default=None, help=f"drafts per cycle (decoder runs default: {d['k'].default}; "
                   "--import of SGLang's log: the K it ran with)")
    p.add_argument("--layers", type=int, help="layers of the layer-skip drafter (default: 4/5 of the target's)")
    p.add_argument("--n-prompts", type=int, default=d["n_prompts"].default, help="prompts per workload and temperature")
    p.add_argument("--tokens", type=int, default=d["tokens"].default, help="new tokens per prompt")
    p.add_argument("--seed", type=int, default=d["seed"].default, help="workload and sampling seed")
    p.add_argument("--threads", type=int, help="numba threads (default: all)")
    p.add_argument("--model", help="target GGUF (default: the fetched SmolLM2-135M)")
    p.add_argument("--name", help="--import: the calibration's name, target/drafter/workload (with --out)")
    p.add_argument("--out", help="folder for the calibration files (<target>__<drafter>__<workload>.toml: the shipped "
                                 "ones are data/calibrations), summary.csv and report.txt; --import: one calibration "
                                 "TOML file")
    p.add_argument("--context-len", type=float, help="--import: the mean context of the traffic the stack served "
                   "(tokens; recorded as the calibration's reference and coverage)")
    p.add_argument("--temperature", type=float, help="--import: the sampling temperature of that traffic")
    p.add_argument("--force", action="store_true", help="replace an earlier run's files in --out")
    p.add_argument("--records", help="a JSON-lines file each finished run is appended to; runs already there (same "
                                     "settings) are read back, so an interrupted calibration resumes")
    p.add_argument("--json", action="store_true", help="print the fits as one JSON object")
    p.set_defaults(func=_run_acceptance)


def _run_acceptance(args) -> int:
    if args.import_file:
        return _run_acceptance_import(args)
    import json
    import sys

    from ..calibration.acceptance_runs import AcceptanceRunConfig, calibrate_acceptance, prompt_index
    from ..presentation.calibration_text import format_acceptance
    from ..presentation.output import OutputDir
    from ..specs.calibrations import calibration_file_name
    from ..specs.catalog import to_toml
    from .common import parse_list

    for flag, v in (("--format", args.format), ("--model-name", args.model_name), ("--name", args.name),
                    ("--context-len", args.context_len), ("--temperature", args.temperature)):
        if v is not None:
            raise SpecError(f"{flag} {v!r}: applies to --import only")
    out = OutputDir(args.out, force=args.force) if args.out is not None else None
    drafters = parse_list(args.drafters, "--drafters", str)
    cfg = AcceptanceRunConfig(
        model=args.model, drafters=tuple(drafters) if drafters else None,
        workloads=tuple(parse_list(args.workloads, "--workloads", str)),
        temperatures=tuple(parse_list(args.temperatures, "--temperatures", float, minimum=0.0)),
        k=4 if args.k is None else args.k, layers=args.layers, n_prompts=args.n_prompts, tokens=args.tokens,
        seed=args.seed, threads=args.threads)
    command = "specsim calibrate acceptance " + " ".join(sys.argv[3:]) if sys.argv[1:3] == ["calibrate", "acceptance"] \
        else "specsim calibrate acceptance"
    res = calibrate_acceptance(cfg, command=command, records=args.records,
                               progress=None if args.json else (lambda m: print(f"  {m}", file=sys.stderr)))
    rows = []
    for name, t in res.tables.items():
        a = t["iid"]
        dep = t["dependence"]
        rows.append({"name": name, "alpha": a["alpha"], "ci_low": a["ci_low"], "ci_high": a["ci_high"],
                     "n_cycles": a["n_cycles"], "context_decay_per_token": dep["context_decay_per_token"],
                     "within_prompt_context_slope": dep.get("within_prompt_context_slope"),
                     "temperature_slope": dep["temperature_slope"],
                     **{f"alpha_T{r['temperature']:g}": r.get("alpha") for r in t["runs"]}})
    summary = pd.DataFrame(rows)
    report = format_acceptance(res)
    if out is not None:
        with out:
            for name, t in res.tables.items():
                out.write_text(calibration_file_name(name), to_toml(t))
            out.write_text("summary.csv", summary.to_csv(index=False))
            out.write_text("report.txt", report + "\n")
            out.write_text("records.json", json.dumps([
                {"drafter": r.drafter, "workload": r.workload, "temperature": r.temperature, "verify": r.verify, "k": r.k,
                 "drafted": r.drafted.tolist(), "accepted": r.accepted.tolist(), "context_len": r.context_len.tolist(),
                 "prompt": prompt_index(r).tolist(), "seconds": r.seconds,
                 "rank_accepted": None if r.rank_accepted is None else r.rank_accepted.tolist(),
                 "rank_tried": None if r.rank_tried is None else r.rank_tried.tolist()}
                for r in res.records]) + "\n")
    if args.json:
        print_json({"calibrations": res.tables, "skipped": list(res.skipped)})
        return 0
    print(report)
    if out is not None:
        print(f"wrote {out.path}/")
    return 0


def _run_acceptance_import(args) -> int:
    from ..calibration.imports import import_acceptance
    from ..presentation.output import write_file_atomically
    from ..specs.catalog import to_toml

    for flag, v in (("--drafters", args.drafters), ("--layers", args.layers), ("--model", args.model),
                    ("--threads", args.threads)):
        if v is not None:
            raise SpecError(f"{flag} {v!r}: applies to decoder runs, not --import")
    from ..calibration.imports import check_traffic
    check_traffic(args.context_len, args.temperature)  # refused with or without --out
    imp = import_acceptance(args.import_file, fmt=args.format, k=args.k, model_name=args.model_name)
    if args.out is not None:
        if not args.name or args.name.count("/") != 2:
            raise SpecError(f"--name {args.name!r}: with --import --out, expected target/drafter/workload (what the "
                            f"stack served, with which drafter, on what traffic)")
        target, drafter, workload = args.name.split("/")
        from ..calibration.imports import calibration_table

        write_file_atomically(args.out, to_toml(calibration_table(imp, name=args.name, target=target, drafter=drafter,
                                                                  workload=workload, context_len=args.context_len,
                                                                  temperature=args.temperature,
                                                                  command=f"specsim calibrate acceptance --import "
                                                                          f"{args.import_file} --out {args.out}")),
                              flag="--out")
    if args.json:
        print_json(imp.to_dict())
        return 0
    from ..presentation.calibration_text import format_acceptance_import

    print(format_acceptance_import(imp, file=args.import_file))
    if args.out:
        print(f"wrote {args.out}")
    return 0


def _register_load(sub) -> None:
    from ..calibration.load_fit import ROLE_MODES
    from ..calibration.load_import import FORMATS

    p = sub.add_parser(
        "load", help="calibrate a deployment from its own load sweep, then predict the rest of the curve",
        description="Fit each sweep's stack on its fit rows (the plain curve fixes the device's scale and per-sequence "
        "cost; the speculative points the per-cycle cost and, where no acceptance is given, α), predict every row "
        "(concurrency and rate rows with the serving simulator, batch rows as one decode iteration) and print a table "
        "per sweep. FILE is a load-sweep CSV (data/published/README.md, `specsim.calibration.load`) or, with --format, "
        "result files of vllm bench serve --save-result, sglang.bench_serving --output-file, or guidellm benchmark "
        "(prefix a path with plain: or spec: to say whether it ran with speculation).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("files", nargs="+", metavar="FILE", help="load-sweep CSV, or benchmark result files")
    p.add_argument("--format", choices=("table",) + FORMATS, default="table", help="input format")
    p.add_argument("--roles", choices=ROLE_MODES, default="table",
                   help="which rows fit: as the table says; plain (the plain curve only: speculation from the catalog and "
                        "the rows' acceptance); plain+lowest (the plain curve and the lowest-load speculative row); "
                        "plain+2lowest (and the second-lowest, which separates per-cycle from per-sequence costs)")
    p.add_argument("--sweep", action="append", help="a sweep to calibrate (repeatable; default every sweep), or the "
                                                     "imported sweep's name")
    for flag, what in (("--stack", "stack id or file"), ("--stack-version", "the stack's release, e.g. 0.10.1"),
                       ("--hardware", "hardware id"), ("--target", "target model id"),
                       ("--target-dtype", "the target's weight format"), ("--method", "drafter family of the "
                                                                          "speculative runs"),
                       ("--drafter", "draft model id"), ("--drafter-options", "key=value;... family options")):
        p.add_argument(flag, help=f"import: {what}")
    p.add_argument("--n-devices", type=int, help="import: devices serving the target")
    p.add_argument("--k", type=int, help="import: draft length (a tree's depth)")
    p.add_argument("--tree-size", type=int, help="import: nodes verified per sequence, for a tree")
    p.add_argument("--token-share", type=float, metavar="SHARE",
                   help="of the plain curve's per-sequence cost, the share paid per emitted token (0..1; default: the "
                        "stack's per_token_share load regime, else 0)")
    p.add_argument("--token-share-loo", metavar="SHARES",
                   help="fit the per-token share leave one source out over these candidates (comma-separated, e.g. "
                        "0,0.25,0.5,0.75,1): each sweep is predicted at the share the sweeps of the other sources "
                        "chose (sweeps whose rows cite one source go together)")
    p.add_argument("--spec-seq-loo", metavar="US",
                   help="with --token-share-loo or --token-share: also scan the host microseconds a speculating "
                        "sequence costs a cycle beyond its stack's spec_per_seq_us (comma-separated, e.g. 0,40,80), "
                        "jointly with the shares, each sweep predicted at the point the other sources chose")
    p.add_argument("--seed", type=int, default=0, help="simulation seed")
    p.add_argument("--json", action="store_true", help="print one JSON object (sweeps, rows, summary)")
    p.add_argument("--out", help="write every row (measured and predicted) to this CSV")
    p.add_argument("--write-scenario", metavar="DIR", help="write each sweep's calibrated stack and scenario into DIR")
    p.add_argument("--force", action="store_true", help="--write-scenario: replace files of those names already in DIR")
    add_cost_source_flag(p)
    p.set_defaults(func=_run_load)


# the flags that describe imported result files (`--format vllm|sglang|guidellm`)
_LOAD_IMPORT_FLAGS = ("--stack", "--stack-version", "--hardware", "--target", "--target-dtype", "--method", "--drafter",
                      "--drafter-options")


def _load_command(args) -> str:
    """The command line a written stack records: every flag that moves a figure (the input's format and
    import flags, the sweeps, roles, shares, seed, pricing) and the folder with --force (run again, it
    replaces what this run wrote), each word quoted for a shell. Not --json or --out: they move nothing."""
    import shlex

    words = ["specsim", "calibrate", "load", *args.files]
    if args.format != "table":
        words += ["--format", args.format]
    for name in args.sweep or ():
        words += ["--sweep", name]
    for flag in _LOAD_IMPORT_FLAGS:
        v = getattr(args, flag[2:].replace("-", "_"))
        if v is not None:
            words += [flag, v]
    for flag, v in (("--n-devices", args.n_devices), ("--k", args.k), ("--tree-size", args.tree_size)):
        if v is not None:
            words += [flag, str(v)]
    words += ["--roles", args.roles]
    if args.token_share is not None:
        words += ["--token-share", repr(args.token_share)]  # repr: the float read back exactly
    if args.token_share_loo is not None:
        words += ["--token-share-loo", args.token_share_loo]
    if args.spec_seq_loo is not None:
        words += ["--spec-seq-loo", args.spec_seq_loo]
    words += ["--seed", str(args.seed)]
    if args.cost_source is not None:
        words += ["--cost-source", args.cost_source]
    if args.write_scenario is not None:
        words += ["--write-scenario", args.write_scenario, "--force"]
    return " ".join(shlex.quote(str(w)) for w in words)


def _run_load(args) -> int:
    import sys

    from ..calibration.load import read_load_sweeps, sweeps_from_table
    from ..calibration.load_fit import calibrate_load, write_scenarios
    from ..presentation.calibration_text import format_load_calibration, format_token_share_loo
    from ..presentation.output import write_file_atomically

    for flag in _LOAD_IMPORT_FLAGS:  # '' is not 'no override': refused, never read as absent
        v = getattr(args, flag[2:].replace("-", "_"))
        if isinstance(v, str) and not v.strip():
            raise SpecError(f"{flag} {v!r}: expected a value, or leave the flag out")
    if args.sweep and any(not s.strip() for s in args.sweep):
        raise SpecError("--sweep '': expected a sweep name")
    if args.format == "table":
        if len(args.files) != 1:
            raise SpecError(f"FILE: one load-sweep CSV, got {len(args.files)} (give --format for result files)")
        sweeps = read_load_sweeps(args.files[0], sweeps=args.sweep)
    else:
        from ..calibration.load_import import import_load_files

        if args.sweep and len(args.sweep) > 1:
            raise SpecError("--sweep: one name for the imported sweep")
        config = {"sweep": args.sweep[0] if args.sweep else "imported", "stack": args.stack,
                  "stack_version": args.stack_version, "hardware": args.hardware, "n_devices": args.n_devices,
                  "target": args.target, "target_dtype": args.target_dtype, "method": args.method,
                  "drafter": args.drafter, "k": args.k, "tree_size": args.tree_size,
                  "drafter_options": args.drafter_options}
        config = {k: ("" if v is None else v) for k, v in config.items()}
        table = import_load_files(args.files, format=args.format, config=config)
        sweeps = sweeps_from_table(table.astype(str).replace({"None": ""}), where=f"{args.format} results")
    quiet = args.json or not sys.stderr.isatty()
    progress = None if quiet else (lambda name: print(f"calibrating {name} ...", file=sys.stderr))
    if args.token_share is not None and not (0.0 <= args.token_share <= 1.0):
        raise SpecError(f"--token-share {args.token_share:g}: expected a share in [0, 1]")
    loo = None
    if args.write_scenario is not None:  # refused before the fit runs: an empty path, a name two sweeps share,
        from ..calibration.load_fit import scenario_paths  # a file already there without --force

        scenario_paths(sweeps, args.write_scenario, force=args.force)
    if args.spec_seq_loo is not None and args.token_share_loo is None and args.token_share is None:
        raise SpecError("--spec-seq-loo: scanned jointly with the per-token share; give --token-share-loo SHARES "
                        "or one --token-share with it")
    if args.token_share_loo is not None or args.spec_seq_loo is not None:  # '' is refused by parse_list
        from ..calibration.load_share import leave_one_source_out
        from .common import parse_list

        if args.token_share is not None and args.token_share_loo is not None:
            raise SpecError("--token-share and --token-share-loo: give one (the second fits the first)")
        shares = (parse_list(args.token_share_loo, "--token-share-loo", float, minimum=0.0, maximum=1.0)
                  if args.token_share_loo is not None else [args.token_share])
        extras = (parse_list(args.spec_seq_loo, "--spec-seq-loo", float, minimum=0.0, maximum=1e6)
                  if args.spec_seq_loo is not None else [0.0])
        loo = leave_one_source_out(sweeps, shares=shares, extras_us=extras, roles=args.roles, seed=args.seed,
                                   progress=progress, cost_source=args.cost_source,
                                   where="--spec-seq-loo" if args.spec_seq_loo is not None else "--token-share-loo")
        cal = loo.loo
    else:
        cal = calibrate_load(sweeps, roles=args.roles, seed=args.seed, progress=progress, token_share=args.token_share,
                             cost_source=args.cost_source)
    command = _load_command(args)
    written = []
    if args.write_scenario is not None:
        written = write_scenarios(cal, args.write_scenario, command=command, force=args.force)
    if args.out:
        write_file_atomically(args.out, cal.rows.to_csv(index=False), flag="--out")
    if args.json:
        out = cal.to_dict()
        out["written"] = [str(p) for p in written]
        if loo is not None:
            out["token_share_loo"] = loo.to_dict()
        print_json(out)
        return 0
    if loo is not None:
        print(format_token_share_loo(loo))
    print(format_load_calibration(cal))
    for path in written:
        print(f"wrote {path}")
    return 0


SUBCOMMANDS = {
    "steps": ("a stack's efficiency from measured forward-pass times", _register_steps),
    "operators": ("a part's kernel curve and all-reduce figures from Vidur's operator profiles", _register_operators),
    "host": ("a serving engine's host work per iteration from Vidur's CPU overheads", _register_host),
    "stack-term": ("one host figure of a stack fitted to chosen rows of a replay table", _register_stack_term),
    "machine": ("this machine as a hardware profile, measured with the decoder's kernels", _register_machine),
    "acceptance": ("acceptance fitted from decoder runs or from a stack's logs and metrics", _register_acceptance),
    "load": ("a deployment fitted to its own load sweep, the rest of the curve predicted", _register_load),
}
