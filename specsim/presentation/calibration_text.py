"""The calibrate subcommands' results as text for a person, so the command line only parses, calls and
prints: a stack's efficiency fitted to step times (`format_steps`), a part's kernel curve against
operator profiles (`format_operator_report`, `operator_toml`), host work per iteration
(`format_host`), a stack figure fitted to replay rows (`format_stack_term`), this machine's profile
(`format_machine`), acceptance from decoder runs or a stack's logs (`format_acceptance`,
`format_acceptance_import`), a load calibration's table per sweep (`format_load_calibration`) and its
leave-one-source-out share scan (`format_token_share_loo`). Each reads a frozen result of
`specsim.calibration` and computes nothing but display units."""
from __future__ import annotations


def _speedup(v) -> str:
    return "not measured" if v is None or v != v else f"{v:.2f}"


def _error(v) -> str:
    return "-" if v is None or v != v else f"{v:+.0%}"


def format_stack_term(f) -> str:
    """A `calibration.replay.TermFit`: the value, every row of the stack before and after (fit rows,
    rows of a fit row's source, the rest), and the median |error| of the rows the fit never saw."""
    t = f.with_errors()
    before = "unset" if f.before_us is None else f"{f.before_us:g}"
    lines = [f"{f.stack} {f.term}: {before} -> {f.value_us:.1f} (fitted on {len(f.fit_ids)} row(s))"]
    for r in t.to_dict(orient="records"):
        mark = "fit" if r["fitted_on"] else ("src" if r["fit_source"] else "   ")
        lines.append(f"  {mark} {r['id']:<48} measured {_speedup(r['measured_speedup'])}  before "
                     f"{_speedup(r['predicted_before'])} ({_error(r['error_before'])})  after "
                     f"{_speedup(r['predicted_after'])} ({_error(r['error_after'])})")
    held = t[~t["fit_source"] & t["error_before"].notna()]  # a fit row's twin is not unseen
    if len(held):
        lines.append(f"rows of sources the fit never saw: median |error| {held['error_before'].abs().median():.1%} -> "
                     f"{held['error_after'].abs().median():.1%}")
    same = t[t["fit_source"] & ~t["fitted_on"] & t["error_before"].notna()]
    if len(same):
        lines.append(f"rows not fitted but of a fit row's source ({', '.join(sorted(set(same['source_key'])))}; not "
                     f"unseen): {len(same)}, median |error| {same['error_before'].abs().median():.1%} -> "
                     f"{same['error_after'].abs().median():.1%}")
    return "\n".join(lines)


def format_token_share_loo(loo) -> str:
    """The leave-one-source-out scan (`calibration.load_share.ShareFit`): each sweep's check error at
    each share (and extra host cost a speculating sequence, where those were scanned too), and the point
    the others chose, or why none could be."""
    g = loo.grid()
    names = list(dict.fromkeys(r["sweep"] for r in g))
    joint = len(loo.extras_us) > 1

    def label(s, e) -> str:
        return f"{s:g}/+{e:g}" if joint else f"{s:g}"

    width = max(8, *(len(label(s, e)) + 2 for s, e in loo.points))
    what = ("per-token share / extra µs a speculating sequence a cycle" if joint else "per-token share")
    lines = [f"{what}, leave one source out: median |error| over each sweep's check rows at each "
             f"{'point' if joint else 'share'} (a sweep's source: the group it is left out with)",
             "  " + f"{'sweep':<60}" + "".join(f"{label(s, e):>{width}}" for s, e in loo.points) + "  chosen by the others"]
    own = {f.sweep.name: f.token_share for f in loo.loo.fits}
    extra = loo.chosen_extra or {}
    for n in names:
        cells = {(r["share"], r["spec_seq_extra_us"]): r["median_abs_error"] for r in g if r["sweep"] == n}
        chosen = (label(loo.chosen[n], extra.get(n, loo.extras_us[0])) if loo.chosen[n] is not None else
                  f"none (no check row of the other sources is predicted; the stack's own share {own[n]:g} used)")
        lines.append("  " + f"{n[:60]:<60}" + "".join(f"{cells[p]:>{width}.1%}" if cells[p] is not None
                                                      else f"{'-':>{width}}" for p in loo.points)
                     + f"  {chosen}" + f"  [{loo.groups[n]}] {loo.sources[n]}")
    overall = (label(loo.overall, loo.overall_extra if loo.overall_extra is not None else 0.0)
               if loo.overall is not None else "none (no check row is predicted)")
    lines.append(f"  {'point' if joint else 'share'} over all sweeps: {overall}; the tables below predict each "
                 f"sweep at its chosen {'point' if joint else 'share'}")
    return "\n".join(lines) + "\n"


