"""`specsim simulate`: a scenario's workload through the serving simulator under each policy."""
from __future__ import annotations

import math

from ..errors import SpecError
from .common import parse_list, print_json


def register(sub) -> None:
    p = sub.add_parser(
        "simulate",
        help="serving simulation: continuous batching under load, each gating policy, a rate sweep",
        description="Run the scenario's [workload] through the continuous-batching serving simulator under "
        "each policy of its [policies] table, at each arrival rate, and compare latency percentiles, "
        "throughput and goodput. Speedups are against the scenario's non-speculating policy. The analytic "
        "switch-off point under the same workload is printed beside the simulated crossover.",
    )
    p.add_argument("scenario", help="scenario name (e.g. llama-70b-h100-chat) or path to a TOML file")
    p.add_argument("--rates", help="comma-separated arrival rates in requests/s (default: the scenario's "
                   "[workload] rates, else the workload as given)")
    p.add_argument("--policies", help="comma-separated policy names from [policies] (default: all)")
    p.add_argument("--seed", type=int, default=0, help="seed for arrivals, lengths and acceptance (default: 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--out", help="folder for summary.csv, batch_sizes.csv, per-request CSVs and the plots")
    p.add_argument("--force", action="store_true", help="with --out: replace an earlier run's files in the folder")
    p.add_argument("--no-plots", action="store_true", help="with --out: skip the PNG plots")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--workers", type=int, default=None,
                   help="run the (policy, rate) points on a local process pool of N workers (default: every CPU; "
                   "1: one after another in this process)")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="run the points on an existing Dask cluster instead, e.g. tcp://HOST:8786 (its workers need "
                   "specsim installed); with --out an interrupted run resumes from the points already finished")
    p.set_defaults(func=_run)


def _ms(x) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x * 1e3:.1f}"


def _table_text(table, crossovers: dict, scenario_name: str, switch_off) -> str:
    head = ("policy", "rate/s", "TPOT p50", "TPOT p99", "TTFT p50", "TTFT p99", "tok/s", "goodput/s", "SLO %",
            "batch", "KV %", "preempt", "acc len", "speedup")
    rows = []
    for _, r in table.iterrows():
        rate = r["rate_per_s"]
        rows.append((
            str(r["policy"]), "as given" if rate is None or (isinstance(rate, float) and math.isnan(rate)) else f"{rate:g}",
            _ms(r["tpot_p50_s"]), _ms(r["tpot_p99_s"]), _ms(r["ttft_p50_s"]), _ms(r["ttft_p99_s"]),
            f"{r['throughput_tokens_per_s']:.0f}", f"{r['goodput_requests_per_s']:.2f}",
            f"{100 * r['slo_attainment_frac']:.0f}", f"{r.get('batch_size_mean', float('nan')):.1f}",
            f"{100 * r.get('kv_used_frac_mean', float('nan')):.0f}", f"{int(r['n_preemptions'])}",
            "-" if not math.isfinite(r["mean_acceptance_length"]) else f"{r['mean_acceptance_length']:.2f}",
            "-" if "speedup_tpot_p50" not in r or not math.isfinite(r["speedup_tpot_p50"]) else f"{r['speedup_tpot_p50']:.2f}x",
        ))
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    lines = [f"specsim simulate: {scenario_name} (latencies in ms; speedup = baseline p50 TPOT / policy p50 TPOT)",
             fmt.format(*head), "  ".join("-" * w for w in widths)]
    lines += [fmt.format(*row) for row in rows]
    if crossovers:
        lines.append("")
        for p, x in crossovers.items():
            lines.append(f"crossover ({p}): " + (f"speculation stops paying at about {x:.2f} req/s" if x is not None
                                                  else "none in the swept rates"))
    if switch_off is not None:
        lines.append(f"switch-off point (analytic): {switch_off.label()}")
    return "\n".join(lines)


def _run(args) -> int:
    from tqdm import tqdm

    from ..presentation.output import OutputDir
    from ..presentation.parallel import check_workers
    from ..presentation.simulation import compare_policies, finish_resume, write_comparison
    from ..speculation.operating_point import resolve_id

    if args.seed < 0:
        raise SpecError(f"--seed {args.seed}: expected an integer >= 0")
    rates = parse_list(args.rates, "--rates", float, minimum=0.0, exclusive=True)
    policies = parse_list(args.policies, "--policies", str)
    out = OutputDir(args.out, force=args.force) if args.out else None  # refuse a bad --out before any work
    op = resolve_id(args.scenario)
    n_pol = len(policies) if policies else (len(op.section("policies")) or (2 if op.speculative else 1))
    n_rates = len(rates) if rates else (len(op.section("workload").get("rates", [])) or 1)
    with tqdm(total=n_pol * n_rates, desc="simulate", unit="run", disable=True if args.quiet else None,
              leave=False) as bar:
        def progress(name, rate):
            bar.set_postfix_str(f"{name} @ {rate if rate is not None else 'trace'}")
            bar.update(1)
        c = compare_policies(op, rates=rates, policies=policies, seed=args.seed, progress=progress,
                             workers=check_workers(args.workers), cluster=args.cluster,
                             resume_in=out.path if out is not None else None)
    if out is not None:
        with out:
            write_comparison(c, out, plots=not args.no_plots)
        finish_resume(c)
    setup = c.setup
    if args.json:
        print_json({"scenario": op.name, "baseline_policy": c.baseline, "kv_blocks": setup.capacity.n_blocks,
                    "kv_capacity_tokens": setup.capacity.capacity_tokens,
                    "memory_per_device_bytes": setup.capacity.memory_bytes, "workload": setup.workload.source,
                    "workload_notes": list(setup.workload.notes), "crossover_rate_per_s": c.crossovers,
                    "switch_off": None if c.switch_off is None else c.switch_off.to_dict(),
                    "runs": [dict(r.summary) for r in c.results.values()]})
        return 0
    print(_table_text(c.table, c.crossovers, op.name, c.switch_off))
    cap = setup.capacity
    print(f"\nKV cache: {cap.n_blocks} blocks of {cap.block_size_tokens} tokens ({cap.capacity_tokens} tokens); "
          + ", ".join(f"{k} {v / 1e9:.1f} GB" for k, v in cap.memory_bytes.items()) + " per device")
    for note in setup.workload.notes:
        print(f"workload: {note}")
    if args.out:
        print(f"wrote {args.out}/summary.csv, batch_sizes.csv, per-request CSVs" + ("" if args.no_plots else " and plots"))
    return 0
