"""`specsim simulate`: a scenario's workload through the serving simulator under each policy."""
from __future__ import annotations

import math

from ..errors import SpecError
from .common import add_cost_source_flag, parse_list, print_json


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
    add_cost_source_flag(p)
    p.add_argument("--rates", help="comma-separated arrival rates in requests/s (default: the scenario's "
                   "[workload] rates, else the workload as given)")
    p.add_argument("--policies", help="comma-separated policy names from [policies] (default: all)")
    p.add_argument("--seed", type=int, default=0, help="seed for arrivals, lengths and acceptance (default: 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--out", help="folder for summary.csv, batch_sizes.csv, per-request CSVs and the plots")
    p.add_argument("--force", action="store_true", help="with --out: replace an earlier run's files in the folder")
    p.add_argument("--no-plots", action="store_true", help="with --out: skip the PNG plots")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--band", action="store_true",
                   help="with an acceptance from a calibration: also simulate at the ends of its interval (two more "
                        "runs of every point) and print each speedup as 'x [low, high]'")
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
            "-" if "speedup_tpot_p50" not in r or not math.isfinite(r["speedup_tpot_p50"]) else f"{r['speedup_tpot_p50']:.2f}x"
            + (f" [{r['speedup_tpot_p50_low']:.2f}, {r['speedup_tpot_p50_high']:.2f}]"
               if math.isfinite(r.get("speedup_tpot_p50_low", float("nan"))) else ""),
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


def _fleet_lines(c) -> list[str]:
    """What the fleet, the prefix cache and the drafter's own cache did, when any is in play."""
    setup, t = c.setup, c.table
    out = []
    f = setup.fleet
    if f.n_replicas > 1:
        pools = (f"{f.n_prefill} prefill + {f.n_replicas - f.n_prefill} decode replicas, KV handoff "
                 f"{f.kv_transfer_latency_s * 1e6:.0f} us + {f.kv_transfer_s_per_token * 1e6:.3f} us a prompt token"
                 if f.disaggregated else f"{f.n_replicas} replicas")
        out.append(f"fleet: {pools}, router {f.router.kind}")
    if setup.config.prefix_caching and "prefix_hit_rate" in t:
        out.append("prefix cache hit rate: " + ", ".join(
            f"{r['policy']}@{r['rate_per_s'] if r['rate_per_s'] == r['rate_per_s'] else 'trace'} "
            f"{100 * r['prefix_hit_rate']:.1f} %" for _, r in t.iterrows()))
    if setup.drafter_cache != "none" and "drafter_catchup_time_frac" in t:
        spec = t[t["drafter_catchup_tokens"] > 0]
        if len(spec):
            out.append(f"drafter catch-up ({'accepted drafts run again' if setup.drafter_cache == 'refeed' else 'last draft when all K accepted'}"
                       f", and what it missed while gated off): {100 * spec['drafter_catchup_time_frac'].max():.2f} % "
                       f"of busy time at most")
    return out


