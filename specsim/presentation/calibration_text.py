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


__all__ = ["format_stack_term"]