def format_load_calibration(cal) -> str:
    """The calibration as text: a table per sweep, then the summary."""
    lines = []
    for f in cal.fits:
        sw = f.sweep
        t = f.terms
        lines.append(f"{sw.name}: {sw.target} on {sw.n_devices} x {sw.hardware}, {sw.stack}"
                     f"{' ' + sw.stack_version if sw.stack_version else ''}, {sw.method}"
                     + (f" K = {sw.k}" if sw.method != "none" else "") + (f", tree {sw.tree_size}" if sw.tree_size else "")
                     + f" ({sw.load_kind})")
        fitted = ", ".join(f.fitted) or "nothing"
        lines.append(f"  fitted {fitted}: device x{t.device_scale:.3f} + {t.device_per_seq_s * 1e6:.1f} µs a sequence"
                     f" + {t.device_per_token_s * 1e6:.1f} µs an emitted token (share {f.token_share:g}); "
                     f"cycle {t.cycle_s * 1e6:+.0f} µs, per speculating sequence {t.spec_per_seq_s * 1e6:+.1f} µs"
                     + (f"; α = {f.alpha:.3f}" if f.alpha is not None else ""))
        lines.append(f"  {'load':>8}  {'role':<5} {'mode':<5} {'measured':>10} {'predicted':>10} {'error':>8}  metric")
        for r in f.rows.itertuples():
            mode = "spec" if r.speculative else "plain"
            if r.relative_error is None or r.relative_error != r.relative_error:
                lines.append(f"  {r.load:>8g}  {r.role:<5} {mode:<5} {'':>10} {'':>10} {'':>8}  not predicted: {r.reason}")
                continue
            lines.append(f"  {r.load:>8g}  {r.role:<5} {mode:<5} {r.measured:>10.4g} {r.predicted:>10.4g} "
                         f"{r.relative_error:>+8.1%}  {r.metric}")
        err = (f"fit median |error| {f.fit_error:.1%}" if f.fit_error is not None else "no fit rows")
        chk = (f", check {f.check_error:.1%}" if f.check_error is not None else "")
        lines.append(f"  {err}{chk}")
        for n in f.notes:
            lines.append(f"  note: {n}")
        lines.append("")
    s = cal.summary()
    med = s["median_relative_error"]
    lines.append(f"{s['n_sweeps']} sweeps, {s['n_rows']} rows, {s['n_check_rows']} check rows: median |error| "
                 + (f"{med:.1%}" if med is not None else "n/a") + f"; measured slowdowns (< {s['slowdown_below']:g}): "
                 f"{s['n_slowdowns']}, predicted at or above {s['slowdown_bar']:g}: {s['n_slowdowns_missed']}"
                 + (f" ({', '.join(s['slowdowns_missed'])})" if s["slowdowns_missed"] else ""))
    for key in ("stack", "method"):
        for g in cal.by(key):
            lines.append(f"  {key} {g[key]}: {g['n_rows']} check rows, median |error| {g['median_abs_error']:.1%}, "
                         f"worst {g['worst_abs_error']:.1%}")
    return "\n".join(lines)