def _run(args) -> int:
    from tqdm import tqdm

    from ..presentation.output import OutputDir
    from ..presentation.parallel import check_workers
    from ..presentation.simulation import compare_policies, finish_resume, write_comparison
    from ..serving.setup import MAX_RATE_PER_S, MIN_RATE_PER_S
    from ..speculation.operating_point import resolve_id

    if args.seed < 0:
        raise SpecError(f"--seed {args.seed}: expected an integer >= 0")
    rates = parse_list(args.rates, "--rates", float, minimum=MIN_RATE_PER_S, maximum=MAX_RATE_PER_S)
    policies = parse_list(args.policies, "--policies", str)
    out = OutputDir(args.out, force=args.force) if args.out is not None else None  # refuse a bad --out before any work
    op = resolve_id(args.scenario, cost_source=getattr(args, "cost_source", None))
    t = op.scenario.tables
    n_pol = len(policies) if policies else (len(t.policies) if t.policies is not None else (2 if op.speculative else 1))
    n_rates = len(rates) if rates else (len(t.workload.rates) if t.workload is not None and t.workload.rates else 1)
    _note_run_size(t.workload, n_pol * n_rates * (3 if args.band else 1))
    with tqdm(total=n_pol * n_rates, desc="simulate", unit="run", disable=True if args.quiet else None,
              leave=False) as bar:
        def progress(name, rate):
            bar.set_postfix_str(f"{name} @ {rate if rate is not None else 'trace'}")
            bar.update(1)
        c = compare_policies(op, rates=rates, policies=policies, seed=args.seed, progress=progress,
                             workers=check_workers(args.workers), cluster=args.cluster,
                             resume_in=out.path if out is not None else None)
    band = _band(op, c, args, rates, policies) if args.band else None
    if args.band and band is None:
        raise SpecError("--band: the scenario's acceptance is not from a calibration ([acceptance] calibrated)")
    if out is not None:
        from ..presentation.progress import Progress

        with out, Progress("simulate: writing", quiet=args.quiet, total=1) as writing:
            writing.phase("tables" if args.no_plots else "tables and plots")
            write_comparison(c, out, plots=not args.no_plots)
            writing.step()
        finish_resume(c)
    setup = c.setup
    if args.json:
        print_json({"scenario": op.name, "baseline_policy": c.baseline, "kv_blocks": setup.capacity.n_blocks,
                    "kv_capacity_tokens": setup.capacity.capacity_tokens,
                    "memory_per_device_bytes": setup.capacity.memory_bytes, "workload": setup.workload.source,
                    "workload_notes": list(setup.workload.notes), "engine_notes": list(setup.notes),
                    "max_num_seqs": setup.config.max_num_seqs, "crossover_rate_per_s": c.crossovers,
                    "switch_off": None if c.switch_off is None else c.switch_off.to_dict(),
                    "runs": [dict(r.summary) for r in c.results.values()],
                    "acceptance_band": _analytic_band(op),
                    "speedup_band": None if band is None else [
                        {"policy": r["policy"], "rate_per_s": r["rate_per_s"], "speedup_tpot_p50_low": r.get("speedup_tpot_p50_low"),
                         "speedup_tpot_p50_high": r.get("speedup_tpot_p50_high")} for _, r in c.table.iterrows()]})
        return 0
    print(_table_text(c.table, c.crossovers, op.name, c.switch_off))
    ab = _analytic_band(op)
    if ab is not None:
        print(f"acceptance from calibration {ab['calibration']}: α {ab['alpha_low']:.3f}–{ab['alpha_high']:.3f} "
              f"({ab['level']:.0%}); decode-only speedup at the scenario's batch {ab['speedup_low']:.2f}–"
              f"{ab['speedup_high']:.2f}×" + ("" if band is not None else "; --band simulates the interval's ends"))
        for w in ab["calibration_warnings"]:
            print(f"warning: outside the calibration: {w}")
    cap = setup.capacity
    print(f"\nKV cache: {cap.n_blocks} blocks of {cap.block_size_tokens} tokens ({cap.capacity_tokens} tokens); "
          + ", ".join(f"{k} {v / 1e9:.1f} GB" for k, v in cap.memory_bytes.items()) + " per device")
    for note in setup.workload.notes:
        print(f"workload: {note}")
    for note in setup.notes:
        print(f"engine: {note}")
    for line in _fleet_lines(c):
        print(line)
    if args.out:
        print(f"wrote {args.out}/summary.csv, batch_sizes.csv, per-request CSVs" + ("" if args.no_plots else " and plots"))
    return 0


def _note_run_size(workload, n_points: int) -> None:
    """Say before it starts that a run will take minutes (a synthetic workload's expected output tokens
    at the simulator's measured speed); Ctrl-C stops it and keeps no partial output."""
    import sys

    from ..serving.setup import SIMULATED_TOKENS_PER_S

    tokens = workload.expected_output_tokens() if workload is not None else None
    if tokens is None or tokens * n_points < 60 * SIMULATED_TOKENS_PER_S:
        return
    minutes = tokens * n_points / SIMULATED_TOKENS_PER_S / 60
    print(f"specsim: note: {n_points} run(s) of {workload.n_requests:,} requests, about {tokens:.3g} output tokens each: "
          f"expect about {minutes:.0f} minutes (at {SIMULATED_TOKENS_PER_S:.2g} simulated tokens/s; Ctrl-C stops it "
          f"and keeps no partial output)", file=sys.stderr, flush=True)


def _analytic_band(op):
    from ..speculation.predict import acceptance_band

    return acceptance_band(op) if op.speculative and op.acceptance.model is not None else None


def _band(op, c, args, rates, policies):
    """Each run's p50-TPOT speedup at the ends of the calibration's α interval (the comparison run
    again with α at each end), written into c.table as speedup_tpot_p50_low / _high."""
    from ..presentation.parallel import check_workers
    from ..presentation.simulation import compare_policies
    from ..speculation.predict import with_alpha

    cal = op.acceptance.calibration if op.speculative else None
    if cal is None:
        return None
    ends = {}
    for end, a in (("low", cal.alpha_low), ("high", cal.alpha_high)):
        ce = compare_policies(with_alpha(op, a), rates=rates, policies=policies, seed=args.seed,
                              workers=check_workers(args.workers), cluster=args.cluster)
        ends[end] = ce.table.set_index(["policy", "rate_per_s"])["speedup_tpot_p50"] \
            if "speedup_tpot_p50" in ce.table else None
    for end, s in ends.items():
        if s is not None:
            c.table[f"speedup_tpot_p50_{end}"] = [s.get((p, r), float("nan")) for p, r in
                                                  zip(c.table["policy"], c.table["rate_per_s"])]
    return ends
