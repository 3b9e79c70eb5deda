"""The calibrate subcommands' results as text for a person: a stack figure fitted to replay rows
(`format_stack_term`), a load calibration's table per sweep (`format_load_calibration`) and its
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
    each share, and the share the others chose, or why none could be."""
    g = loo.grid()
    names = list(dict.fromkeys(r["sweep"] for r in g))
    lines = ["per-token share, leave one source out: median |error| over each sweep's check rows at each share "
             "(a sweep's source: the group it is left out with)",
             "  " + f"{'sweep':<60}" + "".join(f"{s:>8g}" for s in loo.shares) + "  chosen by the others"]
    own = {f.sweep.name: f.token_share for f in loo.loo.fits}
    for n in names:
        cells = {r["share"]: r["median_abs_error"] for r in g if r["sweep"] == n}
        chosen = (f"{loo.chosen[n]:g}" if loo.chosen[n] is not None else
                  f"none (no check row of the other sources is predicted; the stack's own share {own[n]:g} used)")
        lines.append("  " + f"{n[:60]:<60}" + "".join(f"{cells[s]:>8.1%}" if cells[s] is not None else f"{'-':>8}"
                                                      for s in loo.shares) + f"  {chosen}"
                     + f"  [{loo.groups[n]}] {loo.sources[n]}")
    overall = f"{loo.overall:g}" if loo.overall is not None else "none (no check row is predicted)"
    lines.append(f"  share over all sweeps: {overall}; the tables below predict each sweep at its chosen share")
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


__all__ = ["format_stack_term", "format_token_share_loo", "format_load_calibration"]