def format_steps(cal, summary: dict, *, file, hardware: str, skipped=(), wrote=None) -> str:
    """`calibrate steps`: the fitted efficiency (`calibration.fit.fit_efficiency`'s result and its
    summary), the errors before and after, and, where a stack was written (`wrote`), its host work."""
    lines = [f"specsim calibrate steps: {file} ({cal.n_rows} rows on {hardware})"]
    lines += [f"  skipped: {line}" for line in skipped]
    lines.append(f"  bandwidth_frac {summary['bandwidth_frac']:.3f}   compute_frac {summary['compute_frac']:.3f}")
    lines.append(f"  step overhead {summary['step_overhead_s'] * 1e6:.1f} µs   per layer "
                 f"{summary['per_layer_overhead_s'] * 1e6:.2f} µs   all-reduce latency "
                 f"{summary['interconnect_latency_s'] * 1e6:.2f} µs")
    lines.append(f"  |relative error| median: {summary['median_relative_error_before']:.1%} with the catalog's defaults "
                 f"-> {summary['median_relative_error_after']:.1%} fitted (p90 {summary['p90_relative_error_after']:.1%}, "
                 f"worst {summary['worst_relative_error_after']:.1%})")
    if not cal.success:
        lines.append(f"  warning: the solver did not converge: {cal.message}")
    if wrote:
        h = summary["host"]
        lines.append(f"  host work: {h['step_s'] * 1e6:.1f} µs a plain step, {h['cycle_s'] * 1e6:.1f} µs a speculative "
                     f"cycle; prompt lookup {summary['prompt_lookup']['s_per_ktoken'] * 1e6:.1f} µs per 1000 context tokens")
        lines.append(f"wrote {wrote}")
    return "\n".join(lines)


def format_operator_report(hw_id: str, r: dict, *, shipped_difference: float | None = None) -> str:
    """`calibrate operators` for one part: every model's error before and after the fitted kernel curve,
    how far the shipped [kernels] table is from the refit (`shipped_difference`, None: none shipped), the
    TOML for the hardware file, the all-reduce fit and Splitwise's decode steps beside the device model."""
    fit = r["fit"]
    lines: list[str] = []
    lines.append(f"specsim calibrate operators: {hw_id} (trained on {', '.join(fit.train_models)}; tile "
                 f"{fit.kernels.gemm_tile[0]}x{fit.kernels.gemm_tile[1]}{'' if fit.success else '; solver did not converge: ' + fit.message})")
    lines.append("  |relative error| of the layer operator sum (10 operators, every tp and 1..4096 tokens): median with the")
    lines.append("  pure roofline, then with the fitted curve (median, p90, worst), the four GEMMs alone, and past 4096 tokens")
    lines.append(f"  {'model':<28}{'split':<10}{'rows':>6}{'roofline':>10}{'fitted':>9}{'p90':>8}{'worst':>8}{'GEMMs':>8}"
                 f"{'>4096':>8}")
    for e in fit.errors.itertuples(index=False):
        beyond = f"{e.median_after_beyond:>8.1%}" if e.n_rows_beyond else f"{'-':>8}"
        lines.append(f"  {e.model:<28}{e.split:<10}{e.n_rows:>6}{e.median_before:>10.1%}{e.median_after:>9.1%}"
                     f"{e.p90_after:>8.1%}{e.worst_after:>8.1%}{e.gemm_median_after:>8.1%}{beyond}")
    lines.append(f"  largest held-out median: {fit.held_out_median():.1%}")
    if shipped_difference is not None:
        lines.append(f"  the shipped [kernels] table differs from this refit by at most {shipped_difference:.1%}")
    lines.append("  TOML for the hardware file:")
    lines.append("    " + operator_toml(r).replace("\n", "\n    ").rstrip())
    ar = r["all_reduce"]
    if ar is not None:
        lines.append(f"  all-reduce ({ar.network}): latency + 2(n-1)/n bytes / bus bandwidth")
        for a in ar.table.itertuples(index=False):
            lines.append(f"    n = {a.group_size}: latency {a.latency_s * 1e6:6.1f} µs, bus {a.bus_bandwidth_bytes_per_s / 1e9:6.1f} GB/s"
                         f"  (|error| median {a.median_abs_error:.1%}, p90 {a.p90_abs_error:.1%}, {a.n_rows} rows)")
    sw = r["splitwise"]
    if sw is not None:
        lines.append("  Splitwise Llama-2-70B decode step (prompt 512, 128 output tokens) against the device-time model, "
                     "no fixed overheads:")
        lines.append(f"    {'tp':>3}{'batch':>6}{'measured':>10}{'GEMMs':>8}{'elemw':>7}{'attn':>7}{'allred':>8}{'device':>8}"
                     f"{'explained':>10}{'left':>8}  (ms)")
        for s in sw.itertuples(index=False):
            lines.append(f"    {s.tp:>3}{s.batch_size:>6}{s.measured_s * 1e3:>10.1f}{s.gemm_s * 1e3:>8.1f}{s.elementwise_s * 1e3:>7.1f}"
                         f"{s.attention_s * 1e3:>7.1f}{s.all_reduce_s * 1e3:>8.1f}{s.device_s * 1e3:>8.1f}{s.explained_frac:>10.0%}"
                         f"{s.unexplained_s * 1e3:>8.1f}")
    return "\n".join(lines)


def operator_toml(r: dict) -> str:
    """The [kernels] and [all_reduce] tables of one part and their [sources] lines."""
    text, sources = r["fit"].toml(), [f'kernels = "{r["source"]}"']
    if r["all_reduce"] is not None:
        text += "\n" + r["all_reduce"].toml()
        sources.append(f'all_reduce = "{r["all_reduce_source"]}"')
    return text + "\n[sources]\n" + "\n".join(sources) + "\n"


def format_host(f) -> str:
    """`calibrate host`: the host figures a stack's [host] table takes (`calibration.host`'s fit)."""
    lines = [f"host work per iteration (fitted to {f.n_rows} rows: {f.source})",
             f"  step_us           = {f.step_s * 1e6:.0f}",
             f"  per_seq_us        = {f.per_seq_s * 1e6:.1f}",
             f"  multi_gpu_step_us = {f.multi_gpu_step_s * 1e6:.0f}   (tp > 1: Ray broadcast of each step and its setup)"]
    lines += [f"  {model:<40} worst |error| {err:.1%}" for model, err in f.max_relative_error.items()]
    return "\n".join(lines)


def format_machine(prof, *, repeats: int) -> str:
    """`calibrate machine`: the measured profile's summary (`calibration.machine`), median of `repeats`."""
    s = prof.summary()
    lines: list[str] = []
    lines.append(f"specsim calibrate machine: {s['cpu']}, {s['threads']} threads (median of {repeats} repeats)")
    if s["machine"] is not None:
        m = s["machine"]
        lines.append(f"  instruction sets {', '.join(m['instruction_sets'] or ['unknown'])}; the decoder ran {m['block_matmul']} "
                     f"matmul tiles and {m['attention']} attention; threads {m['threads_measured']}, {m['clock']} clock")
    lines.append(f"  memory bandwidth {s['mem_bandwidth_gb_s']:.2f} GB/s ({prof.bandwidth_source})")
    lines.append(f"  int8 peak {s['peak_int8_tops']:.3f} TOP/s (best block-quantized product), fp32 peak {s['peak_fp32_tflops']:.3f} TFLOP/s")
    for fmt, v in s["formats"].items():
        lines.append(f"  {fmt:<5} matrix-vector {v['matvec_gb_s']:.2f} GB/s, matrix-matrix {v['matmat_tops']:.3f} TOP/s")
    if s["attention_s_per_cached_token_per_layer"] is not None:
        lines.append(f"  attention {s['attention_s_per_cached_token_per_layer'] * 1e9:.2f} ns per cached token per layer (M = 1)")
    lines.append("  floors: " + ", ".join(f"{k} {v * 1e6:.1f} µs" for k, v in s["floors_s"].items()))
    k = s["kernels"]
    lines.append(f"  [kernels] GEMM curve: bandwidth {k['gemm_bandwidth_frac']:.2f}, compute {k['gemm_compute_frac']:.2f}, "
                 f"overlap p {k['gemm_overlap_exponent']:.2f}, floor {k['gemm_floor_s'] * 1e6:.1f} µs, "
                 f"row tiles {k.get('gemm_row_tiles', [])} costing {[round(c, 2) for c in k.get('gemm_tile_pass_cost', [])]} "
                 f"rows a pass (median |error| {s['gemm_fit_median_abs_error']:.1%}); attention overlap exponent "
                 f"{k.get('attention_overlap_exponent', float('inf')):.2f}")
    for fmt, frac in k.get("gemm_compute_frac_by_format", {}).items():
        lines.append(f"  {fmt} products on the same curve: compute {frac:.2f} ({frac / k['gemm_compute_frac']:.2f}x the curve's)")
    return "\n".join(lines)


def format_acceptance(res) -> str:
    """`calibrate acceptance` on decoder runs (`calibration.acceptance_runs`): per drafter and workload, α
    with its interval, per temperature, the dependence on context and temperature, per position and rank."""
    lines = ["specsim calibrate acceptance: i.i.d. alpha [95 % interval] at the reference (temperature 0, the runs' "
             "median context); per temperature; dependence on context (1/token) and temperature"]
    for name, t in res.tables.items():
        a, dep = t["iid"], t["dependence"]
        per_t = ", ".join(f"T {r['temperature']:g}: {r['alpha']:.3f}" for r in t["runs"] if "alpha" in r)
        lines.append(f"  {name:<40} alpha {a['alpha']:.3f} [{a['ci_low']:.3f}, {a['ci_high']:.3f}] ({a['n_cycles']} cycles, "
                     f"context {t['reference']['context_len']:.0f})  {per_t}")
        if "within_prompt_context_slope" in dep:
            ci = dep["within_prompt_context_slope_ci"]
            ctx_text = (f"context: not identified (held; within each response {dep['within_prompt_context_slope']:.2e} "
                        f"[{ci[0]:.1e}, {ci[1]:.1e}]/token, reported only)")
        else:
            ctx_text = (f"context decay {dep['context_decay_per_token']:.2e} [{dep['context_decay_ci'][0]:.1e}, "
                        f"{dep['context_decay_ci'][1]:.1e}]/token")
        lines.append(f"  {'':<40} {ctx_text}, temperature slope {dep['temperature_slope']:.3f} "
                     f"[{dep['temperature_slope_ci'][0]:.3f}, {dep['temperature_slope_ci'][1]:.3f}]")
        if "conditional" in t:
            lines.append(f"  {'':<40} per position " + ", ".join(f"{c:.3f}" for c in t["conditional"]["rates"]))
        if "rank" in t:
            lines.append(f"  {'':<40} per rank " + ", ".join(f"{c:.3f}" for c in t["rank"]["rank_acceptance"]))
    for s in res.skipped:
        lines.append(f"  skipped {s}")
    return "\n".join(lines)


def format_acceptance_import(imp, *, file) -> str:
    """`calibrate acceptance --import`: τ, the i.i.d. α with its interval, per-position rates and notes of
    a stack's log or metrics (`calibration.imports.import_acceptance`'s result)."""
    f = imp.iid
    lines = [f"{file}: {imp.format}, {imp.n_lines} line(s); K = {imp.k}",
             f"  tokens per cycle τ = {imp.tau:.3f}" + (f" over {imp.n_drafts:.0f} drafts" if imp.n_drafts == imp.n_drafts
                                                       else "")]
    band = f" [{f.ci_low:.4f}, {f.ci_high:.4f}]" if f.ci_low == f.ci_low else " (no interval)"
    lines.append(f"  i.i.d. α = {f.estimate:.4f}{band}: {f.method}")
    if imp.conditional is not None:
        c = imp.conditional
        lines.append("  per position " + ", ".join(f"{e:.3f} [{lo:.3f}, {hi:.3f}]"
                     for e, lo, hi in zip(c.estimate, c.ci_low, c.ci_high)))
    lines += [f"  note: {n}" for n in imp.notes]
    return "\n".join(lines)


__all__ = ["format_stack_term", "format_token_share_loo", "format_load_calibration", "format_steps",
           "format_operator_report", "operator_toml", "format_host", "format_machine", "format_acceptance",
           "format_acceptance_import"]
